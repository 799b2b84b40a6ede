/**
 * RRefs: references to a value that lives on one worker (its owner), with
 * PyTorch's distributed reference counting. Every RRef object anywhere is one
 * "fork" the owner knows of; the owner keeps the value while any fork lives.
 *
 * The protocol (G1: the owner hears of every deletion; G2: a parent fork is
 * not released before the owner confirmed its child):
 * 1. remote(): the caller makes a user RRef (fork f) at once and sends
 *    REMOTE_CALL {rref, fork f}; the owner registers f, runs the call, stores
 *    the value (or its error, raised by toHere) and confirms.
 * 2. Sending a user RRef: the sender mints a child fork c and holds its own
 *    RRef object alive (pendingChildren) until the owner accepts c. The
 *    receiver, if it is not the owner, makes a user RRef for c and sends
 *    RREF_FORK_REQUEST to the owner, which registers c, confirms the child and
 *    sends RREF_CHILD_ACCEPT to the parent. If the receiver is the owner, it
 *    resolves the RRef to its own value and sends RREF_CHILD_ACCEPT itself.
 * 3. Sending an owner RRef: the owner registers the child fork first (it is
 *    the owner), so the receiver's RRef is confirmed on arrival.
 * 4. Deleting: when an RRef object is garbage collected (FinalizationRegistry)
 *    or at shutdown, its fork is removed at the owner (RREF_USER_DELETE);
 *    the owner drops the value when no fork remains.
 * 5. Collecting: finalizers run only after a full collection, which a holder
 *    that allocates little may not run for minutes. When the owner's
 *    off-heap (external) memory has grown by TPRPC_RREF_COLLECT_BYTES (256 MiB) since
 *    its low point while it owns values, it sends RREF_COLLECT to the workers
 *    holding forks (at most once a second) and each runs a full collection
 *    (gc.ts), so the RRefs they dropped are deleted. While it owns values the
 *    owner also samples its memory once a second (not only when a value
 *    arrives), and after asking it collects itself too, so the values freed by
 *    the deletions are returned.
 * 6. Idle holders: a worker that made or received many user RRefs (a burst of
 *    remote() calls) and then goes quiet may never collect on its own, and its
 *    dropped RRefs would pin their values. After IDLE_COLLECT_FORKS of them,
 *    it runs a full collection once no new one came for IDLE_COLLECT_QUIET_MS
 *    (and at the latest IDLE_COLLECT_MAX_MS after the first).
 */
import v8 from "node:v8";
import { ProtocolError, RpcError, WorkerUnavailableError } from "../errors/index.js";
import { debug } from "../util/index.js";
import { registerWireType } from "../wire/index.js";
import { collectGarbage } from "./gc.js";
import type { WorkerInfo } from "./rendezvous/index.js";

/** What an RRef needs from the agent that made it. */
export interface RRefHost {
  readonly name: string;
  workerInfo(name?: string): WorkerInfo;
  /** Asks the owner for the value. */
  fetch(owner: string, rrefId: string, timeoutMs?: number): Promise<unknown>;
  /** Calls `method(...args)` on the owner's value: kind "sync"/"async" resolve to the result, "remote" returns an RRef. */
  callMethod(
    rref: RRef<unknown>,
    kind: "sync" | "async" | "remote",
    method: string,
    args: unknown[],
    timeoutMs?: number,
  ): unknown;
  /** One-way messages of the protocol above. */
  notify(
    to: string,
    kind: "forkRequest" | "childAccept" | "userDelete" | "collect",
    body: Record<string, string>,
  ): Promise<void>;
  /** The other workers of the group, for a collection request whose holders are not all known. */
  peerNames(): string[];
  readonly rrefs: RRefContext;
}

interface OwnerEntry {
  value: Promise<unknown>;
  settled: { ok: true; value: unknown } | { ok: false; error: unknown } | null;
  /** fork → the worker holding it ("" where the owner cannot tell: an owner RRef it sent). */
  forks: Map<string, string>;
  /** Set while the value's REMOTE_CALL has not arrived yet. */
  provide: ((v: Promise<unknown>) => void) | null;
}

