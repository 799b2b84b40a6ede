/**
 * Starts N local worker processes for a master (rank 0) in this process and
 * tracks them so none outlives it — what a notebook's
 * `tprpc.cluster.start({ workers: 2 })` builds on:
 *
 *   const cluster = await startLocalWorkers({ workers: 2 });
 *   await rpc.initRpc("master", cluster.initOptions);   // rank 0, worldSize 3, initMethod, secret
 *   await rpc.rpcSync("worker1", tprpc.add, [x, 1]);
 *   await rpc.shutdown();                                // the workers leave and exit 0
 *   await cluster.close();                               // kills any worker still running
 *
 * Each worker is `node bin/tprpc.mjs worker --name workerK --rank K --world-size N+1
 * --init-method tcp://…` with TPRPC_SECRET in its env. How none is ever orphaned:
 * 1. `cluster.close()` sends SIGTERM, then SIGKILL after a grace period, and awaits every exit.
 * 2. This process's 'exit' kills the workers still running (synchronously, SIGKILL).
 * 3. SIGTERM / SIGHUP to this process kill the workers, then take their default course
 *    (terminate) unless someone else listens for them.
 * 4. A worker exits by itself when the master's store connection breaks (bin/tprpc.mjs), and,
 *    before it has joined, when its stdin pipe from this process closes (a watchdog preloaded
 *    with --import): so even a SIGKILLed master leaves no workers behind.
 * Workers ignore SIGINT (a notebook's interrupt reaches the kernel's whole process group).
 */
import { type ChildProcess, spawn } from "node:child_process";
import fs from "node:fs";
import net from "node:net";
import os from "node:os";
import path from "node:path";
import { fileURLToPath } from "node:url";
import { ValueError } from "../errors/index.js";
import { generateSecret } from "../transport/auth.js";
import { debug } from "../util/index.js";

/** Where a worker's output goes: "forward" (default) prefixes each line with the worker's name. */
export type WorkerStdio = "forward" | "inherit" | "ignore" | "pipe";

export interface LocalWorkersOptions {
  /** How many workers (named worker1 … workerN), or their names; ranks 1 … N in that order. */
  workers: number | readonly string[];
  /** The store's address, "tcp://host:port"; default: a free port on 127.0.0.1. */
  initMethod?: string;
  /** The group secret; default: env TPRPC_SECRET, else a generated one. */
  secret?: string;
  /** Extra env variables for the workers (over this process's env). */
  env?: Readonly<Record<string, string | undefined>>;
  cwd?: string;
  /**
   * Extra node flags for the workers, e.g. ["--max-old-space-size=8192"]. Workers also get
   * RPC_NODE_FLAGS unless these (or NODE_OPTIONS) already set that flag.
   */
  nodeArgs?: readonly string[];
  /** Default "forward": each output line goes to `onOutput`, or to this process's stream as "[workerK] line". */
  stdio?: WorkerStdio;
  /** With stdio "forward": receives each line instead of this process's stdout / stderr. */
  onOutput?: (worker: string, stream: "stdout" | "stderr", line: string) => void;
  /** close(): ms between SIGTERM and SIGKILL (default 3 000). */
  closeGraceMs?: number;
}

/**
 * V8 flags for processes that receive tensors over RPC (the workers started here, the notebook
 * kernel, the benchmarks). NB: V8 counts the ArrayBuffers allocated since its last mark-compact
 * against the old generation's limit, which in a small heap (a worker's is ~8 MB, limit ~20 MB) is
 * crossed after three received 4 MB tensors: every few messages a full mark-compact (measured: ~25
 * per 100 round trips of 4 MB per process, 3–4 ms of each 7 ms round trip). With a 256 MB initial
 * old-space limit the dead receive buffers are freed by cheap scavenges instead (1 mark-compact in
 * 1,000 round trips). It only moves the first collection's trigger; it reserves no memory.
 */
export const RPC_NODE_FLAGS: readonly string[] = ["--initial-old-space-size=256"];

