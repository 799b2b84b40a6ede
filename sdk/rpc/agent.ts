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
import { RpcNotInitializedError, RpcTimeoutError, WorkerUnavailableError } from "../errors/index.js";
import { debug } from "../util/index.js";
import type { TransportConnection, TransportListener } from "../transport/interface.js";
import { tcpTransport } from "../transport/tcp/index.js";
import {
  type DecodedMessage,
  FrameReader,
  MessageType,
  type RemoteErrorRecord,
  decodeFrame,
  encodeMessage,
  errorFromWire,
} from "../wire/index.js";
import {
  type InitConfig,
  Membership,
  StoreClient,
  StoreServer,
  type WorkerInfo,
  barrier,
  rendezvous,
} from "./rendezvous/index.js";
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

interface Pending {
  resolve: (v: unknown) => void;
  reject: (e: Error) => void;
  timer: NodeJS.Timeout | null;
  peer: string;
  /** The full record, for a resend when the callee lost the shipped code. */
  retry: (() => void) | null;
}

interface RequestPayload {
  from: string;
  target: TargetRecord;
  args: unknown[];
}

/** Options for one call. */
export interface CallOptions {
  /** ms; 0 = no timeout; default: the agent's rpcTimeoutMs. */
  timeoutMs?: number;
}

