/**
 * Timeouts, ported from PyTorch's rpc_test.py: test_set_and_get_default_rpc_timeout,
 * test_tensorpipe_set_default_timeout, test_tensorpipe_options_throw_on_timedelta_timeout,
 * test_rpc_timeouts and test_default_timeout_used. Units are milliseconds (PyTorch: seconds):
 * initRpc's rpcTimeoutMs, each call's timeoutMs (0 = none), rpc.getRpcTimeout() and
 * rpc.setRpcTimeout(ms) for PyTorch's get_rpc_timeout() / _set_rpc_timeout(). Beyond PyTorch, which
 * takes a float: a timeoutMs that is NaN, negative or Infinity is refused with a ValueError, and one
 * past setTimeout's 2^31-1 ms limit means "no practical timeout" (it must not fire at once).
 */
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { RpcNotInitializedError, RpcTimeoutError, ValueError, rpc } from "../../sdk/index.js";
import { freePort } from "../../sdk/rpc/launcher.js";
import { type Group, startGroup, stopGroup, within, attempt } from "./group.js";

/** The group's default timeout (initRpc's rpcTimeoutMs). */
const DEFAULT_MS = 1_000;

interface TimeoutApi {
  getRpcTimeout(): number;
  setRpcTimeout(ms: number): void;
}

/** rpc.getRpcTimeout / rpc.setRpcTimeout, as PyTorch users expect them. */
function timeoutApi(): TimeoutApi {
  const api = rpc as unknown as Partial<TimeoutApi>;
  if (typeof api.getRpcTimeout !== "function" || typeof api.setRpcTimeout !== "function")
    throw new Error("rpc.getRpcTimeout() / rpc.setRpcTimeout(ms) do not exist");
  return api as TimeoutApi;
}

/** PyTorch's my_sleep_func: resolves to 1 after `ms`. */
const mySleepFunc = (ms: number) => new Promise<number>((resolve) => setTimeout(() => resolve(1), ms));

const BAD_TIMEOUTS = [NaN, -1, Infinity, -Infinity];

describe("rpcTimeoutMs validation at initRpc (test_tensorpipe_options_throw_on_timedelta_timeout)", () => {
  afterAll(() => rpc.shutdown({ graceful: false, timeoutMs: 5_000 }));

  it.each<[string, unknown]>([
    ["a string", "5"],
    ["an object", { seconds: 5 }],
    ["NaN", NaN],
    ["a negative number", -1],
    ["Infinity", Infinity],
  ])("refuses %s with a ValueError, before joining", async (_what, rpcTimeoutMs) => {
    const port = await freePort();
    const init = rpc.initRpc("master", {
      rank: 0,
      worldSize: 1,
      initMethod: `tcp://127.0.0.1:${port}`,
      secret: "conformance-secret-0123456789",
      rpcTimeoutMs: rpcTimeoutMs as number,
    });
    await expect(init).rejects.toThrow(ValueError);
    expect(() => rpc.getWorkerInfo()).toThrow(RpcNotInitializedError);
  });
});