/** `args` plus each RPC_NODE_FLAGS flag that neither `args` nor env NODE_OPTIONS sets already. */
export function withRpcNodeFlags(args: readonly string[], env: NodeJS.ProcessEnv = process.env): string[] {
  const given = [...args, ...(env.NODE_OPTIONS ?? "").split(/\s+/)].map((a) => a.split("=")[0]!.replace(/_/g, "-"));
  return [...RPC_NODE_FLAGS.filter((f) => !given.includes(f.split("=")[0]!)), ...args];
}

/**
 * The kernel threads (TPRPC_NUM_THREADS) for each of `localProcesses` processes that tprpc starts
 * on this host, as torchrun's OMP_NUM_THREADS=1: max(1, floor(cores / localProcesses)), so that a
 * master and its local workers together run about one compute thread per core instead of
 * min(8, cores) each. Returns `env` with it set, unless TPRPC_NUM_THREADS is set there already
 * (the user's choice wins).
 */
export function withKernelThreads(env: NodeJS.ProcessEnv, localProcesses: number): NodeJS.ProcessEnv {
  if (env.TPRPC_NUM_THREADS !== undefined && env.TPRPC_NUM_THREADS !== "") return env;
  const cores = os.availableParallelism?.() ?? os.cpus().length;
  const n = Math.max(1, Math.floor(cores / Math.max(1, localProcesses)));
  return { ...env, TPRPC_NUM_THREADS: String(n) };
}

/** How a worker process ended. */
export interface WorkerExit {
  code: number | null;
  signal: NodeJS.Signals | null;
}

export interface LocalWorker {
  readonly name: string;
  readonly rank: number;
  readonly pid: number;
  /** The child process (its stdout / stderr are readable with stdio "pipe"). */
  readonly process: ChildProcess;
  /** Resolves when the process has exited. */
  readonly exited: Promise<WorkerExit>;
}

/** What rank 0 passes to rpc.initRpc to join the workers. */
export interface LocalInitOptions {
  rank: 0;
  worldSize: number;
  initMethod: string;
  secret: string;
}

export interface LocalCluster {
  readonly initMethod: string;
  /** Workers plus the master. */
  readonly worldSize: number;
  readonly secret: string;
  readonly workers: readonly LocalWorker[];
  /** Ready for `rpc.initRpc(name, cluster.initOptions)`. */
  readonly initOptions: LocalInitOptions;
  /** Kills the workers still running (SIGTERM, then SIGKILL after the grace period) and awaits their exit. Idempotent. */
  close(opts?: { graceMs?: number }): Promise<void>;
}

/** Every worker started here and not yet exited, for the exit and signal hooks. */
const live = new Set<ChildProcess>();
const SIGNALS = ["SIGTERM", "SIGHUP"] as const;
let hooked = false;

function onExit(): void {
  for (const c of live) c.kill("SIGKILL");
}

function onSignal(sig: NodeJS.Signals): void {
  for (const c of live) c.kill("SIGTERM");
  live.clear();
  unhook();
  // NB: our listener replaced the signal's default action; restore it when nobody else handles it.
  if (process.listenerCount(sig) === 0) process.kill(process.pid, sig);
}

function hook(): void {
  if (hooked) return;
  hooked = true;
  process.on("exit", onExit);
  for (const s of SIGNALS) process.on(s, onSignal);
}

function unhook(): void {
  if (!hooked) return;
  hooked = false;
  process.off("exit", onExit);
  for (const s of SIGNALS) process.off(s, onSignal);
}

// NB: preloaded into each worker: its stdin is a pipe from us, so it ends when this process dies,
// however it dies. unref() keeps the watch from holding the worker's event loop open. It also ignores
// SIGINT from the first instant (a notebook interrupt while a worker is still loading must not kill it).
// NB: no `?` in the code: in a data: URL it starts the query, and the module's source would end there.
const WATCHDOG =
  'data:text/javascript,process.on("SIGINT",()=>{});const s=process.stdin;s.on("end",()=>process.exit(1));s.on("error",()=>process.exit(1));s.resume();if(s.unref)s.unref();';

