/**
 * The Optimizer base through its subclasses: hyperparameter and parameter
 * validation (torch's messages), param groups, skipped parameters, in-place
 * updates that keep parameter identity, zeroGrad, step with a closure, and
 * stateDict / loadStateDict (layout, copies, and a fresh optimizer that
 * continues exactly where the saved one was).
 */
import { describe, expect, it } from "vitest";
import { noGrad, onesLike, optim, type Tensor, TprpcError, tensor, ValueError } from "../../sdk/index.js";
import { expectValues, leaves, randomVecs, setGrads } from "./helpers.js";

const params = (): Tensor[] => leaves(randomVecs(7), "float32");

describe("validation", () => {
  it.each([
    ["SGD lr", () => new optim.SGD(params(), { lr: -1 }), "Invalid learning rate: -1"],
    ["SGD momentum", () => new optim.SGD(params(), { lr: 0.1, momentum: -0.5 }), "Invalid momentum value: -0.5"],
    ["SGD weightDecay", () => new optim.SGD(params(), { lr: 0.1, weightDecay: -1 }), "Invalid weightDecay value: -1"],
    [
      "SGD nesterov without momentum",
      () => new optim.SGD(params(), { lr: 0.1, nesterov: true }),
      "Nesterov momentum requires a momentum and zero dampening",
    ],
    [
      "SGD nesterov with dampening",
      () => new optim.SGD(params(), { lr: 0.1, momentum: 0.9, dampening: 0.1, nesterov: true }),
      "Nesterov momentum requires a momentum and zero dampening",
    ],
    [
      "SGD without lr",
      () => new optim.SGD(params()),
      "parameter group didn't specify a value of required optimization parameter lr",
    ],
    ["Adam lr", () => new optim.Adam(params(), { lr: -0.001 }), "Invalid learning rate: -0.001"],
    ["Adam NaN lr", () => new optim.Adam(params(), { lr: Number.NaN }), "Invalid learning rate: NaN"],
    ["Adam eps", () => new optim.Adam(params(), { eps: -1 }), "Invalid epsilon value: -1"],
    ["Adam beta0", () => new optim.Adam(params(), { betas: [1, 0.999] }), "Invalid beta parameter at index 0: 1"],
    ["Adam beta1", () => new optim.Adam(params(), { betas: [0.9, -0.1] }), "Invalid beta parameter at index 1: -0.1"],
    ["AdamW weightDecay", () => new optim.AdamW(params(), { weightDecay: -0.1 }), "Invalid weightDecay value: -0.1"],
    ["Adagrad lrDecay", () => new optim.Adagrad(params(), { lrDecay: -1 }), "Invalid lrDecay value: -1"],
    [
      "Adagrad initialAccumulatorValue",
      () => new optim.Adagrad(params(), { initialAccumulatorValue: -1 }),
      "Invalid initialAccumulatorValue value: -1",
    ],
    ["RMSprop alpha", () => new optim.RMSprop(params(), { alpha: -1 }), "Invalid alpha value: -1"],
    ["RMSprop momentum", () => new optim.RMSprop(params(), { momentum: -1 }), "Invalid momentum value: -1"],
    ["Adadelta lr", () => new optim.Adadelta(params(), { lr: -1 }), "Invalid learning rate: -1"],
    ["Adadelta rho", () => new optim.Adadelta(params(), { rho: 1.5 }), "Invalid rho value: 1.5"],
    ["Adadelta eps", () => new optim.Adadelta(params(), { eps: -1e-6 }), "Invalid epsilon value: -0.000001"],
    ["Adadelta weightDecay", () => new optim.Adadelta(params(), { weightDecay: -1 }), "Invalid weightDecay value: -1"],
    ["Adamax lr", () => new optim.Adamax(params(), { lr: -0.002 }), "Invalid learning rate: -0.002"],
    ["Adamax beta1", () => new optim.Adamax(params(), { betas: [0.9, 1] }), "Invalid beta parameter at index 1: 1"],
    ["Adamax eps", () => new optim.Adamax(params(), { eps: -1 }), "Invalid epsilon value: -1"],
    ["Adamax weightDecay", () => new optim.Adamax(params(), { weightDecay: -1 }), "Invalid weightDecay value: -1"],
    ["Rprop lr", () => new optim.Rprop(params(), { lr: -0.01 }), "Invalid learning rate: -0.01"],
    ["Rprop etaminus", () => new optim.Rprop(params(), { etas: [1, 1.2] }), "Invalid eta values: 1, 1.2"],
    ["Rprop etaplus", () => new optim.Rprop(params(), { etas: [0.5, 0.9] }), "Invalid eta values: 0.5, 0.9"],
    [
      "Rprop stepSizes",
      () => new optim.Rprop(params(), { stepSizes: [1, 0.5] }),
      "Invalid stepSizes: [1, 0.5] (expected a pair [min, max] with 0 <= min <= max",
    ],
    [
      "Rprop maximize",
      () => new optim.Rprop(params(), { maximize: "yes" as unknown as boolean }),
      'Invalid maximize value: "yes"',
    ],
    [
      "a bad value in one group",
      () => new optim.SGD([{ params: params(), lr: -2 }], { lr: 0.1 }),
      "Invalid learning rate: -2",
    ],
    ["an empty parameter list", () => new optim.Adam([]), "optimizer got an empty parameter list"],
    ["a Tensor instead of a list", () => new optim.Adam(params()[0]! as unknown as Tensor[]), "pass [tensor] instead"],
    [
      "a non-tensor parameter",
      () => new optim.Adam([{ params: [3 as unknown as Tensor] }]),
      "one of the params is number",
    ],
    [
      "a non-leaf parameter",
      () => new optim.SGD([tensor([1, 2], { dtype: "float32", requiresGrad: true }).mul(2)], { lr: 0.1 }),
      "can't optimize a non-leaf Tensor",
    ],
    [
      "a parameter in two groups",
      () => {
        const [a, b] = params();
        return new optim.SGD([{ params: [a!, b!] }, { params: [b!] }], { lr: 0.1 });
      },
      "some parameters appear in more than one parameter group",
    ],
  ])("%s", (_name, make, message) => {
    let caught: unknown;
    try {
      make();
    } catch (e) {
      caught = e;
    }
    expect(caught).toBeInstanceOf(ValueError);
    expect(caught).toBeInstanceOf(TprpcError);
    expect((caught as Error).message).toContain(message);
  });

  it("addParamGroup refuses parameters the optimizer already has", () => {
    const [a, b] = params();
    const opt = new optim.SGD([a!], { lr: 0.1 });
    expect(() => opt.addParamGroup({ params: [b!, a!] })).toThrow(
      "some parameters appear in more than one parameter group",
    );
    expect(opt.paramGroups).toHaveLength(1);
  });
});

