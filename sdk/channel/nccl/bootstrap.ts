/**
 * The nccl channel of one pipe: a two-rank communicator set up over the
 * pipe's control connection, then ncclSend/ncclRecv on a dedicated stream.
 *
 * Setup (both sides, bounded by bootstrap.timeoutMs):
 * 1. The acceptor is rank 0 (the lower rank): ncclGetUniqueId, and the id
 *    goes to the connector as {ncclId} over the bootstrap.
 * 2. Both call ncclCommInitRank(2, id, rank) on `device`, off the JS thread.
 * 3. Both tell the other {ncclInit: result, message}; the channel exists only
 *    if both ranks succeeded. Otherwise each side aborts its communicator and
 *    rejects with NcclError, and ncclOrStaging() sets up cuda_staging
 *    instead; since both sides see both results, they fall back together.
 * Transfers: NCCL matches point-to-point calls in order, which the channel
 * interface guarantees, so a descriptor is just the byte length.
 *
 * NB: NCCL needs one GPU per rank. The lent machines have one GPU, so this
 * cannot run there; it is tested against a stand-in only
 * (test/channel/nccl.test.ts).
 */
import { ChannelNotViableError, ProtocolError, WorkerUnavailableError } from "../../errors/index.js";
import type { Channel, ChannelBootstrap, ChannelBuffer, ChannelSend, SetupValue } from "../interface.js";
import { devicePointer } from "../cuda_ipc/driver.js";
import { NCCL_UNIQUE_ID_BYTES, NcclError, type NcclDriver } from "./driver.js";

type SetupMsg = { ncclId?: Uint8Array; ncclInit?: number; message?: string };

function untilFence(ready: () => boolean, pollMs: number, closed: () => boolean): Promise<void> {
  return new Promise<void>((resolve, reject) => {
    const poll = (): void => {
      try {
        if (closed()) return; // NB: close() already rejected the caller's promise
        if (ready()) resolve();
        else setTimeout(poll, pollMs);
      } catch (e) {
        reject(e as Error);
      }
    };
    poll();
  });
}

function within<T>(p: Promise<T>, ms: number, what: string): Promise<T> {
  let timer: NodeJS.Timeout | undefined;
  const t = new Promise<never>((_, reject) => {
    timer = setTimeout(() => reject(new ChannelNotViableError(`nccl: ${what} took over ${ms} ms`)), ms);
  });
  return Promise.race([p, t]).finally(() => clearTimeout(timer));
}

/** Sets up the nccl channel of one pipe on `device`; rejects with NcclError / ChannelNotViableError. */
export async function setupNcclChannel(
  b: ChannelBootstrap,
  driver: NcclDriver,
  device: number,
  pollMs = 1,
): Promise<Channel> {
  const rank = b.role === "acceptor" ? 0 : 1;
  const inbox: SetupMsg[] = [];
  let wake: (() => void) | null = null;
  b.onMessage((m: SetupValue) => {
    inbox.push(m as SetupMsg);
    wake?.();
  });
  const next = async <K extends keyof SetupMsg>(k: K): Promise<SetupMsg> => {
    for (;;) {
      const i = inbox.findIndex((m) => m[k] !== undefined);
      if (i >= 0) return inbox.splice(i, 1)[0]!;
      await new Promise<void>((r) => (wake = r));
    }
  };

  // 1. The unique id, made by rank 0.
  let id: Uint8Array;
  if (rank === 0) {
    id = driver.getUniqueId();
    await b.send({ ncclId: id });
  } else {
    id = (await within(next("ncclId"), b.timeoutMs, `waiting for ${b.peerName}'s ncclUniqueId`)).ncclId!;
    if (!(id instanceof Uint8Array) || id.byteLength !== NCCL_UNIQUE_ID_BYTES)
      throw new ProtocolError(`nccl: "${b.peerName}" sent an ncclUniqueId that is not ${NCCL_UNIQUE_ID_BYTES} bytes`);
  }

  // 2. The communicator. The peer's result is awaited at the same time: when it failed first, ours
  // cannot complete (NCCL waits for every rank), so we stop waiting and abort it once it returns.
  // NB: a blocking ncclCommInitRank cannot be interrupted; the native binding runs it off the JS thread.
  const init = driver.commInitRank(device, 2, id, rank);
  const peerResult = within(next("ncclInit"), b.timeoutMs, `waiting for ${b.peerName}'s ncclCommInitRank result`);
  peerResult.catch(() => undefined);
  const peerFailed = peerResult.then((m) => (m.ncclInit !== 0 ? m : new Promise<never>(() => undefined)));
  let comm: bigint | null = null;
  let mine: Error | null = null;
  try {
    const first = await within(Promise.race([init, peerFailed]), b.timeoutMs, "ncclCommInitRank");
    if (typeof first === "bigint") comm = first;
    else mine = new NcclError(`ncclCommInitRank on "${b.peerName}"`, first.ncclInit ?? -1, first.message);
  } catch (e) {
    mine = e as Error;
  }
  if (comm === null) init.then((c) => driver.commAbort(c)).catch(() => undefined);

  // 3. Both results, then both go on or both fall back.
  const code = mine instanceof NcclError ? mine.result : mine ? -1 : 0;
  await b.send({ ncclInit: code, message: mine?.message ?? "" });
  if (mine) throw mine;
  let peer: SetupMsg;
  try {
    peer = await peerResult;
  } catch (e) {
    driver.commAbort(comm!);
    throw e;
  }
  if (peer.ncclInit !== 0) {
    driver.commAbort(comm!);
    throw new NcclError(`ncclCommInitRank on "${b.peerName}"`, peer.ncclInit ?? -1, peer.message);
  }
  return ncclChannel(b, driver, device, comm!, 1 - rank, pollMs);
}

