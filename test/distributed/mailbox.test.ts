/**
 * The receive side's matching rules (sdk/distributed/mailbox.ts) without any network: posting order,
 * any source, held messages and their bound, the device check, and peers that leave; and the release
 * of a received buffer once a copying receive consumed it (copiesOut, releaseReceived).
 */
import { afterEach, describe, expect, it } from "vitest";
import { Mailbox, type Envelope, type PostedRecv, releaseReceived } from "../../sdk/distributed/mailbox.js";
import { nativeOrSkip } from "../native/helpers.js";
import { Storage } from "../../sdk/tensor/storage.js";
import { Tensor as TensorClass } from "../../sdk/tensor/tensor.js";
import {
  DistributedError,
  RpcTimeoutError,
  TensorMismatchError,
  WorkerUnavailableError,
  tensor,
  zeros,
} from "../../sdk/index.js";
import type { Tensor } from "../../sdk/index.js";

const env = (src: number, tag: string, device = "cpu"): Envelope => ({
  src,
  tag,
  shape: [1],
  dtype: "float32",
  device,
});
const one = (v: number) => tensor([v], { dtype: "float32" });
function recv(into: Tensor, src: number | null, tag: string, dependsOn: number[] | null = null): PostedRecv {
  return {
    src,
    tag,
    expect: { shape: into.shape, dtype: into.dtype, device: into.device.toString() },
    consume: (t) => into.copy_(t),
    dependsOn: dependsOn && new Set(dependsOn),
    what: "recv",
  };
}

afterEach(() => delete process.env.TPRPC_P2P_HOLD_BYTES);

