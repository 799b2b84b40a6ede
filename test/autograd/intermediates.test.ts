/**
 * Module intermediates recycled once backward is done with them (sdk/autograd/intermediates.ts,
 * sdk/nn/intermediates.ts): the GPT block, its attention and its MLP drop what they make and do not
 * return, and the buffers go back to the output pool when every node that could read them has run.
 * Whatever is recycled, gradients and outputs must be bit for bit those with nothing recycled (pool
 * off), and nothing a user can still reach may be recycled: a released storage throws when read, and
 * a reused buffer would change the values these tests snapshot.
 */
import { expect, it } from "vitest";
import { ShapeError, type Tensor, manualSeed, nn, noGrad, randint, randn } from "../../sdk/index.js";
import { clearPool, poolStats } from "../../sdk/tensor/pool.js";
import { describeEachBackend } from "../helpers.js";
import { poolOff, usePool } from "./pool_helpers.js";

// NB: activations of [4, 32, 64] float32 = 32 kB, the MLP's 128 kB: all of them pooled sizes
const CFG = { nEmbd: 64, nHead: 4, blockSize: 32, dropout: 0 };
const SHAPE = [4, 32, 64];

function makeBlock(cfg: typeof CFG = CFG): InstanceType<typeof nn.TransformerBlock> {
  manualSeed(11);
  return new nn.TransformerBlock(cfg);
}

/** Gradients and outputs of two blocks over three micro-batches, each with its own backward. */
function train(
  setup: (b: InstanceType<typeof nn.TransformerBlock>) => void = () => undefined,
  cfg: typeof CFG = CFG,
): { grads: number[][]; outs: number[][]; xs: number[][] } {
  const blocks = [makeBlock(cfg), makeBlock(cfg)];
  blocks.forEach(setup);
  manualSeed(5);
  const outs: number[][] = [];
  const xs: number[][] = [];
  for (let mb = 0; mb < 3; mb++) {
    const x = randn(SHAPE, { requiresGrad: true });
    const y = blocks[1]!.forward(blocks[0]!.forward(x));
    y.mul(y).mean().backward();
    outs.push(y.toArray());
    xs.push(x.grad!.toArray());
  }
  const grads = blocks.flatMap((b) => b.parameters().map((p) => p.grad!.toArray()));
  return { grads, outs, xs };
}

