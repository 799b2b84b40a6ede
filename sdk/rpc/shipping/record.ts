/**
 * The wire form of a call target, and what both sides agree on about it:
 * canonical JSON, the content hash, plain-data checks, and the checks a callee
 * runs on a record from the wire (which it treats as hostile: bounded sizes,
 * identifiers only where they become code, no prototype keys).
 */
import { createHash } from "node:crypto";
import { ProtocolError } from "../../errors/index.js";

/** A dependency of shipped code, bound on the callee to `exports.NAME` and the bare name NAME. */
export type DepRecord =
  | { kind: "source"; source: string }
  | { kind: "value"; value: PlainData }
  | { kind: "builtin"; name: string }
  | { kind: "registered"; name: string };

/** Shipped code: the target's source and every dependency it reaches, by top-level name. */
export interface SourceRecord {
  kind: "source";
  /** sha256 (hex) of the canonical JSON of `{ source, deps }`. */
  hash: string;
  source: string;
  deps: Record<string, DepRecord>;
}

/** A source record by hash alone, sent once the peer holds the full record. */
export interface SourceRefRecord {
  kind: "source";
  hash: string;
}

export type TargetRecord =
  | { kind: "builtin"; name: string }
  | { kind: "registered"; name: string }
  /** A standard JavaScript built-in by its global path, e.g. "Math.min" (./globals.ts). */
  | { kind: "global"; name: string }
  | { kind: "module"; ref: string }
  | SourceRecord
  | SourceRefRecord;

export type PlainData = null | boolean | number | string | PlainData[] | { [key: string]: PlainData };

export const MAX_SOURCE_CHARS = 4 << 20;
const MAX_NAME_CHARS = 1024;
const MAX_DEPS = 10_000;
const IDENT_RE = /^[\p{ID_Start}$_][\p{ID_Continue}$\u200c\u200d]*$/u;
const RESERVED = new Set(
  (
    "break case catch class const continue debugger default delete do else export extends finally for function if " +
    "import in instanceof new return super switch this throw try typeof var void while with yield let static " +
    "enum await implements package protected interface private public null true false arguments eval"
  ).split(" "),
);

/** Names the callee binds itself; a dependency never takes them. */
export const SCOPE_NAMES: ReadonlySet<string> = new Set(["tprpc", "exports", "__tprpc_deps__"]);

/** A name that may become a binding in generated code. */
export function isBindableName(name: string): boolean {
  return IDENT_RE.test(name) && !RESERVED.has(name);
}

/** Canonical JSON: object keys sorted, no whitespace. Equal records give equal text. */
export function canonicalJson(value: unknown): string {
  if (value === null || typeof value !== "object") return JSON.stringify(value);
  if (Array.isArray(value)) return `[${value.map(canonicalJson).join(",")}]`;
  const keys = Object.keys(value).sort();
  return `{${keys.map((k) => `${JSON.stringify(k)}:${canonicalJson((value as Record<string, unknown>)[k])}`).join(",")}}`;
}

/** The content hash of shipped code. */
export function hashSource(source: string, deps: Record<string, DepRecord>): string {
  return createHash("sha256").update(canonicalJson({ source, deps })).digest("hex");
}

/**
 * A JSON-safe deep copy of `value` when it is plain data (null, booleans, finite
 * numbers, strings, arrays and plain objects, acyclic); otherwise the reason it is not.
 */
export function toPlainData(value: unknown): { ok: true; value: PlainData } | { ok: false; reason: string } {
  const seen = new Set<object>();
  const copy = (v: unknown, depth: number): PlainData => {
    if (v === null || typeof v === "boolean" || typeof v === "string") return v;
    if (typeof v === "number") {
      if (!Number.isFinite(v)) throw new TypeError(`holds the number ${v} (only finite numbers are shipped by value)`);
      return v;
    }
    if (typeof v !== "object") throw new TypeError(`holds a ${typeof v}`);
    if (depth > 64) throw new TypeError("is nested more than 64 levels deep");
    if (seen.has(v)) throw new TypeError("is cyclic");
    seen.add(v);
    try {
      if (Array.isArray(v)) return v.map((x) => copy(x, depth + 1));
      const proto = Object.getPrototypeOf(v);
      if (proto !== Object.prototype && proto !== null)
        throw new TypeError(`is ${describeValue(v)} (not plain data, a function or a class)`);
      const out: { [key: string]: PlainData } = {};
      for (const [k, d] of Object.entries(Object.getOwnPropertyDescriptors(v))) {
        if (!d.enumerable) continue;
        if (!("value" in d)) throw new TypeError(`has a getter ${JSON.stringify(k)}`);
        Object.defineProperty(out, k, {
          value: copy(d.value, depth + 1),
          enumerable: true,
          writable: true,
          configurable: true,
        });
      }
      return out;
    } finally {
      seen.delete(v);
    }
  };
  try {
    return { ok: true, value: copy(value, 0) };
  } catch (e) {
    return { ok: false, reason: (e as Error).message };
  }
}

