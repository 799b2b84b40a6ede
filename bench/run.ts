/**
 * `npm run bench`: tprpc's tensor kernels beside torch CPU's, measured in one run on this machine.
 *
 * Figures: f32 matmul GFLOP/s (2·n³/t) for square n = 256 … 2048, elementwise add GB/s (reads 2
 * arrays, writes 1), exp and softmax (rows of 1024) GB/s (read 1, write 1) on 4,194,304 f32 elements.
 * Both sides allocate their result, as `a.matmul(b)` / `a.add(b)` do.
 *
 * 1. torch: bench/torch_ref.py runs under /usr/bin/python3 (TPRPC_TORCH_PYTHON overrides), one
 *    child per thread count (1 and 2), and prints JSON. Missing torch prints "torch reference
 *    unavailable" and the tprpc columns are still measured.
 * 2. tprpc: every registered backend through the public API — "ts" (the reference, one JS thread; the
 *    big matmuls are skipped when they would blow the time budget) and, when the addon loads,
 *    "native" at 1 and 2 threads (setNumThreads).
 * 3. Ratios compare native with torch at the same thread count.
 * 4. Like torch_ref.py, each (backend, threads) set runs in its own child process, so one set's
 *    garbage and V8's GC heuristics after it don't tax the next.
 *
 * Timing follows bench/reference/timing.py: warm-up, then trials of a batch of calls, per-call
 * time = median over trials; torch_ref.py measures the same way. Run: npm run bench [-- --quick]
 *
 * Then the RPC section (bench/rpc.ts): tprpc over TCP vs PyTorch RPC between two local
 * processes. `-- --rpc-only` / `-- --no-rpc` run one section. `-- --collectives` runs only the
 * tprpc.distributed section (bench/collectives.ts: send/recv per channel, allReduce in 3 and 4
 * processes, beside torch.distributed's gloo). `-- --e2e` runs only the whole-workload section
 * (bench/e2e.ts: notebook 04's pipelined GPT beside its PyTorch RPC twin). `-- --fetch-ahead` runs a
 * two-stage pipeline with and without RRef arguments fetched ahead (bench/fetch_ahead.ts).
 */
import { spawnSync } from "node:child_process";
import fs from "node:fs";
import os from "node:os";
import path from "node:path";
import { fileURLToPath } from "node:url";
import { backend, manualSeed, randn, setNumThreads } from "../sdk/index.js";
import { rpcBench } from "./rpc.js";
import { collectivesBench } from "./collectives.js";
import { e2eBench } from "./e2e.js";
import { fetchAheadBench } from "./fetch_ahead.js";
import { fullGc } from "./rpc_common.js";

const QUICK = process.argv.includes("--quick");
const MATMUL_SIZES = QUICK ? [256, 512] : [256, 512, 1024, 2048];
const ELEMS = 1 << 22;
const TS_BUDGET_S = QUICK ? 8 : 30; // the TS reference's matmul time budget, roughly

interface TorchThread {
  threads: number;
  blas: string;
  matmul_gflops: Record<string, number>;
  add_gbs: number;
  exp_gbs: number;
  softmax_gbs: number;
  add_out_gbs: number;
  exp_out_gbs: number;
  error?: string;
}

interface TorchRef {
  available: boolean;
  reason?: string;
  torch?: string;
  default_threads?: number;
  threads?: Record<string, TorchThread>;
}

const now = (): number => Number(process.hrtime.bigint()) / 1e9;

function median(xs: number[]): number {
  const s = [...xs].sort((a, b) => a - b);
  const m = s.length >> 1;
  return s.length % 2 ? s[m]! : (s[m - 1]! + s[m]!) / 2;
}

/**
 * Per-call seconds: a first timed call (also the first warm-up), more warm-up up to ~0.2 s, then
 * trials of `batch` calls (batch makes a trial >= ~20 ms), median over trials.
 */
function measure(fn: () => unknown, budgetS = 1.5, minTrials = 5): number {
  fullGc();
  let t0 = now();
  fn();
  const est = Math.max(now() - t0, 1e-7);
  const warm = Math.max(0, Math.min(20, Math.floor(0.2 / est)));
  for (let i = 0; i < warm; i++) fn();
  const batch = Math.max(1, Math.floor(0.02 / est));
  const trials = Math.max(minTrials, Math.min(15, Math.floor(budgetS / (est * batch))));
  const perCall: number[] = [];
  for (let t = 0; t < trials; t++) {
    t0 = now();
    for (let i = 0; i < batch; i++) fn();
    perCall.push((now() - t0) / batch);
  }
  return median(perCall);
}

