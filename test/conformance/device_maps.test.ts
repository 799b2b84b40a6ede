/**
 * Device-map validation, ported from the TensorPipe CUDA tests of PyTorch's rpc_test.py:
 * test_device_maps_wrong_worker_name, test_device_maps_invalid_max_local_device,
 * test_device_maps_invalid_max_remote_device, test_device_maps_many_to_one,
 * test_device_maps_one_to_many, test_device_maps_invalid_min_device, test_devices_option_mismatch,
 * test_device_map_cpu and test_device_maps_missing_config (_not_timeout, _loop, _remote); plus maps
 * whose keys or values are not devices. This machine has no GPU: where a check only needs this
 * process to have N CUDA devices, the host-backed DeviceBackend double of test/tensor supplies them
 * (it moves no bytes to a GPU); tests that need a real one are not ported (see README.md). Checks
 * that fail before the group meets use a world of two whose worker1 never starts, so a check that
 * wrongly passes shows as an init timeout; the two checks that need the group use their own group.
 */
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import {
  DeviceError,
  RpcNotInitializedError,
  type Tensor,
  ValueError,
  add,
  backend,
  cuda,
  ones,
  rpc,
  tensor,
  zeros,
} from "../../sdk/index.js";
import { freePort } from "../../sdk/rpc/launcher.js";
import { HostBackedDevices } from "../tensor/device_double.js";
import { type Cluster, type Group, startGroup, stopGroup, within } from "./group.js";

// NB: shipped functions run on the callee against the SDK namespace, named `tprpc` there.
declare const tprpc: typeof import("../../sdk/index.js");

const SECRET = "conformance-secret-0123456789";

/** Runs `f` while this process has `n` CUDA devices (the host-backed double). */
async function withDevices<T>(n: number, f: () => Promise<T> | T): Promise<T> {
  backend.registerDeviceBackend(new HostBackedDevices(n));
  try {
    expect(cuda.deviceCount()).toBe(n);
    return await f();
  } finally {
    backend.unregisterDeviceBackend("cuda", "test double removed");
  }
}

/** Options for rank 0 of a world of `worldSize` on a fresh port; nobody else joins. */
async function alone(worldSize: number): Promise<rpc.InitRpcOptions> {
  const port = await freePort();
  return { rank: 0, worldSize, initMethod: `tcp://127.0.0.1:${port}`, secret: SECRET, initTimeoutMs: 3_000 };
}

/** initRpc("master", options) must fail with a ValueError matching `msg` and leave no agent. */
async function expectRefused(options: rpc.InitRpcOptions | rpc.RpcBackendOptions, msg: RegExp): Promise<void> {
  const e = await within(
    rpc.initRpc("master", options).then(
      () => null,
      (err: unknown) => err,
    ),
    10_000,
    "initRpc",
  );
  try {
    expect(e, "initRpc accepted the options").not.toBeNull();
    expect(e).toBeInstanceOf(ValueError);
    expect((e as Error).message).toMatch(msg);
    expect(() => rpc.getWorkerInfo()).toThrow(RpcNotInitializedError);
  } finally {
    await rpc.shutdown({ graceful: false, timeoutMs: 5_000 });
  }
}

describe("device-map options refused at initRpc", () => {
  it("refuses a map naming a worker outside the group (test_device_maps_wrong_worker_name)", async () => {
    await withDevices(2, async () => {
      const options = new rpc.RpcBackendOptions(await alone(1));
      options.setDeviceMap("none_exist", { 0: 1 });
      await expectRefused(options, /none_exist/);
    });
  });

  it("refuses a source device this worker does not have (test_device_maps_invalid_max_local_device)", async () => {
    await withDevices(2, async () => {
      const options = new rpc.RpcBackendOptions(await alone(2));
      options.setDeviceMap("worker1", { [cuda.deviceCount()]: 0 });
      await expectRefused(options, /cuda:2/);
    });
  });

  it("refuses two sources mapped to one target (test_device_maps_many_to_one)", async () => {
    await withDevices(2, async () => {
      // PyTorch accepts both setDeviceMap calls and fails initRpc; refusing the second call is earlier still
      const attempt = async () => {
        const options = new rpc.RpcBackendOptions(await alone(2));
        options.setDeviceMap("worker1", { 1: 0 });
        options.setDeviceMap("worker1", { 0: 0 });
        await rpc.initRpc("master", options);
      };
      try {
        await expect(attempt()).rejects.toThrow(ValueError);
      } finally {
        await rpc.shutdown({ graceful: false, timeoutMs: 5_000 });
      }
      // the same map given at once
      await expectRefused({ ...(await alone(2)), deviceMaps: { worker1: { 1: 0, 0: 0 } } }, /1-to-1/);
    });
  });

  it("refuses mapping one source to two targets (test_device_maps_one_to_many)", () => {
    const options = new rpc.RpcBackendOptions({ rank: 0, worldSize: 2 });
    options.setDeviceMap("worker1", { 0: 1 });
    expect(() => options.setDeviceMap("worker1", { 0: 0 })).toThrow(ValueError);
    expect(() => options.setDeviceMap("worker1", { 0: 0 })).toThrow(/only supports 1-to-1 mapping/);
  });

  it("refuses negative device indices (test_device_maps_invalid_min_device)", () => {
    const options = new rpc.RpcBackendOptions({ rank: 0, worldSize: 2 });
    expect(() => options.setDeviceMap("worker1", { "-1": 0 })).toThrow(ValueError);
    expect(() => options.setDeviceMap("worker1", { 0: -1 })).toThrow(ValueError);
    expect(() => options.setDeviceMap("worker1", new Map([[-1, 0]]))).toThrow(ValueError);
    expect(() => options.setDeviceMap("worker1", new Map([[0, -1]]))).toThrow(/-1/);
  });

  it("refuses keys and values that are not devices, and maps that are not objects", async () => {
    const options = new rpc.RpcBackendOptions({ rank: 0, worldSize: 2 });
    expect(() => options.setDeviceMap("worker1", { "gpu:0": "cuda:0" })).toThrow(ValueError);
    expect(() => options.setDeviceMap("worker1", { "cuda:0": "tpu:0" })).toThrow(ValueError);
    await expectRefused({ ...(await alone(2)), deviceMaps: { worker1: { "gpu:0": "cuda:0" } } }, /gpu:0/);
    const notAMap = { worker1: "cuda:0" } as unknown as rpc.DeviceMapsSpec;
    await expectRefused({ ...(await alone(2)), deviceMaps: notAMap }, /worker1/);
    await expectRefused({ ...(await alone(2)), deviceMaps: [] as unknown as rpc.DeviceMapsSpec }, /deviceMaps/);
  });

  it("refuses a map whose source is not among the devices option (test_devices_option_mismatch)", async () => {
    await withDevices(2, async () => {
      const options = new rpc.RpcBackendOptions(await alone(2));
      options.setDeviceMap("worker1", { 0: 0 });
      options.setDevices([1]);
      await expectRefused(options, /cuda:0/);
    });
  });
});

