/**
 * The RPC agent: one per initRpc (and several per process in the in-process
 * test groups). It joins the group (./join.ts), keeps one outgoing pipe per
 * peer (opened lazily) and the inbound ones peers opened, sends calls and
 * matches their replies by message id (./pending_calls.ts), and serves what
 * arrives (./serving.ts). Nothing of it is process-global: which agent is
 * current is ./process.ts's business.
 * A call, caller's side (the callee's is in ./serving.ts):
 * 1. Resolve the destination (name, rank or WorkerInfo), validate timeoutMs,
 *    run the message hooks' `outgoing` (./hooks.ts: distributed autograd,
 *    device maps) and describe the target (./shipping: builtin / registered /
 *    global / module / shipped source; a source record shrinks to its hash
 *    once the peer has it).
 * 2. Arm the call's timeout, encode {from, target, args} with tensors out of
 *    band (./rpc_pipe.ts, ../wire) and send it on the pipe to the peer.
 * 3. RESPONSE resolves (through the hooks' `incoming`), ERROR rejects with a
 *    RemoteError (worker, remote name and stack); if the callee lacks shipped
 *    code the caller resends it in full once. A pipe that closes, or a member
 *    that leaves, rejects every call pending on it with WorkerUnavailableError.
 */
import { RpcNotInitializedError, RpcTimeoutError, ValueError, WorkerUnavailableError } from "../errors/index.js";
import { debug } from "../util/index.js";
import type { Capabilities } from "../channel/interface.js";
import type { TransportListener } from "../transport/interface.js";
import { tcpTransport } from "../transport/tcp/index.js";
import { type DecodedMessage, MessageType, type RemoteErrorRecord, errorFromWire } from "../wire/index.js";
import { Pipe, type PipeInfo, type PipeOptions } from "../pipe/index.js";
import type { InitConfig, Membership, StoreClient, StoreServer, WorkerInfo } from "./rendezvous/index.js";
import { hookIncoming, hookOutgoing } from "./hooks.js";
import { type AgentPipeOptions, joinGroup } from "./join.js";
import { PendingCalls } from "./pending_calls.js";
import { agentStarted, agentStopped, registrations } from "./process.js";
import { type CallKind, nowMs, profiler, targetName } from "./profiler.js";
import { RRef, type RRefHost } from "./rref.js";
import { RRefContext } from "./rref_context.js";
import { RpcPipe, allocateOnDevice } from "./rpc_pipe.js";
import { CallServer } from "./serving.js";
import { ShutdownSync } from "./shutdown_sync.js";
import { agentState } from "./state_dump.js";
import {
  BuiltinIndex,
  Registry,
  ShippedCodeCache,
  type TargetRecord,
  describeTarget,
  shippedScopeOf,
} from "./shipping/index.js";
import { currentShippingScope } from "./shipping/scope.js";
import { checkTimeoutMs } from "./timeouts.js";

export type { AgentPipeOptions };

/** Options for one call. */
export interface CallOptions {
  /** ms; 0 = no timeout; default: the agent's rpcTimeoutMs (rpc.getRpcTimeout()). */
  timeoutMs?: number;
}

/** A destination, as PyTorch takes it: a worker's name, its rank, or its WorkerInfo. */
export type WorkerRef = string | number | WorkerInfo;

/** The registered target behind RRef proxies: runs `method(...args)` on the owner's value. */
function rrefMethodCall(rref: RRef<Record<string, unknown>>, method: string, args: unknown[]): unknown {
  const run = (obj: Record<string, unknown>): unknown => {
    const fn = obj[method];
    if (typeof fn !== "function") throw new TypeError(`the RRef's value has no method "${method}"`);
    return (fn as (...a: unknown[]) => unknown).apply(obj, args);
  };
  // NB: a value made here runs now, not after an await: the serve queue (./serve_queue.ts) then
  // sees the method's computation inside the turn that started the call
  let obj: Record<string, unknown> | undefined;
  if (rref.isOwner())
    try {
      obj = rref.localValue();
    } catch {
      obj = undefined;
    }
  return obj === undefined || obj === null ? rref.toHere().then(run) : run(obj);
}

