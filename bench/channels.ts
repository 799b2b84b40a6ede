/**
 * `npm run bench:channels`: every viable channel moving an identity round trip between this
 * process and a real peer process, beside PyTorch RPC (TensorPipe, default channels) and, when
 * installed, grpc-js — all measured in the same invocation.
 *
 * 1. rpcSync per channel: for each config below (shm, cma, ucx over UCX's shm and tcp
 *    transports, tcp) this process becomes rank 0 of a group with one local worker, both with
 *    TPRPC_CHANNELS=<channel> (rpc.pipeInfo confirms the cpu-cpu choice); rpcSync of a shipped
 *    identity lambda with a number (0 B) or a float32 tensor of 4 KB … 400 MB; rpcAsync: 4,000
 *    calls kept 64 in flight (0 B). "shm (shared storage)" sends the tensors after
 *    Tensor.shareMemory_(), so they cross as their file (no copy; native/src/channels/shared.cc).
 *    Round trip = median per-call time over trials (plan() below);
 *    GB/s counts the bytes both ways.
 * 1b. The channel alone (--channel-level): test/native/channel_peer.ts echoes N bytes through the
 *    channel with a real peer process, descriptors over the child's stdio instead of a pipe.
 * 2. torch: bench/reference/torch_rpc.py under /usr/bin/python3 (TPRPC_TORCH_PYTHON overrides),
 *    ~15 s; --no-torch skips it. grpc-js: bench/reference/grpc_node.mjs with the devDependency
 *    @grpc/grpc-js (or one on NODE_PATH), ~1 min; --no-grpc skips it. Both get --quick too.
 * 3. Ratios: torch time / channel time, so > 1 means the channel is faster.
 *
 * Flags: --quick (fewer trials), --only shm,cma (configs by label prefix), --channel-level (1b instead of 1),
 * --worker-node-args "<flags>" (node flags for the workers too, e.g. to time both sides under a GC flag:
 * node --expose-gc --initial-old-space-size=256 --single-threaded-gc dist/bench/channels.js
 * --worker-node-args --single-threaded-gc).
 */
import type { ChannelContext } from "../sdk/channel/interface.js";
import { rpc } from "../sdk/index.js";
import { startLocalWorkers, withRpcNodeFlags } from "../sdk/rpc/launcher.js";
import { ChannelPeer, pattern } from "../test/native/channel_peer.js";
import {
  ASYNC_SIZES,
  type Figures,
  IN_FLIGHT,
  type Plan,
  SIZES,
  callsPerSecond,
  identity,
  medianRoundTrip,
  rpcAsyncRate,
  rpcSyncRoundTrip,
  runReference,
  warmUp,
  timeCell,
} from "./rpc_common.js";

interface Config {
  label: string;
  channel: string;
  env: NodeJS.ProcessEnv;
  /** rpcSync tensors in shared memory (Tensor.shareMemory_): the shm channel's zero-copy path. */
  shared?: boolean;
}

const CONFIGS: Config[] = [
  { label: "shm", channel: "shm", env: {} },
  { label: "shm (shared storage)", channel: "shm", env: {}, shared: true },
  { label: "cma", channel: "cma", env: {} },
  { label: "ucx (UCX shm)", channel: "ucx", env: { TPRPC_UCX_TLS: "shm,self" } },
  { label: "ucx (UCX tcp)", channel: "ucx", env: { TPRPC_UCX_TLS: "tcp,self", UCX_NET_DEVICES: "lo" } },
  { label: "tcp", channel: "tcp", env: {} },
];

/** (warm-up calls, trials, calls per trial) for a payload size: without --quick, the plan of reference/timing.py. */
function plan(nbytes: number, quick: boolean): Plan {
  if (nbytes <= 4_000) return quick ? [100, 7, 50] : [1000, 30, 200];
  if (nbytes <= 4_000_000) return quick ? [5, 5, 5] : [20, 20, 10];
  if (nbytes <= 40_000_000) return quick ? [2, 5, 1] : [5, 15, 1];
  return quick ? [1, 3, 1] : [2, 8, 1];
}

/** The context a channel folder registers (sdk/channel/<name>/index.ts), or why there is none. */
async function loadContext(name: string): Promise<ChannelContext | string> {
  let mod: Record<string, unknown>;
  try {
    mod = (await import(`../sdk/channel/${name}/index.js`)) as Record<string, unknown>;
  } catch (e) {
    return `sdk/channel/${name} is not there (${e instanceof Error ? e.message.split("\n")[0] : String(e)})`;
  }
  const ctx = Object.values(mod).find(
    (v): v is ChannelContext =>
      typeof v === "object" && v !== null && (v as ChannelContext).name === name && "createChannel" in v,
  );
  if (!ctx) return `sdk/channel/${name} exports no context`;
  return ctx.isViable() ? ctx : (ctx.whyNotViable?.() ?? "not viable");
}

