/**
 * A local cluster for a notebook (`tprpc.cluster` in "tprpc"): starts worker
 * processes on this machine and makes this process rank 0 of their group.
 *
 *   const cluster = await tprpc.cluster.start({ workers: 2 });   // "master" + worker1, worker2
 *   await tprpc.rpc.rpcSync("worker1", tprpc.add, [x, 1]);
 *   cluster;                                                     // renders its workers and their state
 *   await cluster.shutdown();                                    // or tprpc.cluster.shutdown()
 *
 * Lifecycle:
 * 1. start() first shuts down the cluster it started before, if any (re-running a
 *    notebook cell replaces the old cluster), then starts the workers with
 *    rpc.startLocalWorkers and joins them with rpc.initRpc as rank 0.
 * 2. If joining fails (a worker died, the group did not assemble in time), the
 *    workers are killed and start() rejects with the cause.
 * 3. shutdown() leaves the group gracefully (the workers exit 0), then kills any
 *    worker still running after the grace period. Idempotent.
 * 4. killAll() SIGKILLs every worker of every cluster at once, synchronously: the
 *    kernel's last resort on SIGTERM and exit. The launcher's own exit hooks and
 *    each worker's stdin watchdog cover a master that dies harder than that.
 */
import { RpcError, ValueError } from "../errors/index.js";
import * as rpc from "../rpc/api.js";
import { startLocalWorkers, type LocalCluster, type LocalWorkersOptions } from "../rpc/launcher.js";
import { debug } from "../util/index.js";
import { escapeHtml, MIME_BUNDLE, type MimeBundle } from "../display/sink.js";

export interface ClusterOptions extends Omit<LocalWorkersOptions, "workers"> {
  /** How many workers (worker1 … workerN), or their names. Default 2. */
  workers?: number | readonly string[];
  /** This process's name in the group (rank 0). Default "master". */
  name?: string;
  /** Default timeout of every RPC, ms (rpc.initRpc's rpcTimeoutMs; default 60 000). */
  rpcTimeoutMs?: number;
  /** Bound on the workers starting and the group assembling, ms. Default 60 000. */
  startTimeoutMs?: number;
  /**
   * The channels every process of the cluster may use for tensor bytes ("shm,tcp" or a list),
   * as initRpc's `channels`; the workers get it as TPRPC_CHANNELS. Default: every viable one.
   */
  channels?: string | readonly string[];
  /**
   * This process's device maps, as initRpc's `deviceMaps`: { worker1: { "cuda:0": "cuda:1" } } sends the
   * tensors of calls to worker1 from cuda:0 to its cuda:1 directly (replies take the inverse map).
   */
  deviceMaps?: rpc.InitRpcOptions["deviceMaps"];
}

export type WorkerState = "starting" | "running" | "exited" | "killed";

export interface WorkerStatus {
  name: string;
  rank: number;
  pid: number;
  state: WorkerState;
  /** Exit code or signal once the process has ended. */
  exit: string | null;
}

/** The cluster start() returns. */
export class Cluster {
  private joined = false;
  private closed: Promise<void> | null = null;
  private readonly exits = new Map<string, string>();

  /** @internal use start(). */
  constructor(
    /** This process's name in the group. */
    readonly name: string,
    private readonly local: LocalCluster,
  ) {
    // NB: exited never rejects (the launcher settles it on exit and on a failed spawn)
    for (const w of local.workers)
      void w.exited.then((e) => this.exits.set(w.name, e.signal ? `signal ${e.signal}` : `code ${e.code}`));
  }

  /** Workers plus this process. */
  get worldSize(): number {
    return this.local.worldSize;
  }

  get initMethod(): string {
    return this.local.initMethod;
  }

  /** The worker names, in rank order. */
  get workerNames(): string[] {
    return this.local.workers.map((w) => w.name);
  }

  /** The worker process ids, in rank order. */
  get pids(): number[] {
    return this.local.workers.map((w) => w.pid);
  }

  /** True between a successful start() and shutdown(). */
  get running(): boolean {
    return this.joined && this.closed === null;
  }

  /** Each worker's name, rank, pid and state. */
  status(): WorkerStatus[] {
    return this.local.workers.map((w) => {
      const exit = this.exits.get(w.name) ?? null;
      const state: WorkerState = exit
        ? exit.startsWith("signal")
          ? "killed"
          : "exited"
        : this.joined
          ? "running"
          : "starting";
      return { name: w.name, rank: w.rank, pid: w.pid, state, exit };
    });
  }

  /** @internal step 1–2 of the lifecycle. */
  async join(opts: ClusterOptions): Promise<void> {
    const timeoutMs = opts.startTimeoutMs ?? 60_000;
    // NB: a worker that dies before the group assembles would leave initRpc waiting for the whole
    // timeout; fail as soon as any worker exits instead.
    let onDeath: (e: Error) => void = () => undefined;
    const death = new Promise<never>((_, reject) => (onDeath = reject));
    death.catch(() => undefined);
    for (const w of this.local.workers)
      void w.exited.then((e) => {
        if (!this.joined)
          onDeath(
            new RpcError(
              `worker ${w.name} (pid ${w.pid}) exited (${e.signal ? `signal ${e.signal}` : `code ${e.code}`}) before the cluster started; see its output above`,
            ),
          );
      });
    const init = rpc.initRpc(this.name, {
      ...this.local.initOptions,
      rpcTimeoutMs: opts.rpcTimeoutMs,
      initTimeoutMs: timeoutMs,
      ...(opts.channels === undefined ? {} : { channels: opts.channels }),
      ...(opts.deviceMaps === undefined ? {} : { deviceMaps: opts.deviceMaps }),
    });
    init.catch(() => undefined);
    await Promise.race([init, death]);
    this.joined = true;
  }

