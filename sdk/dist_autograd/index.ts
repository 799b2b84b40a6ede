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
import { backward, getGradients, releaseContext } from "./backward.js";
import { contextCount, createContext, currentContextId, runInContext, setAmbient } from "./context.js";
import { installHook } from "./hook.js";
// NB: installs RRef.backward
import "./rref_backward.js";

export { backward, getGradients, contextCount };

installHook();

/**
 * Runs `fn` inside a new distributed autograd context (current across its
 * awaits, and on the workers its RPCs reach); releases the context on every
 * worker involved when fn settles, and resolves to fn's value after that.
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
    await releaseContext(ctx.id);
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
