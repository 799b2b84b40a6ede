/**
 * What may cross, through a real worker process: arguments that cannot be sent reject the
 * call at the caller with a SerializationError and never reach the worker (its call counter
 * does not move, and the same pipe serves the next call); a Map keyed by tensors round-trips
 * through an identity call; a return value that cannot be sent rejects the caller's call
 * with a RemoteError carrying the callee's SerializationError.
 */
import type { ChildProcess } from "node:child_process";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { RemoteError, SerializationError, Tensor, rpc, tensor } from "../../sdk/index.js";
import { freePort, startWorker } from "./workers.js";

const SECRET = "wire-args-secret-0123456789";
const CALL = { timeoutMs: 10_000 };

/** Shipped to the worker: counts the calls that reached it (in the worker's own globals). */
function countCall(..._args: unknown[]): number {
  const g = globalThis as { __wireArgsCalls?: number };
  g.__wireArgsCalls = (g.__wireArgsCalls ?? 0) + 1;
  return g.__wireArgsCalls;
}

describe("arguments and return values that cannot cross, through a worker", () => {
  let child: ChildProcess | null = null;

  beforeAll(async () => {
    const port = await freePort();
    child = startWorker("w1", 1, 2, port, { secret: SECRET });
    await rpc.initRpc("master", {
      rank: 0,
      worldSize: 2,
      initMethod: `tcp://127.0.0.1:${port}`,
      secret: SECRET,
      initTimeoutMs: 20_000,
    });
  }, 30_000);

  afterAll(async () => {
    await rpc.shutdown({ graceful: false, timeoutMs: 5_000 });
    if (child && child.exitCode === null) child.kill("SIGKILL");
  });

  it("refuses a function, a Promise, a symbol and a circular object at the caller; nothing reaches the worker", async () => {
    expect(await rpc.rpcSync("w1", countCall, [1], CALL)).toBe(1);
    const circular: Record<string, unknown> = { n: 1 };
    circular.self = circular;
    const bad: [unknown, RegExp][] = [
      [{ cb: () => 1 }, /args\[1\]\.cb is a function/],
      [Promise.resolve(2), /args\[1\] is a Promise/],
      [Symbol("s"), /args\[1\] is a symbol/],
      [circular, /args\[1\]\.self refers back to args\[1\]/],
    ];
    for (const [arg, re] of bad) {
      const err = await rpc.rpcSync("w1", countCall, [tensor([1, 2]), arg], CALL).catch((e: unknown) => e);
      expect(err).toBeInstanceOf(SerializationError);
      expect((err as Error).message).toMatch(re);
    }
    // the worker saw none of them, and the pipe is still open
    expect(await rpc.rpcSync("w1", countCall, [2], CALL)).toBe(2);
  });

  it("round-trips a Map keyed by tensors through an identity call", async () => {
    const k = tensor([1, 2]);
    const m = new Map<unknown, unknown>([
      [k, "tensor key"],
      ["s", tensor([3])],
    ]);
    const back = await rpc.rpcSync<Map<unknown, unknown>>("w1", (x: unknown) => x, [m], CALL);
    expect(back).toBeInstanceOf(Map);
    const keys = [...back.keys()];
    expect(keys[0]).toBeInstanceOf(Tensor);
    expect((keys[0] as Tensor).tolist()).toEqual([1, 2]);
    expect(back.get(keys[0])).toBe("tensor key");
    expect((back.get("s") as Tensor).tolist()).toEqual([3]);
  });

  it("rejects the caller's call when the return value cannot be sent", async () => {
    const err = await rpc.rpcSync("w1", () => ({ ok: 1, cb: () => 2 }), [], CALL).catch((e: unknown) => e);
    expect(err).toBeInstanceOf(RemoteError);
    expect((err as RemoteError).remoteName).toBe("SerializationError");
    expect((err as RemoteError).workerName).toBe("w1");
    expect((err as Error).message).toMatch(/rpc return value value\.cb is a function/);
    expect(await rpc.rpcSync("w1", countCall, [3], CALL)).toBe(3);
  });
});
