/**
 * The pipe's handshake on the wire (protocol version 2): HELLO, ACCEPT, SETUP
 * and REFUSE bodies are msgpack that any msgpack reader decodes, binary fields
 * travel as bytes, a peer of another protocol version is refused with a
 * PipeVersionError naming both versions, and a malformed handshake frame
 * closes the pipe with a ProtocolError and nothing else.
 */
import { unpack } from "msgpackr";
import { describe, expect, it } from "vitest";
import "../../sdk/channel/backends.js";
import { ProtocolError, WorkerUnavailableError } from "../../sdk/errors/index.js";
import { encodeBody } from "../../sdk/pipe/codec.js";
import { FrameKind, encodeFrameHead } from "../../sdk/pipe/frame.js";
import {
  CAPABILITIES_VERSION,
  PIPE_VERSION,
  Pipe,
  PipeVersionError,
  type ReceivedMessage,
  decodeHandshake,
  encodeHandshake,
  localCapabilities,
} from "../../sdk/pipe/index.js";
import { MemoryConnection, memoryPair, until } from "./memory.js";

const caps = (name: string, channels: string[] = []) => localCapabilities(name, channels, { cpu: 1, cuda: 0 });
const opts = (name: string, channels: string[] = []) => ({
  local: caps(name, channels),
  secret: "handshake-test-secret",
  host: "127.0.0.1",
  timeoutMs: 5_000,
});

/** One frame without buffers, with `version` in its header. */
function frame(kind: FrameKind, body: Uint8Array, version = PIPE_VERSION): Buffer {
  const head = encodeFrameHead(kind, body.byteLength, []);
  head[3] = version;
  return Buffer.concat([head, body]);
}

const bytes = (...b: number[]) => Uint8Array.from(b);
const str = (s: string) => [0xa0 | s.length, ...Buffer.from(s)];

describe("handshake encoding", () => {
  it("is protocol version 2", () => {
    expect(PIPE_VERSION).toBe(2);
  });

  it("opens two pipes with msgpack HELLO, ACCEPT and SETUP frames, then moves a message", async () => {
    const [accConn, conConn] = memoryPair();
    const accOpts = opts("acceptor", ["tcp"]);
    const conOpts = opts("connector", ["tcp"]);
    const acc = Pipe.accept(accConn, accOpts);
    const con = await Pipe.connect(conConn, "acceptor", conOpts);
    await acc.ready;
    try {
      for (const c of [...conConn.written, ...accConn.written].filter((c) => c[0] === 0x54 && c[1] === 0x51))
        expect(c[3]).toBe(2);
      const sent = conConn.frames();
      const answered = accConn.frames();
      expect(sent[0]!.kind).toBe(FrameKind.HELLO);
      expect(answered[0]!.kind).toBe(FrameKind.ACCEPT);
      // the tcp channel's setup (its lane listener's address) went as SETUP frames
      expect(answered.some((f) => f.kind === FrameKind.SETUP)).toBe(true);
      for (const f of [...sent, ...answered]) {
        // a msgpack map, which no JSON text starts with ('{' is 0x7b)
        expect(f.body[0]! >= 0x80 && f.body[0]! <= 0x8f).toBe(true);
        expect(() => JSON.parse(Buffer.from(f.body).toString())).toThrow();
      }
      // plain msgpack: any reader gets the values back
      expect(unpack(sent[0]!.body)).toEqual(conOpts.local);
      expect(unpack(answered[0]!.body)).toEqual({
        caps: accOpts.local,
        negotiation: { choice: { "cpu-cpu": "tcp" }, missing: {} },
        channels: ["tcp"],
      });
      const setup = unpack(answered.find((f) => f.kind === FrameKind.SETUP)!.body) as { c: number; m: object };
      expect(setup).toMatchObject({ c: 0, m: { host: "127.0.0.1" } });

      const got: ReceivedMessage[] = [];
      acc.onMessage((m) => got.push(m));
      const payload = new Uint8Array(100_000).map((_, i) => i & 255);
      await con.send({ control: [Buffer.from("hi")], buffers: [{ buffer: { kind: "cpu", bytes: payload } }] });
      await until(() => got.length === 1);
      expect(Buffer.from(got[0]!.control).toString()).toBe("hi");
      expect(Buffer.from((got[0]!.buffers[0] as { bytes: Uint8Array }).bytes).equals(payload)).toBe(true);
    } finally {
      con.close();
      acc.close();
    }
  });

  it("writes binary fields as msgpack bin (no base64) and reads them back as bytes of their own", () => {
    const addr = Uint8Array.from({ length: 40 }, (_, i) => 200 - i);
    const [head, body] = encodeHandshake(FrameKind.SETUP, { c: 1, m: { address: addr, n: 3 } });
    expect(head![2]).toBe(FrameKind.SETUP);
    const raw = Buffer.from(body!);
    // bin8 of 40 bytes, then the bytes themselves
    expect(raw.indexOf(Buffer.concat([Buffer.from([0xc4, 40]), addr]))).toBeGreaterThan(0);
    expect(raw.includes(Buffer.from(addr).toString("base64"))).toBe(false);
    const back = decodeHandshake(FrameKind.SETUP, body!) as { c: number; m: { address: Uint8Array; n: number } };
    expect(back.c).toBe(1);
    expect(back.m.n).toBe(3);
    expect(back.m.address).toBeInstanceOf(Uint8Array);
    expect([...back.m.address]).toEqual([...addr]);
    // NB: a copy, so a held setup message never views a connection chunk that gets reused
    expect(back.m.address.buffer).not.toBe(body!.buffer);
  });

  it("drops undefined fields as JSON did, instead of sending msgpackr's undefined extension", () => {
    const [, body] = encodeHandshake(FrameKind.REFUSE, { reason: "x", extra: undefined } as { reason: string });
    expect(unpack(body!)).toEqual({ reason: "x" });
    expect(decodeHandshake(FrameKind.REFUSE, body!)).toEqual({ reason: "x" });
  });
});

