/**
 * The shm channel's direct reads (sdk/channel/shm/index.ts, tagged_channel.ts): a buffer above the
 * landing range (TPRPC_SHM_CMA_BYTES, default 64 MiB + 1) goes as the cma channel sends it, the
 * receiver reading it out of the sender's memory, where both sides may read each other's memory.
 * With a real peer process (test/native/channel_peer.ts):
 * 1. defaults: 70 MB goes by direct read and comes back intact; 64 MiB exactly still lands;
 * 2. TPRPC_SHM_CMA_BYTES moves the threshold (2 MB goes direct from 1 MB);
 * 3. a peer that offers no direct reads (TPRPC_SHM_CMA_BYTES=0 there only): no verdicts are traded,
 *    large buffers cross the rings, and a DIRECT descriptor is refused with ChannelNotViableError;
 * 4. a sender killed while we read its buffer: the read fails with WorkerUnavailableError;
 * 5. a peer that cannot read our memory (our advert names a probe value our memory does not hold): the
 *    verdicts are traded, the channel opens on both sides without direct reads, and large buffers cross
 *    the rings.
 * Skipped where cma is not viable here (Yama ptrace_scope above 0, a seccomp profile): then the shm
 * channel never offers direct reads, which the other shm suites cover.
 */
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { cmaChannelContext } from "../../sdk/channel/cma/index.js";
import { DIRECT } from "../../sdk/channel/native_common.js";
import { shmChannelContext } from "../../sdk/channel/shm/index.js";
import type { TaggedChannel } from "../../sdk/channel/shm/tagged_channel.js";
import type { ChannelAdvert, ChannelContext } from "../../sdk/channel/interface.js";
import { ChannelNotViableError, WorkerUnavailableError } from "../../sdk/errors/index.js";
import { ChannelPeer, pattern } from "../native/channel_peer.js";
import { nativeOrSkip } from "../native/helpers.js";
import { sameBytes, useShmPeer } from "./helpers.js";

const { skip } = nativeOrSkip();
const notViable = skip ?? cmaChannelContext.whyNotViable() ?? null;

/** Echoes `x` through `ch`'s peer; how many of our sends went by direct read meanwhile, and whether it came back intact. */
async function echo(peer: ChannelPeer, x: Uint8Array): Promise<{ direct: number; intact: boolean }> {
  const ch = peer.channel as TaggedChannel;
  const before = ch.directSends;
  const e = peer.echo(x);
  const direct = ch.directSends - before;
  const intact = sameBytes(await e.back, x);
  await e.done;
  return { direct, intact };
}

describe.skipIf(notViable !== null)("shm direct reads, defaults", () => {
  const shm = useShmPeer();

  it("a buffer above 64 MiB is read by the peer out of our memory and comes back intact; 64 MiB still lands", async () => {
    expect(await echo(shm.peer, pattern(70_000_001, 1))).toEqual({ direct: 1, intact: true });
    // NB: twice, so that the second one finds the landing blocks the first offered
    for (let k = 0; k < 2; k++)
      expect(await echo(shm.peer, pattern(64 * 2 ** 20, 2 + k))).toEqual({ direct: 0, intact: true });
    expect(shm.channel.landingStats()!.landedSends).toBeGreaterThan(0);
    expect(shm.peer.childErrors).toEqual([]);
  }, 60_000);
});

describe.skipIf(notViable !== null)("shm direct reads, TPRPC_SHM_CMA_BYTES=1000000", () => {
  const shm = useShmPeer({ TPRPC_SHM_CMA_BYTES: "1000000" });

  it("moves the threshold: 2 MB goes by direct read, 999,999 bytes does not", async () => {
    expect(await echo(shm.peer, pattern(2_000_000, 3))).toEqual({ direct: 1, intact: true });
    expect(await echo(shm.peer, pattern(999_999, 4))).toEqual({ direct: 0, intact: true });
    expect(shm.peer.childErrors).toEqual([]);
  }, 60_000);
});

describe.skipIf(notViable !== null)("shm direct reads, a peer that offers none", () => {
  let peer: ChannelPeer;
  beforeAll(async () => {
    // NB: only the child turns them off: our advert carries the probe word, its advert does not
    peer = await ChannelPeer.start(shmChannelContext, { TPRPC_SHM_CMA_BYTES: "0" });
  }, 30_000);
  afterAll(async () => {
    await peer?.kill();
  });

  it("large buffers cross the rings, and a DIRECT descriptor is refused", async () => {
    expect(await echo(peer, pattern(70_000_001, 5))).toEqual({ direct: 0, intact: true });
    const d = new Uint8Array(25);
    d[0] = DIRECT;
    const err = await peer.channel.recv(d, { kind: "cpu", bytes: new Uint8Array(70_000_001) }).then(
      () => null,
      (e: unknown) => e,
    );
    expect(err).toBeInstanceOf(ChannelNotViableError);
    expect(String((err as Error).message)).toMatch(/no direct reads/);
    expect(peer.childErrors).toEqual([]);
  }, 60_000);
});

describe.skipIf(notViable !== null)("shm direct reads, a peer that cannot read our memory", () => {
  let peer: ChannelPeer;
  beforeAll(async () => {
    // NB: our advert's probe value is off by one, so the child's read of our probe word disagrees
    const lying = Object.create(shmChannelContext, {
      advertise: {
        value: (...args: Parameters<typeof shmChannelContext.advertise>): ChannelAdvert | null => {
          const a = shmChannelContext.advertise(...args)!;
          const info = a.info as { pid: number; address: number; value: number };
          return { ...a, info: { ...info, value: info.value + 1 } };
        },
      },
    }) as ChannelContext;
    peer = await ChannelPeer.start(lying, {});
  }, 30_000);
  afterAll(async () => {
    await peer?.kill();
  });

  it("both sides open without direct reads and large buffers cross the rings", async () => {
    expect(await echo(peer, pattern(70_000_001, 6))).toEqual({ direct: 0, intact: true });
    expect(peer.childErrors).toEqual([]);
  }, 60_000);
});

describe.skipIf(notViable !== null)("shm direct reads, a sender that dies", () => {
  let peer: ChannelPeer;
  beforeAll(async () => {
    peer = await ChannelPeer.start(shmChannelContext, {});
  }, 30_000);
  afterAll(async () => {
    await peer?.kill();
  });

  it("a read of a killed sender's buffer fails with WorkerUnavailableError", async () => {
    const n = 256 * 2 ** 20;
    const { d } = await peer.askSend(n, 7);
    expect(d[0]).toBe(DIRECT);
    // NB: killed just after the read starts (a 256 MiB read takes tens of ms): the syscall meets the
    // process dying or gone, or the pipe's close comes first; each must be the same typed error
    const read = peer.channel.recv(d, { kind: "cpu", bytes: new Uint8Array(n) }).then(
      () => null,
      (e: unknown) => e,
    );
    await new Promise((r) => setTimeout(r, 2));
    await peer.kill();
    const err = await read;
    expect(err).toBeInstanceOf(WorkerUnavailableError);
  }, 60_000);
});
