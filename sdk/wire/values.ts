/**
 * What may cross: the sending side's walk over a payload before msgpackr packs it, and the
 * wire types for Maps, Sets and binary arrays.
 *
 * prepareValue(payload) visits every value msgpackr would pack, once, and returns the value
 * to pack: the payload itself when nothing needs changing (the usual payload of tensors and
 * numbers is never copied; a container is copied only when a value below it was replaced).
 * It throws a Refusal, which encodeMessage turns into a SerializationError naming the path
 * ("args[1].opts.cb"), for what cannot cross, before any wire type's encode ran (an RRef's
 * encode registers a fork) and before a tensor's bytes are touched:
 * 1. functions, symbols, Promises and other thenables, live handles (EventEmitters: sockets,
 *    streams, child processes; EventTargets: MessagePorts, AbortSignals), WeakMap, WeakSet,
 *    WeakRef and FinalizationRegistry, as PyTorch's pickler refuses lambdas and sockets;
 * 2. circular objects. There is no "seen" set: a cycle shows up as nesting past maxDepth,
 *    and only then are the ancestors compared, so acyclic payloads pay nothing for it;
 * 3. what the receiver would refuse (./scan.ts) and close the pipe for: nesting deeper than
 *    maxDepth, an own `__proto__` key, an invalid Date, a bigint beyond the scanner's bound,
 *    and a tensor larger than maxBufferBytes.
 * Maps and Sets travel as extension types 0x12 and 0x13 and arrive as Maps and Sets, keys of
 * any wire type (tensors included) arriving as such. Typed arrays other than Uint8Array,
 * DataViews and ArrayBuffers travel as 0x14 and arrive as the same class (msgpackr alone
 * would send them as bytes, and mangled: it copies a Float32Array into a byte string element
 * by element). Uint8Arrays stay msgpack bin and arrive as Buffers.
 * Class instances keep msgpackr's behaviour: their toJSON() when they have one, else their
 * own enumerable fields as a plain object (prototype, getters and #private fields stay behind).
 */
import { EventEmitter } from "node:events";
import { ProtocolError, SerializationError } from "../errors/index.js";
import { itemSize } from "../tensor/dtype.js";
import { Tensor } from "../tensor/tensor.js";
import { WIRE_EXT, defineWireType, wireTypeOf } from "./registry.js";

/** The receivers' limits the walk enforces. */
export interface ValueLimits {
  maxDepth: number;
  maxBufferBytes: number;
}

type RefusalKind =
  "function" | "symbol" | "promise" | "handle" | "weak" | "deep" | "protoKey" | "date" | "bigint" | "tensor";

/** Thrown by the walk; encodeMessage turns it into a SerializationError (refusalError). */
export class Refusal {
  /** Path segments (".opts", "[1]"), innermost first: each frame adds its own while the throw unwinds. */
  readonly segments: string[] = [];
  /** The container each of those frames walked, innermost first (tells a cycle from deep nesting). */
  readonly chain: unknown[] = [];
  constructor(
    readonly kind: RefusalKind,
    readonly value: unknown,
  ) {}
}

// scan.ts takes at most 1024 bytes of bigint extension; msgpackr writes 8 bytes per 64 bits
// of two's complement, so 128 words: -2^8191 <= v < 2^8191.
const BIGINT_BOUND = 2n ** 8191n;

let limits: ValueLimits = { maxDepth: 64, maxBufferBytes: 0 };

/** Checks `payload` and returns what to pack in its place (see the file comment). */
export function prepareValue(payload: unknown, lim: ValueLimits): unknown {
  const prev = limits;
  limits = lim;
  try {
    return prep(payload, 0);
  } finally {
    limits = prev;
  }
}

/** `d`: containers open above `v` (the receiver's scanner counts arrays, maps and extension tags). */
function prep(v: unknown, d: number): unknown {
  switch (typeof v) {
    case "object":
      return v === null ? v : prepObject(v, d);
    case "function":
      throw new Refusal("function", v);
    case "symbol":
      throw new Refusal("symbol", v);
    case "bigint":
      if (v >= BIGINT_BOUND || v < -BIGINT_BOUND) throw new Refusal("bigint", v);
      return v;
    default:
      return v;
  }
}

/**
 * Whether prep() may change or refuse `x`. NB: numbers and strings are tested first, each as
 * its own `typeof x === "..."` (V8 compiles those to type checks without making the typeof
 * string); with prepArray's skip below, a 1000-double array walked in 0.65 µs instead of 2.4.
 */
function visits(x: unknown): boolean {
  if (typeof x === "number" || typeof x === "string") return false;
  return typeof x === "object" ? x !== null : typeof x === "function" || typeof x === "symbol" || typeof x === "bigint";
}

