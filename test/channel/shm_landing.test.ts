/**
 * The shm channel's landing blocks (sdk/channel/shm/tagged_channel.ts, native/src/channels/shm/landing.cc):
 * a buffer of 64 KiB to 64 MiB is copied once, straight into shared memory the receiver offered,
 * and the receiver's pipe takes that memory as the received buffer.
 * 1. Channel level, with a real peer process (test/native/channel_peer.ts): the first transfer of a
 *    size class goes through the ring, the peer then offers blocks and the next send of that class
 *    lands; sizes just outside the landing range never land; a receiver that brings its own buffer
 *    gets a copy; echoes stay intact; after close no landing mapping is left in this process.
 * 2. Through rpc (master + one real worker, TPRPC_CHANNELS=shm, a landing budget of 8 MiB so blocks
 *    run out and transfers fall back to the ring): a tensor the master receives lives in a landing
 *    block (no second copy); tensors the worker keeps stay as they were sent while the master
 *    mutates and resends its own; every round trip comes back intact.
 * 3. Through tprpc.distributed (same set-up): a receive gives its landing block back at once (the
 *    storage that adopted it lets go of the one before; a copy into a view releases it), so with eight
 *    blocks 40 round trips all land, without waiting for V8 to collect anything.
 */
import fs from "node:fs";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import type { ChannelBuffer } from "../../sdk/channel/interface.js";
import { LANDED } from "../../sdk/channel/native_common.js";
import { TaggedChannel } from "../../sdk/channel/shm/tagged_channel.js";
import { type Tensor, distributed, rpc, zeros } from "../../sdk/index.js";
import { loadNative } from "../../sdk/native/binding.js";
import { pattern } from "../native/channel_peer.js";
import { nativeOrSkip } from "../native/helpers.js";
import { sameBytes, useRpcGroup, useShmPeer } from "./helpers.js";

const { skip } = nativeOrSkip();

/** [start, end) of this process's mappings of landing blocks (memfds named tprpc-shm-landing). */
function landingMappings(): Array<[number, number]> {
  return fs
    .readFileSync("/proc/self/maps", "utf8")
    .split("\n")
    .filter((l) => l.includes("tprpc-shm-landing"))
    .map(
      (l) =>
        l
          .split(" ")[0]!
          .split("-")
          .map((h) => parseInt(h, 16)) as [number, number],
    );
}

/** Polls `cond` every 10 ms for at most `ms`. */
async function until(cond: () => boolean, ms: number): Promise<boolean> {
  const end = Date.now() + ms;
  while (!cond()) {
    if (Date.now() > end) return false;
    await new Promise((r) => setTimeout(r, 10));
  }
  return true;
}

describe.skipIf(skip !== null)("shm landing blocks, channel level", () => {
  const shm = useShmPeer();

  it("the second send of a size class lands in a block the peer offered; sizes outside 64 KiB-64 MiB never land", async () => {
    const { peer, channel: ch } = shm;
    const stats = () => ch.landingStats()!;
    expect(stats()).not.toBeNull();
    let seed = 1;
    for (const n of [65_536, 1_000_003, 4_000_000, 40_000_000]) {
      const first = pattern(n, seed++);
      expect(sameBytes(await peer.echo(first).back, first), `${n} B through the ring`).toBe(true);
      // the peer offers blocks of this class after its first (ring) receive; our watcher maps them
      expect(await until(() => stats().peerFreeBlocks > 0, 5_000), `blocks offered for ${n} B`).toBe(true);
      const before = stats().landedSends;
      const x = pattern(n, seed++);
      const e = peer.echo(x);
      expect(stats().landedSends, `${n} B landed`).toBe(before + 1);
      // the echo comes back into the buffer our side brings (a copy out of our own block)
      expect(sameBytes(await e.back, x), `${n} B landed and echoed`).toBe(true);
      await e.done;
    }
    for (const n of [65_535, 64 * 2 ** 20 + 1]) {
      const before = stats().landedSends;
      for (let k = 0; k < 2; k++) {
        const x = pattern(n, seed++);
        expect(sameBytes(await peer.echo(x).back, x), `${n} B`).toBe(true);
      }
      expect(stats().landedSends, `${n} B never lands`).toBe(before);
    }
    expect(peer.childErrors).toEqual([]);
    expect(landingMappings().length).toBeGreaterThan(0);
  }, 60_000);

  it("copies of 1 MiB and more (streaming stores) land intact from any source offset and length", async () => {
    const { peer, channel: ch } = shm;
    const stats = () => ch.landingStats()!;
    let seed = 50;
    // NB: around the 1 MiB threshold (TPRPC_SHM_STREAM_BYTES' default) and a 64-byte step, from sources
    // 0-15 bytes past 16-byte alignment (unaligned loads) and lengths that leave a tail to memcpy; the
    // blocks are page-aligned, but 40,000,017 B is copied in pieces on the pool whose starts are not
    for (const [n, offset] of [
      [2 ** 20 - 1, 3],
      [2 ** 20, 0],
      [2 ** 20 + 63, 1],
      [2 ** 20 + 64, 15],
      [1_500_001, 7],
      [3_000_017, 9],
      [40_000_017, 5],
    ] as const) {
      const x = pattern(n + offset, seed++).subarray(offset);
      const before = stats();
      const warm = pattern(n, seed++); // the first of a new size class goes through the ring
      expect(sameBytes(await peer.echo(warm).back, warm)).toBe(true);
      if (stats().landedSends === before.landedSends)
        expect(await until(() => stats().peerBytes > before.peerBytes, 5_000), `blocks offered for ${n} B`).toBe(true);
      const landed = stats().landedSends;
      const e = peer.echo(x);
      expect(stats().landedSends, `${n} B at offset ${offset} landed`).toBe(landed + 1);
      expect(sameBytes(await e.back, x), `${n} B at offset ${offset}`).toBe(true);
      await e.done;
    }
    expect(peer.childErrors).toEqual([]);
  }, 60_000);

  it("leaves no landing mapping behind once the channel is closed", async () => {
    const { channel: ch } = shm;
    ch.close();
    expect(ch.landingStats()).toBeNull();
    // NB: this side copied every landed transfer out, so no buffer of ours still views a block
    expect(landingMappings()).toEqual([]);
  });
});

