/**
 * SGD steps with the backend's fused sgdStep (native: one pass per parameter) when parameter,
 * gradient and momentum buffer are contiguous float tensors of one dtype. It must equal, bit for
 * bit, torch 1.13's single-tensor update written as tensor ops (referenceStep below), on every
 * backend, in float32 and float64, over the first step (the buffer is a clone of d) and later
 * ones, with dampening, Nesterov, weight decay and maximize. A non-contiguous gradient takes the
 * tensor-op path, with the same numbers.
 */
import { expect, it } from "vitest";
import { noGrad, optim, type Tensor } from "../../sdk/index.js";
import { describeEachBackend } from "../helpers.js";
import { leaves, randomVecs, setGrads } from "./helpers.js";

const SHAPES = [[33, 17], [70], [1]];

interface Opts {
  lr: number;
  momentum: number;
  dampening: number;
  weightDecay: number;
  nesterov: boolean;
  maximize: boolean;
}

const CONFIGS: [string, Opts][] = [
  ["plain", { lr: 0.1, momentum: 0, dampening: 0, weightDecay: 0, nesterov: false, maximize: false }],
  ["momentum", { lr: 0.05, momentum: 0.9, dampening: 0, weightDecay: 0, nesterov: false, maximize: false }],
  [
    "dampening + decay",
    { lr: 0.03, momentum: 0.8, dampening: 0.3, weightDecay: 0.01, nesterov: false, maximize: false },
  ],
  ["nesterov maximize", { lr: 0.02, momentum: 0.7, dampening: 0, weightDecay: 0.05, nesterov: true, maximize: true }],
  ["decay, no momentum", { lr: 0.1, momentum: 0, dampening: 0, weightDecay: 0.1, nesterov: false, maximize: true }],
];

/** torch.optim.SGD's single-tensor update as tensor ops (what sdk/optim/sgd.ts falls back to). */
function referenceStep(params: Tensor[], bufs: (Tensor | null)[], o: Opts): void {
  noGrad(() =>
    params.forEach((p, i) => {
      let d = o.maximize ? p.grad!.neg() : p.grad!;
      if (o.weightDecay !== 0) d = d.add(p, o.weightDecay);
      if (o.momentum !== 0) {
        let buf = bufs[i];
        if (buf) buf.mul_(o.momentum).add_(d, 1 - o.dampening);
        else buf = bufs[i] = d.clone();
        d = o.nesterov ? d.add(buf, o.momentum) : buf;
      }
      p.add_(d, -o.lr);
    }),
  );
}

describeEachBackend("optim: the fused SGD step", () => {
  for (const dtype of ["float32", "float64"] as const)
    for (const [name, o] of CONFIGS) {
      it(`${name} (${dtype}) equals the tensor-op update bit for bit over 4 steps`, () => {
        const init = randomVecs(21, SHAPES);
        const fused = leaves(init, dtype, SHAPES);
        const ref = leaves(init, dtype, SHAPES);
        const opt = new optim.SGD(fused, o);
        const bufs: (Tensor | null)[] = ref.map(() => null);
        for (let step = 1; step <= 4; step++) {
          const grads = randomVecs(200 + step, SHAPES);
          setGrads(fused, grads);
          setGrads(ref, grads);
          opt.step();
          referenceStep(ref, bufs, o);
        }
        fused.forEach((p, i) => expect(p.toArray(), `param ${i}`).toEqual(ref[i]!.toArray()));
        const st = opt.stateDict().state;
        bufs.forEach((b, i) => {
          if (b === null) expect(st[i]?.momentumBuffer, `state ${i}`).toBeUndefined();
          else expect((st[i]!.momentumBuffer as Tensor).toArray(), `buffer ${i}`).toEqual(b.toArray());
        });
      });
    }

  it("bumps the version of the parameter, so a graph that saved it refuses to backward", () => {
    const [p] = leaves(randomVecs(22, [[4]]), "float32", [[4]]);
    const y = p!.mul(p!); // saves p
    p!.grad = p!.detach().clone();
    new optim.SGD([p!], { lr: 0.1, momentum: 0.9 }).step();
    expect(() => y.sum().backward()).toThrow(/modified by an inplace operation/);
  });

  it("a non-contiguous gradient takes the tensor-op path, with the same numbers", () => {
    const init = randomVecs(23, [[6, 5]]);
    const [a] = leaves(init, "float32", [[6, 5]]);
    const [b] = leaves(init, "float32", [[6, 5]]);
    const g = leaves(randomVecs(24, [[5, 6]]), "float32", [[5, 6]])[0]!.detach();
    a!.grad = g.t();
    b!.grad = g.t().contiguous();
    expect(a!.grad.isContiguous()).toBe(false);
    const opts = { lr: 0.05, momentum: 0.9, weightDecay: 0.01 };
    const oa = new optim.SGD([a!], opts);
    const ob = new optim.SGD([b!], opts);
    for (let k = 0; k < 2; k++) {
      oa.step();
      ob.step();
    }
    expect(a!.toArray()).toEqual(b!.toArray());
  });
});
