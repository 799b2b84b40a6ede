/**
 * Gradients the engine made and consumed during a backward pass go back to the output pool
 * (sdk/autograd/engine.ts point 7, sdk/tensor/pool.ts) and later outputs reuse them. Whatever is
 * recycled, every gradient must be bit for bit what it is with the pool off: here a model with
 * 16 kB+ activations whose backward has pass-through views (reshape, residual adds), a split, a
 * shared input, a hook and micro-batches accumulating into .grad, on every backend.
 */
import { expect, it } from "vitest";
import { manualSeed, nn, rand, randn, type Tensor, zeros } from "../../sdk/index.js";
import { hostAlignPad } from "../../sdk/tensor/dtype.js";
import { giveBuffer, poolStats } from "../../sdk/tensor/pool.js";
import { describeEachBackend } from "../helpers.js";
import { poolOff, usePool } from "./pool_helpers.js";

/** Gradients of a few micro-batches through a residual MLP with views and a split. */
function run(): { grads: number[][]; hooked: number[]; xs: number[] } {
  manualSeed(7);
  const fc1 = new nn.Linear(128, 384);
  const fc2 = new nn.Linear(128, 128);
  const ln = new nn.LayerNorm(128);
  const params = [...fc1.parameters(), ...fc2.parameters(), ...ln.parameters()];
  const x = randn([256, 128], { requiresGrad: true });
  let hooked: number[] = [];
  for (let mb = 0; mb < 3; mb++) {
    const h = fc1.forward(ln.forward(x)); // [256, 384] = 384 kB
    const [a, b, c] = h.split(128, 1) as [Tensor, Tensor, Tensor];
    const mid = a.relu().add(b.mul(c)).reshape([64, 4, 128]).reshape([256, 128]);
    if (mb === 1)
      mid.registerHook((g) => {
        hooked = g.toArray();
      });
    const y = fc2.forward(mid).add(x).add(mid); // x and mid each feed two consumers
    y.mul(y).mean().div(3).backward();
  }
  return { grads: params.map((p) => p.grad!.toArray()), hooked, xs: x.grad!.toArray() };
}

describeEachBackend("autograd: recycled gradient buffers", () => {
  // NB: these tests need the pool on (its default, sdk/tensor/pool.ts) and leave it as they found it
  usePool();

  it("give the same gradients as with the pool off, and are reused", () => {
    const off = poolOff(run);
    const before = poolStats();
    const on = run();
    const after = poolStats();
    expect(after.releases).toBeGreaterThan(before.releases);
    expect(after.reuses).toBeGreaterThan(before.reuses);
    on.grads.forEach((g, i) => expect(g, `param ${i}`).toEqual(off.grads[i]));
    expect(on.xs).toEqual(off.xs);
    expect(on.hooked).toEqual(off.hooked);
    expect(on.hooked.length).toBe(256 * 128);
  });

  it("a zeroed tensor over a recycled buffer reads zeros", () => {
    const n = 8192; // 32 kB of float32: a pooled size
    // NB: pooled buffers carry the alignment slack (sdk/tensor/dtype.ts alignedArrayOver)
    giveBuffer(new Float32Array(n + hostAlignPad() / 4).fill(7).buffer);
    const before = poolStats().reuses;
    const z = zeros([n]);
    expect(poolStats().reuses).toBe(before + 1);
    expect(z.toArray().every((v) => v === 0)).toBe(true);
  });

  it("a gradient a hook kept keeps its values after later passes", () => {
    const w = rand([256, 256], { requiresGrad: true });
    let kept: Tensor | null = null;
    const mid = w.mul(2);
    mid.registerHook((g) => {
      kept = g;
    });
    mid.mul(mid).sum().backward();
    const snapshot = kept!.toArray();
    for (let k = 0; k < 3; k++) w.mul(3).exp().sum().backward();
    expect(kept!.toArray()).toEqual(snapshot);
  });
});