describe("timeouts", () => {
  let cluster: Group | undefined;
  beforeAll(async () => {
    cluster = await startGroup({ workers: 1, init: { rpcTimeoutMs: DEFAULT_MS } });
  }, 40_000);
  afterAll(() => stopGroup(cluster), 20_000);

  it("reports the default timeout set at initRpc (test_set_and_get_default_rpc_timeout)", () => {
    expect(timeoutApi().getRpcTimeout()).toBe(DEFAULT_MS);
  });

  it("applies the default from initRpc to a call given no timeout", async () => {
    // NB: the callee's work ends soon after the timeout (work still running holds up a graceful shutdown)
    const t0 = Date.now();
    const e = await within(rpc.rpcAsync("worker1", mySleepFunc, [DEFAULT_MS + 500]), 5_000, "the call").catch(
      (err: unknown) => err,
    );
    const dt = Date.now() - t0;
    expect(e).toBeInstanceOf(RpcTimeoutError);
    expect(dt).toBeGreaterThanOrEqual(DEFAULT_MS - 5);
    expect(dt).toBeLessThan(DEFAULT_MS + 1_500);
  });

  it("times out a call past its own timeout; the default or a longer one lets it finish (test_rpc_timeouts)", async () => {
    // a 300 ms call with a 100 ms timeout, through rpcAsync and rpcSync
    await expect(rpc.rpcAsync("worker1", mySleepFunc, [300], { timeoutMs: 100 })).rejects.toThrow(RpcTimeoutError);
    await expect(rpc.rpcSync("worker1", mySleepFunc, [300], { timeoutMs: 100 })).rejects.toThrow(RpcTimeoutError);
    // the default (1 s) lets it finish; so does a per-call timeout longer than the call
    expect(await rpc.rpcAsync("worker1", mySleepFunc, [300])).toBe(1);
    expect(await rpc.rpcSync("worker1", mySleepFunc, [300])).toBe(1);
    expect(await rpc.rpcSync("worker1", mySleepFunc, [300], { timeoutMs: 5_000 })).toBe(1);
  });

  it("never times out a call with timeoutMs 0, however long it runs past the default (test_rpc_timeouts)", async () => {
    const longer = DEFAULT_MS + 300;
    const got = await within(
      Promise.all([
        rpc.rpcAsync("worker1", mySleepFunc, [longer], { timeoutMs: 0 }),
        rpc.rpcSync("worker1", mySleepFunc, [longer], { timeoutMs: 0 }),
      ]),
      10_000,
      "two calls without a timeout",
    );
    expect(got).toEqual([1, 1]);
  });

  it("uses a default set with setRpcTimeout, unless a call gives its own (test_rpc_timeouts)", async () => {
    const api = timeoutApi();
    try {
      api.setRpcTimeout(1);
      expect(api.getRpcTimeout()).toBe(1);
      await expect(rpc.rpcAsync("worker1", mySleepFunc, [300])).rejects.toThrow(RpcTimeoutError);
      await expect(rpc.rpcSync("worker1", mySleepFunc, [300])).rejects.toThrow(RpcTimeoutError);
      // a call's own timeout overrides the default
      expect(await rpc.rpcAsync("worker1", mySleepFunc, [300], { timeoutMs: 5_000 })).toBe(1);
      expect(await rpc.rpcSync("worker1", mySleepFunc, [300], { timeoutMs: 5_000 })).toBe(1);
      expect(await rpc.rpcAsync("worker1", mySleepFunc, [300], { timeoutMs: 0 })).toBe(1);
      expect(await rpc.rpcSync("worker1", mySleepFunc, [300], { timeoutMs: 0 })).toBe(1);
    } finally {
      api.setRpcTimeout(DEFAULT_MS);
    }
  });

  it("applies a new default to new calls only; 0 means none (test_default_timeout_used)", async () => {
    const api = timeoutApi();
    try {
      api.setRpcTimeout(1);
      const futs = Array.from({ length: 10 }, () => rpc.rpcAsync("worker1", mySleepFunc, [200]));
      // NB: every future gets its handler now: awaited one by one, the later ones reject (1 ms) before
      // anything handles them, an unhandled rejection
      await Promise.all(futs.map((fut) => expect(fut).rejects.toThrow(RpcTimeoutError)));
      // a long-standing call keeps the default it started with
      api.setRpcTimeout(200_000);
      const fut1 = rpc.rpcAsync("worker1", mySleepFunc, [300]);
      api.setRpcTimeout(1);
      const fut2 = rpc.rpcAsync("worker1", mySleepFunc, [300]);
      await expect(fut2).rejects.toThrow(RpcTimeoutError);
      expect(await within(fut1, 5_000, "fut1")).toBe(1);
      api.setRpcTimeout(0);
      expect(api.getRpcTimeout()).toBe(0);
      expect(await within(rpc.rpcAsync("worker1", mySleepFunc, [300]), 5_000, "a call without a default")).toBe(1);
    } finally {
      api.setRpcTimeout(DEFAULT_MS);
    }
  });

  it("refuses a default that is NaN, negative or infinite with a ValueError, keeping the old one", () => {
    const api = timeoutApi();
    for (const bad of BAD_TIMEOUTS) {
      expect(() => api.setRpcTimeout(bad)).toThrow(ValueError);
      expect(api.getRpcTimeout()).toBe(DEFAULT_MS);
    }
  });

  it.each(BAD_TIMEOUTS)("refuses timeoutMs %s with a ValueError in rpcSync, rpcAsync and remote", async (bad) => {
    const quick = () => 1;
    const calls = [
      () => rpc.rpcSync("worker1", quick, [], { timeoutMs: bad }),
      () => rpc.rpcAsync("worker1", quick, [], { timeoutMs: bad }),
      () => rpc.remote("worker1", quick, [], { timeoutMs: bad }).toHere(),
    ];
    for (const call of calls) {
      const e = await within(attempt(call), 5_000, "the call").then(
        (v) => expect.fail(`timeoutMs ${bad} was accepted (the call returned ${String(v)})`),
        (err: unknown) => err,
      );
      expect(e).toBeInstanceOf(ValueError);
      expect((e as Error).message).toMatch(/timeoutMs/);
    }
  });

  it.each([2 ** 31, 1e12, Number.MAX_SAFE_INTEGER])(
    "treats timeoutMs %s (past setTimeout's limit) as no practical timeout",
    async (huge) => {
      expect(await within(rpc.rpcSync("worker1", mySleepFunc, [200], { timeoutMs: huge }), 5_000, "the call")).toBe(1);
      expect(await within(rpc.rpcAsync("worker1", mySleepFunc, [200], { timeoutMs: huge }), 5_000, "the call")).toBe(1);
    },
  );
});
