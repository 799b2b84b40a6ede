/**
 * CUDA kernel micro-benchmark (issue 21), for a device run: on cuda:0, the GB/s of an elementwise
 * op (mul: two reads, one write) against a plain copy (clone: one read, one write) of float32
 * tensors, and the TFLOP/s of a float32 matmul; with --torch, PyTorch's figures for the same work
 * from the same run, and the ratios. Runs on the emulated device too (TPRPC_CUDA=emulate, small
 * sizes: a smoke run, not a measurement).
 *
 *   npm run build && node dist/bench/cuda_ops.js [--mib 256] [--n 4096] [--iters 20] [--torch]
 *
 * Each figure: one warm-up, then --iters launches, then one element read back (the read waits for
 * the device: kernels run on the legacy default stream, in order), wall time divided by --iters.
 */
import { spawnSync } from "node:child_process";
import { cuda, manualSeed, randn, type Tensor } from "../sdk/index.js";

const arg = (name: string, dflt: number): number => {
  const i = process.argv.indexOf(name);
  return i >= 0 ? Number(process.argv[i + 1]) : dflt;
};
const MIB = arg("--mib", 256);
const N = arg("--n", 4096);
const ITERS = arg("--iters", 20);

if (!cuda.isAvailable()) {
  console.error(`no CUDA device: ${cuda.unavailableReason()}`);
  process.exit(1);
}

/** Seconds per call of f, the device drained by reading one element of the last result. */
function timeIt(f: () => Tensor): number {
  f().narrow(0, 0, 1).cpu();
  const t0 = performance.now();
  let last: Tensor | null = null;
  for (let i = 0; i < ITERS; i++) last = f();
  last!.narrow(0, 0, 1).cpu();
  return (performance.now() - t0) / 1000 / ITERS;
}

manualSeed(0);
const numel = Math.floor((MIB * 1024 * 1024) / 4);
const x = randn([numel]).cuda();
const y = randn([numel]).cuda();
const bytes = numel * 4;
const copyGBs = (2 * bytes) / timeIt(() => x.clone()) / 1e9;
const mulGBs = (3 * bytes) / timeIt(() => x.mul(y)) / 1e9;
const a = randn([N, N]).cuda();
const b = randn([N, N]).cuda();
const tflops = (2 * N * N * N) / timeIt(() => a.matmul(b)) / 1e12;
const ours = { copyGBs, mulGBs, mulOfCopy: mulGBs / copyGBs, matmulTflops: tflops };
console.log(JSON.stringify({ tprpc: ours }));

if (process.argv.includes("--torch")) {
  const py = `
import json, time, torch
n=${numel}; N=${N}; it=${ITERS}
x=torch.randn(n,device="cuda"); y=torch.randn(n,device="cuda")
a=torch.randn(N,N,device="cuda"); b=torch.randn(N,N,device="cuda")
def t(f):
  f(); torch.cuda.synchronize(); t0=time.perf_counter()
  for _ in range(it): f()
  torch.cuda.synchronize(); return (time.perf_counter()-t0)/it
c=2*n*4/t(lambda: x.clone())/1e9; m=3*n*4/t(lambda: x*y)/1e9; f=2*N**3/t(lambda: a@b)/1e12
print(json.dumps({"copyGBs":c,"mulGBs":m,"matmulTflops":f,"device":torch.cuda.get_device_name()}))
`;
  const r = spawnSync(process.env.TPRPC_TORCH_PYTHON ?? "python3", ["-c", py], { encoding: "utf8" });
  if (r.status !== 0) console.error(`PyTorch run failed: ${r.stderr}`);
  else {
    const torch = JSON.parse(r.stdout.trim().split("\n").pop()!) as Record<string, number>;
    console.log(
      JSON.stringify({
        torch,
        ratios: {
          mulOfTorchCopy: mulGBs / torch.copyGBs!,
          mulVsTorch: mulGBs / torch.mulGBs!,
          matmulVsTorch: tflops / torch.matmulTflops!,
        },
      }),
    );
  }
}