describe("Mailbox", () => {
  it("matches posted receives in posting order, by tag and source (null = any)", async () => {
    const m = new Mailbox(0);
    const a = zeros([1]);
    const b = zeros([1]);
    const c = zeros([1]);
    const pa = m.post(recv(a, null, "u:1"), 0);
    const pb = m.post(recv(b, 2, "u:1"), 0);
    const pc = m.post(recv(c, 2, "u:2"), 0);
    m.deliver(env(2, "u:2"), one(30));
    m.deliver(env(2, "u:1"), one(10)); // the any-source receive was posted first
    m.deliver(env(2, "u:1"), one(20));
    expect(await Promise.all([pa, pb, pc])).toEqual([2, 2, 2]);
    expect([a.item(), b.item(), c.item()]).toEqual([10, 20, 30]);
    expect(m.waiting).toBe(0);
  });

  it("holds early messages oldest first and counts their bytes", async () => {
    const m = new Mailbox(0);
    m.deliver(env(1, "u:0"), one(1));
    m.deliver(env(3, "u:0"), one(3));
    m.deliver(env(1, "u:0"), one(2));
    expect(m.bytesHeld).toBe(12);
    const x = zeros([1]);
    expect(await m.post(recv(x, 1, "u:0"), 0)).toBe(1);
    expect(x.item()).toBe(1);
    expect(await m.post(recv(x, null, "u:0"), 0)).toBe(3);
    expect(await m.post(recv(x, 1, "u:0"), 0)).toBe(1);
    expect(x.item()).toBe(2);
    expect(m.bytesHeld).toBe(0);
  });

  it("refuses a message past TPRPC_P2P_HOLD_BYTES", () => {
    process.env.TPRPC_P2P_HOLD_BYTES = "8";
    const m = new Mailbox(0);
    m.deliver(env(1, "u:0"), one(1));
    m.deliver(env(1, "u:0"), one(1));
    expect(() => m.deliver(env(1, "u:0"), one(1))).toThrow(DistributedError);
  });

  it("a device mismatch is a TensorMismatchError naming both devices", async () => {
    const m = new Mailbox(4);
    const p = m.post(recv(zeros([1]), 1, "u:0"), 0);
    m.deliver(env(1, "u:0", "cuda:0"), one(1));
    const e = (await p.catch((x: unknown) => x)) as TensorMismatchError;
    expect(e).toBeInstanceOf(TensorMismatchError);
    expect([e.what, e.local, e.remote]).toEqual(["device", "cpu", "cuda:0"]);
    expect(e.message).toMatch(/on rank 4: rank 1 sent a tensor on cuda:0 into one on cpu/);
  });

  it("a peer that leaves fails the receives that depend on it; timeouts bound the rest", async () => {
    const m = new Mailbox(0);
    const fromIt = m.post(recv(zeros([1]), 2, "u:0"), 0);
    const collective = m.post(recv(zeros([1]), 1, "c:world#0:0:rs0", [0, 1, 2]), 0);
    const other = m.post(recv(zeros([1]), 1, "u:0"), 50);
    m.peerGone(2, () => new WorkerUnavailableError("gone", "w2"));
    await expect(fromIt).rejects.toBeInstanceOf(WorkerUnavailableError);
    await expect(collective).rejects.toBeInstanceOf(WorkerUnavailableError);
    await expect(other).rejects.toBeInstanceOf(RpcTimeoutError);
    expect(m.waiting).toBe(0);
  });

  it.skipIf(nativeOrSkip().skip !== null)(
    "a copying receive releases the received buffer once consumed (also after a mismatch); others keep it",
    async () => {
      const n = 32_768; // 128 KiB of float32, from 64 KiB
      // NB: as the pipe decodes a received tensor: over a buffer of its own, from its first byte (a local
      // op's output may start past its buffer's first byte, sdk/tensor/dtype.ts alignedArrayOver)
      const big = (v: number) => new TensorClass(new Storage(new Float32Array(n).fill(v), "float32"), [n], [1], 0);
      const envN = (src: number, tag: string, shape = [n]): Envelope => ({ ...env(src, tag), shape });
      const m = new Mailbox(0);
      const into = zeros([n]);
      const x = big(5);
      const p = m.post({ ...recv(into, 1, "u:0"), copiesOut: true }, 0);
      m.deliver(envN(1, "u:0"), x);
      expect(await p).toBe(1);
      expect(into.max().item()).toBe(5);
      expect(x.storage.data.byteLength, "released: detached").toBe(0);
      // a mismatch drops the message: released too
      const y = big(6);
      const bad = m.post({ ...recv(zeros([n + 1]), 1, "u:1"), copiesOut: true }, 0);
      m.deliver(envN(1, "u:1"), y);
      await expect(bad).rejects.toBeInstanceOf(TensorMismatchError);
      expect(y.storage.data.byteLength).toBe(0);
      // a receive that keeps the tensor (no copiesOut) leaves it alone
      let kept: Tensor | null = null;
      const k = m.post({ ...recv(into, 1, "u:2"), consume: (t) => void (kept = t) }, 0);
      m.deliver(envN(1, "u:2"), big(7));
      await k;
      expect(kept!.max().item()).toBe(7);
      // releaseReceived: only a large buffer the storage covers whole
      expect(releaseReceived(zeros([16]))).toBe(false);
      const window = new TensorClass(new Storage(new Float32Array(2 * n), "float32"), [2 * n], [1], 0).narrow(0, n, n);
      expect(releaseReceived(window)).toBe(true); // a narrowed view still covers its storage's whole buffer
      // a storage over part of a larger buffer (an allocator's arena): never detached
      const arena = new ArrayBuffer(8 * n);
      const inArena = new TensorClass(new Storage(new Float32Array(arena, 4 * n, n), "float32"), [n], [1], 0);
      expect(releaseReceived(inArena)).toBe(false);
      expect(arena.byteLength).toBe(8 * n);
    },
  );

  describe("matching at the header (reserve, rule 7)", () => {
    const big = (src: number, tag: string): Envelope => ({ src, tag, shape: [4], dtype: "float32", device: "cpu" });
    /** A receive into `into` whose landing is its bytes, as sdk/distributed/p2p.ts posts a user's receive. */
    function landing(into: Tensor, src: number | null, tag: string): PostedRecv {
      const d = into.storage.data;
      return { ...recv(into, src, tag), landing: () => new Uint8Array(d.buffer, d.byteOffset, d.byteLength) };
    }
    /** The tensor the pipe decodes over the bytes the message landed in. */
    const over = (b: Uint8Array) =>
      new TensorClass(new Storage(new Float32Array(b.buffer, b.byteOffset, 4), "float32"), [4], [1], 0);

    it("reserves the first matching receive; deliver completes it by the bytes it landed in", async () => {
      const m = new Mailbox(0);
      const [a, b] = [zeros([4]), zeros([4])];
      const pa = m.post(landing(a, 1, "u:1"), 0);
      const pb = m.post(landing(b, null, "u:1"), 0);
      const la = m.reserve(big(1, "u:1"), 16)!;
      expect(la.buffer).toBe(a.storage.data.buffer);
      const lb = m.reserve(big(2, "u:1"), 16)!; // the any-source one
      expect(lb.buffer).toBe(b.storage.data.buffer);
      expect([m.landed, m.waiting]).toEqual([2, 2]);
      // a message matching neither reservation goes the usual way (held)
      m.deliver(big(1, "u:1"), tensor([9, 9, 9, 9], { dtype: "float32" }));
      expect(m.bytesHeld).toBe(16);
      new Float32Array(lb.buffer, lb.byteOffset, 4).set([5, 6, 7, 8]);
      m.deliver(big(2, "u:1"), over(lb));
      expect(await pb).toBe(2);
      expect(b.tolist()).toEqual([5, 6, 7, 8]);
      m.deliver(big(1, "u:1"), over(la));
      expect(await pa).toBe(1);
      expect(m.waiting).toBe(0);
    });

    it("does not reserve without a landing, past the first match, on a size or shape mismatch", async () => {
      const m = new Mailbox(0);
      const a = zeros([4]);
      const plain = m.post(recv(zeros([4]), 1, "u:1"), 0);
      m.post(landing(a, 1, "u:1"), 0).catch(() => undefined);
      expect(m.reserve(big(1, "u:1"), 16)).toBeNull(); // the first match has no landing
      m.deliver(big(1, "u:1"), tensor([1, 2, 3, 4], { dtype: "float32" }));
      await plain;
      expect(m.reserve(big(1, "u:1"), 8)).toBeNull(); // not the landing's length
      expect(m.reserve({ ...big(1, "u:1"), shape: [2, 2] }, 16)).toBeNull(); // deliver reports the mismatch
      expect(m.landed).toBe(0);
      m.close(new DistributedError("done"));
    });

    it("a reserved receive fails on timeout (its message is then dropped), peer death and close", async () => {
      const m = new Mailbox(0);
      const a = zeros([4]);
      const timedOut = m.post(landing(a, 1, "u:1"), 20);
      const la = m.reserve(big(1, "u:1"), 16)!;
      await expect(timedOut).rejects.toBeInstanceOf(RpcTimeoutError);
      m.deliver(big(1, "u:1"), over(la)); // dropped: not held for a later receive
      expect([m.bytesHeld, m.waiting]).toEqual([0, 0]);
      const b = zeros([4]);
      const dies = m.post(landing(b, null, "u:2"), 0);
      m.reserve(big(3, "u:2"), 16);
      m.peerGone(3, () => new WorkerUnavailableError("rank 3 left", "w3"));
      await expect(dies).rejects.toBeInstanceOf(WorkerUnavailableError);
      const closed = m.post(landing(zeros([4]), 1, "u:3"), 0);
      m.reserve(big(1, "u:3"), 16);
      m.close(new DistributedError("shut down"));
      await expect(closed).rejects.toBeInstanceOf(DistributedError);
      expect(m.waiting).toBe(0);
    });
  });
});
