/** The autograd API exported as `autograd` from "tprpc" (torch.autograd's counterpart). */
export { backward, grad, runBackward, type BackwardOptions, type RootGrad } from "./engine.js";
export { Node, FunctionNode, AccumulateGrad, gradEdge, type BackwardFn } from "./node.js";
export { recordCustomOp as recordOp } from "./function.js";
export { gradcheck, assertGradcheck, type GradcheckOptions, type GradcheckResult } from "./gradcheck.js";
