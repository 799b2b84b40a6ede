/**
 * Typed errors of code shipping. Each one names what could not be shipped or
 * resolved and says what to do instead; the agent carries a callee's error
 * back to the caller inside a `RemoteError`.
 */
import { RpcError } from "../../errors/index.js";

/** What every "how to pass it" message ends with. */
export function howToPass(identifier: string): string {
  return (
    `pass it as an argument, or register it with rpc.register(${JSON.stringify(identifier)}, value) ` +
    `on every worker, or define it inside the function`
  );
}

/**
 * Shipped code uses a name that the callee cannot resolve: a closure variable of
 * the caller, a module-local import, or a name that exists only on the caller.
 */
export class UnresolvedNameError extends RpcError {
  constructor(
    /** The identifier that could not be resolved. */
    readonly identifier: string,
    /** The shipped function or class it appears in ("<anonymous>" when unnamed). */
    readonly targetName: string,
    /** Where it was found: on the caller (before sending) or on the callee. */
    readonly side: "caller" | "callee",
  ) {
    super(
      `${JSON.stringify(targetName)} uses ${JSON.stringify(identifier)}, which ` +
        (side === "caller"
          ? `is neither a top-level notebook name, an SDK export, a registered name nor a global ` +
            `(a closure variable or a module-local import cannot be shipped)`
          : `this worker cannot resolve`) +
        `: ${howToPass(identifier)}.`,
    );
  }
}

/** A dependency of shipped code that is neither a function, a class nor plain data. */
export class UnshippableValueError extends RpcError {
  constructor(
    readonly identifier: string,
    readonly targetName: string,
    reason: string,
  ) {
    super(
      identifier === targetName
        ? `${JSON.stringify(identifier)} cannot be shipped by source, ${reason}: register it with ` +
            `rpc.register(name, value) on every worker and call it by name, or use a "module.js#export" reference.`
        : `${JSON.stringify(targetName)} uses ${JSON.stringify(identifier)}, ${reason}: ${howToPass(identifier)}.`,
    );
  }
}

/** A call target that is not known on this worker (a registered name, builtin or module export). */
export class UnknownTargetError extends RpcError {}

/**
 * The caller sent only a hash, and this worker has no code for it (it restarted or
 * evicted the entry). The caller forgets what this peer holds and resends the full record.
 */
export class ShippedCodeMissingError extends RpcError {
  constructor(readonly hash: string) {
    super(`Shipped code ${hash.slice(0, 12)}… is not cached on this worker: resend the full record.`);
  }
}
