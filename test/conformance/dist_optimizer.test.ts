/**
 * DistributedOptimizer conformance, ported from PyTorch's dist_optimizer_test.py
 * (DistOptimizerTest): test_dist_optim (Adagrad, Adam with amsgrad, AdamW with amsgrad, SGD, SGD
 * with nesterov momentum and weight decay, RMSprop, and Adadelta, Adamax, Rprop, which tprpc does
 * not have yet), test_dist_optim_none_grads (SGD, RMSprop, Rprop, Adadelta),
 * test_dist_optim_exception and test_dist_optim_exception_on_constructor.
 *
 * Mechanics: MyModule and the failing optimizers are defined by `installHelpers` and registered
 * under their names on every process (DistributedOptimizer finds a user optimizer class by its
 * registered name). The parameters' RRefs come from rref.remote().getW() and the forward calls go
 * through rref.rpcAsync(), as test_dist_optim_none_grads does (test_dist_optim's remote_method /
 * rpc_async_method helpers do the same through local_value()). kwargs become an options object.
 * JS constructors cannot wait for the owners, so an optimizer that fails in its constructor
 * makes the first step() reject instead of the DistributedOptimizer constructor.
 */
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import * as sdk from "../../sdk/index.js";
import { DistributedOptimizer, type Tensor, distAutograd, rpc } from "../../sdk/index.js";
import { expectClose } from "../helpers.js";
import { type Group, startGroup, stopGroup, within } from "./group.js";

// NB: a plain const, not the import binding: shipped sources name `tprpc`, which the callee binds to its SDK.
const tprpc = sdk;

type Options = Record<string, unknown>;
type OptimizerCtor = new (params: Tensor[], options?: Options) => { step(): unknown };
interface MyModuleLike {
  w: Tensor;
  forward(t1: Tensor): Tensor;
  getW(): Tensor;
}

/** MyModule, FailingOptimizer and OptimizerFailingOnConstructor, registered by name where this runs. */
function installHelpers(): string {
  const T = tprpc;
  class MyModule {
    w: Tensor;
    constructor(requiresGrad = true) {
      // a generator of its own, so every MyModule starts from the same weights
      const g = new T.Generator(0);
      this.w = T.rand([3, 3], { requiresGrad, generator: g });
    }
    forward(t1: Tensor): Tensor {
      return T.mm(this.w, t1);
    }
    getW(): Tensor {
      return this.w;
    }
  }
  class FailingOptimizer extends T.optim.Optimizer {
    constructor(params: Tensor[]) {
      super(params, {});
    }
    protected update(): void {
      throw new T.ValueError("Error running optimizer.");
    }
  }
  class OptimizerFailingOnConstructor extends T.optim.Optimizer {
    constructor(params: Tensor[]) {
      super(params, {});
      throw new T.ValueError("Error creating optimizer.");
    }
    protected update(): void {
      throw new T.NotImplementedError("never stepped");
    }
  }
  const helpers: Record<string, unknown> = { MyModule, FailingOptimizer, OptimizerFailingOnConstructor };
  for (const [name, value] of Object.entries(helpers)) T.rpc.register(name, value);
  (globalThis as Record<string, unknown>).__conformanceOptim = helpers;
  return T.rpc.getWorkerInfo().name;
}

const helper = <T>(name: string) =>
  ((globalThis as Record<string, unknown>).__conformanceOptim as Record<string, T>)[name]!;

/** tprpc.optim.<name>, failing the test with a clear message where tprpc does not have it. */
function optimizerClass(name: string): OptimizerCtor {
  const cls = (tprpc.optim as unknown as Record<string, unknown>)[name];
  if (typeof cls !== "function") throw new Error(`tprpc.optim.${name} does not exist`);
  return cls as OptimizerCtor;
}

const maxAbsDiff = (a: Tensor, b: Tensor) => a.sub(b).abs().max().item();

/**
 * _test_dist_optim_base / _test_dist_optim_none_grads: a local optimizer over two modules' weights
 * and a DistributedOptimizer over the same weights on worker1 and worker2 end in the same place.
 */
