/**
 * `npm run bench -- --collectives`: tprpc.distributed beside torch.distributed (gloo), measured in one run.
 *
 * 1. torch: bench/reference/torch_collectives.py under /usr/bin/python3 (TPRPC_TORCH_PYTHON overrides):
 *    gloo send/recv round trips between 2 processes and all_reduce in 3 and 4 processes (spawned with
 *    torch.multiprocessing). Missing torch prints why and the tprpc columns are still measured.
 * 2. tprpc, point-to-point, per cpu channel (shm, cma, tcp; each pinned with TPRPC_CHANNELS / options.channels,
 *    skipped where not viable): this process (rank 0) and one worker; rank 0 sends a float32 tensor and
 *    receives it back (the worker runs a shipped recv-then-send loop). Beside it, rpcSync identity round
 *    trips of a tensor of the same size on the same pipe, and p2p round trips receiving into a view of part
 *    of a storage (over cma and tcp its bytes land in the view when the receive is posted first, as in a
 *    whole tensor; over shm a landed block is copied into the view, while a whole storage adopts it). The three kinds
 *    alternate in blocks of calls; each figure is the median of single calls, a block's first call (where the
 *    kind switches, paying what the kind before left: cold caches, a scavenge due) kept apart and printed on its
 *    own: the acceptance is p2p no slower than rpcSync at 4 MB. The acceptance lines also give the ratio with the kinds alternating call by
 *    call (a process that mixes both, see p2pOver). Beside it, the GC time rank 0 spent inside the calls of each kind
 *    (PerformanceObserver "gc"), per round trip: on a loaded machine it is the term that moves most; and the CPU time
 *    per round trip of both processes, every thread, per kind.
 * 3. tprpc, allReduce (SUM, in place) in 3 and 4 processes, every rank running the same shipped loop; rank
 *    0's median per call, for two algorithms with their trials interleaved: the default (shared memory
 *    between processes on one host, sdk/distributed/host_shm.ts) and TPRPC_ALLREDUCE_ALGO=pipes (the
 *    ring/direct algorithms over the channels, as between hosts). Bus bandwidth = bytes / t * 2 (n - 1) / n
 *    (nccl-tests' definition), beside gloo's. The last lines print the acceptance ratios of issue #18.
 * `--no-torch`, `--no-p2p` and `--no-allreduce` skip a part (step 1, 2 or 3); `--p2p-channels=shm,cma` measures
 * step 2 over those channels only.
 *
 * Timing as bench/reference/timing.py (after a JIT warm-up of both p2p and rpcSync per channel): warm-up,
 * then trials of a batch, the median per call; fewer repetitions with --quick (sizes up to 40 MB then). On a loaded machine the figures move a lot: compare
 * the ratios printed from this one run, never figures from different runs.
 */
import { spawnSync } from "node:child_process";
import fs from "node:fs";
import path from "node:path";
import { PerformanceObserver } from "node:perf_hooks";
import * as sdk from "../sdk/index.js";
import { type Tensor, rpc } from "../sdk/index.js";
import { cmaChannelContext } from "../sdk/channel/cma/index.js";
import { startLocalWorkers } from "../sdk/rpc/launcher.js";
import { type Plan, fmtTime, identity, median, now, repoRoot, warmUp } from "./rpc_common.js";

// NB: shipped functions name the SDK `tprpc` on the workers; rank 0 runs the same functions here.
declare const tprpc: typeof import("../sdk/index.js");
(globalThis as Record<string, unknown>).tprpc = sdk;

const P2P_SIZES = [4_000, 4_000_000, 40_000_000];
const SIZES = [4_000, 400_000, 4_000_000, 40_000_000, 400_000_000];
const WORLDS = [3, 4];

