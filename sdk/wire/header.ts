/**
 * The fixed frame header and the per-buffer descriptor table (all little-endian).
 *
 * A frame on a byte stream is: fixed header (24 B) | buffer table (16 B × nbuf) |
 * payload (msgpack) | buffer 0 | buffer 1 | ... Channels other than the stream may
 * carry a buffer's bytes instead (the table's channel tag says which); this layer only
 * frames the stream.
 *
 * Fixed header:
 *   off size field
 *   0   2    magic "TP" (0x54 0x50)
 *   2   1    version (WIRE_VERSION)
 *   3   1    message type (MessageType)
 *   4   2    flags (opaque here; bits defined by the rpc layer)
 *   6   2    reserved, must be 0
 *   8   8    message id, u64 (lo u32, hi u32); must be a safe integer (< 2^53)
 *   16  4    payload byte length
 *   20  4    number of out-of-band buffers
 * Buffer descriptor (one per buffer):
 *   0   8    byte length, u64 (lo u32, hi u32); a safe integer
 *   8   1    device type (0 cpu, 1 cuda)
 *   9   1    channel tag (0: bytes follow on this stream; other values reserved for channels)
 *   10  2    device index
 *   12  4    reserved, must be 0
 */
import { ProtocolError } from "../errors/index.js";

export const WIRE_MAGIC0 = 0x54; // "T"
export const WIRE_MAGIC1 = 0x50; // "P"
export const WIRE_VERSION = 1;
export const HEADER_BYTES = 24;
export const BUFFER_DESC_BYTES = 16;

/**
 * Message types. Numbered in blocks with room to grow: 0x01–0x0f calls and replies,
 * 0x10–0x1f RRef protocol, 0x20–0x2f distributed autograd, 0x30–0x3f control.
 * A type not listed here is a ProtocolError on receipt.
 */
export enum MessageType {
  /** rpcSync / rpcAsync call: payload names the target and carries the arguments. */
  REQUEST = 0x01,
  /** The value a REQUEST returned. */
  RESPONSE = 0x02,
  /** A REQUEST (or any request-like message) failed on the callee; payload holds the error. */
  ERROR = 0x03,
  /** remote(): run a call and keep its value on the callee as an OwnerRRef. */
  REMOTE_CALL = 0x04,
  /** The owner's reply to REMOTE_CALL (value created, or its error). */
  REMOTE_RET = 0x05,
  /** A user asks the owner for the RRef's value (toHere). */
  RREF_FETCH = 0x10,
  /** The owner's reply to RREF_FETCH. */
  RREF_FETCH_RET = 0x11,
  /** A user RRef was deleted; the owner drops one reference. */
  RREF_USER_DELETE = 0x12,
  /** A user forked an RRef to a third worker; asks the owner to register the child. */
  RREF_FORK_REQUEST = 0x13,
  /** The owner confirms a child fork to its parent. */
  RREF_CHILD_ACCEPT = 0x14,
  /** Acknowledges an RRef control message. */
  RREF_ACK = 0x15,
  /** The owner's memory grew while it owns RRef values: the receiver runs a full collection so finalizers of dead RRefs send RREF_USER_DELETE. */
  RREF_COLLECT = 0x16,
  /** Distributed autograd: forward-pass bookkeeping (send/recv function registration). */
  AUTOGRAD_FORWARD = 0x20,
  /** Distributed autograd: propagate gradients backward to a peer. */
  AUTOGRAD_BACKWARD = 0x21,
  /** Reply to AUTOGRAD_BACKWARD. */
  AUTOGRAD_BACKWARD_RET = 0x22,
  /** Release a distributed autograd context on a peer. */
  AUTOGRAD_CLEANUP = 0x23,
  /** Graceful shutdown coordination. */
  SHUTDOWN = 0x30,
  /** Reply to SHUTDOWN. */
  SHUTDOWN_ACK = 0x31,
  /** Liveness probe. */
  PING = 0x32,
  /** Reply to PING. */
  PONG = 0x33,
  /** Membership change (dynamic groups: a worker joined or left). */
  MEMBERSHIP = 0x34,
  /** tprpc.distributed: one point-to-point message, one-way (sdk/distributed/p2p.ts); no reply. */
  P2P_MESSAGE = 0x40,
}

