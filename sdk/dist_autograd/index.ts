/**
 * Distributed autograd (`distAutograd` in "tprpc"), torch.distributed.autograd's
 * counterpart:
 *
 *   await distAutograd.context(async (ctxId) => {
 *     const loss = (await rpc.rpcSync("worker1", forward, [x])).sum();
 *     await distAutograd.backward(ctxId, [loss]);
 *     const grads = distAutograd.getGradients(ctxId);   // Map<Tensor, Tensor> of this worker's leaves
 *   });
 *
 *   // across notebook cells:
 *   const ctx = distAutograd.newContext();   // current until released
 *   …; await distAutograd.backward(ctx.id, [loss]); …
 *   await ctx.release();
 *
 * Importing this module installs the RPC message hook that records send/recv
 * nodes (./hook.ts); the backward pass is in ./backward.ts.
 */
import { AutogradError } from "../errors/index.js";
import { debug } from "../util/index.js";
import { backward, getGradients, releaseContext } from "./backward.js";
import { contextCount, createContext, currentContextId, runInContext, setAmbient } from "./context.js";
import { installHook } from "./hook.js";
// NB: installs RRef.backward
import "./rref_backward.js";

export { backward, getGradients, contextCount };

installHook();

/**
 * Runs `fn` inside a new distributed autograd context (current across its
 * awaits, and on the workers its RPCs reach); when fn settles, releases the
 * context here and resolves to fn's value. The release messages to the other
 * workers involved leave then and are not awaited, as PyTorch's `with
 * dist_autograd.context()` sends them: a training loop's next step does not
 * wait a round trip for them (a failed release is logged at TPRPC_DEBUG=2).
 * `newContext().release()` awaits the whole tree.
 */
export async function context<T>(fn: (ctxId: number) => T | Promise<T>): Promise<T> {
  const outer = currentContextId();
  if (outer !== null)
    throw new AutogradError(
      `already inside distributed autograd context ${outer}; contexts do not nest (use that ctxId, or release it first)`,
    );
  const ctx = createContext();
  try {
    return await runInContext(ctx.id, () => fn(ctx.id));
  } finally {
    // NB: drops the context here at once (before its first await); only the peers' answers are not awaited
    releaseContext(ctx.id).catch((e: unknown) =>
      debug(
        2,
        "dist_autograd",
        `releasing context ${ctx.id} on its peers failed: ${e instanceof Error ? e.message : String(e)}`,
      ),
    );
  }
}

/** A context opened by newContext(): its id, and release() (idempotent). */
export interface DistAutogradContextHandle {
  readonly id: number;
  release(): Promise<void>;
}

/**
 * Opens a context that stays current (wherever no `context()` callback says
 * otherwise) until `release()`: the form for notebooks, where one cell's
 * awaits do not carry into the next. NB: code serving an RPC runs in its
 * caller's context (or explicitly in none), so there use `context()`.
 */
export function newContext(): DistAutogradContextHandle {
  const ctx = createContext();
  setAmbient(ctx.id);
  return { id: ctx.id, release: () => releaseContext(ctx.id) };
}

/** The current context's id, or null outside any (torch's _current_context()._context_id()). */
export function currentContext(): number | null {
  return currentContextId();
}
