/**
 * RRef conformance, ported from PyTorch's rpc_test.py (RpcTest / RpcTestCommon):
 * test_self_py_udf_remote, test_self_remote_rref_as_{rpc,self_rpc,remote,self_remote}_arg,
 * test_builtin_remote_ret, test_builtin_remote_self, test_multi_builtin_remote_ret,
 * test_py_udf_remote, test_multi_py_udf_remote, test_py_rref_args, test_py_rref_args_user_share,
 * test_py_rpc_rref_args, test_nested_remote, test_nested_rref, test_nested_rref_stress,
 * test_remote_with_exception, test_rpc_return_rref, test_rref_forward_chain, test_local_rref_no_fork,
 * test_local_value_not_on_owner, test_return_local_rrefs, test_owner_equality, test_pass_local_rrefs,
 * test_remote_same_worker, test_call_method_on_rref, test_user_rrefs_confirmed(_remote),
 * test_remote_throw, test_rref_timeout, test_owner_rref_backward, test_user_rref_backward and
 * test_use_rref_after_shutdown; from faulty_agent_rpc_test.py, the parts of
 * test_udf_remote_message_delay_timeout and test_rref_to_here_timeout that need no message
 * delaying (a slow owner stands in for a delayed message).
 *
 * Mechanics: PyTorch's module-level helpers are defined by `installHelpers` and registered under
 * their names on every process (it is shipped to each worker and run here too); JS has no kwargs,
 * so kwargs become positional arguments; JS cannot block, so "to_here()" is awaited and a value
 * made by remote() to ourselves is awaited before localValue(). PyTorch's worker0 is "master".
 */
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import * as sdk from "../../sdk/index.js";
import { RemoteError, RpcError, RpcTimeoutError, type Tensor, distAutograd, ones, rpc } from "../../sdk/index.js";
import { expectClose } from "../helpers.js";
import { type Group, startGroup, stopGroup, within, failureOf } from "./group.js";

// NB: a plain const, not the import binding: shipped sources name `tprpc`, which the callee binds to its SDK.
const tprpc = sdk;

type R<T = unknown> = rpc.RRef<T>;

/** PyTorch's module-level helpers of rpc_test.py, registered by name on the process that runs this. */
function installHelpers(): string {
  const T = tprpc;
  const plus = (x: unknown, y: unknown): unknown =>
    x instanceof T.Tensor
      ? x.add(y as Tensor)
      : y instanceof T.Tensor
        ? y.add(x as number)
        : (x as number) + (y as number);
  const workerName = (rank: number) => (rank === 0 ? "master" : `worker${rank}`);
  const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

  class MyClass {
    a: number;
    constructor(a: number) {
      this.a = a;
    }
    myInstanceMethod(b: number): number {
      return this.a + b;
    }
    incrementValue(increment: number): void {
      this.a += increment;
    }
    getValue(): number {
      return this.a;
    }
  }

  const helpers: Record<string, unknown> = {
    MyClass,
    myFunction: (a: unknown, b: unknown, c: unknown) => plus(plus(a, b), c),
    addRRefToValue: async (rref: R, value: unknown) => plus(await rref.toHere(), value),
    myRRefFunction: async (a: R, b: R) => plus(await a.toHere(), await b.toHere()),
    raiseFunc: () => {
      throw new T.ValueError("Expected error");
    },
    // NB: JS does not check arity; this one does, as Python would for an unexpected argument
    noResult: (...args: unknown[]) => {
      if (args.length > 0) throw new TypeError(`noResult() takes 0 positional arguments but ${args.length} were given`);
      return null;
    },
    raiseOrInc: (value: Tensor) => {
      if (value.numel() === 2) throw new T.ValueError("Expected error");
      return value.add(1);
    },
    nestedRemote: (dst: string) => T.rpc.remote<Tensor>(dst, T.add, [T.ones([2, 2]), 3]).toHere(),
    nestedRRef: (dst: string) => [
      T.rpc.remote(dst, T.add, [T.ones([2, 2]), 1]),
      T.rpc.remote(dst, T.add, [T.ones([2, 2]), 2]),
    ],
    rpcReturnRRef: (dst: string) => T.rpc.remote(dst, T.add, [T.ones([2, 2]), 1]),
    rrefForwardChain: (dst: number, worldSize: number, rref: R, ttl: number): unknown => {
      if (ttl > 0) {
        const next = (dst + 1) % worldSize;
        return [T.rpc.remote(workerName(dst), "rrefForwardChain", [next, worldSize, rref, ttl - 1])];
      }
      return rref.toHere();
    },
    getRRefList: (values: number[]) => values.map((a) => new T.rpc.RRef(new MyClass(a))),
    callMethodOnRRef: (method: string, rref: R<Record<string, (...a: unknown[]) => unknown>>, ...args: unknown[]) => {
      const obj = rref.localValue();
      return obj[method]!(...args) ?? null;
    },
    checkRRefConfirmed: (rref: R) => rref.confirmedByOwner(),
    mySleepFunc: async (seconds: number) => {
      await sleep(seconds * 1000);
      return T.mul(T.tensor(1), T.tensor(1));
    },
    sumOf: (x: Tensor) => x.sum(),
    identity: (x: unknown) => x,
  };
  for (const [name, value] of Object.entries(helpers)) T.rpc.register(name, value);
  return T.rpc.getWorkerInfo().name;
}

