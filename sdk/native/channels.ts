/**
 * Typed wrapper of the addon's native channels (native/src/channels): the shm
 * rings, cma reads and the UCX engine that sdk/channel/{shm,cma,ucx} build on.
 * The addon is loaded by ./binding.ts only; this file types its `channels()`
 * namespace and turns native rejections into the sdk's `NativeError` (with
 * `code`, e.g. "ECONNRESET" when the peer died mid-transfer, and `errno`).
 *
 * Every transfer runs off the JS thread and returns a Promise; every `close()`
 * is idempotent and fails what is still pending with code "ECHANNELCLOSED".
 *
 * @example
 *   const ch = nativeChannels();
 *   if (ch) {
 *     const l = ch.shmListen();                      // send l.name to the peer
 *     const conn = await l.accept(peerPid, 10_000);  // the peer: ch.shmConnect(name, ourPid, 10_000)
 *     await conn.send(1, bytes);                     // the peer: conn.recv(1, dest)
 *     conn.close();
 *   }
 */
import { loadNative, toNativeError } from "./binding.js";

/** What an shm channel reports about its landing blocks and shared transfers (tests, debugging). */
export interface ShmLandingStats {
  offeredBytes: number;
  peerBytes: number;
  landedSends: number;
  sharedSends: number;
  peerFreeBlocks: number;
  /** Landing blocks we freed through the ring header's queue, and by socket message (the queue was full). */
  queuedFrees: number;
  socketFrees: number;
}

/** One direction-pair of shm rings to one peer process. */
export interface NativeShmChannel {
  /** Queues `bytes` as transfer `id` (sent in call order); resolves once they are in the ring (the buffer may be reused). */
  send(id: number, bytes: ArrayBufferView): Promise<void>;
  /** Fills `dest` with transfer `id`; its length must match what the peer sent. */
  recv(id: number, dest: ArrayBufferView): Promise<void>;
  /**
   * Copies `bytes` (64 KiB to 64 MiB) into a free landing block the peer offered, on this thread, and
   * returns the block's id; -1 when none of a fitting size is free (then use send).
   */
  land(bytes: ArrayBufferView): number;
  /** Our landing block `block`, which the peer filled with `length` bytes, as a buffer of its own; offered again once collected. Throws NativeError EPROTO for a block the peer does not hold. */
  adopt(block: number, length: number): ArrayBuffer;
  /** Copies our landing block `block` into `dest` and offers it again (when the bytes must land elsewhere). */
  takeLanded(block: number, dest: ArrayBufferView): void;
  /**
   * Hands the peer the shared storage (shareAlloc) that holds `bytes` (at least 64 KiB), freezing
   * its file first if needed, and returns the transfer's id; -1 when the bytes are not in one, or
   * this process wrote to them since the file was frozen (then land or send them).
   */
  share(bytes: ArrayBufferView): number;
  /** The peer's shared transfer `id` (`length` bytes), mapped copy-on-write as a buffer of its own. Throws NativeError EPROTO for a file that is not sealed or too short. */
  adoptShared(id: number, length: number): ArrayBuffer;
  /** Copies the peer's shared transfer `id` into `dest`. */
  takeShared(id: number, dest: ArrayBufferView): void;
  /** Bytes of landing blocks we offer, bytes of those the peer offers us, transfers we landed or shared, the peer's blocks free now. */
  landingStats(): ShmLandingStats;
  close(): void;
  readonly closed: boolean;
  readonly peerPid: number;
  /** Bytes of each ring (TPRPC_SHM_RING_BYTES, rounded up to a power of two). */
  readonly ringBytes: number;
}

/** A one-peer listener on an abstract unix socket (nothing on the file system). */
export interface NativeShmListener {
  /** Send this to the peer; it passes it to `shmConnect`. */
  readonly name: string;
  /** Waits for the peer, whose pid must be `expectedPid`; call once. */
  accept(expectedPid: number, timeoutMs: number): Promise<NativeShmChannel>;
  /** Frees the socket when accept() was never called; safe to call more than once. */
  close(): void;
}

/** A word of this process that a peer reads to test cma (`cmaCheck`). */
export interface NativeCmaProbe {
  pid: number;
  address: number;
  value: number;
}

export interface NativeCmaCheck {
  viable: boolean;
  /** /proc/sys/kernel/yama/ptrace_scope, or -1 without Yama. */
  yama: number;
  code?: string;
  errno?: number;
  /** Why not viable, saying what to change. */
  reason?: string;
}

