/**
 * The PyTorch parity suites (test/parity) on the emulated CUDA device
 * (TPRPC_CUDA=emulate): every fixture tensor is built on cuda:0, every op runs
 * through the CUDA kernel backend (sdk/tensor/backend/cuda/kernels.ts), the
 * addon's CUDA dispatch code and the CUDA kernels compiled for the host, and
 * every result must come back from cuda:0 matching PyTorch's to the CPU
 * suites' tolerances. A GPU runs the same dispatch code and kernel sources,
 * so an indexing mistake in either fails here first.
 */
import { afterAll, beforeAll, describe, it } from "vitest";
import { cuda } from "../../sdk/index.js";
import { FLOAT32, loadFixture, useDevice } from "../parity/fixtures.js";
import { type ModuleCase, runLossCase, runModuleCase, type LossCase } from "../parity/modules_table.js";
import { OP_CASES, runOpCase } from "../parity/ops_run.js";
import { OPTIM_CASES, runClipCase, runOptimizerCase } from "../parity/optim_run.js";

// NB: read when cuda:0 is first used (sdk/index.ts), which is after this line.
process.env.TPRPC_CUDA = "emulate";

const modules = loadFixture<ModuleCase>("modules.json").cases;
const losses = loadFixture<LossCase>("losses.json").cases;
const gpt = loadFixture<ModuleCase>("gpt_block.json").cases;

describe("parity on the emulated CUDA device", () => {
  beforeAll(() => {
    if (!cuda.isAvailable()) throw new Error(`the emulated CUDA device is not viable: ${cuda.unavailableReason()}`);
    useDevice("cuda:0");
  });
  afterAll(() => useDevice(undefined));

  describe("ops", () => {
    it.each(OP_CASES.map((c) => [c.name, c] as const))("%s", (_n, c) => runOpCase(c));
  });
  describe("modules and losses", () => {
    it.each(modules.map((c) => [c.name, c] as const))("%s", (_n, c) => runModuleCase(c));
    it.each(losses.map((c) => [c.name, c] as const))("%s", (_n, c) => runLossCase(c));
  });
  describe("GPT block", () => {
    it.each(gpt.map((c) => [c.name, c] as const))("%s", (_n, c) => runModuleCase(c, FLOAT32));
  });
  describe("optimizers", () => {
    it.each(OPTIM_CASES.map((c) => [c.name, c] as const))("%s", (_n, c) =>
      c.optimizer !== undefined ? runOptimizerCase(c) : runClipCase(c),
    );
  });
});