describe.skipIf(skip !== null)("shm landing blocks come back through the ring header's free queue", () => {
  const shm = useShmPeer();

  it("300 blocks freed at once (more than the queue's 256 slots: the rest by socket) are all landed in again", async () => {
    const { peer, channel: ch } = shm;
    const stats = () => ch.landingStats()!;
    const native = loadNative()!;
    const n = 65_536;
    const cpu = { type: "cpu", index: 0 } as const;
    let seed = 300;
    /** The peer sends a pattern; the adopted buffer when it landed in one of our blocks, else null (received by copy). */
    const receive = async (): Promise<Uint8Array | null> => {
      const s = seed++;
      const { d } = await peer.askSend(n, s);
      const adopted = ch.adoptBuffer(d, n, cpu);
      const bytes = adopted?.kind === "cpu" ? adopted.bytes : new Uint8Array(n);
      await ch.recv(d, { kind: "cpu", bytes });
      expect(sameBytes(bytes, pattern(n, s)), `send ${s}`).toBe(true);
      return adopted ? bytes : null;
    };
    // 1. hold 300 landed buffers: the peer runs out of blocks now and then, and we offer more after each copy
    const held: Uint8Array[] = [];
    for (let i = 0; i < 1_000 && held.length < 300; i++) {
      const b = await receive();
      if (b) held.push(b);
    }
    expect(held.length).toBe(300);
    // 2. detaching frees the blocks (their finalizers run at the next setImmediate): 256 notices fill the
    // queue, the other 44 go as kMsgFree (queuedFrees and socketFrees count them on our side)
    const sent = stats();
    for (const b of held) expect(native.detachBuffer(b)).toBe(true);
    for (let i = 0; i < 3; i++) await new Promise((r) => setImmediate(r));
    await new Promise((r) => setTimeout(r, 50));
    const queued = stats().queuedFrees - sent.queuedFrees;
    const bySocket = stats().socketFrees - sent.socketFrees;
    // NB: 256 and 44, unless the peer's watcher took the queue in between (it looks once a second)
    expect([queued + bySocket, queued >= 256]).toEqual([300, true]);
    // 3. every block we offered is free now (the held ones and the few the peer had left): as many sends all
    // land only if the peer took both kinds of notice (a send through the ring would have had no block)
    const blocks = stats().offeredBytes / n;
    expect(blocks).toBeGreaterThanOrEqual(300);
    // NB: kept, so that no block comes back through a garbage collection meanwhile
    const again: Uint8Array[] = [];
    for (let i = 0; i < blocks; i++) {
      const b = await receive();
      if (b) again.push(b);
    }
    expect(again.length).toBe(blocks);
    expect(peer.childErrors).toEqual([]);
  }, 60_000);
});

