/**
 * Elastic membership under distributed autograd and RRefs, with real processes: a dynamic group
 * (master + worker1..worker4, joined after the master started) trains four parameter shards, one
 * per worker, each held by an RRef the master made with remote() and stepped by its own
 * DistributedOptimizer; every step runs one distributed autograd context per shard, concurrently.
 * Mid-run worker3 is SIGKILLed between its context's forward and backward:
 * - only the contexts involving worker3 fail, with WorkerUnavailableError (its own and one that also
 *   spans worker2); the other three of the step complete;
 * - worker3's shard RRef fails on use with WorkerUnavailableError, the others keep working;
 * - worker1, which owned a value whose only user was worker3, drops it (no count held for a dead user),
 *   and worker2 drops worker3's fork of a value it sent there as owner (it records whom it sent it to);
 * - a replacement worker3 joins under the same name, the master re-creates the shard there on
 *   onWorkerJoin, its very next step works, and the loop finishes with every shard's loss falling;
 * - worker4 then leaves gracefully (SIGTERM): its RRef fails typed, the other shards step on;
 * - no distributed autograd context is left on any live worker.
 */
import type { ChildProcess } from "node:child_process";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import {
  DistributedOptimizer,
  type Tensor,
  WorkerUnavailableError,
  distAutograd,
  optim,
  rpc,
  tensor,
} from "../../sdk/index.js";
import type { Agent } from "../../sdk/rpc/agent.js";
import { within } from "../dist_autograd/group.js";
import { settled } from "../helpers.js";
import { freePort, startWorker } from "./workers.js";

// Shipped functions run on the callee, where the SDK namespace is in scope as `tprpc`.
declare const tprpc: typeof import("../../sdk/index.js");

const SECRET = "elastic-autograd-secret-0123456789";
const NAMES = ["worker1", "worker2", "worker3", "worker4"];
const KILL_STEP = 6;
const STEPS = 16;

/** Resolves with the next worker event for `name`, or rejects after `ms`. */
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

/** A shard's initial parameter, made on its owner (a leaf that requires grad); seeded. */
const makeShard = (seed: number) =>
  tprpc.tensor(Array.from({ length: 4 }, (_, k) => (((seed * 7 + k * 3) % 10) - 5) / 5)).requiresGrad_(true);
/** The shard's forward on its owner: w * x. */
const forward = (w: rpc.RRef<Tensor>, x: Tensor) => w.localValue().mul(x);

interface Shard {
  rref: rpc.RRef<Tensor>;
  opt: DistributedOptimizer;
}

