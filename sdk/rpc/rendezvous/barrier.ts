/**
 * A reusable store barrier with generation counting, for counted groups (graceful shutdown
 * meets the current members instead: ../shutdown_sync.ts).
 *
 * 1. Each arrival adds 1 to `barrier/<name>/arrived`; arrival n belongs to
 *    generation g = floor((n - 1) / count).
 * 2. The count-th arrival of a generation sets `barrier/<name>/gen/<g>` and
 *    deletes generation g - 1's key (every participant of g has passed g - 1,
 *    so nobody waits on it), so at most two generation keys ever exist.
 * 3. Everyone waits (bounded) for their generation's key.
 *
 * NB: `count` participants each call it once per round, as with torch's store
 * barriers; after a timeout the barrier's counter is off and `name` should not be reused.
 */
import { RpcTimeoutError, ValueError } from "../../errors/index.js";
import type { StoreClient } from "./store_client.js";

/** Waits until `count` callers reached the barrier `name` (RpcTimeoutError after `timeoutMs`); resolves to the generation. */
export async function barrier(store: StoreClient, name: string, count: number, timeoutMs: number): Promise<number> {
  if (!Number.isSafeInteger(count) || count < 1)
    throw new ValueError(`barrier count must be an integer >= 1, got ${count}`);
  const base = `barrier/${name}/`;
  const start = Date.now();
  const n = await store.add(`${base}arrived`, 1);
  const gen = Math.floor((n - 1) / count);
  if (n % count === 0) {
    await store.set(`${base}gen/${gen}`, "1");
    if (gen > 0) await store.delete(`${base}gen/${gen - 1}`);
    return gen;
  }
  const left = Math.max(1, timeoutMs - (Date.now() - start));
  try {
    await store.get(`${base}gen/${gen}`, left);
  } catch (e) {
    if (!(e instanceof RpcTimeoutError)) throw e;
    const now = await store.add(`${base}arrived`, 0).catch(() => n);
    throw new RpcTimeoutError(
      `barrier "${name}" timed out after ${timeoutMs} ms: ${Math.min(count, now - gen * count)} of ${count} workers arrived` +
        ` (generation ${gen}); check that every worker reaches it and that the count is right`,
      timeoutMs,
    );
  }
  return gen;
}