/** One UCX context + worker + endpoint to one peer (native/src/channels/ucx/). */
export interface NativeUcxChannel {
  /** This worker's address: send it to the peer, which passes it to `connect`. */
  readonly address: Uint8Array;
  /** Creates the endpoint to the peer's worker; call once. */
  connect(peerAddress: Uint8Array): Promise<void>;
  /** Tagged send (tag = id); resolves when `bytes` may be reused (large ones: after the peer's matching recv). */
  send(id: number, bytes: ArrayBufferView): Promise<void>;
  /** Receives tag `id` into `dest`; the message must be exactly dest's length. */
  recv(id: number, dest: ArrayBufferView): Promise<void>;
  close(): void;
  readonly closed: boolean;
}

export interface NativeUcxInfo {
  viable: boolean;
  /** Why not: libucp missing or lacking a symbol; says what to install. */
  reason?: string;
  /** libucp's version, e.g. "1.13.1". */
  version?: string;
}

export interface NativeChannels {
  shmListen(): NativeShmListener;
  shmConnect(name: string, expectedPid: number, timeoutMs: number): Promise<NativeShmChannel>;
  readonly shmRingBytes: number;
  /**
   * Asks the kernel for a scheduler slice of `us` microseconds for the calling thread (SCHED_OTHER
   * only; threads it starts later inherit it; native/src/channels/sched.cc says why); returns the
   * slice now in effect in microseconds, 0 where the kernel has none (before Linux 6.12).
   */
  latencySlice(us: number): number;
  /** A zero-filled ArrayBuffer of `byteLength` bytes in a new shared-memory file (Tensor.shareMemory_; native/src/channels/shared.cc). */
  shareAlloc(byteLength: number): ArrayBuffer;
  /** Whether the view's bytes lie in shared memory made by shareAlloc or received from a peer that way. */
  isShared(view: ArrayBufferView): boolean;
  /** A zero-filled region of shared memory a peer on this host can map (native/src/channels/host_region.cc): the buffer, and the pid and descriptor that name it. */
  hostRegionCreate(byteLength: number): { buffer: ArrayBuffer; pid: number; fd: number };
  /** Maps a peer's region (its pid and descriptor) read-write; NativeError EREGION when it cannot (another host or uid, the peer gone). */
  hostRegionOpen(pid: number, fd: number, byteLength: number): ArrayBuffer;
  /**
   * out = inputs[0] op inputs[1] op ... elementwise, in list order (op 0 sum, 1 product, 2 max, 3 min); same-kind
   * typed arrays of one length. `threads` 1: on the calling thread alone; more or undefined: the kernel pool.
   */
  reduceN(op: number, out: ArrayBufferView, inputs: ArrayBufferView[], threads?: number): void;
  /** Stores a progress counter (uint32 at byteOffset of a region) and wakes its waiters in every process. */
  hostPost(buffer: ArrayBuffer, byteOffset: number, value: number): void;
  /** Blocks until every buffer's counter at byteOffset reached `target` (true), or timeoutMs passed (false). */
  hostWait(buffers: ArrayBuffer[], byteOffset: number, target: number, timeoutMs: number): boolean;
  cmaProbeWord(): NativeCmaProbe;
  cmaCheck(pid: number, address: number, value: number): NativeCmaCheck;
  /** Fills `dest` (its whole length) from `address` in process `pid`. */
  cmaRead(pid: number, address: number, dest: ArrayBufferView): Promise<void>;
  ucxInfo(): NativeUcxInfo;
  /** A new context and worker; `tls` (e.g. "shm", "tcp") overrides UCX_TLS for it. */
  ucxCreate(tls?: string): Promise<NativeUcxChannel>;
}

/** A native promise whose rejection becomes the sdk's NativeError. */
function typed<T>(p: Promise<T>): Promise<T> {
  return p.catch((e: unknown) => {
    throw toNativeError(e);
  });
}

function sync<T>(fn: () => T): T {
  try {
    return fn();
  } catch (e) {
    throw toNativeError(e);
  }
}

