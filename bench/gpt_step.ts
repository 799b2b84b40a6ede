/**
 * One training step of the small character GPT of notebooks/04_pipeline_gpt (issue 8),
 * unsplit, in one process on one core: forward, crossEntropy, backward and an AdamW step. Prints
 * ms/step (median over the timed steps), tokens/s, the process's CPU time per step (steadier than
 * wall time on a shared machine), a split of the step into its phases, and the loss after the last step (a checksum: a speed change must leave it equal within float noise).
 *
 *   npm run build && node dist/bench/gpt_step.js [--steps 10] [--micro 4] [--threads 1] [--torch]
 *
 * 1. manualSeed(0); model { vocabSize 70, nLayer 4, nEmbd 128, nHead 4, blockSize 64, untied };
 *    AdamW(lr 3e-3, weightDecay 0.01); setNumThreads(--threads, default 1).
 * 2. Batches of 32 random token windows, drawn from the seeded generator (timing only; the
 *    loss is a checksum, not a learning curve).
 * 3. --micro k splits each batch into k micro-batches, each backward accumulating into .grad.
 * 4. Two warm-up steps, then --steps timed ones.
 * 5. --torch also runs bench/gpt_step_torch.py (the same model in PyTorch, one thread)
 *    under /usr/bin/python3 (TPRPC_TORCH_PYTHON overrides) and prints its figure beside ours.
 */
import { spawnSync } from "node:child_process";
import path from "node:path";
import { fileURLToPath } from "node:url";
import { manualSeed, nn, optim, randint, setNumThreads, type Tensor } from "../sdk/index.js";

const arg = (name: string, dflt: number): number => {
  const i = process.argv.indexOf(name);
  return i >= 0 ? Number(process.argv[i + 1]) : dflt;
};
const STEPS = arg("--steps", 10);
const MICRO = arg("--micro", 1);
const THREADS = arg("--threads", 1);
const WARMUP = 2;
const B = 32;
const T = 64;
const V = 70;

setNumThreads(THREADS);
manualSeed(0);
const model = new nn.GPT({ vocabSize: V, nLayer: 4, nEmbd: 128, nHead: 4, blockSize: T, tieWeights: false });
const opt = new optim.AdamW(model.parameters(), { lr: 3e-3, weightDecay: 0.01 });

const phases = { forward: 0, backward: 0, step: 0 };
let lastLoss = Number.NaN;

function step(): void {
  const x = randint(0, V, [B, T]);
  const y = randint(0, V, [B, T]);
  opt.zeroGrad();
  const xs: Tensor[] = x.chunk(MICRO);
  const ys: Tensor[] = y.chunk(MICRO);
  let sum = 0;
  for (let i = 0; i < MICRO; i++) {
    const t0 = performance.now();
    const { loss } = model.forward(xs[i]!, ys[i]!);
    const l = loss!.div(MICRO);
    const t1 = performance.now();
    l.backward();
    const t2 = performance.now();
    phases.forward += t1 - t0;
    phases.backward += t2 - t1;
    sum += l.item();
  }
  const t3 = performance.now();
  opt.step();
  phases.step += performance.now() - t3;
  lastLoss = sum;
}

for (let i = 0; i < WARMUP; i++) step();
phases.forward = phases.backward = phases.step = 0;
const times: number[] = [];
const cpuTimes: number[] = [];
for (let i = 0; i < STEPS; i++) {
  const t0 = performance.now();
  const c0 = process.cpuUsage();
  step();
  const c = process.cpuUsage(c0);
  times.push(performance.now() - t0);
  cpuTimes.push((c.user + c.system) / 1000);
}
times.sort((a, b) => a - b);
cpuTimes.sort((a, b) => a - b);
const median = times[Math.floor(times.length / 2)]!;
const cpuMedian = cpuTimes[Math.floor(cpuTimes.length / 2)]!;
const per = (ms: number) => (ms / STEPS).toFixed(1);
const lines = [
  `tprpc gpt step (B=${B}, T=${T}, micro=${MICRO}, ${THREADS} thread${THREADS === 1 ? "" : "s"}): ${median.toFixed(1)} ms/step median ` +
    `(min ${times[0]!.toFixed(1)}), ${Math.round((B * T) / (median / 1000))} tokens/s`,
  `  process CPU time: ${cpuMedian.toFixed(1)} ms/step median (min ${cpuTimes[0]!.toFixed(1)}; GC threads included)`,
  `  phases per step: forward ${per(phases.forward)} ms, backward ${per(phases.backward)} ms, AdamW ${per(phases.step)} ms`,
  `  loss after ${WARMUP + STEPS} steps: ${lastLoss.toFixed(6)}`,
];
// NB: an OPENBLAS_CORETYPE in the environment picks OpenBLAS's kernels for tprpc and torch alike; on
// this project's AMD EPYC machine it is set to Haswell (AVX2), and SkylakeX (AVX-512) runs this
// step's GEMMs ~1.7x faster, so say which one a figure was taken with.
if (process.env.OPENBLAS_CORETYPE) lines.push(`  OPENBLAS_CORETYPE=${process.env.OPENBLAS_CORETYPE}`);
process.stdout.write(lines.join("\n") + "\n");

if (process.argv.includes("--torch")) {
  const here = path.dirname(fileURLToPath(import.meta.url));
  const script = path.resolve(here, "../../bench/gpt_step_torch.py");
  const python = process.env.TPRPC_TORCH_PYTHON ?? "/usr/bin/python3";
  const r = spawnSync(python, [script, "--steps", String(STEPS), "--micro", String(MICRO)], {
    encoding: "utf8",
    env: { ...process.env, OMP_NUM_THREADS: "1", OPENBLAS_NUM_THREADS: "1" },
  });
  process.stdout.write(r.status === 0 ? r.stdout : `torch reference unavailable: ${r.stderr.trim().slice(-300)}\n`);
}
