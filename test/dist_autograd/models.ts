/**
 * The models and worker-side functions of the distributed autograd suites,
 * mirroring scripts/gen_dist_fixtures.py. `installModels` is self-contained
 * (it only names `tprpc`, which shipped code sees on every worker) so the
 * tests ship it to each worker and run it here too: it defines the classes and
 * functions and registers them under "dist.*" everywhere, so every process
 * resolves them by name. `gen` reproduces the fixture script's data generator
 * bit for bit.
 */
import * as sdk from "../../sdk/index.js";
import type { Tensor } from "../../sdk/index.js";

// NB: a plain const, not the import binding: vitest rewrites references to import bindings, which
// would leave shipped sources naming a variable the callee does not have.
const tprpc = sdk;

/** The fixture script's gen(): element k of ((k*2654435761 + seed*97531) mod (2^31-1)) mod 20001, mapped to [-scale, scale]. */
export function gen(seed: number, shape: number[], scale: number, requiresGrad = false): Tensor {
  const n = shape.reduce((a, b) => a * b, 1);
  const out = new Float32Array(n);
  for (let k = 0; k < n; k++) {
    const h = (k * 2654435761 + seed * 97531) % 2147483647;
    out[k] = (((h % 20001) - 10000) / 10000) * scale;
  }
  const t = tprpc.tensor(out).reshape(shape);
  return requiresGrad ? t.requiresGrad_(true) : t;
}

