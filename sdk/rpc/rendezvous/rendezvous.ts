/**
 * Rendezvous on the store: every worker registers its name, rank and address,
 * names and ranks are checked unique, and (static groups) everyone waits until
 * the whole world has registered. Dynamic groups (worldSize undefined) return
 * the current members at once and report later joins and leaves.
 *
 * Keys (under `prefix`, default "rdzv/"):
 *   world_size        the group's worldSize, or "dynamic"; the first worker sets it, the rest must agree
 *   rank/<rank>       {name, token}: claims the rank
 *   worker/<name>     {name, id, host, port, cuda, token}: claims the name (cuda: its CUDA device
 *                     count, for device-map checks); watched for joins and leaves
 *   complete          static groups: set by the worker whose registration completed the world
 *
 * Steps:
 * 1. agree on world_size (compareSet; a mismatch is a ValueError naming both values);
 * 2. watch worker/, so no change after step 5's snapshot is missed;
 * 3. claim rank/<rank> with compareSet(absent → mine): taken → ValueError naming the holder;
 * 4. claim worker/<name> the same way: taken → release our rank claim, ValueError naming the holder.
 *    NB: the random token makes a claim ours alone, so a second worker with our
 *    name and rank can neither pass as us nor remove our keys;
 * 5. static: whoever then finds every rank/<r> present sets complete (the last to register
 *    always does: the store serves requests in order); all wait for it, bounded. On a timeout
 *    the worker releases its claims, so it can retry. A worker refused in step 3 or 4 before
 *    the group is complete sets complete to its error instead (if nobody set it yet): that group
 *    can never assemble, so every waiting worker fails at once with the same message;
 * 6. list(worker/) is the membership; later watch events (they arrive after the
 *    list reply on the same connection) become onJoin / onLeave.
 */
import { randomUUID } from "node:crypto";
import { RpcTimeoutError, ValueError } from "../../errors/index.js";
import type { StoreClient, StoreEvent } from "./store_client.js";

/** A worker's identity, as torch.distributed.rpc.WorkerInfo (id = rank) plus its address. */
export interface WorkerInfo {
  readonly name: string;
  readonly id: number;
  readonly host: string;
  readonly port: number;
}

export interface RendezvousOptions {
  name: string;
  rank: number;
  /** undefined: dynamic membership. */
  worldSize: number | undefined;
  /** Where this worker accepts peer connections. */
  address: { host: string; port: number };
  /** CUDA devices this worker has (default 0); others check their device maps against it. */
  cudaDevices?: number;
  /** Bound on waiting for the whole group (static). Default: the store client's timeoutMs. */
  timeoutMs?: number;
  /** Key namespace, so several groups can share one store. Default "rdzv/". */
  prefix?: string;
}

type Listener = (w: WorkerInfo) => void;

/** The group as this worker sees it: a snapshot that keeps itself up to date. */
export class Membership {
  private readonly members = new Map<string, WorkerInfo>();
  private readonly cuda = new Map<string, number>();
  private readonly joins = new Set<Listener>();
  private readonly leaves = new Set<Listener>();
  private left = false;
  /** @internal */ ready = false;
  /** @internal */ unwatch: (() => Promise<void>) | null = null;
  private readonly early: StoreEvent[] = [];

  /** @internal */
  constructor(
    private readonly store: StoreClient,
    private readonly prefix: string,
    readonly self: WorkerInfo,
    readonly worldSize: number | undefined,
    private readonly token: string,
  ) {}

  /** `workers`, kept until the membership changes (every call and point-to-point message looks a peer up). */
  private sorted: readonly WorkerInfo[] | null = null;

  /** Current members, ordered by id (rank); the same frozen array until the membership changes. */
  get workers(): readonly WorkerInfo[] {
    return (this.sorted ??= Object.freeze([...this.members.values()].sort((a, b) => a.id - b.id)));
  }

  get dynamic(): boolean {
    return this.worldSize === undefined;
  }

