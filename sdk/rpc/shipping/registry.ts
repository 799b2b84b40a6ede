/**
 * The registry behind `rpc.register(name, value)`: functions and classes callable
 * by name, and values that shipped code may use by name. A name maps to one value
 * and a value to one name; a worker resolves registered names against its own
 * registry, so register the same names on every worker.
 */
import { RpcError } from "../../errors/index.js";
import { check } from "../../util/index.js";

export class Registry {
  private readonly byName = new Map<string, unknown>();
  private readonly byValue = new Map<unknown, string>();

  /**
   * Registers `value` as `name`. Throws when the name is taken by another value or the
   * value already has another name, unless `replace` is set (re-running a notebook cell).
   *
   * ```ts
   * rpc.register("myAdd", (a, b) => a.add(b));      // on every worker
   * await rpc.rpcSync("worker1", "myAdd", [x, y]);  // called by name
   * ```
   */
  register(name: string, value: unknown, options: { replace?: boolean } = {}): void {
    check(
      typeof name === "string" && name.length > 0 && name.length <= 256,
      RpcError,
      () => `rpc.register: the name must be a non-empty string of at most 256 characters, got ${JSON.stringify(name)}.`,
    );
    check(value !== undefined, RpcError, () => `rpc.register(${JSON.stringify(name)}, value): the value is undefined.`);
    const old = this.byName.get(name);
    if (this.byName.has(name) && old === value) return;
    const oldName = isReferenceable(value) ? this.byValue.get(value) : undefined;
    if (!options.replace) {
      check(
        !this.byName.has(name),
        RpcError,
        () =>
          `rpc.register: ${JSON.stringify(name)} is already registered to another value: ` +
          `call rpc.unregister(${JSON.stringify(name)}) first, or pass { replace: true }.`,
      );
      check(
        oldName === undefined,
        RpcError,
        () =>
          `rpc.register: this value is already registered as ${JSON.stringify(oldName)}: ` +
          `a value has one name; unregister it first, or pass { replace: true }.`,
      );
    }
    if (this.byName.has(name)) this.unregister(name);
    if (oldName !== undefined) this.unregister(oldName);
    this.byName.set(name, value);
    if (isReferenceable(value)) this.byValue.set(value, name);
  }

  /** Removes `name`; returns whether it was registered. */
  unregister(name: string): boolean {
    if (!this.byName.has(name)) return false;
    const value = this.byName.get(name);
    this.byName.delete(name);
    if (this.byValue.get(value) === name) this.byValue.delete(value);
    return true;
  }

  has(name: string): boolean {
    return this.byName.has(name);
  }

  /** The value registered as `name`; throws an `RpcError` saying what to do when there is none. */
  lookup(name: string): unknown {
    check(
      this.byName.has(name),
      RpcError,
      () =>
        `Nothing is registered as ${JSON.stringify(name)} on this worker: call ` +
        `rpc.register(${JSON.stringify(name)}, fnOrClass) on every worker before calling it by name.`,
    );
    return this.byName.get(name);
  }

  /** The name `value` is registered under, if any. */
  nameOf(value: unknown): string | undefined {
    return isReferenceable(value) ? this.byValue.get(value) : undefined;
  }

  names(): string[] {
    return [...this.byName.keys()];
  }

  clear(): void {
    this.byName.clear();
    this.byValue.clear();
  }
}

function isReferenceable(value: unknown): boolean {
  return (typeof value === "object" && value !== null) || typeof value === "function";
}
