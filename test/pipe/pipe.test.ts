/**
 * The pipe in one process over a real TCP transport: the capability exchange
 * and channel choice, messages with buffers of every size class, the frame
 * cutter's checks on hostile bytes, and a capability-version mismatch refused with a
 * ChannelNotViableError.
 */
import { afterEach, describe, expect, it } from "vitest";
import "../../sdk/channel/backends.js";
import { splitTransfer } from "../../sdk/channel/tcp/index.js";
import { ChannelNotViableError, ProtocolError, WorkerUnavailableError } from "../../sdk/errors/index.js";
import { FrameCutter, FrameKind, encodeFrameHead } from "../../sdk/pipe/frame.js";
import { CAPABILITIES_VERSION, Pipe, type ReceivedMessage, localCapabilities } from "../../sdk/pipe/index.js";
import type { TransportListener } from "../../sdk/transport/interface.js";
import { tcpTransport } from "../../sdk/transport/tcp/index.js";

const SECRET = "pipe-test-secret";
const listeners: TransportListener[] = [];
const pipes: Pipe[] = [];
afterEach(async () => {
  for (const p of pipes.splice(0)) p.close();
  for (const l of listeners.splice(0)) await l.close();
});

const opts = (name: string) => ({
  local: localCapabilities(name, ["tcp"], { cpu: 1, cuda: 0 }),
  secret: SECRET,
  host: "127.0.0.1",
  timeoutMs: 5_000,
});

async function pair(accOpts = opts("acceptor")): Promise<{ a: Pipe; b: Promise<Pipe> }> {
  const l = await tcpTransport.listen({ host: "127.0.0.1", port: 0, secret: SECRET });
  listeners.push(l);
  const b = new Promise<Pipe>((resolve) =>
    l.onConnection((conn) => {
      const p = Pipe.accept(conn, accOpts);
      pipes.push(p);
      resolve(p);
    }),
  );
  const conn = await tcpTransport.connect({ host: "127.0.0.1", port: l.address.port, secret: SECRET });
  const a = await Pipe.connect(conn, "acceptor", opts("connector"));
  pipes.push(a);
  return { a, b };
}

describe("pipe", () => {
  it("exchanges capabilities, picks a channel per pair, and moves messages with buffers in order", async () => {
    const { a, b } = await pair();
    const acc = await b;
    await acc.ready;
    expect(a.info()).toMatchObject({
      peer: "acceptor",
      transport: "tcp",
      role: "connector",
      channels: { "cpu-cpu": "tcp" },
    });
    expect(acc.info()).toMatchObject({ peer: "connector", role: "acceptor", channels: { "cpu-cpu": "tcp" } });
    const got: ReceivedMessage[] = [];
    acc.onMessage((m) => got.push(m));
    const sizes = [0, 5, 70_000, 3_000_000, 9_000_000];
    const bufs = sizes.map((n, i) => new Uint8Array(n).map((_, j) => (j * 7 + i) & 255));
    await Promise.all([
      a.send({ control: [Buffer.from("first")], buffers: bufs.map((bytes) => ({ buffer: { kind: "cpu", bytes } })) }),
      a.send({ control: [Buffer.from("sec"), Buffer.from("ond")], buffers: [] }),
    ]);
    const t0 = Date.now();
    while (got.length < 2 && Date.now() - t0 < 5_000) await new Promise((r) => setTimeout(r, 5));
    expect(got.map((m) => Buffer.from(m.control).toString())).toEqual(["first", "second"]);
    got[0]!.buffers.forEach((x, i) => {
      expect(x.kind).toBe("cpu");
      expect(Buffer.from((x as { bytes: Uint8Array }).bytes).equals(Buffer.from(bufs[i]!))).toBe(true);
    });
    expect(got[0]!.bytes).toBeGreaterThan(sizes.reduce((s, n) => s + n, 0));
  });

  it("refuses a buffer on a device pair no channel serves, before anything is sent", async () => {
    const { a } = await pair();
    const send = a.send({
      control: [Buffer.from("x")],
      buffers: [{ buffer: { kind: "cpu", bytes: new Uint8Array(8) }, target: { type: "cuda", index: 0 } }],
    });
    await expect(send).rejects.toThrow(ChannelNotViableError);
    expect(a.closed).toBe(false);
  });

  it("a peer speaking another capability version is refused with a reason", async () => {
    const acc = opts("acceptor");
    const old = { ...acc, local: { ...acc.local, version: CAPABILITIES_VERSION + 1 } };
    const e = await pair(old).then(
      () => null,
      (x: unknown) => x,
    );
    expect(e).toBeInstanceOf(ChannelNotViableError);
    expect((e as Error).message).toMatch(/refused the pipe: .*capability version/);
  });

  it("closing one side fails the other's sends with WorkerUnavailableError", async () => {
    const { a, b } = await pair();
    const acc = await b;
    await acc.ready;
    const closed = new Promise<Error | null>((r) => a.onClose(r));
    acc.close();
    expect(await closed).toBeInstanceOf(WorkerUnavailableError);
    await expect(a.send({ control: [Buffer.from("late")], buffers: [] })).rejects.toThrow(WorkerUnavailableError);
  });
});

