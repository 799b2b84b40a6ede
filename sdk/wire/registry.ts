/**
 * Wire types: classes that travel as msgpack extension types, and the msgpackr
 * instance every payload goes through.
 *
 * Extension code table (msgpack ext type byte):
 *
 *   code        what                                        owner
 *   0x00        undefined (msgpackr built-in)               msgpackr
 *   0x10        Tensor descriptor (storage out of band)     wire (./tensor.ts)
 *   0x11        Error record                                wire (./error.ts)
 *   0x12        Map (flat [key, value, ...] array)          wire (./values.ts)
 *   0x13        Set (array of its values)                   wire (./values.ts)
 *   0x14        typed array, DataView, ArrayBuffer          wire (./values.ts)
 *   0x15–0x1f   reserved for wire
 *   0x20–0x3f   reserved for rpc: RRef fork descriptors, WorkerInfo, ...
 *   0x42        bigint beyond 64 bits (msgpackr built-in)   msgpackr
 *   0xff (-1)   timestamp / Date (msgpack standard)         msgpackr
 *
 * Every other code is refused by the decoder (./scan.ts). A wire type is written as
 * msgpackr's "tag" form: fixext1 [code, 0] followed by the msgpack value its
 * `encode` returned; the decoder hands that value to `decode`.
 *
 * NB: msgpackr keeps its extensions in module globals, so these registrations apply to
 * every msgpackr user in the process; our handlers only run inside encodeMessage /
 * decodeMessage, where the active context below is set.
 */
import { Packr, addExtension } from "msgpackr";
import { ProtocolError, ValueError } from "../errors/index.js";
import type { DeviceMemory } from "../tensor/backend/interface.js";
import type { Device } from "../tensor/device.js";
import type { Tensor } from "../tensor/tensor.js";
import type { BufferDescriptor } from "./header.js";

export const WIRE_EXT = {
  TENSOR: 0x10,
  ERROR: 0x11,
  MAP: 0x12,
  SET: 0x13,
  BINARY: 0x14,
  WIRE_LAST: 0x1f,
  RPC_FIRST: 0x20,
  RPC_LAST: 0x3f,
} as const;

/**
 * Bytes of device memory as an out-of-band buffer: [offset, offset + byteLength) of `memory`.
 * A CUDA tensor's bytes travel as one, so they never pass through host memory here; the pipe's
 * device channels move them (received ones are whole allocations: offset 0).
 */
export interface DeviceWindow {
  readonly memory: DeviceMemory;
  readonly offset: number;
  readonly byteLength: number;
}

/** An out-of-band buffer: host bytes, or a window on device memory. */
export type WireBuffer = Uint8Array | DeviceWindow;

/** True for a window on device memory. */
export function isDeviceWindow(b: WireBuffer): b is DeviceWindow {
  return !(b instanceof Uint8Array);
}

/** What a wire type's `encode` may use while a message is being encoded. */
export interface WireEncodeContext {
  /** Appends an out-of-band buffer (sent as is, never copied into the payload); returns its index. */
  addBuffer(bytes: WireBuffer, device: Device): number;
  /** Every tensor encoded so far in this message, in payload order (for distributed autograd). */
  readonly tensors: Tensor[];
  /** The `user` value given to encodeMessage (e.g. the rpc agent's per-peer state). */
  readonly user: unknown;
}

/** What a wire type's `decode` may use while a message is being decoded. */
export interface WireDecodeContext {
  /** The frame's out-of-band buffers, as received (device windows for those that landed on a device). */
  readonly buffers: readonly WireBuffer[];
  /** Their descriptors from the buffer table. */
  readonly descriptors: readonly BufferDescriptor[];
  /** Every tensor decoded so far in this message, in payload order. */
  readonly tensors: Tensor[];
  /** Maps a sender's device string to a local device (deviceMaps); defaults to Device.parse. */
  mapDevice(remote: string): Device;
  /** The `user` value given to decodeMessage. */
  readonly user: unknown;
  /**
   * A look at a message before its buffers arrived (./codec.ts peekControl): tensors decode as a
   * TensorPeek (./tensor.ts), nothing is read from `buffers`.
   */
  readonly peek?: boolean;
}

