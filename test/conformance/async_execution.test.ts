/**
 * Async execution, ported from PyTorch's rpc_test.py: test_async_function_raise (_async, _remote),
 * test_async_function_simple, test_async_function_with_future_ctor (_remote),
 * test_async_function_chained (_remote), test_async_function_nested (_remote),
 * test_async_static_method (_remote), test_async_class_method (_remote),
 * test_async_class_rref_proxy (_async, _remote), test_async_function_multi_chained (_async, _remote)
 * and test_async_function_multi_fanout (_async, _remote). PyTorch's @rpc.functions.async_execution is
 * what every JS target does: one that returns a Promise is awaited on the callee, which serves
 * other calls meanwhile. PyTorch's Future-returning bodies return Promises here.
 */
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { RemoteError, type Tensor, ones, rpc } from "../../sdk/index.js";
import { type Group, startGroup, stopGroup, within } from "./group.js";

// NB: shipped functions run on the callee against the SDK namespace, named `tprpc` there.
declare const tprpc: typeof import("../../sdk/index.js");

type Mode = "sync" | "async" | "remote";
const MODES: Mode[] = ["sync", "async", "remote"];

/** PyTorch's _run_func_in_mode: rpc_sync, rpc_async().wait() or remote().to_here(), bounded. */
function runInMode<T>(mode: Mode, to: string, fn: unknown, args: unknown[] = []): Promise<T> {
  const p = new Promise<T>((resolve) =>
    resolve(
      mode === "sync"
        ? rpc.rpcSync<T>(to, fn, args)
        : mode === "async"
          ? rpc.rpcAsync<T>(to, fn, args)
          : rpc.remote<T>(to, fn, args).toHere(),
    ),
  );
  return within(p, 15_000, `the ${mode} call`);
}

async function asyncRaiseFunc(): Promise<never> {
  throw new Error("Expected error");
}

function asyncAdd(to: string, x: Tensor, y: Tensor | number): Promise<Tensor> {
  return tprpc.rpc.rpcAsync<Tensor>(to, tprpc.add, [x, y]);
}

function asyncAddWithFutureCtor(to: string, x: Tensor, y: number, z: number): Promise<Tensor> {
  return new Promise((resolve, reject) => {
    tprpc.rpc
      .rpcAsync<Tensor>(to, tprpc.add, [x, y])
      .then((v) => resolve(v.add(z)))
      .catch(reject);
  });
}

function asyncAddChained(to: string, x: Tensor, y: number, z: number): Promise<Tensor> {
  return tprpc.rpc.rpcAsync<Tensor>(to, tprpc.add, [x, y]).then((v) => v.add(z));
}

function asyncAddNested(to: string, x: Tensor, y: number, z: number): Promise<Tensor> {
  return tprpc.rpc.rpcAsync<Tensor>(to, asyncAdd, [to, x, y]).then((v) => v.add(z));
}

function asyncAddChainedMulti(to: string, x: Tensor, num: number, step: number): Promise<Tensor> {
  let fut = tprpc.rpc.rpcAsync<Tensor>(to, tprpc.add, [x, 0]);
  for (let i = 0; i < num; i++) fut = fut.then((v) => v.add(step));
  return fut;
}

function asyncAddMultiFanout(to: string, x: Tensor, num: number, step: number): Promise<Tensor> {
  const futs: Promise<Tensor>[] = [];
  for (let i = 0; i < num; i++)
    futs.push(tprpc.rpc.rpcAsync<Tensor>(to, tprpc.add, i === 0 ? [x, step] : [tprpc.zerosLike(x), step]));
  return Promise.all(futs).then((vals) => vals.reduce((acc, v) => acc.add(v), tprpc.zerosLike(x)));
}

/** PyTorch's AsyncExecutionClass. */
class AsyncExecutionClass {
  static staticAsyncAdd(to: string, x: Tensor, y: number, z: number): Promise<Tensor> {
    return tprpc.rpc.rpcAsync<Tensor>(to, tprpc.add, [x, y]).then((v) => v.add(z));
  }

  // NB: PyTorch's classmethod; JS has none, and its body does not use the class: a static method
  static classAsyncAdd(to: string, x: Tensor, y: number, z: number): Promise<Tensor> {
    return new Promise((resolve, reject) => {
      tprpc.rpc
        .rpcAsync<Tensor>(to, tprpc.add, [x, y])
        .then((v) => resolve(v.add(z)))
        .catch(reject);
    });
  }

  boundAsyncAdd(to: string, x: Tensor, y: Tensor, z: Tensor): Promise<Tensor> {
    return tprpc.rpc.rpcAsync<Tensor>(to, tprpc.add, [x, y]).then((v) => v.add(z));
  }
}

const full = (n: number, v: number) => Array.from({ length: n }, () => Array.from({ length: n }, () => v));