async function measureSync(peer: ChannelPeer, nbytes: number, quick: boolean): Promise<number> {
  const x = pattern(nbytes, 7);
  const into = pattern(nbytes, 0); // NB: reused and already faulted in, as a pooled receive buffer
  const first = await peer.echo(x, into).back;
  if (
    Buffer.compare(Buffer.from(first.buffer, first.byteOffset, nbytes), Buffer.from(x.buffer, x.byteOffset, nbytes)) !==
    0
  )
    throw new Error(`the ${nbytes} B echo came back different`);
  return medianRoundTrip(() => peer.echo(x, into).back, plan(nbytes, quick));
}

function measureAsync(peer: ChannelPeer, nbytes: number, quick: boolean): Promise<number> {
  const x = pattern(nbytes, 3);
  return callsPerSecond(() => peer.echo(x).back, quick);
}

/** Runs `fn` with `env` set in this process (workers it starts inherit it), then restores the old values. */
async function withEnv<T>(env: NodeJS.ProcessEnv, fn: () => Promise<T>): Promise<T> {
  const saved: NodeJS.ProcessEnv = {};
  for (const [k, v] of Object.entries(env)) {
    saved[k] = process.env[k];
    process.env[k] = v;
  }
  try {
    return await fn();
  } finally {
    for (const [k, v] of Object.entries(saved)) {
      if (v === undefined) delete process.env[k];
      else process.env[k] = v;
    }
  }
}

function measureChannel(cfg: Config, quick: boolean): Promise<Figures | string> {
  return withEnv(cfg.env, async () => {
    let peer: ChannelPeer | undefined;
    try {
      const ctx = await loadContext(cfg.channel);
      if (typeof ctx === "string") return ctx;
      // NB: bounded: a context whose setup needs more than this harness gives (e.g. the pipe's own
      // connections) must fail here, not hang the benchmark.
      peer = await ChannelPeer.start(ctx, cfg.env, 20_000);
      const figures: Figures = { sync: new Map(), async: new Map() };
      for (const n of SIZES) {
        figures.sync.set(n, await measureSync(peer, n, quick));
        (globalThis as { gc?: () => void }).gc?.();
      }
      for (const n of ASYNC_SIZES) figures.async.set(n, await measureAsync(peer, n, quick));
      if (peer.childErrors.length) return `the peer reported: ${peer.childErrors[0]}`;
      return figures;
    } catch (e) {
      return `failed: ${e instanceof Error ? e.message : String(e)}`;
    } finally {
      await peer?.close();
    }
  });
}

/** rpcSync / rpcAsync over a group whose pipes may use only `cfg.channel`. */
function measureRpc(cfg: Config, quick: boolean, nodeArgs: readonly string[]): Promise<Figures | string> {
  return withEnv({ ...cfg.env, TPRPC_CHANNELS: cfg.channel }, async () => {
    const cluster = await startLocalWorkers({ workers: 1, nodeArgs });
    try {
      await rpc.initRpc("master", { ...cluster.initOptions, rpcTimeoutMs: 300_000, initTimeoutMs: 30_000 });
      await rpc.rpcSync("worker1", identity, [1]);
      const info = await rpc.pipeInfo("worker1");
      if (info.channels["cpu-cpu"] !== cfg.channel)
        return `the pipe chose ${String(info.channels["cpu-cpu"])} (missing: ${JSON.stringify(info.missing)})`;
      await warmUp("worker1", quick);
      const figures: Figures = { sync: new Map(), async: new Map() };
      for (const n of SIZES) {
        figures.sync.set(n, await rpcSyncRoundTrip("worker1", n, plan(n, quick), cfg.shared));
        (globalThis as { gc?: () => void }).gc?.();
      }
      // NB: a 0 B call carries no storage, so the shared-storage config has no rate of its own
      if (!cfg.shared) figures.async.set(0, await rpcAsyncRate("worker1", 0, quick));
      await rpc.shutdown({ timeoutMs: 10_000 });
      return figures;
    } catch (e) {
      return `failed: ${e instanceof Error ? e.message : String(e)}`;
    } finally {
      await rpc.shutdown({ graceful: false, timeoutMs: 5_000 }).catch(() => undefined);
      await cluster.close();
    }
  });
}

const fmtBytes = (n: number): string => (n >= 1e6 ? `${n / 1e6} MB` : n >= 1e3 ? `${n / 1e3} KB` : `${n} B`);

const cell = (s: number | undefined, nbytes: number): string => timeCell(s, nbytes, 1);

