/**
 * The conformance suites' process group: this test process is the master
 * (rank 0, PyTorch's "worker0"), the others are real `tprpc worker` processes
 * on 127.0.0.1 started by rpc.startLocalWorkers ("worker1".."workerN").
 * PyTorch's RPC tests run the same body on every rank; here the master runs
 * it and ships what the other ranks must do by source.
 */
import { rpc } from "../../sdk/index.js";

export type Cluster = Awaited<ReturnType<typeof rpc.startLocalWorkers>>;

export interface GroupOptions {
  /** Worker processes besides the master (default 3: PyTorch's world size 4). */
  workers?: number;
  /** Extra initRpc options for the master (rpcTimeoutMs, deviceMaps, ...). */
  init?: Omit<rpc.InitRpcOptions, "rank" | "worldSize" | "initMethod" | "secret">;
  /** Extra environment for the workers. */
  env?: Record<string, string>;
}

/** Starts the workers and joins them as "master"; resolves once the whole group has met. */
export async function startGroup(opts: GroupOptions = {}): Promise<Cluster> {
  const cluster = await rpc.startLocalWorkers({
    workers: opts.workers ?? 3,
    secret: "conformance-secret-0123456789",
    ...(opts.env ? { env: opts.env } : {}),
  });
  try {
    await rpc.initRpc("master", { ...cluster.initOptions, initTimeoutMs: 30_000, ...opts.init });
  } catch (e) {
    await cluster.close({ graceMs: 1_000 });
    throw e;
  }
  return cluster;
}

/** Leaves the group (graceful unless told otherwise) and reaps the workers; never hangs past ~15 s. */
export async function stopGroup(cluster: Cluster | undefined, graceful = true): Promise<void> {
  await rpc.shutdown({ graceful, timeoutMs: 10_000 }).catch(() => undefined);
  await cluster?.close({ graceMs: 2_000 });
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
