/**
 * The local launcher with real processes: workers started by startLocalWorkers
 * serve a master in this process and exit 0 after shutdown; close() kills
 * workers still serving (they ignore SIGINT); a SIGKILLed or SIGTERMed master
 * process leaves no worker behind, before or after the group has assembled.
 */
import { type ChildProcess, spawn } from "node:child_process";
import fs from "node:fs";
import net from "node:net";
import os from "node:os";
import path from "node:path";
import { afterEach, describe, expect, it } from "vitest";
import { rpc } from "../../sdk/index.js";
import {
  freePort,
  type LocalCluster,
  RPC_NODE_FLAGS,
  startLocalWorkers,
  withKernelThreads,
  withRpcNodeFlags,
  workerScript,
} from "../../sdk/rpc/launcher.js";

const root = path.resolve(import.meta.dirname, "../..");
const NO_NATIVE = { TPRPC_NATIVE: "0" };

declare const tprpc: typeof import("../../sdk/index.js");

function alive(pid: number): boolean {
  try {
    process.kill(pid, 0);
    return true;
  } catch {
    return false;
  }
}

/** Polls until every pid is gone; resolves to those still alive after `ms`. */
async function gone(pids: number[], ms: number): Promise<number[]> {
  const deadline = Date.now() + ms;
  for (;;) {
    const left = pids.filter(alive);
    if (left.length === 0 || Date.now() > deadline) return left;
    await new Promise((r) => setTimeout(r, 50));
  }
}

const within = <T>(p: Promise<T>, ms: number, what: string): Promise<T> =>
  Promise.race([
    p,
    new Promise<T>((_, reject) => setTimeout(() => reject(new Error(`${what} took over ${ms} ms`)), ms)),
  ]);

/** Starts test/rpc/fixtures/launcher_master.mjs and reads its {pid, workers} line. */
async function startMaster(mode: "joined" | "starting"): Promise<{ master: ChildProcess; workers: number[] }> {
  const master = spawn(process.execPath, [path.join(root, "test/rpc/fixtures/launcher_master.mjs"), mode], {
    stdio: ["ignore", "pipe", "inherit"],
  });
  const line = await within(
    new Promise<string>((resolve, reject) => {
      let buf = "";
      master.stdout!.setEncoding("utf8");
      master.stdout!.on("data", (d: string) => {
        buf += d;
        const nl = buf.indexOf("{");
        const end = buf.indexOf("\n", nl);
        if (nl >= 0 && end > nl) resolve(buf.slice(nl, end));
      });
      master.once("exit", (code) => reject(new Error(`the master exited early (${code})`)));
    }),
    30_000,
    "starting the master and its workers",
  );
  return { master, workers: (JSON.parse(line) as { workers: number[] }).workers };
}