/** Treats a function whose source starts with `class` as a constructor. */
function isClass(fn: unknown): fn is new (...a: unknown[]) => unknown {
  return typeof fn === "function" && /^class[\s{]/.test(Function.prototype.toString.call(fn));
}

class Peer {
  private readonly reader: FrameReader;
  constructor(
    readonly name: string,
    readonly conn: TransportConnection,
    onMessage: (m: DecodedMessage, peer: Peer) => void,
    onDead: (peer: Peer, e: Error | null) => void,
  ) {
    this.reader = new FrameReader((f) => onMessage(decodeFrame(f), this));
    conn.onData((chunk) => {
      try {
        this.reader.push(chunk);
      } catch (e) {
        debug(1, "rpc", `closing the pipe to ${name}: ${(e as Error).message}`);
        conn.close();
        onDead(this, e as Error);
      }
    });
    conn.onClose((e) => onDead(this, e));
  }

  send(type: MessageType, id: number, payload: unknown): Promise<void> {
    const m = encodeMessage({ type, id, payload });
    return this.conn.write([m.header, m.payload, ...m.buffers]);
  }
}

export class Agent {
  readonly registry = new Registry();
  private readonly codeCache = new ShippedCodeCache();
  private readonly pending = new Map<number, Pending>();
  private readonly outgoing = new Map<string, Promise<Peer>>();
  private readonly inbound = new Set<Peer>();
  private readonly running = new Set<Promise<unknown>>();
  private nextId = 1;
  private closed = false;

  private constructor(
    readonly config: InitConfig,
    private readonly sdk: Readonly<Record<string, unknown>>,
    private readonly listener: TransportListener,
    private readonly store: StoreClient,
    private readonly storeServer: StoreServer | null,
    readonly membership: Membership,
  ) {
    listener.onConnection((conn) => {
      const peer = new Peer(
        conn.remote,
        conn,
        (m, p) => this.onInbound(m, p),
        (p) => this.inbound.delete(p),
      );
      this.inbound.add(peer);
    });
    listener.onRefused((remote, e) => debug(1, "rpc", `refused a connection from ${remote}: ${e.message}`));
  }

  /** initRpc's work: listen, host the store on rank 0, rendezvous. */
  static async start(config: InitConfig, sdk: Readonly<Record<string, unknown>>): Promise<Agent> {
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
      const advertised = bindHost === "0.0.0.0" ? config.host : bindHost;
      const membership = await rendezvous(store, {
        name: config.name,
        rank: config.rank,
        worldSize: config.worldSize,
        address: { host: advertised, port: listener.address.port },
        timeoutMs: config.initTimeoutMs,
      });
      return new Agent(config, sdk, listener, store, server, membership);
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

  workerInfo(name?: string): WorkerInfo {
    const n = name ?? this.name;
    const w = this.membership.get(n);
    if (!w)
      throw new WorkerUnavailableError(
        `unknown worker "${n}"; known workers: ${this.membership.workers.map((x) => x.name).join(", ")}`,
        n,
      );
    return w;
  }

  /** Sends one call and returns its result (a Promise: PyTorch's Future). */
  call(to: string, target: unknown, args: readonly unknown[], opts: CallOptions = {}): Promise<unknown> {
    if (this.closed)
      return Promise.reject(new RpcNotInitializedError("RPC has been shut down. Call rpc.initRpc again."));
    const timeoutMs = opts.timeoutMs ?? this.config.rpcTimeoutMs;
    let record: TargetRecord;
    try {
      this.workerInfo(to);
      record = describeTarget(target as never, {
        builtins: BuiltinIndex.of(this.sdk),
        registry: this.registry,
        scope: (this.sdk.__shippingScope as object | undefined) ?? globalThis,
      });
    } catch (e) {
      return Promise.reject(e);
    }
    const id = this.nextId++;
    const done = new Promise<unknown>((resolve, reject) => {
      const p: Pending = { resolve, reject, timer: null, peer: to, retry: null };
      if (timeoutMs > 0)
        p.timer = setTimeout(() => {
          this.pending.delete(id);
          reject(new RpcTimeoutError(`RPC to "${to}" ran out of time after ${timeoutMs} ms (timeoutMs)`, timeoutMs));
        }, timeoutMs);
      this.pending.set(id, p);
    });
    const send = (rec: TargetRecord) =>
      this.peer(to)
        .then((peer) => peer.send(MessageType.REQUEST, id, { from: this.name, target: rec, args: [...args] }))
        .catch((e: Error) => this.settle(id, e));
    const p = this.pending.get(id)!;
    p.retry = () => {
      this.codeCache.forgetPeer(to);
      void send(record);
    };
    void send(this.codeCache.outgoing(to, record));
    return done;
  }

  private settle(id: number, error: Error | null, value?: unknown): void {
    const p = this.pending.get(id);
    if (!p) return; // already timed out or settled
    this.pending.delete(id);
    if (p.timer) clearTimeout(p.timer);
    if (error) p.reject(error);
    else p.resolve(value);
  }

  /** The outgoing pipe to `name`, opened on first use. */
  private peer(name: string): Promise<Peer> {
    let p = this.outgoing.get(name);
    if (!p) {
      const info = this.workerInfo(name);
      p = tcpTransport
        .connect({ host: info.host, port: info.port, secret: this.config.secret, timeoutMs: 10_000 })
        .then(
          (conn) =>
            new Peer(
              name,
              conn,
              (m) => this.onReply(m, name),
              (peer, e) => this.onPeerDead(peer, e),
            ),
        );
      p.catch(() => this.outgoing.delete(name));
      this.outgoing.set(name, p);
    }
    return p;
  }

  private onPeerDead(peer: Peer, e: Error | null): void {
    if (this.outgoing.get(peer.name) !== undefined) this.outgoing.delete(peer.name);
    const why = e ? `: ${e.message}` : "";
    for (const [id, p] of this.pending)
      if (p.peer === peer.name)
        this.settle(
          id,
          new WorkerUnavailableError(`worker "${peer.name}" is unavailable (its connection closed${why})`, peer.name),
        );
    this.codeCache.forgetPeer(peer.name);
  }

  private onReply(m: DecodedMessage, from: string): void {
    const body = m.payload as { value?: unknown; error?: RemoteErrorRecord };
    if (m.type === MessageType.RESPONSE) this.settle(m.id, null, body.value);
    else if (m.type === MessageType.ERROR) {
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

  private onInbound(m: DecodedMessage, peer: Peer): void {
    if (m.type !== MessageType.REQUEST) return;
    const req = m.payload as RequestPayload;
    const work = (async () => {
      try {
        const fn = await materializeTarget(req.target, {
          sdk: this.sdk,
          registry: this.registry,
          cache: this.codeCache,
          peer: req.from,
          workerName: this.name,
        });
        let value: unknown;
        try {
          value = isClass(fn) ? new fn(...req.args) : await (fn as (...a: unknown[]) => unknown)(...req.args);
        } catch (e) {
          throw explainReferenceError(e);
        }
        await peer.send(MessageType.RESPONSE, m.id, { value });
      } catch (e) {
        const err = e instanceof Error ? e : new Error(String(e));
        if (!(err instanceof ShippedCodeMissingError)) debug(2, "rpc", `call from ${req.from} failed: ${err.message}`);
        await peer.send(MessageType.ERROR, m.id, { error: err }).catch(() => undefined);
      }
    })();
    this.running.add(work);
    void work.finally(() => this.running.delete(work));
  }

  /**
   * Graceful: wait for our calls and the calls we serve, then meet every
   * worker at a barrier so nobody closes while others still call it.
   * Non-graceful: reject pending calls and close now. Bounded by timeoutMs.
   */
  async shutdown(graceful: boolean, timeoutMs: number): Promise<void> {
    if (this.closed) return;
    const deadline = Date.now() + timeoutMs;
    if (graceful) {
      // NB: timers overflow past 2^31-1 ms (they fire at once); leave room for the store's own guard timer.
      const left = () => Math.max(1, Math.min(deadline - Date.now(), 2 ** 31 - 1 - 10_000));
      const outstanding = [...this.pending.values()].map(
        (p) =>
          new Promise<void>((r) => {
            const orig = { res: p.resolve, rej: p.reject };
            p.resolve = (v) => {
              orig.res(v);
              r();
            };
            p.reject = (e) => {
              orig.rej(e);
              r();
            };
          }),
      );
      await Promise.race([Promise.all([...outstanding, ...this.running]), new Promise((r) => setTimeout(r, left()))]);
      if (!this.membership.dynamic && this.membership.worldSize !== undefined)
        await barrier(this.store, "shutdown", this.membership.worldSize, left()).catch((e: Error) =>
          debug(1, "rpc", `shutdown barrier: ${e.message}`),
        );
    }
    this.closed = true;
    for (const id of [...this.pending.keys()])
      this.settle(id, new RpcNotInitializedError("RPC was shut down before this call completed"));
    for (const p of this.outgoing.values())
      void p.then(
        (peer) => peer.conn.close(),
        () => undefined,
      );
    for (const p of this.inbound) p.conn.close();
    await this.membership.leave().catch(() => undefined);
    this.store.close();
    await this.listener.close();
    await this.storeServer?.close();
  }
}
