/**
 * tprpc.cluster with real worker processes, this test process as rank 0: start() joins
 * the workers (calls reach them, by pid), starting again replaces the old cluster (its
 * workers exit), shutdown() is graceful (exit code 0) and idempotent, the cluster renders
 * its workers and states, and a worker that dies before the group assembles makes start()
 * fail at once with a message naming it.
 */
import fs from "node:fs";
import { afterAll, describe, expect, it } from "vitest";
import { cluster, cuda, display, rpc } from "../../sdk/index.js";

function alive(pid: number): boolean {
  try {
    const s = fs.readFileSync(`/proc/${pid}/stat`, "utf8");
    return s.slice(s.lastIndexOf(")") + 2, s.lastIndexOf(")") + 3) !== "Z";
  } catch {
    return false;
  }
}

async function gone(pids: number[], ms: number): Promise<number[]> {
  const deadline = Date.now() + ms;
  for (;;) {
    const left = pids.filter(alive);
    if (!left.length || Date.now() > deadline) return left;
    await new Promise((r) => setTimeout(r, 50));
  }
}

const quiet = { onOutput: () => undefined, env: { TPRPC_NATIVE: "0" } };

describe("tprpc.cluster", () => {
  afterAll(async () => {
    await cluster.shutdown();
  });

  it("starts workers, replaces the previous cluster and shuts down gracefully", async () => {
    const a = await cluster.start({ workers: 2, ...quiet });
    expect(cluster.current()).toBe(a);
    expect(a.workerNames).toEqual(["worker1", "worker2"]);
    expect(a.worldSize).toBe(3);
    expect(a.running).toBe(true);
    const served = await Promise.all(a.workerNames.map((w) => rpc.rpcSync<number>(w, () => process.pid)));
    expect(served).toEqual(a.pids);
    expect(a.status().map((s) => s.state)).toEqual(["running", "running"]);
    expect(cluster.livePids().sort()).toEqual([...a.pids].sort());

    const bundle = display.mimeBundle(a)!;
    expect(bundle["text/plain"]).toContain("worker2 (rank 2, pid");
    expect(bundle["text/html"]).toContain("running");

    // Starting again (a re-run notebook cell) shuts the old cluster down first.
    const b = await cluster.start({ workers: ["alice"], ...quiet });
    expect(a.running).toBe(false);
    expect(await gone(a.pids, 10_000)).toEqual([]);
    expect(a.status().map((s) => [s.state, s.exit])).toEqual([
      ["exited", "code 0"],
      ["exited", "code 0"],
    ]);
    expect(await rpc.rpcSync<number>("alice", (x: number) => x * 2, [21])).toBe(42);
    expect(cluster.livePids()).toEqual(b.pids);

    await b.shutdown();
    await b.shutdown(); // idempotent
    expect(cluster.current()).toBeNull();
    expect(b.status()[0]).toMatchObject({ state: "exited", exit: "code 0" });
    expect(cluster.livePids()).toEqual([]);
    expect(() => rpc.workers()).toThrow(/initRpc/);
  }, 90_000);

  it("passes deviceMaps to the master's initRpc (the group checks them against the workers' devices)", async () => {
    const start = cluster.start({ workers: 1, deviceMaps: { worker1: { cpu: "cuda:0" } }, ...quiet });
    if (cuda.isAvailable()) {
      await start;
      await cluster.shutdown();
      return;
    }
    await expect(start).rejects.toThrow(/deviceMaps\["worker1"\] maps to cuda:0, but "worker1" has 0 CUDA device/);
    expect(await gone(cluster.livePids(), 10_000)).toEqual([]);
  }, 90_000);

  it("rejects bad worker counts", async () => {
    await expect(cluster.start({ workers: 0 })).rejects.toThrow(/whole number >= 1/);
  });

  // NB: last: the failed initRpc keeps waiting (startTimeoutMs) in this process.
  it("fails at once when a worker dies before the group assembles", async () => {
    const t0 = Date.now();
    await expect(
      cluster.start({
        workers: 1,
        nodeArgs: ["--require", "/nonexistent/tprpc-test-preload.cjs"],
        startTimeoutMs: 30_000,
        ...quiet,
      }),
    ).rejects.toThrow(/worker1 \(pid \d+\) exited \(code 1\) before the cluster started/);
    expect(Date.now() - t0).toBeLessThan(25_000); // well before the start timeout
    expect(cluster.current()).toBeNull();
    expect(cluster.livePids()).toEqual([]);
  }, 60_000);
});
