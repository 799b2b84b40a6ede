/**
 * `npm run bench`: tprpc's tensor kernels beside torch CPU's, measured in one run on this machine.
 *
 * Figures: f32 matmul GFLOP/s (2·n³/t) for square n = 128, 256, 512 (1024 when it fits the time
 * budget), elementwise add GB/s (reads 2 arrays, writes 1) and exp GB/s (reads 1, writes 1) on
 * 4,194,304 f32 elements. Both sides allocate their result, as `a.matmul(b)` / `a.add(b)` do.
 *
 * 1. torch: test/bench/torch_ref.py runs under /usr/bin/python3 (TPRPC_TORCH_PYTHON overrides), one
 *    child per thread count (1 and 2), and prints JSON. Missing torch prints "torch reference
 *    unavailable" and the tprpc column is still measured.
 * 2. tprpc: the backend TPRPC_BACKEND picks (default ts), through the public API only.
 * 3. The ratio compares tprpc with torch at ONE thread (the TS backend runs on the one JS thread);
 *    torch at 2 threads is printed for scale.
 *
 * Timing follows /work/shared/bench/common.py: warm-up, then trials of a batch of calls, per-call
 * time = median over trials; torch_ref.py uses the same plan. Run: npm run bench [-- --quick]
 */
import { spawnSync } from "node:child_process";
import fs from "node:fs";
import os from "node:os";
import path from "node:path";
import { fileURLToPath } from "node:url";
import { manualSeed, randn } from "../../sdk/index.js";

const QUICK = process.argv.includes("--quick");
const MATMUL_SIZES = QUICK ? [128, 256] : [128, 256, 512];
const BIG = 1024; // tprpc measures it only when the 512 figure predicts it fits the budget
const ELEMS = 1 << 22;
const TS_BUDGET_S = QUICK ? 10 : 60; // total tprpc measuring time, roughly

interface TorchThread {
  threads: number;
  blas: string;
  matmul_gflops: Record<string, number>;
  add_gbs: number;
  exp_gbs: number;
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
  (globalThis as { gc?: () => void }).gc?.();
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
    for (const p of [path.join(dir, "torch_ref.py"), path.join(dir, "test", "bench", "torch_ref.py")]) {
      if (fs.existsSync(p)) return p;
    }
    dir = path.dirname(dir);
  }
  return undefined;
}

