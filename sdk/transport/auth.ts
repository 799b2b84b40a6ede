/**
 * Mutual challenge–response authentication on a fresh byte stream, run
 * before any message is decoded. Both sides prove knowledge of the group's
 * secret without sending it:
 *
 * 1. Client → server: HELLO = magic "TPRPCA1\0" (8 bytes) + client nonce (32 bytes).
 * 2. Server → client: magic + server nonce (32) + HMAC-SHA256(secret, "server" | nc | ns) (32).
 * 3. Client checks the server's MAC (timing-safe), then sends HMAC(secret, "client" | ns | nc) (32).
 * 4. Server checks it; on success both sides send nothing more here and hand
 *    the stream to the transport. Any mismatch, a wrong magic, or a timeout
 *    rejects with AuthenticationError and destroys the socket: a peer
 *    without the secret never gets a byte past step 2 decoded.
 *
 * The exchange is fixed-size, so a hostile peer cannot make us buffer more
 * than 72 bytes. NB: this authenticates peers; it does not encrypt traffic:
 * ./tls.ts wraps connections between hosts in TLS 1.3 first, and this runs inside.
 */
import { createHmac, randomBytes, timingSafeEqual } from "node:crypto";
import type { Duplex } from "node:stream";
import { AuthenticationError } from "../errors/index.js";

const MAGIC = Buffer.from("TPRPCA1\0", "latin1");
const NONCE = 32;
const MAC = 32;

function mac(secret: string | Buffer, role: "server" | "client", a: Buffer, b: Buffer): Buffer {
  return createHmac("sha256", secret).update(role).update(a).update(b).digest();
}

/** Reads exactly n bytes from the stream, or rejects on end, error or timeout. */
function readExact(sock: Duplex, n: number, deadline: number, buffered: Buffer[]): Promise<Buffer> {
  return new Promise((resolve, reject) => {
    let have = buffered.reduce((s, b) => s + b.length, 0);
    const done = (err: Error | null) => {
      clearTimeout(timer);
      sock.off("data", onData);
      sock.off("end", onEnd);
      sock.off("close", onEnd);
      sock.off("error", onError);
      if (err) return reject(err);
      const all = Buffer.concat(buffered);
      buffered.length = 0;
      // NB: pause so no byte is emitted before the next reader attaches (a flowing stream with no
      // 'data' listener drops data); bytes past the handshake belong to the transport: give them back.
      sock.pause();
      if (all.length > n) sock.unshift(all.subarray(n));
      resolve(all.subarray(0, n));
    };
    const onData = (chunk: Buffer) => {
      buffered.push(chunk);
      have += chunk.length;
      if (have >= n) done(null);
    };
    const onEnd = () => done(new AuthenticationError("the peer closed the connection during authentication"));
    const onError = (e: Error) => done(new AuthenticationError(`connection error during authentication: ${e.message}`));
    const timer = setTimeout(
      () => done(new AuthenticationError("authentication timed out: the peer did not answer the challenge")),
      Math.max(0, deadline - Date.now()),
    );
    if (have >= n) return done(null);
    sock.on("data", onData);
    sock.once("end", onEnd);
    sock.once("close", onEnd);
    sock.once("error", onError);
    sock.resume();
  });
}

function fail(sock: Duplex, message: string): never {
  sock.destroy();
  throw new AuthenticationError(message);
}

/** Client side of the handshake (the side that connected). Resolves once both sides are proven. */
export async function authenticateAsClient(sock: Duplex, secret: string | Buffer, timeoutMs = 10_000): Promise<void> {
  const deadline = Date.now() + timeoutMs;
  const buffered: Buffer[] = [];
  const nc = randomBytes(NONCE);
  sock.write(Buffer.concat([MAGIC, nc]));
  try {
    const reply = await readExact(sock, MAGIC.length + NONCE + MAC, deadline, buffered);
    if (!reply.subarray(0, MAGIC.length).equals(MAGIC)) fail(sock, "the peer does not speak the tprpc handshake");
    const ns = reply.subarray(MAGIC.length, MAGIC.length + NONCE);
    const theirs = reply.subarray(MAGIC.length + NONCE);
    if (!timingSafeEqual(theirs, mac(secret, "server", nc, ns)))
      fail(
        sock,
        "the peer could not prove it knows the group secret; check TPRPC_SECRET (or options.secret) on both sides",
      );
    sock.write(mac(secret, "client", ns, nc));
  } catch (e) {
    sock.destroy();
    throw e;
  }
}

/** Server side of the handshake (the side that accepted). Rejects, closing the socket, for a peer without the secret. */
export async function authenticateAsServer(sock: Duplex, secret: string | Buffer, timeoutMs = 10_000): Promise<void> {
  const deadline = Date.now() + timeoutMs;
  const buffered: Buffer[] = [];
  try {
    const hello = await readExact(sock, MAGIC.length + NONCE, deadline, buffered);
    if (!hello.subarray(0, MAGIC.length).equals(MAGIC)) fail(sock, "the peer does not speak the tprpc handshake");
    const nc = Buffer.from(hello.subarray(MAGIC.length));
    const ns = randomBytes(NONCE);
    sock.write(Buffer.concat([MAGIC, ns, mac(secret, "server", nc, ns)]));
    const theirs = await readExact(sock, MAC, deadline, buffered);
    if (!timingSafeEqual(theirs, mac(secret, "client", ns, nc)))
      fail(sock, "a peer failed to prove it knows the group secret; connection refused");
  } catch (e) {
    sock.destroy();
    throw e;
  }
}

/** Bytes the server sends in step 2 (magic, nonce, MAC). */
export const SERVER_REPLY_BYTES = MAGIC.length + NONCE + MAC;

/**
 * The client side of the same handshake as a state machine, for sockets whose
 * reads the caller drives itself (e.g. a TCP lane reading straight into
 * destination buffers through `onread`, where no 'data' events fire):
 * send `hello`, feed the server's SERVER_REPLY_BYTES to `answer`, send what
 * it returns. `answer` throws AuthenticationError for a wrong peer.
 */
export function clientHandshake(secret: string | Buffer): { hello: Buffer; answer(reply: Uint8Array): Buffer } {
  const nc = randomBytes(NONCE);
  return {
    hello: Buffer.concat([MAGIC, nc]),
    answer(reply) {
      const r = Buffer.from(reply.buffer, reply.byteOffset, reply.byteLength);
      if (r.byteLength !== SERVER_REPLY_BYTES || !r.subarray(0, MAGIC.length).equals(MAGIC))
        throw new AuthenticationError("the peer does not speak the tprpc handshake");
      const ns = r.subarray(MAGIC.length, MAGIC.length + NONCE);
      if (!timingSafeEqual(r.subarray(MAGIC.length + NONCE), mac(secret, "server", nc, ns)))
        throw new AuthenticationError(
          "the peer could not prove it knows the group secret; check TPRPC_SECRET (or options.secret) on both sides",
        );
      return mac(secret, "client", ns, nc);
    },
  };
}

/** A fresh random group secret (hex), as the master generates when none is given. */
export function generateSecret(): string {
  return randomBytes(32).toString("hex");
}
