/**
 * What getting CUDA memory back from garbage costs (sdk/tensor/backend/cuda/index.ts: the block
 * tracker's sweep, minor and full GCs, the reclaim policy), and what a synchronous training loop's
 * device memory does with it. Runs on cuda:0: a GPU, or the emulated device with TPRPC_CUDA=emulate.
 *
 *   npm run build && TPRPC_CUDA=emulate node dist/bench/cuda_reclaim.js [--steps 20] [--gpt small|bench] [--loop-only]
 *
 * 1. Sweep: the time of one sweep (no GC) with 1k, 10k and 50k live tracked blocks.
 * 2. GC: a minor and a full gc() (median of 5) with the SDK loaded, then with 100 and 400 MB of
 *    small JS objects live besides (a training process's heap is tens to hundreds of MB).
 * 3. 3,000 kernel outputs of 1 MiB dropped at once: the time, the peak and what the policy ran.
 * 4. A GPT (bench/gpt_step.ts's "bench": nEmbd 128, 4 layers, batch 32 x 64; "small": nEmbd 64,
 *    2 layers, batch 8 x 32, for the emulated device) trains --steps synchronous steps (forward,
 *    crossEntropy, backward, AdamW step, loss.item(), no await): per step the allocated and peak
 *    bytes, bytes allocated, and what the policy did (reclaims, GCs, their ms). TPRPC_CUDA_RECLAIM_MB=0
 *    shows the same loop without the policy; --loop-only skips 1 and 2.
 */
import { cuda, manualSeed, nn, optim, randint } from "../sdk/index.js";
import { CudaDeviceBackend } from "../sdk/tensor/backend/cuda/index.js";
import { deviceBackendFor } from "../sdk/tensor/backend/devices.js";
import { Device } from "../sdk/tensor/device.js";
import * as raw from "../sdk/tensor/raw.js";
import { v8Gc } from "../sdk/util/gc.js";
import { median } from "./rpc_common.js";

const arg = (name: string, dflt: string): string => {
  const i = process.argv.indexOf(name);
  return i >= 0 ? process.argv[i + 1]! : dflt;
};
const STEPS = Number(arg("--steps", "20"));
const GPT = arg("--gpt", process.env.TPRPC_CUDA?.startsWith("emulate") ? "small" : "bench");
const MiB = 2 ** 20;
const mb = (b: number): string => (b / MiB).toFixed(1);

if (!cuda.isAvailable()) throw new Error(`no CUDA device: ${cuda.unavailableReason()}`);
cuda.memoryAllocated(); // NB: finds the backend
const b = deviceBackendFor("cuda");
if (!(b instanceof CudaDeviceBackend)) throw new Error("not tprpc's CUDA backend");
const gc = v8Gc();
if (!gc) throw new Error("no gc()");
const dev = new Device("cuda", 0);
console.log(`device: ${b.api.memInfo(0).total / 2 ** 30} GiB, node ${process.version}`);

const LOOP_ONLY = process.argv.includes("--loop-only");

// 1. Sweep cost against live blocks
if (!LOOP_ONLY) {
  for (const n of [1000, 10_000, 50_000]) {
    const live = Array.from({ length: n }, () => b.alloc(dev, 512, false));
    const ts: number[] = [];
    for (let k = 0; k < 5; k++) {
      const t = performance.now();
      b.sweep();
      ts.push(performance.now() - t);
    }
    console.log(
      `sweep, ${n} live blocks: ${median(ts).toFixed(3)} ms (${((median(ts) * 1e6) / n).toFixed(0)} ns/block)`,
    );
    live.length = 0;
    gc();
    b.sweep();
  }
}

// 2. GC cost against JS heap size
function gcCosts(label: string): void {
  const minor: number[] = [];
  const major: number[] = [];
  for (let k = 0; k < 5; k++) {
    let t = performance.now();
    gc!({ type: "minor" });
    minor.push(performance.now() - t);
    t = performance.now();
    gc!();
    major.push(performance.now() - t);
  }
  const heap = process.memoryUsage().heapUsed;
  console.log(
    `gc, ${label} (heap ${mb(heap)} MB): minor ${median(minor).toFixed(2)} ms, full ${median(major).toFixed(2)} ms`,
  );
}
if (!LOOP_ONLY) gcCosts("SDK loaded");
if (!LOOP_ONLY) {
  let ballast: { a: number; b: string; c: number[] }[] = [];
  for (const target of [100, 400]) {
    while (process.memoryUsage().heapUsed < target * MiB)
      for (let i = 0; i < 10_000; i++) ballast.push({ a: i, b: `s${i}`, c: [i, i + 1] });
    gcCosts(`+ small objects`);
  }
  ballast = [];
  gc();
}

