/**
 * Device maps between real processes on 127.0.0.1 (this process is the
 * master; two `tprpc worker` processes), on a machine without CUDA:
 * 1. the master's map for worker1 routes each tensor to its target device on
 *    worker1 — here {cpu: cuda:0}, which worker1 (no CUDA device, as its pipe
 *    handshake said) cannot receive, so the call fails on the master with a
 *    DeviceError naming worker1, the device and the map, before anything is
 *    sent. A static group refuses such a map at init
 *    (test/conformance/device_maps.test.ts), so this group is dynamic: its
 *    members are not known at init, and the send-time check is what stands;
 * 2. worker2 (no map) gets CPU tensors as before, and replies come back;
 * 3. a tensor on an unmapped device is refused before anything is sent
 *    (the master holds one through the host-backed DeviceBackend double).
 */
import type { ChildProcess } from "node:child_process";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { DeviceError, add, backend, rpc, tensor, type Tensor } from "../../sdk/index.js";
import { freePort, startWorker } from "./workers.js";
import { HostBackedDevices } from "../tensor/device_double.js";

const SECRET = "device-map-secret-0123456789";

describe("device maps between real processes", () => {
  const children: ChildProcess[] = [];

  beforeAll(async () => {
    const port = await freePort();
    await rpc.initRpc("master", {
      rank: 0,
      initMethod: `tcp://127.0.0.1:${port}`,
      secret: SECRET,
      initTimeoutMs: 20_000,
      deviceMaps: { worker1: { cpu: "cuda:0" } },
    });
    children.push(
      startWorker("worker1", 1, undefined, port, { secret: SECRET }),
      startWorker("worker2", 2, undefined, port, { secret: SECRET }),
    );
    // NB: bounded: both workers join within 20 s or the suite fails here
    for (const t0 = Date.now(); rpc.workers().length < 3; await new Promise((r) => setTimeout(r, 50)))
      if (Date.now() - t0 > 20_000) throw new Error("the workers did not join within 20 s");
  }, 30_000);

  afterAll(async () => {
    await rpc.shutdown({ graceful: false, timeoutMs: 5_000 });
    for (const c of children) if (c.exitCode === null) c.kill("SIGKILL");
  });

  it("routes by the caller's map: a target device the callee lacks fails the call before sending", async () => {
    const call = rpc.rpcSync("worker1", add, [tensor([1, 2], { dtype: "float32" }), 1], { timeoutMs: 10_000 });
    const err = await call.then(
      () => null,
      (e: unknown) => e,
    );
    expect(err).toBeInstanceOf(DeviceError);
    expect((err as Error).message).toMatch(
      /worker "worker1" cannot receive a tensor on cuda:0: it has 0 CUDA device\(s\) \(the device map sends cpu there\)/,
    );
    // a call without tensors is unaffected by the map
    expect(await rpc.rpcSync("worker1", (a: number) => a * 2, [21], { timeoutMs: 10_000 })).toBe(42);
  });

  it("leaves CPU tensors on the CPU where no map is set, both ways", async () => {
    const y = await rpc.rpcSync<Tensor>("worker2", add, [tensor([1, 2], { dtype: "float32" }), 1], {
      timeoutMs: 10_000,
    });
    expect(y.device.toString()).toBe("cpu");
    expect(y.toArray()).toEqual([2, 3]);
  });

  it("refuses a tensor on an unmapped device before sending, with PyTorch's guidance", async () => {
    backend.registerDeviceBackend(new HostBackedDevices(2));
    try {
      const g = tensor([1], { device: "cuda:1" });
      await expect(rpc.rpcSync("worker2", add, [g, 1])).rejects.toThrow(DeviceError);
      await expect(rpc.rpcSync("worker1", add, [[g], 1])).rejects.toThrow(
        /Request device mapping is not available for destination worker1 for device cuda:1 but received a tensor on that device: move your tensors to CPU/,
      );
    } finally {
      backend.unregisterDeviceBackend("cuda", "test double removed");
    }
    // the pipes are fine afterwards
    expect(await rpc.rpcSync("worker2", (a: number) => a + 1, [1], { timeoutMs: 10_000 })).toBe(2);
  });
});
