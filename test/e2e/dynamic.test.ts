/**
 * Dynamic membership end to end: the master starts a group without a
 * worldSize; workers (real `tprpc worker` processes without --world-size)
 * join later, everyone learns of joins and leaves, a worker that leaves with
 * SIGTERM and one that dies with SIGKILL both stop being members, and a call
 * pending on the dying one fails with WorkerUnavailableError at once.
 */
import type { ChildProcess } from "node:child_process";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { WorkerUnavailableError, rpc } from "../../sdk/index.js";
import { freePort, startWorker } from "./workers.js";

const SECRET = "dynamic-secret-0123456789";
const add = (a: number, b: number) => a + b;

// Shipped functions run on the callee, where the SDK namespace is in scope as `tprpc`.
declare const tprpc: typeof import("../../sdk/index.js");

/** Resolves with the next worker event matching `name`, or rejects after `ms`. */
function next(on: (cb: (w: rpc.WorkerInfo) => void) => () => void, name: string, ms: number): Promise<rpc.WorkerInfo> {
  return new Promise((resolve, reject) => {
    const t = setTimeout(() => {
      off();
      reject(new Error(`no event for "${name}" within ${ms} ms`));
    }, ms);
    const off = on((w) => {
      if (w.name !== name) return;
      clearTimeout(t);
      off();
      resolve(w);
    });
  });
}

describe("dynamic membership", () => {
  const children: ChildProcess[] = [];
  let port = 0;

  beforeAll(async () => {
    port = await freePort();
    await rpc.initRpc("master", { rank: 0, initMethod: `tcp://127.0.0.1:${port}`, secret: SECRET });
  }, 20_000);

  afterAll(async () => {
    await rpc.shutdown({ graceful: false, timeoutMs: 5_000 });
    for (const c of children) if (c.exitCode === null && c.signalCode === null) c.kill("SIGKILL");
  });

  it("starts with the master alone", () => {
    expect(rpc.workers().map((w) => w.name)).toEqual(["master"]);
  });

  it("sees workers join, calls them, and they see each other", async () => {
    const joined1 = next(rpc.onWorkerJoin, "worker1", 20_000);
    children.push(startWorker("worker1", 1, undefined, port, { secret: SECRET }));
    expect((await joined1).id).toBe(1);
    expect(await rpc.rpcSync("worker1", add, [2, 3])).toBe(5);

    const joined2 = next(rpc.onWorkerJoin, "worker2", 20_000);
    children.push(startWorker("worker2", 2, undefined, port, { secret: SECRET }));
    await joined2;
    expect(rpc.workers().map((w) => w.name)).toEqual(["master", "worker1", "worker2"]);
    // worker2 joined after worker1 and still knows it, and can call it
    const seen = await rpc.rpcSync<string[]>("worker2", () => tprpc.rpc.workers().map((w) => w.name));
    expect(seen).toEqual(["master", "worker1", "worker2"]);
    const viaWorker1 = await rpc.rpcSync("worker2", async () =>
      tprpc.rpc.rpcSync("worker1", (a: number, b: number) => a + b, [10, 20]),
    );
    expect(viaWorker1).toBe(30);
    // and worker1, which joined first, learned of worker2
    expect(await rpc.rpcSync<string[]>("worker1", () => tprpc.rpc.workers().map((w) => w.name))).toEqual([
      "master",
      "worker1",
      "worker2",
    ]);
  }, 60_000);

  it("a worker that leaves (SIGTERM) is no longer a member, for the master and for the others", async () => {
    const left = next(rpc.onWorkerLeave, "worker1", 20_000);
    children[0]!.kill("SIGTERM");
    await left;
    expect(rpc.workers().map((w) => w.name)).toEqual(["master", "worker2"]);
    await expect(rpc.rpcSync("worker1", add, [1, 1])).rejects.toBeInstanceOf(WorkerUnavailableError);
    // worker2 heard it too (its own membership)
    const deadline = Date.now() + 10_000;
    let others: string[] = [];
    while (Date.now() < deadline) {
      others = await rpc.rpcSync<string[]>("worker2", () => tprpc.rpc.workers().map((w) => w.name));
      if (!others.includes("worker1")) break;
      await new Promise((r) => setTimeout(r, 50));
    }
    expect(others).toEqual(["master", "worker2"]);
  }, 30_000);

  it("a worker that dies (SIGKILL) mid-call fails the call with WorkerUnavailableError and leaves the group", async () => {
    const slow = rpc.rpcSync("worker2", () => new Promise((r) => setTimeout(r, 60_000)), [], { timeoutMs: 0 });
    const settled = slow.then(
      () => null,
      (e: Error) => e,
    );
    await new Promise((r) => setTimeout(r, 200)); // the call is in flight on worker2
    const left = next(rpc.onWorkerLeave, "worker2", 10_000);
    const t0 = Date.now();
    children[1]!.kill("SIGKILL");
    const err = await settled;
    expect(err).toBeInstanceOf(WorkerUnavailableError);
    expect(Date.now() - t0).toBeLessThan(2_000);
    await left;
    expect(rpc.workers().map((w) => w.name)).toEqual(["master"]);
  }, 30_000);

  it("a worker can rejoin under a freed name and rank", async () => {
    const joined = next(rpc.onWorkerJoin, "worker1", 20_000);
    children.push(startWorker("worker1", 1, undefined, port, { secret: SECRET }));
    await joined;
    expect(await rpc.rpcSync("worker1", add, [4, 4])).toBe(8);
  }, 30_000);
});
