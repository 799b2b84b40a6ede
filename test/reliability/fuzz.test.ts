/**
 * Decoder fuzzing, in process, with a seeded PRNG: valid frames (calls with
 * tensors of several dtypes, a shared storage and an empty one, replies,
 * errors, RRef protocol messages, dates, undefined, big integers) are mutated
 * (bit flips, interesting bytes, truncations, length-field rewrites, inserted,
 * deleted, duplicated and spliced bytes) and fed to every decoder a peer's
 * bytes reach: the wire decoder (decodeControl and decodeMessage), the pipe's
 * frame parser (FrameCutter, in random chunk splits, then decodeControl on each
 * MESSAGE body), a real acceptor Pipe over an in-memory connection (HELLO,
 * negotiation, held and delivered messages, as the agent decodes them) and the
 * rendezvous store's FrameDecoder. Proves: nothing crashes or hangs, every
 * error thrown (or a pipe closes with) is a TprpcError (anything else is a
 * bug, listed with its input), and memory is bounded (heap and RSS after a
 * full collection, before vs after). CI: 100,000 frames; full: 1,000,000.
 */
import { describe, expect, it } from "vitest";
import { TprpcError, WorkerUnavailableError, tensor, zeros } from "../../sdk/index.js";
import { FrameCutter, FrameKind, encodeFrameHead } from "../../sdk/pipe/frame.js";
import { Pipe, encodeHandshake, localCapabilities } from "../../sdk/pipe/index.js";
import { FrameDecoder, Op, encodeFrame, intField } from "../../sdk/rpc/rendezvous/protocol.js";
import type { TransportConnection } from "../../sdk/transport/interface.js";
import { MessageType, decodeControl, decodeMessage, encodeMessage } from "../../sdk/wire/index.js";
import { below, prng, report, size } from "./common.js";
import { ensureHeapHeadroom } from "../../sdk/channel/heap_headroom.js";

const FRAMES = size(100_000, 1_000_000);
const SEED = 0xf0221;
/** Share of the frames per decoder. */
const SHARES = { wire: 0.4, cutter: 0.25, pipe: 0.15, store: 0.2 };
/** Largest buffer the harness allocates for a mutated pipe entry (the real pipe would allocate up to 16 GiB). */
const MAX_HARNESS_BUFFER = 1 << 20;

/** A 4-byte length field of a seed: its offset and byte order. */
interface LengthField {
  off: number;
  le: boolean;
}
interface Seed {
  bytes: Buffer;
  lengths: LengthField[];
  /** The out-of-band buffers of a wire seed, in order. */
  buffers: Uint8Array[];
  /** Where the wire header ends and the payload starts (wire seeds). */
  split: number;
}

// ---------------------------------------------------------------------------------------------
// Seeds: valid frames.

