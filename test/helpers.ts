/**
 * Shared test helpers: run a suite once per registered backend, and compare
 * tensors to expected values with float32-style tolerances.
 */
import { afterAll, beforeAll, describe, expect } from "vitest";
import { backend, type Tensor } from "../sdk/index.js";

/** describe() once per backend ("ts", and "native" once it registers), switching the current backend. */
export function describeEachBackend(name: string, fn: () => void): void {
  for (const b of backend.listBackends()) {
    describe(`${name} [${b}]`, () => {
      // NB: switch in beforeAll, not at collection time: every suite is collected before any runs.
      let prev = "";
      beforeAll(() => {
        prev = backend.getBackend().name;
        backend.setBackend(b);
      });
      afterAll(() => backend.setBackend(prev));
      fn();
    });
  }
}

export function expectClose(actual: Tensor | number[], expected: number[] | Tensor, rtol = 1e-4, atol = 1e-5): void {
  const a = Array.isArray(actual) ? actual : actual.toArray();
  const e = Array.isArray(expected) ? expected : expected.toArray();
  expect(a.length).toBe(e.length);
  for (let i = 0; i < a.length; i++) {
    const ok = Number.isNaN(e[i]!) ? Number.isNaN(a[i]!) : Math.abs(a[i]! - e[i]!) <= atol + rtol * Math.abs(e[i]!);
    if (!ok) expect.fail(`element ${i}: got ${a[i]}, expected ${e[i]} (rtol ${rtol}, atol ${atol})`);
  }
}

/**
 * Polls `read` every 10 ms until it returns `expected` (compared as JSON) or `ms` pass, and returns its
 * last value for the caller's expect(): for state that settles after a message its test did not await,
 * such as a distributed autograd context's release on the workers after `distAutograd.context()`.
 */
export async function settled<T>(read: () => T | Promise<T>, expected: T, ms = 5_000): Promise<T> {
  const until = Date.now() + ms;
  for (;;) {
    const v = await read();
    if (JSON.stringify(v) === JSON.stringify(expected) || Date.now() > until) return v;
    await new Promise((r) => setTimeout(r, 10));
  }
}