/** Growth of this process's off-heap (external) memory, as V8 counts it, (bytes) that makes an owner ask for a collection (0: never). */
const COLLECT_BYTES = Number(process.env.TPRPC_RREF_COLLECT_BYTES ?? 256 << 20);
/** An owner asks at most this often, and samples its memory this often while it owns values. */
const COLLECT_INTERVAL_MS = 1000;
/** Step 6: user RRefs made here since the last collection that arm the idle collection. */
const IDLE_COLLECT_FORKS = 16;
const IDLE_COLLECT_QUIET_MS = 1000;
const IDLE_COLLECT_MAX_MS = 10_000;

const finalizer = new FinalizationRegistry<{ ctx: RRefContext; rrefId: string; owner: string; fork: string }>((h) =>
  h.ctx.forkGone(h.rrefId, h.owner, h.fork),
);

type Proxied<T> = { [K in keyof T]: T[K] extends (...a: infer A) => infer R ? (...a: A) => R : never };

/** A reference to a value on its owner worker (torch.distributed.rpc.RRef). */
export class RRef<T = unknown> {
  /** @internal */ readonly host: RRefHost;
  /** @internal */ readonly rrefId: string;
  /** @internal */ readonly fork: string;
  private readonly ownerName_: string;
  private confirmed: boolean;
  /** Why this RRef cannot be used: its remote() creation failed or ran out of time. */
  private failure: Error | null = null;
  /** Waiters for `failure` (a toHere racing the creation) and for confirmation (an RRef argument). */
  private onFailure: ((e: Error) => void)[] = [];
  private onConfirm: (() => void)[] = [];

  /**
   * A local owner RRef holding `value`, as torch's rpc.RRef(value). Internal
   * callers pass the remaining arguments.
   */
  constructor(
    value: T,
    internal?: { host: RRefHost; rrefId: string; owner: string; fork: string; confirmed: boolean },
  ) {
    if (internal) {
      this.host = internal.host;
      this.rrefId = internal.rrefId;
      this.ownerName_ = internal.owner;
      this.fork = internal.fork;
      this.confirmed = internal.confirmed;
    } else {
      const host = currentHost();
      this.host = host;
      this.rrefId = host.rrefs.newId();
      this.ownerName_ = host.name;
      this.fork = host.rrefs.newId();
      this.confirmed = true;
      host.rrefs.ownValue(this.rrefId, value, this.fork, host.name);
    }
    finalizer.register(this, { ctx: this.host.rrefs, rrefId: this.rrefId, owner: this.ownerName_, fork: this.fork });
  }

  owner(): WorkerInfo {
    return this.host.workerInfo(this.ownerName_);
  }

  ownerName(): string {
    return this.ownerName_;
  }

  isOwner(): boolean {
    return this.ownerName_ === this.host.name;
  }

  /** True once the owner knows of this RRef (always for owners). */
  confirmedByOwner(): boolean {
    return this.confirmed || this.isOwner();
  }

  /** @internal */
  confirm(): void {
    this.confirmed = true;
    this.onFailure = [];
    for (const f of this.onConfirm.splice(0)) f();
  }

  /** @internal the remote() call creating this RRef failed (or timed out): every later use raises `e`. */
  fail(e: Error): void {
    if (this.failure) return;
    this.failure = e;
    for (const f of this.onFailure.splice(0)) f(e);
    for (const f of this.onConfirm.splice(0)) f();
  }

  /** @internal why the RRef cannot be used (its creation failed), or null. */
  get creationFailure(): Error | null {
    return this.failure;
  }

  /** @internal resolves once the owner confirmed this RRef, or its creation failed (or its owner left). */
  settled(): Promise<void> {
    if (this.confirmedByOwner() || this.failure) return Promise.resolve();
    return new Promise((r) => this.onConfirm.push(r));
  }

  /** `p`, or the creation's failure if that comes first (for a remote() still being made). */
  private orFailure<V>(p: Promise<V>): Promise<V> {
    if (this.confirmed) return p;
    return new Promise<V>((resolve, reject) => {
      this.onFailure.push(reject);
      p.then(resolve, reject);
    });
  }

  /** The value, on its owner only (once the call that makes it has finished). */
  localValue(): T {
    if (this.failure) throw this.failure;
    if (!this.isOwner())
      throw new RpcError(
        `localValue() can only be called on the owner ("${this.ownerName_}"); this is "${this.host.name}". Use await rref.toHere()`,
      );
    return this.host.rrefs.localValue(this.rrefId) as T;
  }