describe("param groups", () => {
  it("fill in defaults, keep their own values, and take effect per group", () => {
    const [a, b] = params();
    const a0 = a!.toArray();
    const b0 = b!.toArray();
    const opt = new optim.SGD([{ params: [a!] }, { params: b!, lr: 0.5 }], { lr: 0.1, momentum: 0 });
    expect(opt.paramGroups.map((g) => g.lr)).toEqual([0.1, 0.5]);
    expect(opt.paramGroups[1]).toMatchObject({
      momentum: 0,
      dampening: 0,
      weightDecay: 0,
      nesterov: false,
      maximize: false,
    });
    expect(opt.paramGroups[1]!.params).toEqual([b]);
    a!.grad = onesLike(a!);
    b!.grad = onesLike(b!);
    opt.step();
    expectValues(
      a!,
      a0.map((v) => v - 0.1),
      1e-6,
    );
    expectValues(
      b!,
      b0.map((v) => v - 0.5),
      1e-6,
    );
  });

  it("SGD takes lr from every group when there is no default", () => {
    const [a, b] = params();
    const opt = new optim.SGD([
      { params: [a!], lr: 0.1 },
      { params: [b!], lr: 0.2 },
    ]);
    expect(opt.paramGroups.map((g) => g.lr)).toEqual([0.1, 0.2]);
    expect(() => opt.addParamGroup({ params: [tensor([1], { dtype: "float32", requiresGrad: true })] })).toThrow(
      "required optimization parameter lr",
    );
  });

  it("a group added later is optimized with its own hyperparameters", () => {
    const [a, b] = params();
    const opt = new optim.Adagrad([a!], { lr: 0.1 });
    opt.addParamGroup({ params: [b!], lr: 0.01, initialAccumulatorValue: 0.5 });
    expect(opt.state.get(b!)!.sum).toBeDefined();
    expectValues(
      opt.state.get(b!)!.sum as Tensor,
      b!.toArray().map(() => 0.5),
      0,
    );
    const b0 = b!.toArray();
    b!.grad = onesLike(b!);
    opt.step();
    // Adagrad's first step: p -= lr * g / sqrt(init + g^2)
    expectValues(
      b!,
      b0.map((v) => v - 0.01 / Math.sqrt(1.5)),
      1e-6,
    );
  });
});

