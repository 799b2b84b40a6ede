/**
 * Running a reference benchmark (a PyTorch RPC script that starts its own ranks) so that a timeout
 * ends every process it started (issue 23: a timed-out torch_rpc.py used to leave its rank 1 running).
 * No SDK import: test/bench/spawn_group.test.ts checks it on its own.
 *
 * NB: the group is made with setpgid, not setsid. Where the kernel groups tasks by session for
 * scheduling (`/proc/sys/kernel/sched_autogroup_enabled`, on in most desktop and VM kernels), a new
 * session is a new autogroup, which gets a whole share of the CPU next to the bench's own session. Under
 * `--load N` that put the load processes and tprpc's columns in one group and the reference alone in
 * another: on the 2-core Intel VM, PyTorch RPC's 4 MB round trip beside 2 busy processes took 3.7-7.7 ms
 * started with setsid and 20-22 ms started in the bench's session, as tprpc's processes are.
 */
import { type ChildProcessWithoutNullStreams, type SpawnSyncReturns, spawn, spawnSync } from "node:child_process";
import fs from "node:fs";

// NB: perl (perl-base, which Debian marks essential) is the one everyday program that can call
// setpgid and then exec; node's spawn offers only setsid (`detached`)
const PERL = "/usr/bin/perl";
const PGRP_EXEC = 'setpgrp(0, 0) or die "setpgrp: $!\\n"; exec { $ARGV[0] } @ARGV or die "exec $ARGV[0]: $!\\n"';

/** How spawnInGroup will start a program: its own process group in this session, a session of its own, or neither. */
export function groupMode(): "pgid" | "session" | "none" {
  if (fs.existsSync(PERL)) return "pgid";
  return fs.existsSync("/usr/bin/setsid") ? "session" : "none";
}

/** The command that starts `program` in a process group of its own under `mode` (groupMode). */
function groupCommand(
  mode: ReturnType<typeof groupMode>,
  program: string,
  args: readonly string[],
): [string, string[]] {
  if (mode === "pgid") return [PERL, ["-e", PGRP_EXEC, program, ...args]];
  if (mode === "session") return ["/usr/bin/setsid", [program, ...args]];
  return [program, [...args]];
}

/** Sends `sig` to the group led by `pid` (to `pid` alone under mode "none"); false once it is gone. */
function signalGroup(mode: ReturnType<typeof groupMode>, pid: number, sig: NodeJS.Signals): boolean {
  try {
    process.kill(mode === "none" ? pid : -pid, sig);
    return true;
  } catch {
    return false; // ESRCH: the group is gone
  }
}

/**
 * spawnSync of `program` in a process group of its own (perl execs it after setpgid, so its pid is the
 * group's id; without perl, setsid(1) does the same in a new session), bounded by `timeoutMs`: on
 * timeout spawnSync kills only that process, so the whole group is then sent SIGKILL — a reference's
 * own children (torch_rpc.py's rank 1) end with it.
 */
export function spawnInGroup(
  program: string,
  args: readonly string[],
  timeoutMs: number,
): SpawnSyncReturns<string> & { timedOut: boolean } {
  const mode = groupMode();
  const opts = { encoding: "utf8" as const, timeout: timeoutMs, killSignal: "SIGKILL" as const };
  const r = spawnSync(...groupCommand(mode, program, args), opts);
  const timedOut = (r.error as NodeJS.ErrnoException | undefined)?.code === "ETIMEDOUT";
  // NB: whatever of the group is left (none after a clean exit)
  if (mode !== "none" && r.pid) signalGroup(mode, r.pid, "SIGKILL");
  return Object.assign(r, { timedOut, error: timedOut ? undefined : r.error });
}

/** A program running in a process group of its own (spawnGroup), with its stdio piped. */
export interface GroupChild {
  readonly child: ChildProcessWithoutNullStreams;
  /** Sends `signal` to the whole group (SIGSTOP and SIGCONT pause and resume it); false once it is gone. */
  signal(signal: NodeJS.Signals): boolean;
}

/**
 * spawn (not spawnSync) of `program` in a process group of its own, as spawnInGroup starts it, for a
 * reference the bench talks to while it runs (torch_gpt_pipeline.py --serve). The caller ends it; its
 * signal("SIGKILL") ends the program and every process it started.
 */
export function spawnGroup(program: string, args: readonly string[]): GroupChild {
  const mode = groupMode();
  const child = spawn(...groupCommand(mode, program, args));
  return { child, signal: (sig) => (child.pid ? signalGroup(mode, child.pid, sig) : false) };
}