  /** Leaves the group gracefully, then kills any worker still running after `graceMs` (default 3 000). Idempotent. */
  shutdown(opts: { graceMs?: number; timeoutMs?: number } = {}): Promise<void> {
    this.closed ??= (async () => {
      if (active === this) active = null;
      try {
        if (this.joined) {
          await rpc.shutdown({ graceful: true, timeoutMs: opts.timeoutMs ?? 10_000 });
          // NB: after the shutdown barrier the workers exit by themselves; give them the grace period first.
          await waitAllAtMost(
            this.local.workers.map((w) => w.exited),
            opts.graceMs ?? 3_000,
          );
        }
      } catch (e) {
        debug(1, "cluster", `graceful shutdown failed, killing the workers: ${(e as Error).message}`);
        await rpc.shutdown({ graceful: false, timeoutMs: 2_000 }).catch(() => undefined);
      } finally {
        await this.local.close({ graceMs: opts.graceMs ?? 3_000 });
        all.delete(this);
      }
    })();
    return this.closed;
  }

  /** @internal SIGKILLs the workers still running, synchronously. */
  killNow(): void {
    for (const w of this.local.workers) {
      const c = w.process;
      if (c.exitCode === null && c.signalCode === null) c.kill("SIGKILL");
    }
  }

  toString(): string {
    const rows = this.status().map(
      (s) => `  ${s.name} (rank ${s.rank}, pid ${s.pid}): ${s.state}${s.exit ? ` (${s.exit})` : ""}`,
    );
    const head = `Cluster: ${this.name} (rank 0, this process) + ${this.worldSize - 1} workers, ${this.initMethod}`;
    return [head, ...rows].join("\n");
  }

  [Symbol.for("nodejs.util.inspect.custom")](): string {
    return this.toString();
  }

  [MIME_BUNDLE](): MimeBundle {
    const color: Record<WorkerState, string> = {
      starting: "#b58900",
      running: "#2aa198",
      exited: "#888",
      killed: "#dc322f",
    };
    const td = (s: string) => `<td style="padding:1px 8px;text-align:left">${s}</td>`;
    const rows = [
      `<tr>${td(escapeHtml(this.name))}${td("0")}${td(String(process.pid))}${td(`<span style="color:${this.running ? color.running : color.exited}">${this.running ? "running" : "shut down"}</span> (this process)`)}</tr>`,
      ...this.status().map(
        (s) =>
          `<tr>${td(escapeHtml(s.name))}${td(String(s.rank))}${td(String(s.pid))}${td(`<span style="color:${color[s.state]}">${s.state}</span>${s.exit ? ` (${escapeHtml(s.exit)})` : ""}`)}</tr>`,
      ),
    ];
    const th = (s: string) => `<th style="padding:1px 8px;text-align:left">${s}</th>`;
    return {
      "text/plain": this.toString(),
      "text/html": `<table style="font-family:monospace;font-size:12px;border-collapse:collapse"><caption style="text-align:left">tprpc cluster · ${escapeHtml(this.initMethod)}</caption><tr>${th("worker")}${th("rank")}${th("pid")}${th("state")}</tr>${rows.join("")}</table>`,
    };
  }
}

/** Resolves when every promise has settled or after `ms`, whichever is first. */
async function waitAllAtMost(ps: Promise<unknown>[], ms: number): Promise<void> {
  let timer: NodeJS.Timeout | undefined;
  await Promise.race([Promise.allSettled(ps), new Promise((r) => (timer = setTimeout(r, ms)))]);
  clearTimeout(timer);
}

let active: Cluster | null = null;
/** Every cluster not yet fully shut down (for killAll). */
const all = new Set<Cluster>();

/** Starts a local cluster (see the file's top); replaces the one started before. */
export async function start(opts: ClusterOptions = {}): Promise<Cluster> {
  const workers = opts.workers ?? 2;
  if (typeof workers === "number" && (!Number.isInteger(workers) || workers < 1))
    throw new ValueError(`cluster.start: workers must be a whole number >= 1 or a list of names, got ${workers}`);
  if (active) {
    debug(1, "cluster", "start(): shutting down the previous cluster first");
    await active.shutdown();
  }
  const channels = typeof opts.channels === "string" ? opts.channels : opts.channels?.join(",");
  const env = channels === undefined ? opts.env : { ...opts.env, TPRPC_CHANNELS: channels };
  const local = await startLocalWorkers({ ...opts, env, workers });
  const c = new Cluster(opts.name ?? "master", local);
  all.add(c);
  try {
    await c.join(opts);
  } catch (e) {
    await c.shutdown({ graceMs: 500 });
    throw e;
  }
  active = c;
  return c;
}

/** The running cluster, or null. */
export function current(): Cluster | null {
  return active;
}

/** Shuts down the running cluster, if any. */
export async function shutdown(): Promise<void> {
  await active?.shutdown();
}

/** The pids of every worker process started here and not yet exited. */
export function livePids(): number[] {
  return [...all].flatMap((c) =>
    c
      .status()
      .filter((s) => s.state === "starting" || s.state === "running")
      .map((s) => s.pid),
  );
}

/** SIGKILLs every worker of every cluster, synchronously (a kernel that must exit now). */
export function killAll(): void {
  for (const c of all) c.killNow();
}