async function main(): Promise<void> {
  const argv = process.argv.slice(2);
  const quick = argv.includes("--quick");
  const channelLevel = argv.includes("--channel-level");
  const only = argv.includes("--only") ? argv[argv.indexOf("--only") + 1]!.split(",") : null;
  const nodeArgs = argv.includes("--worker-node-args")
    ? argv[argv.indexOf("--worker-node-args") + 1]!.split(/\s+/).filter(Boolean)
    : [];
  // NB: the channel-level echo sends plain buffers, so the shared-storage config is rpc-only
  const configs = CONFIGS.filter(
    (c) => (!only || only.some((o) => c.label.startsWith(o))) && !(channelLevel && c.shared),
  );
  const results = new Map<string, Figures | string>();
  for (const cfg of configs) {
    process.stderr.write(`[bench:channels] ${cfg.label} ...\n`);
    results.set(cfg.label, await (channelLevel ? measureChannel(cfg, quick) : measureRpc(cfg, quick, nodeArgs)));
  }
  const torch = argv.includes("--no-torch") ? "skipped (--no-torch)" : runReference("torch", quick);
  const grpc = argv.includes("--no-grpc") ? "skipped (--no-grpc)" : runReference("grpc", quick);
  const refs: Array<[string, { figures: Figures; header: string } | string]> = [
    ["PyTorch RPC", torch],
    ["grpc-js", grpc],
  ];

  const out: string[] = [];
  out.push(
    channelLevel
      ? "## Channels alone: identity round trip through each channel to a local peer process (median per call)"
      : "## rpcSync identity round trip per channel (TPRPC_CHANNELS), master + one local worker (median per call)",
  );
  out.push("");
  if (!channelLevel)
    out.push(
      `Node flags: this process ${process.execArgv.join(" ") || "(none)"}; workers ${withRpcNodeFlags(nodeArgs).join(" ")}`,
    );
  for (const [name, r] of refs) out.push(`${name}: ${typeof r === "string" ? `unavailable — ${r}` : r.header}`);
  out.push("");
  const cols = [...configs.map((c) => c.label), ...refs.map(([n]) => n)];
  out.push(`| size | ${cols.join(" | ")} |`);
  out.push(`|${" --- |".repeat(cols.length + 1)}`);
  const figuresOf = (col: string): Figures | undefined => {
    const r = results.get(col) ?? refs.find(([n]) => n === col)?.[1];
    return r === undefined || typeof r === "string" ? undefined : "figures" in r ? r.figures : r;
  };
  for (const n of SIZES)
    out.push(`| ${fmtBytes(n)} | ${cols.map((c) => cell(figuresOf(c)?.sync.get(n), n)).join(" | ")} |`);
  for (const n of ASYNC_SIZES)
    out.push(
      `| ${IN_FLIGHT} in flight, ${fmtBytes(n)} (calls/s) | ${cols
        .map((c) => {
          const v = figuresOf(c)?.async.get(n);
          return v === undefined ? "-" : `${Math.round(v).toLocaleString("en-US")}`;
        })
        .join(" | ")} |`,
    );
  out.push("");
  const torchF = typeof torch === "string" ? undefined : torch.figures;
  const grpcF = typeof grpc === "string" ? undefined : grpc.figures;
  out.push("Ratios (> 1: the channel is faster): round trip vs PyTorch RPC; 400 MB vs grpc-js; calls/s vs PyTorch RPC");
  for (const cfg of configs) {
    const f = figuresOf(cfg.label);
    if (!f) {
      out.push(`- ${cfg.label}: ${String(results.get(cfg.label))}`);
      continue;
    }
    const parts = SIZES.map((n) => {
      const t = torchF?.sync.get(n);
      return `${fmtBytes(n)} ${t ? (t / f.sync.get(n)!).toFixed(2) + "x" : "-"}`;
    });
    const g = grpcF?.sync.get(400_000_000);
    parts.push(`grpc-js 400 MB ${g ? (g / f.sync.get(400_000_000)!).toFixed(1) + "x" : "-"}`);
    for (const n of ASYNC_SIZES) {
      const t = torchF?.async.get(n);
      const v = f.async.get(n);
      if (v !== undefined) parts.push(`${IN_FLIGHT} in flight ${fmtBytes(n)} ${t ? (v / t).toFixed(2) + "x" : "-"}`);
    }
    out.push(`- ${cfg.label}: ${parts.join(", ")}`);
  }
  process.stdout.write(out.join("\n") + "\n");
}

main().catch((e: unknown) => {
  process.stderr.write(`bench:channels failed: ${e instanceof Error ? (e.stack ?? e.message) : String(e)}\n`);
  process.exitCode = 1;
});
