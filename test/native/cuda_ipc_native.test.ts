/**
 * The cuda_ipc channel over the addon's native driver (sdk/channel/cuda_ipc/native_driver.ts,
 * native/src/gpu/cuda_ipc.cc) in two real processes (fixtures/gpu-channel-pair.mjs), against the
 * compiled stand-in libcuda of ./cuda_standin.ts: its "device" memory and interprocess events are
 * shared files, so an IPC handle made in one process opens in the other. Both processes append to
 * one call log, in call order; the tests read the protocol's order from it. The stand-in moves
 * host bytes: this checks the calls, their order and the bytes, not a GPU.
 */
import fs from "node:fs";
import os from "node:os";
import path from "node:path";
import { afterAll, describe, expect, it } from "vitest";
import { buildStandInDriver } from "./cuda_standin.js";
import { nativeOrSkip, runFixture } from "./helpers.js";

const { native, skip } = nativeOrSkip();
const tmp = fs.mkdtempSync(path.join(os.tmpdir(), "tprpc-cuda-ipc-"));
afterAll(() => fs.rmSync(tmp, { recursive: true, force: true }));

interface PairResult {
  viable: { viable: boolean; why: string | null };
  transfers: { k: number; intact: boolean }[];
  peer: { viable: { viable: boolean }; badHandle: { name: string; result: number; call: string; message: string } };
}

describe.skipIf(skip !== null)("cuda_ipc over the addon, two processes, stand-in libcuda", () => {
  let log: string[] = [];
  let r: PairResult;

  it("picks the native driver, moves every buffer intact", () => {
    const dir = buildStandInDriver(path.join(tmp, "driver"), native!.libraryTable().cuda.symbols);
    const ipc = path.join(tmp, "ipc");
    fs.mkdirSync(ipc);
    const file = path.join(tmp, "calls.log");
    r = runFixture<PairResult>("gpu-channel-pair.mjs", ["cuda_ipc"], {
      env: {
        LD_LIBRARY_PATH: dir,
        STANDIN_LOG: file,
        STANDIN_LOG_EVENTS: "1",
        STANDIN_IPC_DIR: ipc,
        STANDIN_NAME: "A",
        // The receiver's wait for its copy takes 30 ms (off its JS thread), as a copy still running would.
        CHILD_STANDIN_EVENT_SYNC_MS: "30",
      },
    }).result;
    log = fs.readFileSync(file, "utf8").trim().split("\n");
    expect(r.viable).toEqual({ viable: true, why: null });
    expect(r.peer.viable.viable).toBe(true);
    expect(r.transfers).toEqual([0, 1, 2, 3].map((k) => ({ k, intact: true })));
  });

  it("opens each segment's handle once: two segments, four transfers, two opens, two closes", () => {
    const b = log.filter((l) => l.startsWith("B ipc"));
    const opens = b.filter((l) => l.startsWith("B ipcopen "));
    // The 600 kB and 700 kB blocks share the small pool's 2 MB segment; the 3 MB block has its own.
    expect(opens, log.join("\n")).toHaveLength(2);
    expect(opens[0]).toBe("B ipcopen 2097152");
    expect(b.filter((l) => l.startsWith("B ipcopenevent"))).toHaveLength(1);
    const closes = b.filter((l) => l.startsWith("B ipcclose"));
    expect(closes.sort()).toEqual(opens.map((l) => l.replace("ipcopen", "ipcclose")).sort());
    expect(log.filter((l) => l.startsWith("A ipcgetmem"))).toHaveLength(4);
  });

  it("per transfer: sender's event, receiver waits on it before the copy, done only after the receiver's event", () => {
    // Split the log at the sender's "done" marks: transfer k's calls come before "A done k".
    const parts: string[][] = [[]];
    for (const l of log) {
      if (/^A done \d+$/.test(l)) parts.push([]);
      else parts[parts.length - 1]!.push(l);
    }
    expect(parts).toHaveLength(5);
    const sizes = [600_000, 700_000, 3_000_000, 600_000];
    for (const [k, part] of parts.slice(0, 4).entries()) {
      const calls = part.filter((l) => /^(A eventrecord|B (streamwait|dtod|eventrecord|eventwait|eventdone))/.test(l));
      const sent = calls.find((l) => l.startsWith("A eventrecord"))!.split(" ")[2];
      const copy = calls.indexOf(`B dtod ${sizes[k]}`);
      expect(copy, part.join("\n")).toBeGreaterThan(0);
      // The copy stream waited on the sender's event before the copy.
      expect(calls.indexOf(`B streamwait ${sent}`)).toBeGreaterThan(-1);
      expect(calls.indexOf(`B streamwait ${sent}`)).toBeLessThan(copy);
      // The receiver waited (off its JS thread) on its own event, recorded after the copy, and only
      // once that wait ended did the sender's done (block reusable) come: the part ends with it.
      const mine = calls
        .slice(copy)
        .find((l) => l.startsWith("B eventrecord"))!
        .split(" ")[2];
      expect(calls.slice(calls.indexOf(`B eventrecord ${mine}`, copy))).toEqual([
        `B eventrecord ${mine}`,
        `B eventwait ${mine}`,
        `B eventdone ${mine}`,
      ]);
      expect(part.filter((l) => !l.startsWith("B eventsync")).at(-1)).toBe(`B eventdone ${mine}`);
    }
  });

  it("maps a driver failure to a typed CudaIpcError naming the call and CUresult", () => {
    expect(r.peer.badHandle).toMatchObject({ name: "CudaIpcError", result: 400, call: "cuIpcOpenMemHandle" });
    expect(r.peer.badHandle.message).toMatch(/cuIpcOpenMemHandle failed: CUDA_ERROR_INVALID_HANDLE \(400\)/);
  });

  it("a driver that lacks an IPC symbol is not viable, with the reason, and nothing crashes", () => {
    const dir = buildStandInDriver(path.join(tmp, "old"), native!.libraryTable().cuda.symbols, [
      "cuIpcOpenEventHandle",
    ]);
    const p = runFixture<{ cuda_ipc: { viable: boolean; why: string } }>("gpu-channel-pair.mjs", ["probe"], {
      env: { LD_LIBRARY_PATH: dir },
    }).result;
    expect(p.cuda_ipc.viable).toBe(false);
    expect(p.cuda_ipc.why).toMatch(
      /^cuda_ipc needs the CUDA driver: .*lacks 1 required symbol\(s\): cuIpcOpenEventHandle/,
    );
  });
});
