/**
 * The pipe's framing on its control connection (all little-endian). The
 * control bytes inside a MESSAGE frame are the rpc layer's (wire header and
 * payload); this layer only adds where each tensor buffer went.
 *
 * Frame header (16 B):
 *   0  2  magic "TQ" (0x54 0x51)
 *   2  1  kind (FrameKind)
 *   3  1  version (PIPE_VERSION)
 *   4  4  body length
 *   8  4  buffer count
 *   12 4  reserved, 0
 * Buffer entry (16 B each, MESSAGE frames only):
 *   0  8  byte length (u64 as lo, hi; a safe integer)
 *   8  1  channel index (into the pipe's channel table)
 *   9  1  target device type (0 cpu, 1 cuda)
 *   10 2  target device index
 *   12 4  descriptor length
 * Then every descriptor, in order, then the body. The bodies of HELLO,
 * ACCEPT, SETUP and REFUSE are one msgpack value each (./codec.ts,
 * ./handshake.ts); a MESSAGE body is the rpc layer's bytes.
 *
 * Versions: the first 4 header bytes keep this layout in every version, so
 * a frame of another version is recognised as such and fails with
 * PipeVersionError naming both (an acceptor answers it with REFUSE first).
 * Version 1 carried the handshake bodies as JSON with base64 inside;
 * version 2 carries them as msgpack with binary fields as bytes.
 *
 * `FrameCutter` cuts a stream of chunks into frames, treating the bytes as
 * hostile: bounded sizes, a ProtocolError on the first violation (the pipe
 * then closes), and body/descriptor views that share the received chunk when
 * a frame lies inside one (no copy for small messages).
 */
import { ProtocolError } from "../errors/index.js";
import type { DeviceRef } from "../channel/interface.js";

/** The pipe protocol version, byte 3 of every frame header (see the file comment). */
export const PIPE_VERSION = 2;
export const FRAME_HEADER_BYTES = 16;
export const ENTRY_BYTES = 16;

export enum FrameKind {
  /** Connector → acceptor: capabilities (msgpack). */
  HELLO = 1,
  /** Acceptor → connector: capabilities and the channel choice (msgpack: { caps, negotiation, channels }). */
  ACCEPT = 2,
  /** A channel's setup message to its peer instance (msgpack: { c: channel index, m: value }). */
  SETUP = 3,
  /** An rpc message: control bytes plus buffers moved by channels. */
  MESSAGE = 4,
  /** Acceptor → connector: the pipe cannot be opened (msgpack: { reason }). */
  REFUSE = 5,
}

/** A frame of another pipe protocol version: the peer runs another tprpc version. */
export class PipeVersionError extends ProtocolError {
  constructor(
    /** The version in the peer's frame header. */
    readonly remoteVersion: number,
    /** PIPE_VERSION. */
    readonly localVersion: number = PIPE_VERSION,
    peer = "the peer",
  ) {
    super(
      `${peer} speaks pipe protocol version ${remoteVersion}, this worker speaks version ${localVersion}; ` +
        "run the same tprpc version on every worker",
    );
  }
}

export const FRAME_LIMITS = {
  /** Control bytes of one message: the wire payload limit (64 MiB) plus its buffer table. */
  maxBody: 80 * 2 ** 20,
  maxBuffers: 65536,
  maxDescriptor: 2 ** 20,
  maxBufferBytes: 16 * 2 ** 30,
};

export interface FrameEntry {
  byteLength: number;
  channel: number;
  target: DeviceRef;
  descriptor: Uint8Array;
}

export interface Frame {
  kind: FrameKind;
  entries: FrameEntry[];
  body: Uint8Array;
}

/** Header and entry table of a frame, as one Buffer (descriptors and body follow as separate chunks). */
export function encodeFrameHead(
  kind: FrameKind,
  bodyBytes: number,
  entries: readonly { byteLength: number; channel: number; target: DeviceRef; descriptorBytes: number }[],
): Buffer {
  const out = Buffer.allocUnsafe(FRAME_HEADER_BYTES + ENTRY_BYTES * entries.length);
  out[0] = 0x54;
  out[1] = 0x51;
  out[2] = kind;
  out[3] = PIPE_VERSION;
  out.writeUInt32LE(bodyBytes, 4);
  out.writeUInt32LE(entries.length, 8);
  out.writeUInt32LE(0, 12);
  let o = FRAME_HEADER_BYTES;
  for (const e of entries) {
    out.writeUInt32LE(e.byteLength % 2 ** 32, o);
    out.writeUInt32LE(Math.floor(e.byteLength / 2 ** 32), o + 4);
    out[o + 8] = e.channel;
    out[o + 9] = e.target.type === "cuda" ? 1 : 0;
    out.writeUInt16LE(e.target.index, o + 10);
    out.writeUInt32LE(e.descriptorBytes, o + 12);
    o += ENTRY_BYTES;
  }
  return out;
}

const KINDS = new Set<number>([1, 2, 3, 4, 5]);

/** Cuts chunks into frames; push() throws ProtocolError on garbage, and refuses input after it. */
export class FrameCutter {
  private chunks: Uint8Array[] = [];
  private buffered = 0;
  private head: { kind: FrameKind; body: number; count: number } | null = null;
  private entries: { byteLength: number; channel: number; target: DeviceRef; descBytes: number }[] | null = null;
  private restBytes = 0;
  private error: ProtocolError | null = null;

