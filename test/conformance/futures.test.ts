/**
 * Futures, ported from PyTorch's rpc_test.py: test_callback_simple, test_callback_wrong_arg_type,
 * test_callback_multi, test_callback_chain, test_callback_in_rpc, test_callback_with_ret,
 * test_callback_with_error, test_add_done_callback, test_future_in_rpc, test_future_nested_callback,
 * test_future_wait_twice, test_pickle_future, test_wait_all, test_wait_all_multiple_call,
 * test_wait_all_timeout, test_wait_all_raise_in_user_func, test_wait_all_with_exception,
 * test_wait_all_with_partial_exception, test_wait_all_exit_early_python and
 * test_wait_all_exit_early_builtin. In JS an rpcAsync future is a Promise: fut.then(cb) is
 * then(), fut.wait() is await, torch.futures.wait_all / collect_all are Promise.all, add_done_callback
 * is finally(), and a callback receives the value (or, as then's second argument, the error).
 */
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { RemoteError, RpcTimeoutError, type Tensor, add, ones, rpc } from "../../sdk/index.js";
import { type Group, startGroup, stopGroup, within, attempt } from "./group.js";

// NB: shipped functions run on the callee against the SDK namespace, named `tprpc` there.
declare const tprpc: typeof import("../../sdk/index.js");

function raiseFunc(): never {
  throw new tprpc.ValueError("Expected error");
}

const full = (n: number, v: number) => Array.from({ length: n }, () => Array.from({ length: n }, () => v));

/** The error `p` rejects with (fails when it resolves). */
async function rejection(p: Promise<unknown>): Promise<Error> {
  return p.then(
    (v) => expect.fail(`expected a rejection, got ${String(v)}`),
    (e: Error) => e,
  );
}

const isValueError = (e: Error) => e instanceof RemoteError && e.remoteName === "ValueError";

