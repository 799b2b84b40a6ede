/**
 * The rendezvous store's client (torch's TCPStore, non-master side). One
 * authenticated TCP connection, requests pipelined by id (protocol.ts).
 *
 * 1. connect() retries with backoff until its deadline, because workers may
 *    start before the master's store listens; a refused handshake (wrong
 *    secret) is final and not retried.
 * 2. Every request is bounded: blocking get/wait by their timeout (enforced
 *    by the server, with a client-side guard), the others by `timeoutMs`.
 * 3. When the connection drops, every pending request rejects at once.
 *
 *   const store = await StoreClient.connect({ host: "127.0.0.1", port: 29500, secret });
 *   await store.set("ready", "1");
 *   const v = await store.get("result", 5_000);   // waits until some worker sets it
 */
import net from "node:net";
import {
  AuthenticationError,
  ProtocolError,
  RpcError,
  RpcTimeoutError,
  TprpcError,
  ValueError,
} from "../../errors/index.js";
import { connectSecure } from "../../transport/tls.js";
import { debug } from "../../util/index.js";
import { encodeFrame, FrameDecoder, intField, Op, type Field, type Frame } from "./protocol.js";

export interface StoreClientOptions {
  host: string;
  port: number;
  secret: string | Buffer;
  /** Deadline for connecting (with retries) and the default bound of every request, ms. Default 60 000. */
  timeoutMs?: number;
}

/** A push notification for a key under a watched prefix. For "delete", `value` is the value removed. */
export interface StoreEvent {
  kind: "set" | "delete";
  key: string;
  value: Buffer;
}

interface Pending {
  resolve: (fields: Buffer[]) => void;
  reject: (e: Error) => void;
  timer: NodeJS.Timeout;
}

const GUARD_MS = 2_000; // NB: the server times blocking requests out; this only catches a hung server.
const MAX_WAIT_MS = 2 ** 31 - 1 - GUARD_MS;
const RETRIABLE = new Set([
  "ECONNREFUSED",
  "ECONNRESET",
  "ENOTFOUND",
  "EAI_AGAIN",
  "EHOSTUNREACH",
  "ENETUNREACH",
  "ETIMEDOUT",
]);

function where(host: string, port: number): string {
  return `${host.includes(":") ? `[${host}]` : host}:${port}`;
}

function sleep(ms: number): Promise<void> {
  return new Promise((r) => setTimeout(r, ms));
}

/** One TCP connect attempt, bounded by `ms`. */
function dial(host: string, port: number, ms: number): Promise<net.Socket> {
  return new Promise((resolve, reject) => {
    const sock = net.connect({ host, port });
    const timer = setTimeout(() => {
      sock.destroy();
      reject(Object.assign(new Error("connect timed out"), { code: "ETIMEDOUT" }));
    }, ms);
    sock.once("connect", () => {
      clearTimeout(timer);
      sock.removeAllListeners("error");
      resolve(sock);
    });
    sock.once("error", (e) => {
      clearTimeout(timer);
      sock.destroy();
      reject(e);
    });
  });
}

export class StoreClient {
  private nextId = 1;
  private readonly pending = new Map<number, Pending>();
  private readonly watchers = new Map<number, (e: StoreEvent) => void>();
  private closedError: Error | null = null;
  private readonly closeListeners = new Set<(e: Error) => void>();

  private constructor(
    private readonly sock: net.Socket,
    readonly host: string,
    readonly port: number,
    readonly timeoutMs: number,
  ) {
    const decoder = new FrameDecoder();
    sock.on("data", (chunk: Buffer) => {
      try {
        for (const f of decoder.push(chunk)) this.dispatch(f);
      } catch (e) {
        this.fail(e instanceof ProtocolError ? e : new ProtocolError(String(e)));
        sock.destroy();
      }
    });
    sock.on("error", (e) =>
      this.fail(new RpcError(`lost the connection to the rendezvous store at ${this.where}: ${e.message}`)),
    );
    sock.on("close", () =>
      this.fail(new RpcError(`the connection to the rendezvous store at ${this.where} closed (did the master exit?)`)),
    );
    sock.resume();
  }

