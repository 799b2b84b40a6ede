/**
 * The pipeline overlap check of notebook 04 (`rpc.profiler.overlapMs` on two stages' forward
 * spans of one step), on spans recorded from real workers: stage 1 on worker1 returns an RRef to
 * its activations, stage 2 on worker2 fetches them with toHere(). Stage 2's forward counts from
 * the moment worker2 had fetched the activations, as the notebook draws it. Run pipelined (the
 * master hands stage 1 the next micro-batch without waiting for stage 2) the stages' forwards
 * overlap; run unpipelined (each micro-batch through both stages before the next) the check
 * gives 0 and fails. overlapMs itself is checked on hand-made spans.
 */
import type { ChildProcess } from "node:child_process";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { ones, rpc, type Tensor } from "../../sdk/index.js";
import { freePort, startWorker } from "./workers.js";

declare const tprpc: typeof import("../../sdk/index.js");

const SECRET = "pipeline-overlap-secret-0123456789";
const MICRO = 4;
// NB: long enough that the master's turnaround between two stage-1 calls (tens of ms on a loaded
// 2-core machine) cannot swallow the overlap of the pipelined run
const BUSY_MS = 200;

/** Stage 1: `BUSY_MS` of computing, then the activations stay here behind an RRef. */
class Stage1 {
  forward(x: Tensor, ms: number) {
    const t = Date.now();
    while (Date.now() - t < ms);
    return new tprpc.rpc.RRef(x.add(1));
  }
}
/** Stage 2: fetches the activations from their owner, then `BUSY_MS` of computing. */
class Stage2 {
  async forward(h: InstanceType<typeof tprpc.rpc.RRef<Tensor>>, ms: number) {
    const x = await h.toHere();
    const t = Date.now();
    while (Date.now() - t < ms);
    return x.sum();
  }
}

/** Shipped to worker2: starts its profiler afresh. */
const startProfiling = () => {
  tprpc.rpc.profiler.clear();
  tprpc.rpc.profiler.enable();
};
/** Shipped to worker2: stops its profiler and returns its records. */
const stopProfiling = () => {
  tprpc.rpc.profiler.disable();
  return tprpc.rpc.profiler.records();
};

describe("pipeline overlap check on recorded spans", () => {
  const children: ChildProcess[] = [];

  beforeAll(async () => {
    const port = await freePort();
    for (const [i, n] of ["worker1", "worker2"].entries())
      children.push(startWorker(n, i + 1, 3, port, { secret: SECRET }));
    await rpc.initRpc("master", { rank: 0, worldSize: 3, initMethod: `tcp://127.0.0.1:${port}`, secret: SECRET });
  }, 30_000);

  afterAll(async () => {
    await rpc.shutdown({ timeoutMs: 10_000 }).catch(() => undefined);
    for (const c of children) if (c.exitCode === null && c.signalCode === null) c.kill("SIGKILL");
  });

  /** One step of MICRO micro-batches; returns stage 1's and stage 2's forward spans. */
  async function step(pipelined: boolean) {
    const s1 = rpc.remote<Stage1>("worker1", Stage1, []);
    const s2 = rpc.remote<Stage2>("worker2", Stage2, []);
    // NB: warm up (code shipping, first fetch) outside the profile
    await s2.rpcAsync().forward(await s1.rpcAsync().forward(ones([8]), 0), 0);
    await rpc.rpcSync("worker2", startProfiling);
    rpc.profiler.clear();
    rpc.profiler.enable();
    const losses: Promise<Tensor>[] = [];
    for (let i = 0; i < MICRO; i++) {
      const h = await s1.rpcAsync().forward(ones([8]), BUSY_MS);
      const loss = s2.rpcAsync().forward(h, BUSY_MS);
      if (!pipelined) await loss;
      losses.push(loss);
    }
    await Promise.all(losses);
    rpc.profiler.disable();
    const master = rpc.profiler.records();
    const w2 = await rpc.rpcSync("worker2", stopProfiling);
    // The same rule as notebook 04's stageSpans: worker2's k-th call made its k-th fetch.
    const fetches = w2.filter((r) => r.kind === "fetch").sort((a, b) => a.queuedAt - b.queuedAt);
    const runs = (peer: string) =>
      master
        .filter((r) => r.peer === peer && r.target === "rref.forward")
        .sort((a, b) => a.calleeStart! - b.calleeStart!);
    const stage1 = runs("worker1").map((r) => ({
      worker: "worker1",
      name: "s1",
      start: r.calleeStart!,
      end: r.calleeEnd!,
    }));
    const stage2 = runs("worker2").map((r, k) => ({
      worker: "worker2",
      name: "s2",
      start: Math.max(r.calleeStart!, fetches[k]!.replyAt!),
      end: r.calleeEnd!,
    }));
    expect(stage1).toHaveLength(MICRO);
    expect(stage2).toHaveLength(MICRO);
    expect(fetches).toHaveLength(MICRO);
    for (const s of [...stage1, ...stage2]) expect(s.end - s.start).toBeGreaterThanOrEqual(BUSY_MS - 5);
    return { stage1, stage2 };
  }

  it("fails (0 ms) on an unpipelined run and passes on a pipelined one", async () => {
    const serial = await step(false);
    expect(rpc.profiler.overlapMs(serial.stage1, serial.stage2)).toBe(0);
    const piped = await step(true);
    // stage 2 computes micro-batch i while stage 1 computes i + 2 (worker1 answers the fetch of i after
    // i + 1); the overlap is BUSY_MS less the master's turnaround, per micro-batch after the first two
    expect(rpc.profiler.overlapMs(piped.stage1, piped.stage2)).toBeGreaterThan(BUSY_MS / 4);
  }, 60_000);

  it("overlapMs measures the time both sets of spans ran at once", () => {
    const s = (start: number, end: number) => ({ worker: "w", name: "n", start, end });
    expect(rpc.overlapMs([s(0, 10), s(5, 20)], [s(15, 30)])).toBe(5);
    expect(rpc.overlapMs([s(0, 10), s(20, 30)], [s(5, 25)])).toBe(10);
    expect(rpc.overlapMs([s(0, 10)], [s(10, 20)])).toBe(0);
    expect(rpc.overlapMs([], [s(0, 1)])).toBe(0);
  });
});