/** bin/tprpc.mjs of this package, found by walking up to the package.json named "tprpc". */
export function workerScript(): string {
  let dir = path.dirname(fileURLToPath(import.meta.url));
  for (;;) {
    const pkg = path.join(dir, "package.json");
    if (fs.existsSync(pkg)) {
      try {
        if ((JSON.parse(fs.readFileSync(pkg, "utf8")) as { name?: string }).name === "tprpc")
          return path.join(dir, "bin", "tprpc.mjs");
      } catch {
        // not ours; keep walking
      }
    }
    const up = path.dirname(dir);
    if (up === dir) throw new ValueError(`cannot find the tprpc package root above ${import.meta.url}`);
    dir = up;
  }
}

/**
 * The kernel's range for ephemeral ports (Linux), from which it picks the local port of every
 * outgoing connection and of every `listen(0)`; undefined where it cannot be read.
 */
function ephemeralRange(): [number, number] | undefined {
  try {
    const [lo, hi] = fs.readFileSync("/proc/sys/net/ipv4/ip_local_port_range", "utf8").trim().split(/\s+/).map(Number);
    if (Number.isInteger(lo) && Number.isInteger(hi) && lo > 0 && hi >= lo) return [lo, hi];
  } catch {
    // not Linux, or no /proc
  }
  return undefined;
}

function tryListen(port: number): Promise<number | undefined> {
  const s = net.createServer();
  return new Promise((resolve) => {
    s.once("error", () => resolve(undefined));
    s.listen(port, "127.0.0.1", () => {
      const bound = (s.address() as net.AddressInfo).port;
      s.close(() => resolve(bound));
    });
  });
}

const handedOut = new Set<number>();

/**
 * A port on 127.0.0.1 that was free a moment ago (for a store or test server to bind later).
 * Where the kernel's ephemeral range is known the port is drawn from outside it (between 10000 and
 * the range's start, at most 29999): a port from inside it can be taken, between this check and the later bind,
 * as the local port of any outgoing connection on the machine (EADDRINUSE). Ports this process has
 * handed out before are not handed out again.
 */
export async function freePort(): Promise<number> {
  const range = ephemeralRange();
  const lo = 10_000;
  // NB: below 30000: Kubernetes NodePorts (30000-32767) can be redirected by iptables rules no bind probe sees
  const hi = range ? Math.min(29_999, range[0] - 1) : 0;
  if (hi - lo >= 1_000) {
    // a bounded number of random probes; a port in use (or handed out already) is skipped
    for (let i = 0; i < 200; i++) {
      const port = lo + Math.floor(Math.random() * (hi - lo + 1));
      if (handedOut.has(port)) continue;
      if ((await tryListen(port)) === port) {
        handedOut.add(port);
        return port;
      }
    }
  }
  for (let i = 0; i < 20; i++) {
    const port = await tryListen(0);
    if (port !== undefined && !handedOut.has(port)) {
      handedOut.add(port);
      return port;
    }
  }
  throw new ValueError("freePort: found no free port on 127.0.0.1");
}

/** Calls `emit` once per complete line of `stream` (and for a last unterminated line at its end). */
function forwardLines(stream: NodeJS.ReadableStream, emit: (line: string) => void): void {
  let rest = "";
  stream.setEncoding("utf8");
  stream.on("data", (chunk: string) => {
    const lines = (rest + chunk).split("\n");
    rest = lines.pop()!;
    for (const l of lines) emit(l);
  });
  stream.on("end", () => {
    if (rest) emit(rest);
    rest = "";
  });
}

/** The `tprpc worker` command line after node's own flags; worldSize undefined joins a dynamic group. */
export function workerArgs(name: string, rank: number, worldSize: number | undefined, initMethod: string): string[] {
  return [
    workerScript(),
    "worker",
    "--name",
    name,
    "--rank",
    String(rank),
    ...(worldSize === undefined ? [] : ["--world-size", String(worldSize)]),
    "--init-method",
    initMethod,
  ];
}

