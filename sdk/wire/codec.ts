/**
 * encodeMessage / decodeMessage: one RPC message <-> header, payload and out-of-band buffers.
 *
 * Sending (the pipe writes `[header, payload, ...buffers]` in that order on a stream):
 * 1. The payload is walked once (./values.ts): what cannot cross (functions, Promises,
 *    handles, cycles, what the receiver's limits refuse) is a SerializationError naming
 *    its path, thrown before anything is packed or sent; Maps, Sets and binary arrays are
 *    boxed for their wire types.
 * 2. The value is packed with msgpackr; Tensors and Errors inside it (and the
 *    types the rpc layer registered) become extension values, and tensor bytes are
 *    appended to `buffers` — never copied into the payload.
 * 3. The header carries type, flags, id, the payload length and one descriptor per buffer.
 * Receiving (decodeMessage, or decodeControl on a pipe's MESSAGE body):
 * 1. The header and buffer table are checked against the limits; the payload and
 *    buffers must have exactly the announced sizes.
 * 2. The payload is scanned before msgpackr sees it (./scan.ts: depth, extension
 *    allow-list, `__proto__` keys), then unpacked; tensors are rebuilt over the buffers.
 * Any violation is a ProtocolError; the caller closes the pipe it came on.
 */
import { ProtocolError, SerializationError, ValueError } from "../errors/index.js";
import { Device } from "../tensor/device.js";
import type { Tensor } from "../tensor/tensor.js";
import {
  type BufferDescriptor,
  DeviceKind,
  type FrameHeader,
  type FrameLimits,
  HEADER_BYTES,
  type MessageType,
  encodeHeader,
  isMessageType,
  parseBufferTable,
  parseHeader,
  resolveLimits,
} from "./header.js";
import {
  type WireBuffer,
  type WireDecodeContext,
  type WireEncodeContext,
  isWireTag,
  packr,
  withDecodeContext,
  withEncodeContext,
} from "./registry.js";
import { scanPayload } from "./scan.js";
import "./tensor.js";
import "./error.js";
import { Refusal, prepareValue, refusalError } from "./values.js";

export interface Message {
  type: MessageType;
  /** A non-negative safe integer; replies carry their request's id. */
  id: number;
  /** 16 bits, opaque to the wire layer (default 0). */
  flags?: number;
  payload: unknown;
}

export interface DecodedMessage {
  type: MessageType;
  id: number;
  flags: number;
  payload: unknown;
  /** The tensors rebuilt from the buffers, in payload order. */
  tensors: Tensor[];
}

export interface EncodedMessage {
  /** Fixed header and buffer table. */
  header: Buffer;
  /** The msgpack payload. */
  payload: Buffer;
  /**
   * Out-of-band bytes, in buffer-table order: host bytes, or device windows for tensors on a device.
   * NB: zero-copy windows on tensor storages: don't write to the tensors until they are sent.
   */
  buffers: WireBuffer[];
  /** Their descriptors (as in the header's table). */
  descriptors: BufferDescriptor[];
  /** The tensors encoded, in payload order. */
  tensors: Tensor[];
}

export interface EncodeOptions {
  /** Payloads larger than this are refused here, before the peer refuses them (default 64 MiB). */
  maxPayloadBytes?: number;
  /** The receivers' limits (defaults as theirs); a message beyond them is a SerializationError here. */
  maxBufferBytes?: number;
  maxBuffers?: number;
  maxDepth?: number;
  /** Passed to wire types as ctx.user. */
  user?: unknown;
}

export interface DecodeOptions extends FrameLimits {
  /** Deepest nesting of arrays, maps and extension values in a payload (default 64). */
  maxDepth?: number;
  /** Maps a sender's device string to a local device (deviceMaps); default Device.parse. */
  mapDevice?: (remote: string) => Device;
  /** Passed to wire types as ctx.user. */
  user?: unknown;
}

/** A message whose header was parsed: checked header, payload and buffers, not yet decoded. */
export interface Frame {
  header: FrameHeader;
  descriptors: BufferDescriptor[];
  payload: Uint8Array;
  buffers: WireBuffer[];
}

export const DEFAULT_MAX_DEPTH = 64;

export function encodeMessage(msg: Message, opts: EncodeOptions = {}): EncodedMessage {
  const flags = msg.flags ?? 0;
  if (!isMessageType(msg.type)) throw new ValueError(`encodeMessage(): unknown message type ${String(msg.type)}`);
  if (!Number.isSafeInteger(msg.id) || msg.id < 0)
    throw new ValueError(`encodeMessage(): id must be a non-negative safe integer, got ${msg.id}`);
  if (!Number.isInteger(flags) || flags < 0 || flags > 0xffff)
    throw new ValueError(`encodeMessage(): flags must fit in 16 bits, got ${flags}`);
  const limits = resolveLimits(opts);
  const walk = { maxDepth: opts.maxDepth ?? DEFAULT_MAX_DEPTH, maxBufferBytes: limits.maxBufferBytes };
  let value: unknown;
  try {
    value = prepareValue(msg.payload, walk);
  } catch (e) {
    throw e instanceof Refusal ? refusalError(e, walk) : e;
  }
  const buffers: WireBuffer[] = [];
  const descriptors: BufferDescriptor[] = [];
  const ctx: WireEncodeContext = {
    tensors: [],
    user: opts.user,
    addBuffer(bytes: WireBuffer, device: Device): number {
      if (buffers.length >= limits.maxBuffers)
        throw new SerializationError(
          `the message holds more than ${limits.maxBuffers} tensors (the receivers' limit, maxBuffers), which ` +
            "cannot be sent; stack them into fewer tensors",
          "",
        );
      buffers.push(bytes);
      descriptors.push({
        byteLength: bytes.byteLength,
        deviceType: device.type === "cuda" ? DeviceKind.CUDA : DeviceKind.CPU,
        deviceIndex: device.type === "cuda" ? device.index : 0,
        channel: 0,
      });
      return buffers.length - 1;
    },
  };
  const payload = withEncodeContext(ctx, () => packr.pack(value));
  const max = limits.maxPayloadBytes;
  if (payload.byteLength > max)
    throw new ValueError(
      `encodeMessage(): the structured payload is ${payload.byteLength} bytes, over the ${max}-byte limit; ` +
        "pass large data as tensors, which travel out of band",
    );
  const header = encodeHeader(
    { type: msg.type, flags, id: msg.id, payloadBytes: payload.byteLength, bufferCount: buffers.length },
    descriptors,
  );
  return { header, payload, buffers, descriptors, tensors: ctx.tensors };
}

