/**
 * Gradients zeroGrad drops go back to the output pool when no one outside the SDK read them
 * (sdk/autograd/grad_slot.ts), and a stock Sequential's outputs between its layers are recycled after
 * backward (sdk/nn/modules/sequential.ts). Training must be bit for bit what it is with nothing
 * recycled (pool off), and nothing a user can reach may be recycled: a released storage throws when
 * read, and a reused buffer would change the values these tests snapshot.
 */
import { expect, it } from "vitest";
import { type Tensor, manualSeed, nn, optim, randint, randn } from "../../sdk/index.js";
import { clearPool, poolStats } from "../../sdk/tensor/pool.js";
import { describeEachBackend } from "../helpers.js";
import { poolOff, usePool } from "./pool_helpers.js";

// NB: weights of 64 x 128 float32 = 32 kB and activations of [32, 128] = 16 kB: pooled sizes
function makeModel(): InstanceType<typeof nn.Sequential> {
  manualSeed(3);
  return new nn.Sequential(
    new nn.Linear(64, 128),
    new nn.ReLU(),
    new nn.Linear(128, 128),
    new nn.ReLU(),
    new nn.Linear(128, 10),
  );
}

type Opt = "sgd" | "adam" | "adamw";

function makeOpt(kind: Opt, params: Tensor[]) {
  if (kind === "sgd") return new optim.SGD(params, { lr: 0.05, momentum: 0.9 });
  if (kind === "adam") return new optim.Adam(params, { lr: 1e-3 });
  return new optim.AdamW(params, { lr: 1e-3, weightDecay: 0.01 });
}

/** Four steps of zeroGrad / backward / step (optimizer's or module's zeroGrad); the weights after each. */
function train(
  kind: Opt,
  opts: { moduleZero?: boolean; model?: InstanceType<typeof nn.Sequential>; each?: (m: nn.Sequential) => void } = {},
): number[][] {
  const model = opts.model ?? makeModel();
  const opt = makeOpt(kind, model.parameters());
  manualSeed(9);
  const weights: number[][] = [];
  for (let s = 0; s < 4; s++) {
    if (opts.moduleZero) model.zeroGrad();
    else opt.zeroGrad();
    const x = randn([32, 64]);
    const y = randint(0, 10, [32]);
    nn.functional.crossEntropy(model.forward(x), y).backward();
    optim.clipGradNorm(model.parameters(), 1.0);
    opt.step();
    opts.each?.(model);
    weights.push(model.parameters().flatMap((p) => p.toArray() as number[]));
  }
  return weights;
}

/** The ArrayBuffer behind a parameter's gradient, read without handing the gradient out. */
function gradBuffer(p: Tensor): ArrayBufferLike | null {
  return p.gradSlot === null ? null : p.gradSlot.storage.data.buffer;
}

describeEachBackend("autograd: dropped gradients recycled", () => {
  usePool();

  it("train bit for bit as with nothing recycled, and backward reuses the dropped gradients' buffers", () => {
    for (const kind of ["sgd", "adam", "adamw"] as const)
      for (const moduleZero of [false, true]) {
        const off = poolOff(() => train(kind, { moduleZero }));
        clearPool();
        const model = makeModel();
        const before: (ArrayBufferLike | null)[][] = [];
        const on = train(kind, { moduleZero, model, each: (m) => before.push(m.parameters().map(gradBuffer)) });
        expect(on).toEqual(off);
        // the first Linear's weight gradient (32 kB) lands in the buffer the step before dropped
        const w = before.map((bufs) => bufs[0]);
        expect(w[0]).not.toBeNull();
        for (let s = 1; s < w.length; s++) expect(w[s]).toBe(w[s - 1]);
      }
  });

  it("never recycle a gradient that was read through .grad, and leave what was read intact", () => {
    const model = makeModel();
    const opt = makeOpt("sgd", model.parameters());
    manualSeed(9);
    const kept: { g: Tensor; values: number[] }[] = [];
    for (let s = 0; s < 3; s++) {
      opt.zeroGrad();
      nn.functional.crossEntropy(model.forward(randn([32, 64])), randint(0, 10, [32])).backward();
      const g = model.parameters()[0]!.grad!;
      kept.push({ g, values: g.toArray() as number[] });
      opt.step();
    }
    opt.zeroGrad();
    nn.functional.crossEntropy(model.forward(randn([32, 64])), randint(0, 10, [32])).backward();
    const buffers = new Set(kept.map((k) => k.g.storage.data.buffer));
    expect(buffers.size).toBe(3);
    expect(buffers.has(gradBuffer(model.parameters()[0]!)!)).toBe(false);
    for (const k of kept) expect(k.g.toArray()).toEqual(k.values);
  });

  it("never recycle a gradient a user assigned", () => {
    const model = makeModel();
    const opt = makeOpt("sgd", model.parameters());
    const p = model.parameters()[0]!;
    const mine = randn(p.shape);
    const values = mine.toArray();
    p.grad = mine;
    opt.step();
    opt.zeroGrad();
    expect(p.grad).toBeNull();
    nn.functional.crossEntropy(model.forward(randn([32, 64])), randint(0, 10, [32])).backward();
    expect(gradBuffer(p)).not.toBe(mine.storage.data.buffer);
    expect(mine.toArray()).toEqual(values);
  });
});

describeEachBackend("nn.Sequential: outputs between stock layers recycled after backward", () => {
  usePool();

  it("trains bit for bit as with nothing recycled, and recycles more than with a user's layer in it", () => {
    const off = poolOff(() => train("sgd"));
    clearPool();
    const r0 = poolStats().releases;
    const on = train("sgd");
    const stock = poolStats().releases - r0;
    expect(on).toEqual(off);
    class MyReLU extends nn.ReLU {}
    const mixed = makeModel();
    (mixed as unknown as Record<string, nn.Module>)["1"] = new MyReLU();
    const r1 = poolStats().releases;
    train("sgd", { model: mixed });
    expect(stock).toBeGreaterThan(poolStats().releases - r1);
  });

  it("never recycles what a user's layer was given or returned", () => {
    const kept: { t: Tensor; values: number[] }[] = [];
    class Keeping extends nn.Module<[Tensor], Tensor> {
      forward(x: Tensor): Tensor {
        kept.push({ t: x, values: x.toArray() as number[] });
        const y = x.relu();
        kept.push({ t: y, values: y.toArray() as number[] });
        return y;
      }
    }
    manualSeed(3);
    const inner = new nn.Sequential(new nn.Linear(64, 128), new nn.ReLU(), new nn.Linear(128, 128));
    const model = new nn.Sequential(inner, new Keeping(), new nn.Linear(128, 10));
    const opt = makeOpt("sgd", model.parameters());
    manualSeed(9);
    for (let s = 0; s < 3; s++) {
      opt.zeroGrad();
      nn.functional.crossEntropy(model.forward(randn([32, 64])), randint(0, 10, [32])).backward();
      opt.step();
    }
    expect(kept.length).toBe(6);
    for (const k of kept) expect(k.t.toArray()).toEqual(k.values);
  });
});
