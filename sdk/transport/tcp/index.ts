/**
 * The TCP transport (Node's net): always viable. Sockets get TCP_NODELAY
 * (small RPCs must not wait for Nagle) and keep-alive (a silent dead host is
 * noticed), and every connection is authenticated (../auth.ts) before its
 * first byte reaches the pipe, inside TLS 1.3 between hosts (../tls.ts).
 */
import net from "node:net";
import { AuthenticationError, WorkerUnavailableError } from "../../errors/index.js";
import { debug } from "../../util/index.js";
import type { Transport, TransportConnection, TransportListener } from "../interface.js";
import { acceptSecure, connectSecure } from "../tls.js";

const AUTH_TIMEOUT_MS = 10_000;
/** Messages corked behind a tick's first one leave at the latest when the next one is written this much later. */
const CORK_MAX_MS = 0.2;

class TcpConnection implements TransportConnection {
  closed = false;
  private dataCb: ((chunk: Uint8Array) => void) | null = null;
  private closeCbs: ((error: Error | null) => void)[] = [];
  private pending: Uint8Array[] = [];
  private endError: Error | null = null;
  private ended = false;
  /** A message was written in this tick (the next ones are corked). */
  private wroteThisTick = false;
  /** The socket is corked for this tick's later messages, since corkedAt (performance.now()). */
  private corked = false;
  private corkedAt = 0;

  constructor(
    private readonly sock: net.Socket,
    readonly remote: string,
  ) {
    sock.setNoDelay(true);
    sock.setKeepAlive(true, 5_000);
    sock.on("data", (d: Buffer) => {
      if (this.dataCb) this.dataCb(d);
      else this.pending.push(d);
    });
    sock.on("error", (e) => {
      this.endError ??= e;
    });
    sock.on("close", () =>
      this.finish(this.closed ? null : (this.endError ?? new Error("connection closed by the peer"))),
    );
    sock.resume();
  }

  private finish(error: Error | null): void {
    if (this.ended) return;
    this.ended = true;
    this.closed = true;
    for (const cb of this.closeCbs.splice(0)) cb(error);
  }

  write(chunks: readonly Uint8Array[]): Promise<void> {
    if (this.closed)
      return Promise.reject(new WorkerUnavailableError(`connection to ${this.remote} is closed`, this.remote));
    return new Promise((resolve, reject) => {
      // NB: the first message of a tick leaves now, in one writev: code may go on computing after it
      // (a reply, then the next call's target), and the message must not wait for that. Later
      // messages of the same tick (64 calls in flight answered from one read) are corked and leave
      // together at the end of the tick, or at once when the cork is already CORK_MAX_MS old. The last
      // chunk's callback runs once all of them were handed to the OS (or with an error when the
      // socket died first).
      const first = !this.wroteThisTick;
      if (first) {
        this.wroteThisTick = true;
        process.nextTick(this.endTick);
        this.sock.cork();
      } else if (!this.corked) {
        this.corked = true;
        this.corkedAt = performance.now();
        this.sock.cork();
      }
      const last = chunks.length - 1;
      for (let i = 0; i < last; i++) this.sock.write(chunks[i]!);
      this.sock.write(last >= 0 ? chunks[last]! : new Uint8Array(0), (e?: Error | null) =>
        e
          ? reject(
              new WorkerUnavailableError(
                `connection to ${this.remote} closed while writing: ${e.message}`,
                this.remote,
              ),
            )
          : resolve(),
      );
      if (first) this.sock.uncork();
      else if (performance.now() - this.corkedAt > CORK_MAX_MS) this.uncorkNow();
    });
  }

  private uncorkNow(): void {
    if (!this.corked) return;
    this.corked = false;
    this.sock.uncork();
  }

  private readonly endTick = (): void => {
    this.wroteThisTick = false;
    this.uncorkNow();
  };

  onData(cb: (chunk: Uint8Array) => void): void {
    this.dataCb = cb;
    for (const d of this.pending.splice(0)) cb(d);
  }

  onClose(cb: (error: Error | null) => void): void {
    if (this.ended) cb(this.closed && !this.endError ? null : this.endError);
    else this.closeCbs.push(cb);
  }

  close(): void {
    if (this.closed) return;
    this.closed = true;
    this.sock.destroy();
  }
}

class TcpListener implements TransportListener {
  private connCb: ((c: TransportConnection) => void) | null = null;
  private refusedCb: (remote: string, error: Error) => void = (remote, e) =>
    debug(1, "tcp", `refused ${remote}: ${e.message}`);
  private readonly sockets = new Set<net.Socket>();
  private readonly early: TcpConnection[] = [];

  constructor(
    private readonly server: net.Server,
    readonly address: { host: string; port: number },
    secret: string | Buffer,
  ) {
    server.on("connection", (sock) => {
      this.sockets.add(sock);
      sock.once("close", () => this.sockets.delete(sock));
      const remote = `tcp://${sock.remoteAddress}:${sock.remotePort}`;
      acceptSecure(sock, secret, AUTH_TIMEOUT_MS).then(
        (s) => {
          const conn = new TcpConnection(s, remote);
          // NB: a peer may connect as soon as our address is published, before our owner has
          // subscribed (e.g. the last worker of a rendezvous): queue it, don't drop it.
          if (this.connCb) this.connCb(conn);
          else this.early.push(conn);
        },
        (e: Error) => this.refusedCb(remote, e),
      );
    });
  }

  onConnection(cb: (conn: TransportConnection) => void): void {
    this.connCb = cb;
    for (const c of this.early.splice(0)) cb(c);
  }

  onRefused(cb: (remote: string, error: Error) => void): void {
    this.refusedCb = cb;
  }

  close(): Promise<void> {
    for (const s of this.sockets) s.destroy();
    return new Promise((resolve) => this.server.close(() => resolve()));
  }
}

export const tcpTransport: Transport = {
  name: "tcp",
  isViable: () => true,

  async listen({ host, port, secret }) {
    const server = net.createServer({ pauseOnConnect: true });
    await new Promise<void>((resolve, reject) => {
      server.once("error", reject);
      server.listen(port, host, () => {
        server.off("error", reject);
        resolve();
      });
    });
    const addr = server.address() as net.AddressInfo;
    return new TcpListener(server, { host, port: addr.port }, secret);
  },

  async connect({ host, port, secret, timeoutMs = AUTH_TIMEOUT_MS }) {
    const remote = `tcp://${host}:${port}`;
    const sock = await new Promise<net.Socket>((resolve, reject) => {
      const s = net.connect({ host, port });
      const timer = setTimeout(() => {
        s.destroy();
        reject(new WorkerUnavailableError(`could not connect to ${remote} within ${timeoutMs} ms`, remote));
      }, timeoutMs);
      s.once("connect", () => {
        clearTimeout(timer);
        resolve(s);
      });
      s.once("error", (e) => {
        clearTimeout(timer);
        reject(new WorkerUnavailableError(`could not connect to ${remote}: ${e.message}`, remote));
      });
    });
    let secured: net.Socket;
    try {
      secured = await connectSecure(sock, host, secret, timeoutMs);
    } catch (e) {
      sock.destroy();
      throw e instanceof AuthenticationError ? e : new AuthenticationError(String(e));
    }
    return new TcpConnection(secured, remote);
  },
};