function ncclChannel(
  b: ChannelBootstrap,
  d: NcclDriver,
  device: number,
  comm: bigint,
  peer: number,
  pollMs: number,
): Channel {
  // NB: a dedicated stream, so NCCL's kernels never queue behind compute; the pipe must make it
  // wait on the producer's stream before a send (not wired yet: no pipe sends device buffers).
  const stream = d.streamCreate(device);
  let closed = false;
  let pending = 0;
  const fails = new Set<(e: Error) => void>();
  const track = (p: Promise<void>): Promise<void> => {
    pending++;
    return new Promise<void>((resolve, reject) => {
      fails.add(reject);
      // NB: settled before the caller resumes, so a close() right after `await done` sees the channel
      // idle and destroys the communicator rather than aborting it.
      const settle = (): void => {
        pending--;
        fails.delete(reject);
      };
      p.then(
        () => (settle(), resolve()),
        (e: unknown) => (settle(), reject(e as Error)),
      );
    });
  };
  const close = (error?: Error): void => {
    if (closed) return;
    closed = true;
    if (pending > 0) d.commAbort(comm);
    else d.commDestroy(comm);
    const e = error ?? new WorkerUnavailableError(`the nccl channel to "${b.peerName}" closed`, b.peerName);
    for (const f of fails) f(e);
  };
  b.onClose((e) => close(e ?? undefined));
  return {
    name: "nccl",
    get closed() {
      return closed;
    },
    send(buffer: ChannelBuffer): ChannelSend {
      const descriptor = new Uint8Array(8);
      try {
        if (closed) throw new WorkerUnavailableError(`the nccl channel to "${b.peerName}" is closed`, b.peerName);
        if (buffer.kind !== "cuda")
          throw new ChannelNotViableError("nccl moves device buffers only; a host buffer came");
        new DataView(descriptor.buffer).setFloat64(0, buffer.byteLength, true);
        d.send(comm, devicePointer(buffer.memory) + BigInt(buffer.offset), buffer.byteLength, peer, stream);
        return { descriptor, done: track(untilFence(d.fence(device, stream), pollMs, () => closed)) };
      } catch (e) {
        return { descriptor, done: Promise.reject(e as Error) };
      }
    },
    async recv(descriptor: Uint8Array, into: ChannelBuffer): Promise<void> {
      if (closed) throw new WorkerUnavailableError(`the nccl channel to "${b.peerName}" is closed`, b.peerName);
      if (descriptor.byteLength !== 8) throw new ProtocolError("nccl: a descriptor has 8 bytes");
      const n = new DataView(descriptor.buffer, descriptor.byteOffset, 8).getFloat64(0, true);
      if (into.kind !== "cuda") throw new ChannelNotViableError("nccl receives into device buffers only");
      if (into.byteLength !== n) throw new ProtocolError(`nccl: ${n} bytes sent, destination holds ${into.byteLength}`);
      d.recv(comm, devicePointer(into.memory) + BigInt(into.offset), n, peer, stream);
      await track(untilFence(d.fence(device, stream), pollMs, () => closed));
    },
    close,
  };
}

/**
 * nccl for a pipe pair, or cuda_staging where the communicator cannot be built
 * (either rank's ncclCommInitRank failed or timed out). `fellBack` says why.
 */
export async function ncclOrStaging(
  nccl: () => Promise<Channel>,
  staging: () => Promise<Channel>,
): Promise<{ channel: Channel; fellBack: Error | null }> {
  try {
    return { channel: await nccl(), fellBack: null };
  } catch (e) {
    if (!(e instanceof ChannelNotViableError)) throw e;
    return { channel: await staging(), fellBack: e };
  }
}
