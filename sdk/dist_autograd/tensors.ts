/**
 * Finding the tensors inside a message's values, in the order the wire codec
 * meets them (msgpack: array elements in order, object keys in enumeration
 * order, Map entries key then value), so that sender and receiver count the
 * same tensor as "tensor k". RRefs and errors are opaque (the codec sends
 * them as extension values).
 */
import { RRef } from "../rpc/rref.js";
import { Tensor } from "../tensor/tensor.js";

/** Depth past which values are not searched (the decoder refuses deeper payloads anyway). */
const MAX_DEPTH = 64;

function opaque(v: object): boolean {
  return (
    v instanceof RRef || v instanceof Error || ArrayBuffer.isView(v) || v instanceof ArrayBuffer || v instanceof Date
  );
}

/** Every tensor in `v`, in wire order. */
export function collectTensors(v: unknown, out: Tensor[] = [], depth = 0): Tensor[] {
  if (v instanceof Tensor) out.push(v);
  else if (typeof v !== "object" || v === null || depth > MAX_DEPTH || opaque(v)) return out;
  else if (Array.isArray(v)) for (const x of v) collectTensors(x, out, depth + 1);
  else if (v instanceof Map)
    for (const [k, x] of v) {
      collectTensors(k, out, depth + 1);
      collectTensors(x, out, depth + 1);
    }
  else for (const k of Object.keys(v)) collectTensors((v as Record<string, unknown>)[k], out, depth + 1);
  return out;
}

/**
 * `v` with each tensor t replaced by `fn(t)`; containers are copied only on
 * the paths where something changed (a class instance becomes a plain object
 * with its own enumerable fields, which is what the codec sends anyway).
 */
export function mapTensors(v: unknown, fn: (t: Tensor) => Tensor, depth = 0): unknown {
  if (v instanceof Tensor) return fn(v);
  if (typeof v !== "object" || v === null || depth > MAX_DEPTH || opaque(v)) return v;
  if (Array.isArray(v)) {
    const out = v.map((x) => mapTensors(x, fn, depth + 1));
    return out.some((x, i) => x !== v[i]) ? out : v;
  }
  if (v instanceof Map) {
    let changed = false;
    const out = new Map<unknown, unknown>();
    for (const [k, x] of v) {
      const k2 = mapTensors(k, fn, depth + 1);
      const x2 = mapTensors(x, fn, depth + 1);
      changed ||= k2 !== k || x2 !== x;
      out.set(k2, x2);
    }
    return changed ? out : v;
  }
  const src = v as Record<string, unknown>;
  let changed = false;
  const out: Record<string, unknown> = {};
  for (const k of Object.keys(src)) {
    const x = mapTensors(src[k], fn, depth + 1);
    changed ||= x !== src[k];
    out[k] = x;
  }
  return changed ? out : v;
}
