/**
 * Starting real `tprpc worker` processes for the e2e suites, by hand (so a
 * test can give one a wrong secret, or SIGKILL it). Workers run the compiled
 * SDK from dist/ (built by test/global-setup.ts) and the TS backend.
 */
import { type ChildProcess, spawn } from "node:child_process";
import { workerArgs } from "../../sdk/rpc/launcher.js";

export { freePort } from "../../sdk/rpc/launcher.js";

export interface WorkerSpawnOptions {
  secret: string;
  /** Extra node flags, e.g. ["--expose-gc"]. */
  nodeArgs?: string[];
  /** Extra environment variables for the worker. */
  env?: Record<string, string>;
}

export function startWorker(
  name: string,
  rank: number,
  /** undefined: join a dynamic group. */
  worldSize: number | undefined,
  port: number,
  opts: WorkerSpawnOptions,
): ChildProcess {
  const child = spawn(
    process.execPath,
    [...(opts.nodeArgs ?? []), ...workerArgs(name, rank, worldSize, `tcp://127.0.0.1:${port}`)],
    {
      env: { ...process.env, TPRPC_SECRET: opts.secret, TPRPC_NATIVE: "0", ...opts.env },
      stdio: ["ignore", "inherit", "pipe"],
    },
  );
  child.stderr!.on("data", (d: Buffer) => process.stderr.write(`[${name}] ${d}`));
  return child;
}
