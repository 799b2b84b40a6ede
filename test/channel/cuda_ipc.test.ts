/**
 * cuda_ipc's ordering logic on the CPU, against the in-memory stand-in driver
 * (./gpu_standin.ts) shared by two "processes": the driver calls in order,
 * the receiver's cache of opened handles, and the sender's `done` (after which
 * the caching allocator may reuse the block) only after the receiver's copy
 * completed. No GPU ran this; the device checks are listed in the README.
 */
import { describe, expect, it } from "vitest";
import type { Channel, DeviceBuffer } from "../../sdk/channel/interface.js";
import { createCudaIpcChannel } from "../../sdk/channel/cuda_ipc/channel.js";
import { createCudaIpcContext } from "../../sdk/channel/cuda_ipc/index.js";
import { decodeIpcDescriptor } from "../../sdk/channel/cuda_ipc/protocol.js";
import { ProtocolError, WorkerUnavailableError } from "../../sdk/errors/index.js";
import { GpuWorld, StandinDriver, bootstrapPair } from "./gpu_standin.js";

const buf = (ptr: bigint, offset: number, byteLength: number): DeviceBuffer => ({
  kind: "cuda",
  deviceIndex: 0,
  memory: { handle: ptr },
  offset,
  byteLength,
});

function setup(): {
  world: GpuWorld;
  a: StandinDriver;
  b: StandinDriver;
  tx: Channel;
  rx: Channel;
  closePipe: () => void;
} {
  const world = new GpuWorld();
  const a = new StandinDriver(world, "A");
  const b = new StandinDriver(world, "B");
  const [ba, bb, closePipe] = bootstrapPair("cuda_ipc");
  return { world, a, b, tx: createCudaIpcChannel(ba, a), rx: createCudaIpcChannel(bb, b), closePipe };
}

const fill = (v: Uint8Array, seed: number): void => v.forEach((_, i) => (v[i] = (i * 31 + seed) & 255));
const settled = async (p: Promise<unknown>, ms = 20): Promise<boolean> => {
  let s = false;
  void p.then(
    () => (s = true),
    () => (s = true),
  );
  await new Promise((r) => setTimeout(r, ms));
  return s;
};

