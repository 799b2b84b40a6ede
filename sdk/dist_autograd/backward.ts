/**
 * The distributed backward pass (PyTorch's FAST mode) and context cleanup.
 *
 * backward(ctxId, roots), on the worker that calls it:
 * 1. Run the local engine from the roots (gradient 1 each); leaf gradients go
 *    to the context, never to `.grad`. Every RecvNode reached hands its
 *    gradient to the run, which groups them per autograd message.
 * 2. After the (synchronous) run, send each message's gradients to the worker
 *    that sent the message (internal RPC `__tprpcDistAutogradPropagate`).
 * 3. That worker runs its engine from the message's SendNode fed with those
 *    gradients, and so on recursively (step 1-2 there); it replies once its
 *    run and every propagation that run caused have completed. So the reply
 *    to each propagation covers all the work it caused, everywhere.
 * 4. backward resolves when every propagation it sent has replied; any error
 *    (a dead worker: WorkerUnavailableError, forwarded as such) rejects it.
 *
 * NB: each propagation is its own engine run with its own dependency count,
 * so a node that several messages' gradients reach runs once per message
 * with that message's part (sums are linear, so the result is the same as one
 * run with the total). PyTorch counts dependencies once over all of a worker's
 * send functions instead, which stalls the nodes behind a send function whose
 * recv never gets a gradient. Runs therefore keep their graph (retainGraph); the
 * caller's local graph is released at the end when retainGraph is false, the
 * other workers' parts when the context is released.
 *
 * Cleanup (releaseContext): drop the context here (and, after a backward pass without retainGraph,
 * release this worker's part of the graph: every node reachable from the context's send nodes), then
 * tell every worker it
 * exchanged messages with (`__tprpcDistAutogradCleanup`), which does the same
 * for its own peers; a worker that no longer has the context stops there.
 * Unreachable workers are skipped. The returned promise settles once the
 * whole tree has answered (bounded by CLEANUP_TIMEOUT_MS per hop).
 */
import { AutogradError, RemoteError, WorkerUnavailableError } from "../errors/index.js";
import { type RootGrad, runBackward } from "../autograd/engine.js";
import { type Node, gradEdge } from "../autograd/node.js";
import { register, rpcSync } from "../rpc/api.js";
import { withRoute } from "../rpc/device_map_hook.js";
import * as raw from "../tensor/raw.js";
import { Tensor } from "../tensor/tensor.js";
import { debug } from "../util/index.js";
import { type DistAutogradContext, dropContext, findContext, retrieveContext, runInContext } from "./context.js";
import { LocalRun, withLocalRun } from "./functions.js";
import { selfName } from "./hook.js";

export const PROPAGATE = "__tprpcDistAutogradPropagate";
export const CLEANUP = "__tprpcDistAutogradCleanup";
const CLEANUP_TIMEOUT_MS = 5_000;

/** The worker a forwarded WorkerUnavailableError's message names as gone (the agent's wording), else `fallback`. */
function deadWorker(message: string, fallback: string): string {
  return /worker "([^"]+)" (?:is unavailable|left the group)/.exec(message)?.[1] ?? fallback;
}

/** A forwarded WorkerUnavailableError stays one (typed) on the caller. */
function unwrap(e: unknown): unknown {
  if (e instanceof RemoteError && e.remoteName === "WorkerUnavailableError")
    return new WorkerUnavailableError(`distributed backward failed: ${e.message}`, deadWorker(e.message, e.workerName));
  return e;
}

/** Sends one message's gradients to the worker holding its SendNode; resolves when all the work they cause is done. */
function propagate(
  to: string,
  ctxId: number,
  msgId: number,
  grads: (Tensor | null)[],
  retainGraph: boolean,
  route: [string, string][] | null,
) {
  // NB: outside any context: the gradients must not be recorded as a new message of the pass. They
  // go by the inverse of their message's device route, so each lands on its tensor's device.
  return runInContext(null, () =>
    withRoute(route, () => rpcSync(to, PROPAGATE, [ctxId, msgId, grads, retainGraph])),
  ).catch((e: unknown) => {
    throw unwrap(e);
  });
}

/** One synchronous engine run from `roots`, then the propagations it caused. */
async function runLocal(ctx: DistAutogradContext, roots: RootGrad[], retainGraph: boolean): Promise<void> {
  const run = new LocalRun();
  withLocalRun(run, () =>
    runBackward(roots, {
      retainGraph: true,
      accumulate: (leaf, g, owned) => ctx.accumulate(leaf, g, owned),
      accumulateCopies: true,
    }),
  );
  await Promise.all(
    [...run.messages].map(([msgId, m]) => propagate(m.from, ctx.id, msgId, m.grads, retainGraph, m.route)),
  );
}

