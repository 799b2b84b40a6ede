/**
 * tprpc.distributed across real worker processes on 127.0.0.1 (test/conformance/group.ts): every
 * operation and reduction, at ring and direct sizes, with non-contiguous tensors, over each cpu
 * channel (pinned with TPRPC_CHANNELS; cma skipped where ptrace rules forbid it); many concurrent
 * tagged operations and any-source receives; and a peer killed in the middle of pending operations.
 * The same function runs on every rank, as a torch.distributed script does: the master runs it
 * here, the workers get it shipped.
 */
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import * as sdk from "../../sdk/index.js";
import { rpc } from "../../sdk/index.js";
import { cmaChannelContext } from "../../sdk/channel/cma/index.js";
import { type Cluster, startGroup, stopGroup, within } from "../conformance/group.js";

// NB: shipped functions run on the callee against the SDK namespace, named `tprpc` there; the master
// runs the same functions, so it gets the name too.
declare const tprpc: typeof import("../../sdk/index.js");
(globalThis as Record<string, unknown>).tprpc = sdk;

/** Runs `fn(args)` on every rank at once (the master locally); resolves to the results by rank. */
function onEveryRank<T>(cluster: Cluster, fn: (...a: never[]) => Promise<T>, args: unknown[] = []): Promise<T[]> {
  return Promise.all([
    (fn as (...a: unknown[]) => Promise<T>)(...args),
    ...cluster.workers.map((w) => rpc.rpcSync<T>(w.name, fn, args, { timeoutMs: 120_000 })),
  ]);
}

/**
 * Every operation on one rank, checked against values each rank computes for itself; returns the
 * largest error per check (0 = bit-exact). `n` elements make the ring path run (4 bytes each).
 */
async function everyOperation(n: number): Promise<Record<string, number>> {
  const d = tprpc.distributed;
  const rank = d.getRank();
  const world = d.getWorldSize();
  const inputOf = (r: number) => tprpc.arange(n).mul(0.001).add(r).sin().add(2);
  const err = (a: sdk.Tensor, b: sdk.Tensor) => a.sub(b).abs().max().item();
  const out: Record<string, number> = {};
  const ranks = Array.from({ length: world }, (_, r) => r);
  for (const op of Object.values(d.ReduceOp)) {
    const t = inputOf(rank);
    await d.allReduce(t, { op });
    let want = inputOf(0);
    for (const r of ranks.slice(1)) {
      const x = inputOf(r);
      want =
        op === "product"
          ? want.mul(x)
          : op === "max"
            ? tprpc.maximum(want, x)
            : op === "min"
              ? tprpc.minimum(want, x)
              : want.add(x);
    }
    if (op === "avg") want = want.div(world);
    out[`allReduce ${op}`] = err(t, want) / Math.max(1, want.abs().max().item());
  }
  // non-contiguous: a transposed view inside a larger tensor, reduced in place
  const rows = 8;
  const base = tprpc.zeros([Math.ceil(n / rows), rows + 2]);
  const view = base.narrow(1, 1, rows).t();
  view.copy_(tprpc.full(view.shape, rank + 1));
  await d.allReduce(view, { asyncOp: true }).wait();
  out["allReduce strided"] = err(view, tprpc.full(view.shape, (world * (world + 1)) / 2));
  out["allReduce strided, untouched border"] = base.narrow(1, 0, 1).abs().sum().item();
  // point-to-point around the ring, strided on both sides
  const next = (rank + 1) % world;
  const prev = (rank + world - 1) % world;
  const sendT = inputOf(rank).reshape([-1, 4]).t();
  const into = tprpc.zeros([4, n / 4 + 3]).narrow(1, 2, n / 4);
  const [, from] = await Promise.all([d.send(sendT, next, { tag: 9 }), d.recv(into, prev, { tag: 9 })]);
  out["send/recv"] = err(into, inputOf(prev).reshape([-1, 4]).t()) + (from === prev ? 0 : 1);
  // repeated receives into one whole tensor (over shm, landed ones are adopted and the block before given
  // back; elsewhere copied in place) and into a strided view, each checked
  const whole = tprpc.zeros([n]);
  const strided = tprpc.zeros([n, 2]).narrow(1, 1, 1).reshape([n]);
  let repeated = 0;
  for (let k = 1; k <= 6; k++) {
    const y = k % 2 ? whole : strided;
    await Promise.all([d.send(inputOf(rank).mul(k), next, { tag: 10 }), d.recv(y, prev, { tag: 10 })]);
    repeated = Math.max(repeated, err(y, inputOf(prev).mul(k)));
  }
  out["send/recv repeated"] = repeated;
  // broadcast from the last rank, allGather, reduceScatter, barrier
  const b = rank === world - 1 ? inputOf(7) : tprpc.zeros([n]);
  await d.broadcast(b, world - 1);
  out.broadcast = err(b, inputOf(7));
  const gathered = ranks.map(() => tprpc.zeros([n]));
  await d.allGather(gathered, inputOf(rank));
  out.allGather = Math.max(...ranks.map((r) => err(gathered[r]!, inputOf(r))));
  const chunk = (r: number, j: number) => inputOf(r).mul(j + 1);
  const scattered = tprpc.zeros([n]);
  await d.reduceScatter(
    scattered,
    ranks.map((j) => chunk(rank, j)),
    { op: d.ReduceOp.SUM },
  );
  let want = chunk(0, rank);
  for (const r of ranks.slice(1)) want = want.add(chunk(r, rank));
  out.reduceScatter = err(scattered, want) / want.abs().max().item();
  await d.barrier();
  return out;
}

