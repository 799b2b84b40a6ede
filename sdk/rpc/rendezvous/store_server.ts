/**
 * The rendezvous key-value store's server (torch's TCPStore master), hosted
 * by rank 0 or standalone. Keys are strings, values bytes; blocking gets and
 * waits park on the server until the key is set or their timeout fires;
 * watches push set/delete events for a key prefix.
 *
 * Each accepted connection:
 * 1. runs authenticateAsServer; a peer without the group's secret is closed
 *    and reported through `onLog` — none of its bytes is ever decoded;
 * 2. then frames (protocol.ts) are decoded and served in arrival order;
 * 3. a bad frame closes that connection (ProtocolError reported), others go on.
 * close() answers every parked request with an error, then closes every socket.
 */
import net from "node:net";
import { ProtocolError, RpcTimeoutError, TprpcError, ValueError } from "../../errors/index.js";
import { acceptSecure } from "../../transport/tls.js";
import { debug } from "../../util/index.js";
import { encodeFrame, FrameDecoder, intField, Op, type Field, type Frame } from "./protocol.js";

export interface StoreServerOptions {
  /** Interface to listen on. Default "127.0.0.1"; "0.0.0.0" or "::" for other machines. */
  host?: string;
  /** 0 (default) picks a free port. */
  port?: number;
  secret: string | Buffer;
  /** Bound on a connecting peer's handshake, ms. Default 10 000. */
  authTimeoutMs?: number;
  /** Told of refused peers and closed-on-garbage connections. Default: debug log (TPRPC_DEBUG=1). */
  onLog?: (event: StoreLogEvent) => void;
}

export interface StoreLogEvent {
  kind: "auth-refused" | "protocol-error" | "connection-error";
  remote: string;
  error: Error;
}

interface Waiter {
  conn: Conn;
  id: number;
  keys: string[];
  /** GET replies with the value; WAIT with nothing. */
  get: boolean;
  timer: NodeJS.Timeout;
}

interface Conn {
  sock: net.Socket;
  remote: string;
  watches: Map<number, string>;
  waiters: Set<Waiter>;
  /** Keys this connection set with the ephemeral flag: deleted when it drops (if still holding its value). */
  ephemeral: Map<string, Buffer>;
}

const MAX_WAIT_MS = 2 ** 31 - 1;

export class StoreServer {
  private readonly data = new Map<string, Buffer>();
  private readonly waiting = new Map<string, Set<Waiter>>();
  private readonly conns = new Set<Conn>();
  private readonly pendingSockets = new Set<net.Socket>();
  private closing: Promise<void> | null = null;

  private constructor(
    private readonly server: net.Server,
    private readonly opts: StoreServerOptions,
  ) {}

  /** Starts a store listening on host:port; resolves once it accepts connections. */
  static async listen(opts: StoreServerOptions): Promise<StoreServer> {
    const server = net.createServer();
    const store = new StoreServer(server, opts);
    server.on("connection", (sock) => {
      // NB: accept() rejects only if the onLog hook throws; that must not be an unhandled rejection
      void store.accept(sock).catch((e: unknown) => {
        debug(1, "store", `accepting a connection failed: ${(e as Error)?.stack ?? String(e)}`);
        sock.destroy();
      });
    });
    await new Promise<void>((resolve, reject) => {
      server.once("error", reject);
      server.listen(opts.port ?? 0, opts.host ?? "127.0.0.1", () => {
        server.off("error", reject);
        resolve();
      });
    });
    debug(1, "store", `listening on ${store.host}:${store.port}`);
    return store;
  }

  get host(): string {
    return (this.server.address() as net.AddressInfo).address;
  }

  get port(): number {
    return (this.server.address() as net.AddressInfo).port;
  }

  /** Number of keys held (for tests and diagnostics). */
  get numKeys(): number {
    return this.data.size;
  }

  /** Local read, for tests and diagnostics. */
  peek(key: string): Buffer | undefined {
    return this.data.get(key);
  }