  constructor(private readonly onFrame: (f: Frame) => void) {}

  push(chunk: Uint8Array): void {
    if (this.error) throw this.error;
    this.chunks.push(chunk);
    this.buffered += chunk.byteLength;
    try {
      for (;;) {
        if (!this.head) {
          if (this.buffered < FRAME_HEADER_BYTES) return;
          this.head = this.parseHead(this.take(FRAME_HEADER_BYTES));
        }
        if (!this.entries) {
          const need = this.head.count * ENTRY_BYTES;
          if (this.buffered < need) return;
          this.entries = this.parseEntries(this.take(need), this.head.count);
          this.restBytes = this.entries.reduce((s, e) => s + e.descBytes, 0) + this.head.body;
        }
        if (this.buffered < this.restBytes) return;
        const rest = this.take(this.restBytes);
        const { kind } = this.head;
        let o = 0;
        const entries: FrameEntry[] = this.entries.map((e) => {
          const descriptor = rest.subarray(o, o + e.descBytes);
          o += e.descBytes;
          return { byteLength: e.byteLength, channel: e.channel, target: e.target, descriptor };
        });
        const body = rest.subarray(o);
        this.head = null;
        this.entries = null;
        this.onFrame({ kind, entries, body });
      }
    } catch (e) {
      if (e instanceof ProtocolError) this.error = e;
      throw e;
    }
  }

  /** The next n buffered bytes: a view when they lie in one chunk, else a copy. */
  private take(n: number): Uint8Array {
    this.buffered -= n;
    const first = this.chunks[0];
    if (n === 0) return new Uint8Array(0);
    if (first && first.byteLength >= n) {
      const out = first.subarray(0, n);
      if (first.byteLength === n) this.chunks.shift();
      else this.chunks[0] = first.subarray(n);
      return out;
    }
    const out = new Uint8Array(n);
    let o = 0;
    while (o < n) {
      const c = this.chunks[0]!;
      const k = Math.min(c.byteLength, n - o);
      out.set(k === c.byteLength ? c : c.subarray(0, k), o);
      o += k;
      if (k === c.byteLength) this.chunks.shift();
      else this.chunks[0] = c.subarray(k);
    }
    return out;
  }

  private parseHead(b: Uint8Array): { kind: FrameKind; body: number; count: number } {
    if (b[0] !== 0x54 || b[1] !== 0x51)
      throw new ProtocolError("bad pipe frame: wrong magic; the peer is not a tprpc worker or the stream lost sync");
    // NB: the version before the kind: another version may have other kinds
    if (b[3] !== PIPE_VERSION) throw new PipeVersionError(b[3]!);
    if (!KINDS.has(b[2]!)) throw new ProtocolError(`bad pipe frame: unknown kind ${b[2]}`);
    const v = new DataView(b.buffer, b.byteOffset, FRAME_HEADER_BYTES);
    const body = v.getUint32(4, true);
    const count = v.getUint32(8, true);
    if (v.getUint32(12, true) !== 0) throw new ProtocolError("bad pipe frame: reserved bytes are not zero");
    if (body > FRAME_LIMITS.maxBody)
      throw new ProtocolError(`bad pipe frame: body of ${body} bytes exceeds ${FRAME_LIMITS.maxBody}`);
    if (count > FRAME_LIMITS.maxBuffers)
      throw new ProtocolError(`bad pipe frame: ${count} buffers exceed ${FRAME_LIMITS.maxBuffers}`);
    if (count > 0 && b[2] !== FrameKind.MESSAGE)
      throw new ProtocolError("bad pipe frame: buffers on a non-message frame");
    return { kind: b[2] as FrameKind, body, count };
  }

  private parseEntries(b: Uint8Array, count: number) {
    const v = new DataView(b.buffer, b.byteOffset, b.byteLength);
    const out: { byteLength: number; channel: number; target: DeviceRef; descBytes: number }[] = [];
    let descTotal = 0;
    for (let i = 0; i < count; i++) {
      const o = i * ENTRY_BYTES;
      const hi = v.getUint32(o + 4, true);
      if (hi >= 2 ** 21) throw new ProtocolError(`bad pipe frame: buffer ${i} length does not fit in 53 bits`);
      const byteLength = hi * 2 ** 32 + v.getUint32(o, true);
      if (byteLength > FRAME_LIMITS.maxBufferBytes)
        throw new ProtocolError(
          `bad pipe frame: buffer ${i} of ${byteLength} bytes exceeds ${FRAME_LIMITS.maxBufferBytes}`,
        );
      const dt = b[o + 9]!;
      if (dt > 1) throw new ProtocolError(`bad pipe frame: buffer ${i} has unknown device type ${dt}`);
      const descBytes = v.getUint32(o + 12, true);
      if (descBytes > FRAME_LIMITS.maxDescriptor)
        throw new ProtocolError(`bad pipe frame: descriptor ${i} of ${descBytes} bytes is too long`);
      descTotal += descBytes;
      if (descTotal > FRAME_LIMITS.maxBody) throw new ProtocolError("bad pipe frame: descriptors too long in total");
      out.push({
        byteLength,
        channel: b[o + 8]!,
        target: { type: dt === 1 ? "cuda" : "cpu", index: v.getUint16(o + 10, true) },
        descBytes,
      });
    }
    return out;
  }
}
