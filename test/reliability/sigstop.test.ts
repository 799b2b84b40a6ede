/**
 * A worker frozen with SIGSTOP (alive, its sockets open, but answering
 * nothing): calls to it, small and 1 MiB ones, reject with RpcTimeoutError at
 * their own timeouts (1, 2 and 3 s) within ±10 %, measured from the call to
 * the rejection (late by at most the test process's own worst event-loop delay
 * more: a timer cannot fire while this process waits for a core); calls to the other workers keep succeeding meanwhile. After
 * SIGCONT the group recovers: new calls to the worker succeed, the late replies
 * to the timed-out calls are dropped without harm, and a graceful shutdown
 * completes. The worker is always resumed (and the group reaped) in afterAll.
 */
import { monitorEventLoopDelay } from "node:perf_hooks";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { RpcTimeoutError, type Tensor, rpc, tensor } from "../../sdk/index.js";
import { type Cluster, startGroup, stopGroup, within } from "../conformance/group.js";
import { report, seededFloats, since } from "./common.js";

declare const tprpc: typeof import("../../sdk/index.js");

const TIMEOUTS = [1_000, 2_000, 3_000];
const TOLERANCE = 0.1;

const countCalls = (): number => {
  const g = globalThis as unknown as { __relCalls?: number };
  return (g.__relCalls = (g.__relCalls ?? 0) + 1);
};
const callsOn = (w: string) =>
  rpc.rpcSync<number>(w, () => (globalThis as unknown as { __relCalls?: number }).__relCalls ?? 0);

describe("a stopped worker (SIGSTOP)", () => {
  let cluster: Cluster | undefined;
  let stoppedPid = 0;
  beforeAll(async () => {
    cluster = await startGroup({ processes: true });
  }, 60_000);
  afterAll(async () => {
    if (stoppedPid) {
      try {
        process.kill(stoppedPid, "SIGCONT");
      } catch {
        // already gone
      }
    }
    await stopGroup(cluster, !stoppedPid);
  }, 30_000);

  it("times calls out at their timeout ±10 %, and the group recovers after SIGCONT", async () => {
    const victim = cluster!.workers.find((w) => w.name === "worker1")!;
    // warm: every pipe open, the shipped code known on worker1
    await Promise.all(["worker1", "worker2", "worker3"].map((w) => rpc.rpcSync(w, countCalls)));
    const before = await callsOn("worker1");

    const big = tensor(seededFloats(262_144, 7)); // 1 MiB
    const lag = monitorEventLoopDelay({ resolution: 10 });
    lag.enable();
    stoppedPid = victim.pid;
    victim.process.kill("SIGSTOP");
    const t0 = performance.now();
    const calls = TIMEOUTS.flatMap((timeoutMs) => [
      { timeoutMs, what: "small", p: rpc.rpcAsync("worker1", countCalls, [], { timeoutMs }) },
      {
        timeoutMs,
        what: "1 MiB",
        p: rpc.rpcAsync("worker1", (x: Tensor) => x.numel(), [big], { timeoutMs }),
      },
    ]);
    const measured = calls.map(({ timeoutMs, what, p }) =>
      p.then(
        () => ({ timeoutMs, what, ms: since(t0), error: null as unknown }),
        (error: unknown) => ({ timeoutMs, what, ms: since(t0), error }),
      ),
    );
    // the other workers serve on while worker1 is frozen
    const others = await within(
      Promise.all(
        Array.from({ length: 20 }, (_, i) =>
          rpc.rpcSync<string>(`worker${2 + (i % 2)}`, () => tprpc.rpc.getWorkerInfo().name),
        ),
      ),
      5_000,
      "calls to the running workers",
    );
    expect(others).toEqual(Array.from({ length: 20 }, (_, i) => `worker${2 + (i % 2)}`));
    const results = await within(Promise.all(measured), 10_000, "the calls to the stopped worker");
    const stoppedFor = since(t0);
    lag.disable();
    const maxLagMs = lag.max / 1e6;

    process.kill(stoppedPid, "SIGCONT");
    stoppedPid = 0;
    const t1 = performance.now();
    const after = await within(rpc.rpcSync<number>("worker1", countCalls), 5_000, "a call after SIGCONT");
    const recovery = since(t1);
    report(
      "sigstop",
      results
        .map(
          (r) =>
            `${r.what} call, timeout ${r.timeoutMs} ms: rejected after ${r.ms.toFixed(0)} ms (${((r.ms / r.timeoutMs - 1) * 100).toFixed(1)} %)`,
        )
        .join("; ") +
        `; stopped for ${stoppedFor.toFixed(0)} ms; first call after SIGCONT answered in ${recovery.toFixed(0)} ms` +
        `; this process's worst event-loop delay ${maxLagMs.toFixed(0)} ms`,
    );
    for (const r of results) {
      expect(r.error).toBeInstanceOf(RpcTimeoutError);
      expect((r.error as RpcTimeoutError).timeoutMs).toBe(r.timeoutMs);
      expect(r.ms).toBeGreaterThanOrEqual(r.timeoutMs * (1 - TOLERANCE));
      expect(r.ms).toBeLessThanOrEqual(r.timeoutMs * (1 + TOLERANCE) + maxLagMs);
    }
    // the frozen worker ran the 3 small calls it received when resumed (their replies were dropped), then this one
    expect(after).toBe(before + TIMEOUTS.length + 1);
    expect(
      await within(
        rpc.rpcSync<number>("worker1", (x: Tensor) => x.numel(), [big]),
        5_000,
        "a 1 MiB call",
      ),
    ).toBe(262_144);
    expect(rpc.workers().map((w) => w.name)).toEqual(["master", "worker1", "worker2", "worker3"]);
  }, 60_000);
});
