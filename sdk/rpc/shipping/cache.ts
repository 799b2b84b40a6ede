/**
 * Shipped code, cached per peer so it is sent and compiled once, not on every call.
 * One instance per agent serves both of its roles:
 *
 * - as caller, `outgoing(peer, record)` sends the full source record the first time
 *   and only `{ kind: "source", hash }` after that;
 * - as callee, `lookup(peer, hash)` / `store(peer, hash, value)` hold the compiled
 *   function or class; `compilations` counts cache misses that compiled.
 *
 * Protocol:
 * 1. The caller sends the full record and marks the hash as held by the peer.
 * 2. The callee compiles it, stores it under (caller, hash) and runs it.
 * 3. Later calls send the hash alone; the callee finds the compiled value.
 * 4. A callee that lost it (restart, eviction) answers `ShippedCodeMissingError`;
 *    the caller calls `forget(peer, hash)` and resends the full record.
 * 5. When a peer leaves or reconnects, both sides call `forgetPeer(peer)`.
 */
import { hasCode, type SourceRefRecord, type TargetRecord } from "./record.js";

export interface ShippedCodeCacheOptions {
  /** Entries kept per peer on each side; the least recently used go first (default 1024). */
  maxEntriesPerPeer?: number;
}

export class ShippedCodeCache {
  private readonly sent = new Map<string, Set<string>>();
  private readonly compiled = new Map<string, Map<string, unknown>>();
  private readonly max: number;
  /** How many source records this side compiled (as callee). */
  compilations = 0;

  constructor(options: ShippedCodeCacheOptions = {}) {
    this.max = Math.max(1, options.maxEntriesPerPeer ?? 1024);
  }

  // -- caller side ------------------------------------------------------------------------------

  /** The record to send to `peer`: hash-only when the peer holds it already; marks it as held. */
  outgoing(peer: string, record: TargetRecord): TargetRecord {
    if (record.kind !== "source" || !hasCode(record)) return record;
    if (this.peerHas(peer, record.hash)) return { kind: "source", hash: record.hash } satisfies SourceRefRecord;
    this.markSent(peer, record.hash);
    return record;
  }

  peerHas(peer: string, hash: string): boolean {
    const set = this.sent.get(peer);
    if (!set?.has(hash)) return false;
    set.delete(hash); // NB: re-insert to keep insertion order = recency
    set.add(hash);
    return true;
  }

  markSent(peer: string, hash: string): void {
    let set = this.sent.get(peer);
    if (!set) this.sent.set(peer, (set = new Set()));
    set.add(hash);
    if (set.size > this.max) set.delete(set.values().next().value as string);
  }

  /** The peer lost `hash` (it answered `ShippedCodeMissingError`): send it in full next time. */
  forget(peer: string, hash: string): void {
    this.sent.get(peer)?.delete(hash);
  }

  // -- callee side ------------------------------------------------------------------------------

  /** The compiled value `peer` shipped as `hash`, if still held. */
  lookup(peer: string, hash: string): { value: unknown } | undefined {
    const map = this.compiled.get(peer);
    if (!map?.has(hash)) return undefined;
    const value = map.get(hash);
    map.delete(hash);
    map.set(hash, value);
    return { value };
  }

  store(peer: string, hash: string, value: unknown): void {
    let map = this.compiled.get(peer);
    if (!map) this.compiled.set(peer, (map = new Map()));
    map.set(hash, value);
    if (map.size > this.max) map.delete(map.keys().next().value as string);
  }

  // -- both -------------------------------------------------------------------------------------

  /** Forget everything about `peer` (it left, restarted or reconnected). */
  forgetPeer(peer: string): void {
    this.sent.delete(peer);
    this.compiled.delete(peer);
  }

  clear(): void {
    this.sent.clear();
    this.compiled.clear();
    this.compilations = 0;
  }
}
