/**
 * The PyTorch parity suites on a real GPU (cuda:0, the fatbin's kernels on the
 * CUDA driver, cuBLAS where found). Skipped by capability where no CUDA device
 * is usable or TPRPC_CUDA picks another mode; a run on a GPU machine (`npx vitest run test/cuda`) runs it.
 * NB: written before any GPU run; a failure here on a GPU is news, not noise.
 */
import { describe, it } from "vitest";
import { cuda } from "../../sdk/index.js";
import { cudaKernelInfo } from "../../sdk/native/cuda_kernels.js";
import { describeParityOn } from "./parity_suite.js";

const mode = process.env.TPRPC_CUDA;
const usable = mode !== "emulate" && mode !== "0" && cuda.isAvailable();
if (!usable)
  console.warn(
    "[test/cuda/parity_device] skipped: no usable CUDA device here (run it on a GPU machine: npx vitest run test/cuda)",
  );

if (usable)
  describeParityOn("parity on this machine's cuda:0", "cuda:0", () => {
    const info = cudaKernelInfo();
    if (!info || info.fatbinBytes === 0)
      throw new Error(`this addon has no CUDA kernels: ${info?.fatbinReason ?? "the addon did not load"}`);
  });
else describe.skip("parity on this machine's cuda:0", () => it("needs a GPU", () => undefined));