  /** A member by name, or undefined. */
  get(name: string): WorkerInfo | undefined {
    return this.members.get(name);
  }

  /** How many CUDA devices member `name` has (0 when it did not say: an older worker). */
  cudaDevices(name: string): number {
    return this.cuda.get(name) ?? 0;
  }

  /** Calls `cb` for every worker that joins from now on; returns an unsubscribe. */
  onJoin(cb: Listener): () => void {
    this.joins.add(cb);
    return () => this.joins.delete(cb);
  }

  /** Calls `cb` for every worker that leaves from now on; returns an unsubscribe. */
  onLeave(cb: Listener): () => void {
    this.leaves.add(cb);
    return () => this.leaves.delete(cb);
  }

  /** Removes this worker's registration (others see onLeave) and stops watching. Idempotent. */
  async leave(): Promise<void> {
    if (this.left) return;
    this.left = true;
    const unwatch = this.unwatch;
    this.unwatch = null;
    if (this.store.closed) return;
    await unwatch?.();
    const p = this.prefix;
    // NB: delete only what our token proves is ours.
    const mine = await this.store.list(`${p}worker/${this.self.name}`);
    if (decode(mine.get(`${p}worker/${this.self.name}`))?.token === this.token)
      await this.store.delete(`${p}worker/${this.self.name}`);
    const rank = await this.store.list(`${p}rank/${this.self.id}`);
    if (decode(rank.get(`${p}rank/${this.self.id}`))?.token === this.token)
      await this.store.delete(`${p}rank/${this.self.id}`);
  }

  /** @internal */ reset(snapshot: Map<string, Buffer>): void {
    this.members.clear();
    this.sorted = null;
    for (const v of snapshot.values()) {
      const w = decode(v);
      if (w && isWorker(w)) {
        this.members.set(w.name, info(w));
        this.cuda.set(w.name, cudaOf(w));
      }
    }
    this.ready = true;
    for (const e of this.early.splice(0)) this.apply(e);
  }

  /** @internal */ apply(e: StoreEvent): void {
    if (this.left) return;
    // NB: an event can be handled before the snapshot's reply is (same connection, one chunk):
    // keep it and replay it after reset(), instead of losing a join.
    if (!this.ready) {
      this.early.push(e);
      return;
    }
    const w = decode(e.value);
    if (!w || !isWorker(w) || w.name === this.self.name) return;
    if (e.kind === "set" && !this.members.has(w.name)) {
      this.members.set(w.name, info(w));
      this.sorted = null;
      this.cuda.set(w.name, cudaOf(w));
      for (const cb of this.joins) cb(info(w));
    } else if (e.kind === "delete" && this.members.get(w.name)?.id === w.id) {
      this.members.delete(w.name);
      this.sorted = null;
      this.cuda.delete(w.name);
      for (const cb of this.leaves) cb(info(w));
    }
  }
}

