/**
 * tprpc's torch.optim: optimizers that update parameter tensors in place from
 * their `.grad`, gradient clipping, and learning-rate schedulers
 * (`optim.lrScheduler`). Exported from "tprpc" as `optim`.
 */
export {
  Optimizer,
  type OptimizerClass,
  type OptimizerStateDict,
  type ParamGroup,
  type ParamGroupInput,
  type ParamGroupState,
  type ParamState,
  type ParamsInput,
} from "./optimizer.js";
export { SGD, type SGDOptions } from "./sgd.js";
export { Adam, type AdamOptions } from "./adam.js";
export { AdamW, type AdamWOptions } from "./adamw.js";
export { Adagrad, type AdagradOptions } from "./adagrad.js";
export { RMSprop, type RMSpropOptions } from "./rmsprop.js";
export { Adadelta, type AdadeltaOptions } from "./adadelta.js";
export { Adamax, type AdamaxOptions } from "./adamax.js";
export { Rprop, type RpropOptions } from "./rprop.js";
export { clipGradNorm, clipGradValue } from "./clip.js";
export * as lrScheduler from "./lr_scheduler.js";