  /** Copies the value here (from the owner, or locally on the owner). */
  async toHere(timeoutMs?: number): Promise<T> {
    if (this.failure) throw this.failure;
    if (this.isOwner()) return (await this.host.rrefs.valueOf(this.rrefId)) as T;
    return (await this.orFailure(this.host.fetch(this.ownerName_, this.rrefId, timeoutMs))) as T;
  }

  /**
   * A backward pass from this RRef's value (a scalar tensor), as torch's RRef.backward: with a
   * distributed autograd context id, the owner runs distAutograd.backward(ctxId, [value]) (read the
   * gradients with distAutograd.getGradients on each worker); without one, a local backward on the
   * owner, which only the owner may call. Needs distAutograd (imported by "tprpc").
   */
  async backward(distAutogradCtxId?: number, retainGraph = false): Promise<void> {
    if (this.failure) throw this.failure;
    if (!rrefBackward)
      throw new RpcError("RRef.backward needs distributed autograd: import tprpc (or tprpc's dist_autograd) first");
    await rrefBackward(this as RRef<unknown>, distAutogradCtxId ?? null, retainGraph);
  }

  /** `await r.rpcSync().forward(x)` runs forward on the owner's object and resolves to its result. */
  rpcSync(
    timeoutMs?: number,
  ): Proxied<{ [K in keyof T]: T[K] extends (...a: infer A) => infer R ? (...a: A) => Promise<Awaited<R>> : never }> {
    return this.proxy("sync", timeoutMs) as never;
  }

  /** As rpcSync; each call returns the future. */
  rpcAsync(
    timeoutMs?: number,
  ): Proxied<{ [K in keyof T]: T[K] extends (...a: infer A) => infer R ? (...a: A) => Promise<Awaited<R>> : never }> {
    return this.proxy("async", timeoutMs) as never;
  }

  /** `r.remote().forward(x)` returns an RRef to the result, owned by the same worker. */
  remote(
    timeoutMs?: number,
  ): Proxied<{ [K in keyof T]: T[K] extends (...a: infer A) => infer R ? (...a: A) => RRef<Awaited<R>> : never }> {
    return this.proxy("remote", timeoutMs) as never;
  }

  private proxy(kind: "sync" | "async" | "remote", timeoutMs?: number): object {
    return new Proxy(
      {},
      {
        get: (_t, method) =>
          typeof method === "string"
            ? (...args: unknown[]) => {
                if (this.failure) {
                  if (kind !== "remote") return Promise.reject(this.failure);
                  throw this.failure;
                }
                const r = this.host.callMethod(this as RRef<unknown>, kind, method, args, timeoutMs);
                return kind === "remote" ? r : this.orFailure(r as Promise<unknown>);
              }
            : undefined,
      },
    );
  }

  toString(): string {
    return `RRef(owner=${this.ownerName_}, id=${this.rrefId})`;
  }
}

type RRefBackward = (rref: RRef<unknown>, ctxId: number | null, retainGraph: boolean) => Promise<void>;
let rrefBackward: RRefBackward | null = null;
/** @internal dist_autograd installs RRef.backward's implementation (rpc cannot import it). */
export function setRRefBackward(fn: RRefBackward): void {
  rrefBackward = fn;
}

let hostForNew: RRefHost | null = null;
/** @internal the agent in use, for `new RRef(value)`. */
export function setCurrentHost(h: RRefHost | null): void {
  hostForNew = h;
}
function currentHost(): RRefHost {
  if (!hostForNew) throw new RpcError("RPC has not been initialized. Call rpc.initRpc before creating an RRef.");
  return hostForNew;
}

/** Per-agent RRef bookkeeping: values owned here, and forks handed out but not yet accepted. */
export class RRefContext {
  private readonly owned = new Map<string, OwnerEntry>();
  /** child fork → the parent RRef object, held alive until the owner accepts the child (G2). */
  private readonly pendingChildren = new Map<string, RRef<unknown>>();
  /** forks of user RRefs made here, for deletion at shutdown. */
  private readonly liveUsers = new Map<string, { rrefId: string; owner: string; ref: WeakRef<RRef<unknown>> }>();
  private counter = 0;
  /** Values of owner RRefs, and confirmations of user forks, decoded since the last takeOwnedArrivals() (see materialize). */
  private ownedArrivals: Promise<unknown>[] | null = null;
  closed = false;

  constructor(private readonly host: () => RRefHost) {}

  newId(): string {
    return `${this.host().name}:${++this.counter}`;
  }

