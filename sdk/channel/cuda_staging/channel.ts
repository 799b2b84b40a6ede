/**
 * The cuda_staging Channel of one pipe: ./staging.ts's Stager for device
 * buffers, over a host lane that is a tcp channel of its own
 * (sdk/channel/tcp: authenticated lane sockets the receiver dials, so the
 * kernel copies a chunk from the sender's pinned slot into the socket and
 * from the socket straight into the receiver's pinned slot, with no host copy
 * in between; chunks up to 64 KiB ride inside their descriptor).
 *
 * The bootstrap is split (./split.ts): {t} carries the inner tcp channel's
 * setup, {c} one notice per chunk, the inner channel's descriptor for it, in
 * send order. Transfers run one after another in each direction (the pipe
 * calls recv in send order, and the inner channel needs its recvs in its
 * sends' order), each overlapping its own chunks' copies. A host buffer (the
 * CPU side of a cuda-cpu pair) crosses in the same chunks, straight from and
 * into its own bytes (the other side may stage them). A descriptor is
 * {seq u32, length f64}.
 *
 * `driver` is a string where this process has no device side (a worker
 * without GPUs): then host buffers move and a device buffer fails its
 * transfer with ChannelNotViableError saying why.
 */
import { ChannelNotViableError, ProtocolError, WorkerUnavailableError } from "../../errors/index.js";
import { devicePointer } from "../cuda_ipc/driver.js";
import type { Channel, ChannelBootstrap, ChannelBuffer, ChannelSend, SetupValue } from "../interface.js";
import { tcpChannelContext } from "../tcp/index.js";
import { stagingChunks } from "./schedule.js";
import { type HostLane, Stager, type StagingDriver, type StagingOptions } from "./staging.js";
import { splitBootstrap } from "./split.js";

export async function createCudaStagingChannel(
  b: ChannelBootstrap,
  driver: StagingDriver | string,
  opts: StagingOptions = {},
): Promise<Channel> {
  const parts = splitBootstrap(b, ["t", "c"]);
  const inner = await tcpChannelContext.createChannel(parts.t);
  const stager = typeof driver === "string" ? null : new Stager(driver, opts);
  const noDevice = (): Promise<never> =>
    Promise.reject(
      new ChannelNotViableError(`cuda_staging to "${b.peerName}" cannot copy device memory here: ${String(driver)}`),
    );
  let seq = 0;
  let closed = false;
  let closeError: Error | null = null;
  // The inner channel's descriptors, in its send order, and recvs waiting for the next one.
  const notices: Uint8Array[] = [];
  const waiting: { take: (d: Uint8Array) => void; fail: (e: Error) => void }[] = [];
  const failAll = new Set<(e: Error) => void>();
  let sending: Promise<unknown> = Promise.resolve();
  let receiving: Promise<unknown> = Promise.resolve();

  const close = (error?: Error): void => {
    if (closed) return;
    closed = true;
    closeError = error ?? new WorkerUnavailableError(`the cuda_staging channel to "${b.peerName}" closed`, b.peerName);
    stager?.close(closeError);
    inner.close(closeError);
    for (const f of failAll) f(closeError);
    for (const w of waiting.splice(0)) w.fail(closeError);
    notices.length = 0;
  };
  parts.c.onMessage((m: SetupValue) => {
    if (!(m instanceof Uint8Array)) {
      close(new ProtocolError(`cuda_staging: unexpected message from "${b.peerName}"`));
      return;
    }
    const w = waiting.shift();
    if (w) w.take(m);
    else notices.push(m);
  });
  b.onClose((e) => close(e ?? undefined));

  const nextNotice = (): Promise<Uint8Array> =>
    new Promise((resolve, reject) => {
      if (closeError) return reject(closeError);
      const d = notices.shift();
      if (d) resolve(d);
      else waiting.push({ take: resolve, fail: reject });
    });
  /** Host bytes to the peer (one inner transfer), resolved once the bytes may be reused. */
  const lane: HostLane = {
    async send(bytes) {
      const s = inner.send({ kind: "cpu", bytes });
      await parts.c.send(s.descriptor);
      await s.done;
    },
    async recv(into) {
      await inner.recv(await nextNotice(), { kind: "cpu", bytes: into });
    },
  };
  /** Host bytes in the Stager's chunks straight through the lane (no pinned staging needed). */
  const hostSend = async (bytes: Uint8Array): Promise<void> => {
    for (const c of stagingChunks(bytes.byteLength, opts.chunkBytes))
      await lane.send(bytes.subarray(c.offset, c.offset + c.length));
  };
  const hostRecv = async (into: Uint8Array): Promise<void> => {
    for (const c of stagingChunks(into.byteLength, opts.chunkBytes))
      await lane.recv(into.subarray(c.offset, c.offset + c.length));
  };
  const guard = <T>(p: Promise<T>): Promise<T> =>
    new Promise<T>((resolve, reject) => {
      failAll.add(reject);
      p.then(resolve, reject).finally(() => failAll.delete(reject));
    });
  /** Runs `work` after the previous transfer of its direction; a failure does not stop the next. */
  const inTurn = (prev: Promise<unknown>, work: () => Promise<void>): Promise<void> => prev.then(work, work);

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
      const work = (): Promise<void> =>
        buffer.kind === "cpu"
          ? hostSend(buffer.bytes)
          : stager
            ? stager.send(buffer.deviceIndex, devicePointer(buffer.memory) + BigInt(buffer.offset), n, lane)
            : noDevice();
      const done = guard(inTurn(sending, work));
      sending = done.catch(() => undefined);
      return { descriptor, done };
    },
    recv(descriptor: Uint8Array, into: ChannelBuffer): Promise<void> {
      if (descriptor.byteLength !== 12)
        return Promise.reject(new ProtocolError("cuda_staging: a descriptor has 12 bytes"));
      const n = new DataView(descriptor.buffer, descriptor.byteOffset, 12).getFloat64(4, true);
      const have = into.kind === "cpu" ? into.bytes.byteLength : into.byteLength;
      if (have !== n)
        return Promise.reject(new ProtocolError(`cuda_staging: ${n} bytes sent, destination holds ${have}`));
      const work = (): Promise<void> =>
        into.kind === "cpu"
          ? hostRecv(into.bytes)
          : stager
            ? stager.recv(into.deviceIndex, devicePointer(into.memory) + BigInt(into.offset), n, lane)
            : noDevice();
      const done = guard(inTurn(receiving, work));
      receiving = done.catch(() => undefined);
      return done;
    },
    close,
  };
}
