/**
 * `npm run bench:channels`: every viable channel moving an identity round trip between this
 * process and a real peer process, beside PyTorch RPC (TensorPipe, default channels) and, when
 * installed, grpc-js — all measured in the same invocation.
 *
 * 1. rpcSync per channel: for each config below (shm, cma, ucx over UCX's shm and tcp
 *    transports, tcp) this process becomes rank 0 of a group with one local worker, both with
 *    TPRPC_CHANNELS=<channel> (rpc.pipeInfo confirms the cpu-cpu choice); rpcSync of a shipped
 *    identity lambda with a number (0 B) or a float32 tensor of 4 KB … 400 MB; rpcAsync: 4,000
 *    calls kept 64 in flight (0 B). Round trip = median per-call time over trials (plan() below);
 *    GB/s counts the bytes both ways.
 * 1b. The channel alone (--channel-level): test/bench/channel_peer.ts echoes N bytes through the
 *    channel with a real peer process, descriptors over the child's stdio instead of a pipe.
 * 2. torch: ../shared/bench/torch_rpc.py under /usr/bin/python3 (TPRPC_TORCH_PYTHON overrides),
 *    ~50 s; --no-torch skips it. grpc-js: ../shared/bench/grpc_node.js when @grpc/grpc-js
 *    resolves from NODE_PATH or /tmp/anchors-npm; --no-grpc skips it.
 * 3. Ratios: torch time / channel time, so > 1 means the channel is faster.
 *
 * Flags: --quick (fewer trials), --only shm,cma (configs by label prefix), --channel-level (1b instead of 1).
 */
import { spawnSync } from "node:child_process";
import fs from "node:fs";
import path from "node:path";
import { fileURLToPath } from "node:url";
import type { ChannelContext } from "../../sdk/channel/interface.js";
import { Tensor, ones, rpc } from "../../sdk/index.js";
import { startLocalWorkers } from "../../sdk/rpc/launcher.js";
import { ChannelPeer, pattern } from "./channel_peer.js";

const SIZES = [0, 4_000, 4_000_000, 40_000_000, 400_000_000];
const ASYNC_SIZES = [0, 4_000];
const IN_FLIGHT = 64;
const ASYNC_CALLS = 4_000;

interface Config {
  label: string;
  channel: string;
  env: NodeJS.ProcessEnv;
}

const CONFIGS: Config[] = [
  { label: "shm", channel: "shm", env: {} },
  { label: "cma", channel: "cma", env: {} },
  { label: "ucx (UCX shm)", channel: "ucx", env: { TPRPC_UCX_TLS: "shm,self" } },
  { label: "ucx (UCX tcp)", channel: "ucx", env: { TPRPC_UCX_TLS: "tcp,self", UCX_NET_DEVICES: "lo" } },
  { label: "tcp", channel: "tcp", env: {} },
];

interface Figures {
  sync: Map<number, number>;
  async: Map<number, number>;
}

const now = (): number => Number(process.hrtime.bigint()) / 1e9;

function median(xs: number[]): number {
  const s = [...xs].sort((a, b) => a - b);
  const m = s.length >> 1;
  return s.length % 2 ? s[m]! : (s[m - 1]! + s[m]!) / 2;
}

/** (warm-up calls, trials, calls per trial) for a payload size. */
function plan(nbytes: number, quick: boolean): [number, number, number] {
  if (nbytes <= 4_000) return quick ? [100, 7, 50] : [300, 15, 100];
  if (nbytes <= 4_000_000) return quick ? [5, 5, 5] : [10, 10, 10];
  if (nbytes <= 40_000_000) return quick ? [2, 5, 1] : [3, 9, 1];
  return quick ? [1, 3, 1] : [2, 5, 1];
}

function repoRoot(): string {
  let dir = path.dirname(fileURLToPath(import.meta.url));
  for (;;) {
    const pkg = path.join(dir, "package.json");
    if (fs.existsSync(pkg) && (JSON.parse(fs.readFileSync(pkg, "utf8")) as { name?: string }).name === "tprpc")
      return dir;
    const up = path.dirname(dir);
    if (up === dir) throw new Error("bench:channels: no tprpc package.json above " + dir);
    dir = up;
  }
}

