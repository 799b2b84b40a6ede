/**
 * `node dist/bench/threads.js` (issue 23, item 4): a two-worker job with the kernel-thread default
 * that startLocalWorkers gives its workers (max(1, floor(cores / 3)) for a master and two workers)
 * against the pool's own default, min(8, cores) threads per process (TPRPC_NUM_THREADS set to it).
 * The master and both workers each run the same matmul loop at once (the master's own pool at its
 * default), so every process competes for the cores as in a pipelined job. The two settings are run
 * alternately in one invocation, `--rounds` times each (default 3), and the ratio of their median
 * wall times is printed: > 1 means the spawned-worker default is faster. Flags: --size N (matmul
 * N×N, default 384), --iters K (matmuls per process per round, default 40).
 */
import os from "node:os";
import { matmul, randn, rpc } from "../sdk/index.js";
import { startLocalWorkers } from "../sdk/rpc/launcher.js";

declare const tprpc: typeof import("../sdk/index.js");

function arg(name: string, dflt: number): number {
  const i = process.argv.indexOf(name);
  return i < 0 ? dflt : Number(process.argv[i + 1]);
}

/** Runs `iters` n×n matmuls; returns [seconds, the pool's thread count]. Shipped to the workers. */
function work(n: number, iters: number): [number, number] {
  const a = tprpc.randn([n, n]);
  const b = tprpc.randn([n, n]);
  const t0 = performance.now();
  for (let i = 0; i < iters; i++) tprpc.matmul(a, b);
  return [(performance.now() - t0) / 1e3, tprpc.getNumThreads()];
}

async function job(threads: string | undefined, n: number, iters: number): Promise<{ wall: number; pools: number[] }> {
  const cluster = await startLocalWorkers({ workers: 2, env: { TPRPC_NUM_THREADS: threads }, stdio: "inherit" });
  try {
    await rpc.initRpc("master", { ...cluster.initOptions, initTimeoutMs: 60_000 });
    const a = randn([n, n]);
    for (const w of ["worker1", "worker2"]) await rpc.rpcSync(w, work, [n, 2]); // warm: JIT, pool threads
    const t0 = performance.now();
    const remote = ["worker1", "worker2"].map((w) => rpc.rpcAsync(w, work, [n, iters]));
    for (let i = 0; i < iters; i++) matmul(a, a);
    const pools = (await Promise.all(remote)).map((r) => (r as [number, number])[1]);
    const wall = (performance.now() - t0) / 1e3;
    await rpc.shutdown();
    return { wall, pools };
  } finally {
    await cluster.close({ graceMs: 2_000 });
  }
}

const median = (xs: number[]): number => [...xs].sort((a, b) => a - b)[Math.floor(xs.length / 2)]!;

async function main(): Promise<void> {
  const n = arg("--size", 384);
  const iters = arg("--iters", 40);
  const rounds = arg("--rounds", 3);
  const cores = os.availableParallelism();
  const poolDefault = String(Math.min(8, cores));
  const spawned: number[] = [];
  const old: number[] = [];
  let pools = { spawned: [] as number[], old: [] as number[] };
  for (let r = 0; r < rounds; r++) {
    const s = await job(undefined, n, iters);
    const o = await job(poolDefault, n, iters);
    spawned.push(s.wall);
    old.push(o.wall);
    pools = { spawned: s.pools, old: o.pools };
    process.stderr.write(
      `[bench:threads] round ${r + 1}: spawned default ${s.wall.toFixed(2)} s, ${poolDefault} threads ${o.wall.toFixed(2)} s\n`,
    );
  }
  console.log(
    `master + 2 workers, ${iters} matmuls ${n}x${n} each at once, ${cores} cores, ${rounds} rounds (alternating)`,
  );
  console.log(
    `  workers at the spawned default (pools ${pools.spawned.join(", ")}): median ${median(spawned).toFixed(2)} s`,
  );
  console.log(`  workers at min(8, cores) (pools ${pools.old.join(", ")}): median ${median(old).toFixed(2)} s`);
  console.log(`  ratio (min(8, cores) / spawned default): ${(median(old) / median(spawned)).toFixed(2)}x`);
}

await main();
