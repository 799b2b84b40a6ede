/**
 * CUDA tensors end to end, beyond the fixture parity suite: a small MLP trains on cuda:0 with CPU's losses, both matmul
 * paths (the BLAS GEMM with cuBLAS's arguments, and the tk_matmul kernel) agree
 * with the CPU on strided batched views, launches past one grid's worth of
 * threads and rows wider than a block reduce correctly, and bad input gives
 * the typed errors the CPU gives. Run on the emulated device by ./emulated.test.ts and on a GPU by
 * ./device.test.ts.
 */
import { beforeAll, describe, expect, it } from "vitest";
import {
  DTypeError,
  DeviceError,
  IndexError,
  type Tensor,
  cuda,
  manualSeed,
  nn,
  optim,
  randn,
  randint,
  tensor,
} from "../../sdk/index.js";
import { cudaKernelInfo, cudaKernels } from "../../sdk/native/cuda_kernels.js";

function expectNear(got: Tensor, want: Tensor, rtol = 1e-4, atol = 1e-5): void {
  expect(got.device.toString()).toBe("cuda:0");
  expect([...got.shape]).toEqual([...want.shape]);
  const g = got.cpu().toArray();
  const w = want.toArray();
  let bad = 0;
  for (let i = 0; i < w.length; i++) if (!(Math.abs(g[i]! - w[i]!) <= atol + rtol * Math.abs(w[i]!))) bad++;
  expect(bad, `${bad} of ${w.length} values differ`).toBe(0);
}

/** Losses of `steps` AdamW steps of a 2-layer MLP on `device`, from seeded weights and data. */
function trainMlp(device: string, steps: number): number[] {
  manualSeed(7);
  const model = new nn.Sequential(new nn.Linear(16, 32), new nn.ReLU(), new nn.Linear(32, 4));
  model.to(device);
  const opt = new optim.AdamW(model.parameters(), { lr: 1e-2, weightDecay: 0.01 });
  const x = randn([64, 16]).to(device);
  const y = randint(0, 4, [64]).to(device);
  const losses: number[] = [];
  for (let s = 0; s < steps; s++) {
    opt.zeroGrad();
    const loss = nn.functional.crossEntropy(model.forward(x), y);
    loss.backward();
    opt.step();
    losses.push(loss.item());
  }
  return losses;
}

