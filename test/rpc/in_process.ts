/**
 * In-process groups for the RPC tests that do not need separate processes:
 * several agents in this one process, each a full member (its own listener,
 * pipes over loopback TCP, rank 0 hosting the store). Shipped code runs with
 * the agent that serves it current (sdk/rpc/process.ts), so `tprpc.rpc.*`
 * inside it acts as that worker. What stays process-wide is shared by the
 * agents: rpc.register (every agent serves the name), the message hooks
 * (installed once; distributed autograd keeps its contexts per agent), the
 * rpc.profiler, the device backends and globalThis.
 */
import * as sdk from "../../sdk/index.js";
import { Agent } from "../../sdk/rpc/agent.js";
import { freePort } from "../../sdk/rpc/launcher.js";
import { parseInitOptions } from "../../sdk/rpc/rendezvous/index.js";

/** Starts one agent per name (ranks in order; the first hosts the store); resolves once the group met. */
export async function inProcessGroup(
  names: readonly string[],
  opts: { rpcTimeoutMs?: number; channels?: string } = {},
): Promise<Agent[]> {
  const port = await freePort();
  const initMethod = `tcp://127.0.0.1:${port}`;
  const secret = "in-process-secret-0123456789";
  const { channels, ...rest } = opts;
  return Promise.all(
    names.map((name, rank) =>
      Agent.start(
        parseInitOptions(name, { rank, worldSize: names.length, initMethod, secret, initTimeoutMs: 10_000, ...rest }),
        sdk,
        undefined,
        { channels },
      ),
    ),
  );
}

/** Shuts every agent down (graceful by default: they meet, so all at once), bounded by timeoutMs. */
export async function stopInProcessGroup(agents: readonly Agent[], graceful = true, timeoutMs = 10_000): Promise<void> {
  await Promise.all(agents.map((a) => a.shutdown(graceful, timeoutMs)));
}
