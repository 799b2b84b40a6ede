/**
 * RRefContext: one agent's RRef bookkeeping, the owner's and the users' side
 * of the protocol told at the top of ./rref.ts: values owned here and their
 * forks, forks handed out but not yet accepted (G2), user RRefs made here
 * (deleted at shutdown), what a call must wait for before it runs, and the
 * collection requests of steps 5 and 6.
 */
import v8 from "node:v8";
import { RpcError, WorkerUnavailableError } from "../errors/index.js";
import { debug } from "../util/index.js";
import { canCollectGarbage, collectGarbage } from "./gc.js";
import { RRef, type RRefHost, type RRefWire } from "./rref.js";

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

/** Per-agent RRef bookkeeping: values owned here, and forks handed out but not yet accepted. */
export class RRefContext {
  private readonly owned = new Map<string, OwnerEntry>();
  /** child fork → the parent RRef object, held alive until the owner accepts the child (G2). */
  private readonly pendingChildren = new Map<string, RRef<unknown>>();
  /**
   * Received user RRefs not yet confirmed by their owner, held strongly until then (PyTorch's pending
   * users). NB: a call that waits for one (takeOwnedArrivals) is reachable only through this RRef's
   * confirmation callbacks, and liveUsers holds it weakly: without this hold, a full GC in that wait
   * took the RRef and the call with it; the fork was deleted at its owner and the call never answered.
   */
  private readonly pendingUsers = new Map<string, RRef<unknown>>();
  /** forks of user RRefs made here, for deletion at shutdown. */
  private readonly liveUsers = new Map<string, { rrefId: string; owner: string; ref: WeakRef<RRef<unknown>> }>();
  private counter = 0;
  /** Values of owner RRefs, and confirmations of user forks, decoded since the last takeOwnedArrivals() (see materialize). */
  private ownedArrivals: Promise<unknown>[] | null = null;
  /** RRef ids whose REMOTE_CALL arrived but has not started (see valueKnown). */
  private readonly remotesQueued = new Set<string>();
  /** Unconfirmed user RRefs decoded since the last takeUserArrivals(). */
  private userArrivals: RRef<unknown>[] | null = null;
  closed = false;
  /** The worker the message being encoded goes to (set by RpcPipe.send around the encoding; "" outside it). */
  encodingFor = "";

  constructor(private readonly host: () => RRefHost) {}

  newId(): string {
    return `${this.host().name}:${++this.counter}`;
  }

  /** @internal the workers holding forks of `rrefId` owned here ("" for one the owner cannot tell), for tests. */
  holdersOf(rrefId: string): string[] {
    return [...(this.owned.get(rrefId)?.forks.values() ?? [])];
  }

  /** Values owned here (the live-object count the tests observe). */
  get ownedCount(): number {
    return this.owned.size;
  }

  /** Whether the REMOTE_CALL making `rrefId`'s value has arrived here (queued, running or done; ./fetch_ahead.ts). */
  valueKnown(rrefId: string): boolean {
    const e = this.owned.get(rrefId);
    return (e !== undefined && e.provide === null) || this.remotesQueued.has(rrefId);
  }