function annotate(e: unknown, segment: string, container: unknown): unknown {
  if (e instanceof Refusal) {
    e.segments.push(segment);
    e.chain.push(container);
  }
  return e;
}

function prepObject(o: object, d: number): unknown {
  if (Array.isArray(o)) return prepArray(o, d);
  const c = o.constructor;
  // NB: the plain-object test msgpackr itself makes (it never calls toJSON for these)
  if (c === Object || c === undefined) return prepFields(o, d);
  if (o instanceof Tensor) {
    if (d + 3 > limits.maxDepth) throw new Refusal("deep", o); // tag, descriptor, shape
    if (o.numel() * itemSize(o.dtype) > limits.maxBufferBytes) throw new Refusal("tensor", o);
    return o;
  }
  if (o instanceof Map) return prepMap(o, d);
  if (o instanceof Set) return prepSet(o, d);
  if (ArrayBuffer.isView(o)) return o instanceof Uint8Array ? o : binary(o, d);
  if (o instanceof ArrayBuffer || o instanceof SharedArrayBuffer) return binary(o, d);
  if (o instanceof Date) {
    // NB: msgpackr writes an invalid Date as a 1-byte timestamp, which every receiver refuses
    if (Number.isNaN(o.getTime())) throw new Refusal("date", o);
    return o;
  }
  if (wireTypeOf(o) !== null) {
    // the type's encode decides what follows its tag: count the tag, and the Error record's map
    if (d + (o instanceof Error ? 2 : 1) > limits.maxDepth) throw new Refusal("deep", o);
    return o;
  }
  if (o instanceof Promise || typeof (o as { then?: unknown }).then === "function") throw new Refusal("promise", o);
  if (o instanceof EventEmitter || o instanceof EventTarget) throw new Refusal("handle", o);
  if (o instanceof WeakMap || o instanceof WeakSet || o instanceof WeakRef || o instanceof FinalizationRegistry)
    throw new Refusal("weak", o);
  if (o instanceof Number || o instanceof String || o instanceof Boolean || o instanceof BigInt || o instanceof Symbol)
    return prep(o.valueOf(), d);
  const toJSON = (o as { toJSON?: unknown }).toJSON;
  if (typeof toJSON === "function") {
    try {
      return prep(toJSON.call(o), d);
    } catch (e) {
      throw annotate(e, ".toJSON()", o);
    }
  }
  return prepFields(o, d);
}

function prepArray(a: unknown[], d: number): unknown[] {
  if (d + 1 > limits.maxDepth) throw new Refusal("deep", a);
  let out: unknown[] | null = null;
  let i = 0;
  try {
    for (; i < a.length; i++) {
      const x = a[i];
      if (!visits(x)) {
        // NB: no `y !== x` for these: comparing would box each double of a number array
        if (out !== null) out.push(x);
        continue;
      }
      const y = prep(x, d + 1);
      if (out !== null) out.push(y);
      else if (y !== x) {
        out = a.slice(0, i);
        out.push(y);
      }
    }
  } catch (e) {
    throw annotate(e, `[${i}]`, a);
  }
  return out ?? a;
}

/** A plain object or class instance: its own enumerable string keys, as msgpackr packs them. */
function prepFields(o: object, d: number): object {
  if (d + 1 > limits.maxDepth) throw new Refusal("deep", o);
  const src = o as Record<string, unknown>;
  const keys = Object.keys(o);
  let out: Record<string, unknown> | null = null;
  let i = 0;
  try {
    for (; i < keys.length; i++) {
      const k = keys[i]!;
      // an own "__proto__" key (JSON.parse makes them): receivers refuse it (scan.ts)
      if (k === "__proto__") throw new Refusal("protoKey", o);
      const x = src[k];
      const y = visits(x) ? prep(x, d + 1) : x;
      if (out !== null) out[k] = y;
      else if (y !== x) {
        out = {};
        for (let j = 0; j < i; j++) out[keys[j]!] = src[keys[j]!];
        out[k] = y;
      }
    }
  } catch (e) {
    throw annotate(e, fieldSegment(keys[i]!), o);
  }
  return out ?? o;
}

/** A Map as it is packed: msgpackr writes a Map as a msgpack map before looking at extensions, so it travels boxed. */
class MapEntries {
  constructor(readonly flat: unknown[]) {}
}

function prepMap(m: Map<unknown, unknown>, d: number): MapEntries {
  if (d + 2 > limits.maxDepth) throw new Refusal("deep", m); // tag, entry array
  const flat: unknown[] = [];
  let i = 0;
  let key: unknown;
  let atKey = true;
  try {
    for (const [k, v] of m) {
      key = k;
      atKey = true;
      flat.push(visits(k) ? prep(k, d + 2) : k);
      atKey = false;
      flat.push(visits(v) ? prep(v, d + 2) : v);
      i++;
    }
  } catch (e) {
    throw annotate(e, atKey ? `.keys()[${i}]` : mapValueSegment(key, i), m);
  }
  return new MapEntries(flat);
}

