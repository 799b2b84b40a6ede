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
 * 4. --plain (issue 23, item 7): the same configs once more with the master started as users start
 *    theirs, plain `node` with no flags (no --expose-gc, no --initial-old-space-size, NODE_OPTIONS
 *    cleared): a child process runs them and hands back its figures, printed as "<label> (plain master)"
 *    columns. Every column also counts the master's mark-compacts (PerformanceObserver "gc") per size
 *    (unforced ones): what the flag changes is that count.
 * 5. --load N (issue 23, item 6): N busy processes (bench/load.ts: tprpc matmuls, one thread each)
 *    run beside every measurement, PyTorch RPC's and grpc-js's included (the shm config is measured
 *    once more before the load starts, for its loaded / quiet ratio); the references then get
 *    (N + 1) × their usual time bound, and one that still times out is killed with its whole
 *    process group (spawn_group.ts spawnInGroup).
 *
 * Flags: --quick (fewer trials), --only shm,cma (configs by label prefix), --channel-level (1b instead of 1),
 * --worker-node-args "<flags>" (node flags for the workers too, e.g. to time both sides under a GC flag:
 * node --expose-gc --initial-old-space-size=256 --single-threaded-gc dist/bench/channels.js
 * --worker-node-args --single-threaded-gc).
 */
