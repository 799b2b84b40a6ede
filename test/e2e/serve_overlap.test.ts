/**
 * Communication that overlaps computation (issue 23, item 2), on real worker processes and wall-clock
 * timestamps (one host, one clock): a worker's JS thread computes one call's target at a time, but
 * what that computation produced leaves as soon as it exists.
 * 1. Two requests that reach a busy worker together (one read) are started in turn, and the first
 *    one's reply leaves before the second one's computation ends (sdk/rpc/serve_queue.ts). Before,
 *    both computed back to back and both replies left after the second.
 * 2. RRef proxy calls made all at once (bench/e2e.ts's pipelined GPT): worker1 answers worker2's
 *    fetch of micro-batch 0 between two of its stage-1 computations, so the stages overlap. Before,
 *    worker1 computed every micro-batch first.
 * 3. A call a target makes in the middle of its computation leaves at once, not when the target
 *    returns (sdk/rpc/agent.ts sendOn, the tcp transport's first write of a tick).
 * Both run over the tcp channel (TS backend) and over shm (native addon).
 */
import type { ChildProcess } from "node:child_process";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { rpc } from "../../sdk/index.js";
import { nativeOrSkip } from "../native/helpers.js";
import { freePort, startWorker } from "./workers.js";

declare const tprpc: typeof import("../../sdk/index.js");

const SECRET = "serve-overlap-secret-0123456789abcdef";
// NB: long enough that scheduling noise on a loaded 2-core machine stays far below it
const BUSY_MS = 300;

/** Shipped: computes (spins) for `ms`, returns when it started and ended (wall-clock ms). */
const busy = (ms: number): [number, number] => {
  const now = () => performance.timeOrigin + performance.now();
  const t0 = now();
  while (now() - t0 < ms);
  return [t0, now()];
};

/** Shipped to worker2: registers `__overlapArrived(tag)`, which records when it arrived. */
const registerArrived = (): void =>
  tprpc.rpc.register("__overlapArrived", (tag: string): null => {
    const g = globalThis as unknown as { __arrivals?: Record<string, number> };
    (g.__arrivals ??= {})[tag] = performance.timeOrigin + performance.now();
    return null;
  });

/** Shipped to worker1: calls worker2 (without waiting), then computes for `ms`; returns when it ended. */
const callThenCompute = (ms: number): number => {
  void tprpc.rpc.rpcAsync("worker2", "__overlapArrived", ["mid"]);
  const now = () => performance.timeOrigin + performance.now();
  const t0 = now();
  while (now() - t0 < ms);
  return now();
};

const nowMs = () => performance.timeOrigin + performance.now();

/** Pipeline stage 1 (an RRef's value on worker1): computes for `ms`, logs its span. */
class Stage1 {
  forward(x: number, ms: number): number {
    const now = () => performance.timeOrigin + performance.now();
    const t0 = now();
    while (now() - t0 < ms);
    ((globalThis as unknown as { __spans?: number[][] }).__spans ??= []).push([t0, now()]);
    return x + 1;
  }
}
/** Pipeline stage 2 (on worker2): fetches stage 1's result, then computes for `ms`; returns when it had it. */
class Stage2 {
  async forward(h: { toHere(): Promise<number> }, ms: number): Promise<number> {
    await h.toHere();
    const now = () => performance.timeOrigin + performance.now();
    const t0 = now();
    while (now() - t0 < ms);
    return t0;
  }
}

const variants: { name: string; env: Record<string, string>; skip: boolean }[] = [
  { name: "tcp channel", env: { TPRPC_NATIVE: "0", TPRPC_CHANNELS: "tcp" }, skip: false },
  { name: "shm channel", env: { TPRPC_NATIVE: "1", TPRPC_CHANNELS: "shm" }, skip: nativeOrSkip().skip !== null },
];

for (const v of variants)
  describe.skipIf(v.skip)(`serving overlaps communication with computation (${v.name})`, () => {
    const children: ChildProcess[] = [];

    beforeAll(async () => {
      const port = await freePort();
      for (const [i, n] of ["worker1", "worker2"].entries())
        children.push(startWorker(n, i + 1, 3, port, { secret: SECRET, env: v.env }));
      await rpc.initRpc("master", { rank: 0, worldSize: 3, initMethod: `tcp://127.0.0.1:${port}`, secret: SECRET });
      // worker2 serves `arrived` by name, so worker1's call to it needs no code shipping (one message)
      await rpc.rpcSync("worker2", registerArrived, []);
      // warm up: pipes open both ways, code shipped
      await rpc.rpcSync("worker1", busy, [0]);
      await rpc.rpcSync("worker1", () => tprpc.rpc.rpcSync("worker2", "__overlapArrived", ["warm"]), []);
      await rpc.rpcSync("worker1", callThenCompute, [0]);
    }, 30_000);

    afterAll(async () => {
      await rpc.shutdown({ timeoutMs: 10_000 }).catch(() => undefined);
      for (const c of children) if (c.exitCode === null && c.signalCode === null) c.kill("SIGKILL");
    });

    it("answers the first of two requests that came in one read before the second one's computation ends", async () => {
      const first = rpc.rpcAsync("worker1", busy, [BUSY_MS]);
      // NB: sent while worker1 computes the first: both arrive in one read when it is done
      await new Promise((r) => setTimeout(r, BUSY_MS / 3));
      const calls = [rpc.rpcAsync("worker1", busy, [BUSY_MS]), rpc.rpcAsync("worker1", busy, [BUSY_MS])];
      const at = calls.map((c) => c.then((span) => ({ span, arrived: nowMs() })));
      await first;
      const [a, b] = await Promise.all(at);
      // the second's computation started after the first's (one JS thread) ...
      expect(b!.span[0]).toBeGreaterThanOrEqual(a!.span[1]);
      // ... and the first's reply was here long before the second's computation ended
      expect(a!.arrived).toBeLessThan(b!.span[1] - BUSY_MS / 2);
    }, 30_000);

    it("pipelines RRef proxy calls sent all at once: stage 2 computes micro-batch 0 while stage 1 still computes", async () => {
      const s1 = rpc.remote<Stage1>("worker1", Stage1, []);
      const s2 = rpc.remote<Stage2>("worker2", Stage2, []);
      await s2.rpcAsync().forward(s1.remote().forward(0, 0), 0);
      await rpc.rpcSync("worker1", () => void ((globalThis as unknown as { __spans: number[][] }).__spans = []), []);
      // as bench/e2e.ts's GPT step: every micro-batch's stage-1 remote() and stage-2 call made at once
      const started = await Promise.all(
        [0, 1, 2, 3].map((i) => s2.rpcAsync().forward(s1.remote().forward(i, BUSY_MS / 2), BUSY_MS / 2)),
      );
      const spans = await rpc.rpcSync("worker1", () => (globalThis as unknown as { __spans: number[][] }).__spans, []);
      expect(spans).toHaveLength(4);
      // stage 2 had micro-batch 0 before stage 1 finished its last micro-batch (before: only after all four)
      expect(started[0]).toBeLessThan(spans[3]![1]! - BUSY_MS / 4);
    }, 30_000);

    it("sends a call made in the middle of a computation before that computation ends", async () => {
      const ended = await rpc.rpcSync("worker1", callThenCompute, [BUSY_MS]);
      const arrivedAt = await rpc.rpcSync(
        "worker2",
        () => (globalThis as unknown as { __arrivals: Record<string, number> }).__arrivals.mid!,
        [],
      );
      expect(arrivedAt).toBeLessThan(ended - BUSY_MS / 2);
    }, 30_000);
  });
