/**
 * Each optimizer against a float64 re-derivation of torch 1.13's update rule
 * (reference.ts): three steps with given gradients, on float64 parameters
 * (tight tolerance: same operations, same order) and on float32 parameters
 * (float32 tolerance), on every backend. PyTorch's own numbers (test/fixtures/optim.json) are
 * checked by test/parity/optim.test.ts.
 */
import { describe, it } from "vitest";
import { optim, type Tensor } from "../../sdk/index.js";
import { describeEachBackend } from "../helpers.js";
import { expectValues, leaves, randomVecs, setGrads } from "./helpers.js";
import {
  adadeltaRule,
  adagradRule,
  adamaxRule,
  adamRule,
  adamwRule,
  type RefRule,
  rmspropRule,
  rpropRule,
  runReference,
  sgdRule,
} from "./reference.js";

type Make = (params: Tensor[]) => { step(): unknown };

interface Case {
  name: string;
  make: Make;
  rule: RefRule;
}

const cases: Case[] = [
  { name: "SGD", make: (p) => new optim.SGD(p, { lr: 0.1 }), rule: sgdRule({ lr: 0.1 }) },
  {
    name: "SGD momentum",
    make: (p) => new optim.SGD(p, { lr: 0.1, momentum: 0.9 }),
    rule: sgdRule({ lr: 0.1, momentum: 0.9 }),
  },
  {
    name: "SGD momentum dampening weightDecay",
    make: (p) => new optim.SGD(p, { lr: 0.05, momentum: 0.8, dampening: 0.3, weightDecay: 0.01 }),
    rule: sgdRule({ lr: 0.05, momentum: 0.8, dampening: 0.3, weightDecay: 0.01 }),
  },
  {
    name: "SGD nesterov maximize",
    make: (p) => new optim.SGD(p, { lr: 0.1, momentum: 0.9, nesterov: true, maximize: true }),
    rule: sgdRule({ lr: 0.1, momentum: 0.9, nesterov: true, maximize: true }),
  },
  { name: "Adam defaults", make: (p) => new optim.Adam(p), rule: adamRule({}) },
  {
    name: "Adam betas eps weightDecay",
    make: (p) => new optim.Adam(p, { lr: 0.05, betas: [0.8, 0.99], eps: 1e-6, weightDecay: 0.1 }),
    rule: adamRule({ lr: 0.05, betas: [0.8, 0.99], eps: 1e-6, weightDecay: 0.1 }),
  },
  {
    name: "Adam amsgrad maximize",
    make: (p) => new optim.Adam(p, { lr: 0.05, amsgrad: true, maximize: true }),
    rule: adamRule({ lr: 0.05, amsgrad: true, maximize: true }),
  },
  { name: "AdamW defaults", make: (p) => new optim.AdamW(p), rule: adamwRule({}) },
  {
    name: "AdamW weightDecay amsgrad",
    make: (p) => new optim.AdamW(p, { lr: 0.05, weightDecay: 0.1, amsgrad: true }),
    rule: adamwRule({ lr: 0.05, weightDecay: 0.1, amsgrad: true }),
  },
  { name: "Adagrad defaults", make: (p) => new optim.Adagrad(p), rule: adagradRule({}) },
  {
    name: "Adagrad all options",
    make: (p) =>
      new optim.Adagrad(p, { lr: 0.1, lrDecay: 0.01, weightDecay: 0.01, initialAccumulatorValue: 0.1, eps: 1e-8 }),
    rule: adagradRule({ lr: 0.1, lrDecay: 0.01, weightDecay: 0.01, initialAccumulatorValue: 0.1, eps: 1e-8 }),
  },
  { name: "RMSprop defaults", make: (p) => new optim.RMSprop(p), rule: rmspropRule({}) },
  {
    name: "RMSprop momentum",
    make: (p) => new optim.RMSprop(p, { lr: 0.01, momentum: 0.9 }),
    rule: rmspropRule({ lr: 0.01, momentum: 0.9 }),
  },
  {
    name: "RMSprop centered all",
    make: (p) => new optim.RMSprop(p, { lr: 0.01, alpha: 0.9, momentum: 0.5, centered: true, weightDecay: 0.01 }),
    rule: rmspropRule({ lr: 0.01, alpha: 0.9, momentum: 0.5, centered: true, weightDecay: 0.01 }),
  },
  { name: "Adadelta defaults", make: (p) => new optim.Adadelta(p), rule: adadeltaRule({}) },
  {
    name: "Adadelta rho eps weightDecay maximize",
    make: (p) => new optim.Adadelta(p, { lr: 0.5, rho: 0.8, eps: 1e-4, weightDecay: 0.1, maximize: true }),
    rule: adadeltaRule({ lr: 0.5, rho: 0.8, eps: 1e-4, weightDecay: 0.1, maximize: true }),
  },
  { name: "Adamax defaults", make: (p) => new optim.Adamax(p), rule: adamaxRule({}) },
  {
    name: "Adamax betas eps weightDecay maximize",
    make: (p) => new optim.Adamax(p, { lr: 0.05, betas: [0.8, 0.99], eps: 1e-3, weightDecay: 0.1, maximize: true }),
    rule: adamaxRule({ lr: 0.05, betas: [0.8, 0.99], eps: 1e-3, weightDecay: 0.1, maximize: true }),
  },
  { name: "Rprop defaults", make: (p) => new optim.Rprop(p), rule: rpropRule({}) },
  {
    name: "Rprop etas stepSizes maximize",
    make: (p) => new optim.Rprop(p, { lr: 0.05, etas: [0.3, 1.5], stepSizes: [0.01, 0.08], maximize: true }),
    rule: rpropRule({ lr: 0.05, etas: [0.3, 1.5], stepSizes: [0.01, 0.08], maximize: true }),
  },
];

const start = randomVecs(1);
const grads = [randomVecs(2), randomVecs(3), randomVecs(4)];

describeEachBackend("optimizers against the reference", () => {
  describe.each(cases)("$name", ({ make, rule }) => {
    const want = runReference(rule, start, grads);

    it.each([
      ["float64", 1e-12],
      ["float32", 2e-5],
    ] as const)("matches the reference for 3 steps (%s)", (dtype, rtol) => {
      const params = leaves(start, dtype);
      const opt = make(params);
      grads.forEach((g, k) => {
        setGrads(params, g);
        opt.step();
        const atol = dtype === "float64" ? 1e-14 : 1e-6;
        for (const [i, p] of params.entries()) expectValues(p, want[k]![i]!, rtol, atol, `step ${k + 1} p${i}`);
      });
    });
  });
});