function startWorker(
  name: string,
  rank: number,
  worldSize: number,
  initMethod: string,
  o: LocalWorkersOptions,
  env: NodeJS.ProcessEnv,
): LocalWorker {
  const stdio = o.stdio ?? "forward";
  const out = stdio === "forward" ? "pipe" : stdio;
  const child = spawn(
    process.execPath,
    [
      ...withRpcNodeFlags(o.nodeArgs ?? [], env),
      "--import",
      WATCHDOG,
      ...workerArgs(name, rank, worldSize, initMethod),
    ],
    // NB: not detached: the workers stay in our process group, where a notebook's SIGINT finds and
    // is ignored by them; stdin is the watchdog's pipe.
    { env, cwd: o.cwd, stdio: ["pipe", out, out], detached: false },
  );
  if (stdio === "forward") {
    for (const which of ["stdout", "stderr"] as const) {
      const emit = o.onOutput
        ? (line: string) => o.onOutput!(name, which, line)
        : (line: string) => process[which].write(`[${name}] ${line}\n`);
      forwardLines(child[which]!, emit);
    }
  }
  child.stdin!.on("error", () => undefined); // EPIPE once the worker is gone
  const exited = new Promise<WorkerExit>((resolve) => {
    child.once("exit", (code, signal) => {
      live.delete(child);
      if (live.size === 0) unhook();
      debug(1, "launcher", `${name} (pid ${child.pid}) exited: code ${code}, signal ${signal}`);
      resolve({ code, signal });
    });
  });
  // NB: a failed spawn emits 'error' (and maybe no 'exit'); settle exited either way.
  child.once("error", (e) => {
    debug(1, "launcher", `${name} failed to start: ${e.message}`);
    child.emit("exit", null, null);
  });
  if (child.pid !== undefined) {
    live.add(child);
    hook();
  }
  return { name, rank, pid: child.pid ?? -1, process: child, exited };
}

/** Starts local workers for a master in this process; see the file's top for the lifecycle. */
export async function startLocalWorkers(opts: LocalWorkersOptions): Promise<LocalCluster> {
  if (typeof opts.workers === "number" && (!Number.isInteger(opts.workers) || opts.workers < 0))
    throw new ValueError(`workers must be a whole number >= 0 or a list of names, got ${opts.workers}`);
  const names =
    typeof opts.workers === "number"
      ? Array.from({ length: opts.workers }, (_, i) => `worker${i + 1}`)
      : [...opts.workers];
  if (new Set(names).size !== names.length) throw new ValueError(`worker names must be unique: ${names.join(", ")}`);
  const initMethod = opts.initMethod ?? `tcp://127.0.0.1:${await freePort()}`;
  const secret = opts.secret || process.env.TPRPC_SECRET || generateSecret();
  const worldSize = names.length + 1;
  // NB: the master computes too, so it counts as one of the local processes
  const env = withKernelThreads({ ...process.env, ...opts.env, TPRPC_SECRET: secret }, names.length + 1);
  const workers = names.map((n, i) => startWorker(n, i + 1, worldSize, initMethod, opts, env));

  let closing: Promise<void> | null = null;
  const close = (o: { graceMs?: number } = {}): Promise<void> => {
    closing ??= (async () => {
      const grace = o.graceMs ?? opts.closeGraceMs ?? 3_000;
      await Promise.all(
        workers.map(async (w) => {
          const c = w.process;
          if (c.exitCode !== null || c.signalCode !== null || c.pid === undefined) return;
          c.kill("SIGTERM");
          const timer = setTimeout(() => c.kill("SIGKILL"), grace);
          await w.exited;
          clearTimeout(timer);
        }),
      );
    })();
    return closing;
  };
  return {
    initMethod,
    worldSize,
    secret,
    workers,
    initOptions: { rank: 0, worldSize, initMethod, secret },
    close,
  };
}