const KNOWN_TYPES = new Set<number>(Object.values(MessageType).filter((v): v is number => typeof v === "number"));

export function isMessageType(t: number): t is MessageType {
  return KNOWN_TYPES.has(t);
}

export enum DeviceKind {
  CPU = 0,
  CUDA = 1,
}

/** Where one out-of-band buffer lives and how its bytes travel. */
export interface BufferDescriptor {
  byteLength: number;
  deviceType: DeviceKind;
  deviceIndex: number;
  /** 0: the bytes follow the payload on the same stream. Other tags are reserved for channels. */
  channel: number;
}

export interface FrameHeader {
  type: MessageType;
  flags: number;
  id: number;
  payloadBytes: number;
  bufferCount: number;
}

/** Bounds the decoder enforces on every frame (a frame beyond any of them is a ProtocolError). */
export interface FrameLimits {
  /** Largest structured payload, bytes (default 64 MiB). */
  maxPayloadBytes?: number;
  /** Largest single out-of-band buffer, bytes (default 16 GiB). */
  maxBufferBytes?: number;
  /** Most out-of-band buffers in one frame (default 65536). */
  maxBuffers?: number;
}

export const DEFAULT_LIMITS: Readonly<Required<FrameLimits>> = Object.freeze({
  maxPayloadBytes: 64 * 2 ** 20,
  maxBufferBytes: 16 * 2 ** 30,
  maxBuffers: 65536,
});

/** `l` over the defaults. NB: options that set no limit (every rpc message's) get DEFAULT_LIMITS itself, not a copy. */
export function resolveLimits(l: FrameLimits | undefined): Required<FrameLimits> {
  if (l?.maxPayloadBytes === undefined && l?.maxBufferBytes === undefined && l?.maxBuffers === undefined)
    return DEFAULT_LIMITS;
  return { ...DEFAULT_LIMITS, ...l };
}

function writeU64(view: DataView, off: number, v: number): void {
  view.setUint32(off, v % 2 ** 32, true);
  view.setUint32(off + 4, Math.floor(v / 2 ** 32), true);
}

function readU64(view: DataView, off: number, what: string): number {
  const lo = view.getUint32(off, true);
  const hi = view.getUint32(off + 4, true);
  if (hi >= 2 ** 21) throw new ProtocolError(`bad frame: ${what} does not fit in 53 bits (high word ${hi})`);
  return hi * 2 ** 32 + lo;
}

/** The fixed header followed by the buffer table, as one Buffer. */
export function encodeHeader(h: FrameHeader, buffers: readonly BufferDescriptor[]): Buffer {
  // NB: from Node's Buffer pool, not a backing store per call (see smallBytes in sdk/channel/native_common.ts)
  const out = Buffer.allocUnsafe(HEADER_BYTES + BUFFER_DESC_BYTES * buffers.length).fill(0);
  const view = new DataView(out.buffer, out.byteOffset, out.byteLength);
  out[0] = WIRE_MAGIC0;
  out[1] = WIRE_MAGIC1;
  out[2] = WIRE_VERSION;
  out[3] = h.type;
  view.setUint16(4, h.flags, true);
  writeU64(view, 8, h.id);
  view.setUint32(16, h.payloadBytes, true);
  view.setUint32(20, buffers.length, true);
  buffers.forEach((b, i) => {
    const o = HEADER_BYTES + i * BUFFER_DESC_BYTES;
    writeU64(view, o, b.byteLength);
    out[o + 8] = b.deviceType;
    out[o + 9] = b.channel;
    view.setUint16(o + 10, b.deviceIndex, true);
  });
  return out;
}

