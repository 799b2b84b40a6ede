/**
 * What every agent of this process is waiting for, as text: for a hung group, what each process is
 * doing. With TPRPC_DEBUG >= 1, SIGUSR2 writes it to stderr (`kill -USR2 <pid>` on the master and
 * on each worker; startLocalWorkers prefixes a worker's lines with its name). Issue 23's hang was
 * found with it: worker2 had two calls waiting for their RRef arguments and nothing queued.
 *
 * Per agent: the calls it made and waits on (id, callee, kind and target, age); the calls it serves
 * (running, queued in ./serve_queue.ts, waiting for their RRef arguments); RRefs (values owned here
 * whose REMOTE_CALL has not arrived or not finished, forks not yet accepted, received user RRefs not
 * yet confirmed); sends waiting for a pipe to open; each pipe's state, messages waiting for their
 * buffers, and sends and frames held until it opens; then the sections other layers add
 * (addStateSection: distributed autograd's contexts).
 */
import { debugEnabled } from "../util/index.js";
import type { Agent } from "./agent.js";
import type { PendingCalls } from "./pending_calls.js";
import type { RRefContext } from "./rref_context.js";
import type { RpcPipe } from "./rpc_pipe.js";
import type { CallServer } from "./serving.js";

const sections: { name: string; lines: (agent: Agent) => string[] }[] = [];

/** Adds lines about each agent to every dump (a layer above rpc: distributed autograd). */
export function addStateSection(name: string, lines: (agent: Agent) => string[]): void {
  sections.push({ name, lines });
}

/** @internal Agent.debugState's body: its parts, as the agent holds them. */
export function agentState(
  calls: PendingCalls,
  server: CallServer,
  rrefs: RRefContext,
  sendsWaiting: ReadonlyMap<string, number>,
  outgoing: Iterable<RpcPipe>,
  inbound: Iterable<RpcPipe>,
): string[] {
  const out = [...calls.debugState(), server.debugState(), ...rrefs.debugState()];
  for (const [to, n] of sendsWaiting) out.push(`${n} send(s) to ${to} wait for its pipe to open`);
  for (const p of outgoing) out.push(`pipe to ${p.peerName}: ${p.pipe.debugState()}`);
  for (const p of inbound) out.push(`pipe from ${p.peerName}: ${p.pipe.debugState()}`);
  return out;
}

/** The dump of `agents` (see the file comment). */
export function stateDump(agents: Iterable<Agent>): string {
  const out = [`[tprpc:state] pid ${process.pid}`];
  for (const a of agents) {
    out.push(`[tprpc:state] agent ${a.name}`);
    const lines = [...a.debugState()];
    for (const s of sections)
      try {
        lines.push(...s.lines(a).map((l) => `${s.name}: ${l}`));
      } catch (e) {
        lines.push(`${s.name}: (failed: ${(e as Error).message})`);
      }
    for (const l of lines) out.push(`[tprpc:state]   ${l}`);
  }
  return out.join("\n") + "\n";
}

let installed = false;

/** With TPRPC_DEBUG >= 1: SIGUSR2 writes the dump of `agents()` to stderr (once per process). */
export function installStateDump(agents: () => Iterable<Agent>): void {
  if (installed || !debugEnabled(1)) return;
  installed = true;
  process.on("SIGUSR2", () => process.stderr.write(stateDump(agents())));
}
