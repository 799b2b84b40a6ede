/**
 * A channel over a native connection that moves id-tagged transfers: the shm
 * rings (./index.ts) and UCX's tag API (../ucx) share this TS side.
 *
 * 1. send(bytes): a buffer of at most INLINE_MAX bytes rides inside its
 *    descriptor; a larger one gets the next id, the descriptor carries
 *    (id, length) and the native side queues the bytes under that id.
 * 2. recv(descriptor, into): an inline descriptor is copied out; otherwise the
 *    native side fills `into` with transfer `id` (the lengths must agree).
 * 3. close(error?) fails every pending operation with `error` (default: the
 *    peer is gone) and closes the native connection; idempotent.
 * Landing (shm only, connections with `land`; the design is in
 * native/src/channels/shm/landing.h): a buffer of 64 KiB to 64 MiB is copied at
 * once, on this thread, into a block the receiver offered us; the descriptor
 * names the block (LANDED) and `done` resolves at once. The receiver's pipe asks
 * `adoptBuffer` for it (listed in reusableBuffers: detaching it gives the block
 * back at once); a receiver that brings its own buffer gets a copy.
 * Without a free block of a fitting size the transfer goes through the ring as in 1.
 * Shared storages (shm only, connections with `share`): a buffer of at least 64 KiB that lies in
 * a shared storage (Tensor.shareMemory_, or one received this way) goes as the storage's file,
 * frozen and sealed, with no copy at all; the descriptor names the transfer (SHARED) and the
 * receiver maps it copy-on-write (adoptBuffer), so neither side sees the other's later writes.
 * A buffer its process wrote to since the file was frozen is landed or sent as above.
 * Direct reads (shm only, where both sides may read each other's memory; ./index.ts): a buffer of at
 * least `large.min` bytes that is not in a shared storage goes through `large.channel`, a cma channel
 * (../cma): the receiver copies it out of the sender's memory, one copy instead of the ring's two, and
 * its descriptors carry DIRECT.
 */
import { ChannelNotViableError } from "../../errors/index.js";
import type { ShmLandingStats } from "../../native/channels.js";
import { debug } from "../../util/index.js";
import type { Channel, ChannelBuffer, ChannelSend } from "../interface.js";
import { type DeviceRef, reusableBuffers } from "../interface.js";
import {
  channelError,
  closedError,
  DIRECT,
  INLINE_MAX,
  inlineDescriptor,
  LANDED,
  Pending,
  SHARED,
  RECORD,
  smallBytes,
  takeInline,
} from "../native_common.js";

/** What the native connection offers: transfers keyed by id, in call order per direction. */
export interface TaggedConnection {
  send(id: number, bytes: ArrayBufferView): Promise<void>;
  recv(id: number, dest: ArrayBufferView): Promise<void>;
  close(): void;
  /** Landing (see the file comment): the peer's block now holding `bytes`, or -1. */
  land?(bytes: ArrayBufferView): number;
  /** Our landing block the peer filled, as a buffer of its own. */
  adopt?(block: number, length: number): ArrayBuffer;
  /** Copies our landing block into `dest` and offers it again. */
  takeLanded?(block: number, dest: ArrayBufferView): void;
  /** Shared storages (see the file comment): the transfer id the storage holding `bytes` went as, or -1. */
  share?(bytes: ArrayBufferView): number;
  /** The peer's shared transfer, mapped copy-on-write as a buffer of its own. */
  adoptShared?(id: number, length: number): ArrayBuffer;
  /** Copies the peer's shared transfer into `dest`. */
  takeShared?(id: number, dest: ArrayBufferView): void;
  /** Landing figures (tests, debugging). */
  landingStats?(): LandingStats;
}

/** What a landing connection reports: the native shm channel's figures (NativeShmChannel.landingStats). */
export type LandingStats = ShmLandingStats;

