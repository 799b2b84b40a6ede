/**
 * Distributed autograd in one process: the wire-order tensor walk, metadata
 * checks, the send/recv nodes, and a one-worker group whose RPCs go to
 * itself (so the send and recv nodes of one message sit in the same
 * context), with DistributedOptimizer and RemoteModule over those self-calls.
 */
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import {
  AutogradError,
  DistributedOptimizer,
  ProtocolError,
  RemoteModule,
  ShapeError,
  type Tensor,
  ValueError,
  distAutograd,
  manualSeed,
  nn,
  optim,
  randn,
  rpc,
  tensor,
} from "../../sdk/index.js";
import type { FunctionNode } from "../../sdk/autograd/node.js";
import { poolStats } from "../../sdk/tensor/pool.js";
import { getOrCreateContext } from "../../sdk/dist_autograd/context.js";
import { RecvNode, SendNode } from "../../sdk/dist_autograd/functions.js";
import { parseMeta } from "../../sdk/dist_autograd/hook.js";
import { collectTensors, mapTensors } from "../../sdk/dist_autograd/tensors.js";
import { freePort } from "../e2e/workers.js";
import { expectClose } from "../helpers.js";

describe("the tensor walk", () => {
  it("finds tensors in wire order (arrays, object keys, Map entries) and skips RRef-like opaque values", () => {
    const [a, b, c, d] = [1, 2, 3, 4].map((v) => tensor([v]));
    const value = [a, { z: b, y: [c] }, new Map([["k", d]]), "text", 7, null];
    expect(collectTensors(value)).toEqual([a, b, c, d]);
  });

  it("replaces tensors by copying only the containers on the way to them", () => {
    const a = tensor([1]);
    const untouched = { n: 1, list: [2, 3] };
    const value = { untouched, inner: [a, 5] };
    const out = mapTensors(value, (t) => t.mul(10)) as typeof value;
    expect(out).not.toBe(value);
    expect(out.untouched).toBe(untouched);
    expect((out.inner[0] as Tensor).toArray()).toEqual([10]);
    expect(value.inner[0]).toBe(a);
    expect(mapTensors(untouched, (t) => t)).toBe(untouched);
  });
});

describe("metadata from the wire", () => {
  it("accepts what the sender writes and refuses anything else with a ProtocolError", () => {
    expect(parseMeta(undefined)).toBeNull();
    expect(parseMeta({ c: 5 })).toEqual({ c: 5 });
    expect(parseMeta({ c: 5, m: 9, g: [0, 2], n: 3 })).toEqual({ c: 5, m: 9, g: [0, 2], n: 3 });
    for (const bad of [
      7,
      { c: -1 },
      { c: "5" },
      { c: 1, m: 2, g: [], n: 1 },
      { c: 1, m: 2, g: [3], n: 3 },
      { c: 1, m: 2, g: [1, 1], n: 3 },
      { c: 1, m: 2, g: [0], n: 2.5 },
    ])
      expect(() => parseMeta(bad), JSON.stringify(bad)).toThrow(ProtocolError);
  });
});

describe("send and recv nodes", () => {
  it("checks the gradients a peer sends for a send node", () => {
    const x = tensor([1, 2], { dtype: "float32", requiresGrad: true });
    const send = new SendNode([null], [x], 1, 2, "worker1");
    expect(() => send.setGrads([])).toThrow(AutogradError);
    expect(() => send.setGrads([tensor([1, 2, 3])])).toThrow(ShapeError);
    send.setGrads([tensor([5, 6])]);
    expect((send.apply()[0] as Tensor).toArray()).toEqual([5, 6]);
  });

  it("refuses a local backward through a recv node, naming distAutograd.backward", () => {
    const y = tensor([1, 2]);
    y.gradFn = new RecvNode(1, 2, 0, 1, "worker1");
    expect(() => y.sum().backward()).toThrow(/distAutograd\.backward/);
  });
});

