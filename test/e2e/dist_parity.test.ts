/**
 * Parity with PyTorch for distributed training, with real worker processes
 * (master + worker1..3, as scripts/gen_dist_fixtures.py runs torch): each
 * scenario is trained for a few steps with DistributedOptimizer over SGD and
 * over Adam, and gives the fixture's losses and parameters (float32
 * tolerance); the same model trained locally in tprpc gives them too.
 *
 * (a) the RPC paper's Block/Model example: Blocks on worker1 and worker2,
 *     chained by the master through RRefs (remote().forward, toHere inside).
 * (b) the CUDA-RPC recipe's two-shard model on the CPU: Linear(1000, 1000)
 *     here and one in a RemoteModule on worker1, batch 1000 (the optimizer
 *     for the master's shard lives here: a call to ourselves).
 * (c) a parameter server (a RemoteModule on worker1) with trainers on
 *     worker2 and worker3, each with its own DistributedOptimizer, taking
 *     turns as the fixture script makes them.
 *
 * Initial weights and inputs come from the fixture ((b)'s from the fixture's
 * generator arguments, checked against its checksums), not from our RNG.
 */
import fs from "node:fs";
import path from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import {
  DistributedOptimizer,
  RemoteModule,
  type Tensor,
  distAutograd,
  nn,
  noGrad,
  optim,
  rpc,
  tensor,
} from "../../sdk/index.js";
import { type Cluster, startGroup, stopGroup } from "../dist_autograd/group.js";
import { gen } from "../dist_autograd/models.js";
import { expectClose } from "../helpers.js";

type Nested = number | Nested[];
interface Trained {
  lr: number;
  losses: number[];
  params: Nested[];
}
interface Summary {
  rowSums: number[];
  total: number;
  first: number[];
}
interface Fixture {
  a: { init: Record<string, Nested>; inputs: Nested[]; sgd: Trained; adam: Trained };
  b: {
    gen: Record<string, [number, number[], number]>;
    checksums: Record<string, number>;
    sgd: { lr: number; losses: number[]; params: Summary[] };
    adam: { lr: number; losses: number[]; params: Summary[] };
  };
  c: {
    init: Record<string, Nested>;
    inputs: Nested[][];
    targets: Nested[][];
    sgd: { lr: number; losses: number[][]; params: Nested[] };
    adam: { lr: number; losses: number[][]; params: Nested[] };
  };
}

const fixture = JSON.parse(
  fs.readFileSync(path.join(import.meta.dirname, "../dist_autograd/fixtures/dist_parity.json"), "utf8"),
) as Fixture;

const f32 = (v: Nested) => tensor(v as number[], { dtype: "float32" });
const flat = (v: Nested): number[] => (Array.isArray(v) ? v.flatMap(flat) : [v]);
// NB: typed as one class so TypeScript can infer the options type of `new DistributedOptimizer(OPTIMS[name], …)`
const OPTIMS: Record<"sgd" | "adam", typeof optim.Adam> = { sgd: optim.SGD as never, adam: optim.Adam };
const NAMES = ["sgd", "adam"] as const;

/** A Linear layer with the given weights (the local reference runs). */
function linear(w: Tensor, b: Tensor): InstanceType<typeof nn.Linear> {
  const l = new nn.Linear(w.shape[1]!, w.shape[0]!);
  noGrad(() => {
    l.weight.copy_(w);
    l.bias!.copy_(b);
  });
  return l;
}

function summary(params: readonly Tensor[]): Summary[] {
  return params.map((p) => {
    const v = p.toArray();
    const rowSums: number[] = [];
    if (p.ndim === 2) {
      const n = p.shape[1]!;
      for (let r = 0; r < p.shape[0]!; r++) {
        let s = 0;
        for (let c = 0; c < n; c++) s += v[r * n + c]!;
        rowSums.push(s);
      }
    } else rowSums.push(...v);
    return { rowSums, total: v.reduce((a, b) => a + b, 0), first: v.slice(0, 8) };
  });
}

