/**
 * The RPC agent: one per initRpc. It listens on an authenticated transport,
 * finds peers through the rendezvous store, opens one outgoing connection per
 * peer lazily, and matches replies to pending calls by message id.
 *
 * A call, step by step:
 * 1. Caller: describe the target (builtin / registered / module / shipped
 *    source; a source record shrinks to its hash once the peer has it), encode
 *    {from, target, args} with tensors out of band, write it on the pipe to
 *    the peer, and arm the call's timeout.
 * 2. Callee: decode (a malformed frame closes that connection), materialize
 *    the target (compiled once per peer and hash), call it (classes are
 *    constructed), await the result if it is a promise, and reply RESPONSE or
 *    ERROR on the same connection.
 * 3. Caller: RESPONSE resolves, ERROR rejects with a RemoteError (worker,
 *    remote name and stack); if the callee lacks shipped code the caller
 *    resends it in full once. A connection that dies rejects every call
 *    pending on it with WorkerUnavailableError at once.
 */
import os from "node:os";
import { RpcNotInitializedError, RpcTimeoutError, ValueError, WorkerUnavailableError } from "../errors/index.js";
import { debug } from "../util/index.js";
import type { TransportListener } from "../transport/interface.js";
import { tcpTransport } from "../transport/tcp/index.js";
import {
  type DecodedMessage,
  MessageType,
  type RemoteErrorRecord,
  decodeControl,
  encodeMessage,
  errorFromWire,
} from "../wire/index.js";
import type { Capabilities, ChannelBuffer } from "../channel/interface.js";
import {
  Pipe,
  type PipeInfo,
  type PipeOptions,
  checkAllowedChannels,
  localCapabilities,
  parseChannelList,
} from "../pipe/index.js";
import { deviceBackendFor } from "../tensor/backend/devices.js";
import {
  type InitConfig,
  Membership,
  StoreClient,
  StoreServer,
  type WorkerInfo,
  rendezvous,
} from "./rendezvous/index.js";
import { type CallKind, type CallRecord, nowMs, profiler } from "./profiler.js";
import { collectGarbage } from "./gc.js";
import { ShutdownSync } from "./shutdown_sync.js";
import { RRef, RRefContext, type RRefHost, setCurrentHost } from "./rref.js";
import {
  BuiltinIndex,
  Registry,
  ShippedCodeCache,
  ShippedCodeMissingError,
  type TargetRecord,
  describeTarget,
  explainReferenceError,
  materializeTarget,
} from "./shipping/index.js";
import { currentShippingScope } from "./shipping/scope.js";
import { LongTimer, checkTimeoutMs } from "./timeouts.js";

interface Pending {
  resolve: (v: unknown) => void;
  reject: (e: Error) => void;
  timer: LongTimer | null;
  peer: string;
  /** The full record, for a resend when the callee lost the shipped code. */
  retry: (() => void) | null;
  /** The profiler's record of this call (while rpc.profiler is enabled). */
  prof: CallRecord | null;
}

interface RequestPayload {
  from: string;
  target: TargetRecord;
  args: unknown[];
  /** Metadata of message hooks, by hook key. */
  ext?: Record<string, unknown>;
}

/** Which message a hook sees: a call's arguments, or the value in its reply. */
export type HookedMessageKind = "request" | "response";

/**
 * A per-message extension point, so layers above rpc (distributed autograd;
 * device maps) attach metadata to calls and replies without the agent
 * knowing them. Metadata travels in the payload under `ext[key]`.
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
    to: string;
    kind: HookedMessageKind;
    values: unknown;
    /** For a reply: the metadata this hook attached to the request. */
    requestMeta?: unknown;
  }): { values: unknown; meta?: unknown } | undefined;
  incoming?(msg: { from: string; kind: HookedMessageKind; values: unknown; meta: unknown }): unknown;
  around?<T>(meta: unknown, from: string, run: () => Promise<T>): Promise<T>;
}

const messageHooks: MessageHook[] = [];

