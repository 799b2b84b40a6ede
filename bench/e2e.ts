/**
 * `npm run bench -- --e2e` (issue 23, item 5): whole training workloads, tprpc beside a PyTorch RPC
 * twin written the idiomatic way, in one invocation, with ratios: notebook 04's pipelined GPT and
 * notebook 03's FedAvg (bench/e2e_fedavg.ts, bench/reference/torch_fedavg.py) and notebook 02's A3C
 * actors (bench/e2e_a3c.ts, bench/reference/torch_a3c.py).
 *
 * 1. tprpc: this process is the master, two local workers (startLocalWorkers) each own one stage
 *    (remote() of a shipped nn.Module class): embeddings + blocks 0–1 on worker1, blocks 2–3 + lnF + head
 *    on worker2, both built from manualSeed(1234). A step splits a batch of 32 × 64 tokens into --micro
 *    (4) micro-batches, chains stage1.remote().forward(x) → stage2.rpcAsync().forward(rref, y) for each
 *    without waiting, then distAutograd.backward and a DistributedOptimizer(AdamW) step in one context.
 *    Model { vocab 70, 4 layers, 128 wide, 4 heads, block 64, untied }, AdamW lr 3e-3, betas
 *    (0.9, 0.99), weight decay 0.01; tokens are drawn from the seeded generator (a step's speed does not
 *    depend on them). Every process computes with --threads (1) threads.
 * 2. unsplit: the same model, batch and optimizer in this process alone (notebook 04's last comparison).
 * 3. torch: bench/reference/torch_gpt_pipeline.py under /usr/bin/python3 (TPRPC_TORCH_PYTHON overrides),
 *    the same model, split, batch, micro-batches, optimizer and step count, run in a process group of
 *    its own and killed whole if it does not finish (spawn_group.ts spawnInGroup).
 * 4. Where a tprpc step's time goes, as rpc.profiler sees it on all three processes over one profiled
 *    step: per (caller, callee, target), the calls, the callee's run time (compute there), the time
 *    before each run (request transfer, queueing behind the callee's other calls) and after it (until
 *    the reply was back: a reply held by its callee's next computation shows here), and how long the
 *    two stages' forwards overlapped (rpc.profiler.overlapMs, as notebook 04 counts it).
 *
 * Flags: --quick (4 timed steps instead of 20, 1 timed FedAvg round instead of 5), --steps N,
 * --warmup N (untimed GPT steps first on every side: 60, 5 with --quick; the median of the first
 * min(20, N) is printed as each side's cold figure), --rounds N, --pushes N (A3C
 * pushes per actor: 200, 30 with --quick), --a3c-warmup N (A3C warm-up pushes per actor before the timed
 * ones: 1,000, 100 with --quick), --micro K, --threads T, --no-torch,
 * --gpt-rounds N (the pipelined GPT, its unsplit run and its PyTorch twin N times in turn, each round's
 * ratios and their medians printed: the machine's speed can move between one column and the next),
 * --gpt-interleave N (the three once more in N alternating blocks of --block-steps K (4) steps each, the
 * twin paused outside its blocks: interleavedGpt), --fedavg-interleave N (FedAvg once more, N rounds per side
 * in turn after a warm-up round each, the twin paused outside its rounds: interleavedFedAvg),
 * --load N (N busy processes beside both sides, bench/load.ts), --gpt-only (only tprpc's pipelined GPT,
 * one line: a quick loop for hunting hangs in it, as issue 23's), --timeline (every call of the profiled
 * pipelined step on one time axis, all three processes), --cpu-prof DIR (the two workers run under
 * node --cpu-prof and write their profiles into DIR as they exit).
 *
 * Beside the CPU time per timed step of each process, the output counts each process's garbage
 * collections over the timed steps (major / minor / other) and their pauses per step.
 */
import * as sdk from "../sdk/index.js";
import {
  DistributedOptimizer,
  distAutograd,
  manualSeed,
  nn,
  optim,
  randint,
  rpc,
  setNumThreads,
} from "../sdk/index.js";
import type { Tensor } from "../sdk/index.js";
import { startLocalWorkers } from "../sdk/rpc/launcher.js";
import { tprpcA3c } from "./e2e_a3c.js";
import { FEDAVG_EXAMPLES, type FedAvgSession, openFedAvg, tprpcFedAvg } from "./e2e_fedavg.js";
import { startLoad } from "./load.js";
import { machineLine } from "./machine.js";
import { GC_KINDS, median, now, repoRoot } from "./rpc_common.js";
import { spawnGroup, spawnInGroup } from "./spawn_group.js";
import os from "node:os";
import path from "node:path";
import { createInterface } from "node:readline";

// NB: the name shipped code sees on the callee (as the notebook kernel preloads it)
const tprpc = sdk;

const CONFIG = { vocabSize: 70, nLayer: 4, nEmbd: 128, nHead: 4, blockSize: 64, tieWeights: false };
const BATCH = 32;
const BLOCK = 64;
const MODEL_SEED = 1234;
const ADAMW = { lr: 3e-3, betas: [0.9, 0.99] as [number, number], weightDecay: 0.01 };
/** The pipelined GPT's cold figure: the median of its first this many warm-up steps, on both sides. */
const COLD_STEPS = 20;

class Stage1 extends tprpc.nn.Module {
  declare wte: InstanceType<typeof tprpc.nn.Embedding>;
  declare wpe: InstanceType<typeof tprpc.nn.Embedding>;
  declare blocks: InstanceType<typeof tprpc.nn.ModuleList<InstanceType<typeof tprpc.nn.TransformerBlock>>>;
  constructor(cfg: typeof CONFIG, seed: number) {
    super();
    tprpc.manualSeed(seed);
    const full = new tprpc.nn.GPT(cfg);
    this.wte = full.wte;
    this.wpe = full.wpe;
    this.blocks = new tprpc.nn.ModuleList([...full.blocks].slice(0, cfg.nLayer / 2));
  }
  forward(idx: Tensor): Tensor {
    let x = this.wte.forward(idx).add(this.wpe.forward(tprpc.arange(idx.shape[1]!)));
    for (const b of this.blocks) x = b.forward(x);
    return x;
  }
  parameterRRefs(): sdk.rpc.RRef<Tensor>[] {
    return this.parameters().map((p) => new tprpc.rpc.RRef(p));
  }
}