  /** Connects (retrying until `timeoutMs`) and authenticates. */
  static async connect(opts: StoreClientOptions): Promise<StoreClient> {
    const timeoutMs = opts.timeoutMs ?? 60_000;
    if (!(timeoutMs > 0 && timeoutMs <= MAX_WAIT_MS)) throw new ValueError(`timeoutMs must be in 1..${MAX_WAIT_MS}`);
    const deadline = Date.now() + timeoutMs;
    let backoff = 25;
    let last: Error | null = null;
    for (;;) {
      const left = deadline - Date.now();
      if (left <= 0) break;
      let sock: net.Socket;
      try {
        sock = await dial(opts.host, opts.port, left);
      } catch (e) {
        const code = (e as NodeJS.ErrnoException).code ?? "";
        if (!RETRIABLE.has(code))
          throw new RpcError(
            `cannot connect to the rendezvous store at ${where(opts.host, opts.port)}: ${(e as Error).message}`,
          );
        last = e as Error;
        debug(2, "store", `connect to ${where(opts.host, opts.port)} failed (${code}); retrying in ${backoff} ms`);
        await sleep(Math.min(backoff, Math.max(0, deadline - Date.now())));
        backoff = Math.min(backoff * 2, 1_000);
        continue;
      }
      sock.setNoDelay(true);
      try {
        sock = await connectSecure(sock, opts.host, opts.secret, Math.max(1, Math.min(10_000, deadline - Date.now())));
      } catch (e) {
        throw e instanceof AuthenticationError
          ? new AuthenticationError(`rendezvous store at ${where(opts.host, opts.port)}: ${e.message}`)
          : e;
      }
      return new StoreClient(sock, opts.host, opts.port, timeoutMs);
    }
    throw new RpcTimeoutError(
      `could not reach the rendezvous store at ${where(opts.host, opts.port)} within ${timeoutMs} ms` +
        ` (${last?.message ?? "no answer"}): is rank 0 running, and are MASTER_ADDR/MASTER_PORT (or initMethod) right?`,
      timeoutMs,
    );
  }

  get where(): string {
    return where(this.host, this.port);
  }

  /** True once closed, by close() or by the connection dropping. */
  get closed(): boolean {
    return this.closedError !== null;
  }

  /** Calls `cb` once when the connection ends (at once if it already has); returns an unsubscribe. */
  onClose(cb: (e: Error) => void): () => void {
    if (this.closedError) {
      cb(this.closedError);
      return () => {};
    }
    this.closeListeners.add(cb);
    return () => this.closeListeners.delete(cb);
  }

  async set(key: string, value: Field): Promise<void> {
    await this.request(Op.SET, [key, value]);
  }

  /** The key's value, waiting until some client sets it (RpcTimeoutError naming the key after `timeoutMs`). */
  async get(key: string, timeoutMs = this.timeoutMs): Promise<Buffer> {
    const [v] = await this.request(Op.GET, [key, String(checkWait(timeoutMs))], timeoutMs + GUARD_MS);
    return v!;
  }

  /** Atomically adds `delta` to the integer counter at `key` (absent = 0); resolves to the new value. */
  async add(key: string, delta = 1): Promise<number> {
    if (!Number.isSafeInteger(delta)) throw new ValueError(`add() delta must be an integer, got ${delta}`);
    return intField((await this.request(Op.ADD, [key, String(delta)]))[0], "add result");
  }

  /**
   * Sets `key` to `desired` if it currently holds `expected` (null: if it is absent).
   * Resolves to the value after the operation (null: absent); it equals `desired` when the swap happened
   * or someone else already stored the same bytes. `ephemeral`: the server deletes the key when this
   * client's connection drops (a worker that dies leaves the group), unless it was replaced since.
   */
  async compareSet(
    key: string,
    expected: Field | null,
    desired: Field,
    opts: { ephemeral?: boolean } = {},
  ): Promise<Buffer | null> {
    const fields: Field[] = [key, expected ?? "", desired, expected === null ? "1" : "0"];
    if (opts.ephemeral) fields.push("1");
    const r = await this.request(Op.CAS, fields);
    return r[0] ?? null;
  }

  /** Removes `key`; resolves to whether it existed. */
  async delete(key: string): Promise<boolean> {
    return (await this.request(Op.DELETE, [key]))[0]!.toString() === "1";
  }

  /** Whether every key exists, without waiting. */
  async check(keys: readonly string[]): Promise<boolean> {
    return (await this.request(Op.CHECK, [...keys]))[0]!.toString() === "1";
  }

  /** Waits until every key exists (RpcTimeoutError naming the missing keys after `timeoutMs`). */
  async wait(keys: readonly string[], timeoutMs = this.timeoutMs): Promise<void> {
    await this.request(Op.WAIT, [String(checkWait(timeoutMs)), ...keys], timeoutMs + GUARD_MS);
  }