export interface WireType<T extends object> {
  /** msgpackr dispatches on `instanceof Class` (subclasses included). */
  Class: abstract new (...args: never[]) => T;
  /** Optional refinement: instances it rejects are sent as plain objects (own enumerable fields). */
  match?(obj: T): boolean;
  /** Returns a plain msgpack-able value describing `obj` (may call ctx.addBuffer). */
  encode(obj: T, ctx: WireEncodeContext): unknown;
  /** Rebuilds the object from what `encode` returned. Treat `data` as hostile: validate it and throw ProtocolError. */
  decode(data: unknown, ctx: WireDecodeContext): unknown;
}

let activeEncode: WireEncodeContext | null = null;
let activeDecode: WireDecodeContext | null = null;
const registered = new Map<number, WireType<object>>();
// NB: newest first, the order msgpackr tries them in (addExtension prepends).
const byPrecedence: WireType<object>[] = [];

/**
 * Registers a class that travels as extension `code`. The rpc layer uses codes
 * WIRE_EXT.RPC_FIRST..RPC_LAST (0x20–0x3f); a code registered twice, or outside that
 * range, is a ValueError.
 */
export function registerWireType<T extends object>(code: number, type: WireType<T>): void {
  if (!Number.isInteger(code) || code < WIRE_EXT.RPC_FIRST || code > WIRE_EXT.RPC_LAST)
    throw new ValueError(
      `registerWireType(): code 0x${code.toString(16)} is outside the range reserved for rpc ` +
        `(0x${WIRE_EXT.RPC_FIRST.toString(16)}–0x${WIRE_EXT.RPC_LAST.toString(16)})`,
    );
  defineWireType(code, type);
}

/** Registers a wire type with any code (the wire layer's own types use this). */
export function defineWireType<T extends object>(code: number, type: WireType<T>): void {
  if (registered.has(code)) throw new ValueError(`wire type code 0x${code.toString(16)} is already registered`);
  registered.set(code, type as unknown as WireType<object>);
  byPrecedence.unshift(type as unknown as WireType<object>);
  // NB: the three-argument pack form lets us decline (match() false) after msgpackr chose us;
  // the `write` form would already have written the tag.
  const pack = (
    value: T,
    allocateForWrite: (n: number) => { target: Uint8Array; position: number },
    packNested: (v: unknown) => void,
  ): void => {
    const ctx = activeEncode;
    if (ctx === null) throw new ValueError("tprpc wire types can only be packed through encodeMessage()");
    if (type.match && !type.match(value)) {
      allocateForWrite(0);
      packNested({ ...value });
      return;
    }
    const data = type.encode(value, ctx);
    const { target, position } = allocateForWrite(3);
    target[position] = 0xd4;
    target[position + 1] = code;
    target[position + 2] = 0;
    packNested(data);
  };
  const read = (data: unknown): unknown => {
    const ctx = activeDecode;
    if (ctx === null) throw new ProtocolError("tprpc wire types can only be unpacked through decodeMessage()");
    return type.decode(data, ctx);
  };
  addExtension({ Class: type.Class, type: code, pack, read } as unknown as Parameters<typeof addExtension>[0]);
}

/**
 * The wire type msgpackr will pack `obj` with: the newest registered one whose Class it is
 * an instance of; null when none, or when that type's match() declines it (msgpackr then
 * sends its own enumerable fields).
 */
export function wireTypeOf(obj: object): WireType<object> | null {
  for (const t of byPrecedence) if (obj instanceof t.Class) return t.match && !t.match(obj) ? null : t;
  return null;
}

export function isWireTag(code: number): boolean {
  return registered.has(code);
}

/** The one msgpackr instance (options as the wire format in docs/architecture.md needs them). */
export const packr = new Packr({
  structuredClone: false,
  useRecords: false,
  mapsAsObjects: true,
  moreTypes: false,
  bundleStrings: false,
  useBigIntExtension: true,
  int64AsType: "bigint",
});

/** Runs `fn` with `ctx` as the active encode context (re-entrant). */
export function withEncodeContext<R>(ctx: WireEncodeContext, fn: () => R): R {
  const prev = activeEncode;
  activeEncode = ctx;
  try {
    return fn();
  } finally {
    activeEncode = prev;
  }
}

/** Runs `fn` with `ctx` as the active decode context (re-entrant). */
export function withDecodeContext<R>(ctx: WireDecodeContext, fn: () => R): R {
  const prev = activeDecode;
  activeDecode = ctx;
  try {
    return fn();
  } finally {
    activeDecode = prev;
  }
}
