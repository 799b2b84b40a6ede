/**
 * The RPC section of `npm run bench`: tprpc over TCP between two local processes beside PyTorch RPC
 * (TensorPipe) measured in the same invocation — issue 4's acceptance figures.
 *
 * 1. torch: bench/reference/torch_rpc.py (found from the repository root) runs under /usr/bin/python3
 *    (TPRPC_TORCH_PYTHON overrides) with TensorPipe's default transports (shm + cma on one host), at the
 *    same sizes and 64 in flight; its result lines are parsed. Missing: "PyTorch RPC reference unavailable".
 *    It takes ~15 s of the section (a few with --quick, which it gets too); --no-torch skips it.
 *    Then once more pinned to TensorPipe's TCP transport and basic channel (`--transports uv
 *    --channels basic`), "torch/tcp": the same wire as tprpc's here.
 * 2. tprpc: this process is the master (rank 0), one worker is started with startLocalWorkers, and
 *    the master allows only the tcp channel (options.channels), so tensors move over TCP lanes; the
 *    target is a shipped identity lambda `(x) => x` (compiled once per peer), the argument a number
 *    (0 B) or a float32 tensor of 4 KB … 400 MB (decimal, as torch_rpc.py). rpcSync round trips:
 *    warm-up, then trials of a batch of calls, per-call time = median over trials (as reference/timing.py,
 *    with fewer repetitions so the section stays short); GB/s counts the bytes both ways.
 *    rpcAsync: 4,000 calls kept 64 in flight, calls/s = median over trials.
 * 3. raw tcp (./tcp_floor.ts): the same sizes echoed over one loopback socket with no RPC, the floor.
 * 4. Ratios: latency torch/tprpc and throughput tprpc/torch, so > 1 means tprpc is faster; "ratio"
 *    against TensorPipe's default, "ratio/tcp" against TensorPipe over TCP.
 */
import { rpc } from "../sdk/index.js";
import { startLocalWorkers } from "../sdk/rpc/launcher.js";
import {
  ASYNC_SIZES,
  type Figures,
  IN_FLIGHT,
  fullGc,
  type Plan,
  SIZES,
  identity,
  now,
  payload,
  rpcAsyncRate,
  rpcSyncRoundTrip,
  runReference,
  timeCell,
  warmUp,
} from "./rpc_common.js";
import { tcpFloor } from "./tcp_floor.js";

/** (warm-up calls, trials, calls per trial) for a payload size, as reference/timing.py's plan() but shorter. */
function plan(nbytes: number, quick: boolean): Plan {
  if (nbytes <= 4_000) return quick ? [100, 7, 50] : [300, 15, 100];
  if (nbytes <= 4_000_000) return quick ? [3, 5, 4] : [5, 10, 5];
  if (nbytes <= 40_000_000) return quick ? [2, 3, 1] : [3, 7, 1];
  return quick ? [1, 2, 1] : [1, 3, 1];
}

let pipeLine = "";

async function runTprpc(quick: boolean): Promise<Figures> {
  // NB: the worker, too, offers (and so probes) only tcp
  const cluster = await startLocalWorkers({ workers: 1, env: { TPRPC_CHANNELS: "tcp" } });
  try {
    // NB: issue 4's figures are over TCP: the master allows only the tcp channel, so the pipe picks it
    // even where shm/cma are viable (npm run bench:channels compares those).
    await rpc.initRpc("master", {
      ...cluster.initOptions,
      rpcTimeoutMs: 300_000,
      initTimeoutMs: 30_000,
      channels: "tcp",
    });
    const info = await rpc.pipeInfo("worker1");
    pipeLine = `pipe to worker1: transport ${info.transport}, cpu-cpu channel ${info.channels["cpu-cpu"] ?? "none"}`;
    await warmUp("worker1", quick);
    const figures: Figures = { sync: new Map(), async: new Map() };
    for (const n of SIZES) {
      figures.sync.set(n, await rpcSyncRoundTrip("worker1", n, plan(n, quick)));
      fullGc();
    }
    for (const n of ASYNC_SIZES) figures.async.set(n, await rpcAsyncRate("worker1", n, quick));
    // NB: a short bound: Agent.shutdown leaves its bound's timer armed, holding the process open that long.
    await rpc.shutdown({ timeoutMs: 10_000 });
    return figures;
  } finally {
    await rpc.shutdown({ graceful: false, timeoutMs: 5_000 }).catch(() => undefined);
    await cluster.close();
  }
}