function wireSeeds(): Seed[] {
  const x = tensor(new Float32Array([1.5, -2, 3.25, 4, 5, 6]));
  const messages: { type: MessageType; payload: unknown }[] = [
    {
      type: MessageType.REQUEST,
      payload: {
        from: "master",
        target: { kind: "source", hash: "a1b2c3", src: "(a, b) => a.add(b)", deps: {} },
        args: [x, 2, "s", { k: [1, 2, { z: null }] }],
      },
    },
    {
      type: MessageType.REQUEST,
      payload: {
        from: "worker1",
        target: { kind: "registered", name: "dist.step" },
        args: [
          x,
          x,
          tensor([
            [1, 2],
            [3, 4],
          ]),
          tensor([true, false, true]),
          tensor(new Float64Array([0.5])),
          zeros([0]),
        ],
        ext: { dist: { ctx: 12, seq: 3 } },
      },
    },
    { type: MessageType.RESPONSE, payload: { value: [x, tensor(new Int32Array([7, 8, 9]))], prof: [1.5, 2.5] } },
    { type: MessageType.ERROR, payload: { error: new RangeError("fails on purpose") } },
    {
      type: MessageType.REMOTE_CALL,
      payload: { from: "master", target: { kind: "builtin", name: "add" }, args: [x, 1], rrefId: "0:12", fork: "0:13" },
    },
    { type: MessageType.RREF_USER_DELETE, payload: { from: "master", rrefId: "1:44", fork: "0:45" } },
    { type: MessageType.RREF_FETCH, payload: { from: "master", target: null, args: [], rrefId: "1:44" } },
    {
      type: MessageType.RESPONSE,
      payload: { value: { when: new Date(1_700_000_000_000), none: undefined, big: 2n ** 70n, n: -1.25e300 } },
    },
  ];
  return messages.map((m, i) => {
    const e = encodeMessage({ type: m.type, id: 1000 + i, payload: m.payload });
    const lengths: LengthField[] = [
      { off: 8, le: true },
      { off: 12, le: true },
      { off: 16, le: true },
      { off: 20, le: true },
    ];
    for (let b = 0; b < e.descriptors.length; b++)
      lengths.push({ off: 24 + 16 * b, le: true }, { off: 28 + 16 * b, le: true });
    // NB: CPU tensors only: every buffer is host bytes
    return {
      bytes: Buffer.concat([e.header, e.payload]),
      lengths,
      buffers: e.buffers as Uint8Array[],
      split: e.header.length,
    };
  });
}

/** Capabilities with no channels: the acceptor negotiates none, so tensor-free messages flow at once. */
const CAPS = Buffer.from(encodeHandshake(FrameKind.HELLO, localCapabilities("fuzz-peer", [], { cpu: 1, cuda: 0 }))[1]!);

/** A pipe stream: optionally a HELLO, then MESSAGE frames (with their buffer entries) of wire seeds. */
function pipeStream(parts: Seed[], hello: boolean, withEntries: boolean): Seed {
  const chunks: Buffer[] = [];
  const lengths: LengthField[] = [];
  let at = 0;
  const push = (b: Buffer) => {
    chunks.push(b);
    at += b.length;
  };
  if (hello) {
    lengths.push({ off: at + 4, le: true }, { off: at + 8, le: true });
    push(encodeFrameHead(FrameKind.HELLO, CAPS.length, []));
    push(CAPS);
  }
  const buffers: Uint8Array[] = [];
  for (const s of parts) {
    const entries = withEntries
      ? s.buffers.map((b) => ({
          byteLength: b.byteLength,
          channel: 0,
          target: { type: "cpu" as const, index: 0 },
          descriptorBytes: 0,
        }))
      : [];
    lengths.push({ off: at + 4, le: true }, { off: at + 8, le: true });
    for (let i = 0; i < entries.length; i++)
      lengths.push({ off: at + 16 + 16 * i, le: true }, { off: at + 28 + 16 * i, le: true });
    const head = encodeFrameHead(FrameKind.MESSAGE, s.bytes.length, entries);
    push(head);
    for (const l of s.lengths) lengths.push({ off: at + l.off, le: l.le });
    push(s.bytes);
    if (withEntries) buffers.push(...s.buffers);
  }
  return { bytes: Buffer.concat(chunks), lengths, buffers, split: 0 };
}

function storeSeeds(): Seed[] {
  const frames = [
    encodeFrame(Op.SET, 1, ["rendezvous/worker1", JSON.stringify({ rank: 1, host: "127.0.0.1", port: 41234 })]),
    encodeFrame(Op.GET, 2, ["rendezvous/worker2", "30000"]),
    encodeFrame(Op.ADD, 3, ["barrier/shutdown/arrived", "1"]),
    encodeFrame(Op.CAS, 4, ["k", "old", "new", "0"]),
    encodeFrame(Op.WAIT, 5, ["1000", "a", "b", "c"]),
    encodeFrame(Op.NUM_KEYS, 6, []),
    encodeFrame(Op.WATCH, 7, ["members/"]),
    encodeFrame(Op.OK, 8, ["v"]),
    encodeFrame(Op.ERR, 9, ["RpcTimeoutError", "timed out", "1000"]),
    encodeFrame(Op.EVENT, 7, ["set", "members/worker3", "x"]),
  ];
  return frames.map((bytes) => {
    const lengths: LengthField[] = [
      { off: 0, le: false },
      { off: 5, le: false },
    ];
    const count = bytes.readUInt16BE(9);
    let at = 11;
    for (let i = 0; i < count; i++) {
      lengths.push({ off: at, le: false });
      at += 4 + bytes.readUInt32BE(at);
    }
    return { bytes, lengths, buffers: [], split: 0 };
  });
}

