/**
 * Device maps without processes: parsing and PyTorch's one-to-one rule,
 * RpcBackendOptions.setDeviceMap, initRpc's option validation on this machine
 * (no CUDA) and with the host-backed DeviceBackend double (2 "devices"), the
 * send-side refusal of unmapped devices, and the message hook's routing
 * (the request's map as its route, the inverse for replies, withRoute for
 * gradients). Tensors landing on their target devices is the pipe's part,
 * checked between processes in test/e2e/cuda_rpc.test.ts.
 */
import { afterEach, beforeEach, describe, expect, it } from "vitest";
import { DeviceError, ValueError, backend, cuda, rpc, tensor, type Tensor } from "../../sdk/index.js";
import { DeviceMap, parseDeviceMaps, parseDevices, targetDevice } from "../../sdk/rpc/device_map.js";
import {
  DEVICE_MAP_HOOK_KEY,
  inverseRoutePairs,
  makeDeviceMapHook,
  mapTensors,
  routeOf,
  withRoute,
} from "../../sdk/rpc/device_map_hook.js";
import { parseInitOptions } from "../../sdk/rpc/rendezvous/options.js";
import { Device } from "../../sdk/tensor/device.js";
import { HostBackedDevices } from "../tensor/device_double.js";

const base = { rank: 0, worldSize: 2, initMethod: "tcp://127.0.0.1:29500", secret: "s" };
const dev = (s: string) => Device.parse(s);

describe("DeviceMap", () => {
  it("parses the ways PyTorch users write maps", () => {
    expect(DeviceMap.parse({ 0: 1 }, "m").toJSON()).toEqual({ "cuda:0": "cuda:1" });
    expect(DeviceMap.parse({ "cuda:0": "cuda:1", cpu: "cuda:0" }, "m").toJSON()).toEqual({
      "cuda:0": "cuda:1",
      cpu: "cuda:0",
    });
    expect(DeviceMap.parse(new Map([[2, dev("cuda:3")]]), "m").toJSON()).toEqual({ "cuda:2": "cuda:3" });
    expect(DeviceMap.parse({ cuda: "cpu" }, "m").get(dev("cuda:0"))?.toString()).toBe("cpu");
  });

  it("refuses maps that are not one-to-one, naming both sources", () => {
    expect(() => DeviceMap.parse({ 0: 1, 2: 1 }, 'deviceMaps["w1"]')).toThrow(ValueError);
    expect(() => DeviceMap.parse({ 0: 1, 2: 1 }, 'deviceMaps["w1"]')).toThrow(
      'deviceMaps["w1"] only supports 1-to-1 mapping, trying to map cuda:0 and cuda:2 to cuda:1',
    );
  });

  it("refuses things that are not devices, saying what a device is", () => {
    expect(() => DeviceMap.parse({ gpu0: 1 }, "m")).toThrow(
      /source device "gpu0" is not a device: use "cpu", "cuda:N"/,
    );
    expect(() => DeviceMap.parse({ 0: -1 }, "m")).toThrow(/target device -1 .* is not a device/);
  });

  it("inverts for replies and travels as pairs", () => {
    const m = DeviceMap.parse({ 0: 1, 1: 0, cpu: 3 }, "m");
    expect(m.inverse().toJSON()).toEqual({ "cuda:1": "cuda:0", "cuda:0": "cuda:1", "cuda:3": "cpu" });
    expect(DeviceMap.fromPairs(m.pairs(), "x").toJSON()).toEqual(m.toJSON());
    expect(() => DeviceMap.fromPairs([["cuda:0"]], "from w")).toThrow(DeviceError);
    expect(() =>
      DeviceMap.fromPairs(
        [
          ["cuda:0", "cuda:1"],
          ["cuda:2", "cuda:1"],
        ],
        "from w",
      ),
    ).toThrow(DeviceError);
  });

  it("validates the deviceMaps and devices options", () => {
    expect(() => parseDeviceMaps("master", { master: { 0: 0 } })).toThrow(/entry for "master", this worker itself/);
    expect(() => parseDeviceMaps("m", { w: 5 as never })).toThrow(/deviceMaps\["w"\] must be an object/);
    expect([...parseDeviceMaps("m", { w1: {}, w2: { 0: 1 } }).keys()]).toEqual(["w2"]);
    expect(() => parseDevices(["cpu"])).toThrow("devices expects a list of CUDA devices, but got device type cpu");
    expect(() => parseDevices([0, "cuda:0"])).toThrow(/lists cuda:0 twice/);
    expect(parseDevices([1, "cuda:0"]).map(String)).toEqual(["cuda:1", "cuda:0"]);
  });
});