import { spawn } from "node:child_process";
import { PerformanceObserver, constants as perfConstants } from "node:perf_hooks";
import { fileURLToPath } from "node:url";
import type { ChannelContext } from "../sdk/channel/interface.js";
import { rpc } from "../sdk/index.js";
import { startLocalWorkers, withRpcNodeFlags } from "../sdk/rpc/launcher.js";
import { ChannelPeer, pattern } from "../test/native/channel_peer.js";
import { startLoad } from "./load.js";
import { machineLine } from "./machine.js";
import {
  ASYNC_SIZES,
  type Figures,
  IN_FLIGHT,
  type Plan,
  SIZES,
  callsPerSecond,
  fullGc,
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
        fullGc();
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
function measureRpc(
  cfg: Config,
  quick: boolean,
  nodeArgs: readonly string[],
  gcs: Map<number, number>,
): Promise<Figures | string> {
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
        const before = await majorGcsSoFar();
        figures.sync.set(n, await rpcSyncRoundTrip("worker1", n, plan(n, quick), cfg.shared));
        gcs.set(n, (await majorGcsSoFar()) - before);
        fullGc();
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

let majors = 0;
let observer: PerformanceObserver | undefined;

/**
 * Mark-compacts V8 chose to run in this process so far (major GCs, not forced ones such as fullGc()'s,
 * seen by a PerformanceObserver, whose entries arrive a task late: hence the wait).
 */
async function majorGcsSoFar(): Promise<number> {
  if (!observer) {
    observer = new PerformanceObserver((list) => {
      for (const e of list.getEntries()) {
        const d = (e as unknown as { detail?: { kind?: number; flags?: number } }).detail;
        const forced = ((d?.flags ?? 0) & perfConstants.NODE_PERFORMANCE_GC_FLAGS_FORCED) !== 0;
        if (d?.kind === perfConstants.NODE_PERFORMANCE_GC_MAJOR && !forced) majors++;
      }
    });
    observer.observe({ entryTypes: ["gc"] });
  }
  await new Promise((resolve) => setTimeout(resolve, 0));
  return majors;
}

type Serialized = { sync: [number, number][]; async: [number, number][]; majorGcs: [number, number][] } | string;

/**
 * --plain: runs `labels` in a child master started with no node flags and NODE_OPTIONS cleared
 * (what `node master.js` gets), bounded by `timeoutMs`; its figures, or why there are none.
 */
function runPlainMaster(labels: string[], quick: boolean, timeoutMs: number): Promise<Map<string, Serialized>> {
  const args = [fileURLToPath(import.meta.url), "--emit-json", "--only", labels.join(","), "--no-torch", "--no-grpc"];
  if (quick) args.push("--quick");
  const env = { ...process.env };
  delete env.NODE_OPTIONS;
  return new Promise((resolve) => {
    const child = spawn(process.execPath, args, { env, stdio: ["ignore", "pipe", "inherit"] });
    let out = "";
    child.stdout.on("data", (d: Buffer) => (out += d.toString()));
    const timer = setTimeout(() => child.kill("SIGKILL"), timeoutMs);
    child.once("exit", (code, signal) => {
      clearTimeout(timer);
      const line = out.split("\n").find((l) => l.startsWith("JSON "));
      if (line) return resolve(new Map(Object.entries(JSON.parse(line.slice(5)) as Record<string, Serialized>)));
      const why = `the plain master ended (${signal ?? code}) without figures`;
      resolve(new Map(labels.map((l) => [l, why])));
    });
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
  const emitJson = argv.includes("--emit-json");
  const plain = argv.includes("--plain") && !channelLevel && !emitJson;
  const loadN = argv.includes("--load") ? Number(argv[argv.indexOf("--load") + 1]) : 0;
  if (!Number.isInteger(loadN) || loadN < 0) throw new Error(`--load wants a count of processes, got ${loadN}`);
  // NB: before the load and the workers start: the copy speed the absolute figures rest on
  const machine = emitJson ? "" : machineLine();
  // NB: under --load, the shm config first once without the load: its quiet figure, measured in this run
  const quiet = new Map<string, Figures | string>();
  if (loadN > 0 && !channelLevel && !emitJson)
    for (const cfg of configs.filter((c) => c.label === "shm")) {
      process.stderr.write(`[bench:channels] ${cfg.label}, quiet (before the load starts) ...\n`);
      quiet.set(cfg.label, await measureRpc(cfg, quick, nodeArgs, new Map()));
    }
  const load = await startLoad(loadN);
  const results = new Map<string, Figures | string>();
  const majorGcs = new Map<string, Map<number, number>>();
  let torch: { figures: Figures; header: string } | string;
  let grpc: { figures: Figures; header: string } | string;
  try {
    for (const cfg of configs) {
      process.stderr.write(`[bench:channels] ${cfg.label} ...\n`);
      const gcs = new Map<number, number>();
      results.set(cfg.label, await (channelLevel ? measureChannel(cfg, quick) : measureRpc(cfg, quick, nodeArgs, gcs)));
      majorGcs.set(cfg.label, gcs);
    }
    if (emitJson) {
      const ser = (r: Figures | string, gcs: Map<number, number>): Serialized =>
        typeof r === "string" ? r : { sync: [...r.sync], async: [...r.async], majorGcs: [...gcs] };
      const obj = Object.fromEntries(configs.map((c) => [c.label, ser(results.get(c.label)!, majorGcs.get(c.label)!)]));
      process.stdout.write(`JSON ${JSON.stringify(obj)}\n`);
      return;
    }
    if (plain) {
      process.stderr.write(`[bench:channels] the same with a plain master (no node flags) ...\n`);
      const plainRuns = await runPlainMaster(
        configs.map((c) => c.label),
        quick,
        600_000 * (loadN + 1),
      );
      for (const cfg of [...configs]) {
        const r = plainRuns.get(cfg.label) ?? "no figures";
        const label = `${cfg.label} (plain master)`;
        configs.push({ ...cfg, label });
        results.set(label, typeof r === "string" ? r : { sync: new Map(r.sync), async: new Map(r.async) });
        if (typeof r !== "string") majorGcs.set(label, new Map(r.majorGcs));
      }
    }
    // NB: under --load the references get (N + 1)× the time: they must finish to be compared
    const bound = 300_000 * (loadN + 1);
    torch = argv.includes("--no-torch") ? "skipped (--no-torch)" : runReference("torch", quick, bound);
    grpc = argv.includes("--no-grpc") ? "skipped (--no-grpc)" : runReference("grpc", quick, bound);
  } finally {
    await load.stop();
  }
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
  out.push(machine);
  if (!channelLevel)
    out.push(
      `Node flags: this process ${process.execArgv.join(" ") || "(none)"}; workers ${withRpcNodeFlags(nodeArgs).join(" ")}`,
    );
  for (const [name, r] of refs) out.push(`${name}: ${typeof r === "string" ? `unavailable — ${r}` : r.header}`);
  out.push(
    loadN
      ? `Under load: ${loadN} busy process(es) (256x256 matmul + softmax + add, 1 tprpc thread each) beside every column, the references' included`
      : "No load beside the measurements (--load N adds N busy processes)",
  );
  if (!channelLevel) {
    out.push(
      "Mark-compacts V8 ran in the master while each size was timed (not counting the bench's own collections):",
    );
    for (const c of configs) {
      const g = majorGcs.get(c.label);
      if (g?.size) out.push(`- ${c.label}: ${[...g].map(([n, k]) => `${fmtBytes(n)} ${k}`).join(", ")}`);
    }
  }
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
  // Issue 23's acceptance lines, from the figures above
  const acceptance: string[] = [];
  for (const [label, q] of quiet) {
    const f = figuresOf(label);
    if (typeof q === "string" || !f) continue;
    const parts = [4_000_000, 40_000_000].map((n) => {
      const t = torchF?.sync.get(n);
      const vsTorch = t ? `, ${(t / f.sync.get(n)!).toFixed(2)}x PyTorch RPC's under the same load` : "";
      return `${fmtBytes(n)} ${(f.sync.get(n)! / q.sync.get(n)!).toFixed(2)}x its quiet figure${vsTorch}`;
    });
    acceptance.push(`- ${label} under --load ${loadN} (goal: <= 2x quiet, ahead of PyTorch RPC): ${parts.join("; ")}`);
  }
  for (const cfg of configs.filter((c) => c.label.endsWith("(plain master)") && !c.shared)) {
    const f = figuresOf(cfg.label);
    if (!f) continue;
    const t = torchF?.sync.get(4_000_000);
    const big = f.sync.get(400_000_000);
    acceptance.push(
      `- ${cfg.label} (goal: 4 MB ahead of PyTorch RPC, 400 MB <= 100 ms): 4 MB ${t ? (t / f.sync.get(4_000_000)!).toFixed(2) + "x PyTorch RPC's" : "-"}; 400 MB ${big === undefined ? "-" : (big * 1e3).toFixed(1) + " ms"} (a round trip copies 400 MB at least twice: see the memcpy figure above)`,
    );
  }
  if (acceptance.length) out.push("", "Acceptance (issue 23):", ...acceptance);
  process.stdout.write(out.join("\n") + "\n");
}

main().catch((e: unknown) => {
  process.stderr.write(`bench:channels failed: ${e instanceof Error ? (e.stack ?? e.message) : String(e)}\n`);
  process.exitCode = 1;
});
