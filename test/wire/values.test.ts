/**
 * What may cross, on the sending side: values that cannot be sent (functions, Promises,
 * symbols, live handles, cycles, what the receiver's limits refuse) are SerializationErrors
 * naming their path, thrown by encodeMessage before anything is packed; Maps, Sets and
 * binary arrays round-trip as themselves (tensor keys included), and their records are
 * checked like any hostile input on the way in.
 */
import { EventEmitter } from "node:events";
import { Socket } from "node:net";
import { PassThrough } from "node:stream";
import { describe, expect, it } from "vitest";
import { ProtocolError, SerializationError, Tensor, tensor } from "../../sdk/index.js";
import { MessageType, WIRE_EXT, decodeMessage, encodeMessage, registerWireType } from "../../sdk/wire/index.js";
import { encodeHeader } from "../../sdk/wire/header.js";

function roundTrip(payload: unknown) {
  const m = encodeMessage({ type: MessageType.REQUEST, id: 1, payload });
  return decodeMessage(m.header, m.payload, m.buffers).payload;
}

/** The SerializationError encodeMessage throws for `payload`. */
function refusal(payload: unknown, opts: Parameters<typeof encodeMessage>[1] = {}): SerializationError {
  try {
    encodeMessage({ type: MessageType.REQUEST, id: 1, payload }, opts);
  } catch (e) {
    expect(e).toBeInstanceOf(SerializationError);
    return e as SerializationError;
  }
  throw new Error("encodeMessage accepted the payload");
}

/** A frame whose payload is `bytes` (a hand-made record). */
function decodeRaw(payload: Uint8Array) {
  const header = encodeHeader(
    { type: MessageType.REQUEST, flags: 0, id: 1, payloadBytes: payload.byteLength, bufferCount: 0 },
    [],
  );
  return decodeMessage(header, payload, []);
}

// A wire type that counts its encodes: refusals must come before any wire type ran.
class Probe {}
let probeEncodes = 0;
registerWireType(WIRE_EXT.RPC_FIRST + 9, {
  Class: Probe,
  encode: () => ++probeEncodes,
  decode: () => new Probe(),
});

/** A thenable that is no Promise. */
class Lazy {
  then(resolve: (v: number) => void): void {
    resolve(1);
  }
}

