/**
 * The PyTorch parity suites (test/parity: ops, modules, losses, the GPT block,
 * optimizers) with every fixture tensor on a CUDA device: results must come
 * back from that device matching PyTorch's to the CPU suites' tolerances. Run
 * on the emulated device in CI (./parity_emulated.test.ts) and on a GPU by
 * ./parity_device.test.ts.
 */
import { afterAll, beforeAll, describe, it } from "vitest";
import { FLOAT32, loadFixture, useDevice } from "../parity/fixtures.js";
import { type LossCase, type ModuleCase, runLossCase, runModuleCase } from "../parity/modules_table.js";
import { OP_CASES, runOpCase } from "../parity/ops_run.js";
import { OPTIM_CASES, runClipCase, runOptimizerCase } from "../parity/optim_run.js";

const modules = loadFixture<ModuleCase>("modules.json").cases;
const losses = loadFixture<LossCase>("losses.json").cases;
const gpt = loadFixture<ModuleCase>("gpt_block.json").cases;

/** The suites on `device` ("cuda:0"); `ready` throws when the device cannot run them. */
export function describeParityOn(title: string, device: string, ready: () => void): void {
  describe(title, () => {
    beforeAll(() => {
      ready();
      useDevice(device);
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
}
