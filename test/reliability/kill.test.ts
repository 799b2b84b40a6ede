/**
 * kill -9 at the worst moments, with real processes. (1) A worker killed with
 * 49 calls pending on it (sleeping ones, one computing, and ones carrying 64 KB tensors queued behind it):
 * every pending call rejects with WorkerUnavailableError naming it, all within
 * 2 s, while calls pending on another worker complete and the survivors keep
 * serving. (2) The master killed (a separate process, test/reliability/master.mjs,
 * with a call running on every worker), once with workers from
 * rpc.startLocalWorkers and once with `tprpc worker` processes started by hand:
 * every worker process is gone within 5 s, so none is orphaned. (3) A worker
 * killed while the master is in a graceful rpc.shutdown() (waiting on a call
 * to that worker): the shutdown still ends within 5 s of the kill, and the
 * surviving workers exit within 10 s after it.
 */
import { type ChildProcess, spawn } from "node:child_process";
import path from "node:path";
import { afterAll, afterEach, describe, expect, it } from "vitest";
import { type Tensor, WorkerUnavailableError, rpc, tensor } from "../../sdk/index.js";
import { type Cluster, startGroup, stopGroup, within } from "../conformance/group.js";
import { killIfAlive, pidGone, report, seededFloats, since, sleep, waitUntil } from "./common.js";

declare const tprpc: typeof import("../../sdk/index.js");

/** Runs on a worker: counts itself as running, then sleeps `ms`. */
const sleeper = async (ms: number): Promise<number> => {
  const g = globalThis as unknown as { __relRunning?: number };
  g.__relRunning = (g.__relRunning ?? 0) + 1;
  await new Promise((r) => setTimeout(r, ms));
  g.__relRunning--;
  return ms;
};
const runningOn = (w: string) =>
  rpc.rpcSync<number>(w, () => (globalThis as unknown as { __relRunning?: number }).__relRunning ?? 0);

describe("kill -9 of a worker with calls pending", () => {
  let cluster: Cluster | undefined;
  afterAll(async () => {
    await stopGroup(cluster, false);
  }, 30_000);

  it("rejects every pending call with WorkerUnavailableError within 2 s; the others go on", async () => {
    cluster = await startGroup({ processes: true });
    const victim = cluster.workers.find((w) => w.name === "worker1")!;
    await Promise.all(["worker1", "worker2", "worker3"].map((w) => rpc.rpcSync(w, () => 0)));

    const sleeping = Array.from({ length: 32 }, () =>
      rpc.rpcAsync("worker1", sleeper, [60_000], { timeoutMs: 120_000 }),
    );
    const sleepingElsewhere = Array.from({ length: 8 }, () =>
      rpc.rpcAsync<number>("worker2", sleeper, [1_500], { timeoutMs: 30_000 }),
    );
    expect(await waitUntil(async () => (await runningOn("worker1")) === 32, 10_000, 50)).toBe(true);
    // one that keeps worker1's JS thread computing, and 16 more carrying 64 KB each, queued behind it
    // (NB: sent on an open pipe, a call is written at once: without the busy one, worker1 could answer
    // them before the kill)
    const busy = rpc.rpcAsync(
      "worker1",
      (ms: number) => {
        const t = Date.now();
        while (Date.now() - t < ms);
        return ms;
      },
      [60_000],
      { timeoutMs: 120_000 },
    );
    const heavy = Array.from({ length: 16 }, (_, i) =>
      rpc.rpcAsync("worker1", (x: Tensor) => x.sum().item(), [tensor(seededFloats(16_384, i))], { timeoutMs: 120_000 }),
    );
    const pending = [...sleeping, busy, ...heavy];
    const settledAt = pending.map(() => 0);
    const outcomes = pending.map((p, i) =>
      p
        .then(
          (v) => ({ ok: true as const, v }),
          (e: unknown) => ({ ok: false as const, e }),
        )
        .finally(() => (settledAt[i] = performance.now())),
    );

    const t0 = performance.now();
    victim.process.kill("SIGKILL");
    const results = await within(Promise.all(outcomes), 15_000, "the calls pending on the killed worker");
    const slowest = Math.max(...settledAt) - t0;
    const errors = results.map((r) => (r.ok ? null : r.e));
    report(
      "kill",
      `worker killed with ${pending.length} calls pending: all settled ${slowest.toFixed(0)} ms after the kill; ` +
        `types ${[...new Set(errors.map((e) => (e === null ? "resolved" : (e as Error).constructor.name)))].join(", ")}`,
    );
    for (const e of errors) {
      expect(e).toBeInstanceOf(WorkerUnavailableError);
      expect((e as WorkerUnavailableError).workerName).toBe("worker1");
    }
    expect(slowest).toBeLessThan(2_000);

    // a new call to the dead worker fails as promptly, and the other workers serve on
    const t1 = performance.now();
    await expect(
      within(
        rpc.rpcSync("worker1", () => 0, [], { timeoutMs: 30_000 }),
        10_000,
        "a call to the dead worker",
      ),
    ).rejects.toBeInstanceOf(WorkerUnavailableError);
    expect(since(t1)).toBeLessThan(2_000);
    expect(await within(Promise.all(sleepingElsewhere), 10_000, "worker2's calls")).toEqual(Array(8).fill(1_500));
    expect(
      await Promise.all(
        ["worker2", "worker3"].map((w) => rpc.rpcSync<string>(w, () => tprpc.rpc.getWorkerInfo().name)),
      ),
    ).toEqual(["worker2", "worker3"]);
  }, 60_000);
});