/** Parses and checks the fixed header (the first HEADER_BYTES of `bytes`). */
export function parseHeader(bytes: Uint8Array, limits: Required<FrameLimits>): FrameHeader {
  if (bytes.byteLength < HEADER_BYTES)
    throw new ProtocolError(`bad frame: header is ${bytes.byteLength} bytes, expected ${HEADER_BYTES}`);
  if (bytes[0] !== WIRE_MAGIC0 || bytes[1] !== WIRE_MAGIC1)
    throw new ProtocolError(
      `bad frame: wrong magic 0x${hex(bytes[0]!)}${hex(bytes[1]!)} (expected 0x5450 "TP"); ` +
        "the peer is not a tprpc worker or the stream lost sync",
    );
  if (bytes[2] !== WIRE_VERSION)
    throw new ProtocolError(
      `bad frame: wire version ${bytes[2]}, this worker speaks ${WIRE_VERSION}; run the same tprpc version on every worker`,
    );
  const type = bytes[3]!;
  if (!isMessageType(type)) throw new ProtocolError(`bad frame: unknown message type 0x${hex(type)}`);
  const view = new DataView(bytes.buffer, bytes.byteOffset, HEADER_BYTES);
  if (view.getUint16(6, true) !== 0) throw new ProtocolError("bad frame: reserved header bytes are not zero");
  const h: FrameHeader = {
    type,
    flags: view.getUint16(4, true),
    id: readU64(view, 8, "message id"),
    payloadBytes: view.getUint32(16, true),
    bufferCount: view.getUint32(20, true),
  };
  if (h.payloadBytes > limits.maxPayloadBytes)
    throw new ProtocolError(
      `bad frame: payload of ${h.payloadBytes} bytes exceeds maxPayloadBytes (${limits.maxPayloadBytes}); ` +
        "send large data as tensors, which travel out of band",
    );
  if (h.bufferCount > limits.maxBuffers)
    throw new ProtocolError(`bad frame: ${h.bufferCount} buffers exceed maxBuffers (${limits.maxBuffers})`);
  return h;
}

/** Parses and checks `count` buffer descriptors starting at `bytes[0]`. */
export function parseBufferTable(bytes: Uint8Array, count: number, limits: Required<FrameLimits>): BufferDescriptor[] {
  if (bytes.byteLength < count * BUFFER_DESC_BYTES)
    throw new ProtocolError(
      `bad frame: buffer table truncated (${bytes.byteLength} bytes for ${count} buffers of ${BUFFER_DESC_BYTES})`,
    );
  const view = new DataView(bytes.buffer, bytes.byteOffset, count * BUFFER_DESC_BYTES);
  const out: BufferDescriptor[] = [];
  for (let i = 0; i < count; i++) {
    const o = i * BUFFER_DESC_BYTES;
    const byteLength = readU64(view, o, `buffer ${i} length`);
    if (byteLength > limits.maxBufferBytes)
      throw new ProtocolError(
        `bad frame: buffer ${i} of ${byteLength} bytes exceeds maxBufferBytes (${limits.maxBufferBytes})`,
      );
    const deviceType = bytes[o + 8]!;
    if (deviceType !== DeviceKind.CPU && deviceType !== DeviceKind.CUDA)
      throw new ProtocolError(`bad frame: buffer ${i} has unknown device type ${deviceType}`);
    const channel = bytes[o + 9]!;
    if (channel !== 0) throw new ProtocolError(`bad frame: buffer ${i} names unknown channel ${channel}`);
    if (view.getUint32(o + 12, true) !== 0)
      throw new ProtocolError(`bad frame: buffer ${i} descriptor has non-zero reserved bytes`);
    out.push({ byteLength, deviceType, deviceIndex: view.getUint16(o + 10, true), channel });
  }
  return out;
}

function hex(b: number): string {
  return b.toString(16).padStart(2, "0");
}
