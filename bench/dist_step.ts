/**
 * `npm run bench:dist`: time per training step of the CUDA-RPC recipe's two-shard model on the CPU
 * (Linear(1000, 1000) here and in a RemoteModule on worker1, batch 1000, DistributedOptimizer over
 * SGD), with tprpc and with PyTorch RPC (scripts/gen_dist_fixtures.py --bench-only, Debian's torch)
 * in the same run, and their ratio. Medians after one warm-up step; timings need a quiet machine.
 *
 *   npm run bench:dist [-- --steps 10]        (default 5 timed steps)
 *
 * 1. tprpc: this process is the master, one local worker (test/dist_autograd/group.ts, as the
 *    distributed autograd suites start theirs); the input is the fixture script's gen(21, [1000, 1000]).
 * 2. torch: scripts/gen_dist_fixtures.py --bench-only --bench-steps N under /usr/bin/python3
 *    (TPRPC_TORCH_PYTHON overrides); its "median … ms" line is parsed. Missing: "unavailable".
 */
import { spawnSync } from "node:child_process";
import fs from "node:fs";
import path from "node:path";
import { fileURLToPath } from "node:url";
import { DistributedOptimizer, RemoteModule, type Tensor, distAutograd, nn, optim, rpc } from "../sdk/index.js";
import { startGroup, stopGroup } from "../test/dist_autograd/group.js";
import { gen } from "../test/dist_autograd/models.js";

const stepsAt = process.argv.indexOf("--steps");
const STEPS = stepsAt >= 0 ? Number(process.argv[stepsAt + 1]) : 5;
const PYTHON = process.env.TPRPC_TORCH_PYTHON ?? "/usr/bin/python3";

const median = (xs: number[]) => [...xs].sort((a, b) => a - b)[xs.length >> 1]!;

async function tprpcStep(): Promise<number> {
  const cluster = await startGroup(1, "dist-bench-secret-0123456789");
  try {
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
    return median(times);
  } finally {
    await stopGroup(cluster);
  }
}

/** PyTorch RPC's median step in ms, or why there is none. */
function torchStep(): number | string {
  if (!fs.existsSync(PYTHON)) return `${PYTHON} not found`;
  const script = path.resolve(path.dirname(fileURLToPath(import.meta.url)), "../../scripts/gen_dist_fixtures.py");
  const r = spawnSync(PYTHON, [script, "--bench-only", "--bench-steps", String(STEPS)], {
    encoding: "utf8",
    timeout: 300_000,
  });
  const ms = Number(/median ([\d.]+) ms/.exec(r.stdout ?? "")?.[1]);
  return Number.isFinite(ms) ? ms : `exit ${r.status}: ${(r.stderr ?? "").trim().slice(-300)}`;
}

const ours = await tprpcStep();
const theirs = torchStep();
process.stdout.write(
  typeof theirs === "number"
    ? `two-shard step (median of ${STEPS}): tprpc ${ours.toFixed(1)} ms, PyTorch RPC ${theirs.toFixed(1)} ms, ` +
        `ratio tprpc/torch ${(ours / theirs).toFixed(2)}\n`
    : `two-shard step (median of ${STEPS}): tprpc ${ours.toFixed(1)} ms, PyTorch RPC unavailable (${theirs})\n`,
);
