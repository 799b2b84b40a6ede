/**
 * DistributedDataParallel between three agents of one process (test/rpc/in_process.ts): replicas
 * start equal, their averaged gradients equal single-process gradients on the concatenated batch
 * (several buckets), noSync accumulates, and a few SGD steps match single-process training. The
 * same check across real processes is in test/e2e/distributed.test.ts.
 */
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import * as tprpc from "../../sdk/index.js";
import type { Agent } from "../../sdk/rpc/agent.js";
import { runServing } from "../../sdk/rpc/process.js";
import { inProcessGroup, stopInProcessGroup } from "../rpc/in_process.js";
import type { Tensor } from "../../sdk/index.js";

const { distributed: dist, nn, optim, randn, Generator, cat } = tprpc;
const N = 3;
const B = 4; // rows per rank

let agents: Agent[] = [];
const onEach = <T>(fn: (rank: number) => Promise<T>): Promise<T[]> =>
  Promise.all(agents.map((a, r) => runServing(a, () => fn(r))));

/** The same architecture everywhere; `seed` differs per rank so the broadcast at start matters. */
function model(seed: number) {
  tprpc.manualSeed(seed);
  return new nn.Sequential(
    new nn.Linear(6, 16),
    new nn.Tanh(),
    new nn.Linear(16, 8),
    new nn.Tanh(),
    new nn.Linear(8, 3),
  );
}
const X = randn([N * B, 6], { generator: new Generator(7) });
const Y = randn([N * B, 3], { generator: new Generator(8) });
const rows = (t: Tensor, r: number) => t.narrow(0, r * B, B);
const loss = (m: { forward(x: Tensor): unknown }, x: Tensor, y: Tensor) =>
  nn.functional.mseLoss(m.forward(x) as Tensor, y);

beforeAll(async () => {
  agents = await inProcessGroup(["d0", "d1", "d2"], { rpcTimeoutMs: 10_000 });
}, 30_000);
afterAll(() => stopInProcessGroup(agents, false));

describe("DistributedDataParallel", () => {
  it("averaged gradients equal single-process gradients on the concatenated batch", async () => {
    const ref = model(1);
    loss(ref, X, Y).backward();
    const grads = await onEach(async (r) => {
      // a tiny bucket cap: one bucket per parameter or two, launched in order
      const ddp = await dist.DistributedDataParallel.create(model(1 + r), { bucketCapMb: 0.0004 });
      expect(ddp.bucketLayout().length).toBeGreaterThan(2);
      expect(ddp.bucketLayout()[0]).toEqual(["4.bias", "4.weight", "2.bias"]); // reverse order, 419 bytes
      loss(ddp, rows(X, r), rows(Y, r)).backward();
      await ddp.finishGradientSync();
      return ddp.module.parameters().map((p) => p.grad!);
    });
    const want = ref.parameters().map((p) => p.grad!);
    for (const g of grads) g.forEach((x, i) => expect(x.sub(want[i]!).abs().max().item()).toBeLessThan(1e-6));
  });

  it("noSync accumulates locally; the next synchronized backward reduces the sum", async () => {
    const ref = model(1);
    loss(ref, X, Y).backward();
    loss(ref, X, Y.mul(2)).backward();
    const grads = await onEach(async (r) => {
      const ddp = await dist.DistributedDataParallel.create(model(1 + r));
      ddp.noSync(() => loss(ddp, rows(X, r), rows(Y, r)).backward());
      await ddp.finishGradientSync(); // nothing to do: no synchronized backward yet
      const local = ddp.module.parameters()[0]!.grad!.clone();
      loss(ddp, rows(X, r), rows(Y, r).mul(2)).backward();
      await ddp.finishGradientSync();
      return [local, ...ddp.module.parameters().map((p) => p.grad!)];
    });
    const want = ref.parameters().map((p) => p.grad!);
    // the noSync pass left each rank with its own gradient, not the average
    expect(grads[0]![0]!.sub(grads[1]![0]!).abs().max().item()).toBeGreaterThan(1e-4);
    for (const g of grads) g.slice(1).forEach((x, i) => expect(x.sub(want[i]!).abs().max().item()).toBeLessThan(1e-6));
  });

  it("wrapping a module again leaves the older wrapper's hooks inert", async () => {
    const ref = model(1);
    loss(ref, X, Y).backward();
    const grads = await onEach(async (r) => {
      const m = model(1 + r);
      const old = await dist.DistributedDataParallel.create(m);
      const ddp = await dist.DistributedDataParallel.create(m);
      loss(ddp, rows(X, r), rows(Y, r)).backward();
      await ddp.finishGradientSync();
      await old.finishGradientSync(); // nothing was marked for it: no collective launched
      return m.parameters().map((p) => p.grad!);
    });
    const want = ref.parameters().map((p) => p.grad!);
    for (const g of grads) g.forEach((x, i) => expect(x.sub(want[i]!).abs().max().item()).toBeLessThan(1e-6));
  });

  it("SGD steps on DDP replicas track single-process training", async () => {
    const ref = model(1);
    const refOpt = new optim.SGD(ref.parameters(), { lr: 0.1, momentum: 0.9 });
    for (let s = 0; s < 5; s++) {
      refOpt.zeroGrad();
      loss(ref, X, Y).backward();
      refOpt.step();
    }
    const finals = await onEach(async (r) => {
      const ddp = await dist.DistributedDataParallel.create(model(1 + r));
      const opt = new optim.SGD(ddp.parameters(), { lr: 0.1, momentum: 0.9 });
      for (let s = 0; s < 5; s++) {
        opt.zeroGrad();
        loss(ddp, rows(X, r), rows(Y, r)).backward();
        await ddp.finishGradientSync();
        opt.step();
      }
      return cat(ddp.module.parameters().map((p) => p.detach().flatten()));
    });
    const want = cat(ref.parameters().map((p) => p.detach().flatten()));
    for (const f of finals) expect(f.sub(want).abs().max().item()).toBeLessThan(1e-5);
  });
});
