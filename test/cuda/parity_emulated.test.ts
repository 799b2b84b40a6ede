/**
 * The PyTorch parity suites on the emulated CUDA device (TPRPC_CUDA=emulate):
 * every op runs through the CUDA kernel backend (sdk/tensor/backend/cuda/kernels.ts),
 * the addon's CUDA dispatch code and the CUDA kernels compiled for the host.
 * A GPU runs the same dispatch code and kernel sources, so an indexing
 * mistake in either fails here first.
 */
import { cuda } from "../../sdk/index.js";
import { describeParityOn } from "./parity_suite.js";

// NB: read when cuda:0 is first used (sdk/index.ts), which is after this line.
process.env.TPRPC_CUDA = "emulate";

describeParityOn("parity on the emulated CUDA device", "cuda:0", () => {
  if (!cuda.isAvailable()) throw new Error(`the emulated CUDA device is not viable: ${cuda.unavailableReason()}`);
});
