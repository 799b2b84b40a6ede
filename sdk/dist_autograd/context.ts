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
 *
 * Contexts belong to an agent, not to the process: each agent (several live in
 * one process in the in-process test groups) has its own contexts, counters
 * and ambient context, looked up by the agent a message belongs to, or else by
 * the current agent (the one serving the call, else initRpc's).
 */
import { AsyncLocalStorage } from "node:async_hooks";
import { AutogradError } from "../errors/index.js";
import { getBackend } from "../tensor/backend/registry.js";
import * as raw from "../tensor/raw.js";
import type { Tensor } from "../tensor/tensor.js";
import { arraysEqual, debug } from "../util/index.js";
import { currentAgent, getWorkerInfo } from "../rpc/api.js";
import type { Agent } from "../rpc/agent.js";
import { addStateSection } from "../rpc/state_dump.js";
import type { SendNode } from "./functions.js";

/** Ids: worker id × 2^32 + a per-worker counter (safe integers while worker ids stay below 2^21). */
const ID_SHIFT = 2 ** 32;

export class DistAutogradContext {
  readonly #grads = new Map<Tensor, Tensor>();
  /** Whether anyone outside accumulate() has seen #grads (its tensors may be held there). */
  #exposed = false;

  /**
   * This worker's leaf gradients, summed over the backward passes run in this context. Once read
   * here, later contributions add out of place (a reader may hold the tensors); before, in place.
   */
  get grads(): Map<Tensor, Tensor> {
    this.#exposed = true;
    return this.#grads;
  }
  /** Send nodes recorded here, by the autograd message id their peer's recv nodes carry. */
  readonly sends = new Map<number, SendNode>();
  /** Workers this context exchanged messages with (cleanup is sent to them). */
  readonly knownWorkers = new Set<string>();
  /** True while this worker runs a distributed backward pass it started in this context. */
  backwardRunning = false;
  /**
   * Whether a peer's backward pass without retainGraph ran here (so this worker's part of the graph is
   * released with the context), and whether one with retainGraph did (then it is left to GC).
   */
  ranBackward = false;
  retainedGraph = false;

  constructor(readonly id: number) {}

  /**
   * The engine's accumulate callback (runBackward's accumulateCopies contract): keeps `grad` itself
   * only when `owned` (the engine alone held it); else copies it, or adds it into the sum so far (in
   * place while no one has read the sums, so only this context holds them).
   */
  accumulate(leaf: Tensor, grad: Tensor, owned = false): void {
    const prev = this.#grads.get(leaf);
    if (!prev) {
      this.#grads.set(leaf, owned ? grad : raw.copyAs(grad));
      return;
    }
    if (
      !this.#exposed &&
      prev.dtype === grad.dtype &&
      prev.base === null &&
      prev.isContiguous() &&
      prev.storage.length === prev.numel() &&
      arraysEqual(prev.shape, grad.shape)
    ) {
      getBackend().binary("add", prev, grad, prev);
      prev.storage.version++;
      return;
    }
    this.#grads.set(leaf, raw.binary("add", prev, grad));
  }
}

/** null: explicitly no context (inside internal RPCs); undefined (no store): fall back to the ambient one. */
const als = new AsyncLocalStorage<number | null>();

/**
 * Ids released here lately (bounded): a message of a released context that
 * arrives late (a reply still in flight, an un-awaited rpcAsync) must not
 * bring the context back, where nobody would release it again.
 */
const RELEASED_KEPT = 4096;

/** One agent's distributed autograd state. */
class AgentContexts {
  readonly contexts = new Map<number, DistAutogradContext>();
  readonly released = new Set<number>();
  counter = 0;
  msgCounter = 0;
  ambient: number | null = null;

  constructor(readonly agent: Agent | null) {
    // NB: a worker that leaves (or dies) can no longer run or release the contexts it started:
    // drop our share of them, so a dead initiator leaves no context here
    agent?.membership.onLeave((w) => {
      for (const id of [...this.contexts.keys()])
        if (Math.floor(id / ID_SHIFT) === w.id) {
          debug(1, "dist_autograd", `worker "${w.name}" left: dropping its context ${id}`);
          this.drop(id);
        }
    });
  }

  workerBits(): number {
    // NB: without an agent, getWorkerInfo() raises RpcNotInitializedError
    const id = this.agent ? this.agent.workerInfo().id : getWorkerInfo().id;
    if (!Number.isInteger(id) || id < 0 || id >= 2 ** 21)
      throw new AutogradError(`distributed autograd needs worker ids in [0, 2^21); this worker's id is ${id}`);
    return id * ID_SHIFT;
  }

  drop(id: number): DistAutogradContext | undefined {
    const ctx = this.contexts.get(id);
    this.contexts.delete(id);
    this.released.add(id);
    if (this.released.size > RELEASED_KEPT) this.released.delete(this.released.values().next().value!);
    if (this.ambient === id) this.ambient = null;
    if (ctx) debug(3, "dist_autograd", `released context ${id}`);
    return ctx;
  }
}

const perAgent = new WeakMap<Agent, AgentContexts>();
/** Before initRpc (and after shutdown): no contexts; making one raises RpcNotInitializedError. */
const noAgent = new AgentContexts(null);

/** The state of `agent` (default: the current agent). */
function stateOf(agent: Agent | null = currentAgent()): AgentContexts {
  if (!agent) return noAgent;
  let s = perAgent.get(agent);
  if (!s) perAgent.set(agent, (s = new AgentContexts(agent)));
  return s;
}

// NB: in the SIGUSR2 state dump (sdk/rpc/state_dump.ts): the contexts an agent holds, and which run a backward
addStateSection("dist autograd", (agent) => {
  const s = perAgent.get(agent);
  if (!s || s.contexts.size === 0) return [];
  return [...s.contexts.values()].map(
    (c) =>
      `context ${c.id}${c.backwardRunning ? " (its backward is running)" : ""}: ${c.sends.size} send node(s), ` +
      `peers ${[...c.knownWorkers].join(", ") || "none"}`,
  );
});

/** A new context on this worker, with a group-unique id. */
export function createContext(): DistAutogradContext {
  const s = stateOf();
  const ctx = new DistAutogradContext(s.workerBits() + ++s.counter);
  s.contexts.set(ctx.id, ctx);
  debug(3, "dist_autograd", `created context ${ctx.id}`);
  return ctx;
}

/** A group-unique autograd message id (pairs a send node with its recv nodes). */
export function newMessageId(agent?: Agent): number {
  const s = stateOf(agent);
  return s.workerBits() + ++s.msgCounter;
}

/** The context with this id, created when a message of a peer's context arrives first; undefined once released here. */
export function getOrCreateContext(id: number, agent?: Agent): DistAutogradContext | undefined {
  const s = stateOf(agent);
  let ctx = s.contexts.get(id);
  if (!ctx && s.released.has(id)) return undefined;
  if (!ctx) {
    ctx = new DistAutogradContext(id);
    s.contexts.set(id, ctx);
    debug(3, "dist_autograd", `joined context ${id}`);
  }
  return ctx;
}

export function findContext(id: number, agent?: Agent): DistAutogradContext | undefined {
  return stateOf(agent).contexts.get(id);
}

/** The context, or an AutogradError that says what happened to it. */
export function retrieveContext(id: number): DistAutogradContext {
  if (typeof id !== "number" || !Number.isSafeInteger(id))
    throw new AutogradError(`a distributed autograd context id is an integer, got ${String(id)}`);
  const ctx = stateOf().contexts.get(id);
  if (!ctx)
    throw new AutogradError(
      `Could not find autograd context with id ${id} on this worker: it was released (its distAutograd.context() ` +
        "callback returned, or ctx.release() was called) or never involved this worker",
    );
  return ctx;
}

/** Removes the context here; returns it (or undefined when it was not here). */
export function dropContext(id: number): DistAutogradContext | undefined {
  return stateOf().drop(id);
}

/** The id of the current context, or null. */
export function currentContextId(agent?: Agent): number | null {
  const s = als.getStore();
  return s === undefined ? stateOf(agent).ambient : s;
}

/** Runs fn with `id` as the current context (null: none), across its awaits. */
export function runInContext<T>(id: number | null, fn: () => T): T {
  return als.run(id, fn);
}

/** Makes `id` the current context wherever no async context says otherwise (notebook cells). */
export function setAmbient(id: number | null): void {
  const s = stateOf();
  if (s.ambient !== null && id !== null && s.ambient !== id)
    debug(1, "dist_autograd", `context ${s.ambient} stays open but is no longer current (newContext made ${id})`);
  s.ambient = id;
}

/** How many contexts live on this worker. */
export function contextCount(): number {
  return stateOf().contexts.size;
}