  /** Values owned here (the live-object count the tests observe). */
  get ownedCount(): number {
    return this.owned.size;
  }

  /**
   * The owner entry for `rrefId`, made pending when a fork request or a fetch
   * arrives before the REMOTE_CALL that creates the value (they travel on
   * other connections, so nothing orders them): it settles when the call does.
   */
  private entry(rrefId: string): OwnerEntry {
    let e = this.owned.get(rrefId);
    if (!e) {
      let resolve!: (v: Promise<unknown>) => void;
      const value = new Promise<unknown>((r) => {
        resolve = r;
      });
      const entry: OwnerEntry = { value, settled: null, forks: new Map(), provide: resolve };
      value.then(
        (v) => {
          entry.settled = { ok: true, value: v };
        },
        (error: unknown) => {
          entry.settled = { ok: false, error };
        },
      );
      this.owned.set(rrefId, entry);
      e = entry;
    }
    return e;
  }

  /** Stores a value made here for the fork `fork`, held by the worker `holder`. */
  own(rrefId: string, value: Promise<unknown>, fork: string, holder: string): void {
    const e = this.entry(rrefId);
    e.provide?.(value);
    e.provide = null;
    e.forks.set(fork, holder);
    this.checkPressure();
    this.watchPressure();
  }

  /** Stores a value that is already made (rpc.RRef(value)): localValue() works at once. */
  ownValue(rrefId: string, value: unknown, fork: string, holder: string): void {
    if (this.owned.has(rrefId)) throw new RpcError(`RRef ${rrefId} is already owned here`);
    const entry: OwnerEntry = {
      value: Promise.resolve(value),
      settled: { ok: true, value },
      forks: new Map([[fork, holder]]),
      provide: null,
    };
    this.owned.set(rrefId, entry);
    this.checkPressure();
    this.watchPressure();
  }

  addFork(rrefId: string, fork: string, holder: string): boolean {
    debug(3, "rref", `adding fork ${fork} of ${rrefId}`);
    this.entry(rrefId).forks.set(fork, holder);
    return true;
  }

  /**
   * A worker left the group: the forks it held can never be deleted by it, so they are dropped
   * here; RRefs it owned will never be confirmed, so nothing waits for that any longer.
   */
  holderLeft(name: string): void {
    for (const u of this.liveUsers.values())
      if (u.owner === name) {
        const r = u.ref.deref();
        if (r && !r.confirmedByOwner())
          r.fail(new WorkerUnavailableError(`the owner of ${r.toString()}, "${name}", left the group`, name));
      }
    for (const [rrefId, e] of [...this.owned])
      for (const [fork, holder] of [...e.forks]) if (holder === name) this.dropFork(rrefId, fork);
  }

  private lowBytes = Infinity;
  private lastSample = -Infinity;
  private lastCollectRound = -Infinity;
  private collectRounds = 0;

  /** How many times this owner asked its RRefs' holders to collect garbage. */
  get collectRequests(): number {
    return this.collectRounds;
  }

  private pressureTimer: NodeJS.Timeout | null = null;

  /** Step 5: while values are owned here, samples memory every second even when no new value arrives. */
  private watchPressure(): void {
    if (this.pressureTimer || !(COLLECT_BYTES > 0)) return;
    this.pressureTimer = setInterval(() => {
      if (this.owned.size === 0 || this.closed) {
        clearInterval(this.pressureTimer!);
        this.pressureTimer = null;
        return;
      }
      this.checkPressure();
    }, COLLECT_INTERVAL_MS);
    // NB: never keeps a process alive
    this.pressureTimer.unref();
  }

  private usersSinceCollect = 0;
  private idleTimer: NodeJS.Timeout | null = null;
  private firstUserAt = 0;
  private idleCollections = 0;

  /** How many step-6 collections this context started. */
  get idleCollectRequests(): number {
    return this.idleCollections;
  }

  /** Step 6: a user RRef was made here; arms (or pushes back) the idle collection. */
  private userMade(): void {
    if (++this.usersSinceCollect < IDLE_COLLECT_FORKS || !(COLLECT_BYTES > 0)) return;
    const now = performance.now();
    if (this.usersSinceCollect === IDLE_COLLECT_FORKS) this.firstUserAt = now;
    if (this.idleTimer) clearTimeout(this.idleTimer);
    const wait = Math.max(0, Math.min(IDLE_COLLECT_QUIET_MS, this.firstUserAt + IDLE_COLLECT_MAX_MS - now));
    this.idleTimer = setTimeout(() => {
      this.idleTimer = null;
      this.usersSinceCollect = 0;
      if (this.closed) return;
      this.idleCollections++;
      debug(2, "rref", "quiet after a burst of user RRefs: collecting so dropped ones are deleted");
      collectGarbage();
    }, wait);
    this.idleTimer.unref();
  }

