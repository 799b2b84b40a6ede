/**
 * The challenge–response handshake over real TCP sockets on 127.0.0.1:
 * matching secrets pass both ways, a wrong secret or a stranger is refused
 * before any payload byte is read, silence times out, and bytes sent right
 * after the handshake reach the transport intact.
 */
import net from "node:net";
import { afterEach, describe, expect, it } from "vitest";
import { AuthenticationError } from "../../sdk/index.js";
import { authenticateAsClient, authenticateAsServer, generateSecret } from "../../sdk/transport/auth.js";

const servers: net.Server[] = [];
afterEach(() => {
  for (const s of servers.splice(0)) s.close();
});

/** A server that authenticates each connection and reports the outcome (and the first bytes after). */
async function serve(secret: string, timeoutMs = 2_000) {
  const outcomes: Promise<{ ok: boolean; error?: Error; after?: Buffer }>[] = [];
  const server = net.createServer((sock) => {
    outcomes.push(
      authenticateAsServer(sock, secret, timeoutMs).then(
        () =>
          new Promise((resolve) => {
            sock.once("data", (d: Buffer) => resolve({ ok: true, after: d }));
            sock.resume();
          }),
        (error: Error) => ({ ok: false, error }),
      ),
    );
  });
  servers.push(server);
  await new Promise<void>((r) => server.listen(0, "127.0.0.1", r));
  const port = (server.address() as net.AddressInfo).port;
  const connect = () =>
    new Promise<net.Socket>((resolve, reject) => {
      const s: net.Socket = net.connect(port, "127.0.0.1", () => resolve(s));
      s.once("error", reject);
    });
  return { outcomes, connect };
}

describe("transport authentication", () => {
  it("accepts a peer with the same secret, and bytes after the handshake arrive intact", async () => {
    const secret = generateSecret();
    const { outcomes, connect } = await serve(secret);
    const c = await connect();
    await authenticateAsClient(c, secret, 2_000);
    c.write("payload-after-auth");
    const r = await outcomes[0]!;
    expect(r.ok).toBe(true);
    expect(r.after!.toString()).toBe("payload-after-auth");
    c.destroy();
  });

  it("refuses a wrong secret on both sides, before any payload is read", async () => {
    const { outcomes, connect } = await serve("right");
    const c = await connect();
    await expect(authenticateAsClient(c, "wrong", 2_000)).rejects.toThrow(AuthenticationError);
    await expect(authenticateAsClient(await connect(), "wrong", 2_000)).rejects.toThrow(/group secret/);
    const r = await Promise.race([
      outcomes[0]!,
      new Promise<{ ok: boolean }>((res) => setTimeout(() => res({ ok: true }), 3_000)),
    ]);
    expect(r.ok).toBe(false);
  });

  it("refuses a stranger that speaks another protocol, and a silent peer by timeout", async () => {
    const { outcomes, connect } = await serve("s", 300);
    const stranger = await connect();
    stranger.write("GET / HTTP/1.1\r\nHost: x\r\n\r\n".padEnd(40, " "));
    const silent = await connect();
    const t0 = Date.now();
    const [a, b] = await Promise.all([outcomes[0]!, (async () => (await waitFor(() => outcomes[1]))!)()]);
    expect(a.ok).toBe(false);
    expect(a.error).toBeInstanceOf(AuthenticationError);
    expect(b.ok).toBe(false);
    expect(b.error!.message).toMatch(/timed out/);
    expect(Date.now() - t0).toBeLessThan(2_000);
    stranger.destroy();
    silent.destroy();
  });
});

async function waitFor<T>(get: () => T | undefined, ms = 2_000): Promise<T | undefined> {
  const end = Date.now() + ms;
  while (Date.now() < end) {
    const v = get();
    if (v !== undefined) return v;
    await new Promise((r) => setTimeout(r, 10));
  }
  return undefined;
}
