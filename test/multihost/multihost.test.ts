/**
 * Several hosts simulated by network namespaces on one bridge (./netns.ts), each running
 * `tprpc launch` with two workers of one group:
 * 1. the training job of fixtures/train.mjs over 2 hosts gives exactly the losses and weights of the
 *    same job on one host (4 processes on loopback); host 0's workers find their address by the route to
 *    the master, host 1's by `--iface eth0`;
 * 2. with TPRPC_TLS at its default (auto), a capture of every byte on the bridge's ports (tcpdump) holds no
 *    byte of the job's marker tensor nor of the shipped function's source; the same job with
 *    TPRPC_TLS=off shows both in the capture (so the capture would have seen them);
 * 3. a third host without the secret is refused (TLS handshake), and one with the secret that speaks
 *    plain TCP is refused too (auto encrypts between hosts);
 * 4. no process is left in any host namespace once the launchers exit;
 * 5. a host with no route to the master fails with an AddressError, not a timeout;
 * 6. a 3 s partition of one host (its link down, then up) mid-job: TCP waits it out, same results;
 * 7. a host joined through a user-space relay (lossy_router.py: 20 ms each way, 2 % seeded loss, as
 *    this kernel has no netem): same results, bounded time, the relay's counters show forwards and drops;
 * 8. elastic: a dynamic group trains RRef-held shards under distributed autograd (one context per
 *    worker per step); a worker killed on one host is restarted by its launcher and rejoins, gets a
 *    new shard at once, while the master's loop goes on; only contexts involving it fail, losses fall.
 * 9. host loss and join: the same loop over four hosts with two workers each (8 workers); a whole host
 *    is SIGKILLed (every process in its namespace: launcher and both workers at once), the survivors
 *    train on, then a new host (a fifth namespace on the bridge, a new address) joins with two new
 *    workers that get shards and train; only contexts involving the dead host's workers fail, every
 *    live shard's loss falls, no process is left in any namespace.
 * Every wait is bounded. Skipped, with the reason printed, where namespaces cannot be made (not root,
 * no `ip` or tcpdump: bash scripts/setup.sh installs them).
 */
import { type ChildProcess, spawnSync } from "node:child_process";
import fs from "node:fs";
import os from "node:os";
import path from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { TestBed, whyNoTestBed } from "./netns.js";

const root = path.resolve(import.meta.dirname, "../..");
const TPRPC = path.join(root, "bin/tprpc.mjs");
const TRAIN = path.join(root, "test/multihost/fixtures/train.mjs");
const INTRUDER = path.join(root, "test/multihost/fixtures/intruder.mjs");
const ELASTIC = path.join(root, "test/multihost/fixtures/elastic.mjs");
const PORT = "29517";
const SECRET = "multihost-test-secret";

const skip = whyNoTestBed(["tcpdump", "python3"]);
if (skip) console.warn(`[test/multihost] skipped: ${skip}`);
const noTun = fs.existsSync("/dev/net/tun") ? null : "no /dev/net/tun: the lossy relay needs TUN devices";
if (!skip && noTun) console.warn(`[test/multihost] the relayed-link case is skipped: ${noTun}`);

const tmp = fs.mkdtempSync(path.join(os.tmpdir(), "tprpc-multihost-"));
const bed = new TestBed(3);

const baseEnv: NodeJS.ProcessEnv = { ...process.env };
for (const k of Object.keys(baseEnv))
  if (/^(SLURM_|RANK$|WORLD_SIZE$|LOCAL_RANK$|MASTER_|TPRPC_SECRET$|TPRPC_TLS$|TPRPC_ADDR$|TPRPC_IFACE$)/.test(k))
    delete baseEnv[k];

function exited(p: ChildProcess, ms: number, what: string): Promise<number | null> {
  return new Promise((resolve, reject) => {
    if (p.exitCode !== null || p.signalCode !== null) return resolve(p.exitCode);
    const timer = setTimeout(() => {
      p.kill("SIGKILL");
      reject(new Error(`${what} did not exit within ${ms} ms`));
    }, ms);
    p.once("exit", (code) => {
      clearTimeout(timer);
      resolve(code);
    });
  });
}