describe("startLocalWorkers", () => {
  const clusters: LocalCluster[] = [];
  const masters: ChildProcess[] = [];
  afterEach(async () => {
    await rpc.shutdown({ graceful: false, timeoutMs: 5_000 });
    for (const m of masters.splice(0)) if (m.exitCode === null && m.signalCode === null) m.kill("SIGKILL");
    await Promise.all(clusters.splice(0).map((c) => c.close({ graceMs: 1_000 })));
  });

  it("adds RPC_NODE_FLAGS to the workers' node flags unless they set those flags themselves", () => {
    expect(RPC_NODE_FLAGS).toEqual(["--initial-old-space-size=256"]);
    expect(withRpcNodeFlags(["--inspect"], {})).toEqual(["--initial-old-space-size=256", "--inspect"]);
    expect(withRpcNodeFlags(["--initial-old-space-size=64"], {})).toEqual(["--initial-old-space-size=64"]);
    expect(withRpcNodeFlags(["--initial_old_space_size=64"], {})).toEqual(["--initial_old_space_size=64"]);
    expect(withRpcNodeFlags([], { NODE_OPTIONS: "--initial-old-space-size=32 --trace-gc" })).toEqual([]);
  });

  it("gives spawned workers max(1, floor(cores / local processes)) kernel threads unless the env sets them", () => {
    const cores = os.availableParallelism();
    expect(withKernelThreads({ A: "1" }, 3)).toEqual({
      A: "1",
      TPRPC_NUM_THREADS: String(Math.max(1, Math.floor(cores / 3))),
    });
    expect(withKernelThreads({}, cores * 4).TPRPC_NUM_THREADS).toBe("1");
    expect(withKernelThreads({}, 1).TPRPC_NUM_THREADS).toBe(String(cores));
    expect(withKernelThreads({ TPRPC_NUM_THREADS: "6" }, 3).TPRPC_NUM_THREADS).toBe("6");
  });

  it("sizes a spawned worker's kernel pool from the default, and from the user's TPRPC_NUM_THREADS", async () => {
    // NB: native workers: the addon reads TPRPC_NUM_THREADS when it loads
    const cluster = await startLocalWorkers({ workers: ["dflt"], env: { TPRPC_NUM_THREADS: undefined } });
    clusters.push(cluster);
    await rpc.initRpc("master", { ...cluster.initOptions, initTimeoutMs: 20_000 });
    const threads = () => [process.env.TPRPC_NUM_THREADS, tprpc.getNumThreads()];
    const [env, n] = (await rpc.rpcSync("dflt", threads, [])) as [string, number];
    const want = Math.max(1, Math.floor(os.availableParallelism() / 2));
    expect(env).toBe(String(want));
    expect(n).toBe(want);
    await rpc.shutdown();
    await within(Promise.all(cluster.workers.map((w) => w.exited)), 10_000, "the workers' exit");

    const mine = await startLocalWorkers({ workers: ["mine"], env: { TPRPC_NUM_THREADS: "3" } });
    clusters.push(mine);
    await rpc.initRpc("master", { ...mine.initOptions, initTimeoutMs: 20_000 });
    expect(await rpc.rpcSync("mine", threads, [])).toEqual(["3", 3]);
  }, 60_000);

  it("finds bin/tprpc.mjs from the sources", () => {
    expect(workerScript()).toBe(path.join(root, "bin", "tprpc.mjs"));
  });

  it("starts workers that serve this process as rank 0 and exit 0 after shutdown", async () => {
    const lines: string[] = [];
    const cluster = await startLocalWorkers({
      workers: 2,
      env: NO_NATIVE,
      onOutput: (w, stream, line) => lines.push(`${w} ${stream} ${line}`),
    });
    clusters.push(cluster);
    expect(cluster.worldSize).toBe(3);
    expect(cluster.initMethod).toMatch(/^tcp:\/\/127\.0\.0\.1:\d+$/);
    expect(cluster.workers.map((w) => [w.name, w.rank])).toEqual([
      ["worker1", 1],
      ["worker2", 2],
    ]);
    await rpc.initRpc("master", { ...cluster.initOptions, initTimeoutMs: 20_000 });
    expect(rpc.workers().map((w) => w.name)).toEqual(["master", "worker1", "worker2"]);
    for (const w of ["worker1", "worker2"]) {
      const said = (x: number) => {
        console.error(`serving ${x}`);
        return [process.pid, x * 2];
      };
      expect(await rpc.rpcSync(w, said, [21])).toEqual([cluster.workers.find((k) => k.name === w)!.pid, 42]);
    }
    // the workers run with the V8 flags for receiving tensors
    expect(await rpc.rpcSync("worker1", () => process.execArgv, [])).toEqual(
      expect.arrayContaining([...rpc.RPC_NODE_FLAGS]),
    );
    await rpc.shutdown();
    const exits = await within(Promise.all(cluster.workers.map((w) => w.exited)), 10_000, "the workers' exit");
    expect(exits).toEqual([
      { code: 0, signal: null },
      { code: 0, signal: null },
    ]);
    // stderr lines reach onOutput one by one, tagged with the worker's name
    expect(lines).toContain("worker1 stderr serving 21");
    expect(lines).toContain("worker2 stderr serving 21");
    await cluster.close(); // nothing left to kill: resolves at once
  }, 40_000);

  it("close() kills workers still serving, and they ignore SIGINT meanwhile", async () => {
    const cluster = await startLocalWorkers({ workers: ["alpha", "beta"], env: NO_NATIVE });
    clusters.push(cluster);
    await rpc.initRpc("master", { ...cluster.initOptions, initTimeoutMs: 20_000 });
    expect(await rpc.rpcSync("beta", (a: number) => a + 1, [1])).toBe(2);
    const pids = cluster.workers.map((w) => w.pid);
    for (const pid of pids) process.kill(pid, "SIGINT");
    await new Promise((r) => setTimeout(r, 300));
    expect(pids.filter(alive)).toEqual(pids);
    expect(await rpc.rpcSync("alpha", (a: number) => a + 1, [2])).toBe(3);
    const closing = cluster.close({ graceMs: 2_000 });
    expect(cluster.close()).toBe(closing); // idempotent
    await within(closing, 5_000, "close()");
    expect(pids.filter(alive)).toEqual([]);
    const exits = await Promise.all(cluster.workers.map((w) => w.exited));
    for (const e of exits) expect(e.signal).toBe("SIGTERM");
  }, 40_000);

  it("leaves no worker behind when the master is SIGKILLed after the group assembled", async () => {
    const { master, workers } = await startMaster("joined");
    masters.push(master);
    expect(workers.filter(alive)).toHaveLength(2);
    master.kill("SIGKILL");
    expect(await gone(workers, 5_000)).toEqual([]);
  }, 40_000);

  it("leaves no worker behind when the master is SIGKILLed while the workers still wait for it", async () => {
    const { master, workers } = await startMaster("starting");
    masters.push(master);
    expect(workers.filter(alive)).toHaveLength(2);
    master.kill("SIGKILL");
    expect(await gone(workers, 5_000)).toEqual([]);
  }, 40_000);

  it("kills the workers when the master gets SIGTERM, and the master still terminates", async () => {
    const { master, workers } = await startMaster("joined");
    masters.push(master);
    const exit = new Promise<NodeJS.Signals | null>((r) => master.once("exit", (_c, s) => r(s)));
    master.kill("SIGTERM");
    expect(await within(exit, 5_000, "the master's exit")).toBe("SIGTERM");
    expect(await gone(workers, 5_000)).toEqual([]);
  }, 40_000);
});

describe("freePort", () => {
  it("hands out distinct bindable ports outside the kernel's ephemeral range", async () => {
    const range = fs.existsSync("/proc/sys/net/ipv4/ip_local_port_range")
      ? fs.readFileSync("/proc/sys/net/ipv4/ip_local_port_range", "utf8").trim().split(/\s+/).map(Number)
      : undefined;
    const ports: number[] = [];
    for (let i = 0; i < 50; i++) ports.push(await freePort());
    expect(new Set(ports).size).toBe(ports.length);
    if (range) for (const p of ports) expect(p < range[0] || p > range[1]).toBe(true);
    // each can be bound by a server afterwards
    for (const p of ports.slice(0, 5)) {
      const s = net.createServer();
      await new Promise<void>((resolve, reject) => {
        s.once("error", reject);
        s.listen(p, "127.0.0.1", resolve);
      });
      await new Promise((r) => s.close(r));
    }
  });
});
