/**
 * bench/spawn_group.ts spawnInGroup: a reference benchmark that outlives its bound is ended with every
 * process it started (issue 23: a timed-out torch_rpc.py used to leave its rank-1 child running).
 * spawnGroup: a reference the bench talks to (torch_gpt_pipeline.py --serve) is paused, resumed and
 * ended as a whole group, its children included.
 */
import fs from "node:fs";
import { describe, expect, it } from "vitest";
import { groupMode, spawnGroup, spawnInGroup } from "../../bench/spawn_group.js";

const alive = (pid: number): boolean => {
  try {
    process.kill(pid, 0);
    return true;
  } catch {
    return false;
  }
};

/** The state letter of /proc/<pid>/stat (R, S, T for stopped, ...), or null once the process is gone. */
const state = (pid: number): string | null => {
  try {
    const stat = fs.readFileSync(`/proc/${pid}/stat`, "utf8");
    return stat.slice(stat.lastIndexOf(")") + 2).split(" ")[0]!;
  } catch {
    return null;
  }
};

/** Polls until `f` holds, for at most 5 s; whether it did. */
const until = async (f: () => boolean): Promise<boolean> => {
  const deadline = Date.now() + 5_000;
  while (!f() && Date.now() < deadline) await new Promise((res) => setTimeout(res, 20));
  return f();
};

/** pid, process group and session of a /proc/<pid>/stat line (the name in parentheses may hold spaces). */
const ids = (stat: string): [number, number, number] => {
  const pid = Number(stat.slice(0, stat.indexOf(" ")));
  const rest = stat.slice(stat.lastIndexOf(")") + 2).split(" ");
  return [pid, Number(rest[2]), Number(rest[3])];
};

describe.skipIf(groupMode() === "none")("spawnInGroup", () => {
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

  it.skipIf(groupMode() !== "pgid")("leads a process group of its own in this session, not a new session", () => {
    // NB: a new session would be a scheduling autogroup of its own (see bench/spawn_group.ts)
    const r = spawnInGroup("/bin/sh", ["-c", "cat /proc/$$/stat"], 10_000);
    expect(r.status).toBe(0);
    const [pid, pgrp, session] = ids(r.stdout);
    const [, ourPgrp, ourSession] = ids(fs.readFileSync("/proc/self/stat", "utf8"));
    expect(pid).toBe(r.pid);
    expect(pgrp).toBe(pid);
    expect(pgrp).not.toBe(ourPgrp);
    expect(session).toBe(ourSession);
  });

  it("says why when the program cannot be started", () => {
    const r = spawnInGroup("/nonexistent/tprpc-no-such-program", [], 10_000);
    expect(r.timedOut).toBe(false);
    expect(r.error !== undefined || (r.status !== 0 && /No such file/.test(r.stderr))).toBe(true);
  });
});

describe.skipIf(groupMode() === "none")("spawnGroup", () => {
  it("stops, resumes and kills the program with its children", async () => {
    // NB: the shell starts a child of its own (as torch_gpt_pipeline.py's master starts its ranks), prints its
    // pid, then echoes its input lines back
    const g = spawnGroup("/bin/sh", ["-c", 'sleep 60 & echo $!; while read l; do echo "got $l"; done']);
    const out: string[] = [];
    g.child.stdout.on("data", (d: Buffer) => out.push(...d.toString().split("\n").filter(Boolean)));
    const exited = new Promise((res) => g.child.once("exit", res));
    try {
      expect(await until(() => out.length >= 1)).toBe(true);
      const child = Number(out[0]);
      const shell = g.child.pid!;
      expect(g.signal("SIGSTOP")).toBe(true);
      expect(await until(() => state(shell) === "T" && state(child) === "T")).toBe(true);
      g.child.stdin.write("one\n");
      await new Promise((res) => setTimeout(res, 200));
      expect(out).toEqual([String(child)]); // stopped: the line waits
      expect(g.signal("SIGCONT")).toBe(true);
      expect(await until(() => out.includes("got one"))).toBe(true);
      expect(state(child)).not.toBe("T");
      expect(g.signal("SIGKILL")).toBe(true);
      expect(await until(() => state(shell) === null || state(shell) === "Z")).toBe(true);
      expect(await until(() => state(child) === null)).toBe(true);
      await exited;
      expect(g.signal("SIGCONT")).toBe(false); // the group is gone
    } finally {
      g.signal("SIGKILL");
    }
  });
});