  /** Stops accepting, rejects every parked request with a clear error, closes every connection. Idempotent. */
  close(): Promise<void> {
    if (this.closing) return this.closing;
    this.closing = new Promise<void>((resolve) => {
      this.server.close(() => resolve());
      for (const s of this.pendingSockets) s.destroy();
      for (const conn of this.conns) {
        for (const w of conn.waiters) {
          clearTimeout(w.timer);
          this.reply(conn, Op.ERR, w.id, [
            "RpcError",
            "the rendezvous store shut down (the master exited or called shutdown)",
          ]);
        }
        conn.waiters.clear();
        conn.sock.end();
        // NB: end() flushes the error replies; destroy soon after in case the peer never closes.
        setTimeout(() => conn.sock.destroy(), 100).unref();
      }
      this.waiting.clear();
    });
    return this.closing;
  }

  private log(event: StoreLogEvent): void {
    debug(1, "store", `${event.kind} from ${event.remote}: ${event.error.message}`);
    this.opts.onLog?.(event);
  }

  private async accept(raw: net.Socket): Promise<void> {
    let sock = raw;
    const remote = `${sock.remoteAddress}:${sock.remotePort}`;
    sock.setNoDelay(true);
    if (this.closing) return void sock.destroy();
    this.pendingSockets.add(sock);
    sock.on("error", () => {}); // reported through close; auth reports its own errors
    try {
      sock = await acceptSecure(raw, this.opts.secret, this.opts.authTimeoutMs ?? 10_000);
    } catch (e) {
      raw.destroy();
      this.pendingSockets.delete(raw);
      this.log({ kind: "auth-refused", remote, error: e as Error });
      return;
    } finally {
      this.pendingSockets.delete(raw);
    }
    if (this.closing) return void sock.destroy();
    const conn: Conn = { sock, remote, watches: new Map(), waiters: new Set(), ephemeral: new Map() };
    this.conns.add(conn);
    const decoder = new FrameDecoder();
    sock.on("data", (chunk: Buffer) => {
      try {
        for (const f of decoder.push(chunk)) this.handle(conn, f);
      } catch (e) {
        const err = e instanceof ProtocolError ? e : new ProtocolError(String((e as Error).message ?? e));
        this.log({ kind: "protocol-error", remote, error: err });
        sock.destroy();
      }
    });
    sock.on("close", () => this.drop(conn));
    sock.resume();
  }

  private drop(conn: Conn): void {
    this.conns.delete(conn);
    for (const w of conn.waiters) this.unpark(w);
    conn.waiters.clear();
    conn.watches.clear();
    // NB: a worker that dies without leaving must not stay a member: its ephemeral claims go with
    // its store connection (watchers see "delete"), unless someone has replaced the value since.
    for (const [k, v] of conn.ephemeral) if (this.data.get(k) === v) this.delete(k);
    conn.ephemeral.clear();
  }

  private reply(conn: Conn, op: Op, id: number, fields: readonly Field[]): void {
    if (!conn.sock.destroyed && conn.sock.writable) conn.sock.write(encodeFrame(op, id, fields));
  }

