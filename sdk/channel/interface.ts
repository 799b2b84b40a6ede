/**
 * The channel layer's one interface. A pipe (sdk/pipe) joins two workers;
 * its transport (sdk/transport) carries control bytes — message headers and
 * structured payloads — and its channels carry the bulk bytes of tensor
 * storages, one channel per (local device kind, remote device kind) pair,
 * chosen per pipe as the best path both sides can use (shared memory or CMA
 * on one host, UCX across InfiniBand, TCP everywhere; CUDA IPC / NCCL for GPU
 * memory). Channels move bytes and device buffers; they never see a Tensor.
 *
 * Protocol story of a pipe, as far as channels are concerned:
 * 1. Every process registers its channel contexts once (./index.ts,
 *    `registerChannel`). A context that cannot run here says so with
 *    `isViable() === false` (a missing library or device is never a crash).
 * 2. When a pipe connects, both sides exchange `Capabilities`: host identity
 *    (boot id, namespace inodes, pid, uid), device counts, and one
 *    `ChannelAdvert` per viable (and allowed: options.channels,
 *    TPRPC_CHANNELS) context — its name, per-pair priorities and a domain
 *    descriptor. Two contexts can talk iff they have the same name and equal
 *    domain descriptors (e.g. shm: same boot id and IPC namespace).
 * 3. The accepting side runs `negotiate()` (sdk/pipe/negotiate.ts, a pure
 *    function): per device pair the highest-priority channel that both sides
 *    advertise for it; it sends the choice back. Both sides then call
 *    `createChannel(bootstrap)` on the chosen contexts — once per pipe and
 *    channel, serving every pair the channel was chosen for. Setup messages
 *    (addresses, segment names, tokens) travel over the pipe's control
 *    connection through `bootstrap.send` / `bootstrap.onMessage`, and stay
 *    available for the channel's lifetime (e.g. "done reading" notices).
 * 4. To send a message, the pipe calls `channel.send(buffer)` for each
 *    storage, puts the returned small `descriptor` in its control frame, and
 *    keeps the storage alive until `done` resolves. The peer's pipe calls
 *    `channel.recv(descriptor, destination)` on its matching channel, in the
 *    same order as the sends, exactly once per send — channels may rely on
 *    that order (a stream needs no transfer ids). The destination is the
 *    channel's own `adoptBuffer(descriptor, …)` where it offers one (shm: the
 *    bytes already sit in the receiver's shared memory), else fresh memory.
 * 5. `close(error?)` is idempotent and fails whatever is pending. When the
 *    peer dies or the pipe breaks, pending and later operations reject with
 *    WorkerUnavailableError (naming the peer); a channel that turns out not
 *    to work between these two peers rejects with ChannelNotViableError. A
 *    closed channel leaves nothing behind (no segment, descriptor or socket).
 */

/** Device kinds a channel buffer can live on. */
export type ChannelDeviceType = "cpu" | "cuda";

/** One device of a worker, e.g. { type: "cuda", index: 1 }; the CPU is { type: "cpu", index: 0 }. */
export interface DeviceRef {
  readonly type: ChannelDeviceType;
  readonly index: number;
}

/** A (local, remote) device-kind pair, from the point of view of the side that says it: "cpu-cuda" = our CPU, their GPU. */
export type DevicePairKey = `${ChannelDeviceType}-${ChannelDeviceType}`;

export const DEVICE_PAIRS: readonly DevicePairKey[] = ["cpu-cpu", "cpu-cuda", "cuda-cpu", "cuda-cuda"];

/** "cpu-cuda" seen from the other side is "cuda-cpu". */
export function flipPair(p: DevicePairKey): DevicePairKey {
  const [a, b] = p.split("-") as [ChannelDeviceType, ChannelDeviceType];
  return `${b}-${a}`;
}

/** Host memory: the bytes are a window on a storage (sending) or on the destination (receiving). */
export interface CpuBuffer {
  readonly kind: "cpu";
  readonly bytes: Uint8Array;
}

/**
 * Device memory: `memory` is the tensor layer's DeviceMemory object (its
 * `handle` is the CUdeviceptr as a bigint for CUDA), passed through untouched;
 * the bytes are [offset, offset + byteLength) of it.
 */