class Stage2 extends tprpc.nn.Module {
  declare blocks: InstanceType<typeof tprpc.nn.ModuleList<InstanceType<typeof tprpc.nn.TransformerBlock>>>;
  declare lnF: InstanceType<typeof tprpc.nn.LayerNorm>;
  declare lmHead: InstanceType<typeof tprpc.nn.Linear>;
  constructor(cfg: typeof CONFIG, seed: number) {
    super();
    tprpc.manualSeed(seed);
    const full = new tprpc.nn.GPT(cfg);
    this.blocks = new tprpc.nn.ModuleList([...full.blocks].slice(cfg.nLayer / 2));
    this.lnF = full.lnF;
    this.lmHead = full.lmHead;
  }
  async forward(hRef: sdk.rpc.RRef<Tensor>, targets: Tensor): Promise<Tensor> {
    let x = await hRef.toHere();
    for (const b of this.blocks) x = b.forward(x);
    const logits = this.lmHead.forward(this.lnF.forward(x));
    return tprpc.nn.functional.crossEntropy(logits.reshape([-1, logits.shape[2]!]), targets.reshape([-1]));
  }
  parameterRRefs(): sdk.rpc.RRef<Tensor>[] {
    return this.parameters().map((p) => new tprpc.rpc.RRef(p));
  }
}

interface Opts {
  steps: number;
  /** Untimed steps first, on every side (V8 optimizes the SDK's code over the first tens of steps). */
  warmup: number;
  micro: number;
  threads: number;
  /** --cpu-prof DIR: the workers run under node --cpu-prof, writing their profiles into DIR. */
  cpuProfDir?: string;
}

interface Breakdown {
  stepMs: number;
  /** The profiled step's records and garbage collections of all three processes, for --timeline. */
  records: [string, sdk.rpc.CallRecord[]][];
  gcs: [string, GcSpan[]][];
  /** CPU time (user + system) per timed step of each process, its GCs over the timed steps, and the master's wall time per step. */
  cpu: { name: string; msPerStep: number; gc: GcTally }[];
  wallMsPerStep: number;
  /** How many timed steps the CPU and GC figures cover. */
  steps: number;
  /** How long stage 1's and stage 2's forwards computed at once in the profiled step (rpc.profiler.overlapMs). */
  overlapMs: number;
  rows: {
    caller: string;
    peer: string;
    target: string;
    calls: number;
    /** The callee's runs of the target (awaits inside included). */
    calleeMs: number;
    /** Made → the callee started it: request serialization and transfer, queueing behind the callee's other calls. */
    beforeMs: number;
    /** The callee finished → the reply was here: reply serialization and transfer, the callee's thread busy elsewhere. */
    afterMs: number;
  }[];
}

/** A garbage collection in one process, wall-clock ms (as the call records' times). */
interface GcSpan {
  /** perf_hooks' kind number (GC_KINDS names it). */
  kind: number;
  start: number;
  ms: number;
}

/**
 * Shipped to the workers (and run here): starts (true) or stops (false) this process's profiler and its
 * record of garbage collections; stopping returns the call records and the collections.
 */
const profileWorker = (on: boolean): { records: sdk.rpc.CallRecord[]; gcs: GcSpan[] } => {
  // NB: through globalThis, so that shipping sends the name, not node's class
  const g = globalThis as unknown as {
    __benchGc?: { obs: { disconnect(): void }; gcs: GcSpan[] };
    PerformanceObserver: typeof import("node:perf_hooks").PerformanceObserver;
  };
  if (on) {
    tprpc.rpc.profiler.clear();
    tprpc.rpc.profiler.enable();
    const gcs: GcSpan[] = [];
    const obs = new g.PerformanceObserver((list) => {
      for (const e of list.getEntries()) {
        const kind = (e as unknown as { detail?: { kind?: number } }).detail?.kind ?? 0;
        gcs.push({ kind, start: performance.timeOrigin + e.startTime, ms: e.duration });
      }
    });
    obs.observe({ entryTypes: ["gc"] });
    g.__benchGc = { obs, gcs };
    return { records: [], gcs: [] };
  }
  tprpc.rpc.profiler.disable();
  const gc = g.__benchGc;
  gc?.obs.disconnect();
  delete g.__benchGc;
  return { records: tprpc.rpc.profiler.records(), gcs: gc?.gcs ?? [] };
};

/** Shipped to the workers (and run here): this process's CPU time so far, ms (user + system). */
const cpuMs = (): number => {
  const u = process.cpuUsage();
  return (u.user + u.system) / 1e3;
};

/** Garbage collections of one process over the timed steps: how many of each kind, and their pauses. */
interface GcTally {
  major: number;
  minor: number;
  /** Incremental marking steps and weak callbacks. */
  other: number;
  pauseMs: number;
}

/**
 * Shipped to the workers (and run here): starts (true) counting this process's garbage collections,
 * or stops (false) and returns the tally.
 */
const gcTally = (on: boolean): GcTally => {
  const g = globalThis as unknown as {
    __benchGcTally?: { obs: { disconnect(): void }; t: GcTally };
    PerformanceObserver: typeof import("node:perf_hooks").PerformanceObserver;
  };
  if (on) {
    const t: GcTally = { major: 0, minor: 0, other: 0, pauseMs: 0 };
    const obs = new g.PerformanceObserver((list) => {
      for (const e of list.getEntries()) {
        // NB: perf_hooks' constants: 1 minor, 4 major (GC_KINDS)
        const kind = (e as unknown as { detail?: { kind?: number } }).detail?.kind ?? 0;
        if (kind === 4) t.major++;
        else if (kind === 1) t.minor++;
        else t.other++;
        t.pauseMs += e.duration;
      }
    });
    obs.observe({ entryTypes: ["gc"] });
    g.__benchGcTally = { obs, t };
    return t;
  }
  const cur = g.__benchGcTally;
  // NB: entries are delivered asynchronously; take what has arrived
  cur?.obs.disconnect();
  delete g.__benchGcTally;
  return cur?.t ?? { major: 0, minor: 0, other: 0, pauseMs: 0 };
};