  private handle(conn: Conn, f: Frame): void {
    const key = (i = 0): string => {
      const b = f.fields[i];
      if (b === undefined) throw new ProtocolError(`store op ${f.op} lacks field ${i}`);
      return b.toString("utf8");
    };
    try {
      switch (f.op) {
        case Op.SET:
          if (f.fields[1] === undefined) throw new ProtocolError("SET lacks its value");
          this.set(key(), f.fields[1]);
          return this.reply(conn, Op.OK, f.id, []);
        case Op.GET:
          return this.park(conn, f.id, [key()], true, intField(f.fields[1], "timeoutMs"));
        case Op.WAIT:
          return this.park(
            conn,
            f.id,
            f.fields.slice(1).map((b) => b.toString("utf8")),
            false,
            intField(f.fields[0], "timeoutMs"),
          );
        case Op.ADD: {
          const k = key();
          const delta = intField(f.fields[1], "delta");
          const old = this.data.get(k);
          const cur = old === undefined ? 0 : Number(old.toString("latin1"));
          if (old !== undefined && (!/^-?[0-9]+$/.test(old.toString("latin1")) || !Number.isSafeInteger(cur)))
            throw new ValueError(`store key "${k}" does not hold an integer; add() needs a counter key`);
          const next = cur + delta;
          if (!Number.isSafeInteger(next)) throw new ValueError(`store counter "${k}" overflowed`);
          this.set(k, Buffer.from(String(next), "latin1"));
          return this.reply(conn, Op.OK, f.id, [String(next)]);
        }
        case Op.CAS: {
          const k = key();
          const [, expected, desired, absentFlag, ephemeralFlag] = f.fields;
          if (!expected || !desired || !absentFlag) throw new ProtocolError("CAS lacks fields");
          const cur = this.data.get(k);
          const matches = absentFlag.toString() === "1" ? cur === undefined : cur !== undefined && cur.equals(expected);
          if (matches) {
            this.set(k, desired);
            if (ephemeralFlag?.toString() === "1") conn.ephemeral.set(k, desired);
          }
          const after = this.data.get(k);
          return this.reply(conn, Op.OK, f.id, after === undefined ? [] : [after]);
        }
        case Op.DELETE:
          return this.reply(conn, Op.OK, f.id, [this.delete(key()) ? "1" : "0"]);
        case Op.CHECK:
          return this.reply(conn, Op.OK, f.id, [f.fields.every((b) => this.data.has(b.toString("utf8"))) ? "1" : "0"]);
        case Op.NUM_KEYS:
          return this.reply(conn, Op.OK, f.id, [String(this.data.size)]);
        case Op.WATCH:
          conn.watches.set(f.id, key());
          return this.reply(conn, Op.OK, f.id, []);
        case Op.UNWATCH:
          conn.watches.delete(intField(f.fields[0], "watch id"));
          return this.reply(conn, Op.OK, f.id, []);
        case Op.LIST: {
          const prefix = key();
          const out: Buffer[] = [];
          for (const [k, v] of this.data) if (k.startsWith(prefix)) out.push(Buffer.from(k, "utf8"), v);
          return this.reply(conn, Op.OK, f.id, out);
        }
        default:
          throw new ProtocolError(`op ${f.op} is not a store request`);
      }
    } catch (e) {
      if (e instanceof ProtocolError || !(e instanceof TprpcError)) throw e;
      this.reply(conn, Op.ERR, f.id, [e.name, e.message]);
    }
  }

  private set(key: string, value: Buffer): void {
    this.data.set(key, value);
    this.notify("set", key, value);
    const ws = this.waiting.get(key);
    if (!ws) return;
    for (const w of [...ws]) {
      if (!w.keys.every((k) => this.data.has(k))) continue;
      this.unpark(w);
      w.conn.waiters.delete(w);
      this.reply(w.conn, Op.OK, w.id, w.get ? [this.data.get(w.keys[0]!)!] : []);
    }
  }

  private delete(key: string): boolean {
    const old = this.data.get(key);
    if (old === undefined) return false;
    this.data.delete(key);
    this.notify("delete", key, old);
    return true;
  }

  private notify(kind: "set" | "delete", key: string, value: Buffer): void {
    for (const conn of this.conns)
      for (const [id, prefix] of conn.watches)
        if (key.startsWith(prefix)) this.reply(conn, Op.EVENT, id, [kind, key, value]);
  }

  private park(conn: Conn, id: number, keys: string[], get: boolean, timeoutMs: number): void {
    if (keys.length === 0 && !get) return this.reply(conn, Op.OK, id, []);
    if (keys.every((k) => this.data.has(k))) return this.reply(conn, Op.OK, id, get ? [this.data.get(keys[0]!)!] : []);
    if (timeoutMs <= 0 || timeoutMs > MAX_WAIT_MS)
      throw new ValueError(`store wait timeout must be in 1..${MAX_WAIT_MS} ms, got ${timeoutMs}`);
    const w: Waiter = {
      conn,
      id,
      keys,
      get,
      timer: setTimeout(() => {
        this.unpark(w);
        conn.waiters.delete(w);
        const missing = keys.filter((k) => !this.data.has(k));
        const err = new RpcTimeoutError(
          `timed out after ${timeoutMs} ms waiting for store key(s) ${missing.map((k) => `"${k}"`).join(", ")}`,
          timeoutMs,
        );
        this.reply(conn, Op.ERR, id, [err.name, err.message, String(timeoutMs)]);
      }, timeoutMs),
    };
    conn.waiters.add(w);
    for (const k of keys) {
      let s = this.waiting.get(k);
      if (!s) this.waiting.set(k, (s = new Set()));
      s.add(w);
    }
  }

  private unpark(w: Waiter): void {
    clearTimeout(w.timer);
    for (const k of w.keys) {
      const s = this.waiting.get(k);
      s?.delete(w);
      if (s?.size === 0) this.waiting.delete(k);
    }
  }
}