describe("step", () => {
  it("updates parameters in place, keeping the tensor and its storage", () => {
    for (const make of [
      (p: Tensor[]) => new optim.SGD(p, { lr: 0.1, momentum: 0.9 }),
      (p: Tensor[]) => new optim.Adam(p),
      (p: Tensor[]) => new optim.AdamW(p),
      (p: Tensor[]) => new optim.Adagrad(p),
      (p: Tensor[]) => new optim.RMSprop(p, { centered: true, momentum: 0.5 }),
      (p: Tensor[]) => new optim.Adadelta(p),
      (p: Tensor[]) => new optim.Adamax(p),
      (p: Tensor[]) => new optim.Rprop(p),
    ]) {
      const ps = params();
      const storages = ps.map((p) => p.storage);
      const before = ps.map((p) => p.toArray());
      const opt = make(ps);
      setGrads(ps, randomVecs(8));
      opt.step();
      expect(opt.paramGroups[0]!.params).toEqual(ps);
      ps.forEach((p, i) => {
        expect(p.storage).toBe(storages[i]);
        expect(p.isLeaf).toBe(true);
        expect(p.requiresGrad).toBe(true);
        expect(p.toArray()).not.toEqual(before[i]);
      });
    }
  });

  it("skips parameters whose grad is null", () => {
    const [a, b] = params();
    const b0 = b!.toArray();
    const opt = new optim.Adam([a!, b!]);
    a!.grad = onesLike(a!);
    opt.step();
    expect(b!.toArray()).toEqual(b0);
    expect(opt.state.has(b!)).toBe(false);
    expect(opt.state.get(a!)!.step).toBe(1);
  });

  it("runs a closure with grad enabled (even inside noGrad) and returns its loss", () => {
    const w = tensor([1, -2, 3], { dtype: "float32", requiresGrad: true });
    const opt = new optim.SGD([w], { lr: 0.1 });
    let calls = 0;
    const closure = (): Tensor => {
      calls++;
      opt.zeroGrad();
      const loss = w.mul(w).sum();
      loss.backward();
      return loss;
    };
    const loss = noGrad(() => opt.step(closure));
    expect(calls).toBe(1);
    expect(loss.item()).toBeCloseTo(14, 5);
    expectValues(w, [0.8, -1.6, 2.4], 1e-6); // w -= 0.1 * 2w
  });

  it("awaits an async closure and then steps", async () => {
    const w = tensor([2], { dtype: "float32", requiresGrad: true });
    const opt = new optim.SGD([w], { lr: 0.25 });
    const pending = opt.step(async () => {
      await Promise.resolve();
      const loss = w.mul(w).sum();
      loss.backward();
      return loss.item();
    });
    expect(pending).toBeInstanceOf(Promise);
    expect(await pending).toBe(4);
    expectValues(w, [1], 1e-7); // 2 - 0.25 * 4
  });

  it("returns undefined without a closure", () => {
    const opt = new optim.SGD(params(), { lr: 0.1 });
    expect(opt.step()).toBeUndefined();
  });
});

describe("zeroGrad", () => {
  it("sets gradients to null by default", () => {
    const ps = params();
    const opt = new optim.SGD(ps, { lr: 0.1 });
    setGrads(ps, randomVecs(9));
    opt.zeroGrad();
    expect(ps.map((p) => p.grad)).toEqual([null, null]);
  });

  it("with setToNone = false zeroes the gradient tensors in place", () => {
    const ps = params();
    const opt = new optim.SGD(ps, { lr: 0.1 });
    setGrads(ps, randomVecs(9));
    const grads = ps.map((p) => p.grad!);
    opt.zeroGrad(false);
    ps.forEach((p, i) => {
      expect(p.grad).toBe(grads[i]);
      expect(p.grad!.toArray().every((v) => v === 0)).toBe(true);
    });
  });

  it("then backward accumulates from zero", () => {
    const w = tensor([1, 2], { dtype: "float32", requiresGrad: true });
    const opt = new optim.SGD([w], { lr: 0.1 });
    w.mul(3).sum().backward();
    opt.zeroGrad(false);
    w.mul(5).sum().backward();
    expect(w.grad!.toArray()).toEqual([5, 5]);
  });
});