// 3. 3,000 temporaries of 1 MiB (kernel outputs: no host memory beside them), no await
{
  const base = b.api.memoryStats(0)["allocated_bytes.all.current"]!;
  b.api.resetPeakMemoryStats(0);
  const s0 = b.reclaimStats();
  const t = performance.now();
  for (let i = 0; i < 3000; i++) raw.output([MiB / 4], "float32", dev);
  const ms = performance.now() - t;
  const s = b.reclaimStats();
  const peak = b.api.memoryStats(0)["allocated_bytes.all.peak"]! - base;
  console.log(
    `3,000 temporaries of 1 MiB: ${ms.toFixed(1)} ms, peak ${mb(peak)} MB over the start, reclaims ${s.reclaims - s0.reclaims} ` +
      `(by sweep ${s.bySweep - s0.bySweep}, minor ${s.minorGcs - s0.minorGcs}, full ${s.majorGcs - s0.majorGcs}), ` +
      `gc ${(s.gcMs - s0.gcMs).toFixed(1)} ms, sweep ${(s.sweepMs - s0.sweepMs).toFixed(2)} ms`,
  );
}

// 4. A synchronous training loop
{
  const cfg =
    GPT === "small"
      ? { vocabSize: 70, nLayer: 2, nEmbd: 64, nHead: 4, blockSize: 32, tieWeights: false, B: 8 }
      : { vocabSize: 70, nLayer: 4, nEmbd: 128, nHead: 4, blockSize: 64, tieWeights: false, B: 32 };
  manualSeed(0);
  const model = new nn.GPT(cfg);
  model.to("cuda:0");
  const opt = new optim.AdamW(model.parameters(), { lr: 3e-3, weightDecay: 0.01 });
  const T = cfg.blockSize;
  console.log(
    `GPT ${GPT}: nEmbd ${cfg.nEmbd}, ${cfg.nLayer} layers, batch ${cfg.B} x ${T}; TPRPC_CUDA_RECLAIM_MB=${process.env.TPRPC_CUDA_RECLAIM_MB ?? "(default)"}`,
  );
  let prev = b.reclaimStats();
  let prevAllocs = cuda.memoryStats(0)["allocation.all.allocated"]!;
  const t0 = performance.now();
  for (let s = 0; s < STEPS; s++) {
    const ts = performance.now();
    const x = randint(0, cfg.vocabSize, [cfg.B, T]).to("cuda:0");
    const y = randint(0, cfg.vocabSize, [cfg.B, T]).to("cuda:0");
    opt.zeroGrad();
    const loss = model.forward(x, y).loss!;
    loss.backward();
    opt.step();
    const l = loss.item();
    const ms = performance.now() - ts;
    const st = b.reclaimStats();
    // NB: read without the sweep memoryStats does, so the numbers are the loop's own
    const raw = b.api.memoryStats(0);
    const allocs = raw["allocation.all.allocated"]!;
    console.log(
      `step ${s}: ${ms.toFixed(0)} ms, loss ${l.toFixed(4)}, allocated ${mb(raw["allocated_bytes.all.current"]!)} MB, ` +
        `peak ${mb(raw["allocated_bytes.all.peak"]!)} MB, reserved ${mb(raw["reserved_bytes.all.current"]!)} MB, ` +
        `${allocs - prevAllocs} allocations, reclaims ${st.reclaims - prev.reclaims} ` +
        `(by sweep ${st.bySweep - prev.bySweep}, minor ${st.minorGcs - prev.minorGcs}, full ${st.majorGcs - prev.majorGcs}), ` +
        `gc ${(st.gcMs - prev.gcMs).toFixed(1)} ms, sweep ${(st.sweepMs - prev.sweepMs).toFixed(2)} ms`,
    );
    prev = st;
    prevAllocs = allocs;
  }
  const all = b.reclaimStats();
  const raw = b.api.memoryStats(0);
  console.log(
    `total ${(performance.now() - t0).toFixed(0)} ms over ${STEPS} steps; gc ${all.gcMs.toFixed(1)} ms, sweeps ${all.sweepMs.toFixed(1)} ms; ` +
      `num_device_alloc ${raw.num_device_alloc ?? "n/a"}; ${JSON.stringify(all)}`,
  );
}