  async numKeys(): Promise<number> {
    return intField((await this.request(Op.NUM_KEYS, []))[0], "numKeys");
  }

  /** Every key under `prefix` with its value. */
  async list(prefix: string): Promise<Map<string, Buffer>> {
    const r = await this.request(Op.LIST, [prefix]);
    const out = new Map<string, Buffer>();
    for (let i = 0; i + 1 < r.length; i += 2) out.set(r[i]!.toString("utf8"), r[i + 1]!);
    return out;
  }

  /**
   * Calls `cb` for every key set or deleted under `prefix` from now on (in the server's order).
   * Resolves once the server has registered the watch, to a function that cancels it.
   * NB: a list() issued after this resolves sees every key whose event was not delivered.
   */
  async watch(prefix: string, cb: (e: StoreEvent) => void): Promise<() => Promise<void>> {
    const id = this.nextId++;
    this.watchers.set(id, cb);
    try {
      await this.request(Op.WATCH, [prefix], undefined, id);
    } catch (e) {
      this.watchers.delete(id);
      throw e;
    }
    return async () => {
      if (!this.watchers.delete(id) || this.closed) return;
      await this.request(Op.UNWATCH, [String(id)]);
    };
  }

  /** Closes the connection; pending requests reject. Idempotent. */
  close(): void {
    this.fail(new RpcError(`the rendezvous store client for ${this.where} was closed`));
    this.sock.destroy();
  }

  private request(op: Op, fields: readonly Field[], boundMs = this.timeoutMs, id = this.nextId++): Promise<Buffer[]> {
    if (this.closedError) return Promise.reject(this.closedError);
    const frame = encodeFrame(op, id, fields);
    return new Promise<Buffer[]>((resolve, reject) => {
      const timer = setTimeout(() => {
        this.pending.delete(id);
        reject(
          new RpcTimeoutError(`the rendezvous store at ${this.where} did not answer within ${boundMs} ms`, boundMs),
        );
      }, boundMs);
      this.pending.set(id, { resolve, reject, timer });
      this.sock.write(frame);
    });
  }

  private dispatch(f: Frame): void {
    if (f.op === Op.EVENT) {
      const cb = this.watchers.get(f.id);
      const [kind, key, value] = f.fields;
      if (!kind || !key || !value) throw new ProtocolError("a store event lacks fields");
      const k = kind.toString();
      if (k !== "set" && k !== "delete") throw new ProtocolError(`unknown store event kind "${k}"`);
      try {
        cb?.({ kind: k, key: key.toString("utf8"), value });
      } catch (e) {
        debug(1, "store", `a watch callback threw: ${(e as Error).stack ?? e}`);
      }
      return;
    }
    const p = this.pending.get(f.id);
    if (!p) return; // NB: a reply after our client-side guard fired; nothing waits for it.
    this.pending.delete(f.id);
    clearTimeout(p.timer);
    if (f.op === Op.OK) return p.resolve(f.fields);
    if (f.op !== Op.ERR) return p.reject(new ProtocolError(`unexpected store reply op ${f.op}`));
    const name = f.fields[0]?.toString() ?? "RpcError";
    const msg = f.fields[1]?.toString("utf8") ?? "store error";
    p.reject(remoteError(name, msg, f.fields[2]));
  }

  private fail(e: Error): void {
    if (this.closedError) return;
    this.closedError = e;
    for (const p of this.pending.values()) {
      clearTimeout(p.timer);
      p.reject(e);
    }
    this.pending.clear();
    this.watchers.clear();
    for (const cb of this.closeListeners) cb(e);
    this.closeListeners.clear();
  }
}

function checkWait(ms: number): number {
  if (!Number.isFinite(ms) || ms < 1 || ms > MAX_WAIT_MS)
    throw new ValueError(`a store wait needs a timeout in 1..${MAX_WAIT_MS} ms, got ${ms}`);
  return Math.ceil(ms);
}

function remoteError(name: string, message: string, timeout: Buffer | undefined): TprpcError {
  switch (name) {
    case "RpcTimeoutError":
      return new RpcTimeoutError(message, timeout ? Number(timeout.toString()) : 0);
    case "ValueError":
      return new ValueError(message);
    case "ProtocolError":
      return new ProtocolError(message);
    default:
      return new RpcError(message);
  }
}
