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
 *    receiver, if it is not the owner, makes a user RRef for c, holds it
 *    (pendingUsers: a call waiting for it is reachable only through it) and
 *    sends RREF_FORK_REQUEST to the owner, which registers c, confirms the child and
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
import { ProtocolError, RpcError } from "../errors/index.js";
import { registerWireType } from "../wire/index.js";
import { type Ahead, sameScope } from "./fetch_ahead.js";
import { hookScope } from "./hooks.js";
import { currentAgent } from "./process.js";
import type { WorkerInfo } from "./rendezvous/index.js";
import type { RRefContext } from "./rref_context.js";

/** What an RRef needs from the agent that made it. */
export interface RRefHost {
  readonly name: string;
  workerInfo(name?: string): WorkerInfo;
  /** Asks the owner for the value (`ahead`: a fetch ahead, which the owner may decline; ./fetch_ahead.ts). */
  fetch(owner: string, rrefId: string, timeoutMs?: number, ahead?: boolean): Promise<unknown>;
  /** Calls `method(...args)` on the owner's value: kind "sync"/"async" resolve to the result, "remote" returns an RRef. */
  callMethod(
    rref: RRef<unknown>,
    kind: "sync" | "async" | "remote",
    method: string,
    args: unknown[],
    timeoutMs?: number,
  ): unknown;
  /** One-way messages of the protocol above. Never rejects: a failed send is logged (debug) and dropped. */
  notify(
    to: string,
    kind: "forkRequest" | "childAccept" | "userDelete" | "collect",
    body: Record<string, string>,
  ): Promise<void>;
  /** The other workers of the group, for a collection request whose holders are not all known. */
  peerNames(): string[];
  readonly rrefs: RRefContext;
}

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
  /** The value fetched ahead for the first toHere() (./fetch_ahead.ts), or null. */
  private ahead: Ahead | null = null;

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
    const ahead = this.ahead;
    this.ahead = null;
    // NB: a value fetched ahead serves the first toHere() without a timeout in the hook scope it was fetched in
    if (ahead && timeoutMs === undefined && sameScope(ahead.scope, hookScope(this.host))) {
      const got = await ahead.value;
      if (got) return got.v as T;
    }
    return (await this.orFailure(this.host.fetch(this.ownerName_, this.rrefId, timeoutMs))) as T;
  }

  /** @internal a fetch ahead of this RRef's value started, or (null) is no longer used (./fetch_ahead.ts). */
  setAhead(a: Ahead | null): void {
    this.ahead = a;
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
                this.ahead = null; // NB: the method may change the value (./fetch_ahead.ts)
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

function currentHost(): RRefHost {
  const h = currentAgent();
  if (!h) throw new RpcError("RPC has not been initialized. Call rpc.initRpc before creating an RRef.");
  return h;
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
