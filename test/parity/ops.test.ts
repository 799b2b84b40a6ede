/**
 * Every op case in test/fixtures/ops.json, on every backend: the output and
 * the gradients of sum_i (out_i * gradOut_i).sum() with respect to each input
 * (taken at the input's contiguous base, so view inputs check their view's
 * backward too) match PyTorch's to float32 tolerance (./ops_run.ts).
 */
import { afterAll, beforeEach, describe, expect, it } from "vitest";
import { backends, useBackend } from "./fixtures.js";
import { OPS } from "./ops_table.js";
import { OP_CASES as cases, runOpCase } from "./ops_run.js";

const defaultBackend = backends()[0]!;

describe.each(backends())("ops parity (%s backend)", (name) => {
  beforeEach(() => useBackend(name));
  afterAll(() => useBackend(defaultBackend));
  it.each(cases.map((c) => [c.name, c] as const))("%s", (_n, c) => runOpCase(c));
});

describe("ops parity coverage", () => {
  it("the harness maps every op the fixtures use", () => {
    const missing = [...new Set(cases.map((c) => c.op))].filter((op) => !(op in OPS));
    expect(missing).toEqual([]);
  });
});