/** The context a channel folder registers (sdk/channel/<name>/index.ts), or why there is none. */
async function loadContext(name: string): Promise<ChannelContext | string> {
  let mod: Record<string, unknown>;
  try {
    mod = (await import(`../../sdk/channel/${name}/index.js`)) as Record<string, unknown>;
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
  const [warm, trials, batch] = plan(nbytes, quick);
  for (let i = 1; i < warm; i++) await peer.echo(x, into).back;
  const per: number[] = [];
  for (let t = 0; t < trials; t++) {
    const t0 = now();
    for (let i = 0; i < batch; i++) await peer.echo(x, into).back;
    per.push((now() - t0) / batch);
  }
  return median(per);
}

async function measureAsync(peer: ChannelPeer, nbytes: number, quick: boolean): Promise<number> {
  const x = pattern(nbytes, 3);
  const run = async (): Promise<number> => {
    let issued = 0;
    const lane = async (): Promise<void> => {
      while (issued < ASYNC_CALLS) {
        issued++;
        await peer.echo(x).back;
      }
    };
    const t0 = now();
    await Promise.all(Array.from({ length: IN_FLIGHT }, lane));
    return ASYNC_CALLS / (now() - t0);
  };
  await run();
  const rates: number[] = [];
  for (let t = 0; t < (quick ? 3 : 5); t++) rates.push(await run());
  return median(rates);
}

async function measureChannel(cfg: Config, quick: boolean): Promise<Figures | string> {
  const saved: NodeJS.ProcessEnv = {};
  for (const [k, v] of Object.entries(cfg.env)) {
    saved[k] = process.env[k];
    process.env[k] = v;
  }
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
    for (const [k, v] of Object.entries(saved)) {
      if (v === undefined) delete process.env[k];
      else process.env[k] = v;
    }
  }
}

const identity = (x: unknown): unknown => x;

function payload(nbytes: number): number | Tensor {
  return nbytes === 0 ? 1 : ones([nbytes / 4], { dtype: "float32" });
}

async function rpcSyncTime(to: string, nbytes: number, quick: boolean): Promise<number> {
  const x = payload(nbytes);
  const back = await rpc.rpcSync(to, identity, [x]);
  if (x instanceof Tensor ? !(back instanceof Tensor) || back.numel() !== x.numel() : back !== x)
    throw new Error(`identity returned something else for ${nbytes} B`);
  const [warm, trials, batch] = plan(nbytes, quick);
  for (let i = 1; i < warm; i++) await rpc.rpcSync(to, identity, [x]);
  const per: number[] = [];
  for (let t = 0; t < trials; t++) {
    const t0 = now();
    for (let i = 0; i < batch; i++) await rpc.rpcSync(to, identity, [x]);
    per.push((now() - t0) / batch);
  }
  return median(per);
}

async function rpcAsyncRate(to: string, nbytes: number, quick: boolean): Promise<number> {
  const x = payload(nbytes);
  const run = async (): Promise<number> => {
    let issued = 0;
    const lane = async (): Promise<void> => {
      while (issued < ASYNC_CALLS) {
        issued++;
        await rpc.rpcAsync(to, identity, [x]);
      }
    };
    const t0 = now();
    await Promise.all(Array.from({ length: IN_FLIGHT }, lane));
    return ASYNC_CALLS / (now() - t0);
  };
  await run();
  const rates: number[] = [];
  for (let t = 0; t < (quick ? 3 : 5); t++) rates.push(await run());
  return median(rates);
}

/** rpcSync / rpcAsync over a group whose pipes may use only `cfg.channel`. */
async function measureRpc(cfg: Config, quick: boolean): Promise<Figures | string> {
  const env: NodeJS.ProcessEnv = { ...cfg.env, TPRPC_CHANNELS: cfg.channel };
  const saved: NodeJS.ProcessEnv = {};
  for (const [k, v] of Object.entries(env)) {
    saved[k] = process.env[k];
    process.env[k] = v;
  }
  const cluster = await startLocalWorkers({ workers: 1 });
  try {
    await rpc.initRpc("master", { ...cluster.initOptions, rpcTimeoutMs: 300_000, initTimeoutMs: 30_000 });
    await rpc.rpcSync("worker1", identity, [1]);
    const info = await rpc.pipeInfo("worker1");
    if (info.channels["cpu-cpu"] !== cfg.channel)
      return `the pipe chose ${String(info.channels["cpu-cpu"])} (missing: ${JSON.stringify(info.missing)})`;
    const figures: Figures = { sync: new Map(), async: new Map() };
    for (const n of SIZES) {
      figures.sync.set(n, await rpcSyncTime("worker1", n, quick));
      (globalThis as { gc?: () => void }).gc?.();
    }
    figures.async.set(0, await rpcAsyncRate("worker1", 0, quick));
    await rpc.shutdown({ timeoutMs: 10_000 });
    return figures;
  } catch (e) {
    return `failed: ${e instanceof Error ? e.message : String(e)}`;
  } finally {
    await rpc.shutdown({ graceful: false, timeoutMs: 5_000 }).catch(() => undefined);
    await cluster.close();
    for (const [k, v] of Object.entries(saved)) {
      if (v === undefined) delete process.env[k];
      else process.env[k] = v;
    }
  }
}