export class Agent implements RRefHost {
  readonly registry = new Registry();
  readonly rrefs: RRefContext = new RRefContext(() => this);
  /** @internal shipped code per peer, both ways */
  readonly codeCache = new ShippedCodeCache();
  private readonly describeCache = new WeakMap<
    object,
    { scope: object; deps: [string, unknown][]; record: TargetRecord }
  >();
  private readonly calls = new PendingCalls();
  private readonly server = new CallServer(this);
  private readonly outgoing = new Map<string, Promise<RpcPipe>>();
  /** The outgoing pipes that are open, by peer: a call made mid-computation is sent from there at once. */
  private readonly openPipes = new Map<string, RpcPipe>();
  /** Per peer, sends still waiting for pipeTo() (sent in order before any sent at once). */
  private readonly sendsWaiting = new Map<string, number>();
  private readonly inbound = new Set<RpcPipe>();
  private closed = false;
  /** The default timeout of calls (initRpc's rpcTimeoutMs; rpc.setRpcTimeout changes it). */
  rpcTimeoutMs: number;

  private constructor(
    readonly config: InitConfig,
    /** @internal the SDK namespace shipped code runs against */
    readonly sdk: Readonly<Record<string, unknown>>,
    private readonly listener: TransportListener,
    private readonly store: StoreClient,
    private readonly storeServer: StoreServer | null,
    readonly membership: Membership,
    private readonly advertised: string,
    private readonly caps: Capabilities,
  ) {
    this.rpcTimeoutMs = config.rpcTimeoutMs;
    this.registry.register("__tprpcRRefCall", rrefMethodCall);
    for (const [n, v] of registrations()) this.registry.register(n, v, { replace: true });
    agentStarted(this);
    // NB: a worker that leaves (or dies: its store claims are ephemeral) fails our calls to it now,
    // not at their timeouts.
    membership.onLeave((w) => this.workerLeft(w.name));
    listener.onConnection((conn) => {
      if (this.closed) return conn.close();
      const p = new RpcPipe(
        Pipe.accept(conn, this.pipeOptions()),
        this.rrefs,
        (m, from, _bytes, waits, users) => this.server.serve(m, from, waits, users),
        (from) => this.inbound.delete(from),
      );
      this.inbound.add(p);
    });
    listener.onRefused((remote, e) => debug(1, "rpc", `refused a connection from ${remote}: ${e.message}`));
  }

  /**
   * initRpc's work: join the group (./join.ts) and make the agent. `onCreated` runs before any
   * call it serves can run (they may already be queued), so shipped code sees the API ready.
   */
  static async start(
    config: InitConfig,
    sdk: Readonly<Record<string, unknown>>,
    onCreated?: (agent: Agent) => void,
    pipes: AgentPipeOptions = {},
  ): Promise<Agent> {
    const j = await joinGroup(config, pipes);
    const agent = new Agent(config, sdk, j.listener, j.store, j.storeServer, j.membership, j.advertised, j.caps);
    onCreated?.(agent);
    return agent;
  }

  get name(): string {
    return this.config.name;
  }

  /** Calls cb once if the connection to the rendezvous store (hosted by rank 0) breaks. */
  onGroupLost(cb: () => void): void {
    this.store.onClose(() => {
      if (!this.closed) cb();
    });
  }

  /** RRefHost: the other workers of the group. */
  peerNames(): string[] {
    return this.membership.workers.map((w) => w.name).filter((n) => n !== this.name);
  }

  /** A member by name, rank (its id) or WorkerInfo; WorkerUnavailableError when it is not (or no longer) one. */
  workerInfo(to?: WorkerRef): WorkerInfo {
    const known = () => this.membership.workers.map((x) => `${x.name} (rank ${x.id})`).join(", ");
    if (to === undefined) to = this.name;
    if (typeof to === "number") {
      if (!Number.isInteger(to)) throw new ValueError(`a worker rank is an integer, got ${to}`);
      const w = this.membership.workers.find((x) => x.id === to);
      if (!w) throw new WorkerUnavailableError(`no worker has rank ${to}; known workers: ${known()}`, String(to));
      return w;
    }
    if (typeof to === "object" && to !== null && typeof (to as WorkerInfo).name === "string") {
      const w = this.membership.get(to.name);
      // NB: a WorkerInfo of an earlier member of that name (it left and another joined) is not this one
      if (!w || w.id !== to.id)
        throw new WorkerUnavailableError(
          `worker ${to.name} (rank ${to.id}) is not in the group; known workers: ${known()}`,
          to.name,
        );
      return w;
    }
    if (typeof to !== "string")
      throw new ValueError(
        `a destination is a worker name, rank or WorkerInfo, got ${to === null ? "null" : typeof to}`,
      );
    const w = this.membership.get(to);
    if (!w) throw new WorkerUnavailableError(`unknown worker "${to}"; known workers: ${known()}`, to);
    return w;
  }

