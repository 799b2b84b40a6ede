/**
 * The RPC section of `npm run bench`: tprpc over TCP between two local processes beside PyTorch RPC
 * (TensorPipe) measured in the same invocation — issue 4's acceptance figures.
 *
 * 1. torch: /work/shared/bench/torch_rpc.py, found as ../shared/bench/torch_rpc.py beside the
 *    repository (CI keeps shared/ beside the clone), runs under /usr/bin/python3
 *    (TPRPC_TORCH_PYTHON overrides) with its default transports (shm + cma on one host) and
 *    `--ops-sizes ""`; its result lines are parsed. Missing: "PyTorch RPC reference unavailable".
 *    It takes ~50 s of the section (its 1-in-flight async runs cannot be left out); --no-torch skips it.
 * 2. tprpc: this process is the master (rank 0), one worker is started with startLocalWorkers, and
 *    the master allows only the tcp channel (options.channels), so tensors move over TCP lanes; the
 *    target is a shipped identity lambda `(x) => x` (compiled once per peer), the argument a number
 *    (0 B) or a float32 tensor of 4 KB … 400 MB (decimal, as torch_rpc.py). rpcSync round trips:
 *    warm-up, then trials of a batch of calls, per-call time = median over trials (as common.py,
 *    with fewer repetitions so the section stays short); GB/s counts the bytes both ways.
 *    rpcAsync: 4,000 calls kept 64 in flight, calls/s = median over trials.
 * 3. Ratios: latency torch/tprpc and throughput tprpc/torch, so > 1 means tprpc is faster.
 */
import { spawnSync } from "node:child_process";
import fs from "node:fs";
import path from "node:path";
import { fileURLToPath } from "node:url";
import { Tensor, ones, rpc } from "../../sdk/index.js";
import { startLocalWorkers } from "../../sdk/rpc/launcher.js";

const SIZES = [0, 4_000, 4_000_000, 40_000_000, 400_000_000];
const ASYNC_SIZES = [0, 4_000];
const IN_FLIGHT = 64;
const ASYNC_CALLS = 4_000;

interface Figures {
  /** bytes -> median seconds per rpcSync round trip */
  sync: Map<number, number>;
  /** bytes -> median calls/s with 64 in flight */
  async: Map<number, number>;
}

const now = (): number => Number(process.hrtime.bigint()) / 1e9;

function median(xs: number[]): number {
  const s = [...xs].sort((a, b) => a - b);
  const m = s.length >> 1;
  return s.length % 2 ? s[m]! : (s[m - 1]! + s[m]!) / 2;
}

/** (warm-up calls, trials, calls per trial) for a payload size, as common.py's plan() but shorter. */
function plan(nbytes: number, quick: boolean): [number, number, number] {
  if (nbytes <= 4_000) return quick ? [100, 7, 50] : [300, 15, 100];
  if (nbytes <= 4_000_000) return quick ? [3, 5, 4] : [5, 10, 5];
  if (nbytes <= 40_000_000) return quick ? [2, 3, 1] : [3, 7, 1];
  return quick ? [1, 2, 1] : [1, 3, 1];
}

/** The repository root: the nearest directory above this file whose package.json is named "tprpc". */
function repoRoot(): string | undefined {
  let dir = path.dirname(fileURLToPath(import.meta.url));
  for (;;) {
    const pkg = path.join(dir, "package.json");
    if (fs.existsSync(pkg) && (JSON.parse(fs.readFileSync(pkg, "utf8")) as { name?: string }).name === "tprpc")
      return dir;
    const up = path.dirname(dir);
    if (up === dir) return undefined;
    dir = up;
  }
}

function parseTime(v: string, unit: string): number {
  return Number(v) * (unit === "us" ? 1e-6 : unit === "ms" ? 1e-3 : 1);
}

