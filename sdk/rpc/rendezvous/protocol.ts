/**
 * The store's wire protocol: length-prefixed frames, each an op, a request id
 * and a list of byte fields. No JSON, no msgpack: the decoder treats every
 * byte as hostile and checks every length against the frame it came in.
 *
 * 1. A connection starts with the challenge–response of transport/auth
 *    (the client is the connector); nothing below is decoded before it passes.
 * 2. Frame: u32 BE body length (7 ..= MAX_FRAME) | body.
 *    Body:  u8 op | u32 BE id | u16 BE field count | count × (u32 BE length | bytes).
 *    The fields must fill the body exactly.
 * 3. Requests (client → server; keys are UTF-8, numbers decimal ASCII):
 *      SET [key, value]            → OK []
 *      GET [key, timeoutMs]        → OK [value], once the key exists
 *      ADD [key, delta]            → OK [new value]
 *      CAS [key, expected, desired, expectedAbsent "1"|"0"] → OK [] (absent) | OK [value after]
 *      DELETE [key]                → OK ["1"|"0"] (existed)
 *      CHECK [key...]              → OK ["1"|"0"] (all exist)
 *      WAIT [timeoutMs, key...]    → OK [], once all exist
 *      NUM_KEYS []                 → OK [n]
 *      WATCH [prefix]              → OK []; then EVENT frames with id = this request's id
 *      UNWATCH [watch id]          → OK []
 *      LIST [prefix]               → OK [key, value, key, value, ...]
 * 4. Replies carry the request's id: OK [...] or ERR [error name, message, timeoutMs?].
 *    EVENT [kind "set"|"delete", key, value (the old value for delete)].
 * 5. A bad frame (size, op, field layout) is a ProtocolError: the receiver closes the connection.
 */
import { ProtocolError } from "../../errors/index.js";

/** Largest frame body accepted, in bytes. */
export const MAX_FRAME = 16 * 1024 * 1024;
const HEADER = 7;

export const Op = {
  SET: 1,
  GET: 2,
  ADD: 3,
  CAS: 4,
  DELETE: 5,
  CHECK: 6,
  WAIT: 7,
  NUM_KEYS: 8,
  WATCH: 9,
  UNWATCH: 10,
  LIST: 11,
  OK: 100,
  ERR: 101,
  EVENT: 102,
} as const;
export type Op = (typeof Op)[keyof typeof Op];
const OPS = new Set<number>(Object.values(Op));

export interface Frame {
  op: Op;
  id: number;
  fields: Buffer[];
}

export type Field = Uint8Array | string;

/** Encodes one frame (length prefix included). */
export function encodeFrame(op: Op, id: number, fields: readonly Field[]): Buffer {
  const bufs = fields.map((f) =>
    typeof f === "string" ? Buffer.from(f, "utf8") : Buffer.from(f.buffer, f.byteOffset, f.byteLength),
  );
  const body = HEADER + bufs.reduce((s, b) => s + 4 + b.length, 0);
  if (body > MAX_FRAME)
    throw new ProtocolError(`a store message of ${body} bytes exceeds the limit of ${MAX_FRAME} bytes`);
  if (bufs.length > 0xffff) throw new ProtocolError(`too many fields in one store message (${bufs.length})`);
  const out = Buffer.allocUnsafe(4 + body);
  out.writeUInt32BE(body, 0);
  out.writeUInt8(op, 4);
  out.writeUInt32BE(id >>> 0, 5);
  out.writeUInt16BE(bufs.length, 9);
  let at = 11;
  for (const b of bufs) {
    out.writeUInt32BE(b.length, at);
    b.copy(out, at + 4);
    at += 4 + b.length;
  }
  return out;
}

/** Incremental decoder: feed chunks, get whole frames. Throws ProtocolError on garbage. */
export class FrameDecoder {
  private chunks: Buffer[] = [];
  private size = 0;

  constructor(private readonly maxFrame = MAX_FRAME) {}

  push(chunk: Buffer): Frame[] {
    this.chunks.push(chunk);
    this.size += chunk.length;
    const frames: Frame[] = [];
    for (;;) {
      if (this.size < 4) break;
      const head = this.peek(4);
      const len = head.readUInt32BE(0);
      if (len < HEADER || len > this.maxFrame)
        throw new ProtocolError(`bad store frame length ${len} (allowed ${HEADER}..${this.maxFrame})`);
      if (this.size < 4 + len) break;
      const all = this.take(4 + len);
      frames.push(parseBody(all.subarray(4)));
    }
    return frames;
  }

  private peek(n: number): Buffer {
    if (this.chunks[0]!.length >= n) return this.chunks[0]!;
    const all = Buffer.concat(this.chunks);
    this.chunks = [all];
    return all;
  }

  private take(n: number): Buffer {
    const all = this.chunks.length === 1 ? this.chunks[0]! : Buffer.concat(this.chunks);
    this.chunks = all.length > n ? [all.subarray(n)] : [];
    this.size -= n;
    return all.subarray(0, n);
  }
}

function parseBody(body: Buffer): Frame {
  const op = body.readUInt8(0);
  if (!OPS.has(op)) throw new ProtocolError(`unknown store op ${op}`);
  const id = body.readUInt32BE(1);
  const count = body.readUInt16BE(5);
  const fields: Buffer[] = [];
  let at = HEADER;
  for (let i = 0; i < count; i++) {
    if (at + 4 > body.length) throw new ProtocolError("a store frame's fields overrun the frame");
    const len = body.readUInt32BE(at);
    at += 4;
    if (len > body.length - at) throw new ProtocolError("a store frame's fields overrun the frame");
    // NB: copy, so a retained value does not pin the whole receive buffer.
    fields.push(Buffer.from(body.subarray(at, at + len)));
    at += len;
  }
  if (at !== body.length) throw new ProtocolError("a store frame has trailing bytes after its fields");
  return { op: op as Op, id, fields };
}

/** Parses a decimal field as a safe integer, or throws ProtocolError. */
export function intField(b: Buffer | undefined, what: string): number {
  const s = b?.toString("latin1") ?? "";
  if (!/^-?[0-9]{1,16}$/.test(s) || !Number.isSafeInteger(Number(s)))
    throw new ProtocolError(`store frame field ${what} is not an integer`);
  return Number(s);
}
