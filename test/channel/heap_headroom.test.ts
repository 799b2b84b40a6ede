/**
 * Old-generation headroom (sdk/channel/heap_headroom.ts): which setting a process gets, and that a
 * master started with plain `node` (no flags) receives 4 MB tensors over shm without the
 * mark-compacts a small heap costs (measured without the headroom: 13–16 per 200 round trips).
 */
import { spawn } from "node:child_process";
import path from "node:path";
import { describe, expect, it } from "vitest";
import {
  GC_SERIAL_FLAGS,
  applyGcSerial,
  ensureGcSerial,
  gcSerial,
  heapGrowingPercent,
  heapHeadroomMb,
} from "../../sdk/channel/heap_headroom.js";

const fixture = path.resolve(import.meta.dirname, "fixtures/plain_master.mjs");

function plainMaster(env: NodeJS.ProcessEnv): Promise<{ majors: number; headroomMb: number; channel: string }> {
  return new Promise((resolve, reject) => {
    const child = spawn(process.execPath, [fixture, "100"], { env, stdio: ["ignore", "pipe", "inherit"] });
    let out = "";
    child.stdout.on("data", (d: Buffer) => (out += d.toString()));
    const timer = setTimeout(() => child.kill("SIGKILL"), 60_000);
    child.once("exit", (code, signal) => {
      clearTimeout(timer);
      const line = out.split("\n").find((l) => l.startsWith("{"));
      if (code === 0 && line) resolve(JSON.parse(line) as { majors: number; headroomMb: number; channel: string });
      else reject(new Error(`the plain master ended (${signal ?? code}): ${out}`));
    });
  });
}

describe("heap headroom", () => {
  it("defaults to 64 MiB, reads TPRPC_HEAP_HEADROOM_MB, and stands aside for node's own heap flags", () => {
    expect(heapHeadroomMb({}, [])).toBe(64);
    expect(heapHeadroomMb({ TPRPC_HEAP_HEADROOM_MB: "0" }, [])).toBe(0);
    expect(heapHeadroomMb({ TPRPC_HEAP_HEADROOM_MB: "16" }, [])).toBe(16);
    expect(heapHeadroomMb({ TPRPC_HEAP_HEADROOM_MB: "lots" }, [])).toBe(64);
    expect(heapHeadroomMb({}, ["--initial-old-space-size=256"])).toBe(0);
    expect(heapHeadroomMb({ NODE_OPTIONS: "--min_old_space_size=100" }, [])).toBe(0);
  });

  it("sets V8's growing percent to 100 unless TPRPC_HEAP_GROWING_PERCENT (0-400) or node's own flag says otherwise", () => {
    expect(heapGrowingPercent({}, [])).toBe(100);
    expect(heapGrowingPercent({ TPRPC_HEAP_GROWING_PERCENT: "0" }, [])).toBe(0);
    expect(heapGrowingPercent({ TPRPC_HEAP_GROWING_PERCENT: "250" }, [])).toBe(250);
    expect(heapGrowingPercent({ TPRPC_HEAP_GROWING_PERCENT: "900" }, [])).toBe(100);
    expect(heapGrowingPercent({ TPRPC_HEAP_GROWING_PERCENT: "more" }, [])).toBe(100);
    expect(heapGrowingPercent({}, ["--heap-growing-percent=30"])).toBe(0);
    expect(heapGrowingPercent({ NODE_OPTIONS: "--heap_growing_percent=30" }, [])).toBe(0);
    // NB: the heap size flags leave the growing percent to us
    expect(heapGrowingPercent({}, ["--initial-old-space-size=256"])).toBe(100);
  });

  it("runs scavenges and array-buffer sweeping on the main thread unless TPRPC_GC_SERIAL=0 or node's own GC flags say otherwise", () => {
    expect(gcSerial({}, [])).toBe(true);
    expect(gcSerial({ TPRPC_GC_SERIAL: "0" }, [])).toBe(false);
    expect(gcSerial({ TPRPC_GC_SERIAL: "1" }, [])).toBe(true);
    expect(gcSerial({}, ["--single-threaded-gc"])).toBe(false);
    expect(gcSerial({}, ["--parallel_scavenge"])).toBe(false);
    expect(gcSerial({ NODE_OPTIONS: "--no-concurrent-array-buffer-sweeping" }, [])).toBe(false);
    // NB: heap size flags are not GC threading flags
    expect(gcSerial({}, ["--initial-old-space-size=256"])).toBe(true);
    // the flags V8 reads at each collection, only when on
    const set: string[] = [];
    expect(applyGcSerial(false, (f) => set.push(f))).toBe(false);
    expect(set).toEqual([]);
    expect(applyGcSerial(true, (f) => set.push(f))).toBe(true);
    expect(set).toEqual(["--no-parallel-scavenge", "--no-concurrent-array-buffer-sweeping"]);
    expect([...GC_SERIAL_FLAGS]).toEqual(set);
    // once per process, as this process's environment says (the real V8 flags: this process goes on fine)
    expect(ensureGcSerial()).toBe(gcSerial());
    expect(ensureGcSerial()).toBe(gcSerial());
    // NB: 64 buffers of 4 MiB set off scavenges (young ArrayBuffer bytes), which then run with the flags set
    let bytes = 0;
    for (let i = 0; i < 64; i++) bytes += new ArrayBuffer(4 << 20).byteLength;
    expect(bytes).toBe(256 << 20);
  });

  it("a plain node master receives 100 round trips of 4 MB over shm with at most one mark-compact", async () => {
    const env = { ...process.env };
    delete env.NODE_OPTIONS;
    delete env.TPRPC_HEAP_HEADROOM_MB;
    const r = await plainMaster(env);
    expect(r.channel).toBe("shm");
    expect(r.headroomMb).toBe(64);
    expect(r.majors).toBeLessThanOrEqual(1);
  }, 90_000);
});