export interface DeviceBuffer {
  readonly kind: "cuda";
  readonly deviceIndex: number;
  readonly memory: unknown;
  readonly offset: number;
  readonly byteLength: number;
}

export type ChannelBuffer = CpuBuffer | DeviceBuffer;

/** The device a buffer lives on. */
export function bufferDevice(b: ChannelBuffer): DeviceRef {
  return b.kind === "cpu" ? { type: "cpu", index: 0 } : { type: "cuda", index: b.deviceIndex };
}

/** A buffer's length in bytes. */
export function bufferLength(b: ChannelBuffer): number {
  return b.kind === "cpu" ? b.bytes.byteLength : b.byteLength;
}

/** Values that can cross in setup messages and adverts (msgpack-safe, no classes). */
export type SetupValue =
  null | boolean | number | string | Uint8Array | readonly SetupValue[] | { readonly [key: string]: SetupValue };

/** Who this process is, as far as "can we share memory / read each other's memory" goes. */
export interface HostIdentity {
  hostname: string;
  /** /proc/sys/kernel/random/boot_id; "" where unknown (then no same-host channel is offered). */
  bootId: string;
  /** Namespace inodes from /proc/self/ns/* (e.g. { ipc: "4026531839", pid: ..., user: ..., net: ..., mnt: ... }); missing where unreadable. */
  namespaces: Readonly<Record<string, string>>;
  pid: number;
  /** Effective uid (-1 where unknown). */
  uid: number;
}

/** What one context offers a peer during negotiation. */
export interface ChannelAdvert {
  name: string;
  /** The pairs (from the advertiser's side) it can move, with their priorities: higher wins. */
  priorities: Partial<Record<DevicePairKey, number>>;
  /** Equal descriptors on both sides mean the two contexts can talk. */
  domain: string;
  /** Anything else the peer's context needs before setup (e.g. a UCX worker address). */
  info?: SetupValue;
}

/** What a worker tells each peer when a pipe connects. */
export interface Capabilities {
  /** Bumped when the negotiation format changes; peers with another version fail with ChannelNotViableError. */
  version: number;
  /** The worker name. */
  name: string;
  host: HostIdentity;
  /** How many devices of each kind this worker has (cpu is always 1). */
  devices: Readonly<Record<ChannelDeviceType, number>>;
  /** One advert per viable, allowed context. */
  channels: ChannelAdvert[];
}

/** Everything a context needs to set up its per-pipe channel. */
export interface ChannelBootstrap {
  /** "connector": this side opened the pipe; "acceptor": the peer did. Use it to break symmetry (who listens, who dials). */
  readonly role: "connector" | "acceptor";
  /** The peer worker's name (for error messages: WorkerUnavailableError.workerName). */
  readonly peerName: string;
  readonly local: Capabilities;
  readonly remote: Capabilities;
  /** The peer's advert for this channel. */
  readonly remoteAdvert: ChannelAdvert;
  /** The pairs (our side first) this channel serves on this pipe. */
  readonly pairs: readonly DevicePairKey[];
  /** The group secret, for channels that open their own connections (authenticate them with sdk/transport/auth.ts). */
  readonly secret: string | Buffer;
  /** The address this worker advertises to peers (where a channel may listen), e.g. "127.0.0.1". */
  readonly host: string;
  /** Bound on setup; createChannel rejects with ChannelNotViableError or WorkerUnavailableError past it. */
  readonly timeoutMs: number;
  /**
   * Sends one message to the peer's instance of this channel over the pipe's control connection (in order).
   * The message is serialized before send returns, so its binary fields may be reused at once. Rejects once
   * the pipe closed.
   */
  send(msg: SetupValue): Promise<void>;
  /** The peer's messages, in order; one listener; messages that came before it was set are queued. */
  onMessage(cb: (msg: SetupValue) => void): void;
  /** Calls cb once when the pipe closes (error null after our own close); may be called more than once. Channels must release everything then. */
  onClose(cb: (error: Error | null) => void): void;
}