function plan(nbytes: number, quick: boolean): Plan {
  if (nbytes <= 4_000) return quick ? [20, 5, 20] : [100, 15, 50];
  if (nbytes <= 4_000_000) return quick ? [3, 3, 6] : [5, 6, 10];
  if (nbytes <= 40_000_000) return quick ? [2, 3, 1] : [3, 7, 1];
  return quick ? [1, 2, 1] : [1, 3, 1];
}

/** The worker's side of the round trips: `count` times, receive from rank 0 and send it back. */
async function echoLoop(nbytes: number, count: number): Promise<void> {
  const t = tprpc.zeros([nbytes / 4]);
  for (let i = 0; i < count; i++) {
    await tprpc.distributed.recv(t, 0);
    await tprpc.distributed.send(t, 0);
  }
}

/**
 * The allReduce algorithms compared in one run (TPRPC_ALLREDUCE_ALGO on every rank): "auto" is what
 * a user gets (shared memory between processes on one host), "pipes" the ring/direct algorithms
 * over the channels (what runs between hosts).
 */
const ALGOS = ["auto", "pipes"] as const;

/**
 * Every rank: median seconds per allReduce of `nbytes`, per algorithm of `algos`. The algorithms'
 * trials interleave (A, B, A, B, ...), so a load that changes during the run moves both alike.
 */
async function allReduceLoop(nbytes: number, [warm, trials, batch]: Plan, algos: readonly string[]): Promise<number[]> {
  const d = tprpc.distributed;
  const t = tprpc.ones([nbytes / 4]);
  const per: number[][] = algos.map(() => []);
  for (const algo of algos) {
    process.env.TPRPC_ALLREDUCE_ALGO = algo;
    for (let i = 0; i < warm; i++) await d.allReduce(t);
  }
  for (let k = 0; k < trials; k++)
    for (const [a, algo] of algos.entries()) {
      process.env.TPRPC_ALLREDUCE_ALGO = algo;
      await d.barrier();
      const t0 = performance.now();
      for (let i = 0; i < batch; i++) await d.allReduce(t);
      per[a]!.push((performance.now() - t0) / 1e3 / batch);
    }
  delete process.env.TPRPC_ALLREDUCE_ALGO;
  return per.map((xs) => xs.sort((x, y) => x - y)[xs.length >> 1]!);
}

interface Torch {
  p2p: Map<number, number>;
  /** `${world}/${bytes}` -> seconds */
  allReduce: Map<string, number>;
  header: string;
}

function runTorch(quick: boolean): Torch | string {
  const script = path.join(repoRoot() ?? ".", "bench", "reference", "torch_collectives.py");
  if (!fs.existsSync(script)) return "bench/reference/torch_collectives.py not found";
  const python = process.env.TPRPC_TORCH_PYTHON ?? "/usr/bin/python3";
  const sizes = quick ? SIZES.filter((n) => n <= 40_000_000) : SIZES;
  const args = [script, "--sizes", sizes.join(","), "--p2p-sizes", P2P_SIZES.join(","), "--worlds", WORLDS.join(",")];
  const r = spawnSync(python, quick ? [...args, "--quick"] : args, { encoding: "utf8", timeout: 1_800_000 });
  if (r.error) return `${python}: ${r.error.message}`;
  if (r.status !== 0) return `${python} exited ${r.status}: ${(r.stderr ?? "").trim().slice(-300)}`;
  const out: Torch = { p2p: new Map(), allReduce: new Map(), header: "" };
  for (const line of r.stdout.split("\n")) {
    if (line.startsWith("# ")) out.header = line.slice(2);
    const p = /^p2p round trip ([\d,]+) B ([\d.]+) s/.exec(line);
    if (p) out.p2p.set(Number(p[1]!.replace(/,/g, "")), Number(p[2]));
    const a = /^all_reduce (\d+) procs ([\d,]+) B ([\d.]+) s/.exec(line);
    if (a) out.allReduce.set(`${a[1]}/${Number(a[2]!.replace(/,/g, ""))}`, Number(a[3]));
  }
  return out;
}

