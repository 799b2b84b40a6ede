/**
 * Device maps, as PyTorch's TensorPipeRpcBackendOptions: for each callee, a
 * one-to-one map from this worker's devices to the callee's, e.g.
 *
 *   await rpc.initRpc("master", { rank: 0, worldSize: 2, deviceMaps: { worker1: { "cuda:0": "cuda:1" } } });
 *   // or, incrementally:
 *   const opts = new rpc.RpcBackendOptions({ rank: 0, worldSize: 2 });
 *   opts.setDeviceMap("worker1", { 0: 1 });  // cuda:0 here -> cuda:1 on worker1
 *   await rpc.initRpc("master", opts);
 *
 * The rules (PyTorch's):
 * 1. A map must be invertible: two sources may not share a target.
 * 2. A request's tensors go to map[their device]; CPU tensors stay on the CPU
 *    unless "cpu" is mapped. A tensor on an unmapped CUDA device is refused
 *    before anything is sent, with a message saying how to map it.
 * 3. The reply to a request follows the inverse of the caller's map, so
 *    values come back to the caller's devices; a reply tensor on a device the
 *    inverse does not cover fails the call on the callee, with the same advice.
 * 4. Source devices must exist on this worker (checked in initRpc); target
 *    devices are checked by the callee when a tensor arrives for them.
 *
 * This file is pure logic (parsing, validation, routing). The message hook
 * that applies it to calls lives in ./device_map_hook.ts.
 */
import { DeviceError, ValueError } from "../errors/index.js";
import { Device, type DeviceLike } from "../tensor/device.js";
import type { RendezvousInitOptions } from "./rendezvous/options.js";

/** One callee's map as users write it: { "cuda:0": "cuda:1" }, { 0: 1 }, or a Map of DeviceLikes. */
export type DeviceMapSpec = Readonly<Record<string, DeviceLike>> | ReadonlyMap<DeviceLike, DeviceLike>;

/** Every callee's map, by callee name. */
export type DeviceMapsSpec = Readonly<Record<string, DeviceMapSpec>>;

/** A validated, invertible map from this worker's devices to one peer's. */
export class DeviceMap {
  private constructor(private readonly forward: ReadonlyMap<string, Device>) {}

  static readonly EMPTY = new DeviceMap(new Map());

  /** Validates `spec` (devices parse, one-to-one); `what` names it in errors, e.g. `deviceMaps["worker1"]`. */
  static parse(spec: DeviceMapSpec, what: string): DeviceMap {
    const entries: [unknown, unknown][] =
      spec instanceof Map ? [...spec.entries()] : Object.entries(spec as Record<string, unknown>);
    const forward = new Map<string, Device>();
    const reverse = new Map<string, string>();
    for (const [k, v] of entries) {
      const src = parseDevice(k, `${what}: source device ${JSON.stringify(k)}`);
      const dst = parseDevice(v, `${what}: target device ${JSON.stringify(v)} (for ${src})`);
      const taken = reverse.get(dst.toString());
      if (taken !== undefined && taken !== src.toString())
        throw new ValueError(
          `${what} only supports 1-to-1 mapping, trying to map ${taken} and ${src} to ${dst}: ` +
            "give each source device its own target device",
        );
      forward.set(src.toString(), dst);
      reverse.set(dst.toString(), src.toString());
    }
    return new DeviceMap(forward);
  }

  /** From [source, target] pairs as they travel in a message (throws DeviceError on bad pairs). */
  static fromPairs(pairs: unknown, what: string): DeviceMap {
    if (!Array.isArray(pairs) || !pairs.every((p) => Array.isArray(p) && p.length === 2))
      throw new DeviceError(`${what}: a device map must travel as [source, target] pairs`);
    try {
      return DeviceMap.parse(new Map(pairs as [DeviceLike, DeviceLike][]), what);
    } catch (e) {
      throw e instanceof ValueError ? new DeviceError(e.message) : e;
    }
  }

  get size(): number {
    return this.forward.size;
  }

  /** The target of `source`, or undefined when unmapped. */
  get(source: Device): Device | undefined {
    return this.forward.get(source.toString());
  }

  /** Source devices, in insertion order. */
  sources(): Device[] {
    return [...this.forward.keys()].map((s) => Device.parse(s));
  }