/** Runs torch_rpc.py and parses its lines; a string says why it is unavailable. */
function runTorch(): { figures: Figures; header: string } | string {
  const root = repoRoot();
  const script = root && path.resolve(root, "../shared/bench/torch_rpc.py");
  if (!script || !fs.existsSync(script)) return "../shared/bench/torch_rpc.py not found beside the repository";
  const python = process.env.TPRPC_TORCH_PYTHON ?? "/usr/bin/python3";
  const r = spawnSync(python, [script, "--sizes", SIZES.join(","), "--ops-sizes", ""], {
    encoding: "utf8",
    timeout: 300_000,
  });
  if (r.error) return `${python}: ${r.error.message}`;
  if (r.status !== 0) return `${python} exited ${r.status}: ${(r.stderr ?? "").trim().slice(-300)}`;
  const figures: Figures = { sync: new Map(), async: new Map() };
  let header = "";
  for (const line of r.stdout.split("\n")) {
    if (line.startsWith("# torch")) header = line.slice(2);
    const s = /^rpc_sync identity\s+([\d,]+) B\s+([\d.]+) (us|ms|s)\b/.exec(line);
    if (s) figures.sync.set(Number(s[1]!.replace(/,/g, "")), parseTime(s[2]!, s[3]!));
    const a = /^rpc_async identity, (\d+) in flight\s+([\d,]+) B\s+([\d.]+) calls\/s/.exec(line);
    if (a && Number(a[1]) === IN_FLIGHT) figures.async.set(Number(a[2]!.replace(/,/g, "")), Number(a[3]));
  }
  if (figures.sync.size === 0) return `no result lines in torch_rpc.py's output: ${r.stdout.slice(0, 200)}`;
  return { figures, header };
}

const identity = (x: unknown): unknown => x;

function payload(nbytes: number): number | Tensor {
  return nbytes === 0 ? 1 : ones([nbytes / 4], { dtype: "float32" });
}

/** rpcSync identity round trips; throws if the value does not come back intact. */
async function measureSync(to: string, nbytes: number, quick: boolean): Promise<number> {
  const x = payload(nbytes);
  const [warm, trials, batch] = plan(nbytes, quick);
  const back = await rpc.rpcSync(to, identity, [x]);
  if (x instanceof Tensor) {
    const y = back as Tensor;
    if (!(y instanceof Tensor) || y.numel() !== x.numel() || y.dtype !== "float32")
      throw new Error(`identity returned ${String(y)} for a ${nbytes} B tensor`);
  } else if (back !== x) throw new Error(`identity returned ${String(back)} for ${String(x)}`);
  for (let i = 1; i < warm; i++) await rpc.rpcSync(to, identity, [x]);
  const perCall: number[] = [];
  for (let t = 0; t < trials; t++) {
    const t0 = now();
    for (let i = 0; i < batch; i++) await rpc.rpcSync(to, identity, [x]);
    perCall.push((now() - t0) / batch);
  }
  return median(perCall);
}

/** rpcAsync identity, `IN_FLIGHT` calls outstanding at all times; calls/s, median over trials. */
async function measureAsync(to: string, nbytes: number, quick: boolean): Promise<number> {
  const x = payload(nbytes);
  const run = async (): Promise<number> => {
    let issued = 0;
    const lane = async () => {
      while (issued < ASYNC_CALLS) {
        issued++;
        await rpc.rpcAsync(to, identity, [x]);
      }
    };
    const t0 = now();
    await Promise.all(Array.from({ length: IN_FLIGHT }, lane));
    return ASYNC_CALLS / (now() - t0);
  };
  await run(); // warm-up
  const rates: number[] = [];
  for (let t = 0; t < (quick ? 3 : 5); t++) rates.push(await run());
  return median(rates);
}

let pipeLine = "";

