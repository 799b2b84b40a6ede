/**
 * RRef proxies (rref.rpcSync().m(), rref.rpcAsync().m(), rref.remote().m()), ported from PyTorch's
 * rpc_test.py: test_rref_proxy_non_exist, test_rref_proxy_tensor, test_rref_proxy_tensor_self,
 * test_rref_proxy_reuse, test_rref_proxy_class, test_rref_proxy_class_self,
 * test_async_class_rref_proxy{,_async,_remote}, test_my_parameter_server (proxies called by users
 * of an RRef the master owns) and TensorPipeAgentRpcTest.test_rref_proxy_timeout.
 *
 * Mechanics: the classes are defined by `installHelpers` and registered under their names on every
 * process. JS static methods are not reachable through an instance (PyTorch's proxies reach
 * static and class methods through the object), so MyClass's static/class methods are ported as
 * instance methods that do not use `this`; async_execution methods are methods returning a Promise.
 * JS cannot block, so a remote() proxy's errors and timeouts surface at its RRef's toHere()
 * (PyTorch raises some of them when the proxy call is made). Sleeps are shortened.
 */
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import * as sdk from "../../sdk/index.js";
import { RemoteError, RpcTimeoutError, type Tensor, ones, rpc } from "../../sdk/index.js";
import { expectClose } from "../helpers.js";
import { type Group, startGroup, stopGroup, within, failureOf } from "./group.js";

// NB: a plain const, not the import binding: shipped sources name `tprpc`, which the callee binds to its SDK.
const tprpc = sdk;

type R<T = unknown> = rpc.RRef<T>;

/** MyClass of rpc_test.py, as the tests see it. */
interface MyClassLike {
  a: number | Tensor;
  myInstanceMethod(b: number): number;
  myClassMethod(d: number, e: Tensor): Tensor;
  myStaticMethod(f: number): boolean;
  incrementValue(increment: number): void;
  getValue(): number;
  mySlowMethod(t: Tensor): Promise<Tensor>;
}

/** The Tensor methods the tests call through proxies (the proxy types keep only the last overload). */
interface TensorCalls {
  size(): Promise<number[]>;
  add(other: number): Promise<Tensor>;
  view(...shape: number[]): Promise<Tensor>;
}
interface TensorRemoteCalls {
  size(): R<number[]>;
  add(other: number): R<Tensor>;
  view(...shape: number[]): R<Tensor>;
}
const syncCalls = (r: R<Tensor>) => r.rpcSync() as unknown as TensorCalls;
const asyncCalls = (r: R<Tensor>) => r.rpcAsync() as unknown as TensorCalls;
const remoteCalls = (r: R<Tensor>) => r.remote() as unknown as TensorRemoteCalls;

interface AsyncExecutionLike {
  staticAsyncAdd(to: string, x: Tensor, y: Tensor, z: Tensor): Promise<Tensor>;
  classAsyncAdd(to: string, x: Tensor, y: Tensor, z: Tensor): Promise<Tensor>;
  boundAsyncAdd(to: string, x: Tensor, y: Tensor, z: Tensor): Promise<Tensor>;
}

interface ParameterServerLike {
  average(rref: R<ParameterServerLike>, iteration: number, t: Tensor): Promise<Tensor>;
  getGradient(rref: R<ParameterServerLike>): Tensor | null;
}

