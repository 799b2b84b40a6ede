/**
 * Distributed autograd end to end with real worker processes (master +
 * worker1 + worker2): a nested RPC inside forward (worker1 calls worker2)
 * backpropagates to leaves on all three workers, the master's own input
 * included, with the gradients of the same computation done locally;
 * gradients stay in the context (never in .grad); contexts are cleaned up on
 * every worker; the notebook form (newContext / release); remote() and RRef
 * proxies inside a context; misuse gives typed errors.
 */
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { AutogradError, DistributedOptimizer, type Tensor, distAutograd, optim, rpc, tensor } from "../../sdk/index.js";
import { type Cluster, startGroup, stopGroup, within } from "../dist_autograd/group.js";
import { gen } from "../dist_autograd/models.js";
import { expectClose, settled } from "../helpers.js";

const counts = () =>
  Promise.all([
    distAutograd.contextCount(),
    rpc.rpcSync<number>("worker1", "dist.contextCount"),
    rpc.rpcSync<number>("worker2", "dist.contextCount"),
  ]);

describe("distributed autograd across 3 processes", () => {
  let cluster: Cluster | undefined;

  beforeAll(async () => {
    cluster = await startGroup(2, "dist-autograd-secret-0123456789");
  }, 60_000);

  afterAll(async () => {
    await stopGroup(cluster);
  }, 30_000);

  it("backpropagates through a nested RPC (worker1 calls worker2 in forward) to leaves on every worker", async () => {
    const xv = gen(1, [3], 1.0);
    const av = gen(2, [3], 0.8);
    const bv = gen(3, [3], 0.6);
    await rpc.rpcSync("worker1", "dist.setLeaf", ["a", av]);
    await rpc.rpcSync("worker2", "dist.setLeaf", ["b", bv]);
    const x = tensor(xv, { requiresGrad: true });

    // the same computation, locally
    const [xl, al, bl] = [xv, av, bv].map((t) => tensor(t, { requiresGrad: true })) as [Tensor, Tensor, Tensor];
    const hl = xl.mul(al).tanh();
    const yl = hl.mul(bl).exp().mul(al).add(hl);
    yl.mul(yl).sum().backward();

    let grads: [number[] | null, (number[] | null)[], (number[] | null)[]] | null = null;
    await distAutograd.context(async (ctxId) => {
      const y = await rpc.rpcSync<Tensor>("worker1", "dist.nestedOuter", [x]);
      expect(y.requiresGrad).toBe(true);
      await within(distAutograd.backward(ctxId, [y.mul(y).sum()]), 20_000, "backward");
      grads = [
        distAutograd.getGradients(ctxId).get(x)?.toArray() ?? null,
        await rpc.rpcSync<(number[] | null)[]>("worker1", "dist.gradsOf", [ctxId, ["a"]]),
        await rpc.rpcSync<(number[] | null)[]>("worker2", "dist.gradsOf", [ctxId, ["b"]]),
      ];
      expect(await counts()).toEqual([1, 1, 1]);
    });
    const [gx, [ga], [gb]] = grads!;
    expectClose(gx!, xl.grad!);
    expectClose(ga!, al.grad!);
    expectClose(gb!, bl.grad!);
    expect(x.grad).toBeNull(); // gradients live in the context, not in .grad
    // NB: context() releases the workers' contexts without awaiting them (as PyTorch's context manager)
    expect(await settled(counts, [0, 0, 0])).toEqual([0, 0, 0]);
  });

  it("gives a worker's leaf its gradient when only one of two replies that used it reaches the loss", async () => {
    const b = gen(30, [3], 0.6);
    await rpc.rpcSync("worker2", "dist.setLeaf", ["b", b]);
    const [h1, h2] = [gen(31, [3], 1.0), gen(32, [3], 1.0)];
    const bl = tensor(b, { requiresGrad: true });
    h1.mul(bl).exp().sum().backward();
    await distAutograd.context(async (ctxId) => {
      const y1 = await rpc.rpcSync<Tensor>("worker2", "dist.nestedInner", [h1]);
      await rpc.rpcSync<Tensor>("worker2", "dist.nestedInner", [h2]); // recorded, but unused by the loss
      await within(distAutograd.backward(ctxId, [y1.sum()]), 20_000, "backward");
      const [gb] = await rpc.rpcSync<(number[] | null)[]>("worker2", "dist.gradsOf", [ctxId, ["b"]]);
      expectClose(gb!, bl.grad!);
    });
  });

  it("keeps contexts open across cells with newContext() and releases them everywhere with release()", async () => {
    const x = gen(4, [3], 1.0, true);
    const ctx = distAutograd.newContext();
    expect(distAutograd.currentContext()).toBe(ctx.id);
    // a later "cell": no async context carries over, the ambient one is current
    const y = await new Promise<Tensor>((resolve, reject) =>
      setImmediate(() => void rpc.rpcSync<Tensor>("worker1", "dist.nestedOuter", [x]).then(resolve, reject)),
    );
    await distAutograd.backward(ctx.id, [y.sum()]);
    expect(distAutograd.getGradients(ctx.id).get(x)!.shape).toEqual([3]);
    expect(await counts()).toEqual([1, 1, 1]);
    await ctx.release();
    await ctx.release();
    expect(distAutograd.currentContext()).toBeNull();
    expect(await counts()).toEqual([0, 0, 0]);
    expect(() => distAutograd.getGradients(ctx.id)).toThrow(AutogradError);
  });

  it("records remote() and RRef proxy calls, and sums gradients of two backward passes with retainGraph", async () => {
    const w = gen(5, [4, 3], 0.5, true);
    const x = gen(6, [2, 4], 1.0);
    await distAutograd.context(async (ctxId) => {
      const rx = rpc.remote<Tensor>("worker2", (a: Tensor, b: Tensor) => a.matmul(b), [x, w]);
      const out = (await rx.toHere()).tanh().sum();
      await distAutograd.backward(ctxId, [out], true);
      const once = distAutograd.getGradients(ctxId).get(w)!.toArray();
      await distAutograd.backward(ctxId, [out]);
      const twice = distAutograd.getGradients(ctxId).get(w)!.toArray();
      const local = tensor(w, { requiresGrad: true });
      x.matmul(local).tanh().sum().backward();
      expectClose(once, local.grad!);
      expectClose(
        twice,
        once.map((v) => 2 * v),
      );
    });
  });

  it("steps a DistributedOptimizer with the context's gradients and leaves .grad alone", async () => {
    const p = gen(7, [3], 1.0, true);
    const opt = new DistributedOptimizer(optim.SGD, [new rpc.RRef(p)], { lr: 0.5 });
    const before = p.toArray();
    await distAutograd.context(async (ctxId) => {
      const y = await rpc.rpcSync<Tensor>("worker2", (t: Tensor) => t.mul(t), [p]);
      await distAutograd.backward(ctxId, [y.sum()]);
      await opt.step(ctxId);
    });
    expectClose(
      p.toArray(),
      before.map((v) => v - 0.5 * 2 * v),
    );
    expect(p.grad).toBeNull();
  });

  it("setLr changes the learning rate of the following steps on every owner", async () => {
    const p = gen(11, [3], 1.0, true);
    const q0 = gen(12, [3], 1.0);
    await rpc.rpcSync("worker1", "dist.setLeaf", ["q", q0]);
    const qref = await rpc.rpcSync<rpc.RRef<Tensor>>("worker1", "dist.leafRRef", ["q"]);
    const opt = new DistributedOptimizer(optim.SGD, [new rpc.RRef(p), qref], { lr: 0.5 });
    const before = p.toArray();
    // loss = sum(p * p) + sum(q): gradients 2p on the master and 1 on worker1
    const stepOnce = () =>
      distAutograd.context(async (ctxId) => {
        const q = await qref.toHere();
        await distAutograd.backward(ctxId, [p.mul(p).sum().add(q.sum())]);
        await opt.step(ctxId);
      });
    await opt.setLr(0.1);
    await stepOnce();
    expectClose(
      p.toArray(),
      before.map((v) => v - 0.1 * 2 * v),
    );
    expectClose(
      await rpc.rpcSync<number[]>("worker1", "dist.leafValue", ["q"]),
      q0.toArray().map((v) => v - 0.1),
    );
    await expect(opt.setLr(Number.NaN)).rejects.toThrow(/finite number >= 0/);
  });

  it("keeps 8 concurrent contexts apart and serializes their optimizer steps on the owner (no lost update)", async () => {
    const p0 = gen(9, [4], 1.0);
    await rpc.rpcSync("worker1", "dist.setLeaf", ["p", p0]);
    const pref = await rpc.rpcSync<rpc.RRef<Tensor>>("worker1", "dist.leafRRef", ["p"]);
    const opt = new DistributedOptimizer(optim.SGD, [pref], { lr: 0.1 });
    const cs = Array.from({ length: 8 }, (_, i) => gen(20 + i, [4], 1.0));
    // loss_i = sum(p * c_i): its gradient c_i does not depend on p, so the order of the steps does not matter
    const lossOf = (p: Tensor, c: Tensor) => p.mul(c).sum();
    await Promise.all(
      cs.map((c) =>
        distAutograd.context(async (ctxId) => {
          const p = await pref.toHere();
          await new Promise((r) => setImmediate(r)); // interleave the contexts
          await distAutograd.backward(ctxId, [lossOf(p, c)]);
          expect(distAutograd.getGradients(ctxId).size).toBe(0); // p is worker1's leaf: its gradient is there
          await opt.step(ctxId);
        }),
      ),
    );
    const want = p0.toArray().map((v, j) => v - 0.1 * cs.reduce((s, c) => s + c.toArray()[j]!, 0));
    expectClose(await rpc.rpcSync<number[]>("worker1", "dist.leafValue", ["p"]), want);
    expect(await settled(counts, [0, 0, 0])).toEqual([0, 0, 0]);
  });

  it("refuses misuse with typed errors", async () => {
    const x = gen(8, [2], 1.0, true);
    await distAutograd.context(async (ctxId) => {
      const y = await rpc.rpcSync<Tensor>("worker1", (t: Tensor) => t.mul(2), [x]);
      expect(() => y.sum().backward()).toThrow(/distAutograd\.backward/);
      await expect(distAutograd.backward(ctxId, [y])).rejects.toThrow(AutogradError); // not a scalar
      await expect(distAutograd.context(async () => 1)).rejects.toThrow(/do not nest/);
    });
    await expect(distAutograd.backward(123, [x.sum()])).rejects.toThrow(/Could not find autograd context/);
  });
});