/** What RRef.backward looks like once it exists (PyTorch's RRef.backward(dist_autograd_ctx_id=-1, retain_graph=False)). */
type BackwardRRef = { backward(ctxId?: number, retainGraph?: boolean): unknown };
const backwardOf =
  (r: R) =>
  (...a: [number?, boolean?]) =>
    (r as unknown as BackwardRRef).backward(...a);

describe("RRef conformance (PyTorch rpc_test.py)", () => {
  let cluster: Group | undefined;
  const x = () => ones([2, 2]);

  beforeAll(async () => {
    cluster = await startGroup();
    installHelpers();
    await Promise.all([1, 2, 3].map((i) => rpc.rpcSync(`worker${i}`, installHelpers)));
  }, 40_000);
  afterAll(() => stopGroup(cluster), 20_000);

  it("test_self_py_udf_remote: remote() to ourselves runs a user function", async () => {
    const rref = rpc.remote<Tensor>(rpc.getWorkerInfo().name, "myFunction", [x(), 1, 3]);
    expectClose(await rref.toHere(), [5, 5, 5, 5]);
  });

  for (const [name, dst] of [
    ["test_self_remote_rref_as_rpc_arg", "worker1"],
    ["test_self_remote_rref_as_self_rpc_arg", "master"],
  ] as const)
    it(`${name}: an RRef we own, made by remote() to ourselves, as an RPC argument to ${dst}`, async () => {
      const rref = rpc.remote<Tensor>("master", "myFunction", [x(), 1, 3]);
      const fut = rpc.rpcAsync<Tensor>(dst, "addRRefToValue", [rref, x()]);
      const ret = await rpc.rpcSync<Tensor>(dst, "addRRefToValue", [rref, x().add(1)]);
      expectClose(ret, [7, 7, 7, 7]); // x + y + z + x + y
      expectClose(await fut, [6, 6, 6, 6]); // x + y + z + x
    });

  for (const [name, dst] of [
    ["test_self_remote_rref_as_remote_arg", "worker1"],
    ["test_self_remote_rref_as_self_remote_arg", "master"],
  ] as const)
    it(`${name}: an RRef we own, made by remote() to ourselves, as a remote() argument to ${dst}`, async () => {
      const rref = rpc.remote<Tensor>("master", "myFunction", [x(), 1, 3]);
      const ret = rpc.remote<Tensor>(dst, "addRRefToValue", [rref, x()]);
      expectClose(await ret.toHere(), [6, 6, 6, 6]);
    });

  it("test_builtin_remote_ret: remote() of an SDK builtin, fetched with toHere", async () => {
    const rref = rpc.remote<Tensor>("worker1", tprpc.add, [x(), x()]);
    expectClose(await rref.toHere(), [2, 2, 2, 2]);
  });

  it("test_builtin_remote_self: remote() of a builtin to ourselves; the owner reads it with localValue", async () => {
    const rref = rpc.remote<Tensor>("master", tprpc.add, [x(), x()]);
    expect(rref.isOwner()).toBe(true);
    await within(rref.toHere(), 5_000, "the value's creation"); // JS cannot block inside localValue()
    expectClose(rref.localValue(), [2, 2, 2, 2]);
  });

  it("test_multi_builtin_remote_ret / test_multi_py_udf_remote: ten remote() calls in flight at once", async () => {
    const builtin: R<Tensor>[] = [];
    const udf: R<Tensor>[] = [];
    const sizes: number[] = [];
    let n = 1;
    for (let i = 0; i < 10; i++) {
      n += i;
      sizes.push(n);
      builtin.push(rpc.remote<Tensor>("worker1", tprpc.add, [ones([n, n]), ones([n, n])]));
      udf.push(rpc.remote<Tensor>("worker1", "myFunction", [ones([n, n]), ones([n, n]), ones([n, n])]));
    }
    for (let i = 0; i < 10; i++) {
      const [b, u] = [await builtin[i]!.toHere(), await udf[i]!.toHere()];
      expect(b.shape).toEqual([sizes[i], sizes[i]]);
      expect(new Set(b.toArray())).toEqual(new Set([2]));
      expect(new Set(u.toArray())).toEqual(new Set([3]));
    }
  });

  it("test_py_udf_remote: remote() of a user function (kwargs passed positionally)", async () => {
    const rref = rpc.remote<number>("worker1", "myFunction", [1, 2, 3]);
    expect(await rref.toHere()).toBe(6);
  });

  it("test_py_rref_args / test_remote_same_worker: RRefs owned by the callee as remote() arguments", async () => {
    const a = rpc.remote("worker1", tprpc.add, [x(), 1]);
    const b = rpc.remote("worker1", tprpc.add, [x(), 2]);
    const c = rpc.remote<Tensor>("worker1", "myRRefFunction", [a, b]);
    expectClose(await c.toHere(), [5, 5, 5, 5]);
  });

  it("test_py_rref_args_user_share: RRefs owned by worker1 used by worker2 (forked user to user)", async () => {
    const a = rpc.remote("worker1", "myFunction", [x(), 1, 2]);
    const b = rpc.remote("worker1", "myFunction", [x(), 3, 4]);
    const c = rpc.remote<Tensor>("worker2", "myRRefFunction", [a, b]);
    expectClose(await c.toHere(), [12, 12, 12, 12]);
  });

  it("test_py_rpc_rref_args: RRefs as rpcSync arguments to their owner", async () => {
    const a = rpc.remote("worker1", "myFunction", [x(), 1, 2]);
    const b = rpc.remote("worker1", "myFunction", [x(), 3, 4]);
    expectClose(await rpc.rpcSync<Tensor>("worker1", "myRRefFunction", [a, b]), [12, 12, 12, 12]);
  });

  it("test_nested_remote: a remote() call that makes its own remote() and returns its value", async () => {
    const rref = rpc.remote<Tensor>("worker1", "nestedRemote", ["worker2"]);
    expectClose(await rref.toHere(), [4, 4, 4, 4]);
  });

  it("test_nested_rref: an RRef whose value holds RRefs owned by a third worker", async () => {
    const rrefOfRRefs = rpc.remote<R<Tensor>[]>("worker1", "nestedRRef", ["worker2"]);
    const rrefs = await rrefOfRRefs.toHere();
    expect(rrefs).toHaveLength(2);
    expect(rrefs.map((r) => r.ownerName())).toEqual(["worker2", "worker2"]);
    expectClose(await rrefs[0]!.toHere(), [2, 2, 2, 2]);
    expectClose(await rrefs[1]!.toHere(), [3, 3, 3, 3]);
  });

  it("test_nested_rref_stress: twenty nested RRefs in flight", async () => {
    const all = Array.from({ length: 20 }, () => rpc.remote<R<Tensor>[]>("worker1", "nestedRRef", ["worker2"]));
    for (const rrefOfRRefs of all) {
      const rrefs = await rrefOfRRefs.toHere();
      expect(rrefs).toHaveLength(2);
      expectClose(await rrefs[0]!.toHere(), [2, 2, 2, 2]);
      expectClose(await rrefs[1]!.toHere(), [3, 3, 3, 3]);
    }
  });

  it("test_remote_with_exception: the remote call's error is raised by toHere, for another worker and for ourselves", async () => {
    const err = await failureOf(() => rpc.remote("worker1", "raiseFunc").toHere());
    expect(err).toBeInstanceOf(RemoteError);
    expect((err as RemoteError).remoteName).toBe("ValueError");
    expect((err as Error).message).toMatch(/Expected error/);
    const self = await failureOf(() => rpc.remote("master", "noResult", [10]).toHere());
    expect(self).toBeInstanceOf(Error);
    const name = self instanceof RemoteError ? self.remoteName : (self as Error).name;
    expect(name).toBe("TypeError");
    expect((self as Error).message).toMatch(/takes 0 positional arguments/);
  });

  it("test_remote_throw: a failing remote() raises at toHere with the callee's message", async () => {
    const rref = rpc.remote("worker1", "raiseOrInc", [ones([2])]);
    await expect(rref.toHere()).rejects.toThrow(/Expected error/);
  });

  it("test_rpc_return_rref: an RRef returned by an RPC, owned by a third worker", async () => {
    const rref = await rpc.rpcSync<R<Tensor>>("worker1", "rpcReturnRRef", ["worker2"]);
    expect(rref.ownerName()).toBe("worker2");
    expectClose(await rref.toHere(), [2, 2, 2, 2]);
  });

  it("test_rref_forward_chain: an RRef forwarded through a chain of eight remote() calls", async () => {
    const ttl = 8;
    const n = 1;
    const rref = rpc.remote("worker1", tprpc.add, [ones([n, n]), 1]);
    // the first hop of rref_forward_chain runs here, as on PyTorch's calling rank
    let ret: unknown = [rpc.remote("worker1", "rrefForwardChain", [2, 4, rref, ttl - 1])];
    for (let i = 0; i < ttl; i++) {
      expect(ret).toHaveLength(1);
      ret = await (ret as R[])[0]!.toHere();
    }
    expectClose(ret as Tensor, [2]);
  });

  it("test_local_rref_no_fork: new RRef(v).localValue() returns v at once", () => {
    const local = new rpc.RRef(35);
    expect(local.isOwner()).toBe(true);
    expect(local.localValue()).toBe(35);
  });

  it("test_local_value_not_on_owner: localValue() on a user is refused, naming the owner", async () => {
    const rref = rpc.remote("worker1", tprpc.add, [ones([1]), ones([1])]);
    let err: unknown;
    try {
      rref.localValue();
    } catch (e) {
      err = e;
    }
    expect(err).toBeInstanceOf(RpcError);
    expect((err as Error).message).toMatch(/localValue\(\)/);
    expect((err as Error).message).toMatch(/worker1/);
    expect((err as Error).message).toMatch(/master/);
    await rref.toHere();
  });

  it("test_return_local_rrefs: RRefs made on a worker and returned; their owner uses them through localValue", async () => {
    const rrefs = await rpc.rpcSync<R[]>("worker1", "getRRefList", [[1, 2, 3]]);
    for (const r of rrefs) await rpc.rpcSync(r.owner().name, "callMethodOnRRef", ["incrementValue", r, 10]);
    const rets = await Promise.all(rrefs.map((r) => rpc.rpcSync(r.owner().name, "callMethodOnRRef", ["getValue", r])));
    expect(rets).toEqual([11, 12, 13]);
  });

  it("test_owner_equality: owner() is this worker's info for local RRefs and equal across RRefs of one owner", async () => {
    const a = new rpc.RRef(40);
    const b = new rpc.RRef(50);
    const otherA = rpc.remote("worker1", tprpc.add, [ones([1]), 1]);
    const otherB = rpc.remote("worker1", tprpc.add, [ones([1]), 1]);
    await otherA.toHere();
    await otherB.toHere();
    expect(otherA.owner()).toEqual(otherB.owner());
    expect(a.owner()).not.toEqual(otherA.owner());
    expect(a.owner()).toEqual(b.owner());
    expect(a.owner()).toEqual(rpc.getWorkerInfo());
    expect(otherA.owner()).toEqual(rpc.getWorkerInfo("worker1"));
    // PyTorch keys a dict by WorkerInfo; JS Maps key objects by identity, so key by the id
    const byOwner = new Map<number, R>();
    byOwner.set(a.owner().id, a);
    byOwner.set(otherA.owner().id, otherA);
    expect(byOwner.get(b.owner().id)).toBe(a);
    expect(byOwner.get(otherB.owner().id)).toBe(otherA);
    expect(byOwner.size).toBe(2);
  });

  it("test_pass_local_rrefs: a local RRef as rpcSync, rpcAsync and remote() argument", async () => {
    const rref = new rpc.RRef(40);
    expect(await rpc.rpcSync("worker1", "addRRefToValue", [rref, 50])).toBe(90);
    expect(await rpc.rpcAsync("worker1", "addRRefToValue", [rref, 50])).toBe(90);
    expect(await rpc.remote("worker1", "addRRefToValue", [rref, 50]).toHere()).toBe(90);
  });

  it("test_call_method_on_rref: methods called on the owner through rref.owner() and localValue", async () => {
    const vals = [10, 2, 5, 7];
    const rref = rpc.remote("worker1", "MyClass", [vals[0]]);
    await rpc.rpcSync(rref.owner().name, "callMethodOnRRef", ["incrementValue", rref, vals[1]]);
    await rpc.rpcAsync(rref.owner().name, "callMethodOnRRef", ["incrementValue", rref, vals[2]]);
    await rpc.remote(rref.owner().name, "callMethodOnRRef", ["incrementValue", rref, vals[3]]).toHere();
    const result = await rpc.rpcSync("worker1", "callMethodOnRRef", ["getValue", rref]);
    expect(result).toBe(24);
  });

  it("test_user_rrefs_confirmed: a user RRef forked to another user is confirmed by the owner when the callee runs", async () => {
    const rref = rpc.remote("worker2", tprpc.add, [tprpc.zeros([2, 2]), 1]);
    expect(await rpc.rpcSync("worker1", "checkRRefConfirmed", [rref])).toBe(true);
  });

  it("test_user_rrefs_confirmed_remote: the same, the check run by remote()", async () => {
    const rref = rpc.remote("worker2", tprpc.add, [tprpc.zeros([2, 2]), 1]);
    expect(await rpc.remote("worker1", "checkRRefConfirmed", [rref]).toHere()).toBe(true);
  });

  it("test_rref_timeout: remote() that runs out of time fails toHere and later uses with RpcTimeoutError", async () => {
    const rref = rpc.remote("worker1", "mySleepFunc", [1], { timeoutMs: 10 });
    const err = await failureOf(() => within(rref.toHere(), 5_000, "toHere"));
    expect(err).toBeInstanceOf(RpcTimeoutError);
    const asArg = await failureOf(() => within(rpc.rpcSync("worker2", "addRRefToValue", [rref, 1]), 5_000, "rpcSync"));
    expect(asArg).toBeInstanceOf(RpcTimeoutError);
  });

  it("test_rref_to_here_timeout (faulty agent, with a slow owner): toHere(timeoutMs) times out, a later toHere gets the value", async () => {
    const rref = rpc.remote<Tensor>("worker1", "mySleepFunc", [0.5]);
    const err = await failureOf(() => rref.toHere(10));
    expect(err).toBeInstanceOf(RpcTimeoutError);
    expectClose(await within(rref.toHere(), 5_000, "toHere"), [1]);
  });

  it("test_owner_rref_backward: RRef.backward on an owner RRef, locally and in a distributed autograd context", async () => {
    tprpc.manualSeed(0);
    const t1 = tprpc.rand([10, 10], { requiresGrad: true });
    const twos = new Array(100).fill(2);
    await backwardOf(new rpc.RRef(t1.sum().add(t1.sum())))();
    expectClose(t1.grad!, twos);

    await distAutograd.context(async (ctxId) => {
      const t2 = await rpc.rpcSync<Tensor>("worker1", tprpc.add, [t1, t1]);
      await backwardOf(new rpc.RRef(t2.sum()))(ctxId);
      expectClose(distAutograd.getGradients(ctxId).get(t1)!, twos);
    });
    await distAutograd.context(async (ctxId) => {
      const t2 = await rpc.rpcSync<Tensor>("worker1", tprpc.add, [t1, t1]);
      const rref = new rpc.RRef(t2.sum());
      await backwardOf(rref)(ctxId, true);
      await backwardOf(rref)(ctxId);
      expectClose(distAutograd.getGradients(ctxId).get(t1)!, new Array(100).fill(4));
    });

    expect(await failureOf(() => backwardOf(new rpc.RRef(tprpc.rand([10])))())).toBeInstanceOf(Error);
    expect(await failureOf(() => backwardOf(new rpc.RRef(tprpc.rand([10], { requiresGrad: true })))())).toBeInstanceOf(
      Error,
    );
    const noCtx = await failureOf(() => backwardOf(new rpc.RRef(tprpc.rand([10], { requiresGrad: true }).sum()))(100));
    expect((noCtx as Error).message).toMatch(/Could not find autograd context with id:? 100/);
    expect(await failureOf(() => backwardOf(new rpc.RRef("foo"))())).toBeInstanceOf(Error);
  });

  it("test_user_rref_backward: RRef.backward on a user RRef needs a context id", async () => {
    tprpc.manualSeed(1);
    const t = tprpc.rand([10], { requiresGrad: true });
    await distAutograd.context(async (ctxId) => {
      const rref = rpc.remote("worker1", "sumOf", [t]);
      await backwardOf(rref)(ctxId, true);
      await backwardOf(rref)(ctxId);
      expectClose(distAutograd.getGradients(ctxId).get(t)!, new Array(10).fill(2));
    });
    await distAutograd.context(async (ctxId) => {
      const rref = rpc.remote("worker1", "identity", ["foo"]);
      expect(await failureOf(() => backwardOf(rref)(ctxId))).toBeInstanceOf(Error);
      expect(await failureOf(() => backwardOf(rref)())).toBeInstanceOf(Error);
    });
  });

  // NB: last: it shuts RPC down (afterAll then only reaps the workers)
  it("test_use_rref_after_shutdown: a user RRef cannot be used after a graceful shutdown", async () => {
    const rref = rpc.remote<Tensor>("worker1", tprpc.add, [ones([2, 2]), ones([2, 2])]);
    await within(rpc.shutdown({ graceful: true, timeoutMs: 10_000 }), 15_000, "shutdown");
    await expect(rref.toHere()).rejects.toThrow(RpcError);
  });
});