const DESCRIPTOR_BYTES = 17; // RECORD, then id and length as float64
const LANDED_BYTES = 13; // LANDED (or SHARED), then the block (transfer id) as uint32 and the length as float64
/** Smallest buffer worth landing (below: the ring; matches the native side's kLandMin). */
const LAND_MIN = 64 << 10;

// NB: descriptors come from Node's Buffer pool (no backing store of their own): see smallBytes in ../native_common.ts
function encodeLanded(block: number, length: number, kind = LANDED): Uint8Array {
  const d = smallBytes(LANDED_BYTES);
  d[0] = kind;
  d.writeUInt32LE(block, 1);
  d.writeDoubleLE(length, 5);
  return d;
}

/** (block, length) of a LANDED descriptor (or of a SHARED one, with kind = SHARED), or null for another kind. */
function decodeLanded(name: string, d: Uint8Array, kind = LANDED): { block: number; length: number } | null {
  if (d.byteLength === 0 || d[0] !== kind) return null;
  if (d.byteLength !== LANDED_BYTES)
    throw new ChannelNotViableError(
      `${name} channel: a ${kind === LANDED ? "landed" : "shared"} descriptor of ${d.byteLength} bytes is not ours (expected ${LANDED_BYTES})`,
    );
  const v = new DataView(d.buffer, d.byteOffset, d.byteLength);
  return { block: v.getUint32(1, true), length: v.getFloat64(5, true) };
}

function encode(id: number, length: number): Uint8Array {
  const d = smallBytes(DESCRIPTOR_BYTES);
  d[0] = RECORD;
  d.writeDoubleLE(id, 1);
  d.writeDoubleLE(length, 9);
  return d;
}

function decode(name: string, d: Uint8Array): { id: number; length: number } {
  if (d.byteLength !== DESCRIPTOR_BYTES)
    throw new ChannelNotViableError(
      `${name} channel: a descriptor of ${d.byteLength} bytes is not ours (expected ${DESCRIPTOR_BYTES})`,
    );
  const v = new DataView(d.buffer, d.byteOffset, d.byteLength);
  return { id: v.getFloat64(1, true), length: v.getFloat64(9, true) };
}

export class TaggedChannel implements Channel {
  private readonly pending = new Pending();
  private nextId = 0;
  private isClosed = false;
  /** Buffers adoptBuffer handed out, by what they view (a LANDED block or a SHARED transfer): recv then has nothing to copy. */
  private readonly adopted = new WeakMap<ArrayBuffer, { kind: number; id: number }>();

  constructor(
    readonly name: string,
    private readonly conn: TaggedConnection,
    private readonly peer: string,
    /** Why a cuda buffer cannot go this way (the error says it). */
    private readonly hostOnly: string,
    /** Direct reads (see the file comment): the channel for buffers of at least `min` bytes. */
    private readonly large?: { readonly channel: Channel; readonly min: number },
  ) {}

  /** Buffers sent by direct reads so far (tests, debugging). */
  directSends = 0;

  send(buffer: ChannelBuffer): ChannelSend {
    if (buffer.kind !== "cpu") {
      const done = Promise.reject(new ChannelNotViableError(`${this.name} channel: ${this.hostOnly}`));
      return { descriptor: new Uint8Array(0), done };
    }
    if (buffer.bytes.byteLength <= INLINE_MAX)
      return { descriptor: inlineDescriptor(buffer.bytes), done: this.pending.finished() };
    if (this.conn.share && buffer.bytes.byteLength >= LAND_MIN && !this.isClosed) {
      const id = this.conn.share(buffer.bytes);
      if (id >= 0)
        return {
          descriptor: encodeLanded(id, buffer.bytes.byteLength, SHARED),
          done: this.pending.finished(),
        };
    }
    if (this.large && buffer.bytes.byteLength >= this.large.min && !this.isClosed && !this.large.channel.closed) {
      this.directSends++;
      return this.large.channel.send(buffer);
    }
    if (this.conn.land && buffer.bytes.byteLength >= LAND_MIN && !this.isClosed) {
      const block = this.conn.land(buffer.bytes);
      if (block >= 0)
        return {
          descriptor: encodeLanded(block, buffer.bytes.byteLength),
          done: this.pending.finished(),
        };
    }
    const id = this.nextId++;
    const descriptor = encode(id, buffer.bytes.byteLength);
    const done = this.pending.track(this.conn.send(id, buffer.bytes), (e) => channelError(this.name, this.peer, e));
    return { descriptor, done };
  }