describe("kill -9 of the master", () => {
  let master: ChildProcess | undefined;
  let pids: number[] = [];
  afterEach(() => {
    killIfAlive(master?.pid);
    for (const p of pids) killIfAlive(p);
    master = undefined;
    pids = [];
  });

  /** Starts master.mjs in `mode`; resolves to its pid and its workers' pids once it printed READY. */
  async function startMaster(mode: "launcher" | "manual"): Promise<{ master: number; workers: number[] }> {
    const child = spawn(process.execPath, [path.join(import.meta.dirname, "master.mjs"), mode], {
      stdio: ["ignore", "pipe", "pipe"],
      env: { ...process.env, TPRPC_NATIVE: "0" },
    });
    master = child;
    child.stderr!.on("data", (d: Buffer) => process.stderr.write(`[master.mjs ${mode}] ${d}`));
    const ready = new Promise<{ master: number; workers: number[] }>((resolve, reject) => {
      let out = "";
      child.stdout!.on("data", (d: Buffer) => {
        out += d.toString();
        const m = /^READY (.*)$/m.exec(out);
        if (m) resolve(JSON.parse(m[1]!) as { master: number; workers: number[] });
      });
      child.once("exit", (code, sig) => reject(new Error(`master.mjs exited early (code ${code}, signal ${sig})`)));
    });
    const info = await within(ready, 45_000, `master.mjs ${mode} to get ready`);
    pids = info.workers;
    return info;
  }

  for (const mode of ["launcher", "manual"] as const) {
    it(`leaves no worker behind (${mode === "launcher" ? "rpc.startLocalWorkers" : "workers started by hand"})`, async () => {
      const info = await startMaster(mode);
      expect(info.workers).toHaveLength(3);
      expect(info.workers.every((p) => !pidGone(p))).toBe(true);
      const t0 = performance.now();
      process.kill(info.master, "SIGKILL");
      const gone = await waitUntil(() => info.workers.every(pidGone), 5_000, 25);
      const ms = since(t0);
      report(
        "kill",
        `master (${mode}) killed: ${gone ? `all 3 workers gone after ${ms.toFixed(0)} ms` : `workers still running after ${ms.toFixed(0)} ms: ${info.workers.filter((p) => !pidGone(p)).join(", ")}`}`,
      );
      expect(info.workers.filter((p) => !pidGone(p))).toEqual([]);
    }, 60_000);
  }
});

describe("kill -9 of a worker during graceful shutdown", () => {
  let cluster: Cluster | undefined;
  afterAll(async () => {
    await stopGroup(cluster, false);
  }, 30_000);

  it("the master's rpc.shutdown() still ends within 5 s, and the survivors exit", async () => {
    cluster = await startGroup({ processes: true });
    const victim = cluster.workers.find((w) => w.name === "worker1")!;
    const survivors = cluster.workers.filter((w) => w !== victim);
    // a graceful shutdown waits for this call first: the kill lands while the master is inside it
    const longCall = rpc.rpcAsync("worker1", sleeper, [60_000], { timeoutMs: 0 }).catch((e: unknown) => e);
    expect(await waitUntil(async () => (await runningOn("worker1")) === 1, 10_000, 50)).toBe(true);

    let endedAt = 0;
    const shutdown = rpc
      .shutdown({ graceful: true, timeoutMs: 12_000 })
      .then(
        () => null,
        (e: unknown) => e,
      )
      .finally(() => (endedAt = performance.now()));
    await sleep(500);
    const t0 = performance.now();
    victim.process.kill("SIGKILL");
    const outcome = await within(shutdown, 20_000, "rpc.shutdown()");
    const ms = endedAt - t0;
    expect(await within(longCall, 1_000, "the long call")).toBeInstanceOf(WorkerUnavailableError);
    const t1 = performance.now();
    const survivorsGone = await waitUntil(() => survivors.every((w) => pidGone(w.pid)), 10_000, 50);
    report(
      "kill",
      `worker killed 500 ms into a graceful shutdown: shutdown ended ${ms.toFixed(0)} ms after the kill ` +
        `(${outcome === null ? "resolved" : `rejected: ${String(outcome)}`}); survivors ` +
        `${survivorsGone ? `exited ${since(t1).toFixed(0)} ms after it` : "still running 10 s after it"}`,
    );
    expect(ms).toBeLessThan(5_000);
    expect(survivorsGone).toBe(true);
  }, 60_000);
});
