/**
 * The logic the native GPU drivers add over the addon's calls, against a fake addon namespace (no
 * addon, no driver): cuda_ipc's process-wide reference-counted table of opened IPC handles, its
 * one copy stream per device, and its error mapping; nccl's fence, which reports the
 * communicator's asynchronous error while a transfer is pending. The addon side of both runs in
 * test/native/{cuda_ipc,nccl}_native.test.ts.
 */
import { describe, expect, it } from "vitest";
import { nativeIpcDriver } from "../../sdk/channel/cuda_ipc/native_driver.js";
import { CudaIpcError } from "../../sdk/channel/cuda_ipc/driver.js";
import { nativeNcclDriver } from "../../sdk/channel/nccl/native_driver.js";
import { NcclError } from "../../sdk/channel/nccl/driver.js";
import { ChannelNotViableError, NativeError } from "../../sdk/errors/index.js";

type Fake = Record<string, (...a: unknown[]) => unknown>;

function fakeGpu(overrides: Fake = {}): { gpu: Fake; calls: string[] } {
  const calls: string[] = [];
  let next = 100n;
  const gpu: Fake = {
    ipcOpenMemHandle: (d, h) => (calls.push(`open ${String(d)} ${(h as Uint8Array)[0]}`), next++),
    ipcCloseMemHandle: (d, b) => void calls.push(`close ${String(d)} ${String(b)}`),
    streamCreate: (d) => (calls.push(`stream ${String(d)}`), next++),
    eventCreate: () => next++,
    eventRecord: () => undefined,
    eventQuery: () => false,
    ncclCommGetAsyncError: () => 0,
    ncclErrorString: () => "remote process exited or there was a network error",
    ncclCommInitRank: () => Promise.resolve(7n),
    ncclSend: (d, c) => void calls.push(`send dev${String(d)} comm${String(c)}`),
    ...overrides,
  };
  return { gpu, calls };
}

const handle = (b: number): Uint8Array => new Uint8Array(64).fill(b);

describe("the native cuda_ipc driver's own logic", () => {
  it("shares one mapping per handle and device across drivers, unmapping on the last close", () => {
    const { gpu, calls } = fakeGpu();
    const a = nativeIpcDriver(gpu as never);
    const b = nativeIpcDriver(gpu as never); // a second pipe's driver in the same process
    const p1 = a.ipcOpenMemHandle(0, handle(1), 1);
    const p2 = b.ipcOpenMemHandle(0, handle(1), 1);
    const p3 = b.ipcOpenMemHandle(1, handle(1), 1); // the same handle on another device: its own mapping
    expect(p2).toBe(p1);
    expect(p3).not.toBe(p1);
    expect(calls).toEqual(["open 0 1", "open 1 1"]);
    a.ipcCloseMemHandle(0, p1);
    expect(calls).toHaveLength(2);
    b.ipcCloseMemHandle(0, p2);
    b.ipcCloseMemHandle(1, p3);
    expect(calls.slice(2)).toEqual([`close 0 ${p1}`, `close 1 ${p3}`]);
    // Opened again after the last close: a fresh open.
    a.ipcOpenMemHandle(0, handle(1), 1);
    expect(calls.at(-1)).toBe("open 0 1");
  });

  it("creates one copy stream per device, and records on the legacy default stream unless told", () => {
    const { gpu, calls } = fakeGpu();
    const d = nativeIpcDriver(gpu as never);
    expect(d.copyStream(0)).toBe(d.copyStream(0));
    expect(d.copyStream(1)).not.toBe(d.copyStream(0));
    expect(calls).toEqual(["stream 0", "stream 1"]);
    expect(d.currentStream(0)).toBe(0n);
    expect(nativeIpcDriver(gpu as never, { currentStream: (dev) => BigInt(40 + dev) }).currentStream(1)).toBe(41n);
  });

  it("turns ECUDA into CudaIpcError (call, CUresult) and ENOTVIABLE into ChannelNotViableError", () => {
    const { gpu } = fakeGpu({
      ipcGetMemHandle: () => {
        throw new NativeError("cuIpcGetMemHandle failed: CUDA_ERROR_INVALID_VALUE (1)", "ECUDA", 1);
      },
      ipcAddressRange: () => {
        throw new NativeError("cuda is not viable here: no driver", "ENOTVIABLE", 0);
      },
    });
    const d = nativeIpcDriver(gpu as never);
    let e: unknown;
    try {
      d.ipcGetMemHandle(0, 5n);
    } catch (x) {
      e = x;
    }
    expect(e).toBeInstanceOf(CudaIpcError);
    expect(e).toMatchObject({ call: "cuIpcGetMemHandle", result: 1 });
    expect(() => d.addressRange(0, 5n)).toThrow(ChannelNotViableError);
  });
});

describe("the native nccl driver's own logic", () => {
  it("sends in the communicator's device context and fails a pending fence on an async error", async () => {
    let asyncError = 0;
    const { gpu, calls } = fakeGpu({ ncclCommGetAsyncError: () => asyncError });
    const d = nativeNcclDriver(gpu as never);
    const comm = await d.commInitRank(3, 2, new Uint8Array(128), 0);
    d.send(comm, 1000n, 8, 1, 55n);
    expect(calls).toEqual(["send dev3 comm7"]);
    const ready = d.fence(3, 55n);
    expect(ready()).toBe(false);
    asyncError = 6;
    expect(ready).toThrow(NcclError);
    expect(ready).toThrow(/ncclCommGetAsyncError failed: ncclRemoteError/);
    expect(() => d.send(999n, 0n, 8, 1, 55n)).toThrow(/a communicator this driver did not create/);
  });

  it("rejects commInitRank with NcclError carrying the ncclResult_t", async () => {
    const { gpu } = fakeGpu({
      ncclCommInitRank: () =>
        Promise.reject(new NativeError("ncclCommInitRank failed: ... (ncclResult 5)", "ENCCL", 5)),
    });
    const p = nativeNcclDriver(gpu as never).commInitRank(0, 2, new Uint8Array(128), 1);
    await expect(p).rejects.toBeInstanceOf(NcclError);
    await expect(p).rejects.toMatchObject({ call: "ncclCommInitRank", result: 5 });
  });
});