function findTorchRef(): string | undefined {
  let dir = path.dirname(fileURLToPath(import.meta.url));
  for (let i = 0; i < 6; i++) {
    for (const p of [path.join(dir, "torch_ref.py"), path.join(dir, "bench", "torch_ref.py")]) {
      if (fs.existsSync(p)) return p;
    }
    dir = path.dirname(dir);
  }
  return undefined;
}

function runTorch(): TorchRef {
  const script = findTorchRef();
  if (!script) return { available: false, reason: "bench/torch_ref.py not found" };
  const python = process.env.TPRPC_TORCH_PYTHON ?? "/usr/bin/python3";
  const sizes = MATMUL_SIZES.join(",");
  const r = spawnSync(python, [script, "--sizes", sizes], { encoding: "utf8", timeout: 900_000 });
  if (r.error) return { available: false, reason: `${python}: ${r.error.message}` };
  if (r.status !== 0)
    return { available: false, reason: `${python} exited ${r.status}: ${r.stderr.trim().slice(-300)}` };
  try {
    return JSON.parse(r.stdout) as TorchRef;
  } catch {
    return { available: false, reason: `unreadable output from torch_ref.py: ${r.stdout.slice(0, 200)}` };
  }
}

type Figure = number | string; // a figure, or why it is missing

interface Row {
  label: string;
  ts: Figure;
  native1?: Figure;
  native2?: Figure;
  torch1?: number;
  torch2?: number;
}

function fmt(x: Figure | undefined, width: number): string {
  if (x === undefined) return "-".padStart(width);
  if (typeof x === "string") return x.padStart(width);
  return (x >= 100 ? x.toFixed(1) : x >= 1 ? x.toFixed(2) : x.toPrecision(3)).padStart(width);
}

function tryFigure(f: () => number): Figure {
  try {
    return f();
  } catch (e) {
    return `error: ${(e as Error).message.slice(0, 40)}`;
  }
}

const ratio = (ours: Figure | undefined, ref: number | undefined): number | undefined =>
  typeof ours === "number" && ref ? ours / ref : undefined;

/** Every figure for the current backend; matmul sizes past `maxMatmul` are reported as skipped. */
function figures(predictMatmul: boolean): Map<string, Figure> {
  const out = new Map<string, Figure>();
  const start = now();
  let last: { n: number; s: number } | undefined;
  for (const n of MATMUL_SIZES) {
    const key = `matmul ${n}`;
    const predicted = last ? last.s * (n / last.n) ** 3 * 4 : 0;
    if (predictMatmul && predicted > TS_BUDGET_S - (now() - start)) {
      out.set(key, `skipped (~${predicted.toFixed(0)} s)`);
      continue;
    }
    out.set(
      key,
      tryFigure(() => {
        const a = randn([n, n]);
        const b = randn([n, n]);
        const s = measure(() => a.matmul(b), n >= 1024 ? 4 : 1.5, n >= 1024 ? 3 : 5);
        last = { n, s };
        return (2 * n ** 3) / s / 1e9;
      }),
    );
  }
  const bytes = 4 * ELEMS;
  const x = randn([ELEMS]);
  const y = randn([ELEMS]);
  const rows = x.view(ELEMS / 1024, 1024);
  out.set(
    "add",
    tryFigure(() => (3 * bytes) / measure(() => x.add(y)) / 1e9),
  );
  out.set(
    "exp",
    tryFigure(() => (2 * bytes) / measure(() => x.exp()) / 1e9),
  );
  out.set(
    "softmax",
    tryFigure(() => (2 * bytes) / measure(() => rows.softmax(1)) / 1e9),
  );
  return out;
}

/** Runs figures() for one backend and thread count in a child process (see 4. above). */
function childFigures(name: string, threads: number): Map<string, Figure> {
  const args = [...process.execArgv, fileURLToPath(import.meta.url), "--child", name, String(threads)];
  if (QUICK) args.push("--quick");
  const r = spawnSync(process.execPath, args, { encoding: "utf8", timeout: 600_000 });
  const line = r.stdout?.trim().split("\n").pop() ?? "";
  try {
    return new Map(Object.entries(JSON.parse(line) as Record<string, Figure>));
  } catch {
    const why = `failed (${r.status}): ${(r.stderr ?? "").trim().slice(-60)}`;
    return new Map([...MATMUL_SIZES.map((n) => `matmul ${n}`), "add", "exp", "softmax"].map((k) => [k, why]));
  }
}