describe("a peer of another pipe protocol version", () => {
  it.each([
    ["1 (JSON handshake)", 1, () => Buffer.from(JSON.stringify(caps("old")))],
    ["3", 3, () => encodeBody(caps("new"))],
  ])("is refused by the acceptor: version %s", async (_, version, body) => {
    const conn = new MemoryConnection("memory://other");
    const p = Pipe.accept(conn, opts("acceptor"));
    const closed = new Promise<Error | null>((r) => p.onClose(r));
    expect(() => conn.push(frame(FrameKind.HELLO, body(), version))).not.toThrow();
    expect(p.state).toBe("refusing");
    const e = await closed;
    expect(e).toBeInstanceOf(PipeVersionError);
    expect(e).toBeInstanceOf(ProtocolError);
    expect(e).toMatchObject({ remoteVersion: version, localVersion: 2 });
    expect(e!.message).toBe(
      `worker "memory://other" speaks pipe protocol version ${version}, this worker speaks version 2; ` +
        "run the same tprpc version on every worker",
    );
    await expect(p.ready).rejects.toBe(e);
    // the peer was told why, in a REFUSE frame: its header's first 4 bytes keep their layout in every version
    const [refuse, ...rest] = conn.frames();
    expect(rest).toEqual([]);
    expect(refuse!.kind).toBe(FrameKind.REFUSE);
    expect(conn.written[0]![3]).toBe(2);
    expect(decodeHandshake(FrameKind.REFUSE, refuse!.body).reason).toBe(e!.message);
    expect(p.state).toBe("closed");
    expect(conn.closed).toBe(true);
  });

  it("fails the connector with PipeVersionError naming both versions", async () => {
    const conn = new MemoryConnection();
    const opening = Pipe.connect(conn, "acceptor", opts("connector"));
    const accept = encodeBody({ caps: caps("acceptor"), negotiation: { choice: {}, missing: {} }, channels: [] });
    conn.push(frame(FrameKind.ACCEPT, accept, 3));
    const e = await opening.then(
      () => null,
      (x: unknown) => x,
    );
    expect(e).toBeInstanceOf(PipeVersionError);
    expect(e).toMatchObject({ remoteVersion: 3, localVersion: 2 });
    expect((e as Error).message).toMatch(
      /^worker "acceptor" speaks pipe protocol version 3, this worker speaks version 2; run the same tprpc version/,
    );
    expect(conn.closed).toBe(true);
  });
});

