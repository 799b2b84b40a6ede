/** The backend selection API exported as `backend` from "tprpc". */
export { getBackend, setBackend, listBackends, registerBackend } from "./registry.js";
export type { Backend, BinaryOp, ReduceOp, TensorView, UnaryOp } from "./interface.js";