/** Defines and registers the suites' classes and functions in this process (shipped to each worker). */
export function installModels(): string {
  const T = tprpc;
  const state = ((globalThis as Record<string, unknown>).__distTest ??= {}) as Record<string, unknown>;

  const setLinear = (l: InstanceType<typeof T.nn.Linear>, w: Tensor, b: Tensor) =>
    T.noGrad(() => {
      l.weight.copy_(w);
      l.bias!.copy_(b);
    });

  /** The paper's Block: relu(fc(rx.toHere())). */
  class Block extends T.nn.Module {
    fc: InstanceType<typeof T.nn.Linear>;
    constructor(w: Tensor, b: Tensor) {
      super();
      this.fc = new T.nn.Linear(w.shape[1]!, w.shape[0]!);
      setLinear(this.fc, w, b);
    }
    async forward(rx: { toHere(): Promise<Tensor> }): Promise<Tensor> {
      return this.fc.forward(await rx.toHere()).relu();
    }
  }

  /** One shard of the recipe's model: a Linear layer with given weights. */
  class Shard extends T.nn.Module {
    linear: InstanceType<typeof T.nn.Linear>;
    constructor(w: Tensor, b: Tensor) {
      super();
      this.linear = new T.nn.Linear(w.shape[1]!, w.shape[0]!);
      setLinear(this.linear, w, b);
    }
    forward(x: Tensor): Tensor {
      return this.linear.forward(x);
    }
  }

  /** The parameter server's model: fc2(tanh(fc1(x))). */
  class Net extends T.nn.Module {
    fc1: InstanceType<typeof T.nn.Linear>;
    fc2: InstanceType<typeof T.nn.Linear>;
    constructor(w1: Tensor, b1: Tensor, w2: Tensor, b2: Tensor) {
      super();
      this.fc1 = new T.nn.Linear(w1.shape[1]!, w1.shape[0]!);
      this.fc2 = new T.nn.Linear(w2.shape[1]!, w2.shape[0]!);
      setLinear(this.fc1, w1, b1);
      setLinear(this.fc2, w2, b2);
    }
    forward(x: Tensor): Tensor {
      return this.fc2.forward(this.fc1.forward(x).tanh());
    }
  }

  type ModuleRef = { toHere(): Promise<InstanceType<typeof T.nn.Module>> };
  const paramRRefs = async (m: ModuleRef) => (await m.toHere()).parameters().map((p) => new T.rpc.RRef(p));
  const paramsOf = async (m: ModuleRef) => (await m.toHere()).parameters().map((p) => p.toArray());

  /** A trainer of the parameter server: its RemoteModule and its own DistributedOptimizer. */
  const trainerSetup = async (moduleRRef: never, optimizer: string, lr: number) => {
    const rm = T.RemoteModule.initFromModuleRRef("worker1/cpu", moduleRRef);
    state.rm = rm;
    state.opt = new T.DistributedOptimizer(optimizer, await rm.remoteParameters(), { lr });
  };
  const trainerStep = (x: Tensor, y: Tensor) =>
    T.distAutograd.context(async (ctxId) => {
      const rm = state.rm as InstanceType<typeof T.RemoteModule>;
      const loss = T.nn.functional.mseLoss((await rm.forward(x)) as Tensor, y);
      await T.distAutograd.backward(ctxId, [loss]);
      await (state.opt as InstanceType<typeof T.DistributedOptimizer>).step(ctxId);
      return loss.item();
    });

  /** Worker-held leaves for the nested-RPC test, by name. */
  const leaf = (name: string, t?: Tensor): Tensor => {
    const leaves = (state.leaves ??= new Map()) as Map<string, Tensor>;
    if (t) leaves.set(name, t.requiresGrad_(true));
    return leaves.get(name)!;
  };
  const setLeaf = (name: string, t: Tensor) => {
    leaf(name, t);
    return null;
  };
  const leafRRef = (name: string) => new T.rpc.RRef(leaf(name));
  const leafValue = (name: string) => leaf(name).toArray();
  /** worker2's part: h * b (b a leaf here). */
  const nestedInner = (h: Tensor) => h.mul(leaf("b")).exp();
  /** worker1's part: h = tanh(x * a); z = worker2(h); z * a + h (h reaches the loss two ways). */
  const nestedOuter = async (x: Tensor, inner = "dist.nestedInner") => {
    const h = x.mul(leaf("a")).tanh();
    const z = await T.rpc.rpcSync<Tensor>("worker2", inner, [h]);
    return z.mul(leaf("a")).add(h);
  };
  /** This worker's gradients in the context for the named leaves (null when it has none). */
  const gradsOf = (ctxId: number, names: string[]) => {
    const g = T.distAutograd.getGradients(ctxId);
    return names.map((n) => g.get(leaf(n))?.toArray() ?? null);
  };
  const contextCount = () => T.distAutograd.contextCount();
  /** A slow backward step (the failure suite kills this worker while it runs). */
  const slowInner = (h: Tensor) => {
    const y = h.mul(leaf("b"));
    y.registerHook((g: Tensor) => {
      const until = Date.now() + 4000;
      while (Date.now() < until);
      return g;
    });
    return y;
  };

  /** A backward step that fails. */
  const throwingInner = (h: Tensor) => {
    const y = h.mul(leaf("b"));
    y.registerHook(() => {
      throw new RangeError("this backward step fails on purpose");
    });
    return y;
  };

  /** Opens a context here that is never released, and makes `peer` join it; resolves to its id. */
  const openContextWith = (peer: string) =>
    new Promise<number>((resolve, reject) => {
      T.distAutograd
        .context(async (id) => {
          await T.rpc.rpcSync(peer, "dist.contextCount");
          resolve(id);
          await new Promise(() => undefined);
        })
        .catch(reject);
    });

  const all: Record<string, unknown> = {
    Block,
    Shard,
    Net,
    paramRRefs,
    paramsOf,
    trainerSetup,
    trainerStep,
    setLeaf,
    nestedInner,
    nestedOuter,
    gradsOf,
    contextCount,
    slowInner,
    throwingInner,
    leafRRef,
    leafValue,
    openContextWith,
  };
  for (const [name, value] of Object.entries(all)) T.rpc.register(`dist.${name}`, value);
  return T.rpc.getWorkerInfo().name;
}