describe("RpcBackendOptions.setDeviceMap", () => {
  it("adds to a worker's map incrementally (PyTorch's docstring example)", () => {
    const opts = new rpc.RpcBackendOptions({ ...base, deviceMaps: { worker1: { 0: 1 } } });
    opts.setDeviceMap("worker1", { 1: 2 });
    expect(opts.deviceMaps).toEqual({ worker1: { "cuda:0": "cuda:1", "cuda:1": "cuda:2" } });
    expect(rpc.TensorPipeRpcBackendOptions).toBe(rpc.RpcBackendOptions);
  });

  it("refuses a source mapped to two targets and two sources on one target, across calls", () => {
    const opts = new rpc.RpcBackendOptions();
    opts.setDeviceMap("w", { 0: 1 });
    expect(() => opts.setDeviceMap("w", { 0: 2 })).toThrow(
      'setDeviceMap("w") only supports 1-to-1 mapping, trying to map cuda:0 to cuda:2 and cuda:1',
    );
    expect(() => opts.setDeviceMap("w", { 3: 1 })).toThrow(/1-to-1 mapping, trying to map cuda:0 and cuda:3 to cuda:1/);
    opts.setDeviceMap("w", { 0: 1 }); // the same pair again is fine
    expect(opts.deviceMaps).toEqual({ w: { "cuda:0": "cuda:1" } });
  });
});

describe.skipIf(cuda.isAvailable())("initRpc's device options on this machine (no CUDA)", () => {
  it("refuses a CUDA source device, saying the machine has none and why", () => {
    expect(() => parseInitOptions("master", { ...base, deviceMaps: { worker1: { "cuda:0": "cuda:1" } } }, {})).toThrow(
      /worker "master": deviceMaps\["worker1"\] maps source device cuda:0, but this machine has 0 CUDA device\(s\) \(.+\); map only local devices/,
    );
    expect(() => parseInitOptions("master", { ...base, devices: ["cuda:0"] }, {})).toThrow(
      /devices lists cuda:0, but this machine has 0 CUDA device\(s\)/,
    );
  });

  it("accepts CPU sources (their targets are checked by the callee) and RpcBackendOptions as options", () => {
    const cfg = parseInitOptions("master", new rpc.RpcBackendOptions({ ...base, deviceMaps: { w: { cpu: 1 } } }), {});
    expect(cfg.deviceMaps.get("w")?.toJSON()).toEqual({ cpu: "cuda:1" });
    expect(parseInitOptions("master", base, {}).deviceMaps.size).toBe(0);
  });
});