describe("malformed handshake frames", () => {
  const good = () => encodeBody(caps("peer"));
  const accept = (v: object) =>
    encodeBody({ caps: caps("acceptor"), negotiation: { choice: {}, missing: {} }, channels: [], ...v });
  const deep = (n: number) => bytes(...Array<number>(n).fill(0x91), 0xc0);
  // [what, the side that receives it, kind, body, what the error says]
  const cases: [string, "acceptor" | "connector", FrameKind, () => Uint8Array, RegExp][] = [
    [
      "a JSON body (protocol 1's encoding)",
      "acceptor",
      FrameKind.HELLO,
      () => Buffer.from(JSON.stringify(caps("p"))),
      /trailing bytes/,
    ],
    ["an empty body", "acceptor", FrameKind.HELLO, () => new Uint8Array(0), /truncated/],
    ["a truncated body", "acceptor", FrameKind.HELLO, () => good().subarray(0, 30), /truncated|runs past/],
    ["trailing bytes", "acceptor", FrameKind.HELLO, () => Buffer.concat([good(), bytes(0xc0)]), /trailing/],
    [
      "a timestamp extension",
      "acceptor",
      FrameKind.HELLO,
      () => bytes(0x81, ...str("name"), 0xd6, 0xff, 0, 0, 0, 0),
      /extension/,
    ],
    [
      "msgpackr's undefined extension",
      "acceptor",
      FrameKind.HELLO,
      () => bytes(0x81, ...str("name"), 0xd4, 0, 0),
      /extension/,
    ],
    ["the wire layer's tensor tag", "acceptor", FrameKind.HELLO, () => bytes(0xd4, 0x10, 0, 0x80), /extension/],
    ["a record definition", "acceptor", FrameKind.HELLO, () => bytes(0xd4, 0x72, 0x40), /extension/],
    ["nesting 33 deep", "acceptor", FrameKind.HELLO, () => deep(33), /deeper than 32/],
    ["nesting 32 deep (scans, but is no capabilities)", "acceptor", FrameKind.HELLO, () => deep(32), /capabilities/],
    ["a __proto__ key", "acceptor", FrameKind.HELLO, () => bytes(0x81, ...str("__proto__"), 0x80), /__proto__/],
    ["a non-string key", "acceptor", FrameKind.HELLO, () => bytes(0x81, 0x01, 0xc0), /not a string/],
    [
      "a map claiming 2^32-1 entries",
      "acceptor",
      FrameKind.HELLO,
      () => bytes(0xdf, 0xff, 0xff, 0xff, 0xff),
      /runs past/,
    ],
    ["the unused byte 0xc1", "acceptor", FrameKind.HELLO, () => bytes(0xc1), /0xc1/],
    [
      "capabilities as a list",
      "acceptor",
      FrameKind.HELLO,
      () => encodeBody([1, 2]),
      /malformed capabilities in HELLO/,
    ],
    [
      "capabilities without a name",
      "acceptor",
      FrameKind.HELLO,
      () => encodeBody({ ...caps("p"), name: 7 }),
      /malformed capabilities/,
    ],
    [
      "a channel list that is a string",
      "acceptor",
      FrameKind.HELLO,
      () => encodeBody({ ...caps("p"), channels: "tcp" }),
      /malformed capabilities/,
    ],
    ["an ACCEPT to the acceptor", "acceptor", FrameKind.ACCEPT, () => accept({}), /unexpected ACCEPT/],
    [
      "a SETUP before the handshake",
      "acceptor",
      FrameKind.SETUP,
      () => encodeBody({ c: 0, m: 1 }),
      /unknown channel 0/,
    ],
    ["a HELLO to the connector", "connector", FrameKind.HELLO, good, /unexpected HELLO/],
    [
      "an ACCEPT without negotiation",
      "connector",
      FrameKind.ACCEPT,
      () => accept({ negotiation: null }),
      /malformed ACCEPT/,
    ],
    [
      "an ACCEPT choosing a number",
      "connector",
      FrameKind.ACCEPT,
      () => accept({ negotiation: { choice: { "cpu-cpu": 1 }, missing: {} } }),
      /malformed ACCEPT/,
    ],
    [
      "an ACCEPT with a numeric channel",
      "connector",
      FrameKind.ACCEPT,
      () => accept({ channels: [0] }),
      /malformed ACCEPT/,
    ],
    [
      "an ACCEPT with bad capabilities",
      "connector",
      FrameKind.ACCEPT,
      () => accept({ caps: { name: "x" } }),
      /malformed capabilities in ACCEPT/,
    ],
    ["a REFUSE without a reason", "connector", FrameKind.REFUSE, () => encodeBody({ why: "no" }), /malformed REFUSE/],
    [
      "a SETUP with a negative channel",
      "connector",
      FrameKind.SETUP,
      () => encodeBody({ c: -1, m: 1 }),
      /malformed SETUP/,
    ],
    [
      "a SETUP with a string channel",
      "connector",
      FrameKind.SETUP,
      () => encodeBody({ c: "0", m: 1 }),
      /malformed SETUP/,
    ],
    ["a SETUP without a message", "connector", FrameKind.SETUP, () => encodeBody({ c: 0 }), /malformed SETUP/],
  ];

  it.each(cases)("%s: closes the %s with ProtocolError and nothing else", async (_, role, kind, body, why) => {
    const conn = new MemoryConnection();
    const pipe =
      role === "acceptor" ? Pipe.accept(conn, opts("acceptor")) : Pipe.open(conn, "acceptor", opts("connector"));
    expect(pipe.state).toBe("handshaking");
    const closed = new Promise<Error | null>((r) => pipe.onClose(r));
    let delivered = 0;
    pipe.onMessage(() => delivered++);
    const before = conn.written.length;
    expect(() => conn.push(frame(kind, body()))).not.toThrow();
    const e = await closed;
    expect(e).toBeInstanceOf(ProtocolError);
    expect(e).not.toBeInstanceOf(PipeVersionError);
    expect(e!.message).toMatch(why);
    expect(pipe.state).toBe("closed");
    expect(conn.closed).toBe(true);
    await expect(pipe.ready).rejects.toThrow(WorkerUnavailableError);
    await new Promise((r) => setImmediate(r));
    expect(conn.written.length).toBe(before); // no REFUSE, no ACCEPT: nothing was answered
    expect(delivered).toBe(0);
  });

  it("garbage after a refused HELLO, in the same chunk, does not cut the REFUSE short", async () => {
    const conn = new MemoryConnection();
    const p = Pipe.accept(conn, opts("acceptor"));
    const closed = new Promise<Error | null>((r) => p.onClose(r));
    const hello = frame(FrameKind.HELLO, encodeBody({ ...caps("peer"), version: CAPABILITIES_VERSION + 1 }));
    conn.push(Buffer.concat([hello, Buffer.from("GET / HTTP/1.1\r\n\r\n")]));
    expect(p.state).toBe("refusing");
    expect((await closed)!.message).toMatch(/capability version/);
    expect(conn.frames().map((f) => f.kind)).toEqual([FrameKind.REFUSE]);
  });

  it("a second HELLO after a good one closes the acceptor with ProtocolError", async () => {
    const conn = new MemoryConnection();
    const p = Pipe.accept(conn, opts("acceptor"));
    conn.push(frame(FrameKind.HELLO, good()));
    await p.ready;
    const answered = conn.written.length;
    const closed = new Promise<Error | null>((r) => p.onClose(r));
    conn.push(frame(FrameKind.HELLO, good()));
    const e = await closed;
    expect(e).toBeInstanceOf(ProtocolError);
    expect(e!.message).toMatch(/unexpected HELLO/);
    expect(conn.written.length).toBe(answered);
  });
});
