/**
 * nn.init and the layers' default initialisation: PyTorch's bounds and
 * spreads (checked statistically on seeded draws) and seeded determinism.
 */
import { describe, expect, it } from "vitest";
import { Generator, manualSeed, nn, type Tensor, ValueError, zeros } from "../../sdk/index.js";

const { init } = nn;

function stats(t: Tensor): { mean: number; std: number; min: number; max: number } {
  const v = t.toArray();
  const mean = v.reduce((a, b) => a + b, 0) / v.length;
  const std = Math.sqrt(v.reduce((a, b) => a + (b - mean) ** 2, 0) / v.length);
  return { mean, std, min: Math.min(...v), max: Math.max(...v) };
}

describe("default initialisation", () => {
  it("Linear: weight and bias in ±1/sqrt(fanIn), spread as U(-b, b)", () => {
    manualSeed(0);
    const m = new nn.Linear(64, 128);
    const bound = 1 / Math.sqrt(64);
    const w = stats(m.weight);
    expect(w.min).toBeGreaterThanOrEqual(-bound);
    expect(w.max).toBeLessThanOrEqual(bound);
    expect(w.max).toBeGreaterThan(0.95 * bound); // the range is used, not a narrower one
    expect(Math.abs(w.mean)).toBeLessThan(0.01);
    expect(w.std).toBeCloseTo(bound / Math.sqrt(3), 2);
    const b = stats(m.bias!);
    expect(b.min).toBeGreaterThanOrEqual(-bound);
    expect(b.max).toBeLessThanOrEqual(bound);
  });

  it("is deterministic under manualSeed", () => {
    manualSeed(42);
    const a = new nn.Linear(5, 3).stateDict();
    manualSeed(42);
    const b = new nn.Linear(5, 3).stateDict();
    expect(a.weight!.toArray()).toEqual(b.weight!.toArray());
    expect(a.bias!.toArray()).toEqual(b.bias!.toArray());
    manualSeed(43);
    expect(new nn.Linear(5, 3).weight.toArray()).not.toEqual(a.weight!.toArray());
  });

  it("Embedding: N(0, 1) with the padding row zero; LayerNorm: ones and zeros", () => {
    manualSeed(1);
    const e = new nn.Embedding(100, 50, { paddingIdx: -1 });
    expect(e.paddingIdx).toBe(99);
    const s = stats(e.weight.narrow(0, 0, 99));
    expect(Math.abs(s.mean)).toBeLessThan(0.05);
    expect(s.std).toBeGreaterThan(0.95);
    expect(s.std).toBeLessThan(1.05);
    expect(
      e.weight
        .select(0, 99)
        .toArray()
        .every((v) => v === 0),
    ).toBe(true);
    expect(() => new nn.Embedding(3, 2, { paddingIdx: 3 })).toThrow(/Padding_idx must be within num_embeddings/);
    const ln = new nn.LayerNorm([2, 3]);
    expect(ln.weight!.toArray()).toEqual([1, 1, 1, 1, 1, 1]);
    expect(ln.bias!.toArray()).toEqual([0, 0, 0, 0, 0, 0]);
  });

  it("honours the dtype option", () => {
    expect(new nn.Linear(2, 2, { dtype: "float64" }).weight.dtype).toBe("float64");
    expect(new nn.Embedding(2, 2, { dtype: "float64" }).weight.dtype).toBe("float64");
  });
});

describe("nn.init", () => {
  it("calculateGain matches torch.nn.init.calculate_gain", () => {
    expect(init.calculateGain("linear")).toBe(1);
    expect(init.calculateGain("tanh")).toBeCloseTo(5 / 3);
    expect(init.calculateGain("relu")).toBeCloseTo(Math.SQRT2);
    expect(init.calculateGain("leaky_relu")).toBeCloseTo(Math.sqrt(2 / (1 + 0.01 ** 2)));
    expect(init.calculateGain("leakyRelu", Math.sqrt(5))).toBeCloseTo(Math.sqrt(1 / 3));
    expect(init.calculateGain("selu")).toBe(0.75);
  });

  it("fans come from [out, in, ...kernel]; 1-D tensors are refused", () => {
    expect(init.calculateFanInAndFanOut(zeros([8, 4, 3]))).toEqual([12, 24]);
    expect(() => init.kaimingUniform_(zeros([4]))).toThrow(ValueError);
  });

  it("xavier and kaiming spreads", () => {
    manualSeed(5);
    const t = zeros([200, 100]);
    init.xavierUniform_(t);
    const a = Math.sqrt(6 / 300);
    expect(stats(t).max).toBeLessThanOrEqual(a);
    expect(stats(t).std).toBeCloseTo(a / Math.sqrt(3), 2);
    init.xavierNormal_(t, 2);
    expect(stats(t).std).toBeCloseTo(2 * Math.sqrt(2 / 300), 2);
    init.kaimingNormal_(t, { mode: "fan_out", nonlinearity: "relu" });
    expect(stats(t).std).toBeCloseTo(Math.SQRT2 / Math.sqrt(200), 2);
    init.kaimingUniform_(t, { nonlinearity: "relu" });
    expect(stats(t).max).toBeLessThanOrEqual(Math.sqrt(6 / 100));
  });

  it("fills in place without a graph, also on parameters, and takes a Generator", () => {
    const p = new nn.Parameter(zeros([3, 3]));
    expect(init.constant_(p, 2)).toBe(p);
    expect(p.toArray().every((v) => v === 2)).toBe(true);
    expect(p.isLeaf).toBe(true);
    init.ones_(p);
    expect(p.toArray().every((v) => v === 1)).toBe(true);
    init.zeros_(p);
    expect(p.toArray().every((v) => v === 0)).toBe(true);
    const x = init.uniform_(zeros([50]), -2, -1, new Generator(7)).toArray();
    const y = init.uniform_(zeros([50]), -2, -1, new Generator(7)).toArray();
    expect(x).toEqual(y);
    expect(x.every((v) => v >= -2 && v < -1)).toBe(true);
    const n = stats(init.normal_(zeros([4000]), 3, 0.5));
    expect(n.mean).toBeCloseTo(3, 1);
    expect(n.std).toBeCloseTo(0.5, 1);
  });
});