/** The classes and functions of rpc_test.py these tests use, registered by name where this runs. */
function installHelpers(): string {
  const T = tprpc;
  const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

  class MyClass {
    a: number | Tensor;
    constructor(a: number | Tensor) {
      this.a = a;
    }
    myInstanceMethod(b: number): number | Tensor {
      return this.a instanceof T.Tensor ? this.a.add(b) : this.a + b;
    }
    myClassMethod(d: number, e: Tensor): Tensor {
      return e.add(d);
    }
    myStaticMethod(f: number): boolean {
      return f > 10;
    }
    incrementValue(increment: number): null {
      this.a = (this.a as number) + increment;
      return null;
    }
    getValue(): number | Tensor {
      return this.a;
    }
    async mySlowMethod(t: Tensor): Promise<Tensor> {
      await sleep(800);
      return T.add(this.a as Tensor, t);
    }
  }

  /** MyClass(a, delay=True): the object is ready only after a while. */
  const slowMyClass = async (a: number | Tensor) => {
    await sleep(800);
    return new MyClass(a);
  };

  const myFunction = (a: Tensor, b: number, c: number) => a.add(b).add(c);

  class AsyncExecutionClass {
    staticAsyncAdd(to: string, x: Tensor, y: Tensor, z: Tensor): Promise<Tensor> {
      return T.rpc.rpcAsync<Tensor>(to, T.add, [x, y]).then((v) => v.add(z));
    }
    classAsyncAdd(to: string, x: Tensor, y: Tensor, z: Tensor): Promise<Tensor> {
      return new Promise<Tensor>((resolve, reject) => {
        T.rpc.rpcAsync<Tensor>(to, T.add, [x, y]).then((v) => resolve(v.add(z)), reject);
      });
    }
    async boundAsyncAdd(to: string, x: Tensor, y: Tensor, z: Tensor): Promise<Tensor> {
      return (await T.rpc.rpcAsync<Tensor>(to, T.add, [x, y])).add(z);
    }
  }

  /** MyParameterServer: averages one gradient per trainer and iteration, answering each trainer once all sent theirs. */
  class MyParameterServer {
    iteration = 0;
    updates = 0;
    waiting: ((t: Tensor) => void)[] = [];
    total: Tensor | null = null;
    gradient: Tensor | null = null;
    constructor(readonly trainers: number) {}
    getGradient(rref: R<MyParameterServer>): Tensor | null {
      return rref.localValue().gradient;
    }
    average(rref: R<MyParameterServer>, iteration: number, t: Tensor): Promise<Tensor> {
      const self = rref.localValue();
      return new Promise<Tensor>((resolve) => {
        if (iteration > self.iteration) {
          self.iteration = iteration;
          self.updates = 0;
          self.waiting = [];
        }
        self.waiting.push(resolve);
        self.total = self.total === null ? t : self.total.add(t);
        self.updates++;
        if (self.updates === self.trainers) {
          self.gradient = self.total.div(self.trainers);
          for (const w of self.waiting) w(self.total.div(self.trainers));
        }
      });
    }
  }

  /** _trainer_func: ten local forward/backward passes, each gradient averaged by the parameter server. */
  const trainer = async (ps: R<MyParameterServer>, seed: number) => {
    const g = new T.Generator(seed);
    const m = new T.nn.Linear(10, 10);
    const mismatches: number[] = [];
    for (let i = 0; i < 10; i++) {
      const out = m.forward(T.rand([10, 10], { generator: g }));
      T.nn.functional.mseLoss(out, T.rand([10, 10], { generator: g })).backward();
      const averaged = await ps.rpcAsync().average(ps, i, m.weight.grad!);
      const psGradient = await ps.rpcSync().getGradient(ps);
      if (!psGradient || averaged.sub(psGradient).abs().max().item() !== 0) mismatches.push(i);
      m.zeroGrad();
    }
    return mismatches;
  };

  const helpers: Record<string, unknown> = {
    MyClass,
    slowMyClass,
    myFunction,
    AsyncExecutionClass,
    MyParameterServer,
    trainer,
  };
  for (const [name, value] of Object.entries(helpers)) T.rpc.register(name, value);
  (globalThis as Record<string, unknown>).__conformanceProxies = helpers;
  return T.rpc.getWorkerInfo().name;
}

