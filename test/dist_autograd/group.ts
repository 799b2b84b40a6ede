/**
 * Starting and stopping the process groups of the distributed autograd e2e
 * suites: this test process is the master (rank 0), the workers are real
 * `tprpc worker` processes from the launcher, and every process gets the
 * suites' models (./models.ts) registered before a test runs.
 */
import { rpc } from "../../sdk/index.js";
import { installModels } from "./models.js";

export type Cluster = Awaited<ReturnType<typeof rpc.startLocalWorkers>>;

export async function startGroup(workers: number, secret: string): Promise<Cluster> {
  const cluster = await rpc.startLocalWorkers({ workers, secret });
  await rpc.initRpc("master", { ...cluster.initOptions, initTimeoutMs: 30_000 });
  installModels();
  await Promise.all(cluster.workers.map((w) => rpc.rpcSync(w.name, installModels)));
  return cluster;
}

export async function stopGroup(cluster: Cluster | undefined, graceful = true): Promise<void> {
  await rpc.shutdown({ graceful, timeoutMs: 10_000 }).catch(() => undefined);
  await cluster?.close({ graceMs: 2_000 });
}

/** Rejects after `ms` unless `p` settles first (every wait in the suites is bounded). */
export function within<T>(p: Promise<T>, ms: number, what: string): Promise<T> {
  let timer: NodeJS.Timeout | undefined;
  return Promise.race([
    p.finally(() => clearTimeout(timer)),
    new Promise<never>((_, reject) => {
      timer = setTimeout(() => reject(new Error(`${what} did not settle within ${ms} ms`)), ms);
    }),
  ]);
}
