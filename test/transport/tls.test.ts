/**
 * TLS 1.3 under the group's challenge (sdk/transport/tls.ts): the policy (TPRPC_TLS, which hosts are
 * "this host"), a TLS-PSK connection keyed by the secret, a peer with another secret refused by the TLS
 * handshake, plain connections refused where TLS is required, and a recording relay between two
 * transport endpoints showing the bytes on the wire are not the plain message with TLS on (and are
 * without it). The between-hosts case (auto) runs in test/multihost.
 */
import net from "node:net";
import os from "node:os";
import tls from "node:tls";
import { afterEach, describe, expect, it } from "vitest";
import { AuthenticationError, ValueError } from "../../sdk/errors/index.js";
import { authenticateAsClient } from "../../sdk/transport/auth.js";
import { tcpTransport } from "../../sdk/transport/tcp/index.js";
import { acceptMaybeTls, isThisHost, secureClient, tlsMode, wantsTls } from "../../sdk/transport/tls.js";

const saved = process.env.TPRPC_TLS;
afterEach(() => {
  if (saved === undefined) delete process.env.TPRPC_TLS;
  else process.env.TPRPC_TLS = saved;
});

/** A listening server whose accepted sockets go to `onSock`; plus a connected client socket. */
async function pair(onSock: (s: net.Socket) => void): Promise<{ client: net.Socket; close: () => void }> {
  const server = net.createServer({ pauseOnConnect: true }, onSock);
  await new Promise<void>((r) => server.listen(0, "127.0.0.1", r));
  const port = (server.address() as net.AddressInfo).port;
  const client = net.connect({ host: "127.0.0.1", port });
  await new Promise((r) => client.once("connect", r));
  return { client, close: () => (client.destroy(), server.close()) };
}

describe("TLS policy", () => {
  it("reads TPRPC_TLS (auto by default) and refuses other values", () => {
    expect(tlsMode({})).toBe("auto");
    expect(tlsMode({ TPRPC_TLS: "on" })).toBe("on");
    expect(() => tlsMode({ TPRPC_TLS: "yes" })).toThrow(ValueError);
  });

  it("encrypts in auto only towards other hosts", () => {
    const own = Object.values(os.networkInterfaces()).flat()[0]!.address;
    expect(isThisHost("127.0.0.1")).toBe(true);
    expect(isThisHost(own)).toBe(true);
    expect(isThisHost("192.0.2.7")).toBe(false);
    expect(wantsTls("127.0.0.1", "auto")).toBe(false);
    expect(wantsTls("192.0.2.7", "auto")).toBe(true);
    expect(wantsTls("127.0.0.1", "on")).toBe(true);
    expect(wantsTls("192.0.2.7", "off")).toBe(false);
  });
});

describe("TLS-PSK from the group secret", () => {
  it("connects over TLS 1.3 with the same secret, and bytes flow both ways", async () => {
    let server!: Promise<net.Socket>;
    const p = await pair((s) => {
      server = acceptMaybeTls(s, "s3cret", 5_000, "on");
    });
    try {
      const c = await secureClient(p.client, "s3cret", 5_000);
      const s = await server;
      expect(s).toBeInstanceOf(tls.TLSSocket);
      expect((s as tls.TLSSocket).getProtocol()).toBe("TLSv1.3");
      expect(c.getProtocol()).toBe("TLSv1.3");
      const got = new Promise<string>((r) => s.once("data", (d: Buffer) => r(d.toString())));
      s.resume();
      c.write("ping");
      expect(await got).toBe("ping");
    } finally {
      p.close();
    }
  });

  it("fails the handshake on both sides for a peer with another secret", async () => {
    let server!: Promise<net.Socket>;
    const p = await pair((s) => {
      server = acceptMaybeTls(s, "right", 5_000, "on");
      server.catch(() => undefined);
    });
    try {
      await expect(secureClient(p.client, "wrong", 5_000)).rejects.toThrow(AuthenticationError);
      await expect(server).rejects.toThrow(/TLS handshake with .* failed/);
    } finally {
      p.close();
    }
  });

  it("refuses a plain connection where TLS is required, and accepts one from this host in auto", async () => {
    let server!: Promise<net.Socket>;
    const on = await pair((s) => {
      server = acceptMaybeTls(s, "k", 5_000, "on");
      server.catch(() => undefined);
    });
    try {
      await expect(authenticateAsClient(on.client, "k", 5_000)).rejects.toThrow(AuthenticationError);
      await expect(server).rejects.toThrow(/refused a connection without TLS from .* \(TPRPC_TLS=on\)/);
    } finally {
      on.close();
    }
    const auto = await pair((s) => {
      server = acceptMaybeTls(s, "k", 5_000, "auto");
    });
    try {
      auto.client.write("TPRPCA1\0hello");
      const s = await server;
      expect(s).not.toBeInstanceOf(tls.TLSSocket);
      const got = new Promise<string>((r) => s.once("data", (d: Buffer) => r(d.toString("latin1"))));
      s.resume();
      expect(await got).toBe("TPRPCA1\0hello"); // the first bytes were given back
    } finally {
      auto.close();
    }
  });
});

/** tcpTransport through a relay that records every byte; returns what crossed. */
async function overRelay(mode: string, message: string): Promise<Buffer> {
  process.env.TPRPC_TLS = mode;
  const listener = await tcpTransport.listen({ host: "127.0.0.1", port: 0, secret: "relay-secret" });
  const got = new Promise<string>((resolve) =>
    listener.onConnection((c) => c.onData((d) => resolve(Buffer.from(d).toString()))),
  );
  const seen: Buffer[] = [];
  const relay = net.createServer((a) => {
    const b = net.connect({ host: "127.0.0.1", port: listener.address.port });
    a.on("data", (d: Buffer) => (seen.push(d), b.write(d)));
    b.on("data", (d: Buffer) => (seen.push(d), a.write(d)));
    a.on("close", () => b.destroy());
    b.on("close", () => a.destroy());
  });
  await new Promise<void>((r) => relay.listen(0, "127.0.0.1", r));
  try {
    const conn = await tcpTransport.connect({
      host: "127.0.0.1",
      port: (relay.address() as net.AddressInfo).port,
      secret: "relay-secret",
    });
    await conn.write([Buffer.from(message)]);
    expect(await got).toBe(message);
    conn.close();
    return Buffer.concat(seen);
  } finally {
    relay.close();
    await listener.close();
  }
}

describe("tcp transport with TLS on", () => {
  it("puts no plain byte of the message on the wire (and the same message is readable with TLS off)", async () => {
    const msg = "a recognizable plain-text payload 0123456789";
    expect((await overRelay("on", msg)).includes(Buffer.from(msg))).toBe(false);
    expect((await overRelay("off", msg)).includes(Buffer.from(msg))).toBe(true);
  });
});