describe("a device map to a worker without that device", () => {
  it("is refused at initRpc, naming the target device (test_device_maps_invalid_max_remote_device)", async () => {
    await withDevices(1, async () => {
      // worker1 has no CUDA device: cuda:0 there does not exist. NB: a worker process, since the CUDA
      // double is per process (an agent in this process would see the master's device)
      const started = await startGroup({
        workers: 1,
        processes: true,
        init: { deviceMaps: { worker1: { 0: 0 } } },
      }).then(
        (c) => c,
        (e: unknown) => e,
      );
      if (!(started instanceof Error)) {
        await stopGroup(started as Cluster, false);
        expect.fail("initRpc accepted a map to cuda:0 on worker1, which has no CUDA device");
      }
      expect(started).toBeInstanceOf(ValueError);
      expect(started.message).toMatch(/cuda:0/);
      expect(() => rpc.getWorkerInfo()).toThrow(RpcNotInitializedError);
    });
  }, 40_000);
});

describe("device maps in a group", () => {
  let cluster: Group | undefined;
  beforeAll(async () => {
    cluster = await startGroup({ workers: 2, init: { deviceMaps: { worker1: { cpu: "cpu" } } } });
  }, 40_000);
  // NB: not graceful: these tests are not about shutdown, and a failed remote() can leave its owner waiting
  afterAll(() => stopGroup(cluster, false), 20_000);

  it("moves CPU tensors by a cpu-to-cpu map, and returns the result on the CPU (test_device_map_cpu)", async () => {
    const gpuAddGivenDevices = (x: Tensor, y: Tensor, xTo: string, yTo: string, zTo: string) => {
      const xDevice = x.device.type === "cpu" ? "cpu" : String(x.device.index);
      const yDevice = y.device.type === "cpu" ? "cpu" : String(y.device.index);
      if (xDevice === xTo && yDevice === yTo) return x.to(zTo).add(y.to(zTo));
      throw new tprpc.ValueError("Wrong device affinity");
    };
    const ret = await rpc.rpcSync<Tensor>("worker1", gpuAddGivenDevices, [zeros([2]), ones([2]), "cpu", "cpu", "cpu"]);
    expect(ret.device.type).toBe("cpu");
    expect(ret.tolist()).toEqual([1, 1]);
  });

  describe("a tensor on a device without a map (test_device_maps_missing_config)", () => {
    const MISSING = /only supports CPU tensors by default.*setDeviceMap/s;

    it("fails rpcSync at once, well before the timeout, and the group keeps working (_not_timeout)", async () => {
      await withDevices(1, async () => {
        const t0 = Date.now();
        const e = await within(rpc.rpcSync("worker2", add, [zeros([2]).to("cuda:0"), 1]), 5_000, "the call").then(
          () => expect.fail("a CUDA tensor was sent without a device map"),
          (err: unknown) => err,
        );
        expect(e).toBeInstanceOf(DeviceError);
        expect((e as Error).message).toMatch(MISSING);
        expect(Date.now() - t0).toBeLessThan(1_000);
      });
      const ret = await rpc.rpcSync<Tensor>("worker2", add, [ones([2]), 1]);
      expect(ret.tolist()).toEqual([2, 2]);
    });

    it("fails remote() at toHere, and the group keeps working (_remote)", async () => {
      await withDevices(1, async () => {
        const g = tensor([0, 0], { device: "cuda:0" });
        // NB: toHere's own timeout keeps a fetch that never returns from outliving the test
        const e = await within(rpc.remote("worker2", add, [g, 1]).toHere(3_000), 5_000, "toHere").then(
          () => expect.fail("a CUDA tensor was sent without a device map"),
          (err: unknown) => err,
        );
        expect((e as Error).message).toMatch(MISSING);
      });
      const ret = await rpc.rpcSync<Tensor>("worker2", add, [ones([2]), 1]);
      expect(ret.tolist()).toEqual([2, 2]);
    });

    it("fails 21 calls in a row the same way (_loop)", async () => {
      await withDevices(1, async () => {
        const g = tensor([0, 0], { device: "cuda:0" });
        for (let i = 0; i < 21; i++) await expect(rpc.rpcSync("worker2", add, [g, 1])).rejects.toThrow(MISSING);
      });
      expect((await rpc.rpcSync<Tensor>("worker2", add, [ones([2]), 1])).tolist()).toEqual([2, 2]);
    });
  });
});