describe("RRef proxies conformance (PyTorch rpc_test.py)", () => {
  let cluster: Group | undefined;

  beforeAll(async () => {
    cluster = await startGroup();
    installHelpers();
    await Promise.all([1, 2, 3].map((i) => rpc.rpcSync(`worker${i}`, installHelpers)));
  }, 40_000);
  afterAll(() => stopGroup(cluster), 20_000);

  it("test_rref_proxy_non_exist: a method the value does not have fails in all three proxies", async () => {
    const rref = rpc.remote("worker1", "myFunction", [ones([2, 2]), 1, 3]);
    type Loose = Record<string, (...a: unknown[]) => unknown>;
    const check = (e: unknown) => {
      expect(e).toBeInstanceOf(RemoteError);
      expect((e as RemoteError).remoteName).toBe("TypeError");
      expect((e as Error).message).toMatch(/nonExist/);
    };
    check(await failureOf(() => (rref.rpcSync() as unknown as Loose).nonExist!()));
    check(await failureOf(() => (rref.rpcAsync() as unknown as Loose).nonExist!()));
    check(await failureOf(() => ((rref.remote() as unknown as Loose).nonExist!() as R).toHere()));
  });

  for (const [name, dst] of [
    ["test_rref_proxy_tensor", "worker1"],
    ["test_rref_proxy_tensor_self", "master"],
  ] as const)
    it(`${name}: Tensor methods through the proxies of an RRef owned by ${dst}`, async () => {
      const rref = rpc.remote<Tensor>(dst, "myFunction", [ones([2, 2]), 1, 3]);
      expect(await syncCalls(rref).size()).toEqual([2, 2]);
      expectClose(await asyncCalls(rref).add(1), [6, 6, 6, 6]);
      const viewed = await remoteCalls(rref).view(1, 4).toHere();
      expect(viewed.shape).toEqual([1, 4]);
      expectClose(viewed, [5, 5, 5, 5]);
    });

  it("test_rref_proxy_reuse: one proxy object serves many calls", async () => {
    const rref = rpc.remote<Tensor>("worker1", "myFunction", [ones([2, 2]), 1, 3]);
    const sync = syncCalls(rref);
    const async_ = asyncCalls(rref);
    const remote = remoteCalls(rref);

    expect(await sync.size()).toEqual([2, 2]);
    expectClose(await sync.add(1), [6, 6, 6, 6]);
    expect((await sync.view(1, 4)).shape).toEqual([1, 4]);

    expect(await async_.size()).toEqual([2, 2]);
    expectClose(await async_.add(3), [8, 8, 8, 8]);
    expect((await async_.view(4, 1)).shape).toEqual([4, 1]);

    expect(await remote.size().toHere()).toEqual([2, 2]);
    expectClose(await remote.add(5).toHere(), [10, 10, 10, 10]);
    expect((await remote.view(-1).toHere()).shape).toEqual([4]);
  });

  for (const [name, dst] of [
    ["test_rref_proxy_class", "worker1"],
    ["test_rref_proxy_class_self", "master"],
  ] as const)
    it(`${name}: methods of a user class through the proxies of an RRef owned by ${dst}`, async () => {
      const rref = rpc.remote<MyClassLike>(dst, "MyClass", [7]);
      expect(await rref.rpcSync().getValue()).toBe(7);
      expect(await rref.rpcAsync().getValue()).toBe(7);
      expect(await rref.remote().getValue().toHere()).toBe(7);

      expect(await rref.rpcSync().incrementValue(1)).toBeNull();
      expect(await rref.rpcAsync().incrementValue(1)).toBeNull();
      expect(await rref.remote().incrementValue(1).toHere()).toBeNull();

      expect(await rref.rpcSync().getValue()).toBe(10);
      expect(await rref.rpcAsync().getValue()).toBe(10);
      expect(await rref.remote().getValue().toHere()).toBe(10);

      expect(await rref.rpcSync().myInstanceMethod(2)).toBe(12);
      expect(await rref.rpcAsync().myInstanceMethod(3)).toBe(13);
      expect(await rref.remote().myInstanceMethod(4).toHere()).toBe(14);

      expect(await rref.rpcSync().myStaticMethod(9)).toBe(false);
      expect(await rref.rpcAsync().myStaticMethod(10)).toBe(false);
      expect(await rref.remote().myStaticMethod(11).toHere()).toBe(true);

      expectClose(await rref.rpcSync().myClassMethod(2, tprpc.zeros([2, 2])), new Array(4).fill(2));
      expectClose(await rref.rpcAsync().myClassMethod(2, ones([3, 3])), new Array(9).fill(3));
      expectClose(
        await rref
          .remote()
          .myClassMethod(2, ones([4, 4]))
          .toHere(),
        new Array(16).fill(3),
      );
    });

  for (const mode of ["rpcSync", "rpcAsync", "remote"] as const)
    it(`test_async_class_rref_proxy (${mode}): methods that return Promises, awaited on the owner`, async () => {
      const rref = rpc.remote<AsyncExecutionLike>("worker1", "AsyncExecutionClass");
      const x = ones([2, 2]);
      const y = ones([2, 2]).add(1);
      const calls = ["staticAsyncAdd", "classAsyncAdd", "boundAsyncAdd"] as const;
      let ret = tprpc.zeros([2, 2]);
      for (const m of calls) {
        const v =
          mode === "remote"
            ? await rref.remote()[m]("worker2", x, x, y).toHere()
            : await rref[mode]()[m]("worker2", x, x, y);
        ret = ret.add(v);
      }
      expectClose(ret, new Array(4).fill(12)); // 3 * 4 * x
    });

  it("test_my_parameter_server: trainers on every worker average gradients through proxies of the master's RRef", async () => {
    const helpers = (globalThis as Record<string, unknown>).__conformanceProxies as Record<string, unknown>;
    const MyParameterServer = helpers.MyParameterServer as new (trainers: number) => ParameterServerLike;
    const ps = new rpc.RRef(new MyParameterServer(3));
    const mismatches = await within(
      Promise.all([1, 2, 3].map((i) => rpc.rpcAsync<number[]>(`worker${i}`, "trainer", [ps, i]))),
      20_000,
      "the trainers",
    );
    expect(mismatches).toEqual([[], [], []]);
  });

  for (const api of ["rpcSync", "rpcAsync", "remote"] as const)
    it(`test_rref_proxy_timeout (${api}): a proxy call past its timeout, and one on an RRef not created in time`, async () => {
      const rref = rpc.remote<MyClassLike>("worker1", "MyClass", [ones([2, 2])]);
      await rref.toHere(); // the object exists on the owner
      const slow = () =>
        api === "remote"
          ? rref
              .remote(200)
              .mySlowMethod(ones([2, 2]))
              .toHere()
          : rref[api](200).mySlowMethod(ones([2, 2]));
      expect(await failureOf(() => within(slow(), 5_000, "the slow method"))).toBeInstanceOf(RpcTimeoutError);

      // the object itself is slow to make: a call with a short timeout runs out waiting for it
      const slowRRef = rpc.remote<MyClassLike>("worker1", "slowMyClass", [ones([2, 2])]);
      const early = () =>
        api === "remote" ? slowRRef.remote(10).myInstanceMethod(1).toHere() : slowRRef[api](10).myInstanceMethod(1);
      expect(await failureOf(() => within(early(), 5_000, "the call"))).toBeInstanceOf(RpcTimeoutError);
      await within(slowRRef.toHere(), 5_000, "the slow object");
    });
});