describe("a one-worker group calling itself", () => {
  beforeAll(async () => {
    const port = await freePort();
    await rpc.initRpc("solo", {
      rank: 0,
      worldSize: 1,
      initMethod: `tcp://127.0.0.1:${port}`,
      secret: "solo-0123456789abcdef",
    });
  }, 30_000);

  afterAll(async () => {
    await rpc.shutdown({ timeoutMs: 5_000 });
  });

  it("makes context ids that carry the worker id in the high bits and counts live contexts", async () => {
    expect(distAutograd.contextCount()).toBe(0);
    const ids: number[] = [];
    await distAutograd.context(async (a) => {
      ids.push(a);
      expect(distAutograd.contextCount()).toBe(1);
      expect(distAutograd.currentContext()).toBe(a);
    });
    await distAutograd.context(async (b) => ids.push(b));
    expect(ids[1]).toBe(ids[0]! + 1);
    expect(Math.floor(ids[0]! / 2 ** 32)).toBe(rpc.getWorkerInfo().id);
    expect(distAutograd.contextCount()).toBe(0);
    expect(distAutograd.currentContext()).toBeNull();
    // a late message of a released context does not bring it back
    expect(getOrCreateContext(ids[0]!)).toBeUndefined();
    expect(distAutograd.contextCount()).toBe(0);
  });

  it("backpropagates through a call to itself into the context, not .grad", async () => {
    const w = tensor([0.5, -1, 2], { requiresGrad: true });
    await distAutograd.context(async (ctxId) => {
      const y = await rpc.rpcSync<Tensor>("solo", (t: Tensor) => t.mul(t).mul(3), [w]);
      expect(y.requiresGrad).toBe(true);
      await distAutograd.backward(ctxId, [y.sum()]);
      expectClose(distAutograd.getGradients(ctxId).get(w)!, [3, -6, 12]);
    });
    expect(w.grad).toBeNull();
  });

  it("does not record RPCs outside a context, nor inside noGrad", async () => {
    const w = tensor([1, 2], { dtype: "float32", requiresGrad: true });
    const out = await rpc.rpcSync<Tensor>("solo", (t: Tensor) => t.mul(2), [w]);
    expect(out.gradFn).toBeNull(); // arrives as a leaf (requiresGrad travels, the graph does not)
    await distAutograd.context(async () => {
      const { noGrad } = await import("../../sdk/index.js");
      const y = await noGrad(() => rpc.rpcSync<Tensor>("solo", (t: Tensor) => t.mul(2), [w]));
      expect(y.gradFn).toBeNull();
    });
  });

  it("runs a RemoteModule here and steps its parameters with a DistributedOptimizer", async () => {
    const rm = new RemoteModule("solo/cpu", nn.Linear, [3, 2]);
    const params = await rm.remoteParameters();
    expect(params).toHaveLength(2);
    const module = (await rm.getModuleRRef().toHere()) as InstanceType<typeof nn.Linear>;
    const before = module.weight.toArray();
    const opt = new DistributedOptimizer(optim.SGD, params, { lr: 0.5 });
    const x = tensor([[1, 2, 3]], { dtype: "float32" });
    await distAutograd.context(async (ctxId) => {
      const y = (await rm.forward(x)) as Tensor;
      await distAutograd.backward(ctxId, [y.sum()]);
      await opt.step(ctxId);
    });
    // d(sum(xW^T + b))/dW = one row of x per output
    expectClose(
      module.weight.toArray(),
      before.map((v, i) => v - 0.5 * [1, 2, 3][i % 3]!),
    );
    expect(module.weight.grad).toBeNull();
  });

  it("releases its part of the graph with the context after a backward without retainGraph, not with one", async () => {
    const keep = (t: Tensor): Tensor => {
      const out = t.mul(2);
      (globalThis as { __kept?: Tensor }).__kept = out;
      return out;
    };
    const w = tensor([1, 2], { dtype: "float32", requiresGrad: true });
    for (const retainGraph of [false, true]) {
      await distAutograd.context(async (ctxId) => {
        const y = await rpc.rpcSync<Tensor>("solo", keep, [w]);
        await distAutograd.backward(ctxId, [y.sum()], retainGraph);
      });
      // the callee's node (here in this process) ran in the pass; the context is gone now
      const node = (globalThis as { __kept?: Tensor }).__kept!.gradFn as unknown as FunctionNode;
      const apply = () => node.apply(tensor([1, 1], { dtype: "float32" }));
      if (retainGraph) expect(apply()[0]!.toArray()).toEqual([2, 2]);
      else expect(apply).toThrow(/backward through the graph a second time/);
    }
    delete (globalThis as { __kept?: Tensor }).__kept;
  });

  it("sums a leaf's gradients over several messages, and a sum once read is never changed in place", async () => {
    const w = tensor([0.5, -1, 2], { dtype: "float32", requiresGrad: true });
    const f = (t: Tensor, k: number) => t.mul(t).mul(k);
    await distAutograd.context(async (ctxId) => {
      // two messages: two engine runs here, each accumulating into the context
      const ys = await Promise.all([2, 3].map((k) => rpc.rpcSync<Tensor>("solo", f, [w, k])));
      await distAutograd.backward(ctxId, [ys[0]!.sum().add(ys[1]!.sum())]);
      const first = distAutograd.getGradients(ctxId).get(w)!;
      expect(first.toArray()).toEqual([5, -10, 20]); // 2 * (2 + 3) * w
      const y = await rpc.rpcSync<Tensor>("solo", f, [w, 1]);
      await distAutograd.backward(ctxId, [y.sum()]);
      expect(first.toArray()).toEqual([5, -10, 20]);
      expect(distAutograd.getGradients(ctxId).get(w)!.toArray()).toEqual([6, -12, 24]);
    });
  });

  it("trains a remote TransformerBlock bit for bit as a local copy (its intermediates recycled)", async () => {
    const cfg = { nEmbd: 64, nHead: 4, blockSize: 32, dropout: 0 };
    const rm = new RemoteModule("solo/cpu", nn.TransformerBlock, [cfg]);
    const remote = (await rm.getModuleRRef().toHere()) as InstanceType<typeof nn.TransformerBlock>;
    const local = new nn.TransformerBlock(cfg);
    local.loadStateDict(remote.stateDict());
    const opt = new DistributedOptimizer(optim.SGD, await rm.remoteParameters(), { lr: 0.1 });
    const localOpt = new optim.SGD(local.parameters(), { lr: 0.1 });
    manualSeed(3);
    const xs = [0, 1, 2].map(() => randn([4, 32, 64]));
    const released = poolStats().releases;
    for (const x of xs) {
      await distAutograd.context(async (ctxId) => {
        const y = (await rm.forward(x)) as Tensor;
        await distAutograd.backward(ctxId, [y.mul(y).mean()]);
        await opt.step(ctxId);
      });
      localOpt.zeroGrad();
      const y = local.forward(x);
      y.mul(y).mean().backward();
      localOpt.step();
    }
    remote.parameters().forEach((p, i) => expect(p.toArray()).toEqual(local.parameters()[i]!.toArray()));
    expect(poolStats().releases).toBeGreaterThan(released);
  });

  it.each([
    ["Adadelta", optim.Adadelta as optim.OptimizerClass<object>, { lr: 0.5, rho: 0.8, weightDecay: 0.01 }],
    ["Adamax", optim.Adamax as optim.OptimizerClass<object>, { lr: 0.05, betas: [0.8, 0.99], weightDecay: 0.01 }],
    ["Rprop", optim.Rprop as optim.OptimizerClass<object>, { lr: 0.05, etas: [0.3, 1.5], stepSizes: [0.01, 1] }],
  ])(
    "steps optim.%s through a DistributedOptimizer as the same optimizer steps a local copy",
    async (_name, cls, options) => {
      const init = [
        [0.5, -1, 2, 0.25],
        [1.5, -0.5],
      ];
      const make = (): Tensor[] => init.map((v) => tensor(v, { dtype: "float32", requiresGrad: true }));
      const remoteParams = make();
      const localParams = make();
      const opt = new DistributedOptimizer(
        cls,
        remoteParams.map((p) => new rpc.RRef(p)),
        options,
      );
      const local = new cls(localParams, options);
      // sum((w - t)^2) over both parameters, with t changing sign so that gradients flip between steps
      const loss = (a: Tensor, b: Tensor, t: number): Tensor => a.sub(t).square().sum().add(b.sub(t).square().sum());
      for (const target of [2, -2, 2, 1]) {
        await distAutograd.context(async (ctxId) => {
          const y = await rpc.rpcSync<Tensor>("solo", loss, [remoteParams[0]!, remoteParams[1]!, target]);
          await distAutograd.backward(ctxId, [y]);
          await opt.step(ctxId);
        });
        local.zeroGrad();
        loss(localParams[0]!, localParams[1]!, target).backward();
        local.step();
        remoteParams.forEach((p, i) => expectClose(p, localParams[i]!, 1e-6, 1e-7));
      }
      remoteParams.forEach((p, i) => expect(p.toArray()).not.toEqual(init[i]));
      expect(remoteParams.map((p) => p.grad)).toEqual([null, null]);
    },
  );

  it("refuses bad arguments with typed errors that say what to do", async () => {
    class MyOpt extends optim.SGD {}
    expect(() => new DistributedOptimizer(MyOpt, [new rpc.RRef(tensor([1], { dtype: "float32" }))], { lr: 1 })).toThrow(
      /rpc\.register/,
    );
    expect(() => new DistributedOptimizer(optim.SGD, [], { lr: 1 })).toThrow(ValueError);
    expect(() => new RemoteModule("", nn.Linear, [1, 1])).toThrow(ValueError);
    await expect(
      distAutograd.backward(42, [tensor([1], { dtype: "float32", requiresGrad: true }).sum()]),
    ).rejects.toThrow(AutogradError);
  });
});
