/**
 * Fetching an RRef argument's value ahead (issue 23: the head of a pipeline stalled).
 *
 * Why: a call that receives a user RRef runs only once the RRef's owner has confirmed the fork
 * (PyTorch's rule; the conformance suite checks it). A single-threaded owner answers the fork
 * request between two computations. In notebook 04's pipeline, stage 2's first call then starts,
 * sends its toHere() fetch, and that fetch reaches stage 1 while it computes the next micro-batch:
 * stage 2 waited one stage-1 forward more than it had to (about 8 ms of a 120 ms step, measured
 * with the bench's --timeline).
 *
 * What: when a call arrives with unconfirmed user RRefs among its arguments, the callee sends one
 * RREF_FETCH marked `ahead` for each RRef id (at most 16 in flight per process), from inside the
 * call's hook context (a distributed autograd context records the fetch as toHere would). It leaves
 * just before the fork request (which goes a microtask later); the owner's entry exists by then, or is
 * made pending. The owner answers it with the value only when the value's REMOTE_CALL has arrived and
 * the value is a tensor, or an array of at most 16 tensors, of at most TPRPC_RREF_FETCH_AHEAD_BYTES
 * (4 MiB; 0 turns fetching ahead off) in all; anything else is declined with a short ERROR, so an RRef
 * to a module or any other object is never copied unasked. The first toHere() on that RRef during
 * that call, without a timeout and in the same hook scope (the same distributed autograd context),
 * takes the fetched value; any other toHere() fetches as before, and so does one after a method call
 * through the RRef's proxies (which may change the value) or whose fetch ahead was declined or failed
 * (so its error, if any, is the usual one). The copy is the value as the owner had it when it answered.
 *
 * Costs: a value fetched ahead that the call never reads was copied for nothing (at most the byte
 * limit per RRef argument). In a distributed autograd context its send and receive are recorded (they
 * take no part in a backward pass that does not reach them), and the owner and the callee know each
 * other as context workers (one more cleanup message each). A fetch ahead has the agent's default
 * timeout; a toHere() that finds it timed out fetches again with its own. rpc.profiler and the state
 * dump show fetches ahead as fetches.
 */
import { itemSize } from "../tensor/dtype.js";
import { Tensor } from "../tensor/tensor.js";
import type { RRef } from "./rref.js";

const DEFAULT_BYTES = 4 << 20;
const MAX_TENSORS = 16;

/** TPRPC_RREF_FETCH_AHEAD_BYTES (0 to 1 GiB; 0: off), else 4 MiB. */
export function fetchAheadBytes(env: NodeJS.ProcessEnv = process.env): number {
  const v = env.TPRPC_RREF_FETCH_AHEAD_BYTES;
  if (v === undefined || v === "") return DEFAULT_BYTES;
  const n = Number(v);
  return Number.isInteger(n) && n >= 0 && n <= 1 << 30 ? n : DEFAULT_BYTES;
}

const limit = fetchAheadBytes();

/** Whether fetching ahead is on in this process. */
export function fetchAheadOn(): boolean {
  return limit > 0;
}

/** The owner's test: a tensor, or an array of at most 16 tensors, of at most `max` bytes in all. */
export function fitsAhead(value: unknown, max: number = limit): boolean {
  if (max <= 0) return false;
  const list = Array.isArray(value) ? value : [value];
  if (list.length === 0 || list.length > MAX_TENSORS) return false;
  let bytes = 0;
  for (const t of list) {
    if (!(t instanceof Tensor)) return false;
    bytes += t.numel() * itemSize(t.dtype);
    if (bytes > max) return false;
  }
  return true;
}

/** The owner's answer to a fetch ahead it declines (one instance, sent as ERROR; its stack is empty). */
export const DECLINED: Error = Object.assign(new Error("not fetched ahead: the value is not a small tensor"), {
  name: "FetchAheadDeclined",
  stack: "",
});

/** What an RRef keeps of a fetch ahead: the value (null: declined or failed), and the hook scope it was fetched in. */
export interface Ahead {
  readonly value: Promise<{ v: unknown } | null>;
  readonly scope: readonly unknown[];
}

/** At most this many fetches ahead in flight per process (each at most the byte limit). */
const MAX_IN_FLIGHT = 16;
let inFlight = 0;

/**
 * Starts a fetch ahead for each of `users` (RRefs that arrived with a call), one per RRef id, while
 * fewer than 16 are in flight in this process. Call it inside the call's hooks' context.
 */
export function fetchAhead(users: readonly RRef<unknown>[], scope: readonly unknown[]): void {
  const seen = new Set<string>();
  for (const r of users) {
    if (r.isOwner() || r.creationFailure || seen.has(r.rrefId) || inFlight >= MAX_IN_FLIGHT) continue;
    seen.add(r.rrefId);
    inFlight++;
    const value = r.host.fetch(r.ownerName(), r.rrefId, undefined, true).then(
      (v) => ({ v }),
      () => null,
    );
    void value.finally(() => inFlight--);
    r.setAhead({ value, scope });
  }
}

/** The call that brought `users` has finished: what was fetched ahead for it is no longer used. */
export function dropAhead(users: readonly RRef<unknown>[]): void {
  for (const r of users) r.setAhead(null);
}

/** Whether two hook scopes are the same (element by element). */
export function sameScope(a: readonly unknown[], b: readonly unknown[]): boolean {
  return a.length === b.length && a.every((x, i) => x === b[i]);
}