  /** A landed transfer's own block as its destination (see the file comment); null for any other transfer. */
  adoptBuffer(descriptor: Uint8Array, byteLength: number, target: DeviceRef): ChannelBuffer | null {
    if (target.type !== "cpu" || !this.conn.adopt || this.isClosed) return null;
    const shared = this.conn.adoptShared ? decodeLanded(this.name, descriptor, SHARED) : null;
    if (shared) {
      if (shared.length !== byteLength) return null;
      const ab = this.conn.adoptShared!(shared.block, shared.length);
      this.adopted.set(ab, { kind: SHARED, id: shared.block });
      return { kind: "cpu", bytes: new Uint8Array(ab, 0, shared.length) };
    }
    const d = decodeLanded(this.name, descriptor);
    if (!d || d.length !== byteLength) return null;
    const ab = this.conn.adopt(d.block, d.length);
    this.adopted.set(ab, { kind: LANDED, id: d.block });
    reusableBuffers.add(ab);
    return { kind: "cpu", bytes: new Uint8Array(ab, 0, d.length) };
  }

  recv(descriptor: Uint8Array, into: ChannelBuffer): Promise<void> {
    if (into.kind !== "cpu")
      return Promise.reject(new ChannelNotViableError(`${this.name} channel: receives into host memory only`));
    let d: { id: number; length: number };
    if (descriptor.byteLength > 0 && descriptor[0] === DIRECT) {
      if (!this.large)
        return Promise.reject(
          new ChannelNotViableError(`${this.name} channel: a direct transfer, but this channel has no direct reads`),
        );
      return this.large.channel.recv(descriptor, into);
    }
    try {
      if (takeInline(this.name, descriptor, into.bytes)) return this.pending.finished();
      for (const [kind, take] of [
        [LANDED, this.conn.takeLanded],
        [SHARED, this.conn.takeShared],
      ] as const) {
        const t = decodeLanded(this.name, descriptor, kind);
        if (!t) continue;
        if (t.length !== into.bytes.byteLength || !take)
          throw new ChannelNotViableError(
            `${this.name} channel: a ${kind === LANDED ? "landed" : "shared"} transfer of ${t.length} bytes for a destination of ${into.bytes.byteLength}`,
          );
        // NB: a buffer adoptBuffer made over this block (or shared transfer) already holds the bytes
        const a = this.adopted.get(into.bytes.buffer as ArrayBuffer);
        if (a?.kind !== kind || a.id !== t.block) take.call(this.conn, t.block, into.bytes);
        return this.pending.finished();
      }
      d = decode(this.name, descriptor);
    } catch (e) {
      return Promise.reject(e);
    }
    if (d.length !== into.bytes.byteLength)
      return Promise.reject(
        new ChannelNotViableError(
          `${this.name} channel: transfer ${d.id} has ${d.length} bytes but the destination has ${into.bytes.byteLength}`,
        ),
      );
    return this.pending.track(this.conn.recv(d.id, into.bytes), (e) => channelError(this.name, this.peer, e));
  }

  /** Landing figures of this channel (null where the connection has no landing): tests, debugging. */
  landingStats(): LandingStats | null {
    return this.isClosed ? null : (this.conn.landingStats?.() ?? null);
  }

  close(error?: Error): void {
    if (this.isClosed) return;
    this.isClosed = true;
    this.pending.failAll(error ?? closedError(this.name, this.peer));
    this.large?.channel.close(error ?? closedError(this.name, this.peer));
    this.conn.close();
    debug(2, "channel", `${this.name} channel to ${this.peer} closed`);
  }

  get closed(): boolean {
    return this.isClosed;
  }
}
