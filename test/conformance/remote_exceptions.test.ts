/**
 * Errors raised on the callee, ported from PyTorch's rpc_test.py: test_py_raise_in_user_func,
 * test_py_raise_in_user_func_escaped_str, test_remote_with_exception, test_remote_throw,
 * test_function_not_on_callee and test_op_with_invalid_args; plus what PyTorch's RemoteException
 * carries that those tests lean on: the error's type, message and stack, errors of nested calls
 * (they keep the worker they happened on) and calls to names the callee does not know.
 * PyTorch re-raises the remote exception type; tprpc rejects with a RemoteError naming it (remoteName).
 */
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { RemoteError, type Tensor, add, ones, rpc, tensor } from "../../sdk/index.js";
import { type Group, startGroup, stopGroup, within } from "./group.js";

// NB: shipped functions run on the callee against the SDK namespace, named `tprpc` there.
declare const tprpc: typeof import("../../sdk/index.js");

const EXPECTED_ERR = "Expected error";
const EXPECTED_ERR_ESCAPE = "\nFirst line of error \n next line of error \n last line of error";

function raiseFunc(): never {
  throw new tprpc.ValueError("Expected error");
}

function raiseFuncEscape(): never {
  throw new tprpc.ValueError("\nFirst line of error \n next line of error \n last line of error");
}

function raiseOrInc(value: Tensor): Tensor {
  if (value.numel() === 2) throw new tprpc.ValueError("Expected error");
  return value.add(1);
}

/** The rejection of `p` (fails when `p` resolves). */
async function rejection(p: Promise<unknown>): Promise<RemoteError> {
  const e = await p.then(
    (v) => expect.fail(`expected a rejection, got ${String(v)}`),
    (e: unknown) => e,
  );
  expect(e).toBeInstanceOf(RemoteError);
  return e as RemoteError;
}