async function waitForFile(file: string, ms: number, also: () => string | null): Promise<void> {
  const until = Date.now() + ms;
  while (!fs.existsSync(file)) {
    const why = also();
    if (why) throw new Error(why);
    if (Date.now() > until) throw new Error(`${file} did not appear within ${ms} ms`);
    await new Promise((r) => setTimeout(r, 50));
  }
}

interface Result {
  workers: string[];
  losses: number[];
  w: number[];
}

/** Runs the training job; `hosts` null: one host (this namespace, loopback, 4 processes). */
async function job(
  out: string,
  hosts: number[] | null,
  env: NodeJS.ProcessEnv,
  during?: () => Promise<void>,
  meanwhile?: () => Promise<void>,
): Promise<Result> {
  fs.mkdirSync(out, { recursive: true });
  const e = { ...baseEnv, ...env, MH_OUT: out, TPRPC_SECRET: SECRET };
  const launchers: ChildProcess[] = [];
  if (hosts === null) {
    const p = spawnSync(process.execPath, [TPRPC, "launch", "--nproc-per-node", "4", TRAIN], {
      env: { ...e, MASTER_PORT: String(20_000 + (process.pid % 9_000)) },
      stdio: ["ignore", "inherit", "inherit"],
      timeout: 90_000,
      input: undefined,
    });
    expect(p.status).toBe(0);
  } else {
    for (const [r, h] of hosts.entries())
      launchers.push(
        // NB: a pid namespace of its own per host too: hosts sharing the boot id and pid namespace would
        // otherwise pick the cma channel (process_vm_readv), which real hosts never can
        bed.spawnIn(
          bed.ns(h),
          "unshare",
          [
            "--pid",
            "--fork",
            "--kill-child",
            process.execPath,
            TPRPC,
            "launch",
            "--nnodes",
            String(hosts.length),
            "--node-rank",
            String(r),
            "--nproc-per-node",
            "2",
            // NB: host 1 names its interface; the others find it by the route to the master
            ...(r === 1 ? ["--iface", "eth0"] : []),
          ].concat(["--master-addr", bed.addr(hosts[0]!), "--master-port", PORT, TRAIN]),
          { env: e, stdio: ["ignore", "inherit", "inherit"] },
        ),
      );
    const dead = () => {
      const d = launchers.find((l) => l.exitCode !== null && l.exitCode !== 0);
      return d ? `a launcher exited with ${d.exitCode} before the job finished` : null;
    };
    await meanwhile?.();
    await waitForFile(path.join(out, "result.json"), 90_000, dead);
    await during?.();
    fs.writeFileSync(path.join(out, "release"), "");
    const codes = await Promise.all(launchers.map((l, i) => exited(l, 60_000, `the launcher on host ${i}`)));
    expect(codes).toEqual(hosts.map(() => 0));
    for (const h of hosts) expect(bed.pids(bed.ns(h)), `processes left on host ${h}`).toEqual([]);
  }
  return JSON.parse(fs.readFileSync(path.join(out, "result.json"), "utf8")) as Result;
}

/**
 * Starts tcpdump on every interface of the switch namespace (the bridge's ports: frames bridged from port
 * to port never show on br0 itself); stop() ends it and returns the capture's bytes.
 */
async function capture(name: string): Promise<{ stop: () => Promise<Buffer> }> {
  const file = path.join(tmp, `${name}.pcap`);
  const p = bed.spawnIn(
    bed.switchNs,
    "tcpdump",
    ["-i", "any", "-n", "-s", "0", "-U", "--immediate-mode", "-B", "131072", "-w", file],
    {
      stdio: ["ignore", "ignore", "pipe"],
    },
  );
  let err = "";
  await new Promise<void>((resolve, reject) => {
    const timer = setTimeout(() => reject(new Error(`tcpdump did not start within 10 s: ${err}`)), 10_000);
    p.stderr!.on("data", (d: Buffer) => {
      err += d.toString();
      if (err.includes("listening on")) {
        clearTimeout(timer);
        resolve();
      }
    });
    p.once("exit", () => reject(new Error(`tcpdump exited: ${err}`)));
  });
  return {
    stop: async () => {
      // NB: let tcpdump drain what the kernel has queued for it before it is told to stop
      await new Promise((r) => setTimeout(r, 1_000));
      p.kill("SIGINT");
      await exited(p, 10_000, "tcpdump");
      console.log(`[test/multihost] tcpdump: ${err.trim().split("\n").slice(-3).join("; ")}`);
      return fs.readFileSync(file);
    },
  };
}