describe("stateDict", () => {
  const kinds: [string, (p: Tensor[]) => optim.Optimizer<object>][] = [
    ["SGD", (p) => new optim.SGD(p, { lr: 0.1, momentum: 0.9, nesterov: true })],
    ["Adam", (p) => new optim.Adam(p, { lr: 0.05, amsgrad: true })],
    ["AdamW", (p) => new optim.AdamW(p, { lr: 0.05 })],
    ["Adagrad", (p) => new optim.Adagrad(p, { lr: 0.1, lrDecay: 0.1 })],
    ["RMSprop", (p) => new optim.RMSprop(p, { momentum: 0.5, centered: true })],
    ["Adadelta", (p) => new optim.Adadelta(p, { weightDecay: 0.01 })],
    ["Adamax", (p) => new optim.Adamax(p, { lr: 0.05 })],
    ["Rprop", (p) => new optim.Rprop(p, { lr: 0.05, etas: [0.3, 1.5] })],
  ];

  it.each(kinds)("%s: a fresh optimizer loaded from stateDict continues identically", (_name, make) => {
    const a = params();
    const optA = make(a);
    for (const seed of [10, 11]) {
      setGrads(a, randomVecs(seed));
      optA.step();
    }
    const b = leaves(
      a.map((p) => p.toArray()),
      "float32",
    );
    const optB = make(b);
    optB.loadStateDict(optA.stateDict());
    for (const seed of [12, 13]) {
      const g = randomVecs(seed);
      setGrads(a, g);
      setGrads(b, g);
      optA.step();
      optB.step();
      for (const [i, p] of a.entries()) expect(b[i]!.toArray()).toEqual(p.toArray());
    }
  });

  it("has PyTorch's layout: state by parameter index, groups listing indices", () => {
    const [a, b] = params();
    const c = tensor([1, 2, 3], { dtype: "float32", requiresGrad: true });
    const opt = new optim.Adam([{ params: [a!, b!] }, { params: [c], lr: 0.01 }], { lr: 0.1 });
    setGrads([a!, c], [randomVecs(14)[0]!, [1, 1, 1]]);
    opt.step();
    const sd = opt.stateDict();
    expect(Object.keys(sd.state)).toEqual(["0", "2"]);
    expect(Object.keys(sd.state[0]!).sort()).toEqual(["expAvg", "expAvgSq", "step"]);
    expect(sd.state[2]!.step).toBe(1);
    expect(sd.paramGroups).toEqual([
      { lr: 0.1, betas: [0.9, 0.999], eps: 1e-8, weightDecay: 0, amsgrad: false, maximize: false, params: [0, 1] },
      { lr: 0.01, betas: [0.9, 0.999], eps: 1e-8, weightDecay: 0, amsgrad: false, maximize: false, params: [2] },
    ]);
  });

  it.each([
    [
      "Adadelta",
      (p: Tensor[]) => new optim.Adadelta(p),
      { lr: 1, rho: 0.9, eps: 1e-6, weightDecay: 0, maximize: false },
      ["accDelta", "squareAvg", "step"],
    ],
    [
      "Adamax",
      (p: Tensor[]) => new optim.Adamax(p),
      { lr: 2e-3, betas: [0.9, 0.999], eps: 1e-8, weightDecay: 0, maximize: false },
      ["expAvg", "expInf", "step"],
    ],
    [
      "Rprop",
      (p: Tensor[]) => new optim.Rprop(p),
      { lr: 1e-2, etas: [0.5, 1.2], stepSizes: [1e-6, 50], maximize: false },
      ["prev", "step", "stepSize"],
    ],
  ] as const)("%s: torch's defaults, and its state (camelCase) after a step", (_name, make, defaults, keys) => {
    const ps = params();
    const opt = make(ps);
    expect(opt.stateDict()).toEqual({ state: {}, paramGroups: [{ ...defaults, params: [0, 1] }] });
    setGrads(ps, randomVecs(16));
    opt.step();
    const sd = opt.stateDict();
    expect(Object.keys(sd.state[1]!).sort()).toEqual(keys);
    expect(sd.state[1]!.step).toBe(1);
  });

  it("Rprop: step sizes start at lr, grow on a kept sign, shrink on a flip (no move then), within stepSizes", () => {
    const w = tensor([1, 1, 1], { dtype: "float64", requiresGrad: true });
    const opt = new optim.Rprop([w], { lr: 0.1, etas: [0.5, 2], stepSizes: [0.04, 0.3] });
    // each step's gradient, then the step sizes and parameters after it. Step 2: a kept sign doubles the size, a
    // flip halves it and does not move (and leaves a 0 gradient, so step 3 keeps that size); steps 3 and 5 clamp.
    const steps = [
      { g: [1, -1, 0], sizes: [0.1, 0.1, 0.1], want: [0.9, 1.1, 1] },
      { g: [1, 1, 1], sizes: [0.2, 0.05, 0.1], want: [0.7, 1.1, 0.9] },
      { g: [1, -1, -1], sizes: [0.3, 0.05, 0.05], want: [0.4, 1.15, 0.9] },
      { g: [-1, -1, 1], sizes: [0.15, 0.1, 0.05], want: [0.4, 1.25, 0.85] },
      { g: [1, 1, -1], sizes: [0.15, 0.05, 0.04], want: [0.25, 1.25, 0.85] },
      { g: [1, 1, 1], sizes: [0.3, 0.05, 0.04], want: [-0.05, 1.2, 0.81] },
    ];
    for (const [k, { g, sizes, want }] of steps.entries()) {
      w.grad = tensor(g, { dtype: "float64" });
      opt.step();
      expectValues(opt.state.get(w)!.stepSize as Tensor, sizes, 1e-12, 0, `step ${k + 1} sizes`);
      expectValues(w, want, 1e-12, 1e-12, `step ${k + 1} params`);
    }
  });

  it("loads hyperparameters too, and copies state tensors", () => {
    const a = params();
    const optA = new optim.SGD(a, { lr: 0.3, momentum: 0.9 });
    setGrads(a, randomVecs(15));
    optA.step();
    const sd = optA.stateDict();
    const b = params();
    const optB = new optim.SGD(b, { lr: 0.1 });
    optB.loadStateDict(sd);
    expect(optB.paramGroups[0]!.lr).toBe(0.3);
    expect(optB.paramGroups[0]!.momentum).toBe(0.9);
    expect(optB.paramGroups[0]!.params).toEqual(b);
    expect(optB.state.get(b[0]!)!.momentumBuffer).not.toBe(sd.state[0]!.momentumBuffer);
    expect((optB.state.get(b[0]!)!.momentumBuffer as Tensor).toArray()).toEqual(
      (sd.state[0]!.momentumBuffer as Tensor).toArray(),
    );
  });

  it("refuses a state dict that doesn't fit", () => {
    const [a, b] = params();
    const two = new optim.SGD([{ params: [a!] }, { params: [b!] }], { lr: 0.1 }).stateDict();
    const one = new optim.SGD([a!, b!], { lr: 0.1 });
    expect(() => one.loadStateDict(two)).toThrow("loaded state dict has a different number of parameter groups");
    const small = new optim.SGD([a!], { lr: 0.1 }).stateDict();
    expect(() => one.loadStateDict(small)).toThrow("doesn't match the size of optimizer's group");
  });
});