describe("cuda_ipc against the stand-in driver", () => {
  it("makes the driver calls in protocol order and moves the bytes", async () => {
    const { world, a, b, tx, rx } = setup();
    const seg = a.alloc(2 << 20);
    const src = a.view(seg + 512n, 1000);
    fill(src, 1);
    const dst = b.alloc(4096);
    world.log.length = 0;
    const s = tx.send(buf(seg, 512, 1000));
    await rx.recv(s.descriptor, buf(dst, 0, 1000));
    await s.done;
    expect(world.log, world.log.join("\n")).toEqual([
      "A cuMemGetAddressRange seg1+512",
      "A cuIpcGetMemHandle seg1",
      "A cuEventCreate ev3 flags=6",
      "A cuIpcGetEventHandle ev3",
      "A cuEventRecord ev3 s7",
      "B cuIpcOpenMemHandle seg1 flags=1",
      "B cuIpcOpenEventHandle ev3",
      "B cuStreamWaitEvent s7 ev3",
      "B cuMemcpyDtoDAsync 1000 s7",
      "B cuEventCreate ev4 flags=2",
      "B cuEventRecord ev4 s7",
    ]);
    expect(Buffer.from(b.view(dst, 1000)).equals(Buffer.from(src))).toBe(true);
    expect(decodeIpcDescriptor(s.descriptor)).toMatchObject({ offset: 512, byteLength: 1000, eventSlot: 0 });
  });

  it("on a dedicated copy stream, waits on the current stream and the sender's event before the copy", async () => {
    const { world, a, b, tx, rx } = setup();
    b.copyStreams.set(0, 99n);
    const seg = a.alloc(4096);
    fill(a.view(seg, 64), 3);
    const dst = b.alloc(4096);
    const s = tx.send(buf(seg, 0, 64));
    world.log.length = 0;
    await rx.recv(s.descriptor, buf(dst, 0, 64));
    await s.done;
    expect(
      world.log.filter((l) => l.startsWith("B ")),
      world.log.join("\n"),
    ).toEqual([
      "B cuIpcOpenMemHandle seg1 flags=1",
      "B cuIpcOpenEventHandle ev3",
      "B cuEventCreate ev4 flags=2",
      "B cuEventRecord ev4 s7",
      "B cuStreamWaitEvent s99 ev4",
      "B cuStreamWaitEvent s99 ev3",
      "B cuMemcpyDtoDAsync 64 s99",
      "B cuEventRecord ev4 s99",
    ]);
    expect(Buffer.from(b.view(dst, 64)).equals(Buffer.from(a.view(seg, 64)))).toBe(true);
  });

  it("opens a block's handle once: a second transfer from the same segment opens nothing new", async () => {
    const { world, a, b, tx, rx } = setup();
    const seg = a.alloc(2 << 20);
    fill(a.view(seg, 4096), 2);
    const dst = b.alloc(8192);
    const s1 = tx.send(buf(seg, 0, 2048));
    await rx.recv(s1.descriptor, buf(dst, 0, 2048));
    await s1.done;
    world.log.length = 0;
    const s2 = tx.send(buf(seg, 2048, 2048));
    await rx.recv(s2.descriptor, buf(dst, 2048, 2048));
    await s2.done;
    const opens = world.log.filter((l) => /cuIpcOpen|cuEventCreate|cuIpcGetEventHandle/.test(l));
    expect(opens, world.log.join("\n")).toEqual([]);
    expect(world.log).toContain("A cuIpcGetMemHandle seg1");
    expect(Buffer.from(b.view(dst, 4096)).equals(Buffer.from(a.view(seg, 4096)))).toBe(true);
    // A second segment is a second handle, opened once.
    const seg2 = a.alloc(4096);
    const s3 = tx.send(buf(seg2, 0, 16));
    await rx.recv(s3.descriptor, buf(dst, 0, 16));
    await s3.done;
    expect(world.log.filter((l) => l.startsWith("B cuIpcOpenMemHandle"))).toEqual([
      "B cuIpcOpenMemHandle seg5 flags=1",
    ]);
  });

  it("resolves the sender's done (block reusable) only after the receiver's copy completed", async () => {
    const { world, a, b, tx, rx } = setup();
    world.autoComplete = false;
    const seg = a.alloc(4096);
    const dst = b.alloc(4096);
    const s = tx.send(buf(seg, 0, 4096));
    const r = rx.recv(s.descriptor, buf(dst, 0, 4096));
    let reusable = false;
    void s.done.then(() => (reusable = true));
    expect(await settled(r)).toBe(false);
    expect(await settled(s.done)).toBe(false);
    expect(reusable).toBe(false);
    world.completeAll();
    await r;
    await s.done;
    expect(reusable).toBe(true);
    // While the first is pending, a second send takes another event (the first is still waited on).
    world.autoComplete = false;
    world.log.length = 0;
    const p1 = tx.send(buf(seg, 0, 64));
    const p2 = tx.send(buf(seg, 64, 64));
    expect(world.log.filter((l) => l.startsWith("A cuEventCreate"))).toHaveLength(1);
    const d1 = decodeIpcDescriptor(p1.descriptor);
    const d2 = decodeIpcDescriptor(p2.descriptor);
    expect(d1.eventSlot).not.toBe(d2.eventSlot);
    const r1 = rx.recv(p1.descriptor, buf(dst, 0, 64));
    const r2 = rx.recv(p2.descriptor, buf(dst, 64, 64));
    world.completeAll();
    await Promise.all([r1, r2, p1.done, p2.done]);
  });

  it("close releases opened handles and events and fails pending transfers", async () => {
    const { world, a, b, tx, rx, closePipe } = setup();
    const seg = a.alloc(4096);
    const dst = b.alloc(4096);
    const s1 = tx.send(buf(seg, 0, 8));
    await rx.recv(s1.descriptor, buf(dst, 0, 8));
    await s1.done;
    world.autoComplete = false;
    const s2 = tx.send(buf(seg, 8, 8));
    const r2 = rx.recv(s2.descriptor, buf(dst, 8, 8));
    world.log.length = 0;
    closePipe();
    await expect(s2.done).rejects.toBeInstanceOf(WorkerUnavailableError);
    await expect(r2).rejects.toBeInstanceOf(WorkerUnavailableError);
    expect(world.log).toContain("B cuIpcCloseMemHandle seg1");
    expect(world.log.filter((l) => l.includes("cuEventDestroy")).length).toBeGreaterThanOrEqual(3);
    expect(tx.closed && rx.closed).toBe(true);
  });

  it("rejects a malformed descriptor with ProtocolError and a host buffer with a typed error", async () => {
    const { tx, rx } = setup();
    await expect(rx.recv(new Uint8Array(5), buf(1n << 32n, 0, 5))).rejects.toBeInstanceOf(ProtocolError);
    await expect(tx.send({ kind: "cpu", bytes: new Uint8Array(4) }).done).rejects.toThrow(/device buffers only/);
  });

  it("the context builds channels on a given driver, and stays not viable without one", async () => {
    const world = new GpuWorld();
    const usable = { name: "cuda" as const, isViable: () => true, reason: () => null, version: () => "12.4" };
    const devices = () => [
      { index: 0, name: "G", pciBusId: "0:1", major: 9, minor: 0, multiProcessors: 1, unifiedAddressing: true },
    ];
    const ctx = (who: "A" | "B") =>
      createCudaIpcContext({ driver: usable, devices, dataPath: true, ipc: new StandinDriver(world, who) });
    // NB: both sides of the pipe: they agree on the channel (a failed setup on either makes both stage)
    const [ba, bb] = bootstrapPair("cuda_ipc");
    const [ch, peer] = await Promise.all([ctx("A").createChannel(ba), ctx("B").createChannel(bb)]);
    expect([ch.name, peer.name]).toEqual(["cuda_ipc", "cuda_ipc"]);
    ch.close();
    peer.close();
    const none = createCudaIpcContext({ driver: usable, devices, dataPath: false });
    expect(none.isViable()).toBe(false);
    expect(none.whyNotViable?.()).toMatch(/no cuda_ipc data path/);
  });
});
