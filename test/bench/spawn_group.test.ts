/**
 * bench/spawn_group.ts spawnInGroup: a reference benchmark that outlives its bound is ended with every
 * process it started (issue 23: a timed-out torch_rpc.py used to leave its rank-1 child running).
 */
import fs from "node:fs";
import { describe, expect, it } from "vitest";
import { spawnInGroup } from "../../bench/spawn_group.js";

const alive = (pid: number): boolean => {
  try {
    process.kill(pid, 0);
    return true;
  } catch {
    return false;
  }
};

describe.skipIf(!fs.existsSync("/usr/bin/setsid"))("spawnInGroup", () => {
  it("kills the program's children too when it times out", async () => {
    // NB: the shell starts a child of its own (as torch_rpc.py starts rank 1), prints its pid, then waits
    const r = spawnInGroup("/bin/sh", ["-c", "sleep 60 & echo $!; wait"], 1_500);
    expect(r.timedOut).toBe(true);
    const child = Number(r.stdout.trim());
    expect(child).toBeGreaterThan(0);
    const deadline = Date.now() + 5_000;
    while (alive(child) && Date.now() < deadline) await new Promise((res) => setTimeout(res, 50));
    expect(alive(child)).toBe(false);
  });

  it("returns a finished program's output and status", () => {
    const r = spawnInGroup("/bin/sh", ["-c", "echo hi; exit 3"], 10_000);
    expect(r.timedOut).toBe(false);
    expect(r.status).toBe(3);
    expect(r.stdout).toBe("hi\n");
  });
});
