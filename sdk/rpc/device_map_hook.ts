/**
 * Applies device maps (./device_map.ts) to every call, as a message hook
 * (hooks.ts `addMessageHook`), so the agent knows nothing of devices.
 *
 * A call, step by step:
 * 1. Caller, outgoing request: every tensor in the arguments must have a
 *    target under the caller's map for the callee (CPU tensors always do);
 *    one that has none fails the call before anything is sent (DeviceError
 *    naming the device and the callee). When the map is not empty it travels
 *    with the request as [source, target] pairs: the message's route.
 * 2. The route places the bytes: RpcPipe.send (./rpc_pipe.ts) sends each
 *    tensor's buffer with target route[its device] (`routeOf`), the pipe picks
 *    the channel for that (source, target) pair (cuda_ipc, nccl or
 *    cuda_staging for device memory) and the callee's pipe receives it
 *    straight into memory on the target device. So the tensor arrives where
 *    the map says, and step 2's incoming hook has nothing to move.
 * 3. Callee, outgoing reply: the same check and route with the inverse of the
 *    map that came with the request, so results return to the caller's
 *    devices; a reply tensor the inverse does not cover fails the call.
 * 4. Distributed autograd sends gradients back with the inverse of the route
 *    their forward message took (`withRoute`), as PyTorch's RecvRpcBackward.
 * With no maps configured nothing travels and every tensor must be on the CPU.
 *
 * NB: tensors are found in arrays, plain objects and Map values (what the wire
 * codec carries as containers); tensors inside class instances are not checked.
 */
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

/** A route set by withRoute for the requests made synchronously inside it. */
let routeOverride: DeviceMap | null = null;

/**
 * Runs `f` (which makes one request synchronously, e.g. rpcSync) with `pairs` as that request's
 * route instead of this worker's map for the callee: distributed autograd's gradients go back with
 * the inverse of their forward message's route.
 */
export function withRoute<T>(pairs: readonly (readonly [string, string])[] | null, f: () => T): T {
  const prev = routeOverride;
  routeOverride = pairs && pairs.length > 0 ? DeviceMap.fromPairs(pairs, "a gradient's route") : DeviceMap.EMPTY;
  try {
    return f();
  } finally {
    routeOverride = prev;
  }
}

/** The route a message's payload carries: source device -> target device (empty: every tensor stays on the CPU). */
export function routeOf(payload: unknown): DeviceMap {
  const ext = (payload as { ext?: Record<string, unknown> } | null)?.ext;
  const pairs = (ext?.[DEVICE_MAP_HOOK_KEY] as Meta | undefined)?.map;
  return pairs ? DeviceMap.fromPairs(pairs, "a message's device map") : DeviceMap.EMPTY;
}

/** The inverse of the route in a received message's ext (what a reply or a gradient to it follows), as pairs. */
export function inverseRoutePairs(ext: Record<string, unknown> | undefined): [string, string][] | null {
  const pairs = (ext?.[DEVICE_MAP_HOOK_KEY] as Meta | undefined)?.map;
  return pairs ? DeviceMap.fromPairs(pairs, "a message's device map").inverse().pairs() : null;
}

/** The hook, reading the worker's name and maps from `self(agent)`: the message's agent (null before initRpc). */
export function makeDeviceMapHook(self: (agent: Agent | undefined) => DeviceMapSelf | null): MessageHook {
  return {
    key: DEVICE_MAP_HOOK_KEY,

    outgoing({ agent, to, kind, values, requestMeta }) {
      const me = self(agent);
      const map = kind === "request" && routeOverride ? routeOverride : mapFor(me, kind, to, requestMeta);
      mapTensors(values, (t) => {
        targetDevice(kind, me?.name ?? "this worker", to, map, t.device);
      });
      if (map.size === 0) return undefined;
      const meta: Meta = { map: map.pairs() };
      return { values, meta };
    },

    incoming({ from, values, meta }) {
      // NB: the tensors already landed on their mapped devices (step 2); only the map's form is checked
      const pairs = (meta as Meta | undefined)?.map;
      if (pairs) DeviceMap.fromPairs(pairs, `the device map from "${from}"`);
      return values;
    },
  };
}

addMessageHook(
  makeDeviceMapHook((agent) => {
    const a = agent ?? currentAgent();
    return a ? { name: a.name, deviceMaps: a.config.deviceMaps } : null;
  }),
);