it("prints like torch", () => {
  const opt = new optim.SGD(params(), { lr: 0.1 });
  expect(String(opt)).toBe(
    "SGD (\nParameter Group 0\n    dampening: 0\n    lr: 0.1\n    maximize: false\n    momentum: 0\n    nesterov: false\n    weightDecay: 0\n)",
  );
});

it("every optimizer class builds through OptimizerClass (as DistributedOptimizer does)", () => {
  const build = <O extends object>(C: optim.OptimizerClass<O>, options: Partial<O>): optim.Optimizer<O> =>
    new C(params(), options);
  expect(build(optim.SGD, { lr: 0.1 })).toBeInstanceOf(optim.SGD);
  expect(build(optim.Adam, { lr: 0.1 })).toBeInstanceOf(optim.Adam);
  expect(build(optim.AdamW, {})).toBeInstanceOf(optim.AdamW);
  expect(build(optim.Adagrad, {})).toBeInstanceOf(optim.Adagrad);
  expect(build(optim.RMSprop, { centered: true })).toBeInstanceOf(optim.RMSprop);
  expect(build(optim.Adadelta, { rho: 0.95 })).toBeInstanceOf(optim.Adadelta);
  expect(build(optim.Adamax, {})).toBeInstanceOf(optim.Adamax);
  expect(build(optim.Rprop, { stepSizes: [1e-4, 1] })).toBeInstanceOf(optim.Rprop);
});