describe("async execution", () => {
  let cluster: Group | undefined;
  beforeAll(async () => {
    cluster = await startGroup();
    // shipped functions name asyncAdd; it travels with them from here
    rpc.setShippingScope({ asyncAdd });
  }, 40_000);
  afterAll(async () => {
    rpc.setShippingScope(null);
    await stopGroup(cluster);
  }, 20_000);

  const [dst1, dst2] = ["worker1", "worker2"];

  it.each(MODES)("raises an async function's error through %s (test_async_function_raise)", async (mode) => {
    const e = await runInMode(mode, dst1, asyncRaiseFunc).then(
      () => expect.fail("resolved"),
      (err: unknown) => err,
    );
    expect(e).toBeInstanceOf(RemoteError);
    expect((e as Error).message).toMatch(/Expected error/);
    expect((e as RemoteError).workerName).toBe(dst1);
  });

  it("awaits the future an async function returns from a call to a third worker (test_async_function_simple)", async () => {
    const ret = await rpc.rpcSync<Tensor>(dst1, asyncAdd, [dst2, ones([2, 2]), 1]);
    expect(ret.tolist()).toEqual(full(2, 2));
  });

  const cases: [string, unknown, Mode[]][] = [
    [
      "a future it builds and completes in a callback (test_async_function_with_future_ctor)",
      asyncAddWithFutureCtor,
      ["sync", "remote"],
    ],
    ["a chained future (test_async_function_chained)", asyncAddChained, ["sync", "remote"]],
    ["a future of a nested async call (test_async_function_nested)", asyncAddNested, ["sync", "remote"]],
    ["a static method's future (test_async_static_method)", AsyncExecutionClass.staticAsyncAdd, ["sync", "remote"]],
    ["a class-level method's future (test_async_class_method)", AsyncExecutionClass.classAsyncAdd, ["sync", "remote"]],
  ];
  for (const [what, fn, modes] of cases)
    it.each(modes)(`returns ${what} through %s`, async (mode) => {
      const ret = await runInMode<Tensor>(mode, dst1, fn, [dst2, ones([2, 2]), 1, 2]);
      expect(ret.tolist()).toEqual(full(2, 4));
    });

  it.each(MODES)(
    "runs an instance's async method through an RRef proxy, %s (test_async_class_rref_proxy)",
    async (mode) => {
      const rref = rpc.remote<AsyncExecutionClass>(dst1, AsyncExecutionClass);
      const x = ones([2, 2]);
      const y = ones([2, 2]).add(1);
      // NB: JS static methods are not reachable through an instance; PyTorch's three methods become one, thrice
      let ret = ones([2, 2]).mul(0);
      for (let i = 0; i < 3; i++) {
        const call =
          mode === "sync"
            ? rref.rpcSync().boundAsyncAdd(dst2, x, x, y)
            : mode === "async"
              ? rref.rpcAsync().boundAsyncAdd(dst2, x, x, y)
              : rref.remote().boundAsyncAdd(dst2, x, x, y).toHere();
        ret = ret.add(await within(call, 15_000, "the proxy call"));
      }
      expect(ret.tolist()).toEqual(full(2, 3 * 4));
    },
  );

  it.each(MODES)("chains 20 callbacks on the callee, %s (test_async_function_multi_chained)", async (mode) => {
    const [num, step] = [20, 3];
    const ret = await runInMode<Tensor>(mode, dst1, asyncAddChainedMulti, [dst2, ones([2, 2]), num, step]);
    expect(ret.tolist()).toEqual(full(2, 1 + num * step));
  });

  it.each(MODES)(
    "fans out 20 calls and sums them on the callee, %s (test_async_function_multi_fanout)",
    async (mode) => {
      const [num, step] = [20, 3];
      const ret = await runInMode<Tensor>(mode, dst1, asyncAddMultiFanout, [dst2, ones([2, 2]), num, step]);
      expect(ret.tolist()).toEqual(full(2, 1 + num * step));
    },
  );

  it("chains async calls across every worker, each hop awaiting the next", async () => {
    function asyncChain(hops: string[], x: Tensor): Promise<Tensor> | Tensor {
      if (hops.length === 0) return x.add(1);
      return tprpc.rpc.rpcAsync<Tensor>(hops[0]!, asyncChain, [hops.slice(1), x.add(1)]);
    }
    const ret = await within(
      rpc.rpcSync<Tensor>("worker1", asyncChain, [["worker2", "worker3", "master", "worker1"], ones([2])]),
      15_000,
      "the chain",
    );
    expect(ret.tolist()).toEqual([6, 6]);
  });

  it("keeps serving other calls while an async function waits", async () => {
    type Gate = { __asyncGate?: (v: string) => void };
    const waiting = () =>
      new Promise<string>((resolve) => {
        (globalThis as Gate).__asyncGate = resolve;
      });
    const pending = rpc.rpcAsync<string>(dst1, waiting);
    // the callee answers these while `waiting` is still unresolved there
    expect(await rpc.rpcSync(dst1, (a: number) => a * 2, [21])).toBe(42);
    expect(await rpc.rpcSync(dst1, (v: string) => ((globalThis as Gate).__asyncGate!(v), true), ["done"])).toBe(true);
    expect(await within(pending, 5_000, "the waiting call")).toBe("done");
  });

  it("carries an error raised after an await, and one from a third worker, back with their worker", async () => {
    const later = async () => {
      await new Promise((r) => setTimeout(r, 20));
      throw new RangeError("late failure");
    };
    const e1 = await rpc.rpcSync(dst1, later).then(
      () => expect.fail("resolved"),
      (err: RemoteError) => err,
    );
    expect([e1.remoteName, e1.workerName]).toEqual(["RangeError", dst1]);
    // an async function returning a third worker's failing call: the error keeps that worker
    const viaThird = (to: string) => tprpc.rpc.rpcAsync(to, tprpc.add, [tprpc.ones([3]), tprpc.ones([2])]);
    const e2 = await rpc.rpcSync(dst1, viaThird, [dst2]).then(
      () => expect.fail("resolved"),
      (err: RemoteError) => err,
    );
    expect(e2).toBeInstanceOf(RemoteError);
    expect([e2.remoteName, e2.workerName]).toEqual(["ShapeError", dst2]);
  });
});