/** The profiled step's rows (per caller, callee and target) and its forward overlap. */
function breakdown(
  stepMs: number,
  byCaller: [string, sdk.rpc.CallRecord[]][],
): Omit<Breakdown, "cpu" | "wallMsPerStep" | "steps" | "records" | "gcs"> {
  const rows = new Map<string, Breakdown["rows"][number]>();
  for (const [caller, records] of byCaller)
    for (const r of records) {
      const key = `${caller}\u0000${r.peer}\u0000${r.target}`;
      const row = rows.get(key) ?? {
        caller,
        peer: r.peer,
        target: r.target,
        calls: 0,
        calleeMs: 0,
        beforeMs: 0,
        afterMs: 0,
      };
      row.calls++;
      if (r.calleeStart !== null && r.calleeEnd !== null) {
        row.calleeMs += r.calleeEnd - r.calleeStart;
        row.beforeMs += r.calleeStart - r.queuedAt;
        if (r.replyAt !== null) row.afterMs += r.replyAt - r.calleeEnd;
      }
      rows.set(key, row);
    }
  // NB: as notebook 04 draws it: stage 2's forward of micro-batch k counts from worker2's k-th fetch's reply
  const master = byCaller.find(([c]) => c === "master")?.[1] ?? [];
  const w2 = byCaller.find(([c]) => c === "worker2")?.[1] ?? [];
  const fetches = w2.filter((r) => r.kind === "fetch").sort((a, b) => a.queuedAt - b.queuedAt);
  const runs = (peer: string) =>
    master
      .filter((r) => r.peer === peer && r.target === "rref.forward" && r.calleeStart !== null && r.calleeEnd !== null)
      .sort((a, b) => a.calleeStart! - b.calleeStart!);
  const s1 = runs("worker1").map((r) => ({ worker: "worker1", name: "s1", start: r.calleeStart!, end: r.calleeEnd! }));
  const s2 = runs("worker2").map((r, k) => ({
    worker: "worker2",
    name: "s2",
    start: Math.max(r.calleeStart!, fetches[k]?.replyAt ?? r.calleeStart!),
    end: r.calleeEnd!,
  }));
  return { stepMs, overlapMs: rpc.profiler.overlapMs(s1, s2), rows: [...rows.values()] };
}

/** When the profiled step began (wall-clock ms, as the records' times). */
let stepStart = 0;

/** --timeline: every call of the profiled step on one time axis, ms from the step's start. */
function timeline(bd: Breakdown): string[] {
  const at = (t: number | null): string => (t === null ? "-" : (t - stepStart).toFixed(1)).padStart(7);
  const rows = [
    ...bd.records.flatMap(([caller, rs]) =>
      rs.map((r) => ({
        t: r.queuedAt,
        line: `  ${caller.padEnd(8)} -> ${r.peer.padEnd(8)} ${r.target.slice(0, 22).padEnd(22)} ${at(r.queuedAt)} ${at(r.sentAt)} ${at(r.calleeStart)} ${at(r.calleeEnd)} ${at(r.replyAt)}`,
      })),
    ),
    ...bd.gcs.flatMap(([who, gs]) =>
      gs.map((g) => ({
        t: g.start,
        line: `  ${who.padEnd(8)}    GC ${(GC_KINDS[g.kind] ?? String(g.kind)).padEnd(21)} ${at(g.start)} for ${g.ms.toFixed(1)} ms`,
      })),
    ),
  ];
  rows.sort((a, b) => a.t - b.t);
  return [
    "  timeline of the profiled step (ms from its start): queued  sent  callee start  callee end  reply; and each process's GCs",
    ...rows.map((r) => r.line),
  ];
}

/** Each process's CPU time per timed pipeline step. */
const cpuLine = (bd: Breakdown): string =>
  `  CPU per timed step (user + system; ${bd.wallMsPerStep.toFixed(1)} ms of wall per step, ${os.availableParallelism()} cores): ${bd.cpu.map((c) => `${c.name} ${c.msPerStep.toFixed(1)} ms`).join(", ")}`;

/** Each process's garbage collections over the timed pipeline steps. */
const gcLine = (bd: Breakdown): string =>
  `  GCs over the ${bd.steps} timed steps (major / minor / other, pause ms per step): ${bd.cpu.map((c) => `${c.name} ${c.gc.major} / ${c.gc.minor} / ${c.gc.other}, ${(c.gc.pauseMs / bd.steps).toFixed(1)} ms`).join("; ")}`;

/** tprpc's pipelined GPT, set up: this process the master, two local workers each owning a stage. */
interface Pipeline {
  /** One training step (all micro-batches, distributed backward, optimizer); its loss. */
  step(): Promise<number>;
  /** Shuts the group down and ends the workers (letting --cpu-prof workers write their profiles). */
  close(): Promise<void>;
}

async function openPipeline(o: Opts): Promise<Pipeline> {
  const nodeArgs = o.cpuProfDir ? ["--cpu-prof", `--cpu-prof-dir=${o.cpuProfDir}`] : [];
  const cluster = await startLocalWorkers({ workers: 2, nodeArgs });
  const close = async (): Promise<void> => {
    // NB: graceful first, so the workers see a leave and not a lost master
    await rpc
      .shutdown({ timeoutMs: 10_000 })
      .catch(() => rpc.shutdown({ graceful: false, timeoutMs: 5_000 }))
      .catch(() => undefined);
    // NB: a worker writes its --cpu-prof profile as it exits: let it leave on its own before close() kills it
    if (o.cpuProfDir)
      await Promise.race([
        Promise.all(cluster.workers.map((w) => w.exited)),
        new Promise((r) => setTimeout(r, 20_000).unref()),
      ]);
    await cluster.close();
  };
  try {
    await rpc.initRpc("master", { ...cluster.initOptions, rpcTimeoutMs: 300_000, initTimeoutMs: 30_000 });
    for (const w of ["worker1", "worker2"]) await rpc.rpcSync(w, (n: number) => tprpc.setNumThreads(n), [o.threads]);
    const stage1 = rpc.remote<Stage1>("worker1", Stage1, [CONFIG, MODEL_SEED]);
    const stage2 = rpc.remote<Stage2>("worker2", Stage2, [CONFIG, MODEL_SEED]);
    const params = [...(await stage1.rpcSync().parameterRRefs()), ...(await stage2.rpcSync().parameterRRefs())];
    const opt = new DistributedOptimizer(optim.AdamW, params, ADAMW);
    manualSeed(0);
    const step = (): Promise<number> => {
      const x = randint(0, CONFIG.vocabSize, [BATCH, BLOCK]);
      const y = randint(0, CONFIG.vocabSize, [BATCH, BLOCK]);
      return distAutograd.context(async (ctxId) => {
        const ys = y.chunk(o.micro);
        const losses = await Promise.all(
          x.chunk(o.micro).map((xm, i) => stage2.rpcAsync().forward(stage1.remote().forward(xm), ys[i]!)),
        );
        const loss = losses.reduce((a, b) => a.add(b)).div(o.micro);
        await distAutograd.backward(ctxId, [loss]);
        await opt.step(ctxId);
        return loss.item() as number;
      });
    };
    return { step, close };
  } catch (e) {
    await close();
    throw e;
  }
}