/** Per kind of batch (p2p, rpcSync, p2p copying): median s per round trip, rank 0's GC ms per round trip. */
interface P2PFigures {
  p2p: number;
  rpc: number;
  copy: number;
  gc: [p2p: number, rpc: number, copy: number];
  /** CPU s per round trip of rank 0 and the worker together (every thread), per kind: see p2pOver. */
  cpu: [p2p: number, rpc: number, copy: number];
  /** rpcSync / p2p with the two alternating call by call (see p2pOver). */
  mixedRatio: number;
  /** Median s of each block's first call, per kind (null: blocks of one call, nothing kept apart). */
  first: [p2p: number, rpc: number, copy: number] | null;
  batch: number;
}

/** Blocks of at least this many calls keep their first call apart from the kind's figure (see p2pOver). */
const SETTLE_MIN_BATCH = 4;

/** This process's CPU time so far, every thread, in s (shipped: the worker answers it too). */
function cpuSeconds(): number {
  const u = process.cpuUsage();
  return (u.user + u.system) / 1e6;
}

/** Point-to-point and rpcSync round trips over one channel, by bytes. */
async function p2pOver(channel: string, quick: boolean): Promise<Map<number, P2PFigures>> {
  const cluster = await startLocalWorkers({ workers: 1, env: { TPRPC_CHANNELS: channel } });
  const out = new Map<number, P2PFigures>();
  const gcs: { start: number; ms: number }[] = [];
  const obs = new PerformanceObserver((l) => {
    for (const e of l.getEntries()) gcs.push({ start: e.startTime, ms: e.duration });
  });
  obs.observe({ entryTypes: ["gc"] });
  // NB: windows are [from, to] in performance.now() ms; a GC counts for the batch it started in
  const gcIn = (windows: [number, number][]) => {
    for (const e of obs.takeRecords()) gcs.push({ start: e.startTime, ms: e.duration });
    return gcs.filter((g) => windows.some(([a, b]) => g.start >= a && g.start < b)).reduce((s, g) => s + g.ms, 0);
  };
  try {
    await rpc.initRpc("master", {
      ...cluster.initOptions,
      rpcTimeoutMs: 300_000,
      initTimeoutMs: 30_000,
      channels: channel,
    });
    const got = (await rpc.pipeInfo("worker1")).channels["cpu-cpu"];
    if (got !== channel) throw new Error(`the pipe chose ${got}, not ${channel}`);
    // NB: JIT warm-up of both paths before anything is timed (the 4 KB figures measured cold code before)
    await warmUp("worker1", quick);
    const jit = quick ? 1_000 : 3_000;
    const warmEcho = rpc.rpcAsync("worker1", echoLoop, [4_000, jit]);
    const small = sdk.ones([1_000]);
    for (let i = 0; i < jit; i++) {
      await sdk.distributed.send(small, 1);
      await sdk.distributed.recv(small, 1);
    }
    await warmEcho;
    for (const n of P2P_SIZES) {
      const [warm, trials, batch] = plan(n, quick);
      // NB: two kinds of p2p batches, so the worker echoes twice as many
      const echo = rpc.rpcAsync("worker1", echoLoop, [n, 2 * warm + 4 * trials * batch]);
      const t = sdk.ones([n / 4]);
      const x = sdk.ones([n / 4]);
      // a view of part of a storage: over shm a receive into it copies a landed block (into t, a whole
      // storage, it adopts); over cma and tcp the bytes land in either (sdk/distributed/mailbox.ts rule 7)
      const c = sdk.ones([n / 4 + 1]).narrow(0, 0, n / 4);
      const roundTrip = async (y: Tensor) => {
        await sdk.distributed.send(y, 1);
        await sdk.distributed.recv(y, 1);
      };
      for (let i = 0; i < warm; i++) {
        await roundTrip(t);
        await rpc.rpcSync("worker1", identity, [x]);
        await roundTrip(c);
      }
      // NB: the worker serves the rpcSync calls while its echo loop waits
      const kinds: (() => Promise<unknown>)[] = [
        () => roundTrip(t),
        () => rpc.rpcSync("worker1", identity, [x]),
        () => roundTrip(c),
      ];
      // NB: the kinds alternate in blocks of `batch` calls (A×batch, B×batch, C×batch, A×batch, ...), and each
      // figure is the median of single calls. Alternating keeps a load that changes during the run on every
      // kind alike (batches of one kind after another did not: 0.36x to 1.26x between runs); blocks let each
      // kind run in its own steady state. Call by call, the scavenge that an rpcSync call's garbage made due
      // ran inside the p2p call after it, in both processes (bench/p2p_timeline.ts: every one of ~150 per 300
      // pairs): a cost of mixing the two, measured apart below. In blocks, the first call after an rpcSync
      // block pays it.
      const per: number[][] = kinds.map(() => []);
      const first: number[][] = kinds.map(() => []);
      const windows: [number, number][][] = kinds.map(() => []);
      const mixed: number[][] = kinds.map(() => []);
      const cpu = kinds.map(() => 0);
      const cpuBoth = async () => cpuSeconds() + (await rpc.rpcSync<number>("worker1", cpuSeconds, []));
      let cpuMark = await cpuBoth();
      for (let k = 0; k < trials; k++)
        for (const [j, call] of kinds.entries()) {
          for (let b = 0; b < batch; b++) {
            const t0 = now();
            const w0 = performance.now();
            await call();
            // NB: a block's first call is where the kind switches: it pays the caches the other kinds left
            // cold (rpcSync cycles through ~20 landing blocks, p2p reuses 2) and the scavenge their garbage
            // made due (see above); 1.3-2.4x a steady call for every kind (bench/p2p_timeline.ts). It is
            // kept apart, for every kind alike, so that each figure is the kind's own steady round trip
            (b === 0 && batch >= SETTLE_MIN_BATCH ? first : per)[j]!.push(now() - t0);
            windows[j]!.push([w0, performance.now()]);
          }
          // NB: CPU of both processes, every thread (GC, the channels' threads), from the end of the block
          // before to the end of this one: wall time on a loaded machine includes waiting for a core, CPU time
          // does not. Each interval holds one cpuBoth call (a small rpcSync), alike for every kind. The
          // scavenge an rpcSync block's garbage makes due runs in the next block's first call (the first
          // allocation there crosses V8's threshold; bench/p2p_timeline.ts), so it counts for that kind:
          // against the p2p kinds, which follow rpcSync here
          const c = await cpuBoth();
          cpu[j]! += c - cpuMark;
          cpuMark = c;
        }
      // the same calls alternating call by call (A, B, C, A, ...): the mixed figure
      for (let k = 0; k < trials * batch; k++)
        for (const [j, call] of kinds.entries()) {
          const t0 = now();
          await call();
          mixed[j]!.push(now() - t0);
        }
      await echo;
      for (const y of [t, c])
        if (y.min().item() !== 1 || y.max().item() !== 1) throw new Error(`p2p echo of ${n} B came back changed`);
      const gc = windows.map((w) => gcIn(w) / (trials * batch));
      out.set(n, {
        p2p: median(per[0]!),
        rpc: median(per[1]!),
        copy: median(per[2]!),
        gc: [gc[0]!, gc[1]!, gc[2]!],
        cpu: [cpu[0]! / (trials * batch), cpu[1]! / (trials * batch), cpu[2]! / (trials * batch)],
        mixedRatio: median(mixed[1]!) / median(mixed[0]!),
        first: first[0]!.length > 0 ? [median(first[0]!), median(first[1]!), median(first[2]!)] : null,
        batch,
      });
    }
    await rpc.shutdown({ timeoutMs: 10_000 });
  } finally {
    obs.disconnect();
    await rpc.shutdown({ graceful: false, timeoutMs: 5_000 }).catch(() => undefined);
    await cluster.close();
  }
  return out;
}