/** Many isends and irecvs at once: K tagged messages to every other rank, half received from any source. */
async function manyConcurrent(k: number): Promise<number> {
  const d = tprpc.distributed;
  const rank = d.getRank();
  const world = d.getWorldSize();
  const value = (src: number, dst: number, i: number) => src * 10_000 + dst * 100 + i;
  const works: sdk.distributed.Work<unknown>[] = [];
  const checks: (() => boolean)[] = [];
  for (let i = 0; i < k; i++)
    for (let p = 0; p < world; p++) {
      if (p === rank) continue;
      works.push(d.isend(tprpc.full([64], value(rank, p, i), { dtype: "float32" }), p, { tag: i }));
      const into = tprpc.zeros([64]);
      if (i % 2 === 0) {
        works.push(d.irecv(into, p, { tag: i }));
        checks.push(() => into.max().item() === value(p, rank, i) && into.min().item() === value(p, rank, i));
      } else {
        const w = d.irecv(into, null, { tag: i });
        works.push(w);
        // any source: the sender is whoever the Work names, and the payload must be its
        checks.push(() => w.isSuccess() && into.max().item() === into.min().item() && into.max().item() % 100 === i);
      }
    }
  await Promise.all(works.map((w) => w.wait()));
  return checks.filter((c) => !c()).length;
}

/**
 * Three SGD steps on a 32-row batch, the model seeded per rank (DDP's start-up broadcast makes the
 * replicas equal): with DDP each rank trains on its 8 rows; `reference` trains one model on all 32
 * rows without DDP. Returns the flat parameters.
 */
async function ddpTrain(reference: boolean): Promise<number[]> {
  const d = tprpc.distributed;
  const nn = tprpc.nn;
  const rank = reference ? 0 : d.getRank();
  tprpc.manualSeed(100 + rank);
  const m = new nn.Sequential(
    new nn.Linear(10, 64),
    new nn.Tanh(),
    new nn.Linear(64, 64),
    new nn.Tanh(),
    new nn.Linear(64, 4),
  );
  const x = tprpc.randn([32, 10], { generator: new tprpc.Generator(11) });
  const y = tprpc.randn([32, 4], { generator: new tprpc.Generator(12) });
  const ddp = reference ? null : await d.DistributedDataParallel.create(m, { bucketCapMb: 0.01 });
  const opt = new tprpc.optim.SGD(m.parameters(), { lr: 0.05, momentum: 0.9 });
  const rows = (t: sdk.Tensor) => (reference ? t : t.narrow(0, rank * 8, 8));
  for (let s = 0; s < 3; s++) {
    opt.zeroGrad();
    nn.functional.mseLoss((ddp ?? m).forward(rows(x)) as sdk.Tensor, rows(y)).backward();
    await ddp?.finishGradientSync();
    opt.step();
  }
  return tprpc.cat(m.parameters().map((p) => p.detach().flatten())).tolist() as number[];
}

/**
 * One DDP backward inside a distributed autograd context on this rank's 8 rows: the averaged
 * gradients land in the context (getGradients), as DistributedOptimizer reads them; `reference`
 * is the plain backward on all 32 rows of one model. Returns the flat gradients in parameter order.
 */
async function ddpContextGrads(reference: boolean): Promise<number[]> {
  const d = tprpc.distributed;
  const nn = tprpc.nn;
  const rank = reference ? 0 : d.getRank();
  tprpc.manualSeed(200 + rank);
  const m = new nn.Sequential(new nn.Linear(10, 32), new nn.Tanh(), new nn.Linear(32, 4));
  const x = tprpc.randn([32, 10], { generator: new tprpc.Generator(21) });
  const y = tprpc.randn([32, 4], { generator: new tprpc.Generator(22) });
  const flat = (ts: sdk.Tensor[]) => tprpc.cat(ts.map((t) => t.flatten())).tolist() as number[];
  if (reference) {
    nn.functional.mseLoss(m.forward(x), y).backward();
    return flat(m.parameters().map((p) => p.grad!));
  }
  const ddp = await d.DistributedDataParallel.create(m);
  return tprpc.distAutograd.context(async (ctxId) => {
    const rows = (t: sdk.Tensor) => t.narrow(0, rank * 8, 8);
    const loss = nn.functional.mseLoss(ddp.forward(rows(x)) as sdk.Tensor, rows(y));
    await tprpc.distAutograd.backward(ctxId, [loss]);
    await ddp.finishGradientSync();
    const g = tprpc.distAutograd.getGradients(ctxId);
    if (m.parameters().some((p) => p.grad !== null)) throw new Error(".grad was written inside a context");
    return flat(m.parameters().map((p) => g.get(p)!));
  });
}