/** Registers this worker and (static groups) waits for the rest; resolves to the membership. */
export async function rendezvous(store: StoreClient, opts: RendezvousOptions): Promise<Membership> {
  const { name, rank, worldSize } = opts;
  const p = opts.prefix ?? "rdzv/";
  const timeoutMs = opts.timeoutMs ?? store.timeoutMs;
  const token = randomUUID();
  const self: WorkerInfo = { name, id: rank, host: opts.address.host, port: opts.address.port };

  const ws = worldSize === undefined ? "dynamic" : String(worldSize);
  const agreed = (await store.compareSet(`${p}world_size`, null, ws))!.toString();
  if (agreed !== ws)
    throw new ValueError(
      `worker "${name}" was started with worldSize ${ws} but the group has ${agreed}: give every worker the same worldSize`,
    );

  const m = new Membership(store, p, self, worldSize, token);
  m.unwatch = await store.watch(`${p}worker/`, (e) => m.apply(e));
  try {
    const rankClaim = JSON.stringify({ name, token });
    // NB: ephemeral: a worker that dies without leaving frees its rank and name, and the others see it leave.
    const heldRank = (await store.compareSet(`${p}rank/${rank}`, null, rankClaim, { ephemeral: true }))!;
    if (heldRank.toString() !== rankClaim)
      throw new ValueError(
        `rank ${rank} is already taken by worker "${decode(heldRank)?.name}": give worker "${name}" a different rank`,
      );
    const nameClaim = JSON.stringify({ ...self, cuda: opts.cudaDevices ?? 0, token });
    const heldName = (await store.compareSet(`${p}worker/${name}`, null, nameClaim, { ephemeral: true }))!;
    if (heldName.toString() !== nameClaim) {
      await store.delete(`${p}rank/${rank}`);
      throw new ValueError(
        `worker name "${name}" is already taken by rank ${decode(heldName)?.id}: worker names must be unique in the group`,
      );
    }
  } catch (e) {
    await m.unwatch?.().catch(() => {});
    if (worldSize !== undefined && e instanceof ValueError)
      await store.compareSet(`${p}complete`, null, JSON.stringify({ error: e.message })).catch(() => null);
    throw e;
  }

  if (worldSize !== undefined) {
    const ranks = [...Array(worldSize).keys()].map((r) => `${p}rank/${r}`);
    // NB: complete once every worker's name key exists (each sets it after its rank key), so the
    // membership snapshot below, taken after complete, lists every worker.
    if ((await store.check(ranks)) && (await store.list(`${p}worker/`)).size >= worldSize)
      await store.set(`${p}complete`, "1");
    let complete: Buffer;
    try {
      complete = await store.get(`${p}complete`, timeoutMs);
    } catch (e) {
      if (!(e instanceof RpcTimeoutError)) {
        await m.leave().catch(() => {});
        throw e;
      }
      const have = new Set([...(await store.list(`${p}rank/`)).keys()].map((k) => Number(k.slice(p.length + 5))));
      await m.leave().catch(() => {});
      const missing = [...Array(worldSize).keys()].filter((r) => !have.has(r));
      throw new RpcTimeoutError(
        `rendezvous timed out after ${timeoutMs} ms: ${have.size} of ${worldSize} workers registered, ` +
          `rank(s) ${missing.join(", ")} missing; start them (same initMethod and secret) or check worldSize`,
        timeoutMs,
      );
    }
    const failed = decodeFailure(complete);
    if (failed !== null) {
      await m.leave().catch(() => {});
      throw new ValueError(`the group cannot assemble: ${failed}`);
    }
  }
  m.reset(await store.list(`${p}worker/`));
  return m;
}

interface Claim {
  name: string;
  id?: number;
  host?: string;
  port?: number;
  cuda?: number;
  token: string;
}

function cudaOf(c: Claim): number {
  return Number.isSafeInteger(c.cuda) && c.cuda! > 0 ? c.cuda! : 0;
}

function decode(v: Buffer | undefined): Claim | null {
  if (!v) return null;
  try {
    const o = JSON.parse(v.toString("utf8")) as unknown;
    return o && typeof o === "object" && typeof (o as Claim).name === "string" ? (o as Claim) : null;
  } catch {
    return null;
  }
}

/** The error a refused worker left in `complete`, or null for a group that assembled. */
function decodeFailure(v: Buffer): string | null {
  if (v.length === 0 || v[0] !== 0x7b) return null;
  try {
    const o = JSON.parse(v.toString("utf8")) as { error?: unknown };
    return typeof o.error === "string" ? o.error : null;
  } catch {
    return null;
  }
}

function isWorker(c: Claim): c is Required<Omit<Claim, "cuda">> & Claim {
  return Number.isInteger(c.id) && typeof c.host === "string" && Number.isInteger(c.port);
}

function info(c: Required<Omit<Claim, "cuda">>): WorkerInfo {
  return { name: c.name, id: c.id, host: c.host, port: c.port };
}