  /** Target devices, in insertion order. */
  targets(): Device[] {
    return [...this.forward.values()];
  }

  /** The map a reply follows: target -> source (well defined: maps are one-to-one). */
  inverse(): DeviceMap {
    const inv = new Map<string, Device>();
    for (const [s, d] of this.forward) inv.set(d.toString(), Device.parse(s));
    return new DeviceMap(inv);
  }

  /** [source, target] strings, for a message. */
  pairs(): [string, string][] {
    return [...this.forward].map(([s, d]) => [s, d.toString()]);
  }

  toJSON(): Record<string, string> {
    return Object.fromEntries(this.pairs());
  }
}

function parseDevice(v: unknown, what: string): Device {
  // NB: object keys are strings, so { 0: 1 } arrives as "0"; as in PyTorch, a bare index means cuda:N.
  const spec = typeof v === "string" && /^[0-9]+$/.test(v) ? Number(v) : v;
  if (!Device.isDeviceLike(spec))
    throw new ValueError(`${what} is not a device: use "cpu", "cuda:N" or a device index N`);
  return Device.parse(spec);
}

/** Validates initRpc's `deviceMaps` option into one DeviceMap per callee. */
export function parseDeviceMaps(self: string, spec: DeviceMapsSpec | undefined): ReadonlyMap<string, DeviceMap> {
  const out = new Map<string, DeviceMap>();
  if (spec === undefined || spec === null) return out;
  if (typeof spec !== "object" || Array.isArray(spec))
    throw new ValueError(`deviceMaps must be an object of the form { worker1: { "cuda:0": "cuda:1" } }`);
  for (const [to, m] of Object.entries(spec)) {
    if (to === self)
      throw new ValueError(`deviceMaps has an entry for "${self}", this worker itself: device maps name other workers`);
    if (m === null || typeof m !== "object")
      throw new ValueError(`deviceMaps["${to}"] must be an object such as { "cuda:0": "cuda:1" }`);
    const map = DeviceMap.parse(m, `deviceMaps["${to}"]`);
    if (map.size > 0) out.set(to, map);
  }
  return out;
}

/** Validates initRpc's `devices` option (local CUDA devices the agent uses): CUDA devices, no repeats. */
export function parseDevices(spec: readonly DeviceLike[] | undefined): Device[] {
  if (spec === undefined) return [];
  if (!Array.isArray(spec)) throw new ValueError('devices must be a list such as ["cuda:0", "cuda:1"]');
  const out: Device[] = [];
  for (const d of spec) {
    const dev = parseDevice(d, `devices: ${JSON.stringify(d)}`);
    if (dev.type !== "cuda")
      throw new ValueError(`devices expects a list of CUDA devices, but got device type ${dev.type}`);
    if (out.some((o) => o.equals(dev))) throw new ValueError(`devices lists ${dev} twice: list each device once`);
    out.push(dev);
  }
  return out;
}

/**
 * The local half of PyTorch's init-time check: every source device of every
 * map (and every listed device) exists on this machine, and with `devices`
 * given, the maps use only those. `cudaCount` is this machine's CUDA device
 * count; `why` says why it is 0 when CUDA is not available.
 */
export function checkLocalDevices(
  self: string,
  maps: ReadonlyMap<string, DeviceMap>,
  devices: readonly Device[],
  cudaCount: number,
  why: string | null,
): void {
  const have = `this machine has ${cudaCount} CUDA device(s)${cudaCount === 0 && why ? ` (${why})` : ""}`;
  for (const d of devices)
    if (d.index >= cudaCount)
      throw new ValueError(`worker "${self}": devices lists ${d}, but ${have}; list only devices this machine has`);
  for (const [to, map] of maps)
    for (const src of map.sources()) {
      if (src.type === "cpu") continue;
      if (src.index >= cudaCount)
        throw new ValueError(
          `worker "${self}": deviceMaps["${to}"] maps source device ${src}, but ${have}; ` +
            `map only local devices, or run "${self}" on a machine with that GPU`,
        );
      if (devices.length > 0 && !devices.some((d) => d.equals(src)))
        throw new ValueError(
          `worker "${self}": deviceMaps["${to}"] maps source device ${src}, which is not in devices ` +
            `[${devices.join(", ")}]; add it to devices or remove it from the map`,
        );
    }
}