  /** Step 5 of the protocol: asks the holders of our values' forks to collect when our memory has grown. */
  private checkPressure(): void {
    if (!(COLLECT_BYTES > 0)) return;
    // NB: sampled at most every 10 ms, so remote() at tens of thousands a second pays nothing measurable
    const t = performance.now();
    if (t - this.lastSample < 10) return;
    this.lastSample = t;
    // NB: V8's count of off-heap memory: typed-array storage and the addon's pooled blocks alike (~1 µs)
    const bytes = v8.getHeapStatistics().external_memory;
    if (bytes < this.lowBytes) this.lowBytes = bytes;
    if (bytes - this.lowBytes < COLLECT_BYTES) return;
    const now = performance.now();
    if (now - this.lastCollectRound < COLLECT_INTERVAL_MS) return;
    this.lastCollectRound = now;
    this.lowBytes = bytes;
    const me = this.host().name;
    const holders = new Set<string>();
    let unknown = false;
    for (const e of this.owned.values())
      for (const h of e.forks.values())
        if (h) holders.add(h);
        else unknown = true;
    const members = new Set(this.host().peerNames());
    if (unknown) for (const p of members) holders.add(p);
    // NB: a holder that left cannot collect (holderLeft drops its forks; this covers the gap)
    for (const h of holders) if (h !== me && !members.has(h)) holders.delete(h);
    if (holders.size === 0) return;
    this.collectRounds++;
    debug(
      2,
      "rref",
      `${(bytes / 2 ** 20).toFixed(0)} MiB of buffers here: asking ${[...holders].join(", ")} to collect`,
    );
    for (const h of holders) {
      if (h === me) collectGarbage();
      else void this.host().notify(h, "collect", {});
    }
    // NB: the deletions those collections cause make our values garbage, but only our own
    // collection returns their memory, and an idle owner may not run one: collect after them
    setTimeout(() => collectGarbage(), 2 * COLLECT_INTERVAL_MS).unref();
  }

  valueOf(rrefId: string): Promise<unknown> {
    return this.entry(rrefId).value;
  }

  localValue(rrefId: string): unknown {
    const e = this.owned.get(rrefId);
    if (!e) throw new RpcError(`no RRef ${rrefId} is owned by "${this.host().name}" (already deleted?)`);
    if (!e.settled) throw new RpcError("the RRef's value is not ready yet; await rref.toHere() on the owner first");
    if (!e.settled.ok) throw e.settled.error;
    return e.settled.value;
  }

  /** A fork ended (GC or shutdown): tell the owner, or drop it here when we are the owner. */
  forkGone(rrefId: string, owner: string, fork: string): void {
    debug(3, "rref", `fork ${fork} of ${rrefId} (owner ${owner}) was collected`);
    this.liveUsers.delete(fork);
    if (owner === this.host().name) this.dropFork(rrefId, fork);
    else if (!this.closed) void this.host().notify(owner, "userDelete", { rrefId, fork });
  }

  dropFork(rrefId: string, fork: string): void {
    debug(3, "rref", `dropping fork ${fork} of ${rrefId}`);
    const e = this.owned.get(rrefId);
    if (!e) return;
    e.forks.delete(fork);
    // NB: a pending entry (its REMOTE_CALL still on the way) stays: the creator's fork is coming.
    if (e.forks.size === 0 && !e.provide) this.owned.delete(rrefId);
  }