// ---------------------------------------------------------------------------------------------
// Mutations.

const INTERESTING_BYTES = [0x00, 0x01, 0x7f, 0x80, 0xff, 0xc1, 0xdd, 0xdf, 0xc6, 0xd4, 0x10, 0x54, 0x50, 0x51];

function mutate(seed: Seed, rand: () => number, others: Seed[]): Buffer {
  let b = Buffer.from(seed.bytes);
  const ops = 1 + below(rand, 3);
  for (let k = 0; k < ops; k++) {
    const n = b.length;
    switch (below(rand, 9)) {
      case 0: // bit flips
        if (n === 0) break;
        for (let i = 1 + below(rand, 8); i > 0; i--) b[below(rand, n)]! ^= 1 << below(rand, 8);
        break;
      case 1: // interesting bytes
        if (n === 0) break;
        for (let i = 1 + below(rand, 4); i > 0; i--)
          b[below(rand, n)] = rand() & 1 ? INTERESTING_BYTES[below(rand, INTERESTING_BYTES.length)]! : rand() & 0xff;
        break;
      case 2: // truncation
        b = b.subarray(0, below(rand, n + 1));
        break;
      case 3: {
        // a length field rewritten (a known one, or any 4 bytes)
        if (n < 4) break;
        const known = seed.lengths.filter((l) => l.off + 4 <= n);
        const f =
          known.length > 0 && rand() % 4 !== 0
            ? known[below(rand, known.length)]!
            : { off: below(rand, n - 3), le: (rand() & 1) === 1 };
        const old = f.le ? b.readUInt32LE(f.off) : b.readUInt32BE(f.off);
        const choices = [
          0, 1, 7, 15, 16, 23, 24, 0x7f, 0x80, 0xff, 0xffff, 0x10000, 0x7fffffff, 0x80000000, 0xffffffff,
        ];
        const v =
          rand() & 1
            ? choices[below(rand, choices.length)]!
            : (old + [-1, 1, -16, 16, old, rand()][below(rand, 6)]!) >>> 0;
        if (f.le) b.writeUInt32LE(v >>> 0, f.off);
        else b.writeUInt32BE(v >>> 0, f.off);
        break;
      }
      case 4: {
        // inserted bytes
        const at = below(rand, n + 1);
        const ins = Buffer.from(Array.from({ length: 1 + below(rand, 64) }, () => rand() & 0xff));
        b = Buffer.concat([b.subarray(0, at), ins, b.subarray(at)]);
        break;
      }
      case 5: {
        // deleted bytes
        if (n === 0) break;
        const at = below(rand, n);
        b = Buffer.concat([b.subarray(0, at), b.subarray(Math.min(n, at + 1 + below(rand, 32)))]);
        break;
      }
      case 6: {
        // a slice duplicated
        if (n === 0) break;
        const from = below(rand, n);
        const len = 1 + below(rand, Math.min(64, n - from));
        const at = below(rand, n + 1);
        b = Buffer.concat([b.subarray(0, at), b.subarray(from, from + len), b.subarray(at)]);
        break;
      }
      case 7: {
        // spliced with another seed's tail
        const o = others[below(rand, others.length)]!.bytes;
        b = Buffer.concat([b.subarray(0, below(rand, n + 1)), o.subarray(below(rand, o.length + 1))]);
        break;
      }
      case 8: // random bytes appended
        b = Buffer.concat([b, Buffer.from(Array.from({ length: 1 + below(rand, 32) }, () => rand() & 0xff))]);
        break;
    }
  }
  return b;
}