/** The advice every "unmapped device" error ends with. */
function mapAdvice(caller: string, callee: string, device: Device): string {
  return (
    `move your tensors to CPU before sending them over RPC (x.cpu()), or map the device on "${caller}": ` +
    `initRpc("${caller}", { deviceMaps: { ${callee}: { "${device}": "cuda:N" } } }) ` +
    `(or options.setDeviceMap("${callee}", { "${device}": "cuda:N" }) on an RpcBackendOptions)`
  );
}

/**
 * Where each of a message's tensors goes: `map[device]`, CPU tensors to the
 * CPU unless "cpu" is mapped. Throws DeviceError (PyTorch's message, with
 * what to set) for a tensor on an unmapped non-CPU device.
 * `kind` "request": this worker calls `peer` with its own map; "response":
 * this worker answers `peer` with the inverse of `peer`'s map.
 */
export function targetDevice(
  kind: "request" | "response",
  self: string,
  peer: string,
  map: DeviceMap,
  device: Device,
): Device {
  const mapped = map.get(device);
  if (mapped) return mapped;
  if (device.type === "cpu") return device;
  const [caller, callee] = kind === "request" ? [self, peer] : [peer, self];
  throw new DeviceError(
    `tprpc's RPC only supports CPU tensors by default. ${kind === "request" ? "Request" : "Response"} device ` +
      `mapping is not available for destination ${peer} for device ${device} but received a tensor on that device: ` +
      (kind === "request"
        ? mapAdvice(caller, callee, device)
        : `return CPU tensors (x.cpu()), or have "${caller}" map a device to ${device} in deviceMaps["${callee}"]`),
  );
}

/** The device-map part of initRpc's options, plus RpcBackendOptions to build them incrementally. */
export interface DeviceMapInitOptions {
  /** Per callee, this worker's devices -> the callee's: { worker1: { "cuda:0": "cuda:1" } }. */
  deviceMaps?: DeviceMapsSpec;
  /** Local CUDA devices the agent uses (default: those in its maps). */
  devices?: readonly DeviceLike[];
}

/**
 * initRpc options with PyTorch's incremental setters. An instance can be
 * passed to initRpc as its options.
 */
export class RpcBackendOptions implements RendezvousInitOptions {
  rank?: number;
  worldSize?: number;
  initMethod?: string;
  secret?: string;
  rpcTimeoutMs?: number;
  initTimeoutMs?: number;
  deviceMaps: Record<string, Record<string, string>> = {};
  devices?: string[];

  constructor(options: RendezvousInitOptions = {}) {
    const { deviceMaps, devices, ...rest } = options;
    Object.assign(this, rest);
    for (const [to, m] of Object.entries(deviceMaps ?? {})) this.setDeviceMap(to, m);
    if (devices !== undefined) this.setDevices(devices);
  }

  /**
   * Adds `map` (this worker's devices -> `to`'s) to the map for `to`; may be
   * called several times. A source already mapped elsewhere, or two sources
   * on one target, is a ValueError.
   */
  setDeviceMap(to: string, map: DeviceMapSpec): void {
    const add = DeviceMap.parse(map, `setDeviceMap("${to}")`);
    const cur = DeviceMap.parse(this.deviceMaps[to] ?? {}, `deviceMaps["${to}"]`);
    for (const [s, d] of add.pairs()) {
      const had = cur.get(Device.parse(s));
      if (had && had.toString() !== d)
        throw new ValueError(
          `setDeviceMap("${to}") only supports 1-to-1 mapping, trying to map ${s} to ${d} and ${had}: ` +
            "each source device maps to one target",
        );
    }
    const merged = { ...cur.toJSON(), ...add.toJSON() };
    DeviceMap.parse(merged, `deviceMaps["${to}"] after setDeviceMap`); // NB: still one-to-one across calls
    this.deviceMaps[to] = merged;
  }

  /** Sets the local CUDA devices the agent uses. */
  setDevices(devices: readonly DeviceLike[]): void {
    this.devices = parseDevices(devices).map(String);
  }
}
