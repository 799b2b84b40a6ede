/**
 * In-place arithmetic with no graph recorded (sdk/autograd/inplace.ts: directBinary, directFill)
 * writes straight into self. It must give what the out-of-place op gives, on every backend: with
 * a broadcast operand, alpha, a scalar, a 0-dim tensor of another dtype, the very same tensor as
 * operand, and an overlapping view of self (which takes the general path); and keep the errors
 * and the version counter of the general path.
 */
import { expect, it } from "vitest";
import { manualSeed, noGrad, rand, tensor } from "../../sdk/index.js";
import { describeEachBackend } from "../helpers.js";

describeEachBackend("autograd: in-place arithmetic straight into self", () => {
  it("equals the out-of-place ops (broadcast, alpha, scalars, 0-dim operands, self as operand)", () => {
    manualSeed(3);
    const x = rand([5, 7]);
    const b = rand([7]);
    const cases: [string, (t: typeof x) => typeof x, (t: typeof x) => typeof x][] = [
      ["add_ broadcast", (t) => t.add_(b), (t) => t.add(b)],
      ["add_ alpha", (t) => t.add_(b, -0.25), (t) => t.add(b, -0.25)],
      ["sub_ alpha", (t) => t.sub_(b, 3), (t) => t.sub(b, 3)],
      ["mul_ scalar", (t) => t.mul_(0.9), (t) => t.mul(0.9)],
      ["div_ 0-dim f64", (t) => t.div_(tensor(3, { dtype: "float64" })), (t) => t.div(tensor(3, { dtype: "float64" }))],
      ["add_ self", (t) => t.add_(t), (t) => t.add(t)],
      ["mul_ self", (t) => t.mul_(t), (t) => t.mul(t)],
    ];
    for (const [name, inplace, outOfPlace] of cases) {
      const want = outOfPlace(x.clone()).toArray();
      const t = x.clone();
      const v0 = t.storage.version;
      const r = inplace(t);
      expect(r, name).toBe(t);
      expect(t.toArray(), name).toEqual(want);
      expect(t.storage.version, name).toBe(v0 + 1);
    }
  });

  it("an overlapping view of self as operand gives the out-of-place result", () => {
    const base = tensor([1, 2, 3, 4, 5, 6]);
    const want = base
      .narrow(0, 1, 5)
      .add(base.narrow(0, 0, 5))
      .toArray();
    const t = base.clone();
    t.narrow(0, 1, 5).add_(t.narrow(0, 0, 5));
    expect(t.toArray().slice(1)).toEqual(want);
  });

  it("keeps the general path's errors and its refusal on leaves that require grad", () => {
    expect(() => tensor([1, 2], { dtype: "int64" }).mul_(1.5)).toThrow(/can't be cast/);
    expect(() => rand([2, 3]).add_(rand([3, 3]))).toThrow();
    const w = rand([3], { requiresGrad: true });
    expect(() => w.add_(1)).toThrow(/leaf Variable that requires grad/);
    expect(() => w.zero_()).toThrow(/leaf Variable that requires grad/);
    noGrad(() => w.mul_(2).zero_());
    expect(w.toArray()).toEqual([0, 0, 0]);
  });

  it("an in-place change under noGrad of a tensor saved for backward is caught at backward", () => {
    const w = rand([3], { requiresGrad: true });
    const y = w.mul(w);
    noGrad(() => w.add_(1));
    expect(() => y.sum().backward()).toThrow(/modified by an inplace operation/);
  });
});
