/**
 * CUDA tensors end to end (./cuda_suite.ts) on the emulated CUDA device (TPRPC_CUDA=emulate).
 */
import { cuda } from "../../sdk/index.js";
import { describeCudaSuite } from "./cuda_suite.js";

// NB: read when cuda:0 is first used (sdk/index.ts), which is after this line.
process.env.TPRPC_CUDA = "emulate";

describeCudaSuite("the emulated CUDA device", "emulate", () => {
  if (!cuda.isAvailable()) throw new Error(`the emulated CUDA device is not viable: ${cuda.unavailableReason()}`);
});
