/**
 * Autograd engine behaviour: accumulation, retainGraph, hooks, retainGrad,
 * noGrad/detach, autograd.grad, running from given nodes (what distributed
 * autograd uses), and the typed errors PyTorch users expect.
 */
import { describe, expect, it } from "vitest";
import {
  AutogradError,
  DTypeError,
  NotImplementedError,
  ShapeError,
  autograd,
  noGrad,
  enableGrad,
  isGradEnabled,
  ones,
  tensor,
  zeros,
} from "../../sdk/index.js";
import { expectClose } from "../helpers.js";

describe("autograd engine", () => {
  it("accumulates into .grad across backward calls and through shared subexpressions", () => {
    const x = tensor([1, 2, 3], { dtype: "float32", requiresGrad: true });
    const y = x.mul(x).sum(); // dy/dx = 2x
    y.backward();
    expectClose(x.grad!, [2, 4, 6]);
    x.mul(3).sum().backward();
    expectClose(x.grad!, [5, 7, 9]);
  });

  it("accumulates later gradients into .grad in place (micro-batches), as torch; a replaced .grad is summed out of place", () => {
    const w = tensor([1, -2, 3], { dtype: "float32", requiresGrad: true });
    w.mul(2).sum().backward();
    const first = w.grad!;
    w.mul(w).sum().backward(); // += 2w
    expect(w.grad).toBe(first);
    expectClose(first, [4, -2, 8]);
    const view = tensor(
      [
        [10, 0],
        [20, 0],
        [30, 0],
      ],
      { dtype: "float32" },
    ).select(1, 0); // not contiguous
    w.grad = view;
    w.sum().backward();
    expect(w.grad).not.toBe(view);
    expectClose(w.grad!, [11, 21, 31]);
    expectClose(view, [10, 20, 30]); // the replaced tensor itself untouched
  });

  it("diamond graphs sum both paths", () => {
    const x = tensor([0.5, -1.5], { dtype: "float32", requiresGrad: true });
    const a = x.exp();
    const y = a.mul(a.sin()).add(a).sum();
    y.backward();
    const ex = [Math.exp(0.5), Math.exp(-1.5)];
    expectClose(
      x.grad!,
      ex.map((e) => e * (Math.sin(e) + e * Math.cos(e)) + e),
    );
  });

  it("sums four contributions to one node (in place from the third) without changing a passed-through gradient", () => {
    const x = tensor([0.5, 1, -2], { dtype: "float32", requiresGrad: true });
    const a = x.mul(2); // gets four contributions: b's gradient twice (AddBackward passes it on), c's, d's
    const b = a.add(a);
    let seen: number[] = [];
    let seenTensor: ReturnType<typeof tensor> | null = null;
    b.registerHook((g) => {
      seenTensor = g;
      seen = g.toArray();
    });
    const c = a.mul(3);
    const d = a.exp();
    b.sum().add(c.sum()).add(d.sum()).backward();
    // d/da = 1 + 1 + 3 + exp(a), d/dx = 2 d/da
    expectClose(
      x.grad!,
      [0.5, 1, -2].map((v) => 2 * (5 + Math.exp(2 * v))),
    );
    expect(seenTensor!.toArray()).toEqual(seen); // the hook's tensor was not summed into
    expect(seen).toEqual([1, 1, 1]);
  });

  it("a summed gradient passed on to two inputs is not summed into afterwards", () => {
    const x = tensor([0.1, -0.3, 0.4], { dtype: "float32", requiresGrad: true });
    const p = x.mul(2);
    const q = x.mul(3);
    const ps = p.sum(); // created first, so its gradient reaches p after e's
    const e = p.add(q); // e's two contributions are summed, then passed on to both p and q
    e.sum().add(e.exp().sum()).add(ps).backward();
    // de = 1 + exp(5x); dp = de + 1; dq = de; dx = 2 dp + 3 dq
    expectClose(
      x.grad!,
      [0.1, -0.3, 0.4].map((v) => 5 * (1 + Math.exp(5 * v)) + 2),
    );
  });

  it("refuses a second backward without retainGraph, allows it with", () => {
    const x = tensor([1, 2], { dtype: "float32", requiresGrad: true });
    const y = x.exp().sum();
    y.backward(undefined, true);
    y.backward();
    expectClose(x.grad!, [2 * Math.E, 2 * Math.exp(2)]);
    expect(() => y.backward()).toThrow(AutogradError);
    expect(() => y.backward()).toThrow(/backward through the graph a second time/);
  });

  it("needs an explicit gradient for non-scalar outputs, of the right shape", () => {
    const x = tensor([1, 2], { dtype: "float32", requiresGrad: true });
    const y = x.mul(2);
    expect(() => y.backward()).toThrow(/implicitly created only for scalar outputs/);
    expect(() => y.backward(ones([3]))).toThrow(ShapeError);
    y.backward(tensor([1, 10]));
    expectClose(x.grad!, [2, 20]);
  });

  it("refuses backward on a tensor that does not require grad", () => {
    expect(() => tensor([1, 2]).sum().backward()).toThrow(/does not require grad/);
  });

  it("refuses in-place ops on leaves that require grad, allows them under noGrad", () => {
    const w = tensor([1, 2], { dtype: "float32", requiresGrad: true });
    expect(() => w.add_(1)).toThrow(AutogradError);
    expect(() => w.add_(1)).toThrow(/leaf Variable that requires grad/);
    noGrad(() => w.sub_(0.5));
    expectClose(w, [0.5, 1.5]);
    expect(w.requiresGrad).toBe(true);
  });

  it("detects tensors modified in place after being saved", () => {
    const x = tensor([1, 2], { dtype: "float32", requiresGrad: true });
    const h = x.mul(1);
    const y = h.log(); // saves h
    h.mul_(2);
    expect(() => y.sum().backward()).toThrow(/modified by an inplace operation/);
  });

  it("rebases history for in-place ops on non-leaves", () => {
    const x = tensor([1, 2], { dtype: "float32", requiresGrad: true });
    const h = x.mul(3);
    h.add_(1).mul_(2); // h = 6x + 2
    h.mul(x).sum().backward(); // d/dx (6x + 2) x = 12x + 2
    expectClose(x.grad!, [14, 26]);
    // as in PyTorch: a tensor saved for backward (here m, saved by mul) may not change in place afterwards
    const m = x.mul(3);
    const saved = m.mul(x); // saves m
    m.add_(1);
    expect(() => saved.sum().backward()).toThrow(/inplace/);
  });

  it("refuses in-place results that can't be cast to self's dtype", () => {
    const i = tensor([1, 2], { dtype: "int64" });
    expect(() => i.add_(0.5)).toThrow(DTypeError);
    expect(() =>
      tensor([1, 2]).add_(
        tensor([
          [1, 2],
          [3, 4],
        ]),
      ),
    ).toThrow(ShapeError);
  });

  it("refuses grad-recording in-place ops on views", () => {
    const x = tensor([1, 2, 3, 4], { dtype: "float32", requiresGrad: true });
    const v = x.mul(1).narrow(0, 1, 2);
    expect(() => v.mul_(2)).toThrow(NotImplementedError);
  });

  it("only floats require grad; only leaves change the flag", () => {
    expect(() => tensor([1, 2], { dtype: "int64", requiresGrad: true })).toThrow(/floating point/);
    const x = tensor([1.5], { dtype: "float32", requiresGrad: true });
    expect(() => {
      x.mul(2).requiresGrad = false;
    }).toThrow(/leaf/);
  });

  it("noGrad records nothing; enableGrad re-enables inside", () => {
    const x = tensor([1, 2], { dtype: "float32", requiresGrad: true });
    const y = noGrad(() => {
      expect(isGradEnabled()).toBe(false);
      const inner = enableGrad(() => x.mul(2));
      expect(inner.requiresGrad).toBe(true);
      return x.mul(2);
    });
    expect(isGradEnabled()).toBe(true);
    expect(y.requiresGrad).toBe(false);
    expect(y.gradFn).toBeNull();
  });

  it("restores grad mode after an async noGrad region and after a throw", async () => {
    await noGrad(async () => {
      await new Promise((r) => setTimeout(r, 1));
    });
    expect(isGradEnabled()).toBe(true);
    expect(() =>
      noGrad(() => {
        throw new Error("boom");
      }),
    ).toThrow("boom");
    expect(isGradEnabled()).toBe(true);
  });

  it("detach cuts the graph and shares storage", () => {
    const x = tensor([1, 2], { dtype: "float32", requiresGrad: true });
    const d = x.mul(2).detach();
    expect(d.requiresGrad).toBe(false);
    const y = x.mul(d).sum();
    y.backward();
    expectClose(x.grad!, [2, 4]);
  });

  it("runs tensor hooks (leaf and non-leaf) and can replace the gradient", () => {
    const x = tensor([1, 2, 3], { dtype: "float32", requiresGrad: true });
    const seen: number[][] = [];
    x.registerHook((g) => {
      seen.push(g.toArray());
    });
    const h = x.mul(2);
    const handle = h.registerHook((g) => g.mul(10));
    h.sum().backward();
    expectClose(x.grad!, [20, 20, 20]);
    expect(seen).toEqual([[20, 20, 20]]);
    handle.remove();
    x.grad = null;
    x.mul(2).sum().backward();
    expectClose(x.grad!, [2, 2, 2]);
    expect(() => tensor([1]).registerHook(() => undefined)).toThrow(AutogradError);
  });

  it("retainGrad keeps a non-leaf's gradient", () => {
    const x = tensor([1, 2], { dtype: "float32", requiresGrad: true });
    const h = x.mul(3);
    h.retainGrad();
    h.square().sum().backward();
    expectClose(h.grad!, [6, 12]);
    expect(x.mul(3).grad).toBeNull();
  });

  it("autograd.grad returns gradients without touching .grad", () => {
    const x = tensor([1, 2], { dtype: "float32", requiresGrad: true });
    const w = tensor([3, 4], { dtype: "float32", requiresGrad: true });
    const h = x.mul(w);
    const [gx, gh] = autograd.grad(h.exp().sum(), [x, h]);
    expectClose(gx!, [3 * Math.exp(3), 4 * Math.exp(8)]);
    expectClose(gh!, [Math.exp(3), Math.exp(8)]);
    expect(x.grad).toBeNull();
    const z = tensor([1], { dtype: "float32", requiresGrad: true });
    expect(() => autograd.grad(x.sum(), [z])).toThrow(/not have been used/);
  });

  it("runs from given nodes with given gradients into a custom sink (distributed autograd's entry point)", () => {
    const x = tensor([1, 2], { dtype: "float32", requiresGrad: true });
    const y = x.mul(x);
    const sink = new Map<object, number[]>();
    autograd.runBackward([{ node: autograd.gradEdge(y)!, grad: tensor([1, 1]) }], {
      accumulate: (leaf, g) => sink.set(leaf, g.toArray()),
    });
    expect(sink.get(x)).toEqual([2, 4]);
    expect(x.grad).toBeNull();
  });

  it("lets a custom Node subclass join the graph (as send/recv functions will)", () => {
    class Scale extends autograd.Node {
      readonly name = "ScaleBackward";
      apply(g: ReturnType<typeof tensor>) {
        return [g.mul(5)];
      }
    }
    const x = tensor([1, 2], { dtype: "float32", requiresGrad: true });
    const node = new Scale([autograd.gradEdge(x)]);
    autograd.runBackward([{ node, grad: tensor([1, 1]) }]);
    expectClose(x.grad!, [5, 5]);
  });

  it("leaves .grad alone for tensors computed without grad", () => {
    const x = zeros([2], { dtype: "float32", requiresGrad: true });
    const y = noGrad(() => x.add(1));
    expect(y.gradFn).toBeNull();
  });
});
