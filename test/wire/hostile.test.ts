/**
 * The decoder treats every frame as hostile: malformed headers, payloads and tensor
 * descriptors, prototype-pollution attempts and deep nesting are ProtocolErrors with
 * a clear message, and nothing leaks into Object.prototype.
 */
import { Packr } from "msgpackr";
import { describe, expect, it } from "vitest";
import { ProtocolError, tensor } from "../../sdk/index.js";
import { DeviceKind, MessageType, decodeMessage, encodeMessage } from "../../sdk/wire/index.js";
import { encodeHeader } from "../../sdk/wire/header.js";

const plain = new Packr({ useRecords: false, structuredClone: false, mapsAsObjects: true });

/** A frame with a hand-made payload and the given buffers. */
function decodeRaw(payload: Uint8Array, buffers: Uint8Array[] = [], maxDepth?: number) {
  const header = encodeHeader(
    { type: MessageType.REQUEST, flags: 0, id: 1, payloadBytes: payload.byteLength, bufferCount: buffers.length },
    buffers.map((b) => ({ byteLength: b.byteLength, deviceType: DeviceKind.CPU, deviceIndex: 0, channel: 0 })),
  );
  return decodeMessage(header, payload, buffers, maxDepth === undefined ? {} : { maxDepth });
}

const bytes = (...xs: (number | string)[]): Uint8Array =>
  Uint8Array.from(xs.flatMap((x) => (typeof x === "string" ? [...Buffer.from(x, "latin1")] : [x])));
/** A tensor descriptor tagged as extension 0x10, as the encoder writes it. */
const tensorTag = (desc: unknown): Uint8Array => new Uint8Array([0xd4, 0x10, 0x00, ...plain.pack(desc)]);