  /** Sends one call and returns its result (a Promise: PyTorch's Future). */
  call(to: WorkerRef, target: unknown, args: readonly unknown[], opts: CallOptions = {}): Promise<unknown> {
    let name: string;
    try {
      name = this.workerInfo(to).name;
    } catch (e) {
      return Promise.reject(e);
    }
    return this.request(name, MessageType.REQUEST, target, args, {}, opts.timeoutMs);
  }

  /**
   * remote(): an RRef at once; the owner runs the call, keeps the value and replies once it is
   * made. If that reply does not come within the timeout (or the call could not be sent), the
   * RRef is marked failed: toHere() and every later use reject with that error, as in PyTorch.
   */
  remote<T>(to: WorkerRef, target: unknown, args: readonly unknown[], opts: CallOptions = {}): RRef<T> {
    const owner = this.workerInfo(to).name;
    const rrefId = this.rrefs.newId();
    const fork = this.rrefs.newId();
    const r = new RRef<T>(undefined as T, { host: this, rrefId, owner, fork, confirmed: false });
    this.rrefs.userCreated(r as RRef<unknown>);
    this.request(owner, MessageType.REMOTE_CALL, target, args, { rrefId, fork }, opts.timeoutMs).then(
      () => {
        this.rrefs.creationSettled();
        r.confirm();
      },
      (e: Error) => {
        this.rrefs.creationSettled();
        debug(1, "rpc", `remote() to ${owner} failed: ${e.message}`);
        r.fail(
          e instanceof RpcTimeoutError
            ? new RpcTimeoutError(
                `the remote() call creating ${r.toString()} on "${owner}" ran out of time after ${e.timeoutMs} ms; ` +
                  "the RRef cannot be used (pass a larger timeoutMs to remote())",
                e.timeoutMs,
              )
            : e,
        );
      },
    );
    return r;
  }

  /** RRefHost: the owner's value. */
  fetch(owner: string, rrefId: string, timeoutMs?: number, ahead = false): Promise<unknown> {
    try {
      this.workerInfo(owner);
    } catch (e) {
      return Promise.reject(e);
    }
    const extra: Record<string, string> = ahead ? { rrefId, ahead: "1" } : { rrefId };
    return this.request(owner, MessageType.RREF_FETCH, null, [], extra, timeoutMs);
  }

  /** RRefHost: proxies (r.rpcSync().method(...)). */
  callMethod(
    rref: RRef<unknown>,
    kind: "sync" | "async" | "remote",
    method: string,
    args: unknown[],
    timeoutMs?: number,
  ): unknown {
    const callArgs = [rref, method, args];
    if (kind === "remote") return this.remote(rref.ownerName(), rrefMethodCall, callArgs, { timeoutMs });
    return this.call(rref.ownerName(), rrefMethodCall, callArgs, { timeoutMs });
  }

  /** RRefHost: one-way protocol messages, on our pipe to `to`. */
  notify(
    to: string,
    kind: "forkRequest" | "childAccept" | "userDelete" | "collect",
    body: Record<string, string>,
  ): Promise<void> {
    const type = {
      forkRequest: MessageType.RREF_FORK_REQUEST,
      childAccept: MessageType.RREF_CHILD_ACCEPT,
      userDelete: MessageType.RREF_USER_DELETE,
      collect: MessageType.RREF_COLLECT,
    }[kind];
    if (this.closed) return Promise.resolve();
    // NB: never throws, also not synchronously for a worker that has left (pipeTo() looks it up); and
    // never sends synchronously: RRefs decoded in a message notify their owners while it is decoded
    return Promise.resolve()
      .then(() => this.sendOn(to, (p) => p.send(type, 0, { from: this.name, ...body })))
      .then(() => undefined)
      .catch((e: Error) => debug(1, "rpc", `could not send ${kind} to ${to}: ${e.message}`));
  }

