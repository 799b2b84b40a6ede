/**
 * Message hooks: how layers above rpc (distributed autograd, device maps)
 * take part in every call and reply. Hooks are per process: every agent of
 * the process runs them, in the order they were added. Each message names
 * the agent it belongs to, so a hook that keeps state keeps it per agent.
 */
import type { Agent } from "./agent.js";

/** Which message a hook sees: a call's arguments, or the value in its reply. */
export type HookedMessageKind = "request" | "response";

/**
 * One hook. Its metadata travels in the message's payload under `ext[key]`.
 *
 * - `outgoing` runs synchronously where the call (or the reply) is made, so
 *   it sees the caller's async context; it may replace the values (e.g.
 *   detach tensors) and returns metadata, or undefined for none. A throw
 *   fails the call before anything is sent.
 * - `incoming` runs on receipt before the values are used; it returns the
 *   values to use (e.g. tensors re-attached to a graph).
 * - `around` wraps the callee's run of a request's target.
 */
export interface MessageHook {
  readonly key: string;
  outgoing?(msg: {
    /** The agent sending it (set for every message an agent hooks; absent when a test drives a hook itself). */
    agent?: Agent;
    to: string;
    kind: HookedMessageKind;
    values: unknown;
    /** For a reply: the metadata this hook attached to the request. */
    requestMeta?: unknown;
  }): { values: unknown; meta?: unknown } | undefined;
  incoming?(msg: {
    agent?: Agent;
    from: string;
    kind: HookedMessageKind;
    values: unknown;
    meta: unknown;
    /** The whole ext record (other hooks' metadata, e.g. the device route a gradient must go back by). */
    ext?: Record<string, unknown>;
  }): unknown;
  around?<T>(meta: unknown, from: string, run: () => Promise<T>): Promise<T>;
  /**
   * What identifies the hook's current state here (distributed autograd: the current context id),
   * so that work started in one scope is used only in the same one (./fetch_ahead.ts).
   */
  scope?(agent?: Agent): unknown;
}

const messageHooks: MessageHook[] = [];

/** Installs a message hook for every agent of this process (replacing one with the same key). */
export function addMessageHook(hook: MessageHook): void {
  const i = messageHooks.findIndex((h) => h.key === hook.key);
  if (i >= 0) messageHooks[i] = hook;
  else messageHooks.push(hook);
}

/** Runs the outgoing hooks over `values`; returns the values to send and the ext record (undefined when empty). */
export function hookOutgoing(
  agent: Agent,
  to: string,
  kind: HookedMessageKind,
  values: unknown,
  requestExt?: Record<string, unknown>,
): { values: unknown; ext: Record<string, unknown> | undefined } {
  let ext: Record<string, unknown> | undefined;
  for (const h of messageHooks) {
    if (!h.outgoing) continue;
    const r = h.outgoing({ agent, to, kind, values, requestMeta: requestExt?.[h.key] });
    if (!r) continue;
    values = r.values;
    if (r.meta !== undefined) (ext ??= {})[h.key] = r.meta;
  }
  return { values, ext };
}

export function hookIncoming(
  agent: Agent,
  from: string,
  kind: HookedMessageKind,
  values: unknown,
  ext: Record<string, unknown> | undefined,
): unknown {
  for (const h of messageHooks)
    if (h.incoming) values = h.incoming({ agent, from, kind, values, meta: ext?.[h.key], ext });
  return values;
}

export function hookAround<T>(
  ext: Record<string, unknown> | undefined,
  from: string,
  run: () => Promise<T>,
): Promise<T> {
  let f = run;
  for (const h of messageHooks) {
    if (!h.around) continue;
    const inner = f;
    const around = h.around.bind(h);
    f = () => around(ext?.[h.key], from, inner);
  }
  return f();
}

/** Each hook's scope (see MessageHook.scope), in hook order; hooks without one are left out. */
export function hookScope(agent: unknown): unknown[] {
  const out: unknown[] = [];
  for (const h of messageHooks) if (h.scope) out.push(h.scope(agent as Agent | undefined));
  return out;
}
