/**
 * Benchmark (opt-in: TPRPC_DIST_BENCH=1): time per training step of the
 * CUDA-RPC recipe's two-shard model on the CPU (Linear(1000, 1000) here and
 * in a RemoteModule on worker1, batch 1000, DistributedOptimizer over SGD),
 * with tprpc and with PyTorch RPC (scripts/gen_dist_fixtures.py --bench-only,
 * Debian's torch) in the same run, and their ratio. Medians after one
 * warm-up step. Skipped by default: timings need a quiet machine, and the
 * suite's assertions must not depend on them.
 *
 *   TPRPC_DIST_BENCH=1 TPRPC_DIST_BENCH_STEPS=10 npx vitest run test/e2e/dist_bench.test.ts
 */
import { execFile } from "node:child_process";
import fs from "node:fs";
import path from "node:path";
import { promisify } from "node:util";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { DistributedOptimizer, RemoteModule, type Tensor, distAutograd, nn, optim, rpc } from "../../sdk/index.js";
import { type Cluster, startGroup, stopGroup } from "../dist_autograd/group.js";
import { gen } from "../dist_autograd/models.js";

const enabled = process.env.TPRPC_DIST_BENCH === "1";
if (!enabled) console.warn("[test/e2e/dist_bench] skipped: a benchmark, opt-in with TPRPC_DIST_BENCH=1");
const STEPS = Number(process.env.TPRPC_DIST_BENCH_STEPS ?? 5);
const PYTHON = "/usr/bin/python3";

const median = (xs: number[]) => [...xs].sort((a, b) => a - b)[xs.length >> 1]!;

describe.skipIf(!enabled)("two-shard training step: tprpc vs PyTorch RPC", () => {
  let cluster: Cluster | undefined;

  beforeAll(async () => {
    cluster = await startGroup(1, "dist-bench-secret-0123456789");
  }, 60_000);

  afterAll(async () => {
    await stopGroup(cluster);
  }, 30_000);

  it("reports the time per step of both and their ratio", async () => {
    const x = gen(21, [1000, 1000], 1.0);
    const lm = new nn.Linear(1000, 1000);
    const rm = new RemoteModule("worker1/cpu", nn.Linear, [1000, 1000]);
    const params = [...lm.parameters().map((p) => new rpc.RRef<Tensor>(p)), ...(await rm.remoteParameters())];
    const opt = new DistributedOptimizer(optim.SGD, params, { lr: 1e-6 });
    const times: number[] = [];
    for (let s = 0; s <= STEPS; s++) {
      const t0 = performance.now();
      await distAutograd.context(async (ctxId) => {
        const loss = ((await rm.forward(lm.forward(x))) as Tensor).sum();
        await distAutograd.backward(ctxId, [loss]);
        await opt.step(ctxId);
      });
      if (s > 0) times.push(performance.now() - t0);
    }
    const ours = median(times);

    const script = path.join(import.meta.dirname, "../../scripts/gen_dist_fixtures.py");
    let theirs = Number.NaN;
    if (fs.existsSync(PYTHON)) {
      const { stdout } = await promisify(execFile)(PYTHON, [script, "--bench-only", "--bench-steps", String(STEPS)], {
        timeout: 300_000,
      });
      theirs = Number(/median ([\d.]+) ms/.exec(stdout)?.[1]);
    }
    process.stdout.write(
      `two-shard step (median of ${STEPS}): tprpc ${ours.toFixed(1)} ms, PyTorch RPC ${theirs.toFixed(1)} ms, ` +
        `ratio tprpc/torch ${(ours / theirs).toFixed(2)}\n`,
    );
    expect(ours).toBeGreaterThan(0);
    if (fs.existsSync(PYTHON)) expect(Number.isFinite(theirs)).toBe(true); // the torch run reported its median
  }, 600_000);
});
