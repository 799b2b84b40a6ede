/**
 * FrameReader: any chunking of a byte stream (1-byte chunks, seeded random splits)
 * yields the same frames; buffers land in the caller's allocator; limits and garbage
 * stop the reader for good.
 */
import { describe, expect, it } from "vitest";
import { ProtocolError, Tensor, arange, tensor } from "../../sdk/index.js";
import {
  type EncodedMessage,
  type Frame,
  FrameReader,
  type FrameReaderOptions,
  MessageType,
  decodeFrame,
  encodeMessage,
} from "../../sdk/wire/index.js";

/** mulberry32: a tiny seeded PRNG for the chunk splits. */
function prng(seed: number): () => number {
  let a = seed >>> 0;
  return () => {
    a = (a + 0x6d2b79f5) >>> 0;
    let t = a;
    t = Math.imul(t ^ (t >>> 15), t | 1);
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  };
}

function concat(parts: Uint8Array[]): Uint8Array {
  const out = new Uint8Array(parts.reduce((n, p) => n + p.byteLength, 0));
  let o = 0;
  for (const p of parts) {
    out.set(p, o);
    o += p.byteLength;
  }
  return out;
}

function streamOf(msgs: EncodedMessage[]): Uint8Array {
  return concat(msgs.flatMap((m) => [m.header, m.payload, ...m.buffers]));
}

function feed(stream: Uint8Array, cuts: number[], opts?: FrameReaderOptions): Frame[] {
  const frames: Frame[] = [];
  const r = new FrameReader((f) => frames.push(f), opts);
  let prev = 0;
  for (const c of [...cuts, stream.byteLength]) {
    r.push(stream.subarray(prev, c));
    prev = c;
  }
  r.end();
  expect(r.idle).toBe(true);
  return frames;
}

const messages = (): EncodedMessage[] => [
  encodeMessage({ type: MessageType.REQUEST, id: 1, payload: { fn: "add", args: [tensor([1, 2, 3]), 1] } }),
  encodeMessage({ type: MessageType.RESPONSE, id: 1, flags: 9, payload: null }),
  encodeMessage({ type: MessageType.REQUEST, id: 2, payload: [tensor([], { dtype: "int64" }), tensor(true)] }),
  encodeMessage({ type: MessageType.SHUTDOWN, id: 3, payload: { big: arange(0, 600).reshape([6, 100]) } }),
];

function summary(frames: Frame[]): unknown[] {
  return frames.map((f) => {
    const d = decodeFrame(f);
    const tensors = d.tensors.map((t: Tensor) => [t.dtype, t.shape, t.tolist()]);
    return [d.type, d.id, d.flags, tensors, f.buffers.map((b) => Array.from(b))];
  });
}

describe("FrameReader", () => {
  it("gives the same frames for one chunk, 1-byte chunks and seeded random chunkings", () => {
    const stream = streamOf(messages());
    const whole = summary(feed(stream, []));
    expect(whole.length).toBe(4);
    const ones = Array.from({ length: stream.byteLength - 1 }, (_, i) => i + 1);
    expect(summary(feed(stream, ones))).toEqual(whole);
    for (let seed = 1; seed <= 20; seed++) {
      const rnd = prng(seed);
      const cuts = new Set<number>();
      const k = 1 + Math.floor(rnd() * 40);
      for (let i = 0; i < k; i++) cuts.add(Math.floor(rnd() * stream.byteLength));
      expect(
        summary(
          feed(
            stream,
            [...cuts].sort((a, b) => a - b),
          ),
        ),
      ).toEqual(whole);
    }
  });

  it("lands each buffer in memory from the caller's allocator, of the announced size", () => {
    const m = encodeMessage({ type: MessageType.REQUEST, id: 5, payload: [tensor([1, 2]), tensor([[1, 2, 3]])] });
    const given: Uint8Array[] = [];
    const frames = feed(streamOf([m]), [3, 30, 31], {
      allocate: (n) => {
        const b = new Uint8Array(n + 8); // larger is fine: the first n bytes are used
        given.push(b);
        return b;
      },
    });
    expect(given.map((b) => b.byteLength - 8)).toEqual([16, 24]); // int64;
    expect(frames[0]!.buffers.map((b) => b.buffer)).toEqual(given.map((b) => b.buffer));
    const [a, b] = decodeFrame(frames[0]!).payload as Tensor[];
    expect(a!.storage.data.buffer).toBe(given[0]!.buffer); // zero-copy decode
    expect(b!.tolist()).toEqual([[1, 2, 3]]);
  });

  it("rejects a frame past the limits, then refuses all input", () => {
    const m = encodeMessage({
      type: MessageType.REQUEST,
      id: 1,
      payload: { s: "x".repeat(200), t: tensor([1, 2, 3, 4]) },
    });
    const stream = streamOf([m]);
    const cases: [FrameReaderOptions, RegExp][] = [
      [{ maxPayloadBytes: 100 }, /maxPayloadBytes/],
      [{ maxBufferBytes: 8 }, /maxBufferBytes/],
      [{ maxBuffers: 0 }, /maxBuffers/],
    ];
    for (const [opts, re] of cases) {
      const r = new FrameReader(() => expect.fail("no frame expected"), opts);
      expect(() => r.push(stream)).toThrow(re);
      expect(r.failed).toBeInstanceOf(ProtocolError);
      expect(() => r.push(stream)).toThrow(/refuses input/);
      expect(() => r.push(new Uint8Array(0))).toThrow(ProtocolError);
    }
  });

  it("rejects bad magic and unknown types as soon as the header is complete", () => {
    const good = streamOf(messages().slice(0, 1));
    const frames: Frame[] = [];
    const r = new FrameReader((f) => frames.push(f));
    const bad = good.slice();
    bad[0] = 0x47; // "GET ..."
    r.push(good); // one good frame first
    expect(frames.length).toBe(1);
    for (let i = 0; i < 23; i++) r.push(bad.subarray(i, i + 1));
    expect(() => r.push(bad.subarray(23, 24))).toThrow(/wrong magic/);
    expect(() => r.push(good)).toThrow(/refuses input/);
    expect(frames.length).toBe(1);

    const unknown = good.slice();
    unknown[3] = 0xee;
    expect(() => new FrameReader(() => {}).push(unknown)).toThrow(/unknown message type 0xee/);
  });

  it("reports a stream that ends inside a frame", () => {
    const stream = streamOf(messages().slice(0, 1));
    const r = new FrameReader(() => {});
    r.push(stream.subarray(0, 30)); // header complete, buffer table truncated
    expect(r.idle).toBe(false);
    expect(() => r.end()).toThrow(/ended in the middle of a frame/);
    expect(() => r.push(stream.subarray(30))).toThrow(/refuses input/);
  });

  it("turns an allocator failure into a ProtocolError", () => {
    const stream = streamOf(messages().slice(0, 1));
    const r = new FrameReader(() => {}, {
      allocate: () => {
        throw new RangeError("Array buffer allocation failed");
      },
    });
    expect(() => r.push(stream)).toThrow(/cannot allocate 24 bytes/);
  });
});