describe("futures", () => {
  let cluster: Group | undefined;
  beforeAll(async () => {
    cluster = await startGroup();
  }, 40_000);
  afterAll(() => stopGroup(cluster), 20_000);

  it("runs a callback with the value; the future keeps its value (test_callback_simple)", async () => {
    const n = 2;
    let setByCb!: (t: Tensor) => void;
    let failCb!: (e: unknown) => void;
    const setByCbValue = new Promise<Tensor>((resolve, reject) => {
      setByCb = resolve;
      failCb = reject;
    });
    const fut = rpc.rpcAsync<Tensor>("worker1", add, [ones([n, n]), ones([n, n])]);
    fut
      .then((ret) => {
        expect(ret.tolist()).toEqual(full(n, 2));
        setByCb(ret.clone().add(1));
      })
      .catch(failCb);
    expect((await fut).tolist()).toEqual(full(n, 2));
    expect((await within(setByCbValue, 5_000, "the callback")).tolist()).toEqual(full(n, 3));
    expect((await fut).tolist()).toEqual(full(n, 2));
  });

  it("rejects only the derived future when a callback throws (test_callback_wrong_arg_type)", async () => {
    const fut0 = rpc.rpcAsync<Tensor>("worker1", add, [ones([2, 2]), 1]);
    const fut1 = fut0.then((x) => (x as unknown as { notAMethod(): unknown }).notAMethod());
    const e = await rejection(fut1);
    expect(e).toBeInstanceOf(TypeError);
    expect((await fut0).tolist()).toEqual(full(2, 2));
  });

  it("runs 10 callbacks of one future, each with its own result (test_callback_multi)", async () => {
    const n = 2;
    const fut = rpc.rpcAsync<Tensor>("worker2", add, [ones([n, n]), ones([n, n])]);
    const cbFuts = Array.from({ length: 10 }, (_, idx) =>
      fut.then((ret) => {
        expect(ret.tolist()).toEqual(full(n, 2));
        return ret.add(idx);
      }),
    );
    expect((await fut).tolist()).toEqual(full(n, 2));
    const got = await Promise.all(cbFuts);
    got.forEach((t, idx) => expect(t.tolist()).toEqual(full(n, 2 + idx)));
    expect((await fut).tolist()).toEqual(full(n, 2));
  });

  it("chains 20 callbacks (test_callback_chain)", async () => {
    const n = 3;
    let fut = rpc.rpcAsync<Tensor>("worker1", add, [ones([n, n]), 1]);
    for (let i = 0; i < 20; i++) fut = fut.then((t) => t.add(1));
    expect((await fut).tolist()).toEqual(full(n, 2 + 20));
  });

  it("uses a callback inside a call, on the callee, to reach a third worker (test_callback_in_rpc)", async () => {
    const addUseFutureCb = (to: string, x: Tensor, y: number, z: number) =>
      new Promise((resolve, reject) => {
        tprpc.rpc
          .rpcAsync<Tensor>(to, tprpc.add, [x, y])
          .then((v) => resolve(v.add(z)))
          .catch(reject);
      });
    const ret = await rpc.rpcSync<Tensor>("worker1", addUseFutureCb, ["worker2", ones([2, 2]), 1, 2]);
    expect(ret.tolist()).toEqual(full(2, 4));
  });

  it("waits for a callback that makes another call and returns its future (test_callback_with_ret)", async () => {
    const dst = "worker1";
    const fut3 = rpc
      .rpcAsync<Tensor>(dst, add, [ones([2, 2]), 1])
      .then((v0) => rpc.rpcAsync<Tensor>(dst, add, [v0, 1]).then((v1) => v1.add(1)));
    expect((await fut3).tolist()).toEqual(full(2, 4));
  });

  it("hands a remote error to the callback, whose own error rejects the derived future (test_callback_with_error)", async () => {
    const fut1 = rpc.rpcAsync("worker1", raiseFunc).then(
      () => expect.fail("raiseFunc resolved"),
      (e: Error) => {
        expect(isValueError(e)).toBe(true);
        expect(e.message).toMatch(/Expected error/);
        throw new Error("Another expected error");
      },
    );
    expect((await rejection(fut1)).message).toBe("Another expected error");
  });

  it("runs a done-callback once the future completes (test_add_done_callback)", async () => {
    const n = 2;
    let setByCb = false;
    const fut = rpc.rpcAsync<Tensor>("worker3", add, [ones([n, n]), ones([n, n])]);
    const done = fut.finally(() => {
      setByCb = true;
    });
    const futThen = done.then(() => true);
    expect((await fut).tolist()).toEqual(full(n, 2));
    expect(await futThen).toBe(true);
    expect(setByCb).toBe(true);
    expect((await fut).tolist()).toEqual(full(n, 2));
  });

  it("returns a future the callee completes from a callback (test_future_in_rpc)", async () => {
    const addUseFutureSetResult = (to: string, x: Tensor, y: number, z: number) => {
      let setResult!: (v: Tensor) => void;
      let setError!: (e: unknown) => void;
      const out = new Promise<Tensor>((resolve, reject) => {
        setResult = resolve;
        setError = reject;
      });
      tprpc.rpc
        .rpcAsync<Tensor>(to, tprpc.add, [x, y])
        .then((v) => setResult(v.add(z)))
        .catch(setError);
      return out;
    };
    const ret = await rpc.rpcSync<Tensor>("worker1", addUseFutureSetResult, ["worker2", ones([2, 2]), 1, 2]);
    expect(ret.tolist()).toEqual(full(2, 4));
  });

  it("completes a future from a callback nested in a callback (test_future_nested_callback)", async () => {
    const addUseFutureNestedCb = (to: string, x: Tensor, y: number, z: number) => {
      let setResult!: (v: Tensor) => void;
      let setError!: (e: unknown) => void;
      const out = new Promise<Tensor>((resolve, reject) => {
        setResult = resolve;
        setError = reject;
      });
      tprpc.rpc
        .rpcAsync<Tensor>(to, tprpc.add, [x, y])
        .then((v1) => {
          tprpc.rpc
            .rpcAsync<Tensor>(to, tprpc.add, [v1, z])
            .then((v2) => setResult(v2))
            .catch(setError);
        })
        .catch(setError);
      return out;
    };
    const ret = await rpc.rpcSync<Tensor>("worker2", addUseFutureNestedCb, ["worker3", ones([2, 2]), 1, 2]);
    expect(ret.tolist()).toEqual(full(2, 4));
  });

  it("raises a future's error every time it is awaited, and through wait-all (test_future_wait_twice)", async () => {
    const futs = Array.from({ length: 20 }, () => rpc.rpcAsync("worker1", raiseFunc));
    expect(isValueError(await rejection(Promise.all(futs)))).toBe(true);
    for (const fut of futs) {
      const e = await rejection(fut);
      expect(isValueError(e)).toBe(true);
      expect(e.message).toMatch(/Expected error/);
    }
  });

  it("refuses a future (a Promise) as an argument, in every mode (test_pickle_future)", async () => {
    const failOnFut = (_fut: unknown) => undefined;
    const fut = new Promise<void>(() => {});
    const modes = [
      () => rpc.rpcSync("worker1", failOnFut, [fut]),
      () => rpc.rpcAsync("worker1", failOnFut, [fut]),
      () => rpc.remote("worker1", failOnFut, [fut]).toHere(),
    ];
    for (const call of modes) {
      const e = await rejection(within(attempt(call), 10_000, "the call"));
      expect(e.message).toMatch(/Promise|future/i);
    }
  });

  it("waits for every future of a batch, sync calls in between (test_wait_all, test_wait_all_multiple_call)", async () => {
    const futs: Promise<Tensor>[] = [];
    for (let i = 0; i < 20; i++) {
      futs.push(rpc.rpcAsync<Tensor>("worker1", add, [ones([i, i]), 1]));
      const res = await rpc.rpcSync<Tensor>("worker1", add, [ones([i, i]), 1]);
      expect(res.tolist()).toEqual(full(i, 2));
    }
    const all = await within(Promise.all(futs), 10_000, "wait-all");
    all.forEach((t, i) => expect(t.tolist()).toEqual(full(i, 2)));
  });

  it("raises a timeout through wait-all (test_wait_all_timeout)", async () => {
    const mySleepFunc = (ms: number) => new Promise((resolve) => setTimeout(() => resolve(1), ms));
    const futs = [rpc.rpcAsync("worker1", mySleepFunc, [1_000], { timeoutMs: 100 })];
    expect(await rejection(within(Promise.all(futs), 5_000, "wait-all"))).toBeInstanceOf(RpcTimeoutError);
  });

  it("raises the callee's error through wait-all (test_wait_all_raise_in_user_func, _with_exception, _with_partial_exception)", async () => {
    expect(isValueError(await rejection(Promise.all([rpc.rpcAsync("worker1", raiseFunc)])))).toBe(true);
    const allRaise = Array.from({ length: 10 }, () => rpc.rpcAsync("worker1", raiseFunc));
    expect(isValueError(await rejection(Promise.all(allRaise)))).toBe(true);
    await Promise.allSettled(allRaise);
    const partial: Promise<unknown>[] = Array.from({ length: 10 }, () => rpc.rpcAsync("worker1", add, [ones([2]), 1]));
    partial.push(rpc.rpcAsync("worker1", raiseFunc));
    expect(isValueError(await rejection(Promise.all(partial)))).toBe(true);
    await Promise.allSettled(partial);
  });

  describe("wait-all returns at the first error while another future is still blocked", () => {
    type Gate = { __conformanceGate?: () => void };
    const timedOutRpc = () =>
      new Promise<string>((resolve) => {
        (globalThis as Gate).__conformanceGate = () => resolve("released");
      });
    const release = () => {
      (globalThis as Gate).__conformanceGate?.();
      return true;
    };

    it("with a user function's error (test_wait_all_exit_early_python)", async () => {
      const fut1 = rpc.rpcAsync("worker1", timedOutRpc);
      const fut2 = rpc.rpcAsync("worker1", raiseFunc);
      const fut3 = rpc.rpcAsync("worker1", raiseFunc);
      expect(isValueError(await rejection(within(Promise.all([fut1, fut2, fut3]), 5_000, "wait-all")))).toBe(true);
      await Promise.allSettled([fut2, fut3]);
      expect(await rpc.rpcSync("worker1", release)).toBe(true);
      expect(await within(fut1, 5_000, "the released call")).toBe("released");
    });

    it("with a builtin's error (test_wait_all_exit_early_builtin)", async () => {
      const fut1 = rpc.rpcAsync("worker2", timedOutRpc);
      const fut2 = rpc.rpcAsync("worker2", add, [ones([10]), ones([5])]);
      const fut3 = rpc.rpcAsync("worker2", add, [ones([10]), ones([5])]);
      const e = await rejection(within(Promise.all([fut1, fut2, fut3]), 5_000, "wait-all"));
      expect((e as RemoteError).remoteName).toBe("ShapeError");
      await Promise.allSettled([fut2, fut3]);
      expect(await rpc.rpcSync("worker2", release)).toBe(true);
      expect(await within(fut1, 5_000, "the released call")).toBe("released");
    });
  });

  it("settles each of many futures in flight with its own value, in the order the callees finish", async () => {
    const delayed = (v: number, ms: number) => new Promise((resolve) => setTimeout(() => resolve(v), ms));
    const n = 15;
    // NB: one call to each worker first, so no callee compiles the function while the timed calls run
    await Promise.all([1, 2, 3].map((w) => rpc.rpcSync(`worker${w}`, delayed, [0, 0])));
    const order: number[] = [];
    const futs = Array.from({ length: n }, (_, i) =>
      rpc.rpcAsync<number>(`worker${(i % 3) + 1}`, delayed, [i, (n - i) * 40]).then((v) => {
        order.push(v);
        return v;
      }),
    );
    expect(await within(Promise.all(futs), 10_000, `${n} futures`)).toEqual(Array.from({ length: n }, (_, i) => i));
    // the first call had the longest delay and finished last; the last call, the shortest and first
    expect(order[0]).toBe(n - 1);
    expect(order[n - 1]).toBe(0);
  });
});