/** `b` cut into 1–4 chunks at seeded points. */
function chunks(b: Buffer, rand: () => number): Buffer[] {
  const cuts = [...new Set(Array.from({ length: below(rand, 4) }, () => below(rand, b.length + 1)))].sort(
    (p, q) => p - q,
  );
  const out: Buffer[] = [];
  let at = 0;
  for (const c of cuts) {
    out.push(b.subarray(at, c));
    at = c;
  }
  out.push(b.subarray(at));
  return out.filter((c) => c.length > 0);
}

// ---------------------------------------------------------------------------------------------
// The harness.

interface Bug {
  where: string;
  type: string;
  message: string;
  stack: string;
  input: string;
}

class Tally {
  readonly outcomes = new Map<string, number>();
  readonly bugs: Bug[] = [];
  bugCount = 0;
  slowestMs = 0;
  slowestWhere = "";

  /** Records what `fn` did with `input`: fine, a TprpcError (by class), or anything else (a bug). */
  check(where: string, input: Buffer, fn: () => void): void {
    try {
      fn();
      this.count("decoded");
    } catch (e) {
      this.error(where, input, e);
    }
  }

  error(where: string, input: Buffer, e: unknown): void {
    if (e instanceof TprpcError) {
      this.count(e.constructor.name);
      return;
    }
    this.bugCount++;
    if (this.bugs.length < 10) {
      const err = e instanceof Error ? e : new Error(String(e));
      this.bugs.push({
        where,
        type: err.constructor.name,
        message: err.message,
        stack: (err.stack ?? "").split("\n").slice(1, 5).join(" | "),
        input: input.subarray(0, 160).toString("hex") + (input.length > 160 ? `…(${input.length} bytes)` : ""),
      });
    }
  }

  count(k: string): void {
    this.outcomes.set(k, (this.outcomes.get(k) ?? 0) + 1);
  }

  timed(where: string, t0: number): void {
    const ms = performance.now() - t0;
    if (ms > this.slowestMs) {
      this.slowestMs = ms;
      this.slowestWhere = where;
    }
  }
}

/** An in-memory transport connection: bytes are pushed in by the test, writes go nowhere. */
class MemoryConnection implements TransportConnection {
  readonly remote = "memory://fuzz";
  closed = false;
  private dataCb: ((chunk: Uint8Array) => void) | null = null;
  private closeCbs: ((e: Error | null) => void)[] = [];

  write(): Promise<void> {
    return this.closed ? Promise.reject(new WorkerUnavailableError("closed", this.remote)) : Promise.resolve();
  }
  onData(cb: (chunk: Uint8Array) => void): void {
    this.dataCb = cb;
  }
  onClose(cb: (e: Error | null) => void): void {
    if (this.closed) cb(null);
    else this.closeCbs.push(cb);
  }
  close(): void {
    if (this.closed) return;
    this.closed = true;
    for (const cb of this.closeCbs.splice(0)) cb(null);
  }
  push(chunk: Uint8Array): void {
    this.dataCb?.(chunk);
  }
}

const gc = (globalThis as { gc?: () => void }).gc;

function memory(): { rss: number; heap: number } {
  gc?.();
  gc?.();
  const m = process.memoryUsage();
  return { rss: m.rss, heap: m.heapUsed };
}