/** The suite on cuda:0 of `mode`'s device; `ready` throws when that device cannot run it. */
export function describeCudaSuite(title: string, mode: "emulate" | "device", ready: () => void): void {
  describe(title, () => {
    beforeAll(ready);

    it("is cuda:0, with kernels built in", () => {
      expect(cuda.isAvailable()).toBe(true);
      expect(cuda.deviceCount()).toBeGreaterThanOrEqual(1);
      const info = cudaKernelInfo()!;
      expect(info.hostKernels).toBeGreaterThan(30);
      // NB: the fatbin is there when nvcc was found at build time; otherwise the build says why
      if (info.fatbinBytes === 0) expect(info.fatbinReason).toMatch(/nvcc|fatbin/);
    });

    it("trains an MLP with the CPU's losses (AdamW, cross-entropy, Module.to)", () => {
      const cpu = trainMlp("cpu", 12);
      const gpu = trainMlp("cuda:0", 12);
      expect(gpu[11]!).toBeLessThan(gpu[0]!);
      for (let i = 0; i < cpu.length; i++)
        expect(Math.abs(gpu[i]! - cpu[i]!)).toBeLessThan(1e-4 * Math.abs(cpu[i]!) + 1e-5);
    });

    it("trains notebook 04's GPT (dropout on, tied weights) for two steps with the CPU's losses, and samples on cuda:0", () => {
      const run = (device: string): { losses: number[]; sample: Tensor } => {
        manualSeed(11);
        const model = new nn.GPT({ vocabSize: 13, nLayer: 2, nHead: 2, nEmbd: 16, blockSize: 8, dropout: 0.1 });
        model.to(device);
        const opt = new optim.AdamW(model.parameters(), { lr: 3e-3 });
        const idx = randint(0, 13, [3, 8]).to(device);
        const targets = randint(0, 13, [3, 8]).to(device);
        const losses: number[] = [];
        for (let s = 0; s < 2; s++) {
          opt.zeroGrad();
          const { loss } = model.forward(idx, targets);
          loss!.backward();
          opt.step();
          losses.push(loss!.item());
        }
        model.eval();
        const sample = model.generate(idx.narrow(1, 0, 2), 3, { temperature: 0.9, topK: 4 });
        return { losses, sample };
      };
      const cpu = run("cpu");
      const gpu = run("cuda:0");
      for (let i = 0; i < 2; i++) expect(Math.abs(gpu.losses[i]! - cpu.losses[i]!)).toBeLessThan(1e-4 * cpu.losses[i]!);
      expect(gpu.sample.device.toString()).toBe("cuda:0");
      expect(gpu.sample.shape).toEqual([3, 5]);
    });

    it("matmuls strided batched views alike through the BLAS GEMM and through the tk_matmul kernel", () => {
      manualSeed(3);
      const a = randn([2, 3, 5, 4]); // used transposed: [2, 3, 4, 5]
      const b = randn([3, 5, 6]); // broadcast over the leading 2
      const want = a.transpose(-2, -1).matmul(b);
      const k = cudaKernels(mode);
      if (typeof k === "string") throw new Error(k);
      const setUseBlas = k.setUseBlas as (on: boolean) => void;
      for (const blas of [true, false]) {
        setUseBlas(blas);
        try {
          expectNear(a.cuda().transpose(-2, -1).matmul(b.cuda()), want);
          expectNear(
            a
              .cuda()
              .transpose(-2, -1)
              .narrow(-1, 1, 3)
              .matmul(b.cuda().narrow(-2, 1, 3)),
            a
              .transpose(-2, -1)
              .narrow(-1, 1, 3)
              .matmul(b.narrow(-2, 1, 3)),
          );
        } finally {
          setUseBlas(true);
        }
      }
    });

    it("covers more elements than one grid, more rows than one grid and rows wider than one block", () => {
      manualSeed(5);
      const big = randn([1100, 1000]); // 1.1M elements: past 4096 blocks x 256 threads
      expectNear(big.cuda().mul(2).add(1), big.mul(2).add(1));
      const tall = randn([4200, 3]); // rows past the 4096-block grid
      expectNear(tall.cuda().sum(1), tall.sum(1));
      expectNear(tall.cuda().softmax(1), tall.softmax(1));
      const wide = randn([3, 1500]); // rows past a 256-thread block
      expectNear(wide.cuda().sum(1), wide.sum(1), 1e-4, 1e-4);
      expectNear(wide.cuda().logSoftmax(1), wide.logSoftmax(1));
      expectNear(wide.cuda().max(0).values, wide.max(0).values);
      expectNear(wide.cuda().argmax(1), wide.argmax(1), 0, 0);
    });

    it("gives the same elementwise results on the float4 path (contiguous, aligned) as on the strided one", () => {
      manualSeed(6);
      const x = randn([1027]); // 1027 = 4 * 256 + 3: a tail of three after the float4 elements
      const y = randn([1027]);
      const [gx, gy] = [x.cuda(), y.cuda()];
      expectNear(gx.add(gy), x.add(y));
      expectNear(gx.div(gy), x.div(y));
      // offset 1: the first element is not 16-byte aligned (strided kernel); offset 4: it is again
      expectNear(gx.narrow(0, 1, 1025).mul(gy.narrow(0, 1, 1025)), x.narrow(0, 1, 1025).mul(y.narrow(0, 1, 1025)));
      expectNear(gx.narrow(0, 4, 1021).sub(gy.narrow(0, 4, 1021)), x.narrow(0, 4, 1021).sub(y.narrow(0, 4, 1021)));
      expectNear(gx.mul(2.5), x.mul(2.5)); // a broadcast scalar
      expectNear(gx.add(gy.narrow(0, 5, 1)), x.add(y.narrow(0, 5, 1))); // a one-element tensor, unaligned
      expectNear(gx.exp(), x.exp());
      expectNear(gx.narrow(0, 2, 1021).tanh(), x.narrow(0, 2, 1021).tanh());
      expectNear(gx.lt(gy), x.lt(y), 0, 0); // a bool result: not the float32 kernels
      expectNear(gx.reshape([13, 79]).t().add(1), x.reshape([13, 79]).t().add(1)); // non-contiguous
    });

    it("gives the CPU's typed errors", () => {
      const x = tensor([1, 2, 3], { dtype: "float32" });
      const idx = tensor([0, 5]);
      expect(() => x.indexSelect(0, idx)).toThrow(IndexError);
      // on the device, as in PyTorch, the op returns and the error comes at the next synchronization
      const bad = x.cuda().indexSelect(0, idx.cuda());
      expect(() => bad.cpu()).toThrow(/index 5 is out of bounds for dimension 0 with size 3/);
      x.cuda().indexSelect(0, idx.cuda());
      expect(() => cuda.synchronize()).toThrow(IndexError);
      // the first bad index is the one reported, with its own dim and size
      const m = x.cuda().reshape([1, 3]);
      m.gather(1, tensor([[7]]).cuda());
      x.cuda().indexSelect(0, idx.cuda());
      expect(() => cuda.synchronize()).toThrow(/index 7 is out of bounds for dimension 1 with size 3/);
      // a cross-entropy target off the class range: no host read-back, the gather's check reports it
      const logits = randn([2, 4]).cuda();
      const loss = nn.functional.crossEntropy(logits, tensor([1, 9]).cuda());
      expect(() => loss.item()).toThrow(/index 9 is out of bounds for dimension 1 with size 4/);
      const negative = nn.functional.crossEntropy(logits, tensor([-3, 1]).cuda());
      expect(() => negative.item()).toThrow(IndexError);
      expect(nn.functional.crossEntropy(logits, tensor([-100, 1]).cuda()).item()).toBeCloseTo(
        nn.functional.crossEntropy(logits.cpu(), tensor([-100, 1])).item(),
        5,
      );
      // launch blocking (CUDA_LAUNCH_BLOCKING=1 at load): the op itself throws
      const k = cudaKernels(mode) as unknown as { setLaunchBlocking(on: boolean): void };
      k.setLaunchBlocking(true);
      try {
        expect(() => x.cuda().indexSelect(0, idx.cuda())).toThrow(IndexError);
      } finally {
        k.setLaunchBlocking(false);
      }
      // the error word is cleared: a good index works afterwards
      expect(
        x
          .cuda()
          .indexSelect(0, tensor([2, 0]).cuda())
          .cpu()
          .toArray(),
      ).toEqual([3, 1]);
      expect(() => x.cuda().add(x)).toThrow(DeviceError);
      expect(() => x.to("cuda:0").half().add(1)).toThrow(DTypeError);
    });
  });
}
