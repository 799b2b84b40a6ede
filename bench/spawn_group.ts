/**
 * Running a reference benchmark (a PyTorch RPC script that starts its own ranks) so that a timeout
 * ends every process it started (issue 23: a timed-out torch_rpc.py used to leave its rank 1 running).
 * No SDK import: test/bench/spawn_group.test.ts checks it on its own.
 */
import { type SpawnSyncReturns, spawnSync } from "node:child_process";
import fs from "node:fs";

/**
 * spawnSync of `program` in a process group of its own (setsid(1) execs it, so its pid is the group's
 * id), bounded by `timeoutMs`: on timeout spawnSync kills only that process, so the whole group is
 * then sent SIGKILL — a reference's own children (torch_rpc.py's rank 1) end with it.
 */
export function spawnInGroup(
  program: string,
  args: readonly string[],
  timeoutMs: number,
): SpawnSyncReturns<string> & { timedOut: boolean } {
  const setsid = fs.existsSync("/usr/bin/setsid") ? "/usr/bin/setsid" : undefined;
  const r = setsid
    ? spawnSync(setsid, [program, ...args], { encoding: "utf8", timeout: timeoutMs, killSignal: "SIGKILL" })
    : spawnSync(program, args, { encoding: "utf8", timeout: timeoutMs, killSignal: "SIGKILL" });
  const timedOut = (r.error as NodeJS.ErrnoException | undefined)?.code === "ETIMEDOUT";
  if (setsid && r.pid) {
    try {
      process.kill(-r.pid, "SIGKILL"); // whatever of the group is left (none after a clean exit)
    } catch {
      // ESRCH: the group is gone already
    }
  }
  return Object.assign(r, { timedOut, error: timedOut ? undefined : r.error });
}