function runIn(ns: string, args: string[], env: NodeJS.ProcessEnv): string {
  const r = spawnSync("ip", ["netns", "exec", ns, process.execPath, ...args], {
    env: { ...baseEnv, ...env },
    encoding: "utf8",
    timeout: 30_000,
  });
  return `${r.stdout}${r.stderr}`;
}

/** The pid in host h's namespace whose command line passes `test`. */
function pidIn(h: number, test: (cmdline: string) => boolean): number | undefined {
  return bed.pids(bed.ns(h)).find((pid) => {
    try {
      return test(fs.readFileSync(`/proc/${pid}/cmdline`, "utf8").split("\0").join(" "));
    } catch {
      return false;
    }
  });
}

function launcherPid(h: number): number {
  const pid = pidIn(h, (cmd) => cmd.includes("tprpc.mjs launch") && !cmd.startsWith("unshare"));
  if (pid === undefined) throw new Error(`no launcher runs on host ${h}`);
  return pid;
}

describe.skipIf(skip !== null)("multi-host: namespaces on a bridge, tprpc launch on each", () => {
  beforeAll(() => bed.setup(), 60_000);
  afterAll(() => {
    bed.teardown();
    fs.rmSync(tmp, { recursive: true, force: true });
  });

  let reference: Result;

  it("runs the training job on one host (the reference)", async () => {
    const out = path.join(tmp, "one");
    fs.mkdirSync(out);
    fs.writeFileSync(path.join(out, "release"), "");
    reference = await job(out, null, {});
    expect(reference.workers).toEqual(["worker1", "worker2", "worker3"]);
    expect(reference.losses.at(-1)!).toBeLessThan(reference.losses[0]! / 4);
  }, 120_000);

  it("over two hosts with TLS (auto): identical results; the bridge sees no plain tensor or source; strangers refused", async () => {
    const cap = await capture("tls");
    const refusals: string[] = [];
    const result = await job(path.join(tmp, "tls"), [0, 1], {}, async () => {
      const at = `tcp://${bed.addr(0)}:${PORT}`;
      refusals.push(runIn(bed.ns(2), [INTRUDER, at], { TPRPC_SECRET: "not-the-secret" }));
      refusals.push(runIn(bed.ns(2), [INTRUDER, at], { TPRPC_SECRET: SECRET, TPRPC_TLS: "off" }));
    });
    const bytes = await cap.stop();
    expect(result).toEqual(reference);
    expect(refusals[0]).toMatch(/^REFUSED AuthenticationError: .*TLS handshake with .* failed/m);
    expect(refusals[1]).toMatch(/^REFUSED AuthenticationError: /m);
    expect(refusals.join("")).not.toContain("JOINED");
    expect(bed.pids(bed.ns(2))).toEqual([]);
    // the capture holds the job's traffic (8 steps x 3 workers x a 96 KiB tensor, at least), encrypted
    expect(bytes.length).toBeGreaterThan(8 * 3 * 98_304);
    expect(bytes.includes(Buffer.from("PLAINTEXT-TENSOR-MARKER"))).toBe(false);
    expect(bytes.includes(Buffer.from("SHIPPED-SOURCE-MARKER"))).toBe(false);
    expect(bytes.includes(Buffer.from("TPRPCS1"))).toBe(true); // the TLS preamble: these are our connections
  }, 240_000);

  it("over two hosts with TPRPC_TLS=off: the same results, and the capture shows the plain bytes", async () => {
    const cap = await capture("plain");
    const result = await job(path.join(tmp, "plain"), [0, 1], { TPRPC_TLS: "off" });
    const bytes = await cap.stop();
    expect(result).toEqual(reference);
    expect(bytes.includes(Buffer.from("PLAINTEXT-TENSOR-MARKER"))).toBe(true);
    expect(bytes.includes(Buffer.from("SHIPPED-SOURCE-MARKER"))).toBe(true);
  }, 240_000);

  it("a partition of host 1 for 3 s, then healed: the job waits it out and ends with the same results", async () => {
    const out = path.join(tmp, "partition");
    let cutAt = 0;
    let healedAt = 0;
    let finishedCut = true;
    const result = await job(out, [0, 1], { MH_STEP_DELAY_MS: "300" }, undefined, async () => {
      const step = path.join(out, "step");
      await waitForFile(step, 60_000, () => null);
      while (Number(fs.readFileSync(step, "utf8")) < 1) await new Promise((r) => setTimeout(r, 20));
      // NB: the host's side of its link goes down: nothing reaches the bridge from it, nor it from the bridge
      bed.link(1, false);
      cutAt = Date.now();
      await new Promise((r) => setTimeout(r, 3_000));
      // NB: unhindered, the 6 steps left (300 ms each) would have ended within these 3 s
      finishedCut = fs.existsSync(path.join(out, "result.json"));
      bed.link(1, true);
      healedAt = Date.now();
    });
    expect(healedAt - cutAt).toBeGreaterThanOrEqual(3_000);
    expect(finishedCut).toBe(false); // the partition held the job up
    expect(result).toEqual(reference);
  }, 240_000);

  it.skipIf(noTun !== null)(
    "over a relayed link with 20 ms delay each way and 2 % loss: the same results, in bounded time",
    async () => {
      // host 3 is not on the bridge: every packet between it and host 0 passes through lossy_router.py
      const relay = await bed.relayedHost(3, 20, 0.02, 20_261_126);
      let counts: Record<string, number> = {};
      const t0 = Date.now();
      try {
        const result = await job(path.join(tmp, "lossy"), [0, 3], {});
        expect(result).toEqual(reference);
      } finally {
        counts = await relay.stop();
      }
      const seconds = (Date.now() - t0) / 1000;
      console.log(`[test/multihost] lossy link: ${JSON.stringify(counts)}, job ${seconds.toFixed(1)} s`);
      expect(seconds).toBeLessThan(120);
      expect(counts.delayMs).toBe(20);
      expect(counts.minHeldMs).toBeGreaterThanOrEqual(20); // no packet overtook its delay
      // the job's traffic (8 steps x a 96 KiB tensor each way, at least) went through, and the draw dropped some
      expect(counts.forwarded).toBeGreaterThan(500);
      expect(counts.dropped).toBeGreaterThan(0);
      expect(counts.dropped! / (counts.forwarded! + counts.dropped!)).toBeLessThan(0.05);
    },
    240_000,
  );

  it("elastic: a worker killed on one host is restarted by its launcher and rejoins; the loop goes on", async () => {
    const out = path.join(tmp, "elastic");
    fs.mkdirSync(out);
    const env = { ...baseEnv, MH_OUT: out, TPRPC_SECRET: SECRET };
    const port = "29518";
    const launch = (h: number, extra: string[]) =>
      bed.spawnIn(
        bed.ns(h),
        "unshare",
        ["--pid", "--fork", "--kill-child", process.execPath, TPRPC, "launch", "--dynamic", "--nnodes", "3"].concat([
          "--node-rank",
          String(h),
          "--master-addr",
          bed.addr(0),
          "--master-port",
          port,
          ...extra,
        ]),
        { env, stdio: ["ignore", "inherit", "inherit"] },
      );
    const master = launch(0, ["--nproc-per-node", "1", ELASTIC]);
    const hostA = launch(1, ["--nproc-per-node", "2", "--max-restarts", "1", "--worker"]);
    const hostB = launch(2, ["--nproc-per-node", "2", "--worker"]);
    const progress = () =>
      fs.existsSync(path.join(out, "progress.json"))
        ? (JSON.parse(fs.readFileSync(path.join(out, "progress.json"), "utf8")) as { step: number; live: string[] })
        : null;
    const dead = () =>
      [master, hostA, hostB].some((l) => l.exitCode !== null) ? "a launcher exited before the job finished" : null;
    const until = Date.now() + 60_000;
    for (;;) {
      const p = progress();
      if (p && p.live.length === 4 && p.step >= 3) break;
      if (dead()) throw new Error(dead()!);
      if (Date.now() > until) throw new Error(`the 4 workers did not join within 60 s: ${JSON.stringify(p)}`);
      await new Promise((r) => setTimeout(r, 50));
    }
    // kill worker2 (host 1's first child) hard: its launcher restarts it, and it rejoins as worker2
    const victim = pidIn(1, (cmd) => cmd.includes("--name worker2"));
    expect(victim).toBeDefined();
    process.kill(victim!, "SIGKILL");
    await waitForFile(path.join(out, "result.json"), 120_000, dead);
    const r = JSON.parse(fs.readFileSync(path.join(out, "result.json"), "utf8")) as {
      events: [string, string][];
      failures: [number, string][];
      answeredAll: number;
      losses: Record<string, number[]>;
      contexts: number;
    };
    expect(r.answeredAll).toBe(5);
    // distributed autograd over RRef-held shards: every shard's loss fell, the rejoined worker2's since
    // its new shard was made; no context is left on the master
    expect(Object.keys(r.losses)).toHaveLength(4);
    for (const [n, l] of Object.entries(r.losses)) {
      expect(l.length, n).toBeGreaterThanOrEqual(5);
      expect(l.at(-1)!, n).toBeLessThan(l[0]!);
    }
    expect(r.contexts).toBe(0);
    const left = r.events.findIndex(([k, n]) => k === "leave" && n === "worker2");
    expect(left).toBeGreaterThanOrEqual(0);
    expect(r.events.slice(left + 1)).toContainEqual(["join", "worker2"]);
    for (const [, to] of r.failures) expect(to).toBe("worker2"); // only calls to the killed worker failed
    // NB: to the launchers themselves: unshare, their parent, does not forward signals
    for (const h of [1, 2]) process.kill(launcherPid(h), "SIGTERM");
    const codes = await Promise.all([
      exited(hostA, 60_000, "host 1's launcher"),
      exited(hostB, 60_000, "host 2's launcher"),
    ]);
    fs.writeFileSync(path.join(out, "release"), "");
    codes.push(await exited(master, 60_000, "host 0's launcher"));
    expect(codes).toEqual([0, 0, 0]);
    for (const h of [0, 1, 2]) expect(bed.pids(bed.ns(h)), `processes left on host ${h}`).toEqual([]);
  }, 300_000);

  it("elastic over four hosts: a whole host killed, a new host joins; the loop goes on, losses fall", async () => {
    const t0 = Date.now();
    const out = path.join(tmp, "hostloss");
    fs.mkdirSync(out);
    const env = { ...baseEnv, MH_OUT: out, TPRPC_SECRET: SECRET, MH_WORKERS: "8", MH_LIMIT_MS: "150000" };
    const port = "29519";
    // hosts 0, 1, 2 and 4 (3 is the relayed one) hold two workers each; host 5 is plugged in later
    bed.addHost(4);
    const launch = (h: number, nodeRank: number, extra: string[]) =>
      bed.spawnIn(
        bed.ns(h),
        "unshare",
        ["--pid", "--fork", "--kill-child", process.execPath, TPRPC, "launch", "--dynamic", "--nnodes", "6"].concat([
          "--node-rank",
          String(nodeRank),
          "--master-addr",
          bed.addr(0),
          "--master-port",
          port,
          ...extra,
        ]),
        { env, stdio: ["ignore", "inherit", "inherit"] },
      );
    // NB: node rank n's children are worker<2n>, worker<2n+1>; the master is rank 0 of a launcher of its own
    const master = launch(0, 0, ["--nproc-per-node", "1", ELASTIC]);
    const hosts = new Map<number, ChildProcess>();
    for (const [h, n] of [
      [0, 1],
      [1, 2],
      [2, 3],
      [4, 4],
    ] as const)
      hosts.set(h, launch(h, n, ["--nproc-per-node", "2", "--worker"]));
    const progress = () =>
      fs.existsSync(path.join(out, "progress.json"))
        ? (JSON.parse(fs.readFileSync(path.join(out, "progress.json"), "utf8")) as { step: number; live: string[] })
        : null;
    const waitLive = async (want: string[], ms: number, what: string) => {
      const until = Date.now() + ms;
      const first = progress()?.step ?? -1;
      for (;;) {
        const p = progress();
        if (p && JSON.stringify(p.live) === JSON.stringify(want) && p.step >= first + 3) return;
        if (master.exitCode !== null) throw new Error("the master's launcher exited before the job finished");
        if (Date.now() > until) throw new Error(`${what} within ${ms} ms: ${JSON.stringify(p)}`);
        await new Promise((r) => setTimeout(r, 50));
      }
    };
    const names = (ranks: number[]) => ranks.map((r) => `worker${r}`).sort();
    await waitLive(names([2, 3, 4, 5, 6, 7, 8, 9]), 90_000, "the 8 workers did not all train");
    // host 1 dies whole: every process in its namespace (unshare, its launcher, worker4, worker5) SIGKILLed
    const doomed = bed.pids(bed.ns(1));
    expect(doomed.length).toBeGreaterThanOrEqual(4);
    for (const pid of doomed) process.kill(pid, "SIGKILL");
    expect(await exited(hosts.get(1)!, 10_000, "host 1's launcher")).toBe(null);
    hosts.delete(1);
    await waitLive(names([2, 3, 6, 7, 8, 9]), 60_000, "the survivors did not go on training");
    // a new host (new namespace, new address) joins with two new workers
    bed.addHost(5);
    hosts.set(5, launch(5, 5, ["--nproc-per-node", "2", "--worker"]));
    await waitForFile(path.join(out, "result.json"), 150_000, () =>
      master.exitCode !== null ? "the master's launcher exited before the job finished" : null,
    );
    const r = JSON.parse(fs.readFileSync(path.join(out, "result.json"), "utf8")) as {
      events: [string, string][];
      failures: [number, string][];
      answeredAll: number;
      losses: Record<string, number[]>;
      steps: number;
      live: string[];
      contexts: number;
    };
    expect(r.answeredAll).toBe(5);
    expect(r.live).toEqual(names([2, 3, 6, 7, 8, 9, 10, 11]));
    // the dead host's two workers left (and never came back); the new host's two joined after
    const leaves = r.events.filter(([k]) => k === "leave").map(([, n]) => n);
    expect(leaves.sort()).toEqual(["worker4", "worker5"]);
    const lastLeave = Math.max(...leaves.map((n) => r.events.findIndex((e) => e[0] === "leave" && e[1] === n)));
    expect(r.events.slice(lastLeave + 1)).toEqual(
      expect.arrayContaining([
        ["join", "worker10"],
        ["join", "worker11"],
      ]),
    );
    // only contexts involving the dead host's workers failed (typed: WorkerUnavailableError, else the loop throws)
    for (const [, to] of r.failures) expect(["worker4", "worker5"]).toContain(to);
    // distributed autograd over RRef-held shards: every live shard's loss fell, the new workers' included
    for (const n of r.live) {
      const l = r.losses[n]!;
      expect(l.length, n).toBeGreaterThanOrEqual(5);
      expect(l.at(-1)!, n).toBeLessThan(l[0]!);
    }
    expect(r.contexts).toBe(0);
    // NB: to the launchers themselves: unshare, their parent, does not forward signals
    for (const h of hosts.keys())
      process.kill(
        pidIn(h, (cmd) => cmd.includes("tprpc.mjs launch") && cmd.includes("--worker") && !cmd.startsWith("unshare"))!,
        "SIGTERM",
      );
    const codes = await Promise.all([...hosts].map(([h, l]) => exited(l, 60_000, `host ${h}'s launcher`)));
    fs.writeFileSync(path.join(out, "release"), "");
    codes.push(await exited(master, 60_000, "host 0's master launcher"));
    expect(codes).toEqual([0, 0, 0, 0, 0]);
    for (const h of [0, 1, 2, 4, 5]) expect(bed.pids(bed.ns(h)), `processes left on host ${h}`).toEqual([]);
    console.log(
      `[test/multihost] host loss and join: ${r.steps} steps, ${r.failures.length} contexts failed (dead host), ${((Date.now() - t0) / 1000).toFixed(1)} s`,
    );
  }, 360_000);

  it("a host with no route to the master fails with an AddressError", () => {
    const ns = bed.isolated();
    const address = path.join(root, "dist/sdk/rpc/address.js");
    const out = runIn(
      ns,
      [
        "-e",
        `import(${JSON.stringify(address)}).then((m) => m.advertisedAddress(${JSON.stringify(bed.addr(0))}, ${PORT}))` +
          `.then((a) => console.log("ADDR " + a), (e) => console.log(e.name + ": " + e.message))`,
      ],
      {},
    );
    expect(out).toMatch(/^AddressError: no address of this host reaches the group's master 10\./);
  });
});