  /**
   * @internal tprpc.distributed's one-way message (MessageType.P2P_MESSAGE, no reply) to `to` (sets
   * `payload.from`):
   * resolves once the pipe wrote it and its channels released the payload's tensors (the sender
   * may change them then); rejects as the pipe does (WorkerUnavailableError when it closed).
   */
  sendOneWay(to: WorkerRef, payload: Record<string, unknown>): Promise<unknown> {
    if (this.closed)
      return Promise.reject(new RpcNotInitializedError("RPC has been shut down. Call rpc.initRpc again."));
    let name: string;
    try {
      name = this.workerInfo(to).name;
    } catch (e) {
      return Promise.reject(e);
    }
    // NB: resolves to the bytes sent, not undefined: one promise less per point-to-point message
    // NB: `payload` is the caller's fresh object: `from` goes on it (no copy per message)
    payload.from = this.name;
    return this.sendOn(name, (p) => p.send(MessageType.P2P_MESSAGE, 0, payload));
  }

  /** A request that expects RESPONSE or ERROR under its id; `to` is a member its caller already looked up. */
  private request(
    to: string,
    type: MessageType,
    target: unknown,
    args: readonly unknown[],
    extra: Record<string, string>,
    timeoutMsOpt?: number,
  ): Promise<unknown> {
    if (this.closed)
      return Promise.reject(new RpcNotInitializedError("RPC has been shut down. Call rpc.initRpc again."));
    let timeoutMs: number;
    let record: TargetRecord | null = null;
    let out: { values: unknown; ext: Record<string, unknown> | undefined };
    try {
      timeoutMs = timeoutMsOpt === undefined ? this.rpcTimeoutMs : checkTimeoutMs(timeoutMsOpt, "timeoutMs");
      if (!Array.isArray(args))
        throw new ValueError(
          `the arguments of a call are an array (args = [x, y]), got ${args === null ? "null" : typeof args}`,
        );
      out = hookOutgoing(this, to, "request", args);
      // NB: code that came here shipped is described in the scope it was compiled with (its helpers)
      if (target !== null) record = this.describe(target, shippedScopeOf(target) ?? currentShippingScope());
    } catch (e) {
      return Promise.reject(e);
    }
    const id = this.calls.newId();
    const kind: CallKind =
      type === MessageType.REMOTE_CALL ? "remote" : type === MessageType.RREF_FETCH ? "fetch" : "call";
    // NB: an RRef proxy's call is recorded under its method's name, not the internal rrefMethodCall
    const method = target === rrefMethodCall ? String(args[1]) : undefined;
    const prof = profiler.begin(id, kind, target, to, method);
    const done = this.calls.open(id, to, timeoutMs, prof, `${kind} ${targetName(target, method)}`);
    const payload = (rec: TargetRecord | null) => ({
      from: this.name,
      target: rec,
      args: [...(out.values as unknown[])],
      ...extra,
      ...(out.ext ? { ext: out.ext } : {}),
      ...(prof ? { prof: 1 } : {}),
    });
    const send = (rec: TargetRecord | null) =>
      this.sendOn(to, (p) => p.send(type, id, payload(rec))).then(
        (bytes) => {
          if (prof) {
            prof.sentAt ??= nowMs();
            prof.bytesSent += bytes;
          }
        },
        (e: Error) => this.calls.settle(id, e),
      );
    if (record) {
      const full = record;
      this.calls.get(id)!.retry = () => {
        this.codeCache.forgetPeer(to);
        void send(full);
      };
      void send(this.codeCache.outgoing(to, full));
    } else void send(null);
    return done;
  }

  /**
   * describeTarget, cached per shipped function: analysing and hashing the source on every call
   * costs more than the rest of a small call. A cached record is reused only while every name it
   * captured still holds the same value in the same scope (a notebook cell that redefines a
   * helper invalidates it); records that captured objects by value are never cached, since the
   * object may have changed inside.
   */
  private describe(target: unknown, scope: object): TargetRecord {
    const sc = scope as Record<string, unknown>;
    if (typeof target === "function") {
      const c = this.describeCache.get(target);
      if (c && c.scope === scope && c.deps.every(([n, v]) => sc[n] === v)) return c.record;
    }
    const record = describeTarget(target as never, {
      builtins: BuiltinIndex.of(this.sdk),
      registry: this.registry,
      scope,
    });
    if (typeof target === "function" && record.kind === "source" && "deps" in record && record.deps) {
      const deps = Object.entries(record.deps);
      if (deps.every(([, d]) => d.kind !== "value" || d.value === null || typeof d.value !== "object"))
        this.describeCache.set(target, { scope, deps: deps.map(([n]) => [n, sc[n]]), record });
    }
    return record;
  }