const fmtBytes = (n: number): string =>
  n === 0 ? "0 B (a number)" : n >= 1e6 ? `${n / 1e6} MB` : n >= 1e3 ? `${n / 1e3} KB` : `${n} B`;

const cell = (s: number | undefined, nbytes: number): string => timeCell(s, nbytes, 2);

const fmtRatio = (r: number | undefined): string => (r === undefined ? "-" : `${r.toFixed(2)}x`);

/** Prints the RPC section (after the tensor section of run.ts). */
export async function rpcBench(quick: boolean): Promise<void> {
  const wall = now();
  const noTorch = process.argv.includes("--no-torch");
  const torch = noTorch ? "skipped (--no-torch)" : runReference("torch", quick);
  const torchTcp = noTorch ? "skipped (--no-torch)" : runReference("torch-tcp", quick);
  const torchWall = now() - wall;
  const ours = await runTprpc(quick);
  const floor = await tcpFloor(SIZES, (n) => plan(n, quick));
  const t = typeof torch === "string" ? undefined : torch.figures;
  const tt = typeof torchTcp === "string" ? undefined : torchTcp.figures;

  console.log("");
  console.log("tprpc bench: RPC between two local processes, tprpc over TCP vs PyTorch RPC, measured in this run");
  console.log(
    "tprpc: this process (rank 0) + 1 worker (startLocalWorkers), shipped identity (x) => x, float32 tensors",
  );
  console.log(pipeLine);
  console.log(`master node flags: ${process.execArgv.join(" ") || "none (as a plain node master.js)"}`);
  if (typeof torch === "string") console.log(`PyTorch RPC reference unavailable (${torch})`);
  else console.log(`PyTorch RPC: ${torch.header}; TensorPipe default = shm transport + cma channel on one host`);
  if (typeof torchTcp === "string") console.log(`PyTorch RPC over TCP unavailable (${torchTcp})`);
  else console.log("torch/tcp: the same script with TensorPipe pinned to its uv (TCP) transport and basic channel");
  console.log(
    "raw tcp: the same bytes echoed over one loopback socket by two Node processes, no RPC (the wire's floor)",
  );
  console.log("ratios: > 1 means tprpc is faster (latency torch/tprpc, throughput tprpc/torch)");
  console.log("");
  const head =
    "rpcSync identity round trip".padEnd(30) +
    ["tprpc", "torch", "torch/tcp", "raw tcp"].map((h) => h.padStart(26)).join("") +
    ["ratio", "ratio/tcp"].map((h) => h.padStart(10)).join("");
  console.log(head);
  console.log("-".repeat(head.length));
  for (const n of SIZES) {
    const o = ours.sync.get(n);
    const r = t?.sync.get(n);
    const rt = tt?.sync.get(n);
    console.log(
      fmtBytes(n).padEnd(30) +
        [o, r, rt, floor.get(n)].map((x) => cell(x, n).padStart(26)).join("") +
        [r, rt].map((x) => fmtRatio(o && x ? x / o : undefined).padStart(10)).join(""),
    );
  }
  console.log("");
  for (const n of ASYNC_SIZES) {
    const o = ours.async.get(n);
    const r = t?.async.get(n);
    const rt = tt?.async.get(n);
    console.log(
      `rpcAsync identity, ${IN_FLIGHT} in flight, ${fmtBytes(n)}`.padEnd(50) +
        [o, r, rt].map((x) => `${x?.toFixed(0) ?? "-"} calls/s`.padStart(16)).join("") +
        [r, rt].map((x) => fmtRatio(o && x ? o / x : undefined).padStart(10)).join(""),
    );
  }
  console.log("");
  console.log(
    `RPC section time ${(now() - wall).toFixed(1)} s (PyTorch reference ${torchWall.toFixed(1)} s of it)${quick ? ", --quick: fewer repetitions" : ""}`,
  );
}
