/**
 * The channel suite for the native channels (test/channel/{shm,cma,ucx}.test.ts): one channel
 * context here, its peer in a real child process (test/native/channel_peer.ts).
 */
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import type { ChannelContext } from "../../sdk/channel/interface.js";
import { WorkerUnavailableError } from "../../sdk/errors/index.js";
import { ChannelPeer, devShm, devShmLeaks, openFds, pattern } from "./channel_peer.js";
import { sameBytes, useEnv } from "../channel/helpers.js";

const BIG_BYTES = process.env.TPRPC_TEST_1GB === "1" ? 2 ** 30 : 256 * 2 ** 20;
const BIG_LABEL = BIG_BYTES === 2 ** 30 ? "1 GB" : "256 MB";

/** A seeded generator (mulberry32), so sizes are the same on every run. */
export function rng(seed: number): () => number {
  let a = seed >>> 0;
  return () => {
    a = (a + 0x6d2b79f5) >>> 0;
    let t = a;
    t = Math.imul(t ^ (t >>> 15), t | 1);
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  };
}

/**
 * The channel suite, run over one native context with a real peer process: ordering with
 * every size in flight at once (0 bytes, odd sizes, several rings' worth), 256 concurrent small
 * tensors, a 256 MB tensor (1 GB with TPRPC_TEST_1GB=1), the peer killed mid-transfer (a typed WorkerUnavailableError, later
 * sends fail too), and no file descriptor or /dev/shm entry left behind.
 */
export function channelSuite(
  label: string,
  load: () => Promise<ChannelContext>,
  opts: { env?: Readonly<Record<string, string>>; skip: string | null; bigBytes?: number },
): void {
  describe.skipIf(opts.skip !== null)(label, () => {
    let ctx: ChannelContext;
    let peer: ChannelPeer;
    let fds: number;
    let shm: string[];
    useEnv(opts.env ?? {});

    beforeAll(async () => {
      ctx = await load();
      fds = openFds();
      shm = devShm();
      peer = await ChannelPeer.start(ctx, opts.env);
    });

    afterAll(async () => {
      await peer?.kill();
    });

    it("echoes 0-byte, odd and multi-megabyte tensors, all in flight at once, in order", async () => {
      const r = rng(11);
      const sizes = [0, 1, 3, 7, 4095, 4097, 65_537, 1_000_003, 70_000_001];
      for (let i = 0; i < 24; i++) sizes.push(Math.floor(r() * 2_000_000));
      const sent = sizes.map((n, i) => pattern(n, i));
      const echoes = sent.map((b) => peer.echo(b));
      const back = await Promise.all(echoes.map((e) => e.back));
      await Promise.all(echoes.map((e) => e.done));
      sizes.forEach((n, i) => expect(sameBytes(back[i]!, sent[i]!), `size ${n}`).toBe(true));
      expect(peer.childErrors).toEqual([]);
    });

    it("256 concurrent small tensors each come back intact", async () => {
      const r = rng(5);
      const sent = Array.from({ length: 256 }, (_, i) => pattern(1 + Math.floor(r() * 65_536), i));
      const back = await Promise.all(sent.map((b) => peer.echo(b).back));
      sent.forEach((b, i) => expect(sameBytes(back[i]!, b), `tensor ${i}`).toBe(true));
    });

    // NB: 256 MB by default, as test/channel/suite.test.ts: the same chunked path as 1 GB (past the
    // ring and the landing blocks' 64 MiB); TPRPC_TEST_1GB=1 runs the full gigabyte
    it(`a ${BIG_LABEL} tensor makes the round trip`, async () => {
      const n = opts.bigBytes ?? BIG_BYTES;
      const big = pattern(n, 9);
      const { back, done } = peer.echo(big);
      const got = await back;
      await done;
      expect(got.byteLength).toBe(n);
      expect(sameBytes(got, big)).toBe(true);
    }, 120_000);

    it("peer killed mid-transfer: pending and later sends fail with WorkerUnavailableError; nothing leaks", async () => {
      const big = pattern(256 << 20, 1);
      const held = peer.hold(big).then(
        () => null,
        (e: unknown) => e,
      );
      await new Promise((r) => setTimeout(r, 200));
      await peer.kill();
      const e = await held;
      expect(e).toBeInstanceOf(WorkerUnavailableError);
      expect((e as WorkerUnavailableError).workerName).toBe("peer");
      const later = await peer.channel.send({ kind: "cpu", bytes: new Uint8Array(8) }).done.then(
        () => null,
        (err: unknown) => err,
      );
      expect(later).toBeInstanceOf(WorkerUnavailableError);
      peer.channel.close();
      peer.channel.close();
      expect(peer.channel.closed).toBe(true);
      expect(openFds()).toBe(fds);
      expect(devShmLeaks(shm)).toEqual([]);
    });
  });
}
