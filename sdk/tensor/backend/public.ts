/** The backend selection API exported as `backend` from "tprpc". */
export { getBackend, setBackend, listBackends, registerBackend } from "./registry.js";
export {
  registerDeviceBackend,
  unregisterDeviceBackend,
  noteDeviceUnavailable,
  deviceBackendFor,
  deviceUnavailableReason,
} from "./devices.js";
export type { Backend, BinaryOp, DeviceBackend, DeviceMemory, ReduceOp, TensorView, UnaryOp } from "./interface.js";