  /** A member left the group: reject what we wait on from it (its pipe closes on its own). */
  private workerLeft(name: string): void {
    debug(1, "rpc", `worker "${name}" left the group`);
    this.rrefs.holderLeft(name);
    this.calls.failPeer(
      name,
      () => new WorkerUnavailableError(`worker "${name}" left the group before replying`, name),
    );
  }

  /**
   * Rejects every call this worker is waiting on with `reason` (a notebook
   * interrupt); the pipes stay open, so late replies are dropped and the
   * group stays usable. Returns how many calls were cancelled.
   */
  cancelPending(reason: Error): number {
    return this.calls.failAll(reason);
  }

  private pipeOptions(): PipeOptions {
    return {
      local: this.caps,
      secret: this.config.secret,
      host: this.advertised,
      timeoutMs: 10_000,
      allocateDevice: allocateOnDevice,
    };
  }

  /** The outgoing pipe to `name`, opened on first use. */
  private pipeTo(name: string): Promise<RpcPipe> {
    let p = this.outgoing.get(name);
    if (!p) {
      const info = this.workerInfo(name);
      p = tcpTransport
        .connect({ host: info.host, port: info.port, secret: this.config.secret, timeoutMs: 10_000 })
        .then((conn) => Pipe.connect(conn, name, this.pipeOptions()))
        .then(
          (pipe) =>
            new RpcPipe(
              pipe,
              this.rrefs,
              (m, _from, bytes) => this.onReply(m, name, bytes),
              (closed, e) => this.onPipeClosed(closed, e),
            ),
        );
      p.catch(() => this.outgoing.delete(name));
      this.outgoing.set(name, p);
    }
    return p;
  }

  /**
   * Runs `send` on the pipe to `to`: at once when that pipe is open and no earlier send still waits
   * for it, else after those (in call order). NB: at once, not in a microtask, because a target that
   * goes on computing after a call (a backward passing gradients on) would otherwise hold the
   * message until it returns. Never throws; a pipe that cannot open rejects.
   */
  private sendOn<T>(to: string, send: (p: RpcPipe) => Promise<T>): Promise<T> {
    const open = this.openPipes.get(to);
    if (open && !this.sendsWaiting.get(to)) return send(open);
    let p: Promise<RpcPipe>;
    try {
      p = this.pipeTo(to);
    } catch (e) {
      return Promise.reject(e);
    }
    this.sendsWaiting.set(to, (this.sendsWaiting.get(to) ?? 0) + 1);
    const done = (): void => {
      const n = this.sendsWaiting.get(to)! - 1;
      if (n > 0) this.sendsWaiting.set(to, n);
      else this.sendsWaiting.delete(to);
    };
    return p.then(
      (rp) => {
        done();
        if (!rp.pipe.closed && this.outgoing.get(to) === p) this.openPipes.set(to, rp);
        return send(rp);
      },
      (e: Error) => {
        done();
        throw e;
      },
    );
  }

  /** The pipe to `name` (opened if needed): its transport and the channel per device pair. */
  async pipeInfo(name: string): Promise<PipeInfo> {
    return (await this.pipeTo(name)).pipe.info();
  }

  private onPipeClosed(p: RpcPipe, e: Error | null): void {
    const name = p.peerName;
    if (this.outgoing.get(name) !== undefined) this.outgoing.delete(name);
    if (this.openPipes.get(name) === p) this.openPipes.delete(name);
    // NB: the pipe already says "worker X is unavailable (...)" when its connection closed; don't wrap it twice
    const message =
      e instanceof WorkerUnavailableError
        ? e.message
        : `worker "${name}" is unavailable (its connection closed${e ? `: ${e.message}` : ""})`;
    this.calls.failPeer(name, () => new WorkerUnavailableError(message, name));
    this.codeCache.forgetPeer(name);
  }