/** tprpc's pipelined GPT: median ms per step, the last loss, and one profiled step's breakdown. */
async function tprpcPipeline(o: Opts): Promise<{ ms: number; coldMs: number; loss: number; breakdown: Breakdown }> {
  const { step, close } = await openPipeline(o);
  try {
    const cold: number[] = [];
    for (let i = 0; i < o.warmup; i++) {
      const t0 = now();
      await step();
      if (i < COLD_STEPS) cold.push(now() - t0);
    }
    const times: number[] = [];
    let loss = 0;
    const names = ["master", "worker1", "worker2"];
    const cpuNow = () => Promise.all(names.map((n) => (n === "master" ? cpuMs() : rpc.rpcSync<number>(n, cpuMs))));
    const gcNow = (on: boolean) =>
      Promise.all(names.map((n) => (n === "master" ? gcTally(on) : rpc.rpcSync<GcTally>(n, gcTally, [on]))));
    await gcNow(true);
    const cpu0 = await cpuNow();
    const wall0 = now();
    for (let i = 0; i < o.steps; i++) {
      const t0 = now();
      loss = await step();
      times.push(now() - t0);
    }
    const wallMsPerStep = ((now() - wall0) * 1e3) / o.steps;
    const cpu1 = await cpuNow();
    const gcs1 = await gcNow(false);
    const cpu = names.map((name, i) => ({ name, msPerStep: (cpu1[i]! - cpu0[i]!) / o.steps, gc: gcs1[i]! }));
    for (const w of ["worker1", "worker2"]) await rpc.rpcSync(w, profileWorker, [true]);
    profileWorker(true);
    const t0 = now();
    stepStart = performance.timeOrigin + performance.now();
    await step();
    const stepMs = (now() - t0) * 1e3;
    const mine = profileWorker(false);
    const byCaller: [string, sdk.rpc.CallRecord[]][] = [["master", mine.records]];
    const gcs: [string, GcSpan[]][] = [["master", mine.gcs]];
    for (const w of ["worker1", "worker2"]) {
      const theirs = await rpc.rpcSync(w, profileWorker, [false]);
      byCaller.push([w, theirs.records]);
      gcs.push([w, theirs.gcs]);
    }
    rpc.profiler.clear();
    return {
      ms: median(times) * 1e3,
      coldMs: cold.length ? median(cold) * 1e3 : Number.NaN,
      loss,
      breakdown: { ...breakdown(stepMs, byCaller), cpu, wallMsPerStep, steps: o.steps, records: byCaller, gcs },
    };
  } finally {
    await close();
  }
}

/** One step of the unsplit model in this process (notebook 04's last comparison), built afresh. */
function unsplitStepper(o: Opts): () => void {
  setNumThreads(o.threads);
  manualSeed(MODEL_SEED);
  const model = new nn.GPT(CONFIG);
  const opt = new optim.AdamW(model.parameters(), ADAMW);
  manualSeed(0);
  return (): void => {
    const x = randint(0, CONFIG.vocabSize, [BATCH, BLOCK]);
    const y = randint(0, CONFIG.vocabSize, [BATCH, BLOCK]);
    opt.zeroGrad();
    const { loss } = model.forward(x, y);
    loss!.backward();
    opt.step();
  };
}

/** The same model, batch and optimizer unsplit in this process: median ms per step. */
function unsplit(o: Opts): number {
  const step = unsplitStepper(o);
  for (let i = 0; i < o.warmup; i++) step();
  const times: number[] = [];
  for (let i = 0; i < o.steps; i++) {
    const t0 = now();
    step();
    times.push(now() - t0);
  }
  return median(times) * 1e3;
}

/** The python that runs the PyTorch twins, and the path of bench/reference/`file`; or why not. */
function twinScript(file: string): { python: string; script: string } | string {
  const root = repoRoot();
  if (!root) return "the repository root was not found";
  return {
    python: process.env.TPRPC_TORCH_PYTHON ?? "/usr/bin/python3",
    script: path.join(root, "bench", "reference", file),
  };
}

