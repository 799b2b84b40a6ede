/**
 * `npm run bench -- --fetch-ahead` (issue 23): what fetching RRef arguments ahead
 * (sdk/rpc/fetch_ahead.ts) does to a two-stage pipeline, with and without it, in one run.
 *
 * The pattern is notebook 04's: for each of 4 micro-batches the master makes
 * `rpc.remote("worker1", stage1, [x])` and passes the RRef to `rpc.rpcAsync("worker2", stage2, [rref])`,
 * whose stage2 starts with `await rref.toHere()`. Each stage computes for --stage-ms (8) ms by spinning
 * on the clock, so the figure shows the schedule, not the kernels (the pipelined GPT of
 * `--e2e` shares two cores between its stages' memory-bound work, and there the difference is
 * within the machine's noise). x is 8 x 64 x 128 float32 (256 KiB), as the GPT's activations.
 *
 * A step's ideal is 5 stage times (4 stage-1 runs, then stage 2's last); when stage 2's fetch reaches
 * stage 1 only after stage 1's next run, stage 2 starts one stage time late: 6. Each side runs in a
 * group of its own (workers started with TPRPC_RREF_FETCH_AHEAD_BYTES at its default, 4 MiB, then 0); median over
 * --steps (40) steps after 10 untimed ones.
 */
import * as sdk from "../sdk/index.js";
import { rpc } from "../sdk/index.js";
import type { Tensor } from "../sdk/index.js";
import { startLocalWorkers } from "../sdk/rpc/launcher.js";
import { median, now } from "./rpc_common.js";

async function run(env: Record<string, string>, stageMs: number, steps: number): Promise<number> {
  const cluster = await startLocalWorkers({ workers: 2, env });
  try {
    await rpc.initRpc("master", { ...cluster.initOptions, initTimeoutMs: 30_000 });
    const stage1 = (x: Tensor, ms: number) => {
      const end = performance.now() + ms;
      while (performance.now() < end);
      return x.add(1);
    };
    const stage2 = async (r: rpc.RRef<Tensor>, ms: number) => {
      const v = await r.toHere();
      const end = performance.now() + ms;
      while (performance.now() < end);
      return v.sum().item();
    };
    const x = sdk.ones([8, 64, 128]);
    const step = () =>
      Promise.all(
        Array.from({ length: 4 }, () =>
          rpc.rpcAsync("worker2", stage2, [rpc.remote<Tensor>("worker1", stage1, [x, stageMs]), stageMs]),
        ),
      );
    for (let i = 0; i < 10; i++) await step();
    const t: number[] = [];
    for (let i = 0; i < steps; i++) {
      const t0 = now();
      await step();
      t.push((now() - t0) * 1000);
    }
    return median(t);
  } finally {
    await rpc.shutdown({ timeoutMs: 10_000 }).catch(() => undefined);
    await cluster.close({ graceMs: 2_000 });
  }
}

export async function fetchAheadBench(argv: readonly string[]): Promise<void> {
  const num = (name: string, dflt: number): number => {
    const i = argv.indexOf(name);
    return i >= 0 ? Number(argv[i + 1]) : dflt;
  };
  const stageMs = num("--stage-ms", 8);
  const steps = num("--steps", 40);
  const on = await run({ TPRPC_RREF_FETCH_AHEAD_BYTES: String(4 << 20) }, stageMs, steps);
  const off = await run({ TPRPC_RREF_FETCH_AHEAD_BYTES: "0" }, stageMs, steps);
  process.stdout.write(
    [
      `two-stage pipeline, 4 micro-batches, each stage ${stageMs} ms of spinning (ideal ${5 * stageMs} ms a step; one stage late: ${6 * stageMs} ms)`,
      `  RRef arguments fetched ahead (the default): ${on.toFixed(1)} ms/step`,
      `  not fetched ahead (TPRPC_RREF_FETCH_AHEAD_BYTES=0): ${off.toFixed(1)} ms/step`,
      `  ratio (> 1: fetching ahead is faster): ${(off / on).toFixed(2)}x`,
    ].join("\n") + "\n",
  );
}