describe.skipIf(skip !== null)("shm landing blocks of an idle size make room for a new size", () => {
  const BUDGET = 4 * 2 ** 20; // one burst of four 1 MiB blocks fills it
  const ENV = { TPRPC_SHM_LANDING_BYTES: String(BUDGET) };
  const shm = useShmPeer(ENV);

  it("fills the budget with 1 MiB blocks; 3 MB sends land only once those were unused for 2 s and taken back", async () => {
    const { peer, channel: ch } = shm;
    const stats = () => ch.landingStats()!;
    const echo = async (n: number, seed: number): Promise<void> => {
      const x = pattern(n, seed);
      expect(sameBytes(await peer.echo(x).back, x), `${n} B echoed`).toBe(true);
      expect(stats().peerBytes, "the peer's blocks stay within its budget").toBeLessThanOrEqual(BUDGET);
      expect(stats().offeredBytes, "our blocks stay within our budget").toBeLessThanOrEqual(BUDGET);
    };
    let seed = 100;
    for (let i = 0; i < 16; i++) await echo(2 ** 20, seed++);
    expect(await until(() => stats().peerBytes === BUDGET, 5_000), "1 MiB blocks fill the peer's budget").toBe(true);
    // just used: a 3 MB transfer finds no room and takes nothing back
    const t0 = Date.now();
    let landed = stats().landedSends;
    for (let i = 0; i < 3; i++) await echo(3_000_000, seed++);
    if (Date.now() - t0 < 1_500) {
      expect(stats().landedSends, "no 3 MB send lands while the 1 MiB blocks are in use").toBe(landed);
      expect(stats().peerBytes).toBe(BUDGET);
    }
    await new Promise((r) => setTimeout(r, 2_200));
    landed = stats().landedSends;
    let tries = 0;
    while (stats().landedSends === landed && tries++ < 30) await echo(3_000_000, seed++);
    expect(stats().landedSends, "a 3 MB send lands once idle 1 MiB blocks were taken back").toBeGreaterThan(landed);
    expect(peer.childErrors).toEqual([]);
  }, 60_000);

  it("leaves no landing mapping behind once the channel is closed", async () => {
    const { channel: ch } = shm;
    ch.close();
    expect(landingMappings()).toEqual([]);
  });
});

describe.skipIf(skip !== null)("shm landing blocks unused for TPRPC_SHM_LANDING_IDLE_S are given back", () => {
  const ENV = { TPRPC_SHM_LANDING_IDLE_S: "1" };
  const shm = useShmPeer(ENV);

  it("both sides unmap idle blocks after a quiet second or two, and landing starts again on the next transfers", async () => {
    const { peer, channel: ch } = shm;
    const stats = () => ch.landingStats()!;
    let seed = 200;
    const echo = async (n: number): Promise<void> => {
      const x = pattern(n, seed++);
      expect(sameBytes(await peer.echo(x).back, x), `${n} B echoed`).toBe(true);
    };
    for (let i = 0; i < 4; i++) await echo(2 ** 20);
    expect(stats().peerBytes, "the peer offered blocks").toBeGreaterThan(0);
    expect(stats().offeredBytes, "we offered blocks").toBeGreaterThan(0);
    expect(landingMappings().length).toBeGreaterThan(0);
    expect(
      await until(() => stats().peerBytes === 0 && stats().offeredBytes === 0, 10_000),
      "idle blocks given back on both sides",
    ).toBe(true);
    expect(landingMappings(), "no landing block mapped here any more").toEqual([]);
    const landed = stats().landedSends;
    for (let i = 0; i < 4; i++) await echo(2 ** 20);
    expect(stats().landedSends, "landing resumes with new blocks").toBeGreaterThan(landed);
    expect(peer.childErrors).toEqual([]);
  }, 30_000);
});

const keep = (t: Tensor): number => {
  const g = globalThis as { __landingKept?: Tensor[] };
  (g.__landingKept ??= []).push(t);
  return g.__landingKept.length;
};

const keptRanges = (): Array<[number, number]> =>
  ((globalThis as { __landingKept?: Tensor[] }).__landingKept ?? []).map((t) => {
    const a = t.typedArray() as Float32Array;
    let lo = Infinity;
    let hi = -Infinity;
    for (const v of a) {
      if (v < lo) lo = v;
      if (v > hi) hi = v;
    }
    return [lo, hi];
  });