/** Decodes a whole frame given as its three parts (header includes the buffer table). */
export function decodeMessage(
  header: Uint8Array,
  payload: Uint8Array,
  buffers: readonly WireBuffer[],
  opts: DecodeOptions = {},
): DecodedMessage {
  const limits = resolveLimits(opts);
  const h = parseHeader(header, limits);
  const table = header.subarray(HEADER_BYTES);
  const descriptors = parseBufferTable(table, h.bufferCount, limits);
  if (table.byteLength !== descriptors.length * 16)
    throw new ProtocolError(`bad frame: ${table.byteLength - descriptors.length * 16} bytes after the buffer table`);
  return decodeFrame({ header: h, descriptors, payload, buffers: [...buffers] }, opts);
}

/** Decodes a message whose header was already parsed (decodeMessage and decodeControl end here). */
export function decodeFrame(frame: Frame, opts: DecodeOptions = {}): DecodedMessage {
  const { header: h, descriptors, payload, buffers } = frame;
  if (payload.byteLength !== h.payloadBytes)
    throw new ProtocolError(`bad frame: payload is ${payload.byteLength} bytes, header says ${h.payloadBytes}`);
  if (buffers.length !== descriptors.length)
    throw new ProtocolError(`bad frame: ${buffers.length} buffers, header says ${descriptors.length}`);
  buffers.forEach((b, i) => {
    if (b.byteLength !== descriptors[i]!.byteLength)
      throw new ProtocolError(
        `bad frame: buffer ${i} is ${b.byteLength} bytes, header says ${descriptors[i]!.byteLength}`,
      );
  });
  const ctx: WireDecodeContext = {
    buffers,
    descriptors,
    tensors: [],
    user: opts.user,
    mapDevice: opts.mapDevice ?? ((s: string) => Device.parse(s)),
  };
  const value = unpackPayload(payload, ctx, opts);
  return { type: h.type, id: h.id, flags: h.flags, payload: value, tensors: ctx.tensors };
}

/** Scans `payload` (nesting, wire tags) and unpacks it with `ctx` current; a failure is a ProtocolError. */
function unpackPayload(payload: Uint8Array, ctx: WireDecodeContext, opts: DecodeOptions): unknown {
  scanPayload(payload, opts.maxDepth ?? DEFAULT_MAX_DEPTH, isWireTag);
  try {
    return withDecodeContext(ctx, () => packr.unpack(payload));
  } catch (e) {
    if (e instanceof ProtocolError) throw e;
    throw new ProtocolError(`bad payload: ${e instanceof Error ? e.message : String(e)}`);
  }
}

/** A MESSAGE body's control bytes (header, buffer table, payload), checked against the header's lengths. */
function splitControl(
  control: Uint8Array,
  opts: DecodeOptions,
): { header: FrameHeader; descriptors: BufferDescriptor[]; payload: Uint8Array } {
  const limits = resolveLimits(opts);
  const header = parseHeader(control, limits);
  const tableEnd = HEADER_BYTES + header.bufferCount * 16;
  if (control.byteLength !== tableEnd + header.payloadBytes)
    throw new ProtocolError(
      `bad frame: ${control.byteLength} control bytes, header says ${tableEnd + header.payloadBytes}`,
    );
  const descriptors = parseBufferTable(control.subarray(HEADER_BYTES, tableEnd), header.bufferCount, limits);
  return { header, descriptors, payload: control.subarray(tableEnd) };
}

/**
 * A look at a pipe's MESSAGE body before its buffers arrived: the header's type and the payload, with
 * each tensor as a TensorPeek (./tensor.ts) instead of a Tensor. The same checks as decodeControl on
 * the control bytes; throws ProtocolError likewise. Decode the message again once its buffers are in.
 */
export function peekControl(
  control: Uint8Array,
  opts: DecodeOptions = {},
): { type: MessageType; payload: unknown; descriptors: BufferDescriptor[] } {
  const { header, descriptors, payload } = splitControl(control, opts);
  const ctx: WireDecodeContext = {
    buffers: [],
    descriptors,
    tensors: [],
    user: opts.user,
    mapDevice: opts.mapDevice ?? ((s: string) => Device.parse(s)),
    peek: true,
  };
  return { type: header.type, payload: unpackPayload(payload, ctx, opts), descriptors };
}

/**
 * Decodes a message whose header, buffer table and payload arrived as one
 * block of control bytes (a pipe's MESSAGE body), with its buffers moved by
 * channels. Same checks as decodeMessage.
 */
export function decodeControl(
  control: Uint8Array,
  buffers: readonly WireBuffer[],
  opts: DecodeOptions = {},
): DecodedMessage {
  return decodeFrame({ ...splitControl(control, opts), buffers: [...buffers] }, opts);
}