  private onReply(m: DecodedMessage, from: string, bytes: number): void {
    const body = m.payload as {
      value?: unknown;
      error?: RemoteErrorRecord;
      ext?: Record<string, unknown>;
      prof?: unknown;
    };
    const call = this.calls.get(m.id);
    const prof = call?.prof;
    if (prof) {
      prof.replyAt = nowMs();
      prof.bytesReceived += bytes;
      const span = body.prof;
      if (Array.isArray(span) && typeof span[0] === "number" && typeof span[1] === "number")
        [prof.calleeStart, prof.calleeEnd] = span as [number, number];
    }
    if (m.type === MessageType.RESPONSE) {
      let value: unknown;
      try {
        value = hookIncoming(this, from, "response", body.value, body.ext);
      } catch (e) {
        this.calls.settle(m.id, e as Error);
        return;
      }
      this.calls.settle(m.id, null, value);
    } else if (m.type === MessageType.ERROR) {
      const rec = body.error!;
      if (rec.name === "ShippedCodeMissingError" && call?.retry) {
        const retry = call.retry;
        call.retry = null;
        retry();
        return;
      }
      this.calls.settle(m.id, errorFromWire(rec, from));
    }
  }

  /** @internal what this agent waits for (./state_dump.ts: SIGUSR2 with TPRPC_DEBUG). */
  debugState(): string[] {
    return agentState(this.calls, this.server, this.rrefs, this.sendsWaiting, this.openPipes.values(), this.inbound);
  }

  /** Calls this worker waits on plus calls it serves. */
  private activeCalls(): number {
    return this.calls.size + this.server.active;
  }

  /** Resolves once this worker has no call in flight either way, or at `deadline` (ms since the epoch). */
  private async idle(deadline: number): Promise<void> {
    // NB: polled: shutdown is rare and a 5 ms step costs nothing next to the store round trips
    while (this.activeCalls() > 0 && Date.now() < deadline)
      await new Promise((r) => setTimeout(r, Math.min(5, Math.max(1, deadline - Date.now()))));
  }

  /**
   * Graceful, static groups (as PyTorch's shutdown over TensorPipe): (1) every member reaches
   * shutdown (they keep serving meanwhile); (2) the join loop (./shutdown_sync.ts) until no
   * member has a call in flight; (3) each deletes the user RRefs it made at their owners; (4) a
   * last meeting so nobody closes while deletions are in flight; (5) rank 0 hosts the store and
   * closes it only after every other member said it is done. Members that died are not waited
   * for. Dynamic groups only finish their own calls. A failed meeting (timeout, lost store) is
   * raised after everything is closed. Non-graceful: reject pending calls and close now.
   */
  async shutdown(graceful: boolean, timeoutMs: number): Promise<void> {
    if (this.closed) return;
    const deadline = Date.now() + timeoutMs;
    let failure: Error | null = null;
    if (graceful) {
      const group = !this.membership.dynamic && this.membership.worldSize !== undefined;
      try {
        if (group) {
          const sync = new ShutdownSync(this.store, this.membership, this.name, deadline);
          await sync.meet("enter");
          await sync.join(
            (d) => this.idle(d),
            () => this.activeCalls(),
          );
          await this.rrefs.releaseAll();
          await this.idle(deadline);
          await sync.meet("rrefs");
          this.closed = true;
          if (this.config.rank !== 0) await this.store.set(`shutdown/done/${this.name}`, "1");
          else await sync.meet("done");
        } else {
          await this.idle(deadline);
          await this.rrefs.releaseAll();
        }
      } catch (e) {
        failure = e as Error;
      }
    }
    // NB: releaseAll() cannot reject: it only awaits notify(), which never does
    if (!this.rrefs.closed) void this.rrefs.releaseAll();
    this.closed = true;
    agentStopped(this);
    this.calls.failAll(new RpcNotInitializedError("RPC was shut down before this call completed"));
    for (const p of this.outgoing.values())
      void p.then(
        (o) => o.close(),
        () => undefined,
      );
    for (const p of this.inbound) p.close();
    await this.membership.leave().catch(() => undefined);
    this.store.close();
    await this.listener.close();
    await this.storeServer?.close();
    if (failure) throw failure;
  }
}
