/**
 * RRef soak: the master makes 10,000 RRefs with rpc.remote() on a worker and
 * keeps none of them, then goes idle (it only asks the owner, every 250 ms,
 * how many values it still owns). Proves distributed reference counting
 * releases every value on the owner within 10 s of the master going idle,
 * with no forced garbage collection anywhere: the test never calls gc(), and
 * neither process is started with a collection schedule of its own.
 * The owner also counts the creations it ran, so the test fails if the RRefs
 * were never made. Same size in CI and full; the full run keeps watching up to
 * 60 s to report when the release really happens.
 */
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { rpc } from "../../sdk/index.js";
import { type Cluster, startGroup, stopGroup, within } from "../conformance/group.js";
import { FULL, report, since, sleep } from "./common.js";

declare const tprpc: typeof import("../../sdk/index.js");

const RREFS = 10_000;
const RELEASE_BOUND_MS = 10_000;
const WATCH_MS = FULL ? 60_000 : RELEASE_BOUND_MS + 1_000;

/** Runs on the owner: counts the creation, and returns a small value for the RRef to hold. */
const make = (i: number): { i: number; tag: string } => {
  const g = globalThis as unknown as { __relMade?: number };
  g.__relMade = (g.__relMade ?? 0) + 1;
  return { i, tag: `value ${i}` };
};

/** Makes `n` RRefs on worker1 and drops each at once, yielding to I/O every 500. */
async function makeAndDrop(n: number): Promise<void> {
  for (let i = 0; i < n; i++) {
    rpc.remote("worker1", make, [i]);
    if (i % 500 === 499) await new Promise((r) => setImmediate(r));
  }
}

describe(`RRef soak: ${RREFS} RRefs made and dropped by the master`, () => {
  let cluster: Cluster | undefined;
  beforeAll(async () => {
    cluster = await startGroup({ workers: 1, processes: true });
  }, 60_000);
  afterAll(() => stopGroup(cluster), 30_000);

  it(
    `are all released on the owner within ${RELEASE_BOUND_MS / 1000} s of the master going idle, without a forced GC`,
    async () => {
      const owned = () => rpc.rpcSync<number>("worker1", () => tprpc.rpc.ownedRRefCount());
      const made = () =>
        rpc.rpcSync<number>("worker1", () => (globalThis as unknown as { __relMade?: number }).__relMade ?? 0);
      const base = await owned();

      const t0 = performance.now();
      await makeAndDrop(RREFS);
      // one pipe to the owner, delivered in order: once this call returns, every REMOTE_CALL before it has arrived
      const atIdle = await owned();
      const creationMs = since(t0);
      await within(
        (async () => {
          while ((await made()) < RREFS) await sleep(50);
        })(),
        30_000,
        "the owner running every creation",
      );

      const idle = performance.now();
      let releasedAfter = -1;
      let last = atIdle;
      const trace: string[] = [];
      while (performance.now() - idle < WATCH_MS) {
        const now = await owned();
        if (trace.length === 0 || now !== last) trace.push(`${(since(idle) / 1000).toFixed(1)} s: ${now - base}`);
        last = now;
        if (last === base) {
          releasedAfter = since(idle);
          break;
        }
        await sleep(250);
      }
      report(
        "rref_soak",
        `${RREFS} RRefs made in ${creationMs.toFixed(0)} ms; owned beyond the base at idle: ${atIdle - base}; ` +
          (releasedAfter >= 0
            ? `all released ${releasedAfter.toFixed(0)} ms after the master went idle`
            : `${last - base} still owned ${(WATCH_MS / 1000).toFixed(0)} s after the master went idle`) +
          `; owned beyond the base, at each change: ${trace.join(", ")}`,
      );
      expect(await made()).toBe(RREFS);
      expect(last - base).toBe(0);
      expect(releasedAfter).toBeLessThanOrEqual(RELEASE_BOUND_MS);
    },
    WATCH_MS + 60_000,
  );

  it("are released too when the owner replies only after the master went quiet", async () => {
    // NB: a remote() RRef is held by its pending call until the owner replies; here every reply comes
    // 2.5 s after the call, after the master's 1 s quiet period, so a collection at that point alone
    // would leave all of them owned (the CI failure this guards: 1,156 of 10,000 left for 11 s)
    const SLOW = 300;
    const owned = () => rpc.rpcSync<number>("worker1", () => tprpc.rpc.ownedRRefCount());
    const base = await owned();
    const slowMake = async (i: number): Promise<number> => {
      await new Promise((r) => setTimeout(r, 2_500));
      return i;
    };
    for (let i = 0; i < SLOW; i++) rpc.remote("worker1", slowMake, [i]);
    const t0 = performance.now();
    let now = await owned();
    expect(now - base).toBe(SLOW);
    // NB: 7 s: the replies at 2.5 s, a collection once they are in, the deletions; V8 alone did not
    // collect an idle master within 11 s in that CI run
    while (now !== base && since(t0) < 7_000) {
      await sleep(250);
      now = await owned();
    }
    report(
      "rref_soak",
      `${SLOW} slow remote() RRefs: ${now - base} still owned ${(since(t0) / 1000).toFixed(1)} s after`,
    );
    expect(now - base).toBe(0);
  }, 30_000);
});