/** Runs a PyTorch RPC twin in bench/reference; the first number `re` captures and the "# " header, or why not. */
function torchTwin(
  file: string,
  args: string[],
  re: RegExp,
  timeoutMs: number,
): { value: number; header: string } | string {
  const t = twinScript(file);
  if (typeof t === "string") return t;
  const { python, script } = t;
  const r = spawnInGroup(python, [script, ...args], timeoutMs);
  if (r.error) return `${python}: ${r.error.message}`;
  if (r.timedOut) return `did not finish in ${timeoutMs / 1000} s (its process group was killed)`;
  const m = re.exec(r.stdout ?? "");
  if (r.status !== 0 || !m) return `exited ${r.status}: ${(r.stderr ?? "").trim().slice(-300)}`;
  return { value: Number(m[1]), header: /^# (.*)$/m.exec(r.stdout)?.[1] ?? "" };
}

/** --gpt-interleave: each side's step times (ms) per block, in the order they ran, the untimed first one included. */
interface Interleaved {
  blocks: { ours: number[]; alone: number[]; torch: number[] }[];
  header: string;
  loss: { ours: number; torch: number };
}

/**
 * The pipelined GPT, its unsplit run and its PyTorch RPC twin in alternating blocks of 1 + `k` steps
 * (the first left out of the figures), `n` blocks each, so all three meet the same phases of the machine
 * (on these VMs its speed moves in phases of seconds, more than the differences measured). The twin runs
 * as torch_gpt_pipeline.py --serve (servedTwin: its group stopped outside its blocks). Each side warms up
 * first, one after the other (o.warmup steps), and the order within a block rotates. An error or a reference that does not
 * answer within `timeoutMs` per block ends the twin's group; the reason comes back as a string (so does
 * a failure on tprpc's side).
 */
async function interleavedGpt(o: Opts, n: number, k: number, timeoutMs: number): Promise<Interleaved | string> {
  const args = ["--warmup", `${o.warmup}`, "--micro", `${o.micro}`, "--threads", `${o.threads}`];
  const twin = servedTwin("torch_gpt_pipeline.py", args, timeoutMs);
  if (typeof twin === "string") return twin;
  let pipe: Pipeline | null = null;
  try {
    await twin.ready("ready line after the warm-up");
    pipe = await openPipeline(o);
    for (let i = 0; i < o.warmup; i++) await pipe.step();
    const alone = unsplitStepper(o);
    for (let i = 0; i < o.warmup; i++) alone();
    const out: Interleaved = { blocks: [], header: twin.header(), loss: { ours: Number.NaN, torch: Number.NaN } };
    // NB: k + 1 steps per block on every side; the first is left out of the figures (a side that was idle or
    // stopped wakes up in it) and its time is printed apart
    const timed = async (f: () => unknown): Promise<number[]> => {
      const times: number[] = [];
      for (let i = 0; i <= k; i++) {
        const t0 = now();
        await f();
        times.push((now() - t0) * 1e3);
      }
      return times;
    };
    for (let b = 0; b < n; b++) {
      const block = { ours: [] as number[], alone: [] as number[], torch: [] as number[] };
      const sides = [
        async () => {
          let loss = 0;
          block.ours = await timed(async () => (loss = await pipe!.step()));
          out.loss.ours = loss;
        },
        async () => (block.alone = await timed(alone)),
        async () => {
          const m = await twin.ask(`run ${k + 1}`, /^block ([\d.,]+) loss ([\d.]+)$/, "block");
          block.torch = m[1]!.split(",").map(Number);
          out.loss.torch = Number(m[2]);
        },
      ];
      for (let j = 0; j < sides.length; j++) await sides[(b + j) % sides.length]!();
      out.blocks.push(block);
    }
    return out;
  } catch (e) {
    return (e as Error).message;
  } finally {
    if (pipe) await pipe.close();
    await twin.close();
  }
}

/** A PyTorch RPC twin run with --serve: work on command over stdin, answers over stdout (servedTwin). */
interface ServedTwin {
  /** Waits for its "ready" line (after its warm-up), then stops its group until the first command. */
  ready(what: string): Promise<void>;
  /** Its "# ..." header line, once printed. */
  header(): string;
  /** Resumes its group, sends `cmd`, waits for the answer that matches `re`, and stops the group again. */
  ask(cmd: string, re: RegExp, what: string): Promise<RegExpExecArray>;
  /** Asks it to quit (30 s), then kills whatever of its group is left. */
  close(): Promise<void>;
}

/**
 * Starts bench/reference/`file` with `args` and --serve in a process group of its own (the interleaved runs:
 * --gpt-interleave, --fedavg-interleave). Its whole group is stopped (SIGSTOP) between commands, because
 * TensorPipe's idle threads poll and would take CPU from tprpc's turns, and tprpc's idle processes sleep. A
 * wait longer than `timeoutMs`, or the twin's exit, rejects with the reason; close() ends the group.
 */
function servedTwin(file: string, args: string[], timeoutMs: number): ServedTwin | string {
  const t = twinScript(file);
  if (typeof t === "string") return t;
  const { python, script } = t;
  const twin = spawnGroup(python, [script, ...args, "--serve"]);
  let stderr = "";
  twin.child.stderr.on("data", (d: Buffer) => (stderr = (stderr + d.toString()).slice(-2000)));
  twin.child.stdin.on("error", () => undefined); // NB: EPIPE once it has gone: its exit says why
  const lines: string[] = [];
  let header = "";
  let wake: (() => void) | null = null;
  let exited: string | null = null;
  const rl = createInterface({ input: twin.child.stdout });
  rl.on("line", (l) => {
    if (l.startsWith("# ")) header = l.slice(2);
    else lines.push(l);
    wake?.();
  });
  twin.child.on("error", (e) => {
    exited = `${python}: ${e.message}`;
    wake?.();
  });
  twin.child.on("exit", (code, sig) => {
    exited = `exited ${sig ?? code}: ${stderr.trim().slice(-300)}`;
    wake?.();
  });
  // NB: one waiter at a time: the bench asks and then reads, in turn
  const nextLine = async (re: RegExp, what: string): Promise<RegExpExecArray> => {
    const deadline = Date.now() + timeoutMs;
    for (;;) {
      const i = lines.findIndex((l) => re.test(l));
      if (i >= 0) return re.exec(lines.splice(0, i + 1)[i]!)!;
      if (exited !== null) throw new Error(exited);
      const left = deadline - Date.now();
      if (left <= 0) throw new Error(`no ${what} within ${timeoutMs / 1000} s (its process group was killed)`);
      await new Promise<void>((resolve) => {
        const t = setTimeout(resolve, left);
        wake = () => {
          clearTimeout(t);
          resolve();
        };
      });
      wake = null;
    }
  };
  return {
    async ready(what) {
      await nextLine(/^ready$/, what);
      twin.signal("SIGSTOP");
    },
    header: () => header,
    async ask(cmd, re, what) {
      twin.signal("SIGCONT");
      twin.child.stdin.write(`${cmd}\n`);
      const m = await nextLine(re, what);
      twin.signal("SIGSTOP");
      return m;
    },
    async close() {
      rl.close();
      twin.signal("SIGCONT");
      if (exited === null) {
        twin.child.stdin.end("quit\n");
        const gone = new Promise((r) => twin.child.once("exit", r));
        await Promise.race([gone, new Promise((r) => setTimeout(r, 30_000).unref())]);
      }
      twin.signal("SIGKILL"); // whatever of the group is left (none after a clean exit)
    },
  };
}

/** --fedavg-interleave: each side's round times (s), in the order they ran. */
interface InterleavedFedAvg {
  ours: number[];
  torch: number[];
  header: string;
}

/**
 * FedAvg rounds of tprpc and of its PyTorch RPC twin (torch_fedavg.py --serve) in turn, `n` each after
 * one warm-up round per side, the order rotating, so both meet the same phases of the machine (the rounds
 * run one side after the other otherwise, minutes apart). An error or a twin that does not answer within
 * `timeoutMs` ends the twin's group; the reason comes back as a string.
 */
async function interleavedFedAvg(n: number, threads: number, timeoutMs: number): Promise<InterleavedFedAvg | string> {
  const twin = servedTwin("torch_fedavg.py", ["--threads", `${threads}`], timeoutMs);
  if (typeof twin === "string") return twin;
  let fed: FedAvgSession | null = null;
  try {
    await twin.ready("ready line after the warm-up round");
    fed = await openFedAvg(threads);
    await fed.round();
    const out: InterleavedFedAvg = { ours: [], torch: [], header: twin.header() };
    for (let r = 0; r < n; r++) {
      const sides = [
        async () => void out.ours.push(await fed!.round()),
        async () => void out.torch.push(Number((await twin.ask("run", /^round ([\d.]+)$/, "round"))[1])),
      ];
      for (let j = 0; j < sides.length; j++) await sides[(r + j) % sides.length]!();
    }
    return out;
  } catch (e) {
    return (e as Error).message;
  } finally {
    if (fed) await fed.close();
    await twin.close();
  }
}

/** The --fedavg-interleave lines: each side's rounds, their medians, and the ratio per pair of rounds. */
function interleavedFedAvgLines(r: InterleavedFedAvg): string[] {
  const ratios = r.ours.map((x, i) => r.torch[i]! / x);
  const fmt = (xs: number[]): string => xs.map((x) => x.toFixed(3)).join(", ");
  return [
    `  interleaved: ${r.ours.length} rounds per side, the sides in turn (PyTorch RPC's processes stopped outside its rounds)`,
    ...(r.header ? [`    PyTorch RPC: ${r.header}`] : []),
    `    tprpc ${median(r.ours).toFixed(3)} s/round [${fmt(r.ours)}], PyTorch RPC ${median(r.torch).toFixed(3)} [${fmt(r.torch)}]`,
    `    ratio (> 1: tprpc faster) ${(median(r.torch) / median(r.ours)).toFixed(2)}x of the medians; per pair ${ratios.map((x) => x.toFixed(2) + "x").join(", ")} (median ${median(ratios).toFixed(2)}x)`,
  ];
}

/** The --gpt-interleave lines: each side's median step, and the ratios per block and overall. */
function interleavedLines(r: Interleaved, k: number): string[] {
  // NB: a block's figures leave out its first step (interleavedGpt)
  const med = (xs: number[]): number => median(xs.slice(1));
  const all = (key: "ours" | "alone" | "torch"): number[] => r.blocks.flatMap((b) => b[key].slice(1));
  const firsts = (key: "ours" | "alone" | "torch"): string =>
    `${median(r.blocks.map((b) => b[key][0]! / med(b[key]))).toFixed(2)}x`;
  const perBlock = (f: (b: Interleaved["blocks"][number]) => number): string => {
    const xs = r.blocks.map(f);
    return `${xs.map((x) => x.toFixed(2) + "x").join(", ")} (median ${median(xs).toFixed(2)}x)`;
  };
  const ours = median(all("ours"));
  const alone = median(all("alone"));
  const torch = median(all("torch"));
  return [
    `  interleaved: ${r.blocks.length} blocks of 1 + ${k} steps per side, the sides in turn (PyTorch RPC's processes stopped outside its blocks)`,
    ...(r.header ? [`    PyTorch RPC: ${r.header}`] : []),
    `    tprpc ${ours.toFixed(1)} ms/step (${fmtTok(ours)}), unsplit ${alone.toFixed(1)}, PyTorch RPC ${torch.toFixed(1)} (${fmtTok(torch)}); losses ${r.loss.ours.toFixed(4)} / ${r.loss.torch.toFixed(4)}`,
    `    vs PyTorch RPC ${(torch / ours).toFixed(2)}x over all steps; per block ${perBlock((b) => med(b.torch) / med(b.ours))}`,
    `    vs unsplit ${(alone / ours).toFixed(2)}x over all steps; per block ${perBlock((b) => med(b.alone) / med(b.ours))}`,
    `    per block, median ms/step (tprpc / PyTorch RPC): ${r.blocks.map((b) => `${med(b.ours).toFixed(1)}/${med(b.torch).toFixed(1)}`).join(", ")}`,
    `    each block's first step, left out above, against the block's median (median over blocks): tprpc ${firsts("ours")}, unsplit ${firsts("alone")}, PyTorch RPC ${firsts("torch")}`,
  ];
}

const tokensPerS = (ms: number): number => (BATCH * BLOCK) / (ms / 1e3);
const fmtTok = (ms: number): string => `${Math.round(tokensPerS(ms)).toLocaleString("en-US")} tokens/s`;

export async function e2eBench(argv: readonly string[]): Promise<void> {
  const num = (name: string, dflt: number): number => {
    const i = argv.indexOf(name);
    return i >= 0 ? Number(argv[i + 1]) : dflt;
  };
  const quick = argv.includes("--quick");
  const o: Opts = {
    steps: num("--steps", quick ? 4 : 20),
    // NB: tprpc's pipelined step gets faster over its first ~60 steps (medians per block of 20 steps from step
    // 1 were 153, 137, 123, 117, then 110-123 ms on 2026-11-26; partly V8 still optimizing, see
    // docs/architecture.md) where PyTorch's is flat: both sides warm up alike, and both cold figures (the first
    // COLD_STEPS warm-up steps) are printed too
    warmup: num("--warmup", quick ? 5 : 60),
    micro: num("--micro", 4),
    threads: num("--threads", 1),
  };
  const profDir = argv.indexOf("--cpu-prof");
  if (profDir >= 0) o.cpuProfDir = path.resolve(argv[profDir + 1] ?? ".");
  const loadN = num("--load", 0);
  const machine = machineLine(100_000_000); // NB: before the load starts
  const load = await startLoad(loadN);
  const wall = now();
  const bound = 600_000 * (loadN + 1);
  const noTorch = argv.includes("--no-torch");
  const rounds = num("--rounds", quick ? 1 : 5);
  let ours: Awaited<ReturnType<typeof tprpcPipeline>>;
  let alone: number;
  let torch: ReturnType<typeof torchTwin>;
  let fedavg: number;
  let torchFedavg: ReturnType<typeof torchTwin>;
  const pushes = num("--pushes", quick ? 30 : 200);
  // NB: tprpc's A3C rate was still rising after hundreds of pushes (V8 optimizing the SDK's code: 6.3k env
  // steps/s after 5 warm-up pushes, 13.0k after 300, 16.9k after 1,000) where PyTorch's was flat (12.4k,
  // 12.3k, 11.7k): both sides warm up alike, and both cold rates are printed too
  const a3cWarmup = num("--a3c-warmup", quick ? 100 : 1000);
  // NB: this machine's speed moves in phases of seconds (host neighbours): --gpt-rounds N runs the three
  // GPT columns N times, one after another, and prints every round's ratios and their medians
  const gptRounds = Math.max(1, Math.floor(num("--gpt-rounds", 1)));
  const gptRuns: { ours: number; alone: number; torch: number | null }[] = [];
  // NB: --gpt-interleave N: the three GPT columns once more, in N alternating blocks (interleavedGpt)
  const interleave = Math.max(0, Math.floor(num("--gpt-interleave", 0)));
  const blockSteps = Math.max(1, Math.floor(num("--block-steps", 4)));
  let interleaved: Interleaved | string | null = null;
  // NB: --fedavg-interleave N: FedAvg once more, its rounds alternating with the twin's (interleavedFedAvg)
  const fedInterleave = Math.max(0, Math.floor(num("--fedavg-interleave", 0)));
  let fedInterleaved: InterleavedFedAvg | string | null = null;
  let a3c: Awaited<ReturnType<typeof tprpcA3c>>;
  let torchA3c: ReturnType<typeof torchTwin>;
  try {
    process.stderr.write("[bench --e2e] pipelined GPT: tprpc ...\n");
    ours = await tprpcPipeline(o);
    if (argv.includes("--gpt-only")) {
      process.stdout.write(
        `pipelined GPT, tprpc: ${ours.ms.toFixed(1)} ms/step  ${fmtTok(ours.ms)}  (loss ${ours.loss.toFixed(4)})\n`,
      );
      process.stdout.write(`${cpuLine(ours.breakdown)}\n${gcLine(ours.breakdown)}\n`);
      if (argv.includes("--timeline")) process.stdout.write(`${timeline(ours.breakdown).join("\n")}\n`);
      return;
    }
    process.stderr.write("[bench --e2e] pipelined GPT: unsplit ...\n");
    alone = unsplit(o);
    process.stderr.write("[bench --e2e] pipelined GPT: PyTorch RPC ...\n");
    const gptArgs = [
      "--steps",
      `${o.steps}`,
      "--warmup",
      `${o.warmup}`,
      "--micro",
      `${o.micro}`,
      "--threads",
      `${o.threads}`,
    ];
    const torchGpt = (): ReturnType<typeof torchTwin> =>
      noTorch
        ? "skipped (--no-torch)"
        : torchTwin("torch_gpt_pipeline.py", gptArgs, /pipeline gpt: ([\d.]+) ms\/step/, bound);
    torch = torchGpt();
    gptRuns.push({ ours: ours.ms, alone, torch: typeof torch === "string" ? null : torch.value });
    for (let i = 1; i < gptRounds; i++) {
      process.stderr.write(
        `[bench --e2e] pipelined GPT, round ${i + 1} of ${gptRounds}: tprpc, unsplit, PyTorch RPC ...\n`,
      );
      const again = await tprpcPipeline(o);
      const aloneAgain = unsplit(o);
      const t = torchGpt();
      gptRuns.push({ ours: again.ms, alone: aloneAgain, torch: typeof t === "string" ? null : t.value });
    }
    if (interleave > 0 && !noTorch) {
      process.stderr.write(
        `[bench --e2e] pipelined GPT interleaved: ${interleave} blocks of 1 + ${blockSteps} steps per side ...\n`,
      );
      interleaved = await interleavedGpt(o, interleave, blockSteps, bound);
    }
    process.stderr.write("[bench --e2e] FedAvg: tprpc ...\n");
    fedavg = await tprpcFedAvg(rounds, o.threads);
    process.stderr.write("[bench --e2e] FedAvg: PyTorch RPC ...\n");
    const fedArgs = ["--rounds", `${rounds}`, "--threads", `${o.threads}`];
    torchFedavg = noTorch
      ? "skipped (--no-torch)"
      : torchTwin("torch_fedavg.py", fedArgs, /fedavg: ([\d.]+) s\/round/, bound);
    if (fedInterleave > 0 && !noTorch) {
      process.stderr.write(`[bench --e2e] FedAvg interleaved: ${fedInterleave} rounds per side ...\n`);
      fedInterleaved = await interleavedFedAvg(fedInterleave, o.threads, bound);
    }
    process.stderr.write("[bench --e2e] A3C: tprpc ...\n");
    a3c = await tprpcA3c(pushes, o.threads, a3cWarmup);
    process.stderr.write("[bench --e2e] A3C: PyTorch RPC ...\n");
    const a3cArgs = ["--pushes", `${pushes}`, "--warmup", `${a3cWarmup}`, "--threads", `${o.threads}`];
    torchA3c = noTorch
      ? "skipped (--no-torch)"
      : torchTwin("torch_a3c.py", a3cArgs, /a3c: ([\d.]+) env steps\/s/, bound);
  } finally {
    await load.stop();
  }
  const out: string[] = [];
  out.push("tprpc bench --e2e: whole workloads, tprpc vs PyTorch RPC, measured in this run");
  out.push(
    `${loadN ? `under load: ${loadN} busy process(es) beside both sides` : "no load added"}; ` +
      `${o.threads} thread(s) per process; ${o.steps} timed steps after ${o.warmup} warm-up${quick ? " (--quick)" : ""}`,
  );
  out.push(machine);
  if (typeof torch !== "string") out.push(`PyTorch RPC: ${torch.header}`);
  out.push("");
  out.push(`pipelined GPT (notebook 04: 2 stages on 2 workers, ${o.micro} micro-batches, batch ${BATCH}x${BLOCK})`);
  const coldOf = (ms: number): string => (Number.isFinite(ms) ? `${ms.toFixed(1)} ms/step` : "-");
  const coldMatch = typeof torch === "string" ? null : /cold[^:]*: ([\d.]+) ms\/step/.exec(torch.header);
  const torchColdMs = coldMatch ? Number(coldMatch[1]) : Number.NaN;
  out.push(
    `  tprpc        ${ours.ms.toFixed(1)} ms/step  ${fmtTok(ours.ms)}  (loss ${ours.loss.toFixed(4)}; cold, the first ${Math.min(COLD_STEPS, o.warmup)} warm-up steps: ${coldOf(ours.coldMs)})`,
  );
  out.push(`  unsplit      ${alone.toFixed(1)} ms/step  ${fmtTok(alone)}  (tprpc, this process alone)`);
  out.push(
    typeof torch === "string"
      ? `  PyTorch RPC  unavailable — ${torch}`
      : `  PyTorch RPC  ${torch.value.toFixed(1)} ms/step  ${fmtTok(torch.value)}  (cold: ${coldOf(torchColdMs)})`,
  );
  out.push(
    `  ratios (tokens/s, > 1: tprpc faster): vs PyTorch RPC ${typeof torch === "string" ? "-" : (torch.value / ours.ms).toFixed(2) + "x"}, vs unsplit ${(alone / ours.ms).toFixed(2)}x; cold vs PyTorch RPC ${Number.isFinite(torchColdMs / ours.coldMs) ? (torchColdMs / ours.coldMs).toFixed(2) + "x" : "-"}`,
  );
  if (gptRuns.length > 1) {
    const list = (xs: number[]): string =>
      `${xs.map((x) => x.toFixed(2) + "x").join(", ")} (median ${median(xs).toFixed(2)}x)`;
    const vsTorch = gptRuns.filter((r) => r.torch !== null).map((r) => r.torch! / r.ours);
    out.push(
      `  ${gptRuns.length} rounds of the three, one after another: tprpc ${gptRuns.map((r) => r.ours.toFixed(1)).join(", ")} ms/step; ` +
        `vs PyTorch RPC ${vsTorch.length ? list(vsTorch) : "-"}; vs unsplit ${list(gptRuns.map((r) => r.alone / r.ours))}`,
    );
  }
  if (interleaved !== null)
    out.push(
      ...(typeof interleaved === "string"
        ? [`  interleaved: not measured — ${interleaved}`]
        : interleavedLines(interleaved, blockSteps)),
    );
  out.push("");
  const bd = ours.breakdown;
  out.push(`${cpuLine(bd)}; unsplit's whole step ${alone.toFixed(1)} ms`);
  out.push(gcLine(bd));
  out.push(
    `  one profiled tprpc step (${bd.stepMs.toFixed(1)} ms; stage 1 and stage 2 forwards overlapped ${bd.overlapMs.toFixed(1)} ms), rpc.profiler on all three processes:`,
  );
  out.push("  caller   -> callee   target                         calls  run ms  before ms  after ms");
  for (const r of bd.rows.sort((a, b) => b.calleeMs + b.beforeMs + b.afterMs - a.calleeMs - a.beforeMs - a.afterMs))
    out.push(
      `  ${r.caller.padEnd(8)} -> ${r.peer.padEnd(8)} ${r.target.slice(0, 28).padEnd(28)} ${String(r.calls).padStart(6)} ${r.calleeMs.toFixed(1).padStart(7)} ${r.beforeMs.toFixed(1).padStart(10)} ${r.afterMs.toFixed(1).padStart(9)}`,
    );
  out.push(
    "  (sums over the calls. run: the target's run on the callee, awaits inside it included (stage 2's toHere);",
  );
  out.push(
    "   before: made -> started on the callee (request serialization and transfer, queueing behind its other calls);",
  );
  out.push(
    "   after: finished on the callee -> reply here (reply serialization and transfer, the callee's thread busy elsewhere))",
  );
  if (argv.includes("--timeline")) out.push(...timeline(bd));
  out.push("");
  out.push(
    `FedAvg (notebook 03: 3 clients behind remote(), ${FEDAVG_EXAMPLES.toLocaleString("en-US")} examples each, 1 epoch of SGD per round, MLP 784-200-200-10), median of ${rounds} round(s)`,
  );
  out.push(`  tprpc        ${fedavg.toFixed(3)} s/round`);
  out.push(
    typeof torchFedavg === "string"
      ? `  PyTorch RPC  unavailable — ${torchFedavg}`
      : `  PyTorch RPC  ${torchFedavg.value.toFixed(3)} s/round  (${torchFedavg.header})`,
  );
  out.push(
    `  ratio (> 1: tprpc faster): ${typeof torchFedavg === "string" ? "-" : (torchFedavg.value / fedavg).toFixed(2) + "x"}`,
  );
  if (fedInterleaved !== null)
    out.push(
      ...(typeof fedInterleaved === "string"
        ? [`  interleaved: not measured — ${fedInterleaved}`]
        : interleavedFedAvgLines(fedInterleaved)),
    );
  out.push("");
  out.push(
    `A3C actors (notebook 02: 3 actors on 3 workers, global net behind an RRef on the master, ${pushes} pushes of <= 20 CartPole steps per actor after ${a3cWarmup} warm-up pushes)`,
  );
  const torchCold = typeof torchA3c === "string" ? null : /cold[^:]*: ([\d.]+) env steps\/s/.exec(torchA3c.header);
  const steps = (r: number): string => `${Math.round(r).toLocaleString("en-US")} env steps/s`;
  out.push(`  tprpc        ${steps(a3c.rate)}  (cold, the warm-up pushes: ${steps(a3c.coldRate)})`);
  out.push(
    typeof torchA3c === "string"
      ? `  PyTorch RPC  unavailable — ${torchA3c}`
      : `  PyTorch RPC  ${steps(torchA3c.value)}  (cold: ${torchCold ? steps(Number(torchCold[1])) : "-"})`,
  );
  out.push(
    `  ratio (> 1: tprpc faster): ${typeof torchA3c === "string" ? "-" : (a3c.rate / torchA3c.value).toFixed(2) + "x"}; cold ${torchCold ? (a3c.coldRate / Number(torchCold[1])).toFixed(2) + "x" : "-"}`,
  );
  out.push("");
  out.push(`e2e time ${(now() - wall).toFixed(1)} s`);
  process.stdout.write(out.join("\n") + "\n");
}