function runTorch(): TorchRef {
  const script = findTorchRef();
  if (!script) return { available: false, reason: "test/bench/torch_ref.py not found" };
  const python = process.env.TPRPC_TORCH_PYTHON ?? "/usr/bin/python3";
  const sizes = [...MATMUL_SIZES, BIG].join(",");
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

interface Row {
  label: string;
  ours: number | string; // a figure, or why it is missing
  torch1?: number;
  torch2?: number;
}

function fmt(x: number | string | undefined, width: number): string {
  if (x === undefined) return "-".padStart(width);
  if (typeof x === "string") return x.padStart(width);
  return (x >= 100 ? x.toFixed(1) : x >= 1 ? x.toFixed(2) : x.toPrecision(3)).padStart(width);
}

function main(): void {
  const backend = process.env.TPRPC_BACKEND ?? "ts";
  const torch = runTorch();
  const t1 = torch.threads?.["1"];
  const t2 = torch.threads?.["2"];

  manualSeed(0);
  const rows: Row[] = [];
  const tsStart = now();
  const spent = (): number => now() - tsStart;
  let last: { n: number; s: number } | undefined;

  const tryFigure = (f: () => number): number | string => {
    try {
      return f();
    } catch (e) {
      return `error: ${(e as Error).message.slice(0, 40)}`;
    }
  };

  for (const n of [...MATMUL_SIZES, BIG]) {
    let ours: number | string;
    if (n === BIG) {
      // NB: one 1024 call costs ~8x a 512 call; it needs a first call + 3 trials.
      const predicted = last ? last.s * 8 * 4 : Number.POSITIVE_INFINITY;
      const left = TS_BUDGET_S - spent() - 5; // keep ~5 s for the elementwise rows
      if (QUICK || predicted > left) {
        const est = predicted === Number.POSITIVE_INFINITY ? "?" : predicted.toFixed(0);
        ours = QUICK ? "skipped (--quick)" : `skipped (~${est} s)`;
        rows.push({
          label: `matmul f32 ${n}x${n} GFLOP/s`,
          ours,
          torch1: t1?.matmul_gflops?.[n],
          torch2: t2?.matmul_gflops?.[n],
        });
        continue;
      }
    }
    ours = tryFigure(() => {
      const a = randn([n, n]);
      const b = randn([n, n]);
      const s = measure(() => a.matmul(b), n >= 512 ? 6 : 1.5, n >= 512 ? 3 : 5);
      last = { n, s };
      return (2 * n ** 3) / s / 1e9;
    });
    rows.push({
      label: `matmul f32 ${n}x${n} GFLOP/s`,
      ours,
      torch1: t1?.matmul_gflops?.[n],
      torch2: t2?.matmul_gflops?.[n],
    });
  }

  const bytes = 4 * ELEMS;
  const x = randn([ELEMS]);
  const y = randn([ELEMS]);
  rows.push({
    label: `add f32 ${ELEMS} GB/s (r2+w1)`,
    ours: tryFigure(() => (3 * bytes) / measure(() => x.add(y)) / 1e9),
    torch1: t1?.add_gbs,
    torch2: t2?.add_gbs,
  });
  rows.push({
    label: `exp f32 ${ELEMS} GB/s (r1+w1)`,
    ours: tryFigure(() => (2 * bytes) / measure(() => x.exp()) / 1e9),
    torch1: t1?.exp_gbs,
    torch2: t2?.exp_gbs,
  });
  const tsTime = spent();

  // Report.
  const cpu = os.cpus()[0]?.model ?? "unknown CPU";
  console.log(`tprpc bench: backend ${backend} vs torch CPU, measured in this run on this machine`);
  const load = os.loadavg()[0] ?? 0;
  console.log(
    `node ${process.version}, ${os.cpus().length} CPUs (${cpu}), dtype ${x.dtype}, load average ${load.toFixed(2)}`,
  );
  if (load > 0.5) console.log("NB: other work is running here; the 2-thread torch figures suffer most from it");
  if (torch.available) {
    console.log(
      `torch ${torch.torch} (${t1?.blas ?? "?"} BLAS), default threads ${torch.default_threads};` +
        " ratio = tprpc (one JS thread) / torch at 1 thread; torch at 2 threads shown for scale",
    );
    for (const [k, v] of Object.entries(torch.threads ?? {}))
      if (v.error) console.log(`torch ${k} thread(s) failed: ${v.error}`);
  } else {
    console.log(`torch reference unavailable (${torch.reason})`);
  }
  console.log("");
  const head = `${"figure".padEnd(34)}${"tprpc".padStart(18)}${"torch 1T".padStart(11)}${"tprpc/torch".padStart(13)}${"torch 2T".padStart(11)}`;
  console.log(head);
  console.log("-".repeat(head.length));
  for (const r of rows) {
    const ratio = typeof r.ours === "number" && r.torch1 ? r.ours / r.torch1 : undefined;
    console.log(`${r.label.padEnd(34)}${fmt(r.ours, 18)}${fmt(r.torch1, 11)}${fmt(ratio, 13)}${fmt(r.torch2, 11)}`);
  }
  console.log("");
  if (t1 && !t1.error) {
    console.log(
      `torch into a preallocated out= (no allocation), 1 thread: add ${fmt(t1.add_out_gbs, 0)} GB/s, exp ${fmt(t1.exp_out_gbs, 0)} GB/s`,
    );
  }
  console.log(
    `tprpc measuring time ${tsTime.toFixed(1)} s${(globalThis as { gc?: unknown }).gc ? "" : " (run with --expose-gc for steadier figures)"}`,
  );
}

main();