describe(`decoder fuzzing: ${FRAMES.toLocaleString("en")} mutated frames`, () => {
  it(
    "throws only typed errors, never crashes, and keeps memory bounded",
    async () => {
      const wire = wireSeeds();
      const tensorFree = wire.filter((s) => s.buffers.length === 0);
      const store = storeSeeds();
      const pipeOpts = {
        local: localCapabilities("fuzz", [], { cpu: 1, cuda: 0 }),
        secret: "fuzz-secret",
        host: "127.0.0.1",
        timeoutMs: 10_000,
      };
      const rand = prng(SEED);
      const counts = {
        wire: Math.round(FRAMES * SHARES.wire),
        cutter: Math.round(FRAMES * SHARES.cutter),
        pipe: Math.round(FRAMES * SHARES.pipe),
        store: 0,
      };
      counts.store = FRAMES - counts.wire - counts.cutter - counts.pipe;
      const t = new Tally();
      const perSecond: Record<string, number> = {};
      let peakRss = 0;
      const sample = () => (peakRss = Math.max(peakRss, process.memoryUsage().rss));
      ensureHeapHeadroom(); // NB: the pipes below would keep it (64 MiB, once per process): count it in before
      const before = memory();
      const tAll = performance.now();

      // 1. the wire decoder: the control block (decodeControl) or header and payload apart (decodeMessage)
      let t0 = performance.now();
      for (let i = 0; i < counts.wire; i++) {
        const seed = wire[below(rand, wire.length)]!;
        const m = mutate(seed, rand, wire);
        let buffers = seed.buffers;
        if (rand() % 8 === 0 && buffers.length > 0) {
          // a buffer dropped, cut short or grown
          const k = below(rand, buffers.length);
          const op = below(rand, 3);
          buffers =
            op === 0
              ? buffers.filter((_, j) => j !== k)
              : buffers.map((b, j) =>
                  j !== k ? b : op === 1 ? b.subarray(0, b.byteLength >> 1) : new Uint8Array(b.byteLength + 4),
                );
        }
        const f0 = performance.now();
        if (rand() & 1) t.check("decodeControl", m, () => decodeControl(m, buffers));
        else {
          const cut = Math.min(m.length, seed.split);
          t.check("decodeMessage", m, () => decodeMessage(m.subarray(0, cut), m.subarray(cut), buffers));
        }
        t.timed("wire", f0);
        if (i % 10_000 === 0) sample();
      }
      perSecond.wire = counts.wire / ((performance.now() - t0) / 1000);

      // 2. the pipe's frame parser, fed in chunks, then the wire decoder on each MESSAGE as the agent does
      t0 = performance.now();
      for (let i = 0; i < counts.cutter; i++) {
        const parts = Array.from({ length: 1 + below(rand, 3) }, () => wire[below(rand, wire.length)]!);
        const stream = pipeStream(parts, (rand() & 3) === 0, true);
        const m = mutate(stream, rand, wire);
        const f0 = performance.now();
        const frames: Parameters<ConstructorParameters<typeof FrameCutter>[0]>[0][] = [];
        const cutter = new FrameCutter((f) => frames.push(f));
        t.check("FrameCutter", m, () => {
          for (const c of chunks(m, rand)) cutter.push(c);
        });
        for (const f of frames) {
          if (f.kind !== FrameKind.MESSAGE) continue;
          if (f.entries.some((e) => e.byteLength > MAX_HARNESS_BUFFER)) {
            t.count("entry too large for the harness");
            continue;
          }
          // the buffers as channels would deliver them: the seed's where the size matches, else zeros
          const buffers = f.entries.map((e, j) => {
            const b = stream.buffers[j];
            return b && b.byteLength === e.byteLength ? b : new Uint8Array(e.byteLength);
          });
          t.check("FrameCutter+decodeControl", m, () => decodeControl(f.body, buffers));
        }
        t.timed("cutter", f0);
        if (i % 10_000 === 0) sample();
      }
      perSecond.cutter = counts.cutter / ((performance.now() - t0) / 1000);

      // 3. a real acceptor pipe over an in-memory connection: HELLO, negotiation, messages decoded as the agent does
      t0 = performance.now();
      for (let i = 0; i < counts.pipe; i++) {
        const parts = Array.from({ length: 1 + below(rand, 3) }, () =>
          rand() % 8 === 0 ? wire[below(rand, wire.length)]! : tensorFree[below(rand, tensorFree.length)]!,
        );
        const stream = pipeStream(parts, true, true);
        const m = mutate(stream, rand, wire);
        const f0 = performance.now();
        const conn = new MemoryConnection();
        const pipe = Pipe.accept(conn, pipeOpts);
        let closedWith: Error | null | undefined;
        pipe.onClose((e) => (closedWith = e));
        pipe.onMessage((r) => {
          const bytes = r.buffers.map((b) => (b.kind === "cpu" ? b.bytes : new Uint8Array(0)));
          // NB: as the agent's Peer: a decode error propagates to the pipe, which closes with it
          decodeControl(r.control, bytes);
          t.count("delivered");
        });
        t.check("Pipe.accept", m, () => {
          for (const c of chunks(m, rand)) conn.push(c);
        });
        await new Promise((r) => setImmediate(r));
        if (closedWith) t.error("Pipe.accept (closed with)", m, closedWith);
        else t.count(closedWith === null ? "pipe closed" : "pipe open");
        pipe.close();
        t.timed("pipe", f0);
        if (i % 10_000 === 0) sample();
      }
      perSecond.pipe = counts.pipe / ((performance.now() - t0) / 1000);

      // 4. the rendezvous store's frame decoder
      t0 = performance.now();
      for (let i = 0; i < counts.store; i++) {
        const parts = Array.from({ length: 1 + below(rand, 3) }, () => store[below(rand, store.length)]!);
        const stream: Seed = { ...parts[0]!, bytes: Buffer.concat(parts.map((p) => p.bytes)) };
        const m = mutate(stream, rand, store);
        const f0 = performance.now();
        const dec = new FrameDecoder();
        t.check("store FrameDecoder", m, () => {
          for (const c of chunks(m, rand))
            for (const f of dec.push(c)) if (f.op === Op.ADD || f.op === Op.GET) intField(f.fields[1], "the number");
        });
        t.timed("store", f0);
        if (i % 10_000 === 0) sample();
      }
      perSecond.store = counts.store / ((performance.now() - t0) / 1000);

      const total = (performance.now() - tAll) / 1000;
      sample();
      const after = memory();
      const mib = (n: number) => (n / 2 ** 20).toFixed(1);
      report(
        "fuzz",
        `${FRAMES} frames in ${total.toFixed(1)} s (${(FRAMES / total).toFixed(0)}/s; per decoder/s: ` +
          `${Object.entries(perSecond)
            .map(([k, v]) => `${k} ${v.toFixed(0)}`)
            .join(", ")}); slowest frame ${t.slowestMs.toFixed(1)} ms (${t.slowestWhere}); ` +
          `heap ${mib(before.heap)} → ${mib(after.heap)} MiB, RSS ${mib(before.rss)} → ${mib(after.rss)} MiB (peak ${mib(peakRss)}); ` +
          `outcomes ${JSON.stringify(Object.fromEntries([...t.outcomes].sort()))}; untyped errors: ${t.bugCount}`,
      );
      for (const b of t.bugs)
        report("fuzz", `BUG in ${b.where}: ${b.type}: ${b.message} at ${b.stack}; input ${b.input}`);

      expect(t.bugs).toEqual([]);
      // every decoder saw frames it accepted and frames it refused (the mutations are neither too weak nor too strong)
      expect(t.outcomes.get("decoded") ?? 0).toBeGreaterThan(FRAMES / 100);
      expect(t.outcomes.get("ProtocolError") ?? 0).toBeGreaterThan(FRAMES / 4);
      expect(t.outcomes.get("delivered") ?? 0).toBeGreaterThan(0);
      expect(after.heap - before.heap).toBeLessThan(32 * 2 ** 20);
      expect(after.rss - before.rss).toBeLessThan(192 * 2 ** 20);
      expect(t.slowestMs).toBeLessThan(500);
    },
    size(120_000, 1_200_000),
  );
});
