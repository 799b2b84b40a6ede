/**
 * rpc.profiler and rpc.pipeInfo end to end, with real worker processes: calls
 * to two workers that overlap in time (a two-stage pipeline, as notebook 04
 * shows it) are recorded with target, peer, bytes and times, the callee's run
 * comes back with each reply, and the Chrome trace lays overlapping calls on
 * separate tracks per worker. pipeInfo shows the channel options.channels forced.
 */
import type { ChildProcess } from "node:child_process";
import fs from "node:fs";
import os from "node:os";
import path from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { ChannelNotViableError, ones, rpc } from "../../sdk/index.js";
import { freePort, startWorker } from "./workers.js";

const SECRET = "profiling-secret-0123456789";

/** A stage that takes `ms` on its worker and hands its input on. */
const stage = async (ms: number, x: unknown) => {
  await new Promise((r) => setTimeout(r, ms));
  return x;
};

describe("rpc.profiler and rpc.pipeInfo", () => {
  const children: ChildProcess[] = [];

  beforeAll(async () => {
    // a channel that is not registered is refused before anything starts
    await expect(
      rpc.initRpc("master", { rank: 0, worldSize: 1, initMethod: "tcp://127.0.0.1:1", channels: ["nosuch"] }),
    ).rejects.toThrow(ChannelNotViableError);
    const port = await freePort();
    for (const [i, n] of ["worker1", "worker2"].entries())
      children.push(startWorker(n, i + 1, 3, port, { secret: SECRET }));
    await rpc.initRpc("master", {
      rank: 0,
      worldSize: 3,
      initMethod: `tcp://127.0.0.1:${port}`,
      secret: SECRET,
      channels: "tcp",
    });
  }, 30_000);

  afterAll(async () => {
    await rpc.shutdown({ timeoutMs: 10_000 }).catch(() => undefined);
    for (const c of children) if (c.exitCode === null && c.signalCode === null) c.kill("SIGKILL");
  });

  it("pipeInfo shows the transport and the forced channel per device pair", async () => {
    const info = await rpc.pipeInfo("worker1");
    expect(info.peer).toBe("worker1");
    expect(info.transport).toBe("tcp");
    expect(info.channels["cpu-cpu"]).toBe("tcp");
    expect(info.offered.local).toEqual(["tcp"]);
    expect(info.offered.remote).toContain("tcp");
    await expect(rpc.pipeInfo("nobody")).rejects.toThrow(/unknown worker/);
  });

  it("records overlapping calls per worker with bytes, times and the callee's run, and dumps a Chrome trace", async () => {
    const x = ones([1000]); // 4,000 bytes each way
    await rpc.rpcSync("worker1", stage, [0, x]); // ship the code first, outside the profile
    await rpc.rpcSync("worker2", stage, [0, x]);
    rpc.profiler.clear();
    rpc.profiler.enable();
    const t0 = Date.now();
    // two "micro-batches" through two stages, both workers busy at once
    await Promise.all([
      rpc.rpcAsync("worker1", stage, [300, x]),
      rpc.rpcAsync("worker2", stage, [300, x]),
      rpc.rpcAsync("worker1", stage, [300, x]),
      rpc.rpcAsync("worker2", stage, [300, x]),
    ]);
    const wall = Date.now() - t0;
    rpc.profiler.disable();
    await rpc.rpcSync("worker1", stage, [0, 1]); // not recorded
    const recs = rpc.profiler.records();
    expect(recs.length).toBe(4);
    expect(wall).toBeLessThan(1_150); // the four 300 ms calls overlapped (serial would be 1.2 s)
    for (const r of recs) {
      expect(r.target).toBe("stage");
      expect(r.kind).toBe("call");
      expect(["worker1", "worker2"]).toContain(r.peer);
      expect(r.bytesSent).toBeGreaterThan(4_000);
      expect(r.bytesReceived).toBeGreaterThan(4_000);
      expect(r.error).toBeNull();
      expect(r.sentAt!).toBeGreaterThanOrEqual(r.queuedAt);
      expect(r.replyAt!).toBeGreaterThanOrEqual(r.sentAt!);
      expect(r.replyAt! - r.queuedAt).toBeGreaterThanOrEqual(290);
      // the callee's run, on the same host's clock, lies inside the call
      expect(r.calleeEnd! - r.calleeStart!).toBeGreaterThanOrEqual(290);
      expect(r.calleeStart!).toBeGreaterThanOrEqual(r.queuedAt - 5);
      expect(r.calleeEnd!).toBeLessThanOrEqual(r.replyAt! + 5);
    }
    const w1 = recs.filter((r) => r.peer === "worker1");
    const w2 = recs.filter((r) => r.peer === "worker2");
    expect(w1.length).toBe(2);
    // spans to the two workers overlap in time
    expect(Math.max(w1[0]!.queuedAt, w2[0]!.queuedAt)).toBeLessThan(Math.min(w1[0]!.replyAt!, w2[0]!.replyAt!));

    const dir = fs.mkdtempSync(path.join(os.tmpdir(), "tprpc-prof-"));
    const file = path.join(dir, "trace.json");
    const text = rpc.profiler.dumpChromeTrace(file, "master");
    try {
      expect(fs.readFileSync(file, "utf8")).toBe(text);
    } finally {
      fs.rmSync(dir, { recursive: true, force: true });
    }
    const trace = JSON.parse(text) as {
      traceEvents: {
        ph: string;
        name: string;
        cat?: string;
        tid: number;
        ts: number;
        dur: number;
        args?: { name?: string };
      }[];
    };
    const calls = trace.traceEvents.filter((e) => e.ph === "X" && e.cat === "rpc");
    expect(calls.length).toBe(4);
    expect(calls.every((e) => e.name === "stage" && e.dur >= 290_000)).toBe(true);
    const runs = trace.traceEvents.filter((e) => e.ph === "X" && e.cat === "rpc.run");
    expect(runs.map((e) => e.name).sort()).toEqual([
      "run on worker1",
      "run on worker1",
      "run on worker2",
      "run on worker2",
    ]);
    const threads = trace.traceEvents.filter((e) => e.ph === "M" && e.name === "thread_name").map((e) => e.args!.name);
    // two overlapping calls per worker need two tracks each
    expect(threads.sort()).toEqual(["→ worker1", "→ worker1 #1", "→ worker2", "→ worker2 #1"]);
    // no two calls overlap on one track
    const byTid = new Map<number, { ts: number; dur: number }[]>();
    for (const c of calls) byTid.set(c.tid, [...(byTid.get(c.tid) ?? []), c]);
    for (const list of byTid.values()) {
      list.sort((a, b) => a.ts - b.ts);
      for (let i = 1; i < list.length; i++)
        expect(list[i]!.ts).toBeGreaterThanOrEqual(list[i - 1]!.ts + list[i - 1]!.dur);
    }
    rpc.profiler.clear();
    expect(rpc.profiler.records()).toEqual([]);
  }, 30_000);
});
