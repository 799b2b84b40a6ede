/**
 * The engine's default accumulation gives a leaf whose .grad is null the gradient tensor itself
 * when only the engine can hold it (sdk/autograd/engine.ts, point 6), and a copy otherwise. What a
 * user can see must not change: no two .grad tensors, no hook's tensor and no tensor passed to
 * backward() may share memory with a .grad that a later backward adds into in place.
 */
import { expect, it } from "vitest";
import { rand, tensor, type Tensor } from "../../sdk/index.js";
import { describeEachBackend } from "../helpers.js";

const ones = (n: number) => new Array<number>(n).fill(1);

describeEachBackend("autograd: leaf gradients taken without a copy", () => {
  it("a gradient passed on to two leaves gives each its own .grad", () => {
    const x = rand([4], { requiresGrad: true });
    const y = rand([4], { requiresGrad: true });
    x.add(y).sum().backward();
    x.grad!.add_(1);
    expect(y.grad!.toArray()).toEqual(ones(4));
    expect(x.grad!.toArray()).toEqual(ones(4).map(() => 2));
  });

  it("later passes still accumulate into .grad, and earlier .grad values stay right", () => {
    const w = rand([3, 5], { requiresGrad: true });
    const x = rand([2, 3]);
    x.matmul(w).sum().backward();
    const first = w.grad!.toArray();
    const held = w.grad!;
    x.matmul(w).sum().backward();
    expect(w.grad).toBe(held); // accumulated in place, as torch does
    expect(w.grad!.toArray()).toEqual(first.map((v) => 2 * v));
  });

  it("a tensor a hook kept is not the leaf's .grad", () => {
    const x = rand([3], { requiresGrad: true });
    const mid = x.mul(2);
    let seen: Tensor | null = null;
    mid.registerHook((g) => {
      seen = g;
    });
    const y = mid.add(1);
    y.sum().backward();
    const before = seen!.toArray();
    x.grad!.add_(100);
    expect(seen!.toArray()).toEqual(before);
    let leafSeen: Tensor | null = null;
    const z = rand([3], { requiresGrad: true });
    z.registerHook((g) => {
      leafSeen = g;
    });
    z.mul(3).sum().backward();
    z.grad!.add_(1);
    expect(leafSeen!.toArray()).toEqual([3, 3, 3]);
  });

  it("the gradient given to backward() is not taken", () => {
    const x = rand([3], { requiresGrad: true });
    const g = tensor([1, 2, 3]);
    x.mul(1).backward(g);
    x.grad!.add_(10);
    expect(g.toArray()).toEqual([1, 2, 3]);
    const leaf = rand([2], { requiresGrad: true });
    const g2 = tensor([5, 6]);
    leaf.backward(g2);
    leaf.grad!.add_(1);
    expect(g2.toArray()).toEqual([5, 6]);
  });
});
