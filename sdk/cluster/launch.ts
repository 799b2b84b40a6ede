/**
 * `tprpc launch`: starts this node's share of a group's processes (./launch_plan.ts says which ranks
 * and with what environment) and supervises them, as torchrun's agent does.
 *
 * Lifecycle:
 * 1. Start nprocPerNode children: the script under node (or as an executable with --no-node), or
 *    `tprpc worker --name worker<RANK>` with --worker. Each child's stdin is a pipe from the launcher
 *    that a preloaded watchdog watches: when the launcher dies, however it dies, the child exits.
 * 2. A child that exits 0 is done. One that fails (non-zero, or killed by a signal) is started again
 *    with the same rank and TORCHELASTIC_RESTART_COUNT + 1 while the launcher has restarts left
 *    (--max-restarts counts restarts of this launcher's children together). NB: torchrun restarts the
 *    whole local group; here only the failed child restarts, since the other members of an RPC group
 *    keep running and a dynamic group lets the restarted one rejoin.
 * 3. With no restart left, the first failure decides: the other children get SIGTERM, SIGKILL after
 *    the grace period, and the launcher exits with the failed child's code (128 + signal number for a
 *    signal).
 * 4. SIGINT, SIGTERM and SIGHUP to the launcher are forwarded to every child (no restarts after
 *    that); SIGKILL follows after the grace period, or at once on a second signal. The exit code is the
 *    first failure's among the children, or 0 when they all exited 0.
 * 5. The launcher's 'exit' SIGKILLs any child still alive: no child outlives it.
 */
import { type ChildProcess, spawn } from "node:child_process";
import os from "node:os";
import { generateSecret } from "../transport/auth.js";
import { withKernelThreads, withRpcNodeFlags, workerScript } from "../rpc/launcher.js";
import { type LaunchPlan, childEnv, globalRank } from "./launch_plan.js";

// NB: the launcher's pipe on stdin ends when the launcher dies; unref() keeps the watch from holding the child
// open. No "?" or "#" in it: a data: URL ends its body there.
const WATCHDOG =
  'data:text/javascript,const s=process.stdin;s.on("end",()=>process.exit(1));s.on("error",()=>process.exit(1));s.resume();s.unref();';

const FORWARDED = ["SIGINT", "SIGTERM", "SIGHUP"] as const;

/** How a child ended as an exit code: its code, or 128 + the signal's number. */
export function exitCodeOf(code: number | null, signal: NodeJS.Signals | null): number {
  if (signal) return 128 + (os.constants.signals[signal] ?? 0);
  return code ?? 1;
}

export interface LaunchHooks {
  /** One line about the launcher's decisions (default: stderr, prefixed "tprpc launch: "). */
  log?: (line: string) => void;
}

/** Runs the plan to its end; resolves with the launcher's exit code (see the top). */
export function runLaunch(plan: LaunchPlan, hooks: LaunchHooks = {}): Promise<number> {
  const log = hooks.log ?? ((l: string) => process.stderr.write(`tprpc launch: ${l}\n`));
  const secret = plan.secret ?? generateSecret();
  const children: (ChildProcess | null)[] = Array.from({ length: plan.nprocPerNode }, () => null);
  const done: boolean[] = children.map(() => false);
  let restarts = 0;
  let stopping = false;
  let firstFailure: number | null = null;
  let killTimer: NodeJS.Timeout | undefined;
  let resolveAll!: (code: number) => void;
  const finished = new Promise<number>((r) => (resolveAll = r));

  const live = () => children.filter((c): c is ChildProcess => c !== null);
  const onExitHook = () => {
    for (const c of live()) c.kill("SIGKILL");
  };
  const onSignal = (sig: NodeJS.Signals) => {
    if (stopping) {
      log(`${sig} again: killing the workers`);
      for (const c of live()) c.kill("SIGKILL");
      return;
    }
    log(`${sig}: forwarding it to ${live().length} worker(s)`);
    stop(sig);
  };
  process.on("exit", onExitHook);
  for (const s of FORWARDED) process.on(s, onSignal);

  const settleIfIdle = () => {
    if (live().length > 0) return;
    if (!stopping && !done.every(Boolean)) return;
    clearTimeout(killTimer);
    process.off("exit", onExitHook);
    for (const s of FORWARDED) process.off(s, onSignal);
    resolveAll(firstFailure ?? 0);
  };

  const stop = (sig: NodeJS.Signals) => {
    stopping = true;
    for (const c of live()) c.kill(sig);
    killTimer = setTimeout(() => {
      const left = live();
      if (left.length > 0) log(`${left.length} worker(s) still running after ${plan.graceMs} ms: SIGKILL`);
      for (const c of left) c.kill("SIGKILL");
    }, plan.graceMs);
    killTimer.unref();
    settleIfIdle();
  };

  const start = (i: number) => {
    const rank = globalRank(plan, i);
    const env = withKernelThreads({ ...process.env, ...childEnv(plan, i, secret, restarts) }, plan.nprocPerNode);
    let file: string;
    let args: string[];
    if (plan.command === null) {
      file = process.execPath;
      args = [...withRpcNodeFlags([], env), "--import", WATCHDOG, workerScript(), "worker", "--name", `worker${rank}`];
    } else if (plan.noNode) {
      [file, ...args] = plan.command as [string, ...string[]];
    } else {
      file = process.execPath;
      args = [...withRpcNodeFlags([], env), "--import", WATCHDOG, ...plan.command];
    }
    const child = spawn(file, args, { env, stdio: ["pipe", "inherit", "inherit"] });
    child.stdin!.on("error", () => undefined); // EPIPE once the child is gone
    children[i] = child;
    let ended = false;
    const onEnd = (code: number | null, signal: NodeJS.Signals | null, why?: string) => {
      if (ended) return;
      ended = true;
      children[i] = null;
      const exit = exitCodeOf(code, signal);
      if (exit === 0) {
        done[i] = true;
        return settleIfIdle();
      }
      const what = why ?? (signal ? `was killed by ${signal}` : `exited with code ${code}`);
      if (!stopping && restarts < plan.maxRestarts) {
        restarts++;
        log(`rank ${rank} ${what}; restarting it (restart ${restarts} of ${plan.maxRestarts})`);
        return start(i);
      }
      if (firstFailure === null) {
        firstFailure = exit;
        if (!stopping) {
          log(
            `rank ${rank} ${what}` +
              (plan.maxRestarts > 0 ? ` and no restart is left (${plan.maxRestarts} used)` : "") +
              `; stopping the other workers, exit ${exit}`,
          );
          stop("SIGTERM");
          return;
        }
      }
      settleIfIdle();
    };
    child.once("exit", (code, signal) => onEnd(code, signal));
    // NB: a failed spawn (no such file) emits 'error' and no 'exit'
    child.once("error", (e) => onEnd(127, null, `could not be started: ${e.message}`));
  };

  for (let i = 0; i < plan.nprocPerNode; i++) start(i);
  return finished;
}