describe("remote exceptions", () => {
  let cluster: Group | undefined;
  beforeAll(async () => {
    cluster = await startGroup();
  }, 40_000);
  afterAll(() => stopGroup(cluster), 20_000);

  it("carries a user function's error back: type, message, worker and stack (test_py_raise_in_user_func)", async () => {
    for (const call of [rpc.rpcSync, rpc.rpcAsync]) {
      const e = await rejection(call("worker1", raiseFunc));
      expect(e.remoteName).toBe("ValueError");
      expect(e.workerName).toBe("worker1");
      expect(e.message).toContain(EXPECTED_ERR);
      expect(e.remoteStack).toMatch(/raiseFunc/);
    }
  });

  it("keeps newlines in a remote message as newlines (test_py_raise_in_user_func_escaped_str)", async () => {
    const e = await rejection(rpc.rpcAsync("worker1", raiseFuncEscape));
    expect(e.message).toContain(EXPECTED_ERR_ESCAPE);
    expect(e.message).not.toContain("\\n");
  });

  it("carries JS error types, SDK error types, a custom class's name, a code and a non-Error throw", async () => {
    const throwing = (kind: string) => {
      class MyError extends Error {
        code = "E_MINE";
        constructor(m: string) {
          super(m);
          this.name = "MyError";
        }
      }
      if (kind === "type") throw new TypeError("wrong type");
      if (kind === "range") throw new RangeError("out of range");
      if (kind === "custom") throw new MyError("mine");
      if (kind === "string") throw "a plain string";
      return null;
    };
    const cases: [string, string, RegExp][] = [
      ["type", "TypeError", /wrong type/],
      ["range", "RangeError", /out of range/],
      ["custom", "MyError", /mine/],
      ["string", "Error", /a plain string/],
    ];
    for (const [kind, name, msg] of cases) {
      const e = await rejection(rpc.rpcSync("worker2", throwing, [kind]));
      expect([e.remoteName, e.workerName]).toEqual([name, "worker2"]);
      expect(e.message).toMatch(msg);
    }
    const custom = await rejection(rpc.rpcSync("worker2", throwing, ["custom"]));
    expect((custom as RemoteError & { code?: string }).code).toBe("E_MINE");
    // an SDK builtin's own error: tensors whose shapes do not broadcast
    const shape = await rejection(rpc.rpcSync("worker2", add, [tensor([1, 2, 3]), tensor([1, 2])]));
    expect(shape.remoteName).toBe("ShapeError");
  });

  it("raises a remote() call's error at toHere, to another worker and to itself (test_remote_with_exception)", async () => {
    const e = await rejection(within(rpc.remote("worker1", raiseFunc).toHere(), 10_000, "toHere"));
    expect(e.remoteName).toBe("ValueError");
    const typeErr = () => {
      throw new TypeError("no_result() takes 0 positional arguments but 1 was given");
    };
    // NB: the owner is this worker, so toHere may hand back the error itself rather than a RemoteError
    const self = await within(rpc.remote("master", typeErr).toHere(), 10_000, "toHere").then(
      () => expect.fail("expected a rejection"),
      (err: Error) => err,
    );
    expect(self instanceof RemoteError ? self.remoteName : self.name).toBe("TypeError");
  });

  it("raises from toHere when the owner's call failed (test_remote_throw)", async () => {
    const rref = rpc.remote("worker1", raiseOrInc, [ones([2])]);
    const e = await rejection(within(rref.toHere(), 10_000, "toHere"));
    expect(e.message).toMatch(/Expected error/);
  });

  it("keeps the worker an error happened on through nested calls", async () => {
    // master -> worker1 -> worker2, which raises; worker1 does not catch
    const forward = (dst: string) => tprpc.rpc.rpcSync(dst, raiseInside, []);
    function raiseInside(): never {
      throw new tprpc.ValueError("Expected error");
    }
    rpc.setShippingScope({ raiseInside });
    try {
      const e = await rejection(rpc.rpcSync("worker1", forward, ["worker2"]));
      expect([e.remoteName, e.workerName]).toEqual(["ValueError", "worker2"]);
      expect(e.message).toMatch(/Expected error/);
      // worker1 sees a RemoteError from worker2 where it catches one
      const inspect = (dst: string) =>
        tprpc.rpc.rpcSync(dst, raiseInside, []).then(
          () => null,
          (err: RemoteError) => [err instanceof tprpc.RemoteError, err.workerName, err.remoteName],
        );
      expect(await rpc.rpcSync("worker1", inspect, ["worker2"])).toEqual([true, "worker2", "ValueError"]);
    } finally {
      rpc.setShippingScope(null);
    }
  });

  it("keeps the worker an error happened on through three levels, the middle one forwarding shipped code", async () => {
    // master -> worker1 -> worker2 -> worker3, which raises; worker1 ships `forward` (and the helper it uses) on
    function raiseInside(): never {
      throw new tprpc.ValueError("Expected error");
    }
    function forward(dst: string): Promise<unknown> {
      return tprpc.rpc.rpcSync(dst, raiseInside, []);
    }
    const twice = (a: string, b: string) => tprpc.rpc.rpcSync(a, forward, [b]);
    rpc.setShippingScope({ raiseInside, forward });
    try {
      const deep = await rejection(rpc.rpcSync("worker1", twice, ["worker2", "worker3"]));
      expect([deep.remoteName, deep.workerName]).toEqual(["ValueError", "worker3"]);
      expect(deep.message).toMatch(/Expected error/);
    } finally {
      rpc.setShippingScope(null);
    }
  });

  it("fails a function the caller has and the callee does not, naming it; the callee keeps serving (test_function_not_on_callee)", async () => {
    const fooAdd = (a: number, b: number) => a + b;
    // NB: here only, not on worker1: rpc.register would reach every agent of this process (worker1
    // included, in the in-process group), so the name goes into the master's own registry
    rpc.currentAgent()!.registry.register("conformance.fooAdd", fooAdd);
    const e = await rejection(rpc.rpcSync("worker1", fooAdd, [1, 2]));
    expect(e.workerName).toBe("worker1");
    expect(e.message).toMatch(/conformance\.fooAdd/);
    expect(await rpc.rpcSync("worker1", (a: number) => a + 1, [1])).toBe(2);
  });

  it("fails a call to a name nothing is registered under, or a module export that does not exist", async () => {
    const byName = await rejection(rpc.rpcSync("worker1", "noSuchFunction", [1]));
    expect(byName.message).toMatch(/noSuchFunction/);
    const byModule = await rejection(rpc.rpcSync("worker1", "./no/such/module.js#f", []));
    expect(byModule.message).toMatch(/no\/such\/module\.js/);
  });

  it("fails a builtin called with no arguments (test_op_with_invalid_args)", async () => {
    const e = await rejection(rpc.rpcSync("worker1", add, []));
    expect(e.workerName).toBe("worker1");
  });
});
