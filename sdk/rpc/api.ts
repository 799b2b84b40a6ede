/**
 * The public RPC API (`rpc` in "tprpc"), a camelCase mirror of
 * torch.distributed.rpc:
 *
 *   await rpc.initRpc("master", { rank: 0, worldSize: 3, initMethod: "tcp://127.0.0.1:29500" });
 *   const y = await rpc.rpcSync("worker1", tprpc.add, [x, 1]);
 *   const f = rpc.rpcAsync("worker1", (a, b) => a.matmul(b), [x, w], { timeoutMs: 5_000 });
 *   await rpc.shutdown();   // graceful; initRpc may be called again afterwards
 *
 * rpcSync and rpcAsync both return a Promise: JS cannot block, so "sync"
 * means "await me now" and "async" means "a future you keep".
 */
import { RpcError, RpcNotInitializedError } from "../errors/index.js";
import type { PipeInfo } from "../pipe/index.js";
import { Agent, type CallOptions, type WorkerRef } from "./agent.js";
import { checkTimeoutMs } from "./timeouts.js";
import {
  currentAgent,
  initRpcAgent,
  registerEverywhere,
  registrations,
  sdkNamespace,
  setInitRpcAgent,
  setSdkNamespace,
} from "./process.js";
import { RRef } from "./rref.js";
import { parseInitOptions, type RendezvousInitOptions, type WorkerInfo } from "./rendezvous/index.js";

export type { CallOptions, WorkerInfo, WorkerRef, PipeInfo };
export {
  profiler,
  RpcProfiler,
  overlapMs,
  type CallRecord,
  type CallKind,
  type Span as ProfilerSpan,
} from "./profiler.js";
export { setShippingScope } from "./shipping/scope.js";
export { addMessageHook, type MessageHook, type HookedMessageKind } from "./hooks.js";
// NB: installs the device-map message hook (after agent.js, whose hook list it joins).
import "./device_map_hook.js";
export {
  RpcBackendOptions,
  RpcBackendOptions as TensorPipeRpcBackendOptions,
  DeviceMap,
  type DeviceMapSpec,
  type DeviceMapsSpec,
} from "./device_map.js";
export { RPC_NODE_FLAGS, startLocalWorkers, type LocalCluster } from "./launcher.js";
export { RRef };

export interface InitRpcOptions extends RendezvousInitOptions {
  /**
   * The channels this worker may use for tensor bytes, e.g. ["shm", "tcp"] or "tcp"
   * (default: env TPRPC_CHANNELS, else every viable one). Each must be viable here;
   * per pipe the best channel both workers allow is chosen (rpc.pipeInfo shows it).
   */
  channels?: string | readonly string[];
}

export interface ShutdownOptions {
  /** Wait for outstanding work on every worker first (default true). */
  graceful?: boolean;
  /** Upper bound on the whole shutdown, ms (default 60 000). */
  timeoutMs?: number;
}

let starting: Promise<void> | null = null;

/** The agent this call acts as: the one serving the current call, else initRpc's (./process.ts). */
function current(): Agent {
  const a = currentAgent();
  if (!a) throw new RpcNotInitializedError("RPC has not been initialized. Call rpc.initRpc first.");
  return a;
}

/** Joins (or, as rank 0, hosts) the group. Resolves once every worker of a static group has joined. */
export async function initRpc(name: string, options: InitRpcOptions = {}): Promise<void> {
  if (initRpcAgent() || starting)
    throw new RpcError(
      `RPC is already initialized (as "${initRpcAgent()?.name ?? "…"}"); call await rpc.shutdown() before initRpc again`,
    );
  const { channels, ...rendezvousOptions } = options;
  const config = parseInitOptions(name, rendezvousOptions);
  // NB: a generated secret must reach the workers this process starts (the local launcher reads it).
  if (config.secretGenerated) process.env.TPRPC_SECRET = config.secret;
  starting = Agent.start(config, sdkNamespace(), setInitRpcAgent, { channels }).then(() => undefined);
  try {
    await starting;
  } finally {
    starting = null;
  }
}

/** A function a call can target; its parameters type the call's `args`, its result the call's value. */
type CallableTarget = (...args: never[]) => unknown;
/** A class a call can target (constructed on the callee). */
type ConstructibleTarget = abstract new (...args: never[]) => unknown;

/**
 * Calls `target(...args)` on worker `to` (a name, a rank or a WorkerInfo) and resolves to its
 * value (RemoteError / RpcTimeoutError otherwise). With a function whose parameters `args` fit,
 * the result is typed from it: `await rpcSync("w1", (x: Tensor) => x.sum().item(), [t])` is a
 * number (arguments that do not fit fall back to the untyped form, whose result is unknown).
 */
export function rpcSync<F extends CallableTarget>(
  to: WorkerRef,
  target: F,
  args?: Readonly<Parameters<F>>,
  opts?: CallOptions,
): Promise<Awaited<ReturnType<F>>>;
/** A class, a registered name, a builtin path or a "module.js#export" string; type the result with T. */
export function rpcSync<T = unknown>(
  to: WorkerRef,
  target: unknown,
  args?: readonly unknown[],
  opts?: CallOptions,
): Promise<T>;
export function rpcSync(to: WorkerRef, target: unknown, args: readonly unknown[] = [], opts: CallOptions = {}) {
  try {
    return current().call(to, target, args, opts);
  } catch (e) {
    return Promise.reject(e);
  }
}

