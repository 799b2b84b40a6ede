/**
 * The TCP transport over 127.0.0.1: authenticated connections deliver bytes
 * in order both ways (including a large burst with back-pressure), a peer
 * with the wrong secret is refused and reported, a dead peer closes the
 * connection with an error, and close() is idempotent.
 */
import { describe, expect, it } from "vitest";
import { AuthenticationError, WorkerUnavailableError } from "../../sdk/index.js";
import type { TransportConnection } from "../../sdk/transport/interface.js";
import { tcpTransport } from "../../sdk/transport/tcp/index.js";

const within = <T>(p: Promise<T>, ms: number, what: string): Promise<T> =>
  Promise.race([p, new Promise<T>((_, rej) => setTimeout(() => rej(new Error(`timed out: ${what}`)), ms))]);

function collect(conn: TransportConnection, bytes: number): Promise<Buffer> {
  const parts: Buffer[] = [];
  let have = 0;
  return new Promise((resolve) => {
    conn.onData((c) => {
      parts.push(Buffer.from(c));
      have += c.length;
      if (have >= bytes) resolve(Buffer.concat(parts));
    });
  });
}

describe("tcp transport", () => {
  it("carries bytes in order both ways after authentication, with back-pressure on a 64 MB burst", async () => {
    const listener = await tcpTransport.listen({ host: "127.0.0.1", port: 0, secret: "s3cret" });
    const accepted = new Promise<TransportConnection>((r) => listener.onConnection(r));
    const client = await tcpTransport.connect({ host: "127.0.0.1", port: listener.address.port, secret: "s3cret" });
    const server = await within(accepted, 5_000, "accept");
    const big = new Uint8Array(64 << 20);
    for (let i = 0; i < big.length; i += 4096) big[i] = (i / 4096) & 0xff;
    const got = collect(server, big.length + 5);
    await client.write([Buffer.from("hello"), big]);
    const buf = await within(got, 20_000, "64 MB");
    expect(buf.subarray(0, 5).toString()).toBe("hello");
    expect(Buffer.compare(buf.subarray(5), Buffer.from(big.buffer))).toBe(0);
    const back = collect(client, 3);
    await server.write([Buffer.from("ack")]);
    expect((await within(back, 5_000, "ack")).toString()).toBe("ack");
    client.close();
    client.close();
    await listener.close();
  });

  it("keeps a connection that arrives before onConnection is set (peers may connect as soon as we publish)", async () => {
    const listener = await tcpTransport.listen({ host: "127.0.0.1", port: 0, secret: "k" });
    const client = await tcpTransport.connect({ host: "127.0.0.1", port: listener.address.port, secret: "k" });
    await client.write([Buffer.from("early")]);
    await new Promise((r) => setTimeout(r, 100));
    const accepted = new Promise<TransportConnection>((r) => listener.onConnection(r));
    const server = await within(accepted, 5_000, "late subscription");
    expect((await within(collect(server, 5), 5_000, "early bytes")).toString()).toBe("early");
    client.close();
    await listener.close();
  });

  it("refuses a peer with the wrong secret and reports it to the listener", async () => {
    const listener = await tcpTransport.listen({ host: "127.0.0.1", port: 0, secret: "right" });
    let accepted = 0;
    listener.onConnection(() => accepted++);
    const refused = new Promise<Error>((r) => listener.onRefused((_remote, e) => r(e)));
    await expect(
      tcpTransport.connect({ host: "127.0.0.1", port: listener.address.port, secret: "wrong", timeoutMs: 3_000 }),
    ).rejects.toThrow(AuthenticationError);
    expect(await within(refused, 5_000, "refusal")).toBeInstanceOf(AuthenticationError);
    expect(accepted).toBe(0);
    await listener.close();
  });

  it("reports a closed peer to onClose with an error, and rejects writes after", async () => {
    const listener = await tcpTransport.listen({ host: "127.0.0.1", port: 0, secret: "k" });
    const accepted = new Promise<TransportConnection>((r) => listener.onConnection(r));
    const client = await tcpTransport.connect({ host: "127.0.0.1", port: listener.address.port, secret: "k" });
    const server = await within(accepted, 5_000, "accept");
    const closed = new Promise<Error | null>((r) => client.onClose(r));
    server.close();
    const err = await within(closed, 5_000, "close");
    expect(err).toBeInstanceOf(Error);
    await expect(client.write([Buffer.from("x")])).rejects.toThrow(WorkerUnavailableError);
    await listener.close();
  });

  it("fails to connect to a port nobody listens on with WorkerUnavailableError", async () => {
    const listener = await tcpTransport.listen({ host: "127.0.0.1", port: 0, secret: "k" });
    const port = listener.address.port;
    await listener.close();
    await expect(tcpTransport.connect({ host: "127.0.0.1", port, secret: "k", timeoutMs: 2_000 })).rejects.toThrow(
      WorkerUnavailableError,
    );
  });
});
