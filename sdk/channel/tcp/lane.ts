/**
 * The TCP channel's lanes: extra sockets between two workers that carry only
 * tensor bytes, one direction each. A lane is dialed by its receiver, so the
 * receiver's socket can read straight into destination buffers (Node's
 * `onread` option, which only sockets we create can have): no 64 KiB chunks
 * copied on the JS thread, the kernel copies into the tensor's memory.
 *
 * Lane handshake (the receiver dials the sender's per-channel listener):
 * 1. Receiver → sender: the transport's challenge (sdk/transport/auth.ts),
 *    driven by hand here because an `onread` socket emits no 'data' events.
 * 2. Sender → receiver: its nonce and proof; the receiver checks it.
 * 3. Receiver → sender: its proof, then the lane index (u32 LE). From then on
 *    only the sender writes.
 *
 * Between hosts (../../transport/tls.ts) a lane is TLS 1.3: the receiver runs the transport's
 * connectSecure (TLS, then the same challenge on the TLS stream) and sends the index; TLS sockets have
 * no `onread`, so the decrypted chunks are copied into the destinations from 'data' events.
 *
 * Receiving: `post(dest)` queues a destination; bytes land in the head of the
 * queue. Bytes that arrive before their destination was posted (the sender
 * starts before its control frame reaches us) go to a small scratch buffer,
 * are kept, and the socket pauses until a destination is posted.
 */
import net from "node:net";
import { AuthenticationError, WorkerUnavailableError } from "../../errors/index.js";
import { SERVER_REPLY_BYTES, clientHandshake } from "../../transport/auth.js";
import { acceptSecure, connectSecure, wantsTls } from "../../transport/tls.js";

const SCRATCH_BYTES = 64 * 1024;

interface Segment {
  dest: Uint8Array;
  filled: number;
  resolve: () => void;
  reject: (e: Error) => void;
}

/** The receiving end of one lane. */
export class RecvLane {
  private readonly sock: net.Socket;
  /** What bytes are read from: the socket, or its TLS stream. */
  private stream: net.Socket;
  private readonly queue: Segment[] = [];
  private readonly stash: Uint8Array[] = [];
  private readonly scratch = Buffer.allocUnsafe(SCRATCH_BYTES);
  private auth: Uint8Array | null = new Uint8Array(SERVER_REPLY_BYTES);
  private authFilled = 0;
  private failure: Error | null = null;
  /** Resolves once our proof is written (the sender closes the lane if it is wrong). */
  readonly ready: Promise<void>;
  private onFail: (e: Error) => void = () => undefined;

  constructor(host: string, port: number, index: number, secret: string | Buffer, peer: string) {
    const hs = clientHandshake(secret);
    let readyRes!: () => void;
    let readyRej!: (e: Error) => void;
    this.ready = new Promise((res, rej) => ((readyRes = res), (readyRej = rej)));
    this.ready.catch(() => undefined);
    if (wantsTls(host)) {
      this.auth = null;
      this.sock = net.connect({ host, port });
      this.sock.once("connect", () => {
        void connectSecure(this.sock, host, secret, 10_000).then(
          (t) => {
            const idx = Buffer.alloc(4);
            idx.writeUInt32LE(index, 0);
            t.write(idx);
            this.stream = t;
            t.on("data", (d: Buffer) => this.onChunk(d));
            t.on("error", (e) => (this.failure ??= e));
            t.on("close", () => this.sock.destroy());
            t.resume();
            readyRes();
          },
          (e: Error) => this.sock.destroy(e),
        );
      });
    } else {
      this.sock = net.connect({
        host,
        port,
        onread: {
          buffer: () => this.nextBuffer(),
          callback: (n: number, buf: Uint8Array) => this.onRead(n, buf, hs.answer, index, readyRes),
        },
      });
      this.sock.once("connect", () => this.sock.write(hs.hello));
    }
    this.stream = this.sock;
    this.sock.setNoDelay(true);
    this.sock.on("error", (e) => (this.failure ??= e));
    this.sock.on("close", () => {
      const e = new WorkerUnavailableError(
        `the tcp channel's lane from "${peer}" closed${this.failure ? `: ${this.failure.message}` : ""}`,
        peer,
      );
      readyRej(e);
      this.fail(e);
    });
  }

  /** Calls cb once with the error that ended the lane. */
  onFailure(cb: (e: Error) => void): void {
    this.onFail = cb;
  }

  /** Queues `dest` to be filled with the lane's next dest.byteLength bytes. */
  post(dest: Uint8Array): Promise<void> {
    if (this.failure && this.sock.destroyed) return Promise.reject(this.failure);
    return new Promise((resolve, reject) => {
      const seg: Segment = { dest, filled: 0, resolve, reject };
      while (this.stash.length > 0 && seg.filled < dest.byteLength) {
        const s = this.stash[0]!;
        const take = Math.min(s.byteLength, dest.byteLength - seg.filled);
        dest.set(s.subarray(0, take), seg.filled);
        seg.filled += take;
        if (take === s.byteLength) this.stash.shift();
        else this.stash[0] = s.subarray(take);
      }
      if (seg.filled === dest.byteLength) return resolve();
      this.queue.push(seg);
      if (this.stream.isPaused()) this.stream.resume();
    });
  }

  private nextBuffer(): Uint8Array {
    if (this.auth) return this.auth.subarray(this.authFilled);
    const head = this.queue[0];
    // NB: this runs right after each read, for the *next* read: hand out the rest of the head destination.
    return head ? head.dest.subarray(head.filled) : this.scratch;
  }