function child(name: string, threads: number): void {
  backend.setBackend(name);
  setNumThreads(threads);
  manualSeed(0);
  console.log(JSON.stringify(Object.fromEntries(figures(name === "ts"))));
}

function main(): void {
  const torch = runTorch();
  const t1 = torch.threads?.["1"];
  const t2 = torch.threads?.["2"];
  const wall = now();

  const ts = childFigures("ts", 1);
  const haveNative = backend.listBackends().includes("native");
  const native1 = haveNative ? childFigures("native", 1) : undefined;
  const native2 = haveNative ? childFigures("native", 2) : undefined;

  const rows: Row[] = [];
  for (const n of MATMUL_SIZES) {
    const k = `matmul ${n}`;
    rows.push({
      label: `matmul f32 ${n}x${n} GFLOP/s`,
      ts: ts.get(k)!,
      native1: native1?.get(k),
      native2: native2?.get(k),
      torch1: t1?.matmul_gflops?.[n],
      torch2: t2?.matmul_gflops?.[n],
    });
  }
  const ew: [string, string, keyof TorchThread][] = [
    ["add", `add f32 4M GB/s (r2+w1)`, "add_gbs"],
    ["exp", `exp f32 4M GB/s (r1+w1)`, "exp_gbs"],
    ["softmax", `softmax f32 4Kx1K GB/s`, "softmax_gbs"],
  ];
  for (const [k, label, tk] of ew)
    rows.push({
      label,
      ts: ts.get(k)!,
      native1: native1?.get(k),
      native2: native2?.get(k),
      torch1: t1?.[tk] as number | undefined,
      torch2: t2?.[tk] as number | undefined,
    });

  const cpu = os.cpus()[0]?.model ?? "unknown CPU";
  console.log("tprpc bench: tensor kernels vs torch CPU, measured in this run on this machine");
  const load = os.loadavg()[0] ?? 0;
  console.log(`node ${process.version}, ${os.cpus().length} CPUs (${cpu}), load average ${load.toFixed(2)}`);
  if (load > 0.5) console.log("NB: other work is running here; the 2-thread figures suffer most from it");
  if (torch.available) {
    console.log(`torch ${torch.torch} (${t1?.blas ?? "?"} BLAS), default threads ${torch.default_threads}`);
    for (const [k, v] of Object.entries(torch.threads ?? {}))
      if (v.error) console.log(`torch ${k} thread(s) failed: ${v.error}`);
  } else {
    console.log(`torch reference unavailable (${torch.reason})`);
  }
  if (!haveNative) console.log("native backend not loaded: only the TS reference is measured");
  console.log("");
  const cols: [string, number][] = [
    ["figure", 30],
    ["ts", 20],
    ["native 1T", 11],
    ["torch 1T", 10],
    ["nat/torch", 10],
    ["native 2T", 11],
    ["torch 2T", 10],
    ["nat/torch", 10],
  ];
  const head = cols.map(([h, w], i) => (i === 0 ? h.padEnd(w) : h.padStart(w))).join("");
  console.log(head);
  console.log("-".repeat(head.length));
  for (const r of rows) {
    console.log(
      r.label.padEnd(30) +
        fmt(r.ts, 20) +
        fmt(r.native1, 11) +
        fmt(r.torch1, 10) +
        fmt(ratio(r.native1, r.torch1), 10) +
        fmt(r.native2, 11) +
        fmt(r.torch2, 10) +
        fmt(ratio(r.native2, r.torch2), 10),
    );
  }
  console.log("");
  if (t1 && !t1.error)
    console.log(
      `torch into a preallocated out= (no allocation), 1 thread: add ${fmt(t1.add_out_gbs, 0)} GB/s, exp ${fmt(t1.exp_out_gbs, 0)} GB/s`,
    );
  console.log(`tprpc measuring time ${(now() - wall).toFixed(1)} s`);
}

const childAt = process.argv.indexOf("--child");
if (childAt >= 0) child(process.argv[childAt + 1]!, Number(process.argv[childAt + 2]));
else if (process.argv.includes("--collectives")) await collectivesBench(QUICK);
else if (process.argv.includes("--e2e")) await e2eBench(process.argv.slice(2));
else if (process.argv.includes("--fetch-ahead")) await fetchAheadBench(process.argv.slice(2));
else {
  // --rpc-only / --no-rpc pick one section; the RPC section (bench/rpc.ts) follows the tensor one.
  if (!process.argv.includes("--rpc-only")) main();
  if (!process.argv.includes("--no-rpc")) await rpcBench(QUICK);
}
