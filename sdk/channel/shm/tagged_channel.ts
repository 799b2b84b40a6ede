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
 */
import { ChannelNotViableError } from "../../errors/index.js";
import { debug } from "../../util/index.js";
import type { Channel, ChannelBuffer, ChannelSend } from "../interface.js";
import { channelError, closedError, INLINE_MAX, inlineDescriptor, Pending, RECORD, takeInline } from "./pending.js";

/** What the native connection offers: transfers keyed by id, in call order per direction. */
export interface TaggedConnection {
  send(id: number, bytes: ArrayBufferView): Promise<void>;
  recv(id: number, dest: ArrayBufferView): Promise<void>;
  close(): void;
}

const DESCRIPTOR_BYTES = 17; // RECORD, then id and length as float64

function encode(id: number, length: number): Uint8Array {
  const d = new Uint8Array(DESCRIPTOR_BYTES);
  const v = new DataView(d.buffer);
  d[0] = RECORD;
  v.setFloat64(1, id, true);
  v.setFloat64(9, length, true);
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

  constructor(
    readonly name: string,
    private readonly conn: TaggedConnection,
    private readonly peer: string,
    /** Why a cuda buffer cannot go this way (the error says it). */
    private readonly hostOnly: string,
  ) {}

  send(buffer: ChannelBuffer): ChannelSend {
    if (buffer.kind !== "cpu") {
      const done = Promise.reject(new ChannelNotViableError(`${this.name} channel: ${this.hostOnly}`));
      return { descriptor: new Uint8Array(0), done };
    }
    if (buffer.bytes.byteLength <= INLINE_MAX)
      return { descriptor: inlineDescriptor(buffer.bytes), done: this.pending.track(Promise.resolve(), (e) => e) };
    const id = this.nextId++;
    const descriptor = encode(id, buffer.bytes.byteLength);
    const done = this.pending.track(this.conn.send(id, buffer.bytes), (e) => channelError(this.name, this.peer, e));
    return { descriptor, done };
  }

  recv(descriptor: Uint8Array, into: ChannelBuffer): Promise<void> {
    if (into.kind !== "cpu")
      return Promise.reject(new ChannelNotViableError(`${this.name} channel: receives into host memory only`));
    let d: { id: number; length: number };
    try {
      if (takeInline(this.name, descriptor, into.bytes)) return this.pending.track(Promise.resolve(), (e) => e);
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

  close(error?: Error): void {
    if (this.isClosed) return;
    this.isClosed = true;
    this.pending.failAll(error ?? closedError(this.name, this.peer));
    this.conn.close();
    debug(2, "channel", `${this.name} channel to ${this.peer} closed`);
  }

  get closed(): boolean {
    return this.isClosed;
  }
}