  private onRead(
    n: number,
    buf: Uint8Array,
    answer: (r: Uint8Array) => Buffer,
    index: number,
    ready: () => void,
  ): boolean {
    if (this.auth) {
      this.authFilled += n;
      if (this.authFilled < SERVER_REPLY_BYTES) return true;
      let proof: Buffer;
      try {
        proof = answer(this.auth);
      } catch (e) {
        this.sock.destroy(e as AuthenticationError);
        return false;
      }
      this.auth = null;
      const idx = Buffer.alloc(4);
      idx.writeUInt32LE(index, 0);
      this.sock.write(Buffer.concat([proof, idx]));
      ready();
      return true;
    }
    if (buf === this.scratch) {
      // bytes before their destination: keep a copy and pause (back-pressure) until one is posted
      let chunk: Uint8Array = Buffer.from(buf.subarray(0, n));
      while (chunk.byteLength > 0 && this.queue.length > 0) {
        const head = this.queue[0]!;
        const take = Math.min(chunk.byteLength, head.dest.byteLength - head.filled);
        head.dest.set(chunk.subarray(0, take), head.filled);
        head.filled += take;
        chunk = chunk.subarray(take);
        if (head.filled === head.dest.byteLength) this.queue.shift()!.resolve();
      }
      if (chunk.byteLength > 0) this.stash.push(chunk);
      if (this.queue.length > 0) return true;
      // NB: returning false only stops the handle reading; pause() too, so resume() restarts it
      this.sock.pause();
      return false;
    }
    const head = this.queue[0]!;
    head.filled += n;
    if (head.filled === head.dest.byteLength) this.queue.shift()!.resolve();
    return true;
  }

  /** A decrypted chunk (TLS lanes): into the posted destinations, the rest kept until one is posted. */
  private onChunk(d: Uint8Array): void {
    let chunk = d;
    while (chunk.byteLength > 0 && this.queue.length > 0) {
      const head = this.queue[0]!;
      const take = Math.min(chunk.byteLength, head.dest.byteLength - head.filled);
      head.dest.set(chunk.subarray(0, take), head.filled);
      head.filled += take;
      chunk = chunk.subarray(take);
      if (head.filled === head.dest.byteLength) this.queue.shift()!.resolve();
    }
    if (chunk.byteLength > 0) {
      this.stash.push(chunk);
      this.stream.pause();
    }
  }

  private fail(e: Error): void {
    this.failure ??= e;
    for (const s of this.queue.splice(0)) s.reject(e);
    this.stash.length = 0;
    this.onFail(e);
  }

  close(): void {
    this.sock.destroy();
  }
}

/** The sending end of one lane (an accepted socket). */
export class SendLane {
  private failure: Error | null = null;
  private onFail: (e: Error) => void = () => undefined;

  constructor(
    private readonly sock: net.Socket,
    private readonly peer: string,
  ) {
    sock.setNoDelay(true);
    sock.on("error", (e) => (this.failure ??= e));
    sock.on("data", () => sock.destroy(new Error("unexpected bytes on a send lane")));
    sock.on("close", () =>
      this.onFail(
        new WorkerUnavailableError(
          `the tcp channel's lane to "${peer}" closed${this.failure ? `: ${this.failure.message}` : ""}`,
          peer,
        ),
      ),
    );
  }

  onFailure(cb: (e: Error) => void): void {
    this.onFail = cb;
  }

  /** Writes `bytes`; resolves once the OS took them (the caller may then reuse them). */
  write(bytes: Uint8Array): Promise<void> {
    if (this.sock.destroyed)
      return Promise.reject(
        this.failure ?? new WorkerUnavailableError(`the tcp channel's lane to "${this.peer}" is closed`, this.peer),
      );
    return new Promise((resolve, reject) => this.sock.write(bytes, (e) => (e ? reject(e) : resolve())));
  }

  close(): void {
    this.sock.destroy();
  }
}

/**
 * Accepts one lane on the sender's listener: the transport's server-side
 * handshake (in TLS when the peer asks for it), then the lane index. Resolves with
 * the socket to write on; rejects (and destroys the socket) for a peer without the secret.
 */
export async function acceptLane(
  sock: net.Socket,
  secret: string | Buffer,
  timeoutMs: number,
): Promise<{ sock: net.Socket; index: number }> {
  sock = await acceptSecure(sock, secret, timeoutMs);
  const index = await new Promise<number>((resolve, reject) => {
    let got = Buffer.alloc(0);
    const timer = setTimeout(
      () => done(new AuthenticationError("a tcp lane did not say its index in time")),
      timeoutMs,
    );
    const done = (e: Error | null, v?: number) => {
      clearTimeout(timer);
      sock.off("data", onData);
      sock.off("close", onClose);
      sock.pause();
      if (e) reject(e);
      else resolve(v!);
    };
    const onData = (d: Buffer) => {
      got = Buffer.concat([got, d]);
      if (got.byteLength > 4) done(new AuthenticationError("a tcp lane sent bytes after its index"));
      else if (got.byteLength === 4) done(null, got.readUInt32LE(0));
    };
    const onClose = () => done(new AuthenticationError("a tcp lane closed during its handshake"));
    sock.on("data", onData);
    sock.once("close", onClose);
    sock.resume();
  });
  return { sock, index };
}
