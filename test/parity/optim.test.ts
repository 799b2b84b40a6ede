/**
 * Optimizers and gradient clipping (test/fixtures/optim.json) on every
 * backend (the cases and their runner: ./optim_run.ts).
 */
import { afterAll, beforeEach, describe, expect, it } from "vitest";
import { backends, useBackend } from "./fixtures.js";
import { OPTIM_CASES as cases, OPTIMIZERS, runClipCase, runOptimizerCase } from "./optim_run.js";

const defaultBackend = backends()[0]!;

describe.each(backends())("optim parity (%s backend)", (name) => {
  beforeEach(() => useBackend(name));
  afterAll(() => useBackend(defaultBackend));
  it.each(cases.map((c) => [c.name, c] as const))("%s", (_n, c) =>
    c.optimizer !== undefined ? runOptimizerCase(c) : runClipCase(c),
  );
});

describe("optim parity coverage", () => {
  it("the harness maps every optimizer the fixtures use", () => {
    const missing = cases
      .filter((c) => c.optimizer !== undefined && !(c.optimizer in OPTIMIZERS))
      .map((c) => c.optimizer);
    expect(missing).toEqual([]);
  });
});