  /** Makes (or resolves) the RRef object for an incoming descriptor. */
  materialize(d: RRefWire): RRef<unknown> {
    const host = this.host();
    if (d.owner === host.name) {
      // it came home: the owner's own RRef object (a fork the owner tracks), and the parent may let go
      const local = new RRef<unknown>(undefined, {
        host,
        rrefId: d.rrefId,
        owner: d.owner,
        fork: d.fork,
        confirmed: true,
      });
      this.addFork(d.rrefId, d.fork, host.name);
      (this.ownedArrivals ??= []).push(this.entry(d.rrefId).value);
      if (!d.ownerFork) void host.notify(d.parent, "childAccept", { fork: d.fork });
      return local;
    }
    const r = new RRef<unknown>(undefined, {
      host,
      rrefId: d.rrefId,
      owner: d.owner,
      fork: d.fork,
      confirmed: d.ownerFork,
    });
    this.liveUsers.set(d.fork, { rrefId: d.rrefId, owner: d.owner, ref: new WeakRef(r) });
    this.userMade();
    // NB: as PyTorch's callee, a call runs once the owner confirmed the forks among its arguments
    if (!d.ownerFork) (this.ownedArrivals ??= []).push(r.settled());
    if (!d.ownerFork) void host.notify(d.owner, "forkRequest", { rrefId: d.rrefId, fork: d.fork, parent: d.parent });
    return r;
  }

  /**
   * What a call must wait for before its target runs: the values of RRefs owned here and the
   * owner's confirmation of user forks that the last decoded message carried (null when none).
   */
  takeOwnedArrivals(): Promise<unknown>[] | null {
    const a = this.ownedArrivals;
    this.ownedArrivals = null;
    return a;
  }

  /** The descriptor for sending `r`: mints a child fork (see the protocol above). */
  describe(r: RRef<unknown>): RRefWire {
    const host = this.host();
    const fork = this.newId();
    if (r.isOwner()) {
      // NB: the receiver is not known here (the encoder does not say where the message goes)
      this.addFork(r.rrefId, fork, "");
      return { rrefId: r.rrefId, owner: r.ownerName(), fork, parent: host.name, ownerFork: true };
    }
    this.pendingChildren.set(fork, r);
    return { rrefId: r.rrefId, owner: r.ownerName(), fork, parent: host.name, ownerFork: false };
  }

  /**
   * The owner accepted the fork `fork`: sent to the worker that forked it (the parent may now be
   * released) and to the worker that received it (its RRef is now confirmed by the owner).
   */
  childAccepted(fork: string): void {
    this.pendingChildren.delete(fork);
    this.liveUsers.get(fork)?.ref.deref()?.confirm();
  }

  /** A user RRef made by remote() here. */
  userCreated(r: RRef<unknown>): void {
    this.liveUsers.set(r.fork, { rrefId: r.rrefId, owner: r.ownerName(), ref: new WeakRef(r) });
    this.userMade();
  }

  /** At shutdown: every live user fork made here is deleted at its owner; resolves once the deletions are sent. */
  async releaseAll(): Promise<void> {
    const sent = [...this.liveUsers].map(([fork, u]) =>
      this.host().notify(u.owner, "userDelete", { rrefId: u.rrefId, fork }),
    );
    this.liveUsers.clear();
    this.pendingChildren.clear();
    this.closed = true;
    if (this.idleTimer) clearTimeout(this.idleTimer);
    if (this.pressureTimer) clearInterval(this.pressureTimer);
    this.idleTimer = this.pressureTimer = null;
    await Promise.all(sent);
  }
}

/** An RRef on the wire. */
export interface RRefWire {
  rrefId: string;
  owner: string;
  fork: string;
  parent: string;
  ownerFork: boolean;
}

function str(v: unknown, what: string): string {
  if (typeof v !== "string" || v.length === 0 || v.length > 512)
    throw new ProtocolError(`bad RRef descriptor: ${what}`);
  return v;
}

registerWireType(0x20, {
  Class: RRef,
  encode(r: RRef<unknown>, ctx) {
    const rrefs = ctx.user as RRefContext | undefined;
    if (!rrefs) throw new RpcError("RRefs can only be sent through the RPC agent");
    if (r.creationFailure) throw r.creationFailure;
    const d = rrefs.describe(r);
    return [d.rrefId, d.owner, d.fork, d.parent, d.ownerFork];
  },
  decode(data, ctx) {
    const rrefs = ctx.user as RRefContext | undefined;
    if (!rrefs) throw new ProtocolError("an RRef arrived outside the RPC agent");
    if (!Array.isArray(data) || data.length !== 5) throw new ProtocolError("bad RRef descriptor");
    return rrefs.materialize({
      rrefId: str(data[0], "id"),
      owner: str(data[1], "owner"),
      fork: str(data[2], "fork"),
      parent: str(data[3], "parent"),
      ownerFork: data[4] === true,
    });
  },
});