type RawShmChannel = {
  send(id: number, b: ArrayBufferView): Promise<number>;
  recv(id: number, b: ArrayBufferView): Promise<number>;
  land(b: ArrayBufferView): number;
  adopt(block: number, length: number): ArrayBuffer;
  takeLanded(block: number, b: ArrayBufferView): void;
  share(b: ArrayBufferView): number;
  adoptShared(id: number, length: number): ArrayBuffer;
  takeShared(id: number, b: ArrayBufferView): void;
  landingStats(): ShmLandingStats;
  close(): void;
  readonly closed: boolean;
  readonly peerPid: number;
  readonly ringBytes: number;
};
type RawShmListener = {
  name: string;
  accept(pid: number, timeoutMs: number): Promise<RawShmChannel>;
  close(): void;
};
type RawUcxChannel = {
  readonly address: Uint8Array;
  connect(peer: Uint8Array): Promise<number>;
  send(id: number, b: ArrayBufferView): Promise<number>;
  recv(id: number, b: ArrayBufferView): Promise<number>;
  close(): void;
  readonly closed: boolean;
};
type RawChannels = {
  shmListen(): RawShmListener;
  shmConnect(name: string, pid: number, timeoutMs: number): Promise<RawShmChannel>;
  shmRingBytes: number;
  latencySlice(us: number): number;
  shareAlloc(byteLength: number): ArrayBuffer;
  isShared(view: ArrayBufferView): boolean;
  hostRegionCreate(byteLength: number): { buffer: ArrayBuffer; pid: number; fd: number };
  hostRegionOpen(pid: number, fd: number, byteLength: number): ArrayBuffer;
  reduceN(op: number, out: ArrayBufferView, inputs: ArrayBufferView[], threads?: number): void;
  hostPost(buffer: ArrayBuffer, byteOffset: number, value: number): void;
  hostWait(buffers: ArrayBuffer[], byteOffset: number, target: number, timeoutMs: number): boolean;
  cmaProbeWord(): NativeCmaProbe;
  cmaCheck(pid: number, address: number, value: number): NativeCmaCheck;
  cmaRead(pid: number, address: number, dest: ArrayBufferView): Promise<number>;
  ucxInfo(): NativeUcxInfo;
  ucxCreate(tls?: string): Promise<RawUcxChannel>;
};

function shmChannel(raw: RawShmChannel): NativeShmChannel {
  return {
    send: (id, b) => typed(sync(() => raw.send(id, b))).then(() => undefined),
    recv: (id, b) => typed(sync(() => raw.recv(id, b))).then(() => undefined),
    land: (b) => sync(() => raw.land(b)),
    adopt: (block, length) => sync(() => raw.adopt(block, length)),
    takeLanded: (block, b) => sync(() => raw.takeLanded(block, b)),
    share: (b) => sync(() => raw.share(b)),
    adoptShared: (id, length) => sync(() => raw.adoptShared(id, length)),
    takeShared: (id, b) => sync(() => raw.takeShared(id, b)),
    landingStats: () => raw.landingStats(),
    close: () => raw.close(),
    get closed() {
      return raw.closed;
    },
    peerPid: raw.peerPid,
    ringBytes: raw.ringBytes,
  };
}

function ucxChannel(raw: RawUcxChannel): NativeUcxChannel {
  return {
    address: new Uint8Array(raw.address),
    connect: (peer) => typed(sync(() => raw.connect(peer))).then(() => undefined),
    send: (id, b) => typed(sync(() => raw.send(id, b))).then(() => undefined),
    recv: (id, b) => typed(sync(() => raw.recv(id, b))).then(() => undefined),
    close: () => raw.close(),
    get closed() {
      return raw.closed;
    },
  };
}

let cached: NativeChannels | null | undefined;

/** The native channels, or null when the addon is not loaded (then only the tcp channel is viable). */
export function nativeChannels(): NativeChannels | null {
  if (cached !== undefined) return cached;
  const native = loadNative();
  if (!native) return (cached = null);
  const raw = native.channels() as RawChannels;
  cached = {
    shmListen() {
      const l = sync(() => raw.shmListen());
      return {
        name: l.name,
        accept: (pid, timeoutMs) => typed(sync(() => l.accept(pid, timeoutMs))).then(shmChannel),
        close: () => l.close(),
      };
    },
    shmConnect: (name, pid, timeoutMs) => typed(sync(() => raw.shmConnect(name, pid, timeoutMs))).then(shmChannel),
    shmRingBytes: raw.shmRingBytes,
    // NB: absent from an addon built before it: the call then throws a TypeError, which the caller
    // (../channel/latency_slice.ts) catches
    latencySlice: (us) => sync(() => raw.latencySlice(us)),
    shareAlloc: (n) => sync(() => raw.shareAlloc(n)),
    isShared: (v) => raw.isShared(v),
    hostRegionCreate: (n) => sync(() => raw.hostRegionCreate(n)),
    hostRegionOpen: (pid, fd, n) => sync(() => raw.hostRegionOpen(pid, fd, n)),
    reduceN: (op, out, inputs, threads) => sync(() => raw.reduceN(op, out, inputs, threads)),
    hostPost: (b, off, v) => sync(() => raw.hostPost(b, off, v)),
    hostWait: (bs, off, target, ms) => sync(() => raw.hostWait(bs, off, target, ms)),
    cmaProbeWord: () => sync(() => raw.cmaProbeWord()),
    cmaCheck: (pid, address, value) => sync(() => raw.cmaCheck(pid, address, value)),
    cmaRead: (pid, address, dest) => typed(sync(() => raw.cmaRead(pid, address, dest))).then(() => undefined),
    ucxInfo: () => sync(() => raw.ucxInfo()),
    ucxCreate: (tls) => typed(sync(() => raw.ucxCreate(tls))).then(ucxChannel),
  };
  return cached;
}
