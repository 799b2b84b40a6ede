/**
 * Storages in shared memory (Tensor.shareMemory_, sdk/tensor/shared.ts) and the shm channel's
 * zero-copy path for them (native/src/channels/shared.cc, sdk/channel/shm/tagged_channel.ts).
 * 1. Tensor level: shareMemory_ keeps the values of every dtype and every view, isShared says so,
 *    a second call is a no-op; without a provider it throws NotImplementedError.
 * 2. Channel level, with a real peer process (test/native/channel_peer.ts): a shared buffer goes as
 *    its file (sharedSends counts it) and the peer, which brings its own buffer, gets the bytes.
 * 3. Through rpc (master + one real worker, TPRPC_CHANNELS=shm): a shared tensor arrives shared
 *    (it was mapped, not copied) in both directions; the receiver's tensor never changes when the
 *    sender writes to its own, nor the other way round; a storage written after it was sent goes
 *    by copy next time (and arrives with the new values); views at odd offsets and forwarding work;
 *    dropped shared tensors, sent and received, leave no mapping (nor descriptor) behind.
 */
import fs from "node:fs";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import type { TaggedChannel } from "../../sdk/channel/shm/tagged_channel.js";
import { NotImplementedError } from "../../sdk/errors/index.js";
import { type Tensor, manualSeed, randn, rpc, tensor, zeros } from "../../sdk/index.js";
import { nativeChannels } from "../../sdk/native/channels.js";
import { collectGarbage } from "../../sdk/rpc/gc.js";
import { setSharedMemoryProvider, sharedMemoryProvider } from "../../sdk/tensor/shared.js";
import { pattern } from "../native/channel_peer.js";
import { nativeOrSkip } from "../native/helpers.js";
import { useRpcGroup, useShmPeer } from "./helpers.js";

const { skip } = nativeOrSkip();

/** How many mappings of shared storages (memfds named tprpc-shared-storage) this process has. */
function sharedMappings(): number {
  return fs
    .readFileSync("/proc/self/maps", "utf8")
    .split("\n")
    .filter((l) => l.includes("tprpc-shared-storage")).length;
}

/** Same shape and bytes. */
function sameValues(a: Tensor, b: Tensor): boolean {
  const bytes = (t: Tensor): Buffer => {
    const v = t.contiguous().typedArray();
    return Buffer.from(v.buffer, v.byteOffset, v.byteLength);
  };
  return a.shape.join() === b.shape.join() && Buffer.compare(bytes(a), bytes(b)) === 0;
}

describe.skipIf(skip !== null)("Tensor.shareMemory_", () => {
  it("keeps the values of every dtype, and every view sees the shared memory", () => {
    manualSeed(7);
    const cases: Tensor[] = [
      randn([300, 7]),
      randn([5, 5]).to("float64"),
      tensor([1, -2, 3, 2 ** 31 - 1], { dtype: "int32" }),
      tensor([1, -2, 2 ** 40], { dtype: "int64" }),
      tensor([true, false, true], { dtype: "bool" }),
    ];
    for (const t of cases) {
      const before = t.clone();
      const view = t.reshape([-1]);
      expect(t.isShared()).toBe(false);
      expect(t.shareMemory_()).toBe(t);
      expect(t.isShared() && view.isShared(), t.dtype).toBe(true);
      expect(sameValues(t, before), t.dtype).toBe(true);
      // a write through one view shows through the other: one storage, now in shared memory
      view.typedArray()[0] = view.typedArray()[1]!;
      expect(t.reshape([-1]).typedArray()[0]).toEqual(view.typedArray()[1]);
      const data = t.storage.data;
      t.shareMemory_();
      expect(t.storage.data, "a second call is a no-op").toBe(data);
    }
  });

  it("throws NotImplementedError where there is no shared memory", () => {
    const saved = sharedMemoryProvider();
    setSharedMemoryProvider(null);
    try {
      expect(() => zeros([4]).shareMemory_()).toThrow(NotImplementedError);
    } finally {
      setSharedMemoryProvider(saved);
    }
  });
});

