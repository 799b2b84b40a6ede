/**
 * Adam and AdamW step with the backend's fused adamStep kernel when parameter, gradient and state
 * are contiguous float tensors of one dtype. It must equal, bit for bit, the chain of tensor ops
 * it replaces (adamUpdate, torch 1.13's single-tensor path op for op), on every backend, in
 * float32 and float64, with AdamW's decoupled decay, Adam's L2 decay, amsgrad and maximize. A
 * non-contiguous gradient takes the tensor-op path, with the same numbers again.
 */
import { expect, it } from "vitest";
import { noGrad, optim, type Tensor } from "../../sdk/index.js";
import { adamUpdate } from "../../sdk/optim/adam.js";
import type { ParamState } from "../../sdk/optim/optimizer.js";
import { describeEachBackend } from "../helpers.js";
import { leaves, randomVecs, setGrads } from "./helpers.js";

const SHAPES = [[33, 17], [70]];

interface Config {
  name: string;
  decoupled: boolean;
  opts: { lr: number; weightDecay: number; amsgrad: boolean; maximize: boolean; betas: [number, number]; eps: number };
}

const CONFIGS: Config[] = [
  {
    name: "AdamW",
    decoupled: true,
    opts: { lr: 3e-3, weightDecay: 0.01, amsgrad: false, maximize: false, betas: [0.9, 0.999], eps: 1e-8 },
  },
  {
    name: "AdamW amsgrad maximize",
    decoupled: true,
    opts: { lr: 1e-2, weightDecay: 0.1, amsgrad: true, maximize: true, betas: [0.8, 0.99], eps: 1e-6 },
  },
  {
    name: "Adam with L2 decay",
    decoupled: false,
    opts: { lr: 5e-3, weightDecay: 0.05, amsgrad: false, maximize: false, betas: [0.9, 0.999], eps: 1e-8 },
  },
  {
    name: "Adam amsgrad",
    decoupled: false,
    opts: { lr: 5e-3, weightDecay: 0, amsgrad: true, maximize: false, betas: [0.9, 0.999], eps: 1e-8 },
  },
];

/** The tensor-op reference: what Adam/AdamW's update did before the fused kernel. */
function referenceStep(params: Tensor[], states: ParamState[], step: number, c: Config): void {
  noGrad(() =>
    params.forEach((p, i) => {
      const o = c.opts;
      let g = o.maximize ? p.grad!.neg() : p.grad!;
      if (c.decoupled) p.mul_(1 - o.lr * o.weightDecay);
      else if (o.weightDecay !== 0) g = g.add(p, o.weightDecay);
      const state = states[i]!;
      state.step = step;
      adamUpdate(p, g, state, o, step);
    }),
  );
}

describeEachBackend("optim: the fused Adam step", () => {
  for (const dtype of ["float32", "float64"] as const)
    for (const c of CONFIGS) {
      it(`${c.name} (${dtype}) equals the tensor-op chain bit for bit over 4 steps`, () => {
        const init = randomVecs(11, SHAPES);
        const fused = leaves(init, dtype, SHAPES);
        const ref = leaves(init, dtype, SHAPES);
        const Opt = c.decoupled ? optim.AdamW : optim.Adam;
        const opt = new Opt(fused, c.opts);
        const states: ParamState[] = ref.map(() => ({}));
        for (let step = 1; step <= 4; step++) {
          const grads = randomVecs(100 + step, SHAPES);
          setGrads(fused, grads);
          setGrads(ref, grads);
          opt.step();
          referenceStep(ref, states, step, c);
        }
        fused.forEach((p, i) => expect(p.toArray(), `param ${i}`).toEqual(ref[i]!.toArray()));
        const st = opt.stateDict().state;
        states.forEach((s, i) => {
          for (const k of ["expAvg", "expAvgSq", ...(c.opts.amsgrad ? ["maxExpAvgSq"] : [])])
            expect((st[i]![k] as Tensor).toArray(), `state ${i}.${k}`).toEqual((s[k] as Tensor).toArray());
        });
      });
    }

  it("a non-contiguous gradient takes the tensor-op path, with the same numbers", () => {
    const init = randomVecs(12, [[6, 5]]);
    const [a] = leaves(init, "float32", [[6, 5]]);
    const [b] = leaves(init, "float32", [[6, 5]]);
    const g = leaves(randomVecs(13, [[5, 6]]), "float32", [[5, 6]])[0]!.detach();
    a!.grad = g.t(); // a transposed view
    b!.grad = g.t().contiguous();
    expect(a!.grad.isContiguous()).toBe(false);
    const opts = { lr: 1e-2, weightDecay: 0.01 };
    new optim.AdamW([a!], opts).step();
    new optim.AdamW([b!], opts).step();
    expect(a!.toArray()).toEqual(b!.toArray());
  });
});
