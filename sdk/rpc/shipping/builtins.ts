/**
 * SDK builtins by name. `BuiltinIndex.of(sdk)` walks the SDK namespace (and its
 * nested namespaces: `nn`, `nn.functional`, `optim`, ...) once and maps every
 * exported function, class and namespace to its dotted path ("add", "nn.Linear");
 * the caller sends that path and the callee resolves it on its own SDK.
 */
import { UnknownTargetError } from "./errors.js";

const FORBIDDEN = new Set(["__proto__", "prototype", "constructor"]);
const indexes = new WeakMap<object, BuiltinIndex>();

export class BuiltinIndex {
  private readonly names = new Map<unknown, string>();
  /** Top-level export names (those shipped code sees as bare identifiers). */
  readonly topLevelNames: ReadonlySet<string>;

  private constructor(readonly sdk: Readonly<Record<string, unknown>>) {
    this.topLevelNames = new Set(Object.keys(sdk));
    this.names.set(sdk, "");
    // NB: breadth first, so a value exported at several paths gets its shortest one.
    const queue: [Record<string, unknown>, string][] = [[sdk, ""]];
    while (queue.length > 0) {
      const [ns, prefix] = queue.shift()!;
      for (const key of Object.keys(ns).sort()) {
        if (FORBIDDEN.has(key)) continue;
        const value = ns[key];
        const path = prefix ? `${prefix}.${key}` : key;
        if (typeof value === "function") {
          if (!this.names.has(value)) this.names.set(value, path);
        } else if (isNamespace(value) && !this.names.has(value)) {
          this.names.set(value, path);
          queue.push([value, path]);
        }
      }
    }
  }

  /** The (cached) index of an SDK namespace object. */
  static of(sdk: Readonly<Record<string, unknown>>): BuiltinIndex {
    let index = indexes.get(sdk);
    if (!index) indexes.set(sdk, (index = new BuiltinIndex(sdk)));
    return index;
  }

  /** The dotted path of an SDK function, class or namespace ("" for the SDK itself). */
  nameOf(value: unknown): string | undefined {
    return this.names.get(value);
  }

  has(path: string): boolean {
    return this.tryResolve(path) !== undefined;
  }

  /** The value at a dotted path on this worker's SDK. */
  resolve(path: string): unknown {
    const value = this.tryResolve(path);
    if (value === undefined)
      throw new UnknownTargetError(
        `The SDK builtin ${JSON.stringify(path)} does not exist on this worker: ` +
          `run the same tprpc version on every worker.`,
      );
    return value;
  }

  private tryResolve(path: string): unknown {
    if (path === "") return this.sdk;
    let value: unknown = this.sdk;
    for (const key of path.split(".")) {
      if (FORBIDDEN.has(key) || value === null || (typeof value !== "object" && typeof value !== "function"))
        return undefined;
      if (!Object.prototype.hasOwnProperty.call(value, key)) return undefined;
      value = (value as Record<string, unknown>)[key];
    }
    return value;
  }
}

/** A module namespace object or a plain object of exports. */
function isNamespace(value: unknown): value is Record<string, unknown> {
  if (typeof value !== "object" || value === null || Array.isArray(value)) return false;
  const proto = Object.getPrototypeOf(value);
  return (
    proto === null ||
    proto === Object.prototype ||
    (value as { [Symbol.toStringTag]?: unknown })[Symbol.toStringTag] === "Module"
  );
}
