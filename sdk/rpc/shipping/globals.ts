/**
 * JavaScript's own functions as call targets: `rpc.rpcSync("worker1", Math.min, [3, 1])`.
 *
 * Built-ins have no source to ship (`Math.min.toString()` is "function min() { [native code] }"),
 * so they travel by their global path ("Math.min"), as PyTorch pickles a builtin by its qualified
 * name. Only the standard library's namespaces are indexed (Math, JSON, Number, String, Object,
 * Array, Reflect, Date, BigInt, Atomics, and global functions such as parseInt): Node's
 * host objects (process, require, Buffer) are not targets. The callee resolves a path through the
 * same index, so a path off the wire can name nothing else.
 */
const NAMESPACES = ["Math", "JSON", "Number", "String", "Object", "Array", "Reflect", "Date", "BigInt", "Atomics"];
const FUNCTIONS = [
  "parseInt",
  "parseFloat",
  "isNaN",
  "isFinite",
  "encodeURIComponent",
  "decodeURIComponent",
  "encodeURI",
  "decodeURI",
  "Number",
  "String",
  "Boolean",
  "BigInt",
];

let byFunction: Map<Function, string> | null = null;
let byPath: Map<string, Function> | null = null;

function build(): void {
  byFunction = new Map();
  byPath = new Map();
  const add = (path: string, v: unknown) => {
    if (typeof v !== "function" || byFunction!.has(v)) return;
    byFunction!.set(v, path);
    byPath!.set(path, v);
  };
  const g = globalThis as Record<string, unknown>;
  for (const name of FUNCTIONS) add(name, g[name]);
  for (const ns of NAMESPACES) {
    const obj = g[ns] as Record<string, unknown> | undefined;
    if (!obj) continue;
    for (const key of Object.getOwnPropertyNames(obj)) {
      if (key === "prototype" || key === "constructor") continue;
      const d = Object.getOwnPropertyDescriptor(obj, key);
      if (d && "value" in d) add(`${ns}.${key}`, d.value);
    }
  }
}

/** The global path of a standard built-in function ("Math.min"), or undefined. */
export function globalPathOf(fn: Function): string | undefined {
  if (!byFunction) build();
  return byFunction!.get(fn);
}

/** The built-in at a path that globalPathOf gives, or undefined for any other path. */
export function globalAt(path: string): Function | undefined {
  if (!byPath) build();
  return byPath!.get(path);
}