/** allReduce in `world` processes: bytes -> rank 0's median seconds per algorithm of ALGOS. */
async function allReduceIn(world: number, sizes: number[], quick: boolean): Promise<Map<number, number[]>> {
  const cluster = await startLocalWorkers({ workers: world - 1 });
  const out = new Map<number, number[]>();
  try {
    await rpc.initRpc("master", { ...cluster.initOptions, rpcTimeoutMs: 600_000, initTimeoutMs: 30_000 });
    for (const n of sizes) {
      const p = plan(n, quick);
      const others = cluster.workers.map((w) => rpc.rpcSync<number[]>(w.name, allReduceLoop, [n, p, ALGOS]));
      out.set(n, await allReduceLoop(n, p, ALGOS));
      await Promise.all(others);
      (globalThis as { gc?: () => void }).gc?.();
    }
    await rpc.shutdown({ timeoutMs: 10_000 });
  } finally {
    await rpc.shutdown({ graceful: false, timeoutMs: 5_000 }).catch(() => undefined);
    await cluster.close();
  }
  return out;
}

const fmtBytes = (n: number) => (n >= 1e6 ? `${n / 1e6} MB` : `${n / 1e3} KB`);
const gbs = (bytes: number, s: number | undefined) => (s === undefined ? "-" : `${(bytes / s / 1e9).toFixed(2)} GB/s`);
const ratio = (r: number | undefined) => (r === undefined || !Number.isFinite(r) ? "-" : `${r.toFixed(2)}x`);

