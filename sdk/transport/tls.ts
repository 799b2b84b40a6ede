/**
 * TLS 1.3 between hosts, under the challenge–response of ./auth.ts. Every TCP connection of a group
 * (the store's, the pipes' control connections, the tcp channel's lanes) goes through here.
 *
 * Policy, TPRPC_TLS (`tprpc launch --tls`):
 * - `auto` (default): a connector wraps its connection in TLS when the peer's address is not one of this
 *   host's own (loopback or an address of one of its interfaces); an acceptor refuses a plain
 *   connection from such a peer. So bytes that leave the machine are encrypted, and a group on one
 *   host (where shm/cma carry the tensors and nothing leaves it) pays nothing.
 * - `on`: every connection is TLS, and plain ones are refused; `off`: connectors never use TLS (an
 *   acceptor still accepts a TLS connection).
 *
 * The key is the group secret: TLS-PSK (RFC 8446 with (EC)DHE, so forward secret) with a 32-byte key
 * HKDF-SHA256(secret, "tprpc-tls-psk-v1"), identity "tprpc". No certificates: a peer without the
 * secret fails the TLS handshake itself, and the HMAC challenge of ./auth.ts then runs inside TLS as
 * before.
 *
 * Start of a connection (the acceptor must know before the TLS bytes come which way to read them):
 * 1. Connector → acceptor: PREAMBLE "TPRPCS1\0" and nothing more; a plain connector sends auth.ts's
 *    hello, which starts with "TPRPCA1\0" instead.
 * 2. Acceptor → connector: one byte ACK (0x01); the acceptor has read exactly the preamble, so the
 *    socket can be handed to TLS with no byte of the ClientHello consumed.
 * 3. TLS 1.3 handshake; then auth.ts's exchange on the TLS stream.
 */
import { hkdfSync } from "node:crypto";
import net from "node:net";
import os from "node:os";
import tls from "node:tls";
import { AuthenticationError, ValueError } from "../errors/index.js";
import { authenticateAsClient, authenticateAsServer } from "./auth.js";

export type TlsMode = "off" | "auto" | "on";

const PREAMBLE = Buffer.from("TPRPCS1\0", "latin1");
const ACK = 0x01;
const IDENTITY = "tprpc";

/** TPRPC_TLS: off, auto (the default) or on; anything else is a ValueError. */
export function tlsMode(env: NodeJS.ProcessEnv = process.env): TlsMode {
  const v = env.TPRPC_TLS;
  if (v === undefined || v === "") return "auto";
  if (v === "off" || v === "auto" || v === "on") return v;
  throw new ValueError(`TPRPC_TLS must be off, auto or on, got ${JSON.stringify(v)}`);
}

function normalize(host: string): string {
  return host.replace(/^\[|\]$/g, "").replace(/^::ffff:/, "");
}

/** True when `host` is this machine: loopback, or an address of one of its interfaces. */
export function isThisHost(host: string): boolean {
  const h = normalize(host);
  if (/^(127\.|localhost$|::1$)/.test(h)) return true;
  for (const addrs of Object.values(os.networkInterfaces()))
    for (const a of addrs ?? []) if (normalize(a.address) === h) return true;
  return false;
}

/** Whether a connection to `host` is wrapped in TLS. */
export function wantsTls(host: string, mode: TlsMode = tlsMode()): boolean {
  return mode === "on" || (mode === "auto" && !isThisHost(host));
}

const psks = new Map<string, Buffer>();
function pskFor(secret: string | Buffer): Buffer {
  const k = typeof secret === "string" ? secret : secret.toString("hex");
  let psk = psks.get(k);
  if (!psk) {
    psk = Buffer.from(hkdfSync("sha256", secret, "tprpc-tls-psk-v1", "tprpc", 32));
    psks.set(k, psk);
  }
  return psk;
}

function bounded<T>(p: Promise<T>, sock: net.Socket, ms: number, what: string): Promise<T> {
  let timer: NodeJS.Timeout | undefined;
  return Promise.race([
    p,
    new Promise<T>((_, reject) => {
      timer = setTimeout(() => {
        sock.destroy();
        reject(new AuthenticationError(`${what} timed out after ${ms} ms`));
      }, ms);
    }),
  ]).finally(() => clearTimeout(timer));
}

/** Reads until `n` bytes came (or more: the rest is given back with unshift); pauses the socket after. */
function readAtLeast(sock: net.Socket, n: number): Promise<Buffer> {
  return new Promise((resolve, reject) => {
    const got: Buffer[] = [];
    let have = 0;
    const done = (e: Error | null) => {
      sock.off("data", onData);
      sock.off("close", onClose);
      sock.off("error", onError);
      sock.pause();
      if (e) return reject(e);
      resolve(Buffer.concat(got));
    };
    const onData = (d: Buffer) => {
      got.push(d);
      have += d.length;
      if (have >= n) done(null);
    };
    const onClose = () => done(new AuthenticationError("the peer closed the connection before TLS began"));
    const onError = (e: Error) => done(new AuthenticationError(`connection error before TLS began: ${e.message}`));
    sock.on("data", onData);
    sock.once("close", onClose);
    sock.once("error", onError);
    sock.resume();
  });
}