describe("values that cannot be sent", () => {
  it("refuses functions, Promises, symbols and live handles with their path, before packing anything", () => {
    const cases: [unknown, RegExp][] = [
      [{ args: [1, { opts: { cb: () => 1 } }, new Probe()] }, /^rpc argument args\[1\]\.opts\.cb is a function/],
      [{ args: [new Probe(), Promise.resolve(1)] }, /^rpc argument args\[1\] is a Promise.*await it/],
      [{ args: [new Probe(), { x: new Lazy() }] }, /args\[1\]\.x is a thenable/],
      [{ args: [new Probe(), [Symbol("s")]] }, /^rpc argument args\[1\]\[0\] is a symbol/],
      [{ args: [new Probe(), new Socket()] }, /^rpc argument args\[1\] is a Socket, a live handle/],
      [{ args: [new Probe(), { s: new PassThrough() }] }, /args\[1\]\.s is a PassThrough, a live handle/],
      [{ args: [new Probe(), new EventEmitter()] }, /args\[1\] is an EventEmitter/],
      [{ args: [new Probe(), new AbortController().signal] }, /args\[1\] is an AbortSignal/],
      [{ args: [new Probe(), new WeakMap()] }, /args\[1\] is a WeakMap/],
      [{ args: [new Probe(), { "odd key": Math.max }] }, /args\[1\]\["odd key"\] is a function/],
      [{ value: { out: [new Probe(), () => 1] } }, /^rpc return value value\.out\[1\] is a function/],
    ];
    for (const [payload, re] of cases) {
      const e = refusal(payload);
      expect(e.message).toMatch(re);
      expect(e.message).toMatch(/cannot be sent/);
    }
    expect(refusal({ args: [0, { opts: { cb: () => 1 } }] }).path).toBe("args[1].opts.cb");
    expect(probeEncodes).toBe(0);
  });

  it("refuses circular objects, naming the back-reference, and nesting the receiver would refuse", () => {
    const c: Record<string, unknown> = { a: 1 };
    c.self = c;
    const e = refusal({ args: [new Probe(), c] });
    expect(e.message).toMatch(/^rpc argument args\[1\]\.self refers back to args\[1\] \(a circular reference\)/);
    expect(e.path).toBe("args[1].self");
    // through an array and a Map value
    const a: unknown[] = [1];
    a.push({ m: new Map([["k", a]]) });
    expect(refusal({ value: a }).message).toMatch(/^rpc return value value\[1\]\.m\.get\("k"\) refers back to value /);
    const p: Record<string, unknown> = {};
    p.args = [p];
    expect(refusal(p).message).toMatch(/args\[0\] refers back to the message payload/);
    expect(probeEncodes).toBe(0);

    const nest = (n: number) => {
      let v: unknown = 1;
      for (let i = 0; i < n; i++) v = [v];
      return v;
    };
    // the payload map and args are 2 levels: 62 more arrays make 64, the receivers' default limit
    expect(roundTrip({ args: [nest(62)] })).toEqual({ args: [nest(62)] });
    expect(refusal({ args: [nest(63)] }).message).toMatch(/nests deeper than 64 levels/);
    // a tensor counts 3 levels (tag, descriptor, shape), as the receiver's scanner counts it
    expect(refusal({ args: [[[tensor([1])]]] }, { maxDepth: 6 }).message).toMatch(/args\[0\]\[0\]\[0\] nests deeper/);
    expect(() =>
      encodeMessage({ type: MessageType.REQUEST, id: 1, payload: { args: [[tensor([1])]] } }, { maxDepth: 6 }),
    ).not.toThrow();
  });

  it("refuses what receivers refuse: __proto__ keys, invalid Dates, huge bigints, too many tensors", () => {
    expect(refusal({ args: [JSON.parse('{"a": 1, "__proto__": {"x": 1}}')] }).message).toMatch(
      /args\[0\]\.__proto__ is an own "__proto__" key/,
    );
    expect(refusal({ args: [new Date(Number.NaN)] }).message).toMatch(/args\[0\] is an invalid Date/);
    expect(refusal({ args: [2n ** 8191n] }).message).toMatch(/bigint beyond/);
    expect(roundTrip({ args: [2n ** 8190n, -(2n ** 8191n)] })).toEqual({ args: [2n ** 8190n, -(2n ** 8191n)] });
    expect(refusal({ args: [tensor([1]), tensor([2]), tensor([3])] }, { maxBuffers: 2 }).message).toMatch(
      /more than 2 tensors/,
    );
  });

  it("refuses a tensor over maxBufferBytes before anything is packed or copied", () => {
    const t = tensor([0, 1, 2, 3, 4, 5], { dtype: "float32" });
    const e = refusal({ args: [new Probe(), { w: t }] }, { maxBufferBytes: 23 });
    expect(e.message).toMatch(/^rpc argument args\[1\]\.w is a tensor of 24 bytes, over the wire's limit of 23 bytes/);
    // a broadcast view: 4 MB once compacted, from a 4-byte storage; refused before the compaction
    const wide = tensor([1], { dtype: "float32" }).expand([1000, 1000]);
    expect(refusal({ value: [new Probe(), wide] }, { maxBufferBytes: 2 ** 20 }).path).toBe("value[1]");
    expect(probeEncodes).toBe(0);
    expect(() => encodeMessage({ type: MessageType.REQUEST, id: 1, payload: t }, { maxBufferBytes: 24 })).not.toThrow();
  });

  it("keeps what crossed before: plain data, tensors, Dates, Errors, bigints, bytes, class instances", () => {
    class Point {
      x = 1;
      y = [2, tensor([3])];
      get sum() {
        return 3;
      }
    }
    const payload = {
      args: [tensor([1, 2]), 3, 4.5, "s", null, undefined, true, 5n, new Date(7), Buffer.from([1, 2]), new Point()],
    };
    const back = roundTrip(payload) as { args: unknown[] };
    expect(back.args[0]).toBeInstanceOf(Tensor);
    expect(back.args.slice(1, 8)).toEqual([3, 4.5, "s", null, undefined, true, 5n]);
    expect(back.args[8]).toEqual(new Date(7));
    expect([...(back.args[9] as Uint8Array)]).toEqual([1, 2]);
    // a class instance travels as its own enumerable fields (as before)
    expect(Object.getPrototypeOf(back.args[10])).toBe(Object.prototype);
    expect(Object.keys(back.args[10] as object)).toEqual(["x", "y"]);
    expect(((back.args[10] as { y: unknown[] }).y[1] as Tensor).tolist()).toEqual([3]);
  });
});

describe("Maps, Sets and binary arrays", () => {
  it("round-trip Maps with any keys, tensors included, as Maps", () => {
    const k1 = tensor([1, 2]);
    const k2 = tensor([[3]]);
    const m = new Map<unknown, unknown>([
      [k1, "first"],
      [k2, tensor([4])],
      ["s", 1],
      [2, { nested: new Map([["x", [1, 2]]]) }],
      ["__proto__", { polluted: 1 }],
    ]);
    const back = roundTrip({ args: [m], other: { deep: m } }) as {
      args: [Map<unknown, unknown>];
      other: { deep: unknown };
    };
    const got = back.args[0];
    expect(got).toBeInstanceOf(Map);
    const keys = [...got.keys()];
    expect(keys[0]).toBeInstanceOf(Tensor);
    expect((keys[0] as Tensor).tolist()).toEqual([1, 2]);
    expect((keys[1] as Tensor).tolist()).toEqual([[3]]);
    expect(got.get(keys[0])).toBe("first");
    expect((got.get(keys[1]) as Tensor).tolist()).toEqual([4]);
    expect(got.get("s")).toBe(1);
    expect((got.get(2) as { nested: Map<string, unknown> }).nested.get("x")).toEqual([1, 2]);
    // an ordinary Map key: nothing reaches Object.prototype
    expect(got.get("__proto__")).toEqual({ polluted: 1 });
    expect(({} as { polluted?: unknown }).polluted).toBeUndefined();
    expect(back.other.deep).toBeInstanceOf(Map);
    // the caller's Map is untouched
    expect(m.size).toBe(5);
    expect(roundTrip(new Map())).toEqual(new Map());
  });

  it("round-trip Sets as Sets, and refuse what they hold like anything else", () => {
    const back = roundTrip({ args: [new Set([1, "a", tensor([5])])] }) as { args: [Set<unknown>] };
    expect(back.args[0]).toBeInstanceOf(Set);
    const vals = [...back.args[0]];
    expect(vals.slice(0, 2)).toEqual([1, "a"]);
    expect((vals[2] as Tensor).tolist()).toEqual([5]);
    expect(refusal({ args: [new Set([1, () => 2])] }).message).toMatch(/args\[0\]\.values\(\)\[1\] is a function/);
    expect(refusal({ args: [new Map([[() => 2, 1]])] }).message).toMatch(/args\[0\]\.keys\(\)\[0\] is a function/);
  });

  it("round-trip typed arrays, DataViews and ArrayBuffers as themselves, bytes intact", () => {
    const f32 = new Float32Array([1.5, -2, 3.25]);
    const i64 = new BigInt64Array([-(2n ** 62n), 7n]);
    const window = new Float64Array([9, 8, 7, 6]).subarray(1, 3);
    const dv = new DataView(new Uint8Array([1, 2, 3, 4]).buffer, 1, 2);
    const ab = new Uint8Array([5, 6, 7]).buffer;
    const back = roundTrip({ args: [f32, i64, window, dv, ab, new Uint16Array([65535])] }) as { args: unknown[] };
    expect(back.args[0]).toBeInstanceOf(Float32Array);
    expect([...(back.args[0] as Float32Array)]).toEqual([1.5, -2, 3.25]);
    expect([...(back.args[1] as BigInt64Array)]).toEqual([-(2n ** 62n), 7n]);
    expect([...(back.args[2] as Float64Array)]).toEqual([8, 7]);
    expect(back.args[3]).toBeInstanceOf(DataView);
    expect([...new Uint8Array((back.args[3] as DataView).buffer)]).toEqual([2, 3]);
    expect(back.args[4]).toBeInstanceOf(ArrayBuffer);
    expect([...new Uint8Array(back.args[4] as ArrayBuffer)]).toEqual([5, 6, 7]);
    expect([...(back.args[5] as Uint16Array)]).toEqual([65535]);
  });

  it("checks Map, Set and binary records as hostile input", () => {
    const tag = (code: number, ...body: number[]) => new Uint8Array([0xd4, code, 0x00, ...body]);
    expect(() => decodeRaw(tag(WIRE_EXT.MAP, 0x93, 1, 2, 3))).toThrow(/bad Map record/);
    expect(() => decodeRaw(tag(WIRE_EXT.MAP, 0x01))).toThrow(/bad Map record/);
    expect(() => decodeRaw(tag(WIRE_EXT.SET, 0x80))).toThrow(/bad Set record/);
    const kind = (s: string) => [0xa0 + s.length, ...Buffer.from(s)];
    for (const k of ["Function", "__proto__", "constructor", "Buffer"])
      expect(() => decodeRaw(tag(WIRE_EXT.BINARY, 0x92, ...kind(k), 0xc4, 0))).toThrow(/unknown kind/);
    expect(() => decodeRaw(tag(WIRE_EXT.BINARY, 0x92, ...kind("Float32Array"), 0xc4, 3, 1, 2, 3))).toThrow(
      /not a whole number/,
    );
    expect(() => decodeRaw(tag(WIRE_EXT.BINARY, 0x92, ...kind("Float32Array"), 0x01))).toThrow(ProtocolError);
    // an object inside a Map still may not carry a __proto__ key
    const evil = tag(WIRE_EXT.MAP, 0x92, 0x01, 0x81, 0xa9, ...Buffer.from("__proto__"), 0x80);
    expect(() => decodeRaw(evil)).toThrow(/__proto__/);
    expect(({} as { polluted?: unknown }).polluted).toBeUndefined();
    const ok = decodeRaw(tag(WIRE_EXT.MAP, 0x92, ...kind("__proto__"), 0x01)).payload as Map<string, number>;
    expect(ok.get("__proto__")).toBe(1);
    expect(Object.getPrototypeOf(ok)).toBe(Map.prototype);
  });
});