type BlockRef = rpc.RRef<{ forward(rx: rpc.RRef<Tensor>): Promise<Tensor> }>;

describe("distributed training parity with PyTorch (4 processes)", () => {
  let cluster: Cluster | undefined;

  beforeAll(async () => {
    cluster = await startGroup(3, "dist-parity-secret-0123456789");
  }, 60_000);

  afterAll(async () => {
    await stopGroup(cluster);
  }, 30_000);

  for (const name of NAMES) {
    it(`(a) the paper's Block/Model example across 3 workers, ${name}`, async () => {
      const F = fixture.a;
      const [w1, b1, w2, b2] = [F.init.w1!, F.init.b1!, F.init.w2!, F.init.b2!].map(f32) as Tensor[];
      const { lr } = F[name];
      const rb1 = rpc.remote("worker1", "dist.Block", [w1, b1]) as BlockRef;
      const rb2 = rpc.remote("worker2", "dist.Block", [w2, b2]) as BlockRef;
      const params = [
        ...(await rpc.rpcSync<rpc.RRef<Tensor>[]>("worker1", "dist.paramRRefs", [rb1])),
        ...(await rpc.rpcSync<rpc.RRef<Tensor>[]>("worker2", "dist.paramRRefs", [rb2])),
      ];
      const opt = new DistributedOptimizer(OPTIMS[name], params, { lr });
      const losses: number[] = [];
      for (const x of F.inputs.map(f32)) {
        await distAutograd.context(async (ctxId) => {
          const rx = rb1.remote().forward(new rpc.RRef(x)) as rpc.RRef<Tensor>;
          const ry = rb2.remote().forward(rx) as rpc.RRef<Tensor>;
          const loss = (await ry.toHere()).sum();
          await distAutograd.backward(ctxId, [loss]);
          await opt.step(ctxId);
          losses.push(loss.item());
        });
      }
      const final = [
        ...(await rpc.rpcSync<number[][]>("worker1", "dist.paramsOf", [rb1])),
        ...(await rpc.rpcSync<number[][]>("worker2", "dist.paramsOf", [rb2])),
      ];
      expectClose(losses, F[name].losses);
      final.forEach((p, i) => expectClose(p, flat(F[name].params[i]!)));

      // the same model trained locally in tprpc
      const l1 = linear(w1!, b1!);
      const l2 = linear(w2!, b2!);
      const local = new OPTIMS[name]([...l1.parameters(), ...l2.parameters()], { lr });
      const localLosses: number[] = [];
      for (const x of F.inputs.map(f32)) {
        local.zeroGrad();
        const loss = l2.forward(l1.forward(x).relu()).relu().sum();
        loss.backward();
        local.step();
        localLosses.push(loss.item());
      }
      expectClose(localLosses, F[name].losses);
      [...l1.parameters(), ...l2.parameters()].forEach((p, i) => expectClose(p, flat(F[name].params[i]!)));
    });
  }

  for (const name of NAMES) {
    it(`(b) the recipe's two-shard model (2 × Linear(1000, 1000), batch 1000) across 2 workers, ${name}`, async () => {
      const F = fixture.b;
      const t: Record<string, Tensor> = {};
      for (const [k, [seed, shape, scale]] of Object.entries(F.gen)) {
        t[k] = gen(seed, shape, scale);
        expect(t[k].toArray().reduce((a, b) => a + b, 0)).toBeCloseTo(F.checksums[k]!, 6);
      }
      const { lr } = F[name];
      const lm = linear(t.w1!, t.b1!);
      const rm = new RemoteModule("worker1/cpu", "dist.Shard", [t.w2, t.b2]);
      const params = [...lm.parameters().map((p) => new rpc.RRef<Tensor>(p)), ...(await rm.remoteParameters())];
      const opt = new DistributedOptimizer(OPTIMS[name], params, { lr });
      const losses: number[] = [];
      const times: number[] = [];
      for (let s = 0; s < F[name].losses.length; s++) {
        const t0 = performance.now();
        await distAutograd.context(async (ctxId) => {
          const y = (await rm.forward(lm.forward(t.x!))) as Tensor;
          const loss = y.sum();
          await distAutograd.backward(ctxId, [loss]);
          await opt.step(ctxId);
          losses.push(loss.item());
        });
        times.push(performance.now() - t0);
      }
      process.stdout.write(`(b) ${name}: tprpc step times (ms): ${times.map((x) => x.toFixed(1)).join(", ")}\n`);
      expectClose(losses, F[name].losses, 1e-3, 1e-2);
      const remote = await rpc.rpcSync<Summary[]>(
        "worker1",
        async (r: rpc.RRef<{ parameters(): Tensor[] }>, summarize: string) =>
          // NB: `summary` travels as source text: shipped functions cannot close over test-file locals
          (new Function(`return ${summarize}`)() as (p: Tensor[]) => Summary[])((await r.toHere()).parameters()),
        [rm.getModuleRRef(), summary.toString()],
      );
      const got = [...summary(lm.parameters()), ...remote];
      got.forEach((s, i) => {
        const want = F[name].params[i]!;
        expectClose(s.rowSums, want.rowSums, 1e-3, 1e-4);
        expectClose(s.first, want.first, 1e-3, 1e-6);
        expect(s.total).toBeCloseTo(want.total, 2);
      });
    }, 120_000);
  }

  for (const name of NAMES) {
    it(`(c) a parameter server with 2 trainers, each with a DistributedOptimizer over ${name}`, async () => {
      const F = fixture.c;
      const init = [F.init.w1!, F.init.b1!, F.init.w2!, F.init.b2!].map(f32);
      const { lr } = F[name];
      const ps = new RemoteModule("worker1/cpu", "dist.Net", init);
      const trainers = ["worker2", "worker3"];
      for (const tr of trainers)
        await rpc.rpcSync(tr, "dist.trainerSetup", [
          ps.getModuleRRef(),
          `optim.${name === "sgd" ? "SGD" : "Adam"}`,
          lr,
        ]);
      const losses: number[][] = [[], []];
      for (let s = 0; s < F[name].losses[0]!.length; s++)
        for (const [k, tr] of trainers.entries())
          losses[k]!.push(
            await rpc.rpcSync<number>(tr, "dist.trainerStep", [f32(F.inputs[k]![s]!), f32(F.targets[k]![s]!)]),
          );
      const final = await rpc.rpcSync<number[][]>("worker1", "dist.paramsOf", [ps.getModuleRRef()]);
      losses.forEach((l, k) => expectClose(l, F[name].losses[k]!));
      final.forEach((p, i) => expectClose(p, flat(F[name].params[i]!)));

      // locally: one model, one optimizer per trainer, the same turns
      const fc1 = linear(init[0]!, init[1]!);
      const fc2 = linear(init[2]!, init[3]!);
      const all = [...fc1.parameters(), ...fc2.parameters()];
      const opts = trainers.map(() => new OPTIMS[name](all, { lr }));
      const local: number[][] = [[], []];
      for (let s = 0; s < F[name].losses[0]!.length; s++)
        for (let k = 0; k < 2; k++) {
          opts[k]!.zeroGrad();
          const out = fc2.forward(fc1.forward(f32(F.inputs[k]![s]!)).tanh());
          const loss = nn.functional.mseLoss(out, f32(F.targets[k]![s]!));
          loss.backward();
          opts[k]!.step();
          local[k]!.push(loss.item());
        }
      local.forEach((l, k) => expectClose(l, F[name].losses[k]!));
      all.forEach((p, i) => expectClose(p, flat(F[name].params[i]!)));
    });
  }
});
