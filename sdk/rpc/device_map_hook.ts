/**
 * Applies device maps (./device_map.ts) to every call, as a message hook
 * (hooks.ts `addMessageHook`), so the agent knows nothing of devices.
 *
 * A call, step by step:
 * 1. Caller, outgoing request: every tensor in the arguments must have a
 *    target under the caller's map for the callee (CPU tensors always do);
 *    one that has none fails the call before anything is sent. When the map
 *    is not empty it travels with the request as [source, target] pairs.
 * 2. Callee, incoming request: each tensor moves to map[its device] (CPU
 *    tensors to the CPU unless "cpu" is mapped). A target device this worker
 *    cannot use fails the call with a DeviceError the caller receives.
 * 3. Callee, outgoing reply: the same check and meta with the inverse of the
 *    map that came with the request (step 1), so results return to the
 *    caller's devices; a reply tensor the inverse does not cover fails the call.
 * 4. Caller, incoming reply: as step 2 with that inverse.
 * With no maps configured nothing travels and no tensor moves.
 *
 * NB: tensors are found in arrays, plain objects and Map values (what the wire
 * codec carries as containers); tensors inside class instances are not moved.
 * NB: today every tensor on the wire is CPU memory: a mapped tensor on a GPU
 * passes step 1's map check but is then refused (cannotSendFromDevice), and
 * step 2 only ever moves CPU tensors (where "cpu" is mapped). A GPU build
 * sends device memory through the CUDA channels and places received bytes on
 * the target device there.
 */
import { DeviceError } from "../errors/index.js";
import { noGrad } from "../autograd/grad_mode.js";
import type { Device } from "../tensor/device.js";
import { Tensor } from "../tensor/tensor.js";
import { addMessageHook, type HookedMessageKind, type MessageHook } from "./hooks.js";
import type { Agent } from "./agent.js";
import { currentAgent } from "./process.js";
import { DeviceMap, targetDevice } from "./device_map.js";

export const DEVICE_MAP_HOOK_KEY = "deviceMaps";

interface Meta {
  /** [source, target] device pairs the receiver applies. */
  map: [string, string][];
}

function isPlainObject(v: object): boolean {
  const p = Object.getPrototypeOf(v) as unknown;
  return p === Object.prototype || p === null;
}

/**
 * Calls `f` on every tensor reachable through arrays, plain objects and Map
 * values; a tensor `f` returns replaces the visited one in place. Returns the
 * (possibly replaced) root.
 */
export function mapTensors(v: unknown, f: (t: Tensor) => Tensor | void, seen = new Set<object>()): unknown {
  if (v instanceof Tensor) return f(v) ?? v;
  if (v === null || typeof v !== "object" || seen.has(v)) return v;
  seen.add(v);
  // NB: containers are written only where a tensor was replaced (callers' frozen arguments stay untouched).
  if (Array.isArray(v)) {
    for (let i = 0; i < v.length; i++) {
      const r = mapTensors(v[i], f, seen);
      if (r !== v[i]) v[i] = r;
    }
  } else if (v instanceof Map) {
    for (const [k, x] of v) {
      const r = mapTensors(x, f, seen);
      if (r !== x) v.set(k, r);
    }
  } else if (isPlainObject(v)) {
    const o = v as Record<string, unknown>;
    for (const k of Object.keys(o)) {
      const r = mapTensors(o[k], f, seen);
      if (r !== o[k]) o[k] = r;
    }
  }
  return v;
}

/**
 * NB: the agent writes tensor bytes from host memory (wire + TCP); the CUDA channels that move
 * device memory are not built yet. Until then a mapped device tensor is refused
 * here with what to do, rather than by the wire's generic "host code cannot read" error.
 */
function cannotSendFromDevice(device: Device, to: string): DeviceError {
  return new DeviceError(
    `cannot send a tensor on ${device} to "${to}": this tprpc build sends tensor bytes from host memory only ` +
      "(the CUDA channels come with the GPU backend); send x.cpu() instead",
  );
}

/** What the hook needs to know about this worker. */
export interface DeviceMapSelf {
  readonly name: string;
  readonly deviceMaps: ReadonlyMap<string, DeviceMap>;
}

/** The map for a message to/from `peer`: our own for requests, the inverse of theirs for replies. */
function mapFor(self: DeviceMapSelf | null, kind: HookedMessageKind, peer: string, requestMeta: unknown): DeviceMap {
  if (kind === "request") return self?.deviceMaps.get(peer) ?? DeviceMap.EMPTY;
  const pairs = (requestMeta as Meta | undefined)?.map;
  return pairs ? DeviceMap.fromPairs(pairs, `the device map from "${peer}"`).inverse() : DeviceMap.EMPTY;
}

/** A copy of a received tensor on `device`, still a leaf with the same requiresGrad. */
function place(t: Tensor, device: Device, self: string, from: string, source: Device): Tensor {
  try {
    const moved = noGrad(() => t.detach().to(device));
    if (t.requiresGrad) moved.requiresGrad_(true);
    return moved;
  } catch (e) {
    if (!(e instanceof DeviceError)) throw e;
    throw new DeviceError(
      `worker "${self}" cannot place a tensor from "${from}" on ${device} (the device map from "${from}" maps ` +
        `${source} to it): ${e.message}`,
    );
  }
}

/** The hook, reading the worker's name and maps from `self(agent)`: the message's agent (null before initRpc). */
export function makeDeviceMapHook(self: (agent: Agent | undefined) => DeviceMapSelf | null): MessageHook {
  return {
    key: DEVICE_MAP_HOOK_KEY,

    outgoing({ agent, to, kind, values, requestMeta }) {
      const me = self(agent);
      const map = mapFor(me, kind, to, requestMeta);
      mapTensors(values, (t) => {
        targetDevice(kind, me?.name ?? "this worker", to, map, t.device);
        if (t.device.type !== "cpu") throw cannotSendFromDevice(t.device, to);
      });
      if (map.size === 0) return undefined;
      const meta: Meta = { map: map.pairs() };
      return { values, meta };
    },

    incoming({ agent, from, values, meta }) {
      const pairs = (meta as Meta | undefined)?.map;
      if (!pairs) return values;
      const name = self(agent)?.name ?? "this worker";
      const map = DeviceMap.fromPairs(pairs, `the device map from "${from}"`);
      return mapTensors(values, (t) => {
        const target = map.get(t.device);
        return target && !target.equals(t.device) ? place(t, target, name, from, t.device) : undefined;
      });
    },
  };
}

addMessageHook(
  makeDeviceMapHook((agent) => {
    const a = agent ?? currentAgent();
    return a ? { name: a.name, deviceMaps: a.config.deviceMaps } : null;
  }),
);
