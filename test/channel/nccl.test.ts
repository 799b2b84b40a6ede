/**
 * The nccl channel's bootstrap and transfers on the CPU, against an
 * in-memory stand-in of libnccl's calls (./nccl_standin.ts): rank 0 (the
 * acceptor) makes the unique id and sends it over the pipe's control
 * connection, both ranks build a 2-rank communicator, bytes move with
 * ncclSend/ncclRecv on a dedicated stream; a failing ncclCommInitRank on
 * either rank gives NcclError on both, and the pair falls back to staging.
 * NB: NCCL needs one GPU per rank and the lent machines have one GPU, so this
 * path has never run on a device.
 */
import { describe, expect, it } from "vitest";
import type { Channel, DeviceBuffer } from "../../sdk/channel/interface.js";
import { ncclOrStaging, setupNcclChannel } from "../../sdk/channel/nccl/bootstrap.js";
import { NcclError } from "../../sdk/channel/nccl/driver.js";
import { ChannelNotViableError, WorkerUnavailableError } from "../../sdk/errors/index.js";
import { GpuWorld, StandinDriver, bootstrapPair } from "./gpu_standin.js";
import { NcclStandin, NcclWorld } from "./nccl_standin.js";

const buf = (ptr: bigint, byteLength: number): DeviceBuffer => ({
  kind: "cuda",
  deviceIndex: 0,
  memory: { handle: ptr },
  offset: 0,
  byteLength,
});

function ranks(failInit: number[] = [], timeoutMs = 2000) {
  const world = new GpuWorld();
  const nw = new NcclWorld(world);
  for (const r of failInit) nw.failInit.add(r);
  const a = new StandinDriver(world, "A");
  const b = new StandinDriver(world, "B");
  const [ba, bb, closePipe] = bootstrapPair("nccl");
  const mk = (x: typeof ba) => ({ ...x, timeoutMs, send: x.send, onMessage: x.onMessage, onClose: x.onClose });
  // A is the connector (rank 1), B the acceptor (rank 0).
  return { world, a, b, na: new NcclStandin(nw, a), nb: new NcclStandin(nw, b), ba: mk(ba), bb: mk(bb), closePipe };
}

describe("nccl bootstrap against a stand-in libnccl", () => {
  it("rank 0 makes the id, both init 2 ranks, and bytes cross by send/recv on a dedicated stream", async () => {
    const { world, a, b, na, nb, ba, bb } = ranks();
    const [ca, cb] = await Promise.all([setupNcclChannel(ba, na, 0), setupNcclChannel(bb, nb, 0)]);
    expect(world.log.filter((l) => l.includes("GetUniqueId"))).toEqual(["B ncclGetUniqueId"]);
    expect(world.log.filter((l) => l.includes("CommInitRank")).sort()).toEqual([
      "A ncclCommInitRank nranks=2 rank=1 device=0 id[0]=42",
      "B ncclCommInitRank nranks=2 rank=0 device=0 id[0]=42",
    ]);
    const src = a.alloc(5000);
    a.view(src, 5000).forEach((_, i, v) => (v[i] = (i * 7) & 255));
    const dst = b.alloc(5000);
    const s = ca.send(buf(src, 5000));
    await Promise.all([cb.recv(s.descriptor, buf(dst, 5000)), s.done]);
    expect(Buffer.from(b.view(dst, 5000)).equals(Buffer.from(a.view(src, 5000)))).toBe(true);
    expect(world.log).toContain("A ncclSend 5000 peer=0 s31");
    expect(world.log).toContain("B ncclRecv 5000 peer=1 s30");
    ca.close();
    cb.close();
    expect(world.log.filter((l) => l.includes("CommDestroy"))).toHaveLength(2);
  });

  it.each([[[0]], [[1]], [[0, 1]]])(
    "a failing ncclCommInitRank on rank(s) %j gives NcclError on both sides",
    async (fail) => {
      const { world, na, nb, ba, bb } = ranks(fail);
      const t0 = Date.now();
      const [ra, rb] = await Promise.allSettled([setupNcclChannel(ba, na, 0), setupNcclChannel(bb, nb, 0)]);
      for (const r of [ra, rb]) {
        expect(r.status).toBe("rejected");
        const e = (r as PromiseRejectedResult).reason as Error;
        expect(e, world.log.join("\n")).toBeInstanceOf(NcclError);
        expect(e).toBeInstanceOf(ChannelNotViableError);
        expect(e.message).toMatch(/ncclSystemError/);
      }
      // The healthy rank learned of the failure from its peer, not from its 2 s timeout.
      expect(Date.now() - t0).toBeLessThan(1500);
    },
  );

  it("both sides fall back to staging when the communicator cannot be built", async () => {
    const { na, nb, ba, bb } = ranks([1]);
    const staging = (name: string) => () => Promise.resolve({ name: `cuda_staging:${name}` } as unknown as Channel);
    const [ra, rb] = await Promise.all([
      ncclOrStaging(() => setupNcclChannel(ba, na, 0), staging("A")),
      ncclOrStaging(() => setupNcclChannel(bb, nb, 0), staging("B")),
    ]);
    expect([ra.channel.name, rb.channel.name]).toEqual(["cuda_staging:A", "cuda_staging:B"]);
    expect(ra.fellBack).toBeInstanceOf(NcclError);
    expect(rb.fellBack).toBeInstanceOf(NcclError);
  });

  it("a peer that never answers times out with ChannelNotViableError", async () => {
    const { na, ba } = ranks([], 100);
    await expect(setupNcclChannel(ba, na, 0)).rejects.toThrow(/ncclUniqueId took over 100 ms/);
  });

  it("closing the pipe fails a pending recv and aborts the communicator", async () => {
    const { world, b, na, nb, ba, bb, closePipe } = ranks();
    const [, cb] = await Promise.all([setupNcclChannel(ba, na, 0), setupNcclChannel(bb, nb, 0)]);
    const desc = new Uint8Array(8);
    new DataView(desc.buffer).setFloat64(0, 64, true);
    const r = cb.recv(desc, buf(b.alloc(64), 64));
    closePipe();
    await expect(r).rejects.toBeInstanceOf(WorkerUnavailableError);
    // B had a recv pending: abort; A had nothing pending: destroy.
    expect(
      world.log
        .filter((l) => /CommAbort|CommDestroy/.test(l))
        .map((l) => l.replace(/ comm\d+/, ""))
        .sort(),
    ).toEqual(["A ncclCommDestroy", "B ncclCommAbort"]);
  });
});