function prepSet(s: Set<unknown>, d: number): Set<unknown> {
  if (d + 2 > limits.maxDepth) throw new Refusal("deep", s); // tag, value array
  let out: unknown[] | null = null;
  let i = 0;
  try {
    for (const x of s) {
      const y = visits(x) ? prep(x, d + 2) : x;
      if (out !== null) out.push(y);
      else if (y !== x) {
        out = [...s].slice(0, i);
        out.push(y);
      }
      i++;
    }
  } catch (e) {
    throw annotate(e, `.values()[${i}]`, s);
  }
  return out === null ? s : new Set(out);
}

/** Binary arrays by the name they travel under (a Map, so a hostile name finds nothing on Object.prototype). */
const BINARY_KINDS = new Map<string, { BYTES_PER_ELEMENT: number; Class: abstract new (...a: never[]) => object }>([
  ["Int8Array", { BYTES_PER_ELEMENT: 1, Class: Int8Array }],
  ["Uint8ClampedArray", { BYTES_PER_ELEMENT: 1, Class: Uint8ClampedArray }],
  ["Int16Array", { BYTES_PER_ELEMENT: 2, Class: Int16Array }],
  ["Uint16Array", { BYTES_PER_ELEMENT: 2, Class: Uint16Array }],
  ["Int32Array", { BYTES_PER_ELEMENT: 4, Class: Int32Array }],
  ["Uint32Array", { BYTES_PER_ELEMENT: 4, Class: Uint32Array }],
  ["Float32Array", { BYTES_PER_ELEMENT: 4, Class: Float32Array }],
  ["Float64Array", { BYTES_PER_ELEMENT: 8, Class: Float64Array }],
  ["BigInt64Array", { BYTES_PER_ELEMENT: 8, Class: BigInt64Array }],
  ["BigUint64Array", { BYTES_PER_ELEMENT: 8, Class: BigUint64Array }],
  ["DataView", { BYTES_PER_ELEMENT: 1, Class: DataView }],
  ["ArrayBuffer", { BYTES_PER_ELEMENT: 1, Class: ArrayBuffer }],
]);

class BinaryBox {
  constructor(
    readonly kind: string,
    readonly bytes: Buffer,
  ) {}
}

function binary(o: ArrayBufferView | ArrayBuffer | SharedArrayBuffer, d: number): BinaryBox {
  if (d + 2 > limits.maxDepth) throw new Refusal("deep", o); // tag, [kind, bytes]
  // NB: a SharedArrayBuffer arrives as an ArrayBuffer: its memory cannot be shared with another process
  if (!ArrayBuffer.isView(o)) return new BinaryBox("ArrayBuffer", Buffer.from(o));
  let kind = "DataView";
  for (const [name, k] of BINARY_KINDS)
    if (o instanceof k.Class) {
      kind = name;
      break;
    }
  return new BinaryBox(kind, Buffer.from(o.buffer, o.byteOffset, o.byteLength));
}

function fieldSegment(k: string): string {
  return /^[A-Za-z_$][\w$]*$/.test(k) ? `.${k}` : `[${JSON.stringify(k)}]`;
}

function mapValueSegment(key: unknown, i: number): string {
  if (typeof key === "string") return `.get(${JSON.stringify(key)})`;
  if (typeof key === "number" || typeof key === "boolean" || key === null || key === undefined)
    return `.get(${String(key)})`;
  if (typeof key === "bigint") return `.get(${key}n)`;
  return `.values()[${i}]`;
}

/** What the refused value is, for the message: "a Socket", "an EventEmitter". */
function describe(v: unknown): string {
  const c = typeof v === "object" && v !== null ? (v.constructor as { name?: unknown } | undefined)?.name : "";
  const name = typeof c === "string" && c !== "" && c !== "Object" ? c : "object";
  return `${/^[AEIOU]/i.test(name) ? "an" : "a"} ${name}`;
}