function parseTime(v: string, unit: string): number {
  return Number(v) * (unit === "us" ? 1e-6 : unit === "ms" ? 1e-3 : 1);
}

/** Runs torch_rpc.py (or grpc_node.js) and parses its lines; a string says why it is unavailable. */
function runReference(kind: "torch" | "grpc"): { figures: Figures; header: string } | string {
  const dir = path.resolve(repoRoot(), "../shared/bench");
  const script = path.join(dir, kind === "torch" ? "torch_rpc.py" : "grpc_node.js");
  if (!fs.existsSync(script)) return `${script} not found beside the repository`;
  let r;
  if (kind === "torch") {
    const python = process.env.TPRPC_TORCH_PYTHON ?? "/usr/bin/python3";
    r = spawnSync(python, [script, "--sizes", SIZES.join(","), "--ops-sizes", ""], {
      encoding: "utf8",
      timeout: 300_000,
    });
  } else {
    const nodePath = [process.env.NODE_PATH, "/tmp/anchors-npm/node_modules"].filter(Boolean).join(":");
    const found = nodePath.split(":").some((p) => fs.existsSync(path.join(p, "@grpc", "grpc-js")));
    if (!found) return "@grpc/grpc-js is not installed (see ../shared/bench/README.md)";
    r = spawnSync(process.execPath, [script, "--sizes", SIZES.join(",")], {
      encoding: "utf8",
      timeout: 300_000,
      env: { ...process.env, NODE_PATH: nodePath },
    });
  }
  if (r.error) return r.error.message;
  if (r.status !== 0) return `exited ${r.status}: ${(r.stderr ?? "").trim().slice(-300)}`;
  const figures: Figures = { sync: new Map(), async: new Map() };
  let header = "";
  for (const line of r.stdout.split("\n")) {
    if (line.startsWith("# ")) header = line.slice(2);
    const s = /^(?:rpc_sync identity|grpc-js unary echo)\s+([\d,]+) B\s+([\d.]+) (us|ms|s)\b/.exec(line);
    if (s) figures.sync.set(Number(s[1]!.replace(/,/g, "")), parseTime(s[2]!, s[3]!));
    const a = /^rpc_async identity, (\d+) in flight\s+([\d,]+) B\s+([\d.]+) calls\/s/.exec(line);
    if (a && Number(a[1]) === IN_FLIGHT) figures.async.set(Number(a[2]!.replace(/,/g, "")), Number(a[3]));
  }
  if (figures.sync.size === 0) return `no result lines in its output: ${r.stdout.slice(0, 200)}`;
  return { figures, header };
}

const fmtTime = (s: number): string =>
  s < 1e-3 ? `${(s * 1e6).toFixed(1)} us` : s < 1 ? `${(s * 1e3).toFixed(2)} ms` : `${s.toFixed(3)} s`;
const fmtBytes = (n: number): string => (n >= 1e6 ? `${n / 1e6} MB` : n >= 1e3 ? `${n / 1e3} KB` : `${n} B`);

function cell(s: number | undefined, nbytes: number): string {
  if (s === undefined) return "-";
  return nbytes >= 4_000_000 ? `${fmtTime(s)} (${((2 * nbytes) / s / 1e9).toFixed(1)} GB/s)` : fmtTime(s);
}

async function main(): Promise<void> {
  const argv = process.argv.slice(2);
  const quick = argv.includes("--quick");
  const channelLevel = argv.includes("--channel-level");
  const only = argv.includes("--only") ? argv[argv.indexOf("--only") + 1]!.split(",") : null;
  const configs = CONFIGS.filter((c) => !only || only.some((o) => c.label.startsWith(o)));
  const results = new Map<string, Figures | string>();
  for (const cfg of configs) {
    process.stderr.write(`[bench:channels] ${cfg.label} ...\n`);
    results.set(cfg.label, await (channelLevel ? measureChannel(cfg, quick) : measureRpc(cfg, quick)));
  }
  const torch = argv.includes("--no-torch") ? "skipped (--no-torch)" : runReference("torch");
  const grpc = argv.includes("--no-grpc") ? "skipped (--no-grpc)" : runReference("grpc");
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
