/**
 * Recording the forward pass at RPC boundaries, through the agent's message
 * hook (sdk/rpc/hooks.ts `addMessageHook`), metadata under `ext.distAutograd`.
 *
 * 1. Outgoing request, inside a context: the metadata names the context (so
 *    the callee joins it and runs the target inside it, which records nested
 *    RPCs and the reply). If the arguments hold tensors requiring grad (and
 *    grad mode is on), a SendNode with those tensors as inputs is recorded
 *    under a new autograd message id, detached copies are sent, and the
 *    metadata lists which tensors (by wire order) required grad.
 * 2. Outgoing response: the same, for the context the request named (an RRef
 *    fetch included: the owner learns the context from the request's metadata).
 * 3. Incoming (either kind): join the context, remember the sender for
 *    cleanup, and make each listed tensor the output of a RecvNode paired with
 *    the sender's SendNode; it keeps the inverse of the message's device route
 *    (sdk/rpc/device_map_hook.ts), by which its gradients go back.
 * 4. Around a request's target: run it with the caller's context current (no
 *    context when the request named none).
 * 5. Scope: the current context id (a value fetched ahead in one context is
 *    not used in another, sdk/rpc/fetch_ahead.ts).
 */
import { ProtocolError } from "../errors/index.js";
import { isGradEnabled } from "../autograd/grad_mode.js";
import { gradEdge } from "../autograd/node.js";
import { detach } from "../autograd/ops/views.js";
import { addMessageHook, getWorkerInfo } from "../rpc/api.js";
import type { Agent } from "../rpc/agent.js";
import { inverseRoutePairs } from "../rpc/device_map_hook.js";
import type { Tensor } from "../tensor/tensor.js";
import { debug } from "../util/index.js";
import { currentContextId, findContext, getOrCreateContext, newMessageId, runInContext } from "./context.js";
import { RecvNode, SendNode } from "./functions.js";
import { collectTensors, mapTensors } from "./tensors.js";

export const HOOK_KEY = "distAutograd";

/** The metadata on the wire: context id; for messages with tensors requiring grad, message id, their wire indices and the tensor count. */
export interface Meta {
  c: number;
  m?: number;
  g?: number[];
  n?: number;
}

function isId(v: unknown): v is number {
  return typeof v === "number" && Number.isSafeInteger(v) && v >= 0;
}

/** Checks metadata from the wire (hostile input): a ProtocolError for anything malformed. */
export function parseMeta(meta: unknown): Meta | null {
  if (meta === undefined || meta === null) return null;
  const m = meta as Partial<Meta>;
  if (typeof meta !== "object" || !isId(m.c)) throw new ProtocolError("bad distributed autograd metadata");
  if (m.m === undefined) return { c: m.c };
  if (!isId(m.m) || !isId(m.n) || !Array.isArray(m.g) || m.g.length === 0 || m.g.length > m.n)
    throw new ProtocolError("bad distributed autograd metadata");
  let last = -1;
  for (const k of m.g) {
    if (!isId(k) || k <= last || k >= m.n) throw new ProtocolError("bad distributed autograd metadata");
    last = k;
  }
  return { c: m.c, m: m.m, g: m.g, n: m.n };
}

function outgoing(msg: {
  agent?: Agent;
  to: string;
  kind: "request" | "response";
  values: unknown;
  requestMeta?: unknown;
}) {
  const agent = msg.agent;
  let ctxId: number | null;
  if (msg.kind === "request") ctxId = currentContextId(agent);
  else ctxId = parseMeta(msg.requestMeta)?.c ?? null;
  if (ctxId === null) return undefined;
  // NB: a message whose context was released (async work outliving its context() callback) goes unrecorded
  const ctx = msg.kind === "request" ? findContext(ctxId, agent) : getOrCreateContext(ctxId, agent);
  if (!ctx) {
    debug(1, "dist_autograd", `a message to ${msg.to} went after its context ${ctxId} was released: not recorded`);
    return undefined;
  }
  ctx.knownWorkers.add(msg.to);
  const all = collectTensors(msg.values);
  const wanted: number[] = [];
  if (isGradEnabled()) all.forEach((t, i) => t.requiresGrad && wanted.push(i));
  if (wanted.length === 0) return msg.kind === "request" ? { values: msg.values, meta: { c: ctxId } } : undefined;
  const inputs = wanted.map((i) => all[i]!);
  const msgId = newMessageId(agent);
  ctx.sends.set(msgId, new SendNode(inputs.map(gradEdge), inputs, ctxId, msgId, msg.to));
  const grads = new Set<Tensor>(inputs);
  const values = mapTensors(msg.values, (t) => (grads.has(t) ? detach(t) : t));
  debug(4, "dist_autograd", `send ${msgId} (${wanted.length} tensors) to ${msg.to} in context ${ctxId}`);
  return { values, meta: { c: ctxId, m: msgId, g: wanted, n: all.length } satisfies Meta };
}

function incoming(msg: {
  agent?: Agent;
  from: string;
  kind: "request" | "response";
  values: unknown;
  meta: unknown;
  ext?: Record<string, unknown>;
}): unknown {
  const m = parseMeta(msg.meta);
  if (!m) return msg.values;
  const ctx = msg.kind === "request" ? getOrCreateContext(m.c, msg.agent) : findContext(m.c, msg.agent);
  if (!ctx) {
    debug(1, "dist_autograd", `a message from ${msg.from} arrived after its context ${m.c} was released: not recorded`);
    return msg.values;
  }
  ctx.knownWorkers.add(msg.from);
  if (m.m === undefined) return msg.values;
  const all = collectTensors(msg.values);
  if (all.length !== m.n)
    throw new ProtocolError(
      `distributed autograd: message ${m.m} from "${msg.from}" carried ${all.length} tensors, its metadata says ${m.n}`,
    );
  // NB: the gradients go back by the inverse of the device route this message came by (as PyTorch's)
  const back = inverseRoutePairs(msg.ext);
  m.g!.forEach((k, i) => {
    all[k]!.gradFn = new RecvNode(ctx.id, m.m!, i, m.g!.length, msg.from, back);
  });
  return msg.values;
}

function around<T>(meta: unknown, _from: string, run: () => Promise<T>): Promise<T> {
  const m = parseMeta(meta);
  // NB: made here too, for a fetch ahead that starts before the request's `incoming` (sdk/rpc/fetch_ahead.ts)
  if (m) getOrCreateContext(m.c);
  return runInContext(m ? m.c : null, run);
}

let installed = false;

/** Installs the hook (idempotent; sdk/dist_autograd/index.ts does it on import). */
export function installHook(): void {
  if (installed) return;
  installed = true;
  addMessageHook({ key: HOOK_KEY, outgoing, incoming, around, scope: (agent) => currentContextId(agent) });
}

/** This worker's name (for error messages). */
export function selfName(): string {
  try {
    return getWorkerInfo().name;
  } catch {
    return "?";
  }
}