/** The callee side of step 3: gradients arrive for one of our SendNodes. */
async function onPropagate(ctxId: number, msgId: number, grads: unknown, retainGraph: boolean): Promise<null> {
  const ctx = retrieveContext(ctxId);
  const send = ctx.sends.get(msgId);
  if (!send) throw new AutogradError(`no RPC send with autograd message id ${msgId} in context ${ctxId}`);
  if (!Array.isArray(grads) || grads.some((g) => g !== null && !(g instanceof Tensor)))
    throw new AutogradError("gradients must arrive as a list of tensors (or nulls)");
  const list = grads as (Tensor | null)[];
  send.setGrads(list);
  if (retainGraph) ctx.retainedGraph = true;
  else ctx.ranBackward = true;
  const first = list.find((g): g is Tensor => g !== null);
  if (!first) return null;
  debug(4, "dist_autograd", `running send ${msgId} of context ${ctxId}`);
  await runLocal(ctx, [{ node: send, grad: first }], retainGraph);
  return null;
}

/** Every node reachable from `roots` (to release the caller's graph after the pass). */
function reachable(roots: readonly Node[]): Set<Node> {
  const seen = new Set<Node>(roots);
  const stack = [...roots];
  while (stack.length) for (const n of stack.pop()!.next) if (n && !seen.has(n)) (seen.add(n), stack.push(n));
  return seen;
}

/**
 * Runs the distributed backward pass from `roots` (scalar tensors) in context
 * `ctxId`; resolves once every worker involved has finished its part.
 * Gradients land in the context on each worker (getGradients), not in `.grad`.
 */
export async function backward(ctxId: number, roots: readonly Tensor[], retainGraph = false): Promise<void> {
  const ctx = retrieveContext(ctxId);
  if (!Array.isArray(roots) || roots.length === 0 || roots.some((r) => !(r instanceof Tensor)))
    throw new AutogradError("distAutograd.backward(ctxId, roots): roots must be a non-empty array of tensors");
  const rootGrads: RootGrad[] = roots.map((r, i) => {
    const node = gradEdge(r);
    if (!node)
      throw new AutogradError(
        `root ${i} does not require grad and has no gradFn; backward needs tensors computed from ones that require grad`,
      );
    if (r.isLeaf)
      throw new AutogradError(
        `root ${i} is a leaf tensor (it has no gradFn); as in PyTorch, distributed backward starts from a tensor ` +
          "computed by autograd, e.g. loss = x.sum(), not from x itself",
      );
    if (r.numel() !== 1)
      throw new AutogradError(
        `root ${i} has shape [${r.shape.join(", ")}]; distributed backward takes scalar roots (e.g. loss.sum())`,
      );
    return { node, grad: raw.binary("add", raw.empty(r.shape, r.dtype, r.device), 1) };
  });
  if (ctx.backwardRunning)
    throw new AutogradError(`a distributed backward pass is already running in context ${ctxId}; await it first`);
  ctx.backwardRunning = true;
  try {
    await runLocal(ctx, rootGrads, retainGraph);
  } finally {
    ctx.backwardRunning = false;
    if (!retainGraph) for (const n of reachable(rootGrads.map((r) => r.node))) n.release();
  }
}

/** This worker's leaf gradients in the context (a new Map; the tensors are the context's). */
export function getGradients(ctxId: number): Map<Tensor, Tensor> {
  return new Map(retrieveContext(ctxId).grads);
}

/** Releases the context here and on every worker it reached; see the file's top. */
export async function releaseContext(ctxId: number, except?: string): Promise<void> {
  const ctx = dropContext(ctxId);
  if (!ctx) return;
  // NB: as PyTorch frees each worker's graph after a backward without retain_graph: this worker's part
  // (its runs kept it for later messages) is released now, so what it saved (module intermediates:
  // sdk/autograd/intermediates.ts) goes back to the pool at once instead of at a later GC
  if (ctx.ranBackward && !ctx.retainedGraph) for (const n of reachable([...ctx.sends.values()])) n.release();
  const peers = [...ctx.knownWorkers].filter((w) => w !== except);
  await Promise.all(
    peers.map((w) =>
      runInContext(null, () => rpcSync(w, CLEANUP, [ctxId, selfName()], { timeoutMs: CLEANUP_TIMEOUT_MS })).catch(
        (e: Error) => debug(2, "dist_autograd", `cleanup of context ${ctxId} on ${w} failed: ${e.message}`),
      ),
    ),
  );
}

/** Whether a context with this id lives here. */
export function hasContext(ctxId: number): boolean {
  return findContext(ctxId) !== undefined;
}

register(PROPAGATE, onPropagate);
register(CLEANUP, (ctxId: number, from: string) => releaseContext(ctxId, from).then(() => null));