/** The SerializationError for a refusal: what was refused, where in the message, and what to do. */
export function refusalError(r: Refusal, lim: ValueLimits): SerializationError {
  const segs = [...r.segments].reverse();
  const at = (n: number) => segs.slice(0, n).join("").replace(/^\./, "");
  const name = (path: string) => {
    const root = /^[A-Za-z_$][\w$]*/.exec(path)?.[0];
    if (path === "") return "the message payload";
    return `${root === "args" ? "rpc argument" : root === "value" ? "rpc return value" : "rpc message field"} ${path}`;
  };
  const path = at(segs.length);
  const where = name(path);
  let msg: string;
  switch (r.kind) {
    case "function":
      msg =
        `${where} is a function, which cannot be sent: functions do not cross between workers (only a call's ` +
        "target is shipped). Send the data it works on, or make it the target of its own rpc call, or " +
        "rpc.register it on the callee and call it there";
      break;
    case "symbol":
      msg = `${where} is a symbol, which cannot be sent (a symbol is unique to its process); send a string instead`;
      break;
    case "promise":
      msg = `${where} is a ${r.value instanceof Promise ? "Promise" : "thenable"}, which cannot be sent; await it and send its value`;
      break;
    case "handle":
      msg =
        `${where} is ${describe(r.value)}, a live handle of this process (an event emitter: socket, stream, ` +
        "process, port), which cannot be sent; open it on the worker that uses it, or send the data read from it";
      break;
    case "weak":
      msg = `${where} is ${describe(r.value)}, which cannot be sent (what it holds weakly cannot be listed); send a Map, a Set or the object itself`;
      break;
    case "protoKey":
      msg = `${where} is an own "__proto__" key, which cannot be sent (receivers refuse it: prototype pollution); rename the key`;
      break;
    case "date":
      msg = `${where} is an invalid Date, which cannot be sent; send a valid Date or null`;
      break;
    case "bigint":
      msg = `${where} is a bigint beyond ±2^8191, which cannot be sent (the receivers' limit); send it as a string`;
      break;
    case "tensor": {
      const t = r.value as Tensor;
      msg =
        `${where} is a tensor of ${t.numel() * itemSize(t.dtype)} bytes, over the wire's limit of ` +
        `${lim.maxBufferBytes} bytes per tensor (maxBufferBytes), which cannot be sent; split it (t.chunk(n)) and send the parts`;
      break;
    }
    case "deep": {
      // containers from the payload down, then the value the limit was hit at: node i sits at path at(i)
      const nodes = [...r.chain].reverse();
      nodes.push(r.value);
      for (let j = 1; j < nodes.length; j++) {
        const i = nodes.indexOf(nodes[j]);
        if (i < j)
          return new SerializationError(
            `${name(at(j))} refers back to ${i === 0 ? "the message payload" : at(i)} (a circular reference), which ` +
              "cannot be sent: only trees of values cross. Drop the back-reference and rebuild it on the receiver",
            at(j),
          );
      }
      msg =
        `${where} nests deeper than ${lim.maxDepth} levels (the receivers' limit, counting arrays, objects and ` +
        "wire types), which cannot be sent; flatten it";
      break;
    }
  }
  return new SerializationError(msg, path);
}

defineWireType(WIRE_EXT.MAP, {
  Class: MapEntries,
  encode: (m: MapEntries) => m.flat,
  decode(data) {
    if (!Array.isArray(data) || data.length % 2 !== 0)
      throw new ProtocolError("bad Map record: expected an array of keys and values");
    // NB: Map.set, never obj[key]: a "__proto__" key is an ordinary key here
    const m = new Map<unknown, unknown>();
    for (let i = 0; i < data.length; i += 2) m.set(data[i], data[i + 1]);
    return m;
  },
});

defineWireType(WIRE_EXT.SET, {
  // NB: a Set reaches the extensions (unlike a Map), so it needs no box
  Class: Set,
  encode: (s: Set<unknown>) => [...s],
  decode(data) {
    if (!Array.isArray(data)) throw new ProtocolError("bad Set record: expected an array of values");
    return new Set(data);
  },
});

defineWireType(WIRE_EXT.BINARY, {
  Class: BinaryBox,
  encode: (b: BinaryBox) => [b.kind, b.bytes],
  decode(data) {
    if (!Array.isArray(data) || data.length !== 2 || typeof data[0] !== "string" || !(data[1] instanceof Uint8Array))
      throw new ProtocolError("bad binary record: expected [kind, bytes]");
    const kind = BINARY_KINDS.get(data[0]);
    const bytes = data[1];
    if (!kind) throw new ProtocolError(`bad binary record: unknown kind ${JSON.stringify(data[0])}`);
    if (bytes.byteLength % kind.BYTES_PER_ELEMENT !== 0)
      throw new ProtocolError(`bad binary record: ${bytes.byteLength} bytes is not a whole number of ${data[0]} items`);
    // a copy: aligned for the element size, and not a window that keeps the whole frame alive
    const copy = new Uint8Array(bytes).buffer;
    if (data[0] === "ArrayBuffer") return copy;
    return new (kind.Class as new (b: ArrayBuffer) => object)(copy);
  },
});