describeEachBackend("autograd: module intermediates recycled after backward", () => {
  usePool();

  it("give bit-identical gradients and outputs, with and without dropout, and are recycled", () => {
    for (const cfg of [CFG, { ...CFG, dropout: 0.1 }]) {
      const off = poolOff(() => train(undefined, cfg));
      clearPool();
      const r0 = poolStats().releases;
      const on = train(undefined, cfg);
      const stock = poolStats().releases - r0;
      expect(on).toEqual(off);
      // the same with the blocks' own forward replaced on the instance: the blocks drop nothing
      // (their attention and MLP still do)
      clearPool();
      const r1 = poolStats().releases;
      const replaced = train((b) => {
        const f = nn.TransformerBlock.prototype.forward;
        b.forward = (x: Tensor) => f.call(b, x);
      }, cfg);
      expect(replaced).toEqual(off);
      expect(stock).toBeGreaterThan(poolStats().releases - r1);
    }
  });

  it("never recycle what a user's submodule was given or returned", () => {
    const kept: { t: Tensor; values: number[] }[] = [];
    const keep = (t: Tensor): Tensor => {
      kept.push({ t, values: t.toArray() });
      return t;
    };
    class KeepingMLP extends nn.MLP {
      override forward(x: Tensor): Tensor {
        return keep(super.forward(keep(x)));
      }
    }
    class KeepingLinear extends nn.Linear {
      override forward(x: Tensor): Tensor {
        return keep(super.forward(keep(x)));
      }
    }
    const off = poolOff(() => train());
    const on = train((b) => {
      const mlp = new KeepingMLP(CFG);
      mlp.loadStateDict(b.mlp.stateDict());
      b.mlp = mlp;
      const proj = new KeepingLinear(CFG.nEmbd, CFG.nEmbd);
      proj.loadStateDict(b.attn.cProj.stateDict());
      b.attn.cProj = proj;
    });
    expect(on).toEqual(off);
    expect(kept.length).toBe(3 * 2 * 4);
    // later passes reuse every recycled buffer: what the user's modules kept must be untouched
    train();
    train();
    for (const k of kept) expect(k.t.toArray()).toEqual(k.values);
  });

  it("keep what a graph not yet run backward, or run with retainGraph, still needs", () => {
    const run = () => {
      const b = makeBlock();
      manualSeed(6);
      const x1 = randn(SHAPE, { requiresGrad: true });
      const x2 = randn(SHAPE, { requiresGrad: true });
      const y1 = b.forward(x1);
      const y2 = b.forward(x2);
      y2.sum().backward(); // recycles y2's intermediates, not y1's
      b.forward(x2).sum().backward(); // reuses them
      y1.mul(y1).sum().backward(undefined, true);
      b.forward(x2).sum().backward();
      y1.mul(y1).sum().backward(); // the retained graph ran again, then released
      return [x1.grad!.toArray(), x2.grad!.toArray(), ...b.parameters().map((p) => p.grad!.toArray())];
    };
    const off = poolOff(run);
    expect(run()).toEqual(off);
  });

  it("go back at once without grad, and a result stays intact", () => {
    const run = () => {
      const b = makeBlock();
      manualSeed(7);
      const xs = [0, 1, 2].map(() => randn(SHAPE));
      const ys = xs.map((x) => noGrad(() => b.forward(x)));
      const first = ys[0]!.toArray();
      noGrad(() => b.forward(xs[1]!));
      expect(ys[0]!.toArray()).toEqual(first);
      return ys.map((y) => y.toArray());
    };
    const off = poolOff(run);
    const r0 = poolStats().releases;
    expect(run()).toEqual(off);
    expect(poolStats().releases).toBeGreaterThan(r0);
  });

  it("in a whole GPT (embeddings, blocks, head, cross-entropy) give bit-identical training and generation", () => {
    const gptCfg = { vocabSize: 70, nLayer: 2, nEmbd: 64, nHead: 4, blockSize: 32, dropout: 0 };
    const run = (userBlock: boolean) => {
      manualSeed(21);
      const model = new nn.GPT(gptCfg);
      const kept: { t: Tensor; values: number[] }[] = [];
      if (userBlock) {
        // a user's module in the block list: the GPT must not drop what it gives it or gets back
        class Keeping extends nn.Module<[Tensor], Tensor> {
          constructor(readonly inner: InstanceType<typeof nn.TransformerBlock>) {
            super();
          }
          forward(x: Tensor): Tensor {
            const y = this.inner.forward(x);
            kept.push({ t: x, values: x.toArray() }, { t: y, values: y.toArray() });
            return y;
          }
        }
        const blocks = [...model.blocks];
        model.blocks = new nn.ModuleList([
          blocks[0]!,
          new Keeping(blocks[1]!) as unknown as InstanceType<typeof nn.TransformerBlock>,
        ]);
      }
      manualSeed(22);
      const losses: number[] = [];
      for (let step = 0; step < 3; step++) {
        const idx = randint(0, gptCfg.vocabSize, [4, 32]);
        const { loss } = model.forward(idx, randint(0, gptCfg.vocabSize, [4, 32]));
        loss!.backward();
        losses.push(loss!.item() as number);
      }
      const gen = model.generate(randint(0, gptCfg.vocabSize, [2, 4]), 8).toArray();
      for (const k of kept) expect(k.t.toArray()).toEqual(k.values);
      return { losses, gen, grads: model.parameters().map((p) => p.grad!.toArray()) };
    };
    const off = poolOff(() => run(false));
    expect(run(false)).toEqual(off);
    expect(run(true)).toEqual(off);
  });

  it("an error inside a forward drops nothing and leaves later passes right", () => {
    const b = makeBlock();
    const bad = randn([4, 32, 64], { requiresGrad: true });
    // the block's second LayerNorm refuses the shape of h: thrown inside the block's and not the attention's scope
    b.ln2 = new nn.LayerNorm(32);
    expect(() => b.forward(bad)).toThrow(ShapeError);
    const off = poolOff(() => train());
    expect(train()).toEqual(off);
  });
});