/** "a Tensor", "a Map", "an object of class Foo". */
export function describeValue(v: unknown): string {
  if (v === null) return "null";
  if (typeof v !== "object" && typeof v !== "function") return `a ${typeof v}`;
  const name = (v as { constructor?: { name?: unknown } }).constructor?.name;
  return typeof name === "string" && name ? `a ${name}` : "an object";
}

const bad = (what: string) =>
  new ProtocolError(
    `Malformed call target from the wire: ${what}. Check that every worker runs the same tprpc version.`,
  );

function checkName(v: unknown, what: string): string {
  if (typeof v !== "string" || v.length > MAX_NAME_CHARS)
    throw bad(`${what} is not a string of at most ${MAX_NAME_CHARS} characters`);
  return v;
}

function checkDep(name: string, d: unknown): DepRecord {
  if (typeof d !== "object" || d === null) throw bad(`dependency ${JSON.stringify(name)} is not an object`);
  const r = d as Record<string, unknown>;
  switch (r.kind) {
    case "source":
      if (typeof r.source !== "string" || r.source.length > MAX_SOURCE_CHARS)
        throw bad(`dependency ${name}: bad source`);
      return { kind: "source", source: r.source };
    case "value": {
      const copy = toPlainData(r.value);
      if (!copy.ok) throw bad(`dependency ${name}: value ${copy.reason}`);
      return { kind: "value", value: copy.value };
    }
    case "builtin":
    case "registered":
      return { kind: r.kind, name: checkName(r.name, `dependency ${name}'s name`) };
    default:
      throw bad(`dependency ${JSON.stringify(name)} has an unknown kind`);
  }
}

/** Checks and copies a record that came off the wire. Throws `ProtocolError` on anything unexpected. */
export function parseTargetRecord(raw: unknown): TargetRecord {
  if (typeof raw !== "object" || raw === null) throw bad("not an object");
  const r = raw as Record<string, unknown>;
  switch (r.kind) {
    case "builtin":
    case "registered":
    case "global":
      return { kind: r.kind, name: checkName(r.name, "name") };
    case "module":
      return { kind: "module", ref: checkName(r.ref, "ref") };
    case "source": {
      if (typeof r.hash !== "string" || !/^[0-9a-f]{64}$/.test(r.hash)) throw bad("hash is not 64 hex digits");
      if (r.source === undefined && r.deps === undefined) return { kind: "source", hash: r.hash };
      if (typeof r.source !== "string" || r.source.length > MAX_SOURCE_CHARS) throw bad("bad source");
      if (typeof r.deps !== "object" || r.deps === null || Array.isArray(r.deps)) throw bad("deps is not an object");
      const names = Object.keys(r.deps);
      if (names.length > MAX_DEPS) throw bad(`more than ${MAX_DEPS} dependencies`);
      const deps: Record<string, DepRecord> = Object.create(null);
      for (const name of names) {
        if (!isBindableName(name) || SCOPE_NAMES.has(name))
          throw bad(`dependency name ${JSON.stringify(name)} is not an identifier`);
        deps[name] = checkDep(name, (r.deps as Record<string, unknown>)[name]);
      }
      return { kind: "source", hash: r.hash, source: r.source, deps };
    }
    default:
      throw bad("unknown kind");
  }
}

/** Whether a source record carries its code (not just the hash). */
export function hasCode(r: SourceRecord | SourceRefRecord): r is SourceRecord {
  return typeof (r as SourceRecord).source === "string";
}