/** Installs a message hook for every agent of this process (replacing one with the same key). */
export function addMessageHook(hook: MessageHook): void {
  const i = messageHooks.findIndex((h) => h.key === hook.key);
  if (i >= 0) messageHooks[i] = hook;
  else messageHooks.push(hook);
}

/** Runs the outgoing hooks over `values`; returns the values to send and the ext record (undefined when empty). */
function hookOutgoing(
  to: string,
  kind: HookedMessageKind,
  values: unknown,
  requestExt?: Record<string, unknown>,
): { values: unknown; ext: Record<string, unknown> | undefined } {
  let ext: Record<string, unknown> | undefined;
  for (const h of messageHooks) {
    if (!h.outgoing) continue;
    const r = h.outgoing({ to, kind, values, requestMeta: requestExt?.[h.key] });
    if (!r) continue;
    values = r.values;
    if (r.meta !== undefined) (ext ??= {})[h.key] = r.meta;
  }
  return { values, ext };
}

function hookIncoming(
  from: string,
  kind: HookedMessageKind,
  values: unknown,
  ext: Record<string, unknown> | undefined,
): unknown {
  for (const h of messageHooks) if (h.incoming) values = h.incoming({ from, kind, values, meta: ext?.[h.key] });
  return values;
}

function hookAround<T>(ext: Record<string, unknown> | undefined, from: string, run: () => Promise<T>): Promise<T> {
  let f = run;
  for (const h of messageHooks) {
    if (!h.around) continue;
    const inner = f;
    const around = h.around.bind(h);
    f = () => around(ext?.[h.key], from, inner);
  }
  return f();
}

/** Options for one call. */
export interface CallOptions {
  /** ms; 0 = no timeout; default: the agent's rpcTimeoutMs (rpc.getRpcTimeout()). */
  timeoutMs?: number;
}

/** A destination, as PyTorch takes it: a worker's name, its rank, or its WorkerInfo. */
export type WorkerRef = string | number | WorkerInfo;

/**
 * The address peers should dial for this worker: TPRPC_ADDR when set (multi-NIC hosts), the
 * loopback address for single-host groups, else this host's first non-internal IPv4 address.
 */
function advertisedHost(bindHost: string): string {
  const forced = process.env.TPRPC_ADDR;
  if (forced) return forced;
  if (bindHost !== "0.0.0.0") return bindHost;
  for (const addrs of Object.values(os.networkInterfaces()))
    for (const a of addrs ?? []) if (a.family === "IPv4" && !a.internal) return a.address;
  return os.hostname();
}