export async function collectivesBench(quick: boolean): Promise<void> {
  const wall = now();
  const torch = process.argv.includes("--no-torch") ? "skipped (--no-torch)" : runTorch(quick);
  const t = typeof torch === "string" ? undefined : torch;
  // NB: --p2p-channels=shm,tcp measures only those (default: every viable cpu channel)
  const only = process.argv
    .find((a) => a.startsWith("--p2p-channels="))
    ?.slice("--p2p-channels=".length)
    .split(",");
  const channels = process.argv.includes("--no-p2p")
    ? []
    : ["shm", "cma", "tcp"].filter(
        (c) => (c !== "cma" || !cmaChannelContext.whyNotViable()) && (!only || only.includes(c)),
      );
  const p2p = new Map<string, Map<number, P2PFigures>>();
  for (const c of channels) p2p.set(c, await p2pOver(c, quick));
  const sizes = quick ? SIZES.filter((n) => n <= 40_000_000) : SIZES;
  const worlds = process.argv.includes("--no-allreduce") ? [] : WORLDS;
  const ar = new Map<number, Map<number, number[]>>();
  for (const w of worlds) ar.set(w, await allReduceIn(w, sizes, quick));

  console.log("");
  console.log("tprpc bench: tprpc.distributed beside torch.distributed (gloo), local processes, measured in this run");
  console.log(typeof torch === "string" ? `torch reference unavailable (${torch})` : `torch: ${torch.header}`);
  if (channels.length > 0) {
    console.log("round trip = rank 0 sends a float32 tensor to rank 1 and receives it back; GB/s counts both ways");
    console.log("");
    const head =
      "send/recv round trip".padEnd(26) +
      ["tprpc p2p", "tprpc rpcSync", "p2p vs rpcSync", "gloo", "p2p vs gloo"].map((h) => h.padStart(24)).join("");
    console.log(head);
    console.log("-".repeat(head.length));
    for (const c of channels)
      for (const n of P2P_SIZES) {
        const { p2p: p, rpc: r } = p2p.get(c)!.get(n)!;
        const g = t?.p2p.get(n);
        const cell = (s: number | undefined) =>
          s === undefined ? "-" : n >= 4_000_000 ? `${fmtTime(s)} (${gbs(2 * n, s)})` : fmtTime(s);
        console.log(
          `${c}, ${fmtBytes(n)}`.padEnd(26) +
            [cell(p), cell(r), ratio(r / p), cell(g), ratio(g === undefined ? undefined : g / p)]
              .map((x) => x.padStart(24))
              .join(""),
        );
      }
    console.log("(ratios: > 1 means tprpc p2p is faster; gloo has one transport, tcp)");
    console.log("");
  }
  const head2 =
    "allReduce (sum), bus bandwidth".padEnd(30) +
    ["tprpc", "tprpc pipes (ring)", "gloo", "tprpc / gloo", "pipes / gloo", "tprpc / pipes"]
      .map((h, i) => h.padStart(i < 3 ? 26 : 15))
      .join("");
  console.log(head2);
  console.log("-".repeat(head2.length));
  for (const w of worlds)
    for (const n of sizes) {
      const [s, r] = ar.get(w)!.get(n)!;
      const g = t?.allReduce.get(`${w}/${n}`);
      const bus = (x: number | undefined) =>
        x === undefined ? "-" : `${fmtTime(x)} (${gbs((n * 2 * (w - 1)) / w, x)})`;
      console.log(
        `${w} processes, ${fmtBytes(n)}`.padEnd(30) +
          [bus(s), bus(r), bus(g)].map((x) => x.padStart(26)).join("") +
          [ratio(s && g ? g / s : undefined), ratio(r && g ? g / r : undefined), ratio(s && r ? r / s : undefined)]
            .map((x) => x.padStart(15))
            .join(""),
      );
    }
  console.log(
    "(tprpc: the default algorithm, shared memory between processes on one host; pipes: TPRPC_ALLREDUCE_ALGO=pipes, " +
      "the ring/direct algorithms over the channels; their trials interleave in one run)",
  );
  console.log("");
  console.log("acceptance (issue #18):");
  for (const w of worlds)
    for (const n of [40_000_000, 400_000_000].filter((x) => sizes.includes(x))) {
      const s = ar.get(w)!.get(n)![0];
      const g = t?.allReduce.get(`${w}/${n}`);
      const r = s && g ? g / s : undefined;
      console.log(
        `  allReduce ${w} processes ${fmtBytes(n)}: tprpc / gloo bus bandwidth ${ratio(r)} (goal >= 2x) ` +
          (r === undefined ? "not measured" : r >= 2 ? "MET" : "NOT MET"),
      );
    }
  for (const c of channels) {
    const { p2p: p, rpc: r, copy, gc, cpu, mixedRatio, first, batch } = p2p.get(c)!.get(4_000_000)!;
    const firsts = first
      ? `; each block's first call (kept apart), p2p / rpcSync / p2p-view ${first.map((x) => (x * 1e6).toFixed(0)).join(" / ")} us, rpcSync / p2p ${ratio(first[1] / first[0])}`
      : "";
    console.log(
      `  send/recv 4 MB over ${c}: rpcSync / p2p round trip ${ratio(r / p)} (goal >= 1x) ${r / p >= 1 ? "MET" : "NOT MET"}` +
        ` (blocks of ${batch} calls per kind${firsts};` +
        ` p2p receiving into a view of part of a storage: ${ratio(r / copy)}; rank 0 GC per round trip in p2p / rpcSync / ` +
        `p2p-view calls ${gc.map((x) => x.toFixed(2)).join(" / ")} ms; alternating call by call: ${ratio(mixedRatio)}; ` +
        `CPU per round trip, both processes, p2p / rpcSync / p2p-view ${cpu.map((x) => (x * 1e6).toFixed(0)).join(" / ")} us, ` +
        `rpcSync / p2p ${ratio(cpu[1] / cpu[0])})`,
    );
  }
  console.log("");
  console.log(
    `collectives section time ${(now() - wall).toFixed(1)} s${quick ? ", --quick: fewer repetitions, up to 40 MB" : ""}`,
  );
}
