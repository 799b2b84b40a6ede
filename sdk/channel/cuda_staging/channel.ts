/**
 * The cuda_staging Channel of one pipe: ./staging.ts's Stager for device
 * buffers, host buffers as they are, and the host bytes carried as chunk
 * messages ({s: seq, b: bytes}) over the bootstrap, in order.
 *
 * NB: the chunks share the pipe's control connection (SETUP frames), so a
 * large transfer delays control frames behind it; a dedicated authenticated
 * TCP lane (as tcp's) is the next step. A chunk is handed to `b.send` as a
 * view on its pinned slot: the bootstrap copies it into its frame before it
 * returns (the ChannelBootstrap contract). That frame (and its decoding on the
 * receiver) is the one host copy besides the pinned slots; a lane writing
 * straight from the slots would remove it.
 * A descriptor is {seq u32, length f64}.
 *
 * `driver` is a string where this process has no device side (a worker
 * without GPUs): then host buffers move and a device buffer fails its
 * transfer with ChannelNotViableError saying why.
 */
import { ChannelNotViableError, ProtocolError, WorkerUnavailableError } from "../../errors/index.js";
import { devicePointer } from "../cuda_ipc/driver.js";
import type { Channel, ChannelBootstrap, ChannelBuffer, ChannelSend, SetupValue } from "../interface.js";
import { stagingChunks } from "./schedule.js";
import { type HostLane, Stager, type StagingDriver, type StagingOptions } from "./staging.js";

export function createCudaStagingChannel(
  b: ChannelBootstrap,
  driver: StagingDriver | string,
  opts: StagingOptions = {},
): Channel {
  const stager = typeof driver === "string" ? null : new Stager(driver, opts);
  const noDevice = (): Promise<never> =>
    Promise.reject(
      new ChannelNotViableError(`cuda_staging to "${b.peerName}" cannot copy device memory here: ${String(driver)}`),
    );
  const chunkBytes = opts.chunkBytes;
  let seq = 0;
  let closed = false;
  let closeError: Error | null = null;
  // Chunks that came before their recv, and recvs waiting for chunks, per transfer.
  const early = new Map<number, Uint8Array[]>();
  const waiting = new Map<number, { take: (c: Uint8Array) => void; fail: (e: Error) => void }>();
  const failAll = new Set<(e: Error) => void>();

  b.onMessage((msg: SetupValue) => {
    const m = msg as { s?: number; b?: Uint8Array } | null;
    if (typeof m?.s !== "number" || !(m.b instanceof Uint8Array)) {
      close(new ProtocolError(`cuda_staging: unexpected message from "${b.peerName}"`));
      return;
    }
    const w = waiting.get(m.s);
    if (w) w.take(m.b);
    else early.set(m.s, [...(early.get(m.s) ?? []), m.b]);
  });

  const close = (error?: Error): void => {
    if (closed) return;
    closed = true;
    closeError = error ?? new WorkerUnavailableError(`the cuda_staging channel to "${b.peerName}" closed`, b.peerName);
    stager?.close(closeError);
    for (const f of failAll) f(closeError);
    for (const w of waiting.values()) w.fail(closeError);
    waiting.clear();
    early.clear();
  };
  b.onClose((e) => close(e ?? undefined));

  const laneOut = (s: number): HostLane => ({
    send: (bytes) => b.send({ s, b: bytes }),
    recv: () => Promise.reject(new Error("unused")),
  });
  const laneIn = (s: number): HostLane => ({
    send: () => Promise.reject(new Error("unused")),
    recv: (into) =>
      new Promise<void>((resolve, reject) => {
        if (closeError) return reject(closeError);
        const put = (c: Uint8Array): void => {
          waiting.delete(s);
          if (c.byteLength !== into.byteLength)
            return reject(
              new ProtocolError(`cuda_staging: a chunk of ${c.byteLength} bytes, ${into.byteLength} expected`),
            );
          into.set(c);
          resolve();
        };
        const q = early.get(s);
        if (q && q.length > 0) {
          put(q.shift()!);
          if (q.length === 0) early.delete(s);
        } else waiting.set(s, { take: put, fail: reject });
      }),
  });
  const guard = (p: Promise<void>): Promise<void> =>
    new Promise<void>((resolve, reject) => {
      failAll.add(reject);
      p.then(resolve, reject).finally(() => failAll.delete(reject));
    });

  /** Host bytes in chunks straight through the lane (no pinned staging needed). */
  const hostSend = async (bytes: Uint8Array, lane: HostLane): Promise<void> => {
    for (const c of stagingChunks(bytes.byteLength, chunkBytes))
      await lane.send(bytes.subarray(c.offset, c.offset + c.length));
  };
  const hostRecv = async (into: Uint8Array, lane: HostLane): Promise<void> => {
    for (const c of stagingChunks(into.byteLength, chunkBytes))
      await lane.recv(into.subarray(c.offset, c.offset + c.length));
  };

  return {
    name: "cuda_staging",
    get closed() {
      return closed;
    },
    send(buffer: ChannelBuffer): ChannelSend {
      const s = seq++ >>> 0;
      const n = buffer.kind === "cpu" ? buffer.bytes.byteLength : buffer.byteLength;
      const descriptor = new Uint8Array(12);
      const v = new DataView(descriptor.buffer);
      v.setUint32(0, s, true);
      v.setFloat64(4, n, true);
      if (closeError) return { descriptor, done: Promise.reject(closeError) };
      const lane = laneOut(s);
      const work =
        buffer.kind === "cpu"
          ? hostSend(buffer.bytes, lane)
          : stager
            ? Promise.resolve().then(() =>
                stager.send(buffer.deviceIndex, devicePointer(buffer.memory) + BigInt(buffer.offset), n, lane),
              )
            : noDevice();
      return { descriptor, done: guard(work) };
    },
    async recv(descriptor: Uint8Array, into: ChannelBuffer): Promise<void> {
      if (descriptor.byteLength !== 12) throw new ProtocolError("cuda_staging: a descriptor has 12 bytes");
      const v = new DataView(descriptor.buffer, descriptor.byteOffset, 12);
      const s = v.getUint32(0, true);
      const n = v.getFloat64(4, true);
      const have = into.kind === "cpu" ? into.bytes.byteLength : into.byteLength;
      if (have !== n) throw new ProtocolError(`cuda_staging: ${n} bytes sent, destination holds ${have}`);
      const lane = laneIn(s);
      await guard(
        into.kind === "cpu"
          ? hostRecv(into.bytes, lane)
          : stager
            ? stager.recv(into.deviceIndex, devicePointer(into.memory) + BigInt(into.offset), n, lane)
            : noDevice(),
      );
    },
    close,
  };
}