describe.skipIf(skip !== null)("shm landing blocks through rpc", () => {
  useRpcGroup({ TPRPC_CHANNELS: "shm", TPRPC_SHM_LANDING_BYTES: String(8 * 2 ** 20) });

  it("a received tensor lives in a landing block, and stays as sent when the sender mutates its own", async () => {
    const native = loadNative()!;
    const x = zeros([262_144]); // 1 MiB of float32
    const xs = x.typedArray() as Float32Array;
    const back: Tensor[] = [];
    for (let i = 1; i <= 6; i++) {
      xs.fill(i);
      back.push((await rpc.rpcSync("worker1", (t: Tensor) => t, [x])) as Tensor);
    }
    xs.fill(-1);
    back.forEach((y, i) => {
      const v = y.typedArray() as Float32Array;
      expect([v[0], v[v.length - 1], v.length], `echo ${i + 1}`).toEqual([i + 1, i + 1, 262_144]);
    });
    // the first echo came through the ring (no blocks yet); later ones landed in our blocks
    const maps = landingMappings();
    const inBlock = back.map((y) => {
      const at = native.addressOf(y.typedArray());
      return maps.some(([lo, hi]) => at >= lo && at < hi);
    });
    expect(inBlock.slice(1).some(Boolean)).toBe(true);
  }, 60_000);

  it("tensors the worker keeps stay intact while the master mutates and resends, landed or (once blocks run out) through the ring", async () => {
    const x = zeros([262_144]);
    const xs = x.typedArray() as Float32Array;
    const n = 24; // more 1 MiB tensors than the 8 MiB budget has blocks
    for (let i = 1; i <= n; i++) {
      xs.fill(i);
      expect(await rpc.rpcSync("worker1", keep, [x])).toBe(i);
    }
    xs.fill(0);
    const ranges = (await rpc.rpcSync("worker1", keptRanges)) as Array<[number, number]>;
    expect(ranges).toEqual(Array.from({ length: n }, (_, i) => [i + 1, i + 1]));
  }, 60_000);
});

// NB: shipped functions name the SDK `tprpc` on the worker
declare const tprpc: typeof import("../../sdk/index.js");

/** The worker's end: `k` times receive from rank 0 into a [512, 512] float32 tensor (or a strided view) and send it back. */
async function p2pEcho(k: number, view: boolean): Promise<number> {
  const t = view ? tprpc.zeros([512, 520]).narrow(1, 4, 512) : tprpc.zeros([512, 512]);
  for (let i = 0; i < k; i++) {
    await tprpc.distributed.recv(t, 0);
    await tprpc.distributed.send(t, 0);
  }
  return k;
}

/** Counts this process's shm sends of at least 64 KiB: landed in a peer's block, or not. */
function countSends(): { landed: number; other: number; restore: () => void } {
  const proto = TaggedChannel.prototype;
  const send = proto.send;
  const out = { landed: 0, other: 0, restore: () => void (proto.send = send) };
  proto.send = function (this: TaggedChannel, b: ChannelBuffer) {
    const s = send.call(this, b);
    if (b.kind === "cpu" && b.bytes.byteLength >= 64 << 10) {
      if (s.descriptor[0] === LANDED) out.landed++;
      else out.other++;
    }
    return s;
  };
  return out;
}

describe.skipIf(skip !== null)("shm landing blocks through tprpc.distributed", () => {
  // NB: an 8 MiB budget: eight 1 MiB blocks per direction, fewer than the round trips below
  useRpcGroup({ TPRPC_CHANNELS: "shm", TPRPC_SHM_LANDING_BYTES: String(8 * 2 ** 20) });

  it.each([
    ["a whole tensor", false],
    ["a strided view", true],
  ])(
    "each receive gives its landing block back at once (no GC): 40 round trips of 1 MiB into %s all land, data intact",
    async (_what, view) => {
      const K = 40;
      const x = zeros([512, 512]);
      const xs = x.typedArray() as Float32Array;
      const into = view ? zeros([512, 520]).narrow(1, 4, 512) : zeros([512, 512]);
      const own = into.storage.data;
      const seen: ArrayBufferView[] = [];
      const echo = rpc.rpcAsync("worker1", p2pEcho, [K, view]);
      const sends = countSends();
      try {
        for (let i = 1; i <= K; i++) {
          xs.fill(i);
          xs[1000] = -i;
          await distributed.send(x, 1);
          await distributed.recv(into, 1);
          const got = into.contiguous().typedArray() as Float32Array;
          expect([got[0], got[1000], got[got.length - 1]], `round trip ${i}`).toEqual([i, -i, i]);
          if (!seen.includes(into.storage.data)) seen.push(into.storage.data);
        }
      } finally {
        sends.restore();
      }
      expect(await echo).toBe(K);
      // blocks come as the peer sees a first (ring) transfer of the size; after that every send lands,
      // since each receive gives its block back before the next send needs one
      expect(sends.landed, `landed ${sends.landed}, other ${sends.other}`).toBeGreaterThanOrEqual(K - 3);
      if (view) {
        // copied into: the view's storage is the one it had
        expect(seen).toEqual([own]);
      } else {
        // adopted: the storage took each landed block, and gave back the one before (detached, empty)
        const adopted = seen.filter((a) => a !== own);
        expect(adopted.length).toBeGreaterThanOrEqual(K - 3);
        expect(adopted.slice(0, -1).every((a) => a.byteLength === 0)).toBe(true);
        expect(into.storage.data.byteLength).toBe(512 * 512 * 4);
        expect(own.byteLength, "the tensor's own first array is the user's: never detached").toBe(512 * 512 * 4);
      }
    },
    60_000,
  );
});
