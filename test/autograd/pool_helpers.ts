/**
 * The output pool (sdk/tensor/pool.ts) in the suites that check recycling: on for a suite, off for one
 * run, each left as it was found.
 */
import { afterAll, beforeAll } from "vitest";
import { POOL_MAX_BYTES, clearPool, setPoolLimit } from "../../sdk/tensor/pool.js";

/** Inside a describe: the pool on at its default size for the suite, then back to its limit before, emptied. */
export function usePool(): void {
  let initial = 0;
  beforeAll(() => {
    initial = setPoolLimit(POOL_MAX_BYTES);
  });
  afterAll(() => {
    setPoolLimit(initial);
    clearPool();
  });
}

/** `f` with nothing recycled (the pool keeps nothing; released storages still throw when read). */
export function poolOff<T>(f: () => T): T {
  const prev = setPoolLimit(0);
  try {
    return f();
  } finally {
    setPoolLimit(prev);
  }
}
