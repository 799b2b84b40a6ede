/**
 * Activations the SDK's own modules make and drop during a forward, recycled as soon as backward is
 * done with them instead of waiting for V8 to collect them (each one counts towards the next major
 * GC; a GPT block makes about 6 MB of them per micro-batch).
 *
 * Who can still read such a tensor is provable only where it was made: a module's forward that
 * created it with ops, gave it to nothing but ops and its own stock submodules, and did not return
 * it. Besides that forward, only the graph can hold it: the backward closures of the nodes recorded
 * while it existed, which is while the forward ran. So:
 *
 * - openScope() at the start of such a forward; every FunctionNode made while the scope is open
 *   counts in it (and in the scopes around it);
 * - closeScope(scope, result, dropped) at its end names the dropped tensors. Only storages made
 *   inside the scope count (never an input's, a parameter's or anything from before), never the
 *   result's, and only whole pooled buffers (Storage.release);
 * - when the scope is closed and every node counted in it has been released (it ran its backward
 *   without retainGraph, or its graph was released), no one can read the dropped storages any more,
 *   and their buffers go back to the output pool (sdk/tensor/pool.ts). A graph that never runs its
 *   backward keeps them until GC, as before. In grad-free mode (no nodes) they go back at close;
 * - a dropped storage that a backward hands on as a gradient (the engine checks each node's
 *   outputs) is no longer dropped: gradients reach hooks, .grad and user code.
 *
 * A released storage throws on any later read (Storage.data), so a mistake here shows as an error,
 * not as silently shared memory. The modules that use this check that their submodules are the
 * SDK's own classes with their own forward (a user's replacement could keep what it is given).
 */
import type { Storage } from "../tensor/storage.js";
import { nextStorageSerial } from "../tensor/storage.js";
import type { Tensor } from "../tensor/tensor.js";

export class Scope {
  /** Nodes made while this scope was open and not released yet. */
  live = 0;
  closed = false;
  dropped: Storage[] = [];
  constructor(
    readonly parent: Scope | null,
    /** Storages with a serial below this were made before the scope opened. */
    readonly since: number,
  ) {}
}

let open: Scope | null = null;

/** Opens a scope inside the current one; pair it with closeScope (in a finally, for errors). */
export function openScope(): Scope {
  open = new Scope(open, nextStorageSerial());
  return open;
}

/** For a node being made: counts it in every open scope and returns the innermost (null: none open). */
export function enterNode(): Scope | null {
  for (let s = open; s !== null; s = s.parent) s.live++;
  return open;
}

/** A node counted by enterNode was released: it will never read what it captured again. */
export function leaveNode(scope: Scope | null): void {
  for (let s = scope; s !== null; s = s.parent) if (--s.live === 0 && s.closed) recycle(s);
}

/**
 * Closes `scope` (the innermost open one). `dropped`: tensors the forward made and no longer holds,
 * returned to no one (null when nothing may be dropped, e.g. after an error or with a user's
 * submodule). `result` is what the forward returns: its storage is never dropped.
 */
export function closeScope(scope: Scope, result: Tensor | null, dropped: readonly Tensor[] | null): void {
  if (open !== scope) throw new Error("internal error: autograd intermediates scopes closed out of order");
  open = scope.parent;
  scope.closed = true;
  if (dropped)
    for (const t of dropped) {
      const s = t.storage;
      if (s.serial < scope.since || s === result?.storage || !s.poolable || s.dropScope !== null) continue;
      s.dropScope = scope;
      scope.dropped.push(s);
    }
  if (scope.live === 0) recycle(scope);
}

/** The engine: `t` goes on as a gradient, so its storage is no longer dropped. */
export function keep(t: Tensor): void {
  t.storage.dropScope = null;
}

function recycle(scope: Scope): void {
  for (const s of scope.dropped)
    if (s.dropScope === scope) {
      s.dropScope = null;
      s.release();
    }
  scope.dropped = [];
}