function tlsFailure(e: Error, side: string): AuthenticationError {
  return new AuthenticationError(
    `TLS handshake with ${side} failed (${e.message}); both sides need the same group secret (TPRPC_SECRET)`,
  );
}

/** Connector: preamble, ACK, TLS 1.3 with the secret's PSK. Resolves with the TLS socket. */
export async function secureClient(
  sock: net.Socket,
  secret: string | Buffer,
  timeoutMs: number,
  peer = "the peer",
): Promise<tls.TLSSocket> {
  return bounded(
    (async () => {
      sock.write(PREAMBLE);
      const ack = await readAtLeast(sock, 1);
      if (ack.length !== 1 || ack[0] !== ACK) {
        sock.destroy();
        throw new AuthenticationError(`${peer} did not accept TLS (it does not speak tprpc's TLS preamble)`);
      }
      const psk = pskFor(secret);
      const t = tls.connect({
        socket: sock,
        minVersion: "TLSv1.3",
        maxVersion: "TLSv1.3",
        pskCallback: () => ({ psk, identity: IDENTITY }),
        checkServerIdentity: () => undefined,
      });
      await new Promise<void>((resolve, reject) => {
        t.once("secureConnect", resolve);
        t.once("error", (e) => reject(tlsFailure(e, peer)));
        t.once("close", () => reject(tlsFailure(new Error("connection closed"), peer)));
      });
      return t;
    })(),
    sock,
    timeoutMs,
    `the TLS handshake with ${peer}`,
  );
}

/**
 * Acceptor: a TLS connection is unwrapped (TLS socket returned); a plain one is returned as is when the
 * policy allows it (its first bytes given back to the stream), else refused with AuthenticationError.
 */
export async function acceptMaybeTls(
  sock: net.Socket,
  secret: string | Buffer,
  timeoutMs: number,
  mode: TlsMode = tlsMode(),
): Promise<net.Socket> {
  const remote = sock.remoteAddress ?? "?";
  return bounded(
    (async (): Promise<net.Socket> => {
      const first = await readAtLeast(sock, PREAMBLE.length);
      if (first.length === PREAMBLE.length && first.equals(PREAMBLE)) {
        const psk = pskFor(secret);
        sock.write(Buffer.of(ACK));
        // NB: Node's TLSSocket honours pskCallback (as tls.createServer does); @types/node leaves it out here
        const t = new tls.TLSSocket(sock, {
          isServer: true,
          minVersion: "TLSv1.3",
          maxVersion: "TLSv1.3",
          pskCallback: (_s: tls.TLSSocket, identity: string) => (identity === IDENTITY ? psk : null),
        } as tls.TLSSocketOptions);
        await new Promise<void>((resolve, reject) => {
          t.once("secure", resolve);
          t.once("error", (e) => reject(tlsFailure(e, remote)));
          t.once("close", () => reject(tlsFailure(new Error("connection closed"), remote)));
        });
        return t;
      }
      if (mode === "on" || (mode === "auto" && !isThisHost(remote))) {
        sock.destroy();
        throw new AuthenticationError(
          `refused a connection without TLS from ${remote}` +
            (mode === "on" ? " (TPRPC_TLS=on)" : ", another host (TPRPC_TLS=auto encrypts between hosts)") +
            "; set the same TPRPC_TLS on every worker",
        );
      }
      sock.unshift(first);
      return sock;
    })(),
    sock,
    timeoutMs,
    `the connection from ${remote}`,
  );
}

/** Connector: TLS when the policy wants it for `host`, then auth.ts's challenge. Resolves with the socket to use. */
export async function connectSecure(
  sock: net.Socket,
  host: string,
  secret: string | Buffer,
  timeoutMs: number,
): Promise<net.Socket> {
  const deadline = Date.now() + timeoutMs;
  const s = wantsTls(host) ? await secureClient(sock, secret, timeoutMs, host) : sock;
  await authenticateAsClient(s, secret, Math.max(1, deadline - Date.now()));
  return s;
}

/** Acceptor: acceptMaybeTls, then auth.ts's challenge. Resolves with the socket to use. */
export async function acceptSecure(sock: net.Socket, secret: string | Buffer, timeoutMs: number): Promise<net.Socket> {
  const deadline = Date.now() + timeoutMs;
  const s = await acceptMaybeTls(sock, secret, timeoutMs);
  await authenticateAsServer(s, secret, Math.max(1, deadline - Date.now()));
  return s;
}