describe("hostile frames", () => {
  it("refuses __proto__ keys and leaves Object.prototype alone", () => {
    // {"__proto__": {"polluted": 1}}
    const evil = bytes(0x81, 0xa9, "__proto__", 0x81, 0xa8, "polluted", 0x01);
    expect(() => decodeRaw(evil)).toThrow(/__proto__/);
    // the same key nested, and as a str8 key
    const nested = bytes(0x91, 0x81, 0xd9, 9, "__proto__", 0x80);
    expect(() => decodeRaw(nested)).toThrow(ProtocolError);
    expect(({} as { polluted?: unknown }).polluted).toBeUndefined();
    // "constructor" and "prototype" are ordinary own keys
    const ok = decodeRaw(plain.pack(JSON.parse('{"constructor": {"prototype": {"polluted": 1}}}')));
    expect(Object.getPrototypeOf(ok.payload)).toBe(Object.prototype);
    expect(Object.hasOwn(ok.payload as object, "constructor")).toBe(true);
    expect(({} as { polluted?: unknown }).polluted).toBeUndefined();
    expect({}.constructor).toBe(Object);
  });

  it("refuses nesting deeper than maxDepth, without overflowing the stack", () => {
    const deep = new Uint8Array(200_001).fill(0x91);
    deep[200_000] = 0xc0;
    expect(() => decodeRaw(deep)).toThrow(/nesting deeper than 64/);
    const ten = new Uint8Array(11).fill(0x91);
    ten[10] = 0xc0;
    expect(decodeRaw(ten).payload).toEqual([[[[[[[[[[null]]]]]]]]]]);
    expect(() => decodeRaw(ten, [], 5)).toThrow(/deeper than 5/);
    // extension tags count as a level too
    const tags = new Uint8Array(3 * 1000 + 1);
    for (let i = 0; i < 1000; i++) tags.set([0xd4, 0x11, 0x00], 3 * i);
    tags[3000] = 0xc0;
    expect(() => decodeRaw(tags)).toThrow(/nesting deeper/);
  });

  it("refuses extension types outside the wire table (msgpackr built-ins included)", () => {
    const regexp = bytes(0xd4, 0x78, 0x00, 0x92, 0xa2, "a+", 0xa0); // RegExp
    const record = bytes(0xd4, 0x72, 0x40, 0x91, 0xa1, "k", 0x01); // msgpackr record definition
    const clone = bytes(0xd6, 0x69, 0, 0, 0, 1, 0x80); // structured-clone id
    const typed = bytes(0xc7, 5, 0x74, 8, 0, 0, 0, 0); // Float32Array
    const rpcUnregistered = bytes(0xd4, 0x3f, 0x00, 0xc0);
    for (const p of [regexp, record, clone, typed, rpcUnregistered])
      expect(() => decodeRaw(p)).toThrow(/not a known wire type/);
  });

  it("refuses truncated, trailing and invalid payload bytes", () => {
    expect(() => decodeRaw(bytes(0x92, 0x01))).toThrow(/runs past the end/);
    expect(() => decodeRaw(bytes(0xdd, 0xff, 0xff, 0xff, 0xff))).toThrow(/runs past the end/);
    expect(() => decodeRaw(bytes(0xa5, "ab"))).toThrow(/truncated/);
    expect(() => decodeRaw(bytes(0x01, 0x02))).toThrow(/trailing/);
    expect(() => decodeRaw(bytes(0xc1))).toThrow(/invalid msgpack byte/);
    expect(() => decodeRaw(new Uint8Array(0))).toThrow(/truncated/);
    // a map key msgpackr cannot turn into a property name
    expect(() => decodeRaw(bytes(0x81, 0x80, 0x01))).toThrow(ProtocolError);
  });

  it("validates tensor descriptors", () => {
    const buf8 = new Uint8Array(8);
    const cases: [unknown, RegExp][] = [
      [["complex64", [2], 0, "cpu", false], /unknown dtype "complex64"/],
      [["float32", [-2], 0, "cpu", false], /non-negative integer/],
      [["float32", [1.5], 0, "cpu", false], /non-negative integer/],
      [["float32", "2", 0, "cpu", false], /shape must be an array/],
      [["float32", new Array(65).fill(1), 0, "cpu", false], /at most 64/],
      [["float32", [2 ** 40, 2 ** 40], 0, "cpu", false], /too many elements/],
      [["float32", [2], 1, "cpu", false], /buffer index 1 is out of range/],
      [["float32", [2], -1, "cpu", false], /out of range/],
      [["float32", [3], 0, "cpu", false], /needs 12 bytes but buffer 0 has 8/],
      [["int32", [2], 0, "cpu", true], /cannot require grad/],
      [["float32", [2], 0, "tpu:0", false], /device/],
      [["float32", [2], 0, 7, false], /device must be a string/],
      [{ dtype: "float32" }, /expected \[dtype, shape/],
      [["float32", [2], 0, "cpu"], /expected \[dtype, shape/],
    ];
    for (const [desc, re] of cases) {
      let err: unknown;
      try {
        decodeRaw(tensorTag(desc), [buf8]);
      } catch (e) {
        err = e;
      }
      expect(err, JSON.stringify(desc)).toBeInstanceOf(ProtocolError);
      expect((err as Error).message, JSON.stringify(desc)).toMatch(re);
    }
    expect(decodeRaw(tensorTag(["float32", [2], 0, "cpu", true]), [buf8]).tensors[0]!.requiresGrad).toBe(true);
  });

  it("validates error records", () => {
    const rec = (o: unknown) => new Uint8Array([0xd4, 0x11, 0x00, ...plain.pack(o)]);
    expect(() => decodeRaw(rec([1, 2]))).toThrow(/bad error record/);
    expect(() => decodeRaw(rec({ name: "E", message: 3, stack: "" }))).toThrow(/"message" must be a string/);
    expect(decodeRaw(rec({ name: "E", message: "m", stack: "" })).payload).toMatchObject({ name: "E", message: "m" });
  });

  it("checks the frame parts against the header", () => {
    const m = encodeMessage({ type: MessageType.REQUEST, id: 3, payload: [tensor([1, 2], { dtype: "float32" })] });
    expect(() => decodeMessage(m.header.subarray(0, 20), m.payload, m.buffers)).toThrow(/header is 20 bytes/);
    expect(() => decodeMessage(m.header.subarray(0, 30), m.payload, m.buffers)).toThrow(/buffer table truncated/);
    expect(() => decodeMessage(m.header, m.payload.subarray(1), m.buffers)).toThrow(/payload is/);
    expect(() => decodeMessage(m.header, m.payload, [])).toThrow(/0 buffers, header says 1/);
    expect(() => decodeMessage(m.header, m.payload, [new Uint8Array(4)])).toThrow(/buffer 0 is 4 bytes/);
    const bad = (patch: (h: Buffer) => void, re: RegExp) => {
      const h = Buffer.from(m.header);
      patch(h);
      expect(() => decodeMessage(h, m.payload, m.buffers)).toThrow(re);
    };
    bad((h) => (h[0] = 0), /wrong magic/);
    bad((h) => (h[2] = 99), /wire version 99/);
    bad((h) => (h[3] = 0), /unknown message type/);
    bad((h) => (h[6] = 1), /reserved header bytes/);
    bad((h) => h.writeUInt32LE(0xffffffff, 12), /message id does not fit/);
    bad((h) => (h[24 + 8] = 9), /unknown device type/);
    bad((h) => (h[24 + 9] = 3), /unknown channel/);
    bad((h) => (h[24 + 12] = 1), /reserved bytes/);
    bad((h) => h.writeUInt32LE(0x10000, 24 + 4), /does not fit in 53 bits|maxBufferBytes/);
    // a good frame still decodes after all of that
    expect((decodeMessage(m.header, m.payload, m.buffers).payload as unknown[]).length).toBe(1);
  });
});