const channels: [string, string | null][] = [
  ["shm", null],
  ["cma", cmaChannelContext.whyNotViable() ?? null],
  ["tcp", null],
];

describe.each(channels)("distributed over %s (3 processes)", (channel, skip) => {
  let cluster: Cluster | undefined;
  beforeAll(async () => {
    if (skip) return;
    cluster = await startGroup({
      processes: true,
      workers: 2,
      env: { TPRPC_CHANNELS: channel },
      init: { channels: channel, rpcTimeoutMs: 60_000 },
    });
    expect((await rpc.pipeInfo("worker1")).channels["cpu-cpu"]).toBe(channel);
  }, 60_000);
  afterAll(() => stopGroup(cluster), 30_000);

  it.skipIf(skip !== null)(
    `every operation, ring sizes (1 MiB tensors)`,
    async () => {
      const results = await within(onEveryRank(cluster!, everyOperation, [262_144]), 90_000, "every operation");
      for (const r of results)
        for (const [k, v] of Object.entries(r)) expect([k, v]).toEqual([k, expect.closeTo(0, 4)]);
    },
    120_000,
  );

  it.skipIf(skip !== null)(
    "every operation, direct sizes (4 KiB tensors)",
    async () => {
      const results = await within(onEveryRank(cluster!, everyOperation, [1024]), 60_000, "every operation");
      for (const r of results)
        for (const [k, v] of Object.entries(r)) expect([k, v]).toEqual([k, expect.closeTo(0, 4)]);
    },
    90_000,
  );
});

describe("distributed with 4 processes: concurrency and a dead peer", () => {
  let cluster: Cluster | undefined;
  beforeAll(async () => {
    cluster = await startGroup({ processes: true, workers: 3, init: { rpcTimeoutMs: 60_000 } });
  }, 60_000);
  afterAll(() => stopGroup(cluster, false), 30_000);

  it("many concurrent tagged operations and any-source receives", async () => {
    const bad = await within(onEveryRank(cluster!, manyConcurrent, [24]), 60_000, "concurrent operations");
    expect(bad).toEqual([0, 0, 0, 0]);
  }, 90_000);

  it("DDP over 4 processes trains exactly as one process on the concatenated batch", async () => {
    const want = sdk.tensor(await ddpTrain(true));
    const got = await within(onEveryRank(cluster!, ddpTrain, [false]), 60_000, "DDP training");
    for (const g of got) expect(sdk.tensor(g).sub(want).abs().max().item()).toBeLessThan(1e-5);
  }, 90_000);

  it("DDP inside a distributed autograd context averages the context's gradients", async () => {
    const want = sdk.tensor(await ddpContextGrads(true));
    const got = await within(onEveryRank(cluster!, ddpContextGrads, [false]), 60_000, "DDP in a context");
    for (const g of got) expect(sdk.tensor(g).sub(want).abs().max().item()).toBeLessThan(1e-6);
  }, 90_000);

  it("a peer killed mid-operation fails pending receives and collectives with WorkerUnavailableError", async () => {
    const pending = async () => {
      const d = tprpc.distributed;
      const errs: string[] = [];
      const name = (e: unknown) => (e as Error).constructor.name;
      const ops = [
        d.recv(tprpc.zeros([4]), 3, { tag: 77, timeoutMs: 60_000 }).then(() => "completed", name),
        d.allReduce(tprpc.zeros([300_000]), { timeoutMs: 60_000 }).then(() => "completed", name),
      ];
      for (const e of await Promise.all(ops)) errs.push(e);
      return errs;
    };
    // ranks 0..2 wait on rank 3, which never takes part; it is killed after they started
    const runs = [
      pending(),
      ...["worker1", "worker2"].map((w) => rpc.rpcSync<string[]>(w, pending, [], { timeoutMs: 60_000 })),
    ];
    await new Promise((r) => setTimeout(r, 500));
    const t0 = performance.now();
    cluster!.workers.find((w) => w.name === "worker3")!.process.kill("SIGKILL");
    const results = await within(Promise.all(runs), 20_000, "operations pending on a dead peer");
    const ms = performance.now() - t0;
    for (const r of results) expect(r).toEqual(["WorkerUnavailableError", "WorkerUnavailableError"]);
    expect(ms).toBeLessThan(10_000);
    // sends to it fail too, at once
    await expect(tprpc.distributed.send(tprpc.zeros([2]), 3)).rejects.toBeInstanceOf(sdk.WorkerUnavailableError);
  }, 60_000);
});