  /** A REMOTE_CALL for `rrefId` arrived and waits in the serve queue (own() takes it off). */
  remoteQueued(rrefId: string): void {
    this.remotesQueued.add(rrefId);
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
    this.remotesQueued.delete(rrefId);
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
    for (const [fork, u] of this.liveUsers)
      if (u.owner === name) {
        const r = u.ref.deref();
        this.pendingUsers.delete(fork);
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
  private lastUserAt = 0;
  private idleCollections = 0;
  /** remote() RRefs made here whose creation reply has not come yet (their pending call holds them). */
  private creationsPending = 0;
  /** lastUserAt when the last step-6 collection ran. */
  private collectedUpTo = -1;

  /** How many step-6 collections this context started. */
  get idleCollectRequests(): number {
    return this.idleCollections;
  }

  /** Step 6: a user RRef was made here; arms (or pushes back) the idle collection. */
  private userMade(): void {
    if (++this.usersSinceCollect < IDLE_COLLECT_FORKS || !(COLLECT_BYTES > 0)) return;
    this.lastUserAt = performance.now();
    if (this.idleTimer) return;
    // NB: one timer per burst, not one per RRef (remote() runs at tens of thousands a second): when
    // it fires before the holder has been quiet long enough, it waits out the rest
    this.firstUserAt = this.lastUserAt;
    const arm = (ms: number) => {
      this.idleTimer = setTimeout(() => {
        const now = performance.now();
        const due = Math.min(this.lastUserAt + IDLE_COLLECT_QUIET_MS, this.firstUserAt + IDLE_COLLECT_MAX_MS);
        if (now < due && !this.closed) return arm(due - now);
        if (this.closed) {
          this.idleTimer = null;
          return;
        }
        // NB: a remote() RRef is held by its pending call until the owner replies, so a collection before
        // the replies cannot take the dropped ones: wait for them (a slow or busy owner; seen in CI as
        // 1,156 of 10,000 RRefs left owned), collecting meanwhile only every IDLE_COLLECT_MAX_MS of new ones
        const waiting = this.creationsPending > 0;
        if (waiting && now < this.firstUserAt + IDLE_COLLECT_MAX_MS) return arm(IDLE_COLLECT_QUIET_MS);
        if (!waiting || this.lastUserAt > this.collectedUpTo) {
          if (!collectGarbage()) {
            // NB: one ran less than 250 ms ago, before some of these RRefs were garbage: run ours after it
            if (!waiting && canCollectGarbage()) return arm(300);
          } else {
            this.idleCollections++;
            this.collectedUpTo = this.lastUserAt;
            debug(2, "rref", "quiet after a burst of user RRefs: collecting so dropped ones are deleted");
          }
        }
        if (waiting) {
          this.firstUserAt = now;
          return arm(IDLE_COLLECT_QUIET_MS);
        }
        this.idleTimer = null;
        this.usersSinceCollect = 0;
      }, ms);
      this.idleTimer.unref();
    };
    arm(IDLE_COLLECT_QUIET_MS);
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

  /** Lines for ./state_dump.ts: owned values not made yet, forks not yet accepted, users not yet confirmed. */
  debugState(): string[] {
    const out = [`rrefs: ${this.owned.size} value(s) owned here, ${this.liveUsers.size} user RRef(s) made here`];
    for (const [id, e] of this.owned)
      if (!e.settled)
        out.push(
          `owned ${id}: ${e.provide ? "its REMOTE_CALL has not arrived" : "being made"}; forks ${[...e.forks].map(([f, h]) => `${f}@${h || "?"}`).join(", ")}`,
        );
    for (const fork of this.pendingChildren.keys()) out.push(`fork ${fork} sent, not yet accepted by its owner`);
    for (const [fork, r] of this.pendingUsers)
      out.push(`received ${fork} of ${r.rrefId}: waits for ${r.ownerName()} to confirm it`);
    return out;
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
    if (!d.ownerFork) {
      // NB: as PyTorch's callee, a call runs once the owner confirmed the forks among its arguments;
      // until then the RRef (and so the call) is held here (see pendingUsers)
      this.pendingUsers.set(d.fork, r);
      (this.ownedArrivals ??= []).push(r.settled());
      (this.userArrivals ??= []).push(r);
      void host.notify(d.owner, "forkRequest", { rrefId: d.rrefId, fork: d.fork, parent: d.parent });
    }
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

  /** The unconfirmed user RRefs the last decoded message carried (null when none), for ./fetch_ahead.ts. */
  takeUserArrivals(): RRef<unknown>[] | null {
    const a = this.userArrivals;
    this.userArrivals = null;
    return a;
  }

  /** The descriptor for sending `r`: mints a child fork (see the protocol above). */
  describe(r: RRef<unknown>): RRefWire {
    const host = this.host();
    const fork = this.newId();
    if (r.isOwner()) {
      // NB: the receiver is the pipe's peer (RpcPipe.send sets encodingFor), so holderLeft can drop
      // this fork if the receiver dies; "" (ask every member to collect) where no pipe encodes
      this.addFork(r.rrefId, fork, this.encodingFor);
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
    const pending = this.pendingUsers.get(fork);
    this.pendingUsers.delete(fork);
    (pending ?? this.liveUsers.get(fork)?.ref.deref())?.confirm();
  }

  /** A user RRef made by remote() here. */
  userCreated(r: RRef<unknown>): void {
    this.liveUsers.set(r.fork, { rrefId: r.rrefId, owner: r.ownerName(), ref: new WeakRef(r) });
    this.creationsPending++;
    this.userMade();
  }

  /** The owner replied to a remote() made here (or the call failed): its RRef is no longer held by the call. */
  creationSettled(): void {
    if (this.creationsPending > 0) this.creationsPending--;
  }

  /** At shutdown: every live user fork made here is deleted at its owner; resolves once the deletions are sent. */
  async releaseAll(): Promise<void> {
    const sent = [...this.liveUsers].map(([fork, u]) =>
      this.host().notify(u.owner, "userDelete", { rrefId: u.rrefId, fork }),
    );
    this.liveUsers.clear();
    this.pendingChildren.clear();
    this.pendingUsers.clear();
    this.closed = true;
    if (this.idleTimer) clearTimeout(this.idleTimer);
    if (this.pressureTimer) clearInterval(this.pressureTimer);
    this.idleTimer = this.pressureTimer = null;
    await Promise.all(sent);
  }
}