describe.skipIf(skip !== null)("shm shared storages, channel level", () => {
  const shm = useShmPeer();

  it("a shared buffer goes as its file; a peer with its own buffer gets the bytes", async () => {
    const { peer, channel: ch } = shm;
    const native = nativeChannels()!;
    for (const [n, seed] of [
      [65_536, 1],
      [4_000_000, 2],
      [40_000_001, 3],
    ] as const) {
      const src = pattern(n, seed);
      const bytes = new Uint8Array(native.shareAlloc(n));
      bytes.set(src);
      const before = ch.landingStats()!.sharedSends;
      const e = peer.echo(bytes);
      expect(ch.landingStats()!.sharedSends, `${n} B shared`).toBe(before + 1);
      const back = await e.back;
      await e.done;
      expect(Buffer.compare(Buffer.from(back), Buffer.from(src)), `${n} B echoed`).toBe(0);
    }
    // below 64 KiB a shared buffer is copied like any other
    const small = new Uint8Array(native.shareAlloc(65_535));
    small.set(pattern(65_535, 4));
    const before = ch.landingStats()!.sharedSends;
    expect(Buffer.compare(Buffer.from(await peer.echo(small).back), Buffer.from(small))).toBe(0);
    expect(ch.landingStats()!.sharedSends).toBe(before);
    expect(peer.childErrors).toEqual([]);
  }, 60_000);
});

describe.skipIf(skip !== null)("shm shared storages through rpc", () => {
  useRpcGroup({ TPRPC_CHANNELS: "shm" });

  // worker side: keeps what it got, says whether it arrived shared and what it holds
  const keep = (t: Tensor): [boolean, number, number] => {
    (globalThis as { __kept?: Tensor }).__kept = t;
    const a = t.typedArray() as Float32Array;
    return [t.isShared(), a[0]!, a[a.length - 1]!];
  };
  const kept = (): [number, number] => {
    const a = (globalThis as { __kept?: Tensor }).__kept!.typedArray() as Float32Array;
    return [a[0]!, a[a.length - 1]!];
  };
  const writeKept = (v: number): Tensor => {
    const t = (globalThis as { __kept?: Tensor }).__kept!;
    (t.typedArray() as Float32Array).fill(v);
    return t;
  };

  it("crosses without a copy both ways, and neither side sees the other's later writes", async () => {
    const x = zeros([1_000_000]).shareMemory_(); // 4 MB
    const xs = x.typedArray() as Float32Array;
    xs.fill(1);
    expect(await rpc.rpcSync("worker1", keep, [x])).toEqual([true, 1, 1]);
    xs.fill(2); // the sender writes after the send
    expect(await rpc.rpcSync("worker1", kept)).toEqual([1, 1]);
    // the worker writes its copy and sends it back: it was written after it arrived, so it is copied
    const back = (await rpc.rpcSync("worker1", writeKept, [3])) as Tensor;
    expect([...(back.typedArray() as Float32Array).subarray(0, 2)]).toEqual([3, 3]);
    expect(back.isShared()).toBe(false);
    expect(xs[0]).toBe(2);
    // x was written after it was frozen: copied on its next send, with its new values
    expect(await rpc.rpcSync("worker1", keep, [x])).toEqual([false, 2, 2]);
  }, 60_000);

  it("a received shared tensor goes on without a copy (forwarding), views at odd offsets included", async () => {
    manualSeed(11);
    const big = randn([2_000_000]).shareMemory_();
    const view = big.narrow(0, 1_001, 500_000); // 2 MB starting 4,004 bytes in: not page-aligned
    const echoed = (await rpc.rpcSync("worker1", (t: Tensor) => t, [view])) as Tensor;
    expect(echoed.isShared()).toBe(true);
    expect(sameValues(echoed, view)).toBe(true);
    // the worker receives it shared, keeps it, and sends it back untouched: still no copy
    expect(((await rpc.rpcSync("worker1", keep, [echoed])) as [boolean, number, number])[0]).toBe(true);
    const again = (await rpc.rpcSync("worker1", () => (globalThis as { __kept?: Tensor }).__kept)) as Tensor;
    expect(again.isShared()).toBe(true);
    expect(sameValues(again, view)).toBe(true);
    // and the master writing its view does not reach the worker's
    (view.typedArray() as Float32Array).fill(0);
    expect(await rpc.rpcSync("worker1", kept)).not.toEqual([0, 0]);
  }, 60_000);

  it("dropped shared tensors, sent and received, leave no mapping behind once collected", async () => {
    const run = async (): Promise<number> => {
      const t = zeros([500_000]).shareMemory_();
      const back: Tensor[] = [];
      for (let i = 0; i < 4; i++) back.push((await rpc.rpcSync("worker1", (u: Tensor) => u, [t])) as Tensor);
      expect(back.every((b) => b.isShared())).toBe(true);
      return sharedMappings();
    };
    expect(await run()).toBeGreaterThanOrEqual(5); // ours, and the four echoes mapped from the worker's file
    const end = Date.now() + 15_000;
    while (sharedMappings() > 0 && Date.now() < end) {
      collectGarbage();
      await new Promise((r) => setTimeout(r, 300));
    }
    expect(sharedMappings()).toBe(0);
  }, 60_000);
});