describe("with the host-backed DeviceBackend double (2 devices)", () => {
  let devices: HostBackedDevices;
  beforeEach(() => {
    devices = new HostBackedDevices(2);
    backend.registerDeviceBackend(devices);
  });
  afterEach(() => backend.unregisterDeviceBackend("cuda", "test double removed"));

  it("checks source devices against the device count and the devices list", () => {
    expect(parseInitOptions("m", { ...base, deviceMaps: { w: { 1: 0 } } }, {}).deviceMaps.size).toBe(1);
    expect(() => parseInitOptions("m", { ...base, deviceMaps: { w: { 2: 0 } } }, {})).toThrow(
      /maps source device cuda:2, but this machine has 2 CUDA device\(s\)/,
    );
    expect(() => parseInitOptions("m", { ...base, devices: [0], deviceMaps: { w: { 1: 0 } } }, {})).toThrow(
      /cuda:1, which is not in devices \[cuda:0\]; add it to devices/,
    );
  });

  it("refuses to send a tensor on an unmapped device, with PyTorch's message and what to set", () => {
    const none = DeviceMap.EMPTY;
    expect(targetDevice("request", "master", "w1", none, dev("cpu")).toString()).toBe("cpu");
    const f = () => targetDevice("request", "master", "w1", none, dev("cuda:1"));
    expect(f).toThrow(DeviceError);
    expect(f).toThrow(
      /only supports CPU tensors by default\. Request device mapping is not available for destination w1 for device cuda:1 but received a tensor on that device: move your tensors to CPU .*deviceMaps: \{ w1: \{ "cuda:1": "cuda:N" \} \}/,
    );
    const g = () => targetDevice("response", "w1", "master", DeviceMap.parse({ 1: 0 }, "m"), dev("cuda:0"));
    expect(g).toThrow(/Response device mapping is not available for destination master for device cuda:0/);
  });

  const self = { name: "master", deviceMaps: parseDeviceMaps("master", { w1: { 0: 1, cpu: 0 } }) };
  const hook = makeDeviceMapHook(() => self);
  const callee = makeDeviceMapHook(() => ({ name: "w1", deviceMaps: new Map() }));

  it("runs a request and its reply through the hook: the route out, nothing moved, the inverse back", () => {
    const x = tensor([1, 2], { dtype: "float32", device: "cuda:0", requiresGrad: true });
    const c = tensor([3], { dtype: "float32" });
    const args = Object.freeze([{ a: x, list: [c] }, new Map([["k", c]])]);
    const out = hook.outgoing!({ to: "w1", kind: "request", values: args })!;
    expect(out.values).toBe(args); // nothing is moved or rewritten on the sender
    expect(out.meta).toEqual({
      map: [
        ["cuda:0", "cuda:1"],
        ["cpu", "cuda:0"],
      ],
    });
    // the meta is the message's route: RpcPipe sends each buffer to route[its device]
    const route = routeOf({ ext: { [DEVICE_MAP_HOOK_KEY]: out.meta } });
    expect(route.get(dev("cuda:0"))?.toString()).toBe("cuda:1");
    expect(route.get(dev("cpu"))?.toString()).toBe("cuda:0");
    expect(routeOf({}).size).toBe(0);

    // the tensors landed on their targets already (the pipe received them there): incoming moves nothing
    const received = [{ a: x.detach(), list: [c] }, new Map([["k", c]])];
    expect(callee.incoming!({ from: "master", kind: "request", values: received, meta: out.meta })).toBe(received);

    // the reply follows the inverse of the request's map
    const y = tensor([5], { dtype: "float32", device: "cuda:1" });
    const reply = callee.outgoing!({ to: "master", kind: "response", values: y, requestMeta: out.meta })!;
    expect(reply.meta).toEqual({
      map: [
        ["cuda:1", "cuda:0"],
        ["cuda:0", "cpu"],
      ],
    });
    expect(inverseRoutePairs({ [DEVICE_MAP_HOOK_KEY]: reply.meta })).toEqual((out.meta as { map: unknown }).map);
    const strayReply = () =>
      callee.outgoing!({ to: "master", kind: "response", values: [tensor([1], { device: 1 })], requestMeta: {} });
    expect(strayReply).toThrow(/Response device mapping is not available for destination master for device cuda:1/);
  });

  it("routes a request made inside withRoute by the route given, not the worker's own map", () => {
    const g = tensor([1], { device: "cuda:1" });
    // w1's map has no cuda:1, but a gradient going back by its message's inverse route does
    expect(() => hook.outgoing!({ to: "w1", kind: "request", values: [g] })).toThrow(DeviceError);
    const out = withRoute([["cuda:1", "cuda:0"]], () => hook.outgoing!({ to: "w1", kind: "request", values: [g] }));
    expect(out?.meta).toEqual({ map: [["cuda:1", "cuda:0"]] });
    // with no route (the forward message carried only CPU tensors), a CUDA tensor is refused
    expect(() => withRoute(null, () => hook.outgoing!({ to: "w1", kind: "request", values: [g] }))).toThrow(
      DeviceError,
    );
  });

  it("sends nothing extra without maps and refuses unmapped devices before sending", () => {
    expect(hook.outgoing!({ to: "w2", kind: "request", values: [tensor([1])] })).toBeUndefined();
    const t = tensor([1], { device: "cuda:1" });
    expect(() => hook.outgoing!({ to: "w1", kind: "request", values: [[t]] })).toThrow(
      /Request device mapping is not available for destination w1 for device cuda:1/,
    );
    expect(() => hook.outgoing!({ to: "w2", kind: "request", values: [{ t }] })).toThrow(
      /destination w2 for device cuda:1/,
    );
  });
});

describe("mapTensors", () => {
  it("visits tensors in arrays, plain objects and Map values, once per container, and replaces the root", () => {
    const t = tensor([1]);
    const shared = [t];
    const seen: Tensor[] = [];
    mapTensors({ a: shared, b: shared, m: new Map([[1, { t }]]), s: "x" }, (x) => void seen.push(x));
    expect(seen.length).toBe(2);
    const u = tensor([2]);
    expect(mapTensors(t, () => u)).toBe(u);
  });
});