/** As rpcSync; the returned Promise is the Future. */
export function rpcAsync<F extends CallableTarget>(
  to: WorkerRef,
  target: F,
  args?: Readonly<Parameters<F>>,
  opts?: CallOptions,
): Promise<Awaited<ReturnType<F>>>;
export function rpcAsync<T = unknown>(
  to: WorkerRef,
  target: unknown,
  args?: readonly unknown[],
  opts?: CallOptions,
): Promise<T>;
export function rpcAsync(to: WorkerRef, target: unknown, args: readonly unknown[] = [], opts: CallOptions = {}) {
  return rpcSync(to, target, args, opts);
}

/**
 * Runs `target(...args)` (or `new target(...args)` for a class) on worker `to`
 * and returns an RRef to the result at once, without waiting for the call.
 * The RRef's type follows a function's result or a class's instances.
 */
export function remote<F extends CallableTarget>(
  to: WorkerRef,
  target: F,
  args?: Readonly<Parameters<F>>,
  opts?: CallOptions,
): RRef<Awaited<ReturnType<F>>>;
export function remote<C extends ConstructibleTarget>(
  to: WorkerRef,
  target: C,
  args?: Readonly<ConstructorParameters<C>>,
  opts?: CallOptions,
): RRef<InstanceType<C>>;
export function remote<T = unknown>(
  to: WorkerRef,
  target: unknown,
  args?: readonly unknown[],
  opts?: CallOptions,
): RRef<T>;
export function remote(to: WorkerRef, target: unknown, args: readonly unknown[] = [], opts: CallOptions = {}) {
  return current().remote(to, target, args, opts);
}

/** @internal the number of RRef values this worker owns (tests observe distributed reference counting). */
export function ownedRRefCount(): number {
  return current().rrefs.ownedCount;
}

/**
 * The pipe to worker `to` (opened now if it was not yet): its transport and,
 * per (our device, their device) pair, the channel moving tensor bytes, e.g.
 * `{ transport: "tcp", channels: { "cpu-cpu": "shm" }, ... }`.
 */
export function pipeInfo(to: string): Promise<PipeInfo> {
  try {
    return current().pipeInfo(to);
  } catch (e) {
    return Promise.reject(e);
  }
}

/**
 * Makes `value` callable by name from other workers (register it on every worker that runs it).
 * Registrations made before initRpc apply to every agent this process starts.
 */
export function register(name: string, value: unknown): void {
  registerEverywhere(name, value);
}

/** This worker's info, or another worker's by name (or rank). */
export function getWorkerInfo(name?: string | number): WorkerInfo {
  return current().workerInfo(name);
}

/** The default timeout of calls, ms (0 = none): initRpc's rpcTimeoutMs unless setRpcTimeout changed it. */
export function getRpcTimeout(): number {
  return current().rpcTimeoutMs;
}

/** Sets the default timeout of calls made from now on, ms (0 = none); a call's own timeoutMs still wins. */
export function setRpcTimeout(timeoutMs: number): void {
  current().rpcTimeoutMs = checkTimeoutMs(timeoutMs, "setRpcTimeout(timeoutMs)");
}

/** Every current member of the group, ordered by rank. */
export function workers(): WorkerInfo[] {
  return [...current().membership.workers];
}

/**
 * Dynamic groups (initRpc without worldSize): calls `cb` with each worker that
 * joins from now on. Returns a function that unsubscribes.
 */
export function onWorkerJoin(cb: (w: WorkerInfo) => void): () => void {
  return current().membership.onJoin(cb);
}

/**
 * Calls `cb` with each worker that leaves from now on (it shut down, or its
 * process died); calls pending to it have already failed with
 * WorkerUnavailableError. Returns a function that unsubscribes.
 */
export function onWorkerLeave(cb: (w: WorkerInfo) => void): () => void {
  return current().membership.onLeave(cb);
}

/** Leaves the group; graceful by default. initRpc may be called again afterwards. */
export async function shutdown(opts: ShutdownOptions = {}): Promise<void> {
  const a = initRpcAgent();
  if (!a) return;
  try {
    await a.shutdown(opts.graceful ?? true, opts.timeoutMs ?? 60_000);
  } finally {
    setInitRpcAgent(null);
  }
}

/**
 * Rejects every RPC this process is still waiting on with `reason` (default:
 * an RpcError saying the calls were cancelled); the group stays usable.
 * The notebook kernel calls this on interrupt. Returns the number cancelled.
 */
export function cancelPending(reason?: Error): number {
  const a = initRpcAgent();
  return a ? a.cancelPending(reason ?? new RpcError("the pending RPCs were cancelled (interrupted)")) : 0;
}

/** @internal the agent calls act as here (the one serving the current call, else initRpc's), or null. */
export { currentAgent, registrations, setSdkNamespace };