async function checkAgainstLocal(name: string, options: Options, secondRequiresGrad: boolean): Promise<void> {
  const cls = optimizerClass(name);
  const MyModule = helper<new (requiresGrad?: boolean) => MyModuleLike>("MyModule");

  // local version
  const module1 = new MyModule();
  const module2 = new MyModule(secondRequiresGrad);
  const localOptim = new cls([module1.getW(), module2.getW()], { ...options });
  const oldW1 = module1.w.clone().detach();
  const oldW2 = module2.w.clone().detach();
  const g = new tprpc.Generator(0);
  let t1 = tprpc.rand([3, 3], { requiresGrad: true, generator: g });
  let t2 = tprpc.rand([3, 3], { requiresGrad: true, generator: g });
  tprpc
    .add(module2.forward(module1.forward(t2)), t1)
    .sum()
    .backward();
  localOptim.step();

  // distributed version
  const remoteModule1 = rpc.remote<MyModuleLike>("worker1", "MyModule");
  const remoteModule2 = rpc.remote<MyModuleLike>("worker2", "MyModule", [secondRequiresGrad]);
  const remoteParam1 = remoteModule1.remote().getW();
  const remoteParam2 = remoteModule2.remote().getW();
  expectClose(await remoteParam1.toHere(), oldW1);
  expectClose(await remoteParam2.toHere(), oldW2);

  const distOptim = new DistributedOptimizer(cls as never, [remoteParam1, remoteParam2], { ...options });
  await distAutograd.context(async (ctxId) => {
    g.manualSeed(0);
    t1 = tprpc.rand([3, 3], { requiresGrad: true, generator: g });
    t2 = tprpc.rand([3, 3], { requiresGrad: true, generator: g });
    const output1 = await remoteModule1.rpcAsync().forward(t2);
    const output2 = await remoteModule2.rpcAsync().forward(output1);
    const loss = tprpc.add(output2, t1);
    await within(distAutograd.backward(ctxId, [loss.sum()]), 20_000, "backward");
    await within(distOptim.step(ctxId), 20_000, "step");

    const newW1 = await remoteModule1.rpcAsync().getW();
    const newW2 = await remoteModule2.rpcAsync().getW();
    expect(maxAbsDiff(newW1, oldW1), "the optimizer changed w1").toBeGreaterThan(0);
    if (secondRequiresGrad) expect(maxAbsDiff(newW2, oldW2), "the optimizer changed w2").toBeGreaterThan(0);
    else expect(maxAbsDiff(newW2, oldW2), "w2 (no grad) stays").toBe(0);
    expectClose(newW1, module1.getW());
    expectClose(newW2, module2.getW());
  });
}

/** Two MyModules, on worker1 and worker2, and their parameters as RRefs. */
function remoteModules(): { modules: rpc.RRef<MyModuleLike>[]; params: rpc.RRef<Tensor>[] } {
  const modules = ["worker1", "worker2"].map((w) => rpc.remote<MyModuleLike>(w, "MyModule"));
  return { modules, params: modules.map((m) => m.remote().getW()) };
}

describe("DistributedOptimizer conformance (PyTorch dist_optimizer_test.py)", () => {
  let cluster: Group | undefined;

  beforeAll(async () => {
    cluster = await startGroup();
    installHelpers();
    await Promise.all([1, 2, 3].map((i) => rpc.rpcSync(`worker${i}`, installHelpers)));
  }, 40_000);
  afterAll(() => stopGroup(cluster), 20_000);

  for (const [name, options] of [
    ["Adagrad", { lr: 0.05 }],
    ["Adam", { lr: 1e-2, amsgrad: true }],
    ["AdamW", { lr: 0.05, amsgrad: true }],
    ["SGD", { lr: 0.05 }],
    ["SGD", { lr: 1e-3, momentum: 1, weightDecay: 1, nesterov: true }],
    ["RMSprop", { lr: 0.05 }],
  ] as const)
    it(`test_dist_optim: ${name} ${JSON.stringify(options)} steps the remote weights as a local ${name} does`, () =>
      checkAgainstLocal(name, options, true));

  // NB: tprpc.optim has no Adadelta, Adamax or Rprop yet: these fail until they land
  for (const [name, options] of [
    ["Adadelta", { rho: 0.95 }],
    ["Adamax", { lr: 0.05 }],
    ["Rprop", { lr: 0.05 }],
  ] as const)
    it(`test_dist_optim: tprpc.optim.${name} ${JSON.stringify(options)} steps the remote weights as a local ${name} does`, () =>
      checkAgainstLocal(name, options, true));

  for (const [name, options] of [
    ["SGD", { lr: 0.05 }],
    ["RMSprop", { lr: 0.05 }],
    ["Rprop", { lr: 0.05 }],
    ["Adadelta", { rho: 0.95 }],
  ] as const)
    it(`test_dist_optim_none_grads: ${name} leaves a weight that requires no grad untouched`, () =>
      checkAgainstLocal(name, options, false));

  it("test_dist_optim_exception: an error raised by a remote optimizer's step rejects step()", async () => {
    const { modules, params } = remoteModules();
    const [m1, m2] = modules as [rpc.RRef<MyModuleLike>, rpc.RRef<MyModuleLike>];
    const distOptim = new DistributedOptimizer(helper<never>("FailingOptimizer"), params);
    await distAutograd.context(async (ctxId) => {
      const g = new tprpc.Generator(0);
      const t1 = tprpc.rand([3, 3], { requiresGrad: true, generator: g });
      const t2 = tprpc.rand([3, 3], { requiresGrad: true, generator: g });
      const output1 = await m1.rpcAsync().forward(t2);
      const output2 = await m2.rpcAsync().forward(output1);
      await distAutograd.backward(ctxId, [tprpc.add(output2, t1).sum()]);
      await expect(within(distOptim.step(ctxId), 20_000, "step")).rejects.toThrow(/Error running optimizer/);
    });
  });

  it("test_dist_optim_exception_on_constructor: an error raised by a remote optimizer's constructor surfaces", async () => {
    const distOptim = new DistributedOptimizer(helper<never>("OptimizerFailingOnConstructor"), remoteModules().params);
    await distAutograd.context(async (ctxId) => {
      await expect(within(distOptim.step(ctxId), 20_000, "step")).rejects.toThrow(/Error creating optimizer\./);
    });
  });
});