async function runTprpc(quick: boolean): Promise<Figures> {
  // NB: the worker, too, offers (and so probes) only tcp
  const cluster = await startLocalWorkers({ workers: 1, env: { TPRPC_CHANNELS: "tcp" } });
  try {
    // NB: issue 4's figures are over TCP: the master allows only the tcp channel, so the pipe picks it
    // even where shm/cma are viable (npm run bench:channels compares those).
    await rpc.initRpc("master", {
      ...cluster.initOptions,
      rpcTimeoutMs: 300_000,
      initTimeoutMs: 30_000,
      channels: "tcp",
    });
    const info = await rpc.pipeInfo("worker1");
    pipeLine = `pipe to worker1: transport ${info.transport}, cpu-cpu channel ${info.channels["cpu-cpu"] ?? "none"}`;
    // JIT warm-up of both processes (V8 tiers up after a few thousand calls), before anything is timed
    for (let i = 0; i < (quick ? 1_000 : 3_000); i++) await rpc.rpcSync("worker1", identity, [1]);
    const small = payload(4_000);
    for (let i = 0; i < (quick ? 1_000 : 3_000); i++) await rpc.rpcSync("worker1", identity, [small]);
    const mid = payload(4_000_000);
    for (let i = 0; i < 20; i++) await rpc.rpcSync("worker1", identity, [mid]);
    await Promise.all(Array.from({ length: IN_FLIGHT }, () => rpc.rpcAsync("worker1", identity, [1])));
    const figures: Figures = { sync: new Map(), async: new Map() };
    for (const n of SIZES) {
      figures.sync.set(n, await measureSync("worker1", n, quick));
      (globalThis as { gc?: () => void }).gc?.();
    }
    for (const n of ASYNC_SIZES) figures.async.set(n, await measureAsync("worker1", n, quick));
    // NB: a short bound: Agent.shutdown leaves its bound's timer armed, holding the process open that long.
    await rpc.shutdown({ timeoutMs: 10_000 });
    return figures;
  } finally {
    await rpc.shutdown({ graceful: false, timeoutMs: 5_000 }).catch(() => undefined);
    await cluster.close();
  }
}

const fmtTime = (s: number): string =>
  s < 1e-3 ? `${(s * 1e6).toFixed(1)} us` : s < 1 ? `${(s * 1e3).toFixed(2)} ms` : `${s.toFixed(3)} s`;

const fmtBytes = (n: number): string =>
  n === 0 ? "0 B (a number)" : n >= 1e6 ? `${n / 1e6} MB` : n >= 1e3 ? `${n / 1e3} KB` : `${n} B`;

function cell(s: number | undefined, nbytes: number): string {
  if (s === undefined) return "-";
  return nbytes >= 4_000_000 ? `${fmtTime(s)} (${((2 * nbytes) / s / 1e9).toFixed(2)} GB/s)` : fmtTime(s);
}

const fmtRatio = (r: number | undefined): string => (r === undefined ? "-" : `${r.toFixed(2)}x`);

/** Prints the RPC section (after the tensor section of run.ts). */
export async function rpcBench(quick: boolean): Promise<void> {
  const wall = now();
  const torch = process.argv.includes("--no-torch") ? "skipped (--no-torch)" : runTorch();
  const torchWall = now() - wall;
  const ours = await runTprpc(quick);
  const t = typeof torch === "string" ? undefined : torch.figures;

  console.log("");
  console.log("tprpc bench: RPC between two local processes, tprpc over TCP vs PyTorch RPC, measured in this run");
  console.log(
    "tprpc: this process (rank 0) + 1 worker (startLocalWorkers), shipped identity (x) => x, float32 tensors",
  );
  console.log(pipeLine);
  if (typeof torch === "string") console.log(`PyTorch RPC reference unavailable (${torch})`);
  else console.log(`PyTorch RPC: ${torch.header}; TensorPipe default = shm transport + cma channel on one host`);
  console.log("ratios: > 1 means tprpc is faster (latency torch/tprpc, throughput tprpc/torch)");
  console.log("");
  const head = `${"rpcSync identity round trip".padEnd(30)}${"tprpc".padStart(26)}${"torch".padStart(26)}${"ratio".padStart(9)}`;
  console.log(head);
  console.log("-".repeat(head.length));
  for (const n of SIZES) {
    const o = ours.sync.get(n);
    const r = t?.sync.get(n);
    console.log(
      fmtBytes(n).padEnd(30) +
        cell(o, n).padStart(26) +
        cell(r, n).padStart(26) +
        fmtRatio(o && r ? r / o : undefined).padStart(9),
    );
  }
  console.log("");
  for (const n of ASYNC_SIZES) {
    const o = ours.async.get(n);
    const r = t?.async.get(n);
    console.log(
      `rpcAsync identity, ${IN_FLIGHT} in flight, ${fmtBytes(n)}`.padEnd(50) +
        `${o?.toFixed(0) ?? "-"} calls/s`.padStart(16) +
        `${r?.toFixed(0) ?? "-"} calls/s`.padStart(16) +
        fmtRatio(o && r ? o / r : undefined).padStart(9),
    );
  }
  console.log("");
  console.log(
    `RPC section time ${(now() - wall).toFixed(1)} s (PyTorch reference ${torchWall.toFixed(1)} s of it)${quick ? ", --quick: fewer repetitions" : ""}`,
  );
}
