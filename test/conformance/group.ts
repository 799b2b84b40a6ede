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

/** Rejects after `ms` unless `p` settles first: every wait in the suites is bounded. */
export function within<T>(p: Promise<T>, ms: number, what: string): Promise<T> {
  let timer: NodeJS.Timeout | undefined;
  return Promise.race([
    p.finally(() => clearTimeout(timer)),
    new Promise<never>((_, reject) => {
      timer = setTimeout(() => reject(new Error(`${what} did not settle within ${ms} ms`)), ms);
    }),
  ]);
}
