/**
 * The conformance suites' groups. This test process is always the master
 * (rank 0, PyTorch's "worker0", joined with rpc.initRpc); the others
 * ("worker1".."workerN") are, by default, agents in this same process
 * (sdk/rpc/agent.ts: each a full member with its own listener and pipes over
 * loopback TCP; shipped code runs as the agent serving it). A suite whose
 * test needs real worker processes (a worker is killed, its exit code is
 * checked, its own garbage collector or globals matter) asks for them with
 * `processes: true`: real `tprpc worker` processes on 127.0.0.1 from
 * rpc.startLocalWorkers. The README lists which suites do and why.
 * PyTorch's RPC tests run the same body on every rank; here the master runs
 * it and ships what the other ranks must do by source.
 */
import * as sdk from "../../sdk/index.js";
import { rpc } from "../../sdk/index.js";
import { Agent } from "../../sdk/rpc/agent.js";
import { freePort } from "../../sdk/rpc/launcher.js";
import { parseInitOptions } from "../../sdk/rpc/rendezvous/index.js";

/** A group whose workers are processes (`processes: true`). */
export type Cluster = Awaited<ReturnType<typeof rpc.startLocalWorkers>>;

/** A group whose workers are agents in this process (the default). */
export interface InProcessGroup {
  readonly initOptions: Cluster["initOptions"];
  /** The workers' agents, worker1 first. */
  readonly agents: readonly Agent[];
  /** Waits (bounded) until every worker has shut down; shuts down the ones that did not. */
  close(o?: { graceMs?: number }): Promise<void>;
}

export type Group = Cluster | InProcessGroup;

export interface GroupOptions {
  /** Workers besides the master (default 3: PyTorch's world size 4). */
  workers?: number;
  /** Extra initRpc options for the master (rpcTimeoutMs, deviceMaps, ...). */
  init?: Omit<rpc.InitRpcOptions, "rank" | "worldSize" | "initMethod" | "secret">;
  /** Real worker processes instead of agents in this process. */
  processes?: boolean;
  /** Extra environment for worker processes (processes only). */
  env?: Record<string, string>;
}

const SECRET = "conformance-secret-0123456789";

/** Starts the workers and joins them as "master"; resolves once the whole group has met. */
export function startGroup(opts: GroupOptions & { processes: true }): Promise<Cluster>;
export function startGroup(opts?: GroupOptions & { processes?: false }): Promise<InProcessGroup>;
export async function startGroup(opts: GroupOptions = {}): Promise<Group> {
  const n = opts.workers ?? 3;
  if (!opts.processes) {
    if (opts.env) throw new Error("startGroup: env is for worker processes (processes: true)");
    return startInProcess(n, opts.init);
  }
  const cluster = await rpc.startLocalWorkers({ workers: n, secret: SECRET, ...(opts.env ? { env: opts.env } : {}) });
  try {
    await rpc.initRpc("master", { ...cluster.initOptions, initTimeoutMs: 30_000, ...opts.init });
  } catch (e) {
    await cluster.close({ graceMs: 1_000 });
    throw e;
  }
  return cluster;
}

/**
 * The workers do what `tprpc worker` does (bin/tprpc.mjs): join, then wait in a graceful shutdown
 * (serving meanwhile) until every member calls shutdown; a worker whose group is lost (the master
 * left without a graceful shutdown) leaves at once, as a worker process exits.
 */
async function startInProcess(workers: number, init: GroupOptions["init"]): Promise<InProcessGroup> {
  const port = await freePort();
  const initOptions = {
    rank: 0 as const,
    worldSize: workers + 1,
    initMethod: `tcp://127.0.0.1:${port}`,
    secret: SECRET,
  };
  const starting = Array.from({ length: workers }, (_, i) =>
    Agent.start(
      parseInitOptions(`worker${i + 1}`, { ...initOptions, rank: i + 1, initTimeoutMs: 30_000 }),
      sdk as unknown as Record<string, unknown>,
    ),
  );
  const master = rpc.initRpc("master", { ...initOptions, initTimeoutMs: 30_000, ...init });
  const [m, ...joined] = await Promise.allSettled([master, ...starting]);
  const agents = joined.flatMap((r) => (r.status === "fulfilled" ? [r.value] : []));
  const failed = [m, ...joined].find((r) => r.status === "rejected");
  if (failed) {
    await Promise.all(agents.map((a) => a.shutdown(false, 1_000)));
    throw (failed as PromiseRejectedResult).reason;
  }
  const left = agents.map((a) => {
    a.onGroupLost(() => void a.shutdown(false, 1_000));
    return a.shutdown(true, 2 ** 31 - 1).catch(() => undefined);
  });
  return {
    initOptions,
    agents,
    async close(o = {}) {
      const grace = o.graceMs ?? 3_000;
      let timer: NodeJS.Timeout | undefined;
      await Promise.race([
        Promise.all(left),
        new Promise((resolve) => {
          timer = setTimeout(resolve, grace);
        }),
      ]);
      clearTimeout(timer);
      await Promise.all(agents.map((a) => a.shutdown(false, 1_000).catch(() => undefined)));
    },
  };
}

/** Leaves the group (graceful unless told otherwise) and stops the workers; never hangs past ~15 s. */
export async function stopGroup(group: Group | undefined, graceful = true): Promise<void> {
  await rpc.shutdown({ graceful, timeoutMs: 10_000 }).catch(() => undefined);
  await group?.close({ graceMs: 2_000 });
}

// NB: the distributed autograd suites' bounded wait, shared
export { within } from "../dist_autograd/group.js";

/** Runs `f`, turning a synchronous throw into a rejection. */
export const attempt = <T>(f: () => T | Promise<T>): Promise<T> => new Promise<T>((resolve) => resolve(f()));

/** Awaits `fn()` and returns what it threw or rejected with (undefined when it succeeded). */
export async function failureOf(fn: () => unknown): Promise<unknown> {
  try {
    await fn();
  } catch (e) {
    return e;
  }
  return undefined;
}