/** What `send` returns. */
export interface ChannelSend {
  /**
   * Goes inside the pipe's control frame; the peer passes it to `recv`. Small (tens of bytes),
   * except that a channel may inline a small buffer's bytes here (tcp does up to 64 KiB; at most
   * 1 MiB). The pipe holds it, unchanged, until its frame was written.
   */
  readonly descriptor: Uint8Array;
  /** Resolves once the sender's buffer may be reused or freed; rejects when the transfer failed. */
  readonly done: Promise<void>;
}

/** One channel of one pipe. */
export interface Channel {
  /** The context's name ("tcp", "shm", ...). */
  readonly name: string;
  /**
   * Starts moving `buffer` to the peer. The caller keeps `buffer` alive and
   * unchanged until `done` settles. Never throws: a failure rejects `done`.
   */
  send(buffer: ChannelBuffer): ChannelSend;
  /**
   * Fills `into` (exactly as long as what the peer sent, on the device the
   * peer named as target) with the transfer `descriptor` describes. Calls
   * come in the order of the peer's sends.
   */
  recv(descriptor: Uint8Array, into: ChannelBuffer): Promise<void>;
  /**
   * Optional: a buffer that already holds (or will hold) the transfer `descriptor` describes, to
   * become the received buffer itself, or null (then the pipe allocates one). The pipe asks right
   * before `recv`, and passes what it got to `recv` (which then has nothing left to copy). Like any
   * destination, the buffer belongs to the receiver from then on: a channel may reuse its memory
   * only once the buffer was garbage collected or detached (shm: its landing blocks; see
   * `reusableBuffers`). Throws when the descriptor is malformed or names memory the peer does not
   * hold (the pipe then closes).
   */
  adoptBuffer?(descriptor: Uint8Array, byteLength: number, target: DeviceRef): ChannelBuffer | null;
  /** Ends the channel; idempotent. Pending operations reject with `error` (default: a WorkerUnavailableError saying it closed). */
  close(error?: Error): void;
  readonly closed: boolean;
}

/**
 * The ArrayBuffers of CPU buffers that a channel's `adoptBuffer` handed out over memory it keeps mapped
 * and reuses once the buffer is gone (shm: its landing blocks). A receiver that knows nothing reads
 * such a buffer any more may detach it (the addon's detachBuffer) to hand the memory back at once rather
 * than at the garbage collection that would free it (sdk/distributed/p2p.ts does). The channel's memory
 * stays mapped while the channel is open, so a reader it missed sees other bytes, never freed memory.
 */
export const reusableBuffers = new WeakSet<ArrayBufferLike>();

/** A channel backend, registered once per process (./index.ts). */
export interface ChannelContext {
  /** "tcp", "shm", "cma", "ucx", "cuda_ipc", "nccl", ... */
  readonly name: string;
  /** False when this machine cannot run it (missing library, device, permission); never throws; cheap after the first call. */
  isViable(): boolean;
  /** Why isViable() is false, saying what to change (shown by pipeInfo and in ChannelNotViableError). */
  whyNotViable?(): string | undefined;
  /**
   * The advert for this process (called per pipe; cache what is costly).
   * `priorities` lists only the pairs it can move; see CHANNEL_PRIORITY for
   * the project's ordering. Return null to offer nothing on this pipe.
   */
  advertise(host: HostIdentity, devices: Readonly<Record<ChannelDeviceType, number>>): ChannelAdvert | null;
  /** The per-pipe channel; rejects (ChannelNotViableError / WorkerUnavailableError) if setup fails. */
  createChannel(bootstrap: ChannelBootstrap): Promise<Channel>;
  /** Frees process-wide resources (tests; process exit). Optional. */
  shutdown?(): void;
}

/**
 * The project's priorities (docs/architecture.md, "Pipes, transports and channels"), per
 * pair family: GPU on one host cuda_ipc / ucx(cuda) > nccl; CPU on one host
 * shm / cma > ucx (InfiniBand/RoCE) > tcp everywhere. Contexts use these in
 * their adverts so every worker ranks the same way.
 */
export const CHANNEL_PRIORITY = {
  cuda_ipc: 600,
  ucx_cuda: 550,
  nccl: 500,
  shm: 400,
  cma: 390,
  ucx: 200,
  tcp: 100,
} as const;
