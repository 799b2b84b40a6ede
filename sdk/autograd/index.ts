/**
 * The autograd layer: differentiable ops (installed as Tensor methods), the
 * backward engine, grad mode, gradient checking, and the node types that
 * distributed autograd extends.
 */
import "./methods.js";

export { backward, grad, runBackward, accumulateIntoGrad, type BackwardOptions, type RootGrad } from "./engine.js";
export { noGrad, enableGrad, isGradEnabled, setGradEnabled } from "./grad_mode.js";
export { Node, FunctionNode, AccumulateGrad, SavedTensor, gradEdge, type BackwardFn } from "./node.js";
export { recordOp, needsGrad } from "./function.js";
export { gradcheck, assertGradcheck, type GradcheckOptions, type GradcheckResult } from "./gradcheck.js";
export * from "./ops/elementwise.js";
export * from "./ops/reduce.js";
export * from "./ops/linalg.js";
export * from "./ops/views.js";
export * from "./ops/indexing.js";
export * from "./ops/norm.js";