describe("elastic membership with distributed autograd and RRefs", () => {
  const children = new Map<string, ChildProcess>();
  const shards = new Map<string, Shard>();
  let port = 0;
  const xs = NAMES.map((_, i) => tensor([0.5 + 0.1 * i, 1.0, 1.5 - 0.1 * i, 0.8]));
  const targets = NAMES.map((_, i) => tensor([1, -1, 0.5, 2 - i * 0.5]).mul(xs[i]!));

  const spawn = (name: string) =>
    children.set(name, startWorker(name, NAMES.indexOf(name) + 1, undefined, port, { secret: SECRET }));
  const newShard = (name: string): Shard => {
    const rref = rpc.remote<Tensor>(name, makeShard, [NAMES.indexOf(name) + 1]);
    return { rref, opt: new DistributedOptimizer(optim.SGD, [rref], { lr: 0.1 }) };
  };

  beforeAll(async () => {
    port = await freePort();
    await rpc.initRpc("master", { rank: 0, initMethod: `tcp://127.0.0.1:${port}`, secret: SECRET });
    const joined = NAMES.map((n) => next(rpc.onWorkerJoin, n, 30_000));
    for (const n of NAMES) spawn(n);
    await Promise.all(joined);
  }, 60_000);

  afterAll(async () => {
    await rpc.shutdown({ graceful: false, timeoutMs: 5_000 });
    for (const c of children.values()) if (c.exitCode === null && c.signalCode === null) c.kill("SIGKILL");
  });

  it("keeps training while worker3 is killed and a replacement joins", async () => {
    // the master re-creates a shard on every worker that joins (the replacement included)
    const offJoin = rpc.onWorkerJoin((w) => {
      if (NAMES.includes(w.name)) shards.set(w.name, newShard(w.name));
    });
    for (const n of NAMES) shards.set(n, newShard(n));
    // every shard and its optimizer exist on their owners (setLr runs after the optimizer's creation)
    await within(Promise.all([...shards.values()].map((s) => s.opt.setLr(0.1))), 10_000, "shards");

    // worker3 makes the only user of a value owned by worker1, and keeps it
    const owned0 = await rpc.rpcSync<number>("worker1", () => tprpc.rpc.ownedRRefCount());
    await rpc.rpcSync("worker3", async () => {
      const r = tprpc.rpc.remote("worker1", () => tprpc.ones([1 << 10]));
      await r.toHere();
      (globalThis as { kept?: unknown }).kept = r;
      return null;
    });
    expect(await rpc.rpcSync<number>("worker1", () => tprpc.rpc.ownedRRefCount())).toBe(owned0 + 1);
    // and keeps an RRef that worker2 owns and sent it itself (an owner fork: the owner records worker3 as its holder)
    const sentId = await rpc.rpcSync<string>("worker3", async () => {
      const r = await tprpc.rpc.rpcSync<rpc.RRef<Tensor>>("worker2", () => new tprpc.rpc.RRef(tprpc.ones([4])));
      (globalThis as { kept2?: unknown }).kept2 = r;
      return r.rrefId;
    });
    const holdersOn2 = (id: string) =>
      rpc.rpcSync<string[]>("worker2", (i: string) => (tprpc.rpc.currentAgent() as Agent).rrefs.holdersOf(i), [id]);
    expect(await holdersOn2(sentId)).toContain("worker3");
    // worker1 keeps a user RRef of worker3's shard (the master's is the other user)
    await rpc.rpcSync("worker1", (r: rpc.RRef<Tensor>) => ((globalThis as { shard3?: unknown }).shard3 = r) && null, [
      shards.get("worker3")!.rref,
    ]);

    const losses = new Map<string, number[]>(NAMES.map((n) => [n, []]));
    const failures: [number, string, unknown][] = [];
    let killed: Promise<rpc.WorkerInfo> | null = null;
    let deadShard: Shard | null = null;

    // at the kill step, one more context spans worker2 and worker3: it fails too (worker3 is in it),
    // and worker2 keeps no share of it
    let forwardedMixed!: () => void;
    const mixedForwarded = new Promise<void>((r) => (forwardedMixed = r));
    const mixedStep = () =>
      distAutograd.context(async (ctxId) => {
        const [a, b] = await Promise.all(
          ["worker2", "worker3"].map((n) =>
            rpc.rpcSync<Tensor>(n, forward, [shards.get(n)!.rref, xs[NAMES.indexOf(n)]!], { timeoutMs: 10_000 }),
          ),
        );
        forwardedMixed();
        await within(worker3Left, 10_000, "worker3's leave");
        await within(distAutograd.backward(ctxId, [a!.add(b!).sum()]), 10_000, "backward of the mixed context");
      });
    let leftNow!: () => void;
    const worker3Left = new Promise<void>((r) => (leftNow = r));

    const stepShard = async (step: number, name: string): Promise<void> => {
      const i = NAMES.indexOf(name);
      const shard = shards.get(name)!;
      await distAutograd.context(async (ctxId) => {
        const y = await rpc.rpcSync<Tensor>(name, forward, [shard.rref, xs[i]!], { timeoutMs: 10_000 });
        const loss = y.sub(targets[i]!).pow(2).sum();
        if (step === KILL_STEP && name === "worker3") {
          await within(mixedForwarded, 10_000, "the mixed context's forward");
          // killed between forward and backward: its part of this context is gone
          deadShard = shard;
          killed = next(rpc.onWorkerLeave, "worker3", 10_000);
          children.get("worker3")!.kill("SIGKILL");
        }
        await within(distAutograd.backward(ctxId, [loss]), 10_000, `backward of ${name}`);
        await within(shard.opt.step(ctxId), 10_000, `optimizer step of ${name}`);
        losses.get(name)!.push(loss.item());
      });
    };

    let replaced = false;
    for (let step = 0; step < STEPS; step++) {
      const live = NAMES.filter((n) => rpc.workers().some((w) => w.name === n));
      const mixed =
        step === KILL_STEP
          ? mixedStep().then(
              () => null,
              (e: unknown) => e,
            )
          : null;
      const outs = await Promise.allSettled(live.map((n) => stepShard(step, n)));
      outs.forEach((o, k) => {
        if (o.status === "rejected") failures.push([step, live[k]!, o.reason]);
      });
      if (step === KILL_STEP) {
        await killed;
        leftNow();
        expect(await within(mixed!, 10_000, "the mixed context")).toBeInstanceOf(WorkerUnavailableError);
        // (b) the dead worker's RRef fails with a typed error; the others keep working
        await expect(within(deadShard!.rref.toHere(), 5_000, "toHere of a dead owner")).rejects.toBeInstanceOf(
          WorkerUnavailableError,
        );
        for (const n of ["worker1", "worker2", "worker4"])
          expect((await within(shards.get(n)!.rref.toHere(), 5_000, `toHere ${n}`)).shape).toEqual([4]);
        // worker1 no longer holds a value for its dead user
        expect(await rpc.rpcSync<number>("worker1", () => tprpc.rpc.ownedRRefCount())).toBe(owned0);
        // and worker2 no longer counts worker3 among the holders of the value it sent there
        expect(await holdersOn2(sentId)).not.toContain("worker3");
        // worker1's user RRef of the dead worker's shard fails on use with the same typed error
        const onWorker1 = await rpc.rpcSync<string>("worker1", async () => {
          const r = (globalThis as { shard3?: rpc.RRef<Tensor> }).shard3!;
          return r.toHere(5_000).then(
            () => "resolved",
            (e: Error) => `${e.constructor.name}: ${e.message}`,
          );
        });
        expect(onWorker1).toMatch(/^WorkerUnavailableError: .*worker3/);
        // (c) a replacement joins under the same name; the master re-creates its shard on join
        const joined = next(rpc.onWorkerJoin, "worker3", 30_000);
        spawn("worker3");
        await joined;
        replaced = true;
      }
    }
    offJoin();
    expect(replaced).toBe(true);

    // (a) exactly one context failed: worker3's at the kill step, with WorkerUnavailableError
    expect(failures.map(([s, n]) => [s, n])).toEqual([[KILL_STEP, "worker3"]]);
    const err = failures[0]![2] as Error;
    expect(err).toBeInstanceOf(WorkerUnavailableError);
    expect((err as WorkerUnavailableError).message).toMatch(/worker3/);
    // every survivor ran every step; the replacement ran every step after it joined
    for (const n of ["worker1", "worker2", "worker4"]) expect(losses.get(n)!.length).toBe(STEPS);
    const l3 = losses.get("worker3")!;
    expect(l3.length).toBe(KILL_STEP + STEPS - KILL_STEP - 1);
    // the loss keeps falling: for each survivor, and for the replacement since it joined
    for (const n of ["worker1", "worker2", "worker4"]) {
      const l = losses.get(n)!;
      expect(l[STEPS - 1]!).toBeLessThan(l[KILL_STEP]! * 0.5);
      expect(l[KILL_STEP]!).toBeLessThan(l[0]!);
    }
    const after = l3.slice(KILL_STEP);
    expect(after[after.length - 1]!).toBeLessThan(after[0]! * 0.5);

    // a graceful leave (SIGTERM) of worker4: its RRef fails typed, the others step on
    const left4 = next(rpc.onWorkerLeave, "worker4", 20_000);
    children.get("worker4")!.kill("SIGTERM");
    await left4;
    await expect(within(shards.get("worker4")!.rref.toHere(), 5_000, "toHere of worker4")).rejects.toBeInstanceOf(
      WorkerUnavailableError,
    );
    await Promise.all(["worker1", "worker2", "worker3"].map((n) => stepShard(STEPS, n)));

    // no context is left anywhere
    expect(distAutograd.contextCount()).toBe(0);
    // NB: a context's release reaches its peers after distAutograd.context() returned (it is not awaited)
    for (const n of ["worker1", "worker2", "worker3"]) {
      const count = () => rpc.rpcSync<number>(n, () => tprpc.distAutograd.contextCount(), [], { timeoutMs: 5_000 });
      expect(await settled(count, 0)).toBe(0);
    }
  }, 120_000);
});