/** Treats a function whose source starts with `class` as a constructor. */
function isClass(fn: unknown): fn is new (...a: unknown[]) => unknown {
  return typeof fn === "function" && /^class[\s{]/.test(Function.prototype.toString.call(fn));
}

/** One pipe plus what the agent needs to talk on it. */
class Peer {
  constructor(
    readonly pipe: Pipe,
    private readonly rrefs: RRefContext,
    onMessage: (m: DecodedMessage, peer: Peer, bytes: number, waits: Promise<unknown>[] | null) => void,
    onDead: (peer: Peer, e: Error | null) => void,
  ) {
    pipe.onMessage((r) => {
      const bytes = r.buffers.map((b) => (b.kind === "cpu" ? b.bytes : new Uint8Array(0)));
      // NB: a decode error propagates to the pipe, which closes (a malformed frame closes that pipe)
      const m = decodeControl(r.control, bytes, { user: rrefs });
      onMessage(m, this, r.bytes, rrefs.takeOwnedArrivals());
    });
    pipe.onClose((e) => onDead(this, e));
  }

  get name(): string {
    return this.pipe.peerName;
  }

  /** Encodes and sends one message; resolves to the bytes sent once it left. */
  send(type: MessageType, id: number, payload: unknown): Promise<number> {
    let m;
    try {
      m = encodeMessage({ type, id, payload }, { user: this.rrefs });
    } catch (e) {
      return Promise.reject(e);
    }
    let bytes = m.header.byteLength + m.payload.byteLength + 16;
    // NB: the wire layer hands out host bytes for every tensor today (its descriptor names the device,
    // and the receiver's decoder places it), so every buffer travels as cpu → cpu.
    const buffers = m.buffers.map((b) => {
      bytes += b.byteLength + 16;
      return { buffer: { kind: "cpu", bytes: b } as ChannelBuffer };
    });
    return this.pipe.send({ control: [m.header, m.payload], buffers }).then(() => bytes);
  }
}

/** The registered target behind RRef proxies: runs `method(...args)` on the owner's value. */
async function rrefMethodCall(rref: RRef<Record<string, unknown>>, method: string, args: unknown[]): Promise<unknown> {
  const obj = await rref.toHere();
  const fn = obj[method];
  if (typeof fn !== "function") throw new TypeError(`the RRef's value has no method "${method}"`);
  return (fn as (...a: unknown[]) => unknown).apply(obj, args);
}

/** How the agent's pipes choose channels. */
export interface AgentPipeOptions {
  /** Allowed channel names ("shm,tcp" or an array); default env TPRPC_CHANNELS, else every viable one. */
  channels?: string | readonly string[];
}

/** CUDA devices this worker can offer a channel for (0 without a CUDA backend). */
function cudaDevices(): number {
  try {
    return deviceBackendFor("cuda")?.deviceCount() ?? 0;
  } catch {
    return 0;
  }
}

export class Agent implements RRefHost {
  readonly registry = new Registry();
  readonly rrefs: RRefContext = new RRefContext(() => this);
  private readonly codeCache = new ShippedCodeCache();
  private readonly describeCache = new WeakMap<
    object,
    { scope: object; deps: [string, unknown][]; record: TargetRecord }
  >();
  private readonly pending = new Map<number, Pending>();
  private readonly outgoing = new Map<string, Promise<Peer>>();
  private readonly inbound = new Set<Peer>();
  private readonly running = new Set<Promise<unknown>>();
  private nextId = 1;
  private closed = false;
  /** The default timeout of calls (initRpc's rpcTimeoutMs; rpc.setRpcTimeout changes it). */
  rpcTimeoutMs: number;

  private constructor(
    readonly config: InitConfig,
    private readonly sdk: Readonly<Record<string, unknown>>,
    private readonly listener: TransportListener,
    private readonly store: StoreClient,
    private readonly storeServer: StoreServer | null,
    readonly membership: Membership,
    private readonly advertised: string,
    private readonly caps: Capabilities,
  ) {
    this.rpcTimeoutMs = config.rpcTimeoutMs;
    this.registry.register("__tprpcRRefCall", rrefMethodCall);
    setCurrentHost(this);
    // NB: a worker that leaves (or dies: its store claims are ephemeral) fails our calls to it now,
    // not at their timeouts.
    membership.onLeave((w) => this.workerLeft(w.name));
    listener.onConnection((conn) => {
      if (this.closed) return conn.close();
      const peer = new Peer(
        Pipe.accept(conn, this.pipeOptions()),
        this.rrefs,
        (m, p, _bytes, waits) => this.onInbound(m, p, waits),
        (p) => this.inbound.delete(p),
      );
      this.inbound.add(peer);
    });
    listener.onRefused((remote, e) => debug(1, "rpc", `refused a connection from ${remote}: ${e.message}`));
  }

  /** initRpc's work: listen, host the store on rank 0, rendezvous. */
  static async start(
    config: InitConfig,
    sdk: Readonly<Record<string, unknown>>,
    onCreated?: (agent: Agent) => void,
    pipes: AgentPipeOptions = {},
  ): Promise<Agent> {
    // the channels this worker offers: options.channels, else TPRPC_CHANNELS, else every viable one
    const allowed = parseChannelList(pipes.channels ?? process.env.TPRPC_CHANNELS);
    checkAllowedChannels(allowed);
    const caps = localCapabilities(config.name, allowed, { cpu: 1, cuda: cudaDevices() });
    const bindHost = /^(127\.|localhost$|::1$|\[::1\]$)/.test(config.host)
      ? config.host.replace(/^\[|\]$/g, "")
      : "0.0.0.0";
    const listener = await tcpTransport.listen({ host: bindHost, port: 0, secret: config.secret });
    let server: StoreServer | null = null;
    let store: StoreClient | null = null;
    try {
      if (config.rank === 0)
        server = await StoreServer.listen({ host: bindHost, port: config.port, secret: config.secret });
      store = await StoreClient.connect({
        host: config.host,
        port: config.port,
        secret: config.secret,
        timeoutMs: config.initTimeoutMs,
      });
      const advertised = advertisedHost(bindHost);
      const membership = await rendezvous(store, {
        name: config.name,
        rank: config.rank,
        worldSize: config.worldSize,
        address: { host: advertised, port: listener.address.port },
        timeoutMs: config.initTimeoutMs,
      });
      if (config.worldSize !== undefined) {
        // NB: as PyTorch's init: a static group's maps may only name its members (known only now)
        const names = new Set(membership.workers.map((w) => w.name));
        const strangers = [...config.deviceMaps.keys()].filter((n) => !names.has(n));
        if (strangers.length > 0) {
          await membership.leave().catch(() => undefined);
          throw new ValueError(
            `worker "${config.name}": deviceMaps names ${strangers.map((n) => `"${n}"`).join(", ")}, not in the group ` +
              `(${[...names].join(", ")}); device maps may only name the group's workers`,
          );
        }
      }
      const agent = new Agent(config, sdk, listener, store, server, membership, advertised, caps);
      // NB: before any call it serves can run (they may already be queued), so shipped code sees the API ready
      onCreated?.(agent);
      return agent;
    } catch (e) {
      store?.close();
      await server?.close();
      await listener.close();
      throw e;
    }
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
      const w = Number.isInteger(to) ? this.membership.workers.find((x) => x.id === to) : undefined;
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
      () => r.confirm(),
      (e: Error) => {
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
  fetch(owner: string, rrefId: string, timeoutMs?: number): Promise<unknown> {
    return this.request(owner, MessageType.RREF_FETCH, null, [], { rrefId }, timeoutMs);
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
    // NB: never throws, also not synchronously for a worker that has left (peer() looks it up)
    return Promise.resolve()
      .then(() => this.peer(to))
      .then((p) => p.send(type, 0, { from: this.name, ...body }).then(() => undefined))
      .catch((e: Error) => debug(1, "rpc", `could not send ${kind} to ${to}: ${e.message}`));
  }

  /** A request that expects RESPONSE or ERROR under its id. */
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
      this.workerInfo(to);
      out = hookOutgoing(to, "request", args);
      if (target !== null) record = this.describe(target, currentShippingScope());
    } catch (e) {
      return Promise.reject(e);
    }
    const id = this.nextId++;
    const kind: CallKind =
      type === MessageType.REMOTE_CALL ? "remote" : type === MessageType.RREF_FETCH ? "fetch" : "call";
    const prof = profiler.begin(id, kind, target, to);
    const done = new Promise<unknown>((resolve, reject) => {
      const p: Pending = { resolve, reject, timer: null, peer: to, retry: null, prof };
      if (timeoutMs > 0)
        p.timer = new LongTimer(timeoutMs, () => {
          this.pending.delete(id);
          reject(new RpcTimeoutError(`RPC to "${to}" ran out of time after ${timeoutMs} ms (timeoutMs)`, timeoutMs));
        });
      this.pending.set(id, p);
    });
    const send = (rec: TargetRecord | null) =>
      this.peer(to)
        .then((peer) =>
          peer.send(type, id, {
            from: this.name,
            target: rec,
            args: [...(out.values as unknown[])],
            ...extra,
            ...(out.ext ? { ext: out.ext } : {}),
            ...(prof ? { prof: 1 } : {}),
          }),
        )
        .then(
          (bytes) => {
            if (prof) {
              prof.sentAt ??= nowMs();
              prof.bytesSent += bytes;
            }
          },
          (e: Error) => this.settle(id, e),
        );
    if (record) {
      const full = record;
      this.pending.get(id)!.retry = () => {
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
    for (const [id, p] of this.pending)
      if (p.peer === name)
        this.settle(id, new WorkerUnavailableError(`worker "${name}" left the group before replying`, name));
  }

  /**
   * Rejects every call this worker is waiting on with `reason` (a notebook
   * interrupt); the pipes stay open, so late replies are dropped and the
   * group stays usable. Returns how many calls were cancelled.
   */
  cancelPending(reason: Error): number {
    const ids = [...this.pending.keys()];
    for (const id of ids) this.settle(id, reason);
    return ids.length;
  }

  private settle(id: number, error: Error | null, value?: unknown): void {
    const p = this.pending.get(id);
    if (!p) return; // already timed out or settled
    this.pending.delete(id);
    p.timer?.cancel();
    if (p.prof) {
      p.prof.replyAt ??= nowMs();
      if (error) p.prof.error = error.message;
    }
    if (error) p.reject(error);
    else p.resolve(value);
  }

  private pipeOptions(): PipeOptions {
    return { local: this.caps, secret: this.config.secret, host: this.advertised, timeoutMs: 10_000 };
  }

  /** The outgoing pipe to `name`, opened on first use. */
  private peer(name: string): Promise<Peer> {
    let p = this.outgoing.get(name);
    if (!p) {
      const info = this.workerInfo(name);
      p = tcpTransport
        .connect({ host: info.host, port: info.port, secret: this.config.secret, timeoutMs: 10_000 })
        .then((conn) => Pipe.connect(conn, name, this.pipeOptions()))
        .then(
          (pipe) =>
            new Peer(
              pipe,
              this.rrefs,
              (m, _peer, bytes) => this.onReply(m, name, bytes),
              (peer, e) => this.onPeerDead(peer, e),
            ),
        );
      p.catch(() => this.outgoing.delete(name));
      this.outgoing.set(name, p);
    }
    return p;
  }

  /** The pipe to `name` (opened if needed): its transport and the channel per device pair. */
  async pipeInfo(name: string): Promise<PipeInfo> {
    return (await this.peer(name)).pipe.info();
  }

  private onPeerDead(peer: Peer, e: Error | null): void {
    if (this.outgoing.get(peer.name) !== undefined) this.outgoing.delete(peer.name);
    // NB: the pipe already says "worker X is unavailable (...)" when its connection closed; don't wrap it twice
    const message =
      e instanceof WorkerUnavailableError
        ? e.message
        : `worker "${peer.name}" is unavailable (its connection closed${e ? `: ${e.message}` : ""})`;
    for (const [id, p] of this.pending)
      if (p.peer === peer.name) this.settle(id, new WorkerUnavailableError(message, peer.name));
    this.codeCache.forgetPeer(peer.name);
  }

  private onReply(m: DecodedMessage, from: string, bytes: number): void {
    const body = m.payload as {
      value?: unknown;
      error?: RemoteErrorRecord;
      ext?: Record<string, unknown>;
      prof?: unknown;
    };
    const prof = this.pending.get(m.id)?.prof;
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
        value = hookIncoming(from, "response", body.value, body.ext);
      } catch (e) {
        this.settle(m.id, e as Error);
        return;
      }
      this.settle(m.id, null, value);
    } else if (m.type === MessageType.ERROR) {
      const rec = body.error!;
      const p = this.pending.get(m.id);
      if (rec.name === "ShippedCodeMissingError" && p?.retry) {
        const retry = p.retry;
        p.retry = null;
        retry();
        return;
      }
      this.settle(m.id, errorFromWire(rec, from));
    }
  }

  /** Materializes and runs a request's target (classes are constructed, promises awaited). */
  private async runTarget(req: RequestPayload): Promise<unknown> {
    const fn = await materializeTarget(req.target, {
      sdk: this.sdk,
      registry: this.registry,
      cache: this.codeCache,
      peer: req.from,
      workerName: this.name,
    });
    const args = hookIncoming(req.from, "request", req.args, req.ext) as unknown[];
    try {
      return await hookAround(req.ext, req.from, async () =>
        isClass(fn) ? new fn(...args) : await (fn as (...a: unknown[]) => unknown)(...args),
      );
    } catch (e) {
      throw explainReferenceError(e);
    }
  }

  /**
   * Serves one message from `peer`. `waits`: for RRefs among the arguments, the values of those
   * owned here and the owner's confirmation of the others (RRefContext.takeOwnedArrivals); the
   * target runs once they settle, so it can use localValue() and sees confirmed RRefs (PyTorch's
   * callee waits for both the same way).
   */
  private onInbound(m: DecodedMessage, peer: Peer, waits: Promise<unknown>[] | null): void {
    const body = m.payload as RequestPayload & { rrefId?: string; fork?: string; parent?: string; prof?: unknown };
    switch (m.type) {
      case MessageType.RREF_USER_DELETE:
        this.rrefs.dropFork(body.rrefId!, body.fork!);
        return;
      case MessageType.RREF_CHILD_ACCEPT:
        this.rrefs.childAccepted(body.fork!);
        return;
      case MessageType.RREF_COLLECT:
        collectGarbage();
        return;
      case MessageType.RREF_FORK_REQUEST:
        // the owner registers the child, then lets the parent go and confirms the child
        if (this.rrefs.addFork(body.rrefId!, body.fork!, body.from)) {
          void this.notify(body.parent!, "childAccept", { fork: body.fork! });
          if (body.from !== body.parent) void this.notify(body.from, "childAccept", { fork: body.fork! });
        }
        return;
      case MessageType.REQUEST:
      case MessageType.REMOTE_CALL:
      case MessageType.RREF_FETCH:
        break;
      default:
        debug(1, "rpc", `ignoring a message of type ${m.type} from ${body.from}`);
        return;
    }
    const work = (async () => {
      const t0 = body.prof === 1 ? nowMs() : 0;
      try {
        let value: unknown = null;
        if (waits && m.type !== MessageType.RREF_FETCH) await Promise.allSettled(waits);
        if (m.type === MessageType.REQUEST) value = await this.runTarget(body);
        else if (m.type === MessageType.RREF_FETCH) value = await this.rrefs.valueOf(body.rrefId!);
        else {
          // REMOTE_CALL: the owner keeps the value (or its error, for toHere); the reply, once the value
          // is made, is the confirmation (the caller's timeout covers making it, as PyTorch's does)
          const made = this.runTarget(body);
          this.rrefs.own(body.rrefId!, made, body.fork!, body.from);
          await made.catch(() => undefined);
        }
        const out = hookOutgoing(body.from, "response", value, body.ext);
        await peer.send(MessageType.RESPONSE, m.id, {
          value: out.values,
          ...(out.ext ? { ext: out.ext } : {}),
          // NB: the caller's profiler asked for the span its target ran here
          ...(t0 ? { prof: [t0, nowMs()] } : {}),
        });
      } catch (e) {
        const err = e instanceof Error ? e : new Error(String(e));
        if (!(err instanceof ShippedCodeMissingError)) debug(2, "rpc", `call from ${body.from} failed: ${err.message}`);
        await peer.send(MessageType.ERROR, m.id, { error: err }).catch(() => undefined);
      }
    })();
    this.running.add(work);
    void work.finally(() => this.running.delete(work));
  }

  /** Calls this worker waits on plus calls it serves. */
  private activeCalls(): number {
    return this.pending.size + this.running.size;
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
    if (!this.rrefs.closed) void this.rrefs.releaseAll();
    this.closed = true;
    setCurrentHost(null);
    for (const id of [...this.pending.keys()])
      this.settle(id, new RpcNotInitializedError("RPC was shut down before this call completed"));
    for (const p of this.outgoing.values())
      void p.then(
        (peer) => peer.pipe.close(),
        () => undefined,
      );
    for (const p of this.inbound) p.pipe.close();
    await this.membership.leave().catch(() => undefined);
    this.store.close();
    await this.listener.close();
    await this.storeServer?.close();
    if (failure) throw failure;
  }
}
