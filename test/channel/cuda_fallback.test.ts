/**
 * directOrStaging (sdk/channel/cuda_staging/fallback.ts): a direct GPU
 * channel (cuda_ipc, nccl) whose setup fails on either side of a pipe makes
 * both sides fall back to cuda_staging together, over the same bootstrap; a
 * direct setup that succeeds on both sides is kept. Over in-memory
 * bootstraps and the stand-in GPU of ./gpu_standin.ts (no GPU involved).
 */
import { describe, expect, it } from "vitest";
import { createCudaIpcContext } from "../../sdk/channel/cuda_ipc/index.js";
import { createCudaStagingContext } from "../../sdk/channel/cuda_staging/index.js";
import { directOrStaging } from "../../sdk/channel/cuda_staging/fallback.js";
import type { Channel, ChannelBootstrap, ChannelBuffer } from "../../sdk/channel/interface.js";
import { ChannelNotViableError } from "../../sdk/errors/index.js";
import { GpuWorld, StandinDriver, bootstrapPair } from "./gpu_standin.js";
import { StagingStandin } from "./staging_standin.js";

const dev = (ptr: bigint, n: number): ChannelBuffer => ({
  kind: "cuda",
  deviceIndex: 0,
  memory: { handle: ptr },
  offset: 0,
  byteLength: n,
});

/** A direct channel stand-in: its setup sends a hello and waits for the peer's (as nccl waits for the id). */
function fakeDirect(fail: boolean) {
  const closed: string[] = [];
  const make = async (l: ChannelBootstrap): Promise<Channel> => {
    if (fail) throw new ChannelNotViableError("the stand-in driver says not viable");
    const hello = new Promise<void>((resolve) => l.onMessage(() => resolve()));
    await l.send("hello");
    await hello;
    return {
      name: "direct",
      closed: false,
      send: () => ({ descriptor: new Uint8Array(0), done: Promise.resolve() }),
      recv: () => Promise.resolve(),
      close: () => void closed.push("direct"),
    };
  };
  return { make, closed };
}

/** Both sides of one pipe, each with its direct setup and a staging channel on the stand-in GPU. */
async function setup(failA: boolean, failB: boolean) {
  const world = new GpuWorld();
  const [ba, bb] = bootstrapPair("cuda_ipc");
  const [ma, mb] = [new StandinDriver(world, "A"), new StandinDriver(world, "B")];
  const staging = (m: StandinDriver) => (l: ChannelBootstrap) =>
    createCudaStagingContext({ dataPath: true, calls: new StagingStandin(world, m) }).createChannel(l);
  const [da, db] = [fakeDirect(failA), fakeDirect(failB)];
  const t0 = Date.now();
  const [ra, rb] = await Promise.all([
    directOrStaging(ba, da.make, staging(ma)),
    directOrStaging(bb, db.make, staging(mb)),
  ]);
  return { world, ma, mb, ra, rb, da, db, ms: Date.now() - t0 };
}

describe("a direct GPU channel falls back to cuda_staging together", () => {
  it("keeps the direct channel when both sides set it up", async () => {
    const { ra, rb } = await setup(false, false);
    expect([ra.channel.name, rb.channel.name]).toEqual(["direct", "direct"]);
    expect([ra.fellBack, rb.fellBack]).toEqual([null, null]);
  });

  for (const [a, b] of [
    [true, false],
    [false, true],
    [true, true],
  ] as const)
    it(`falls back on both sides when ${a && b ? "both fail" : a ? "the first side fails" : "the second side fails"}, and staging moves the bytes`, async () => {
      const { ma, mb, ra, rb, ms } = await setup(a, b);
      expect([ra.channel.name, rb.channel.name]).toEqual(["cuda_staging", "cuda_staging"]);
      expect(ra.fellBack).toMatch(/not viable|peer's setup failed/);
      expect(rb.fellBack).toMatch(/not viable|peer's setup failed/);
      // NB: the side that did not fail was waiting for its peer's hello: it stopped at the verdict
      expect(ms).toBeLessThan(2_000);
      const n = 3 * 1024 * 1024 + 7;
      const src = ma.alloc(n);
      ma.view(src, n).forEach((_, i, v) => (v[i] = (i * 31) & 0xff));
      const dst = mb.alloc(n);
      const s = ra.channel.send(dev(src, n));
      await Promise.all([s.done, rb.channel.recv(s.descriptor, dev(dst, n))]);
      expect(Buffer.from(mb.view(dst, n)).equals(Buffer.from(ma.view(src, n)))).toBe(true);
    });

  it("is what the cuda_ipc context builds: its stand-in channel when both sides have the driver", async () => {
    const world = new GpuWorld();
    const [ba, bb] = bootstrapPair("cuda_ipc");
    const usable = { name: "cuda" as const, isViable: () => true, reason: () => null, version: () => "12.4" };
    const devices = () => [
      { index: 0, name: "G", pciBusId: "0:1", major: 9, minor: 0, multiProcessors: 1, unifiedAddressing: true },
    ];
    const ctx = (who: "A" | "B") =>
      createCudaIpcContext({ driver: usable, devices, dataPath: true, ipc: new StandinDriver(world, who) });
    const chans = await Promise.all([ctx("A").createChannel(ba), ctx("B").createChannel(bb)]);
    expect(chans.map((c) => c.name)).toEqual(["cuda_ipc", "cuda_ipc"]);
  });
});
