/**
 * nn modules (test/fixtures/modules.json) and losses (losses.json) on every
 * backend: with PyTorch's weights loaded through loadStateDict, the output,
 * input gradients and parameter gradients match PyTorch's.
 */
import { afterAll, beforeEach, describe, expect, it } from "vitest";
import { backends, loadFixture, useBackend } from "./fixtures.js";
import { LOSSES, type LossCase, MODULES, type ModuleCase, runLossCase, runModuleCase } from "./modules_table.js";

const modules = loadFixture<ModuleCase>("modules.json").cases;
const losses = loadFixture<LossCase>("losses.json").cases;
const defaultBackend = backends()[0]!;

describe.each(backends())("modules parity (%s backend)", (name) => {
  beforeEach(() => useBackend(name));
  afterAll(() => useBackend(defaultBackend));
  it.each(modules.map((c) => [c.name, c] as const))("%s", (_n, c) => runModuleCase(c));
  it.each(losses.map((c) => [c.name, c] as const))("%s", (_n, c) => runLossCase(c));
});

describe("modules parity coverage", () => {
  it("the harness maps every module and loss the fixtures use", () => {
    const missing = [
      ...new Set([
        ...modules.map((c) => c.module).filter((k) => !(k in MODULES)),
        ...losses.map((c) => c.loss).filter((k) => !(k in LOSSES)),
      ]),
    ];
    expect(missing).toEqual([]);
  });
});