describe("FrameCutter", () => {
  it("cuts frames split at every byte boundary, and views single-chunk bodies without copying", () => {
    const head = encodeFrameHead(FrameKind.MESSAGE, 3, [
      { byteLength: 10, channel: 0, target: { type: "cpu", index: 0 }, descriptorBytes: 2 },
    ]);
    const frame = Buffer.concat([head, Buffer.from([9, 8]), Buffer.from("abc")]);
    const out: { body: string; desc: number[] }[] = [];
    const c = new FrameCutter((f) =>
      out.push({ body: Buffer.from(f.body).toString(), desc: [...f.entries[0]!.descriptor] }),
    );
    for (const byte of Buffer.concat([frame, frame])) c.push(Uint8Array.of(byte));
    expect(out).toEqual([
      { body: "abc", desc: [9, 8] },
      { body: "abc", desc: [9, 8] },
    ]);
    let body: Uint8Array | null = null;
    new FrameCutter((f) => (body = f.body)).push(frame);
    expect(body!.buffer).toBe(frame.buffer);
  });

  it("refuses garbage: wrong magic, unknown kind, oversized body, buffers on a non-message frame", () => {
    const bad = (b: Buffer) => () => new FrameCutter(() => undefined).push(b);
    const ok = encodeFrameHead(FrameKind.HELLO, 0, []);
    expect(bad(Buffer.from("GET / HTTP/1.1\r\n\r\n"))).toThrow(ProtocolError);
    const kind = Buffer.from(ok);
    kind[2] = 77;
    expect(bad(kind)).toThrow(/unknown kind/);
    const big = Buffer.from(ok);
    big.writeUInt32LE(2 ** 31, 4);
    expect(bad(big)).toThrow(/exceeds/);
    const withBuf = encodeFrameHead(FrameKind.SETUP, 0, [
      { byteLength: 1, channel: 0, target: { type: "cpu", index: 0 }, descriptorBytes: 0 },
    ]);
    expect(bad(withBuf)).toThrow(/non-message/);
    const c = new FrameCutter(() => undefined);
    expect(() => c.push(Buffer.from("xxxxxxxxxxxxxxxx"))).toThrow(ProtocolError);
    expect(() => c.push(ok)).toThrow(ProtocolError); // refuses input after an error
  });
});

describe("tcp channel striping", () => {
  it("cuts large transfers into page-aligned parts, one per lane, and keeps small ones whole", () => {
    expect(splitTransfer(100_000, 5, 2, 8 << 20)).toEqual([{ lane: 1, start: 0, end: 100_000 }]);
    const parts = splitTransfer(10_000_001, 0, 3, 8 << 20);
    expect(parts.map((p) => p.lane)).toEqual([0, 1, 2]);
    expect(parts[0]!.end % 4096).toBe(0);
    expect(parts.at(-1)!.end).toBe(10_000_001);
    for (let i = 1; i < parts.length; i++) expect(parts[i]!.start).toBe(parts[i - 1]!.end);
    expect(splitTransfer(9 << 20, 7, 1, 8 << 20)).toEqual([{ lane: 0, start: 0, end: 9 << 20 }]);
  });
});
