/**
 * Distributed autograd contexts: one per forward/backward pass, known by an id
 * that is unique across the group (the worker's id in the high bits, a counter
 * in the low 32), and present on every worker the pass touched.
 *
 * A context holds what the pass recorded on this worker: its send nodes by
 * autograd message id (the peer's gradients arrive for them), the workers it
 * exchanged messages with (cleanup reaches them), and the gradients of this
 * worker's leaves (getGradients), which never go into `.grad`.
 *
 * Which context is current: Node's AsyncLocalStorage carries it across awaits
 * (`distAutograd.context(async (ctxId) => …)`, and the callee runs a request's
 * target inside the caller's context); when no async context says anything,
 * the "ambient" context made by `newContext()` applies, so a notebook can open
 * one in a cell and use it in the next.
 */
import { AsyncLocalStorage } from "node:async_hooks";
import { AutogradError } from "../errors/index.js";
import * as raw from "../tensor/raw.js";
import type { Tensor } from "../tensor/tensor.js";
import { debug } from "../util/index.js";
import { currentAgent, getWorkerInfo, onWorkerLeave } from "../rpc/api.js";
import type { SendNode } from "./functions.js";

/** Ids: worker id × 2^32 + a per-worker counter (safe integers while worker ids stay below 2^21). */
const ID_SHIFT = 2 ** 32;

export class DistAutogradContext {
  /** This worker's leaf gradients, summed over the backward passes run in this context. */
  readonly grads = new Map<Tensor, Tensor>();
  /** Send nodes recorded here, by the autograd message id their peer's recv nodes carry. */
  readonly sends = new Map<number, SendNode>();
  /** Workers this context exchanged messages with (cleanup is sent to them). */
  readonly knownWorkers = new Set<string>();
  /** True while this worker runs a distributed backward pass it started in this context. */
  backwardRunning = false;

  constructor(readonly id: number) {}

  /** The engine's accumulate callback: a fresh tensor, never aliasing the graph's. */
  accumulate(leaf: Tensor, grad: Tensor): void {
    const prev = this.grads.get(leaf);
    this.grads.set(leaf, prev ? raw.binary("add", prev, grad) : raw.copyAs(grad));
  }
}

const contexts = new Map<number, DistAutogradContext>();
let counter = 0;
let msgCounter = 0;

/** null: explicitly no context (inside internal RPCs); undefined (no store): fall back to the ambient one. */
const als = new AsyncLocalStorage<number | null>();
let ambient: number | null = null;

/** The agents whose membership we watch (one subscription per initRpc). */
const watched = new WeakSet<object>();

/**
 * A worker that leaves (or dies) can no longer run or release the contexts it
 * started: drop our share of them, so a dead initiator leaves no context here.
 */
function watchLeaves(): void {
  const agent = currentAgent();
  if (!agent || watched.has(agent)) return;
  watched.add(agent);
  onWorkerLeave((w) => {
    for (const id of [...contexts.keys()])
      if (Math.floor(id / ID_SHIFT) === w.id) {
        debug(1, "dist_autograd", `worker "${w.name}" left: dropping its context ${id}`);
        dropContext(id);
      }
  });
}

function workerBits(): number {
  const id = getWorkerInfo().id;
  if (!Number.isInteger(id) || id < 0 || id >= 2 ** 21)
    throw new AutogradError(`distributed autograd needs worker ids in [0, 2^21); this worker's id is ${id}`);
  return id * ID_SHIFT;
}

/** A new context on this worker, with a group-unique id. */
export function createContext(): DistAutogradContext {
  const ctx = new DistAutogradContext(workerBits() + ++counter);
  contexts.set(ctx.id, ctx);
  debug(3, "dist_autograd", `created context ${ctx.id}`);
  return ctx;
}

/** A group-unique autograd message id (pairs a send node with its recv nodes). */
export function newMessageId(): number {
  return workerBits() + ++msgCounter;
}

/**
 * Ids released here lately (bounded): a message of a released context that
 * arrives late (a reply still in flight, an un-awaited rpcAsync) must not
 * bring the context back, where nobody would release it again.
 */
const released = new Set<number>();
const RELEASED_KEPT = 4096;

/** The context with this id, created when a message of a peer's context arrives first; undefined once released here. */
export function getOrCreateContext(id: number): DistAutogradContext | undefined {
  let ctx = contexts.get(id);
  if (!ctx && released.has(id)) return undefined;
  if (!ctx) {
    watchLeaves();
    ctx = new DistAutogradContext(id);
    contexts.set(id, ctx);
    debug(3, "dist_autograd", `joined context ${id}`);
  }
  return ctx;
}

export function findContext(id: number): DistAutogradContext | undefined {
  return contexts.get(id);
}

/** The context, or an AutogradError that says what happened to it. */
export function retrieveContext(id: number): DistAutogradContext {
  if (typeof id !== "number" || !Number.isSafeInteger(id))
    throw new AutogradError(`a distributed autograd context id is an integer, got ${String(id)}`);
  const ctx = contexts.get(id);
  if (!ctx)
    throw new AutogradError(
      `Could not find autograd context with id ${id} on this worker: it was released (its distAutograd.context() ` +
        "callback returned, or ctx.release() was called) or never involved this worker",
    );
  return ctx;
}

/** Removes the context here; returns it (or undefined when it was not here). */
export function dropContext(id: number): DistAutogradContext | undefined {
  const ctx = contexts.get(id);
  contexts.delete(id);
  released.add(id);
  if (released.size > RELEASED_KEPT) released.delete(released.values().next().value!);
  if (ambient === id) ambient = null;
  if (ctx) debug(3, "dist_autograd", `released context ${id}`);
  return ctx;
}

/** The id of the current context, or null. */
export function currentContextId(): number | null {
  const s = als.getStore();
  return s === undefined ? ambient : s;
}

/** Runs fn with `id` as the current context (null: none), across its awaits. */
export function runInContext<T>(id: number | null, fn: () => T): T {
  return als.run(id, fn);
}

/** Makes `id` the current context wherever no async context says otherwise (notebook cells). */
export function setAmbient(id: number | null): void {
  if (ambient !== null && id !== null && ambient !== id)
    debug(1, "dist_autograd", `context ${ambient} stays open but is no longer current (newContext made ${id})`);
  ambient = id;
}

/** How many contexts live on this worker. */
export function contextCount(): number {
  return contexts.size;
}
