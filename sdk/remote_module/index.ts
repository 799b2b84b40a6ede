/**
 * RemoteModule: an nn.Module built and run on another worker
 * (torch.distributed.nn.RemoteModule's counterpart).
 *
 *   const rm = new RemoteModule("worker1/cpu", nn.Linear, [1000, 1000]);
 *   const y = await rm.forward(x);             // runs there; inside a context, backward reaches it
 *   const params = await rm.remoteParameters(); // RRefs, for a DistributedOptimizer
 *
 * The class is any call target the owner can resolve (an SDK class, a
 * registered one, or a class shipped by source). forward and forwardAsync
 * both return a Promise (JS cannot block); forward is the one to await now.
 */
import { ValueError } from "../errors/index.js";
import type { Module } from "../nn/module.js";
import { RRef, register, remote, rpcSync } from "../rpc/api.js";
import type { Tensor } from "../tensor/tensor.js";

const PARAMS = "__tprpcRemoteModuleParams";
const MOVE = "__tprpcRemoteModuleTo";

type Forward<M> = M extends { forward: (...a: infer A) => infer R } ? (...a: A) => Promise<Awaited<R>> : never;

async function paramRRefs(m: RRef<Module>, recurse: boolean): Promise<RRef<Tensor>[]> {
  return (await m.toHere()).parameters(recurse).map((p) => new RRef<Tensor>(p));
}

async function moveTo(m: RRef<Module>, device: string): Promise<null> {
  (await m.toHere()).to(device);
  return null;
}

register(PARAMS, paramRRefs);
register(MOVE, moveTo);

/** "worker1/cpu" → ["worker1", "cpu"]; "worker1" alone means its CPU. */
function parseRemoteDevice(s: string): [string, string] {
  if (typeof s !== "string" || s.length === 0)
    throw new ValueError(`a remote device is "workerName/device", e.g. "worker1/cpu", got ${String(s)}`);
  const i = s.indexOf("/");
  const worker = i < 0 ? s : s.slice(0, i);
  const device = i < 0 ? "cpu" : s.slice(i + 1);
  if (!worker || !device)
    throw new ValueError(`a remote device is "workerName/device", e.g. "worker1/cpu" or "worker1/cuda:0", got "${s}"`);
  return [worker, device];
}

export class RemoteModule<M extends Module = Module> {
  readonly owner: string;
  readonly device: string;
  private readonly moduleRRef: RRef<M>;
  /** Resolves once the module exists on its device (rejects with the constructor's error). */
  private readonly ready: Promise<unknown>;

  /**
   * Builds `new moduleClass(...args)` on the worker of `remoteDevice`
   * ("worker1/cpu", "worker1/cuda:0") and returns at once.
   */
  constructor(remoteDevice: string, moduleClass: unknown, args: readonly unknown[] = []) {
    [this.owner, this.device] = parseRemoteDevice(remoteDevice);
    this.moduleRRef = remote<M>(this.owner, moduleClass, args);
    this.ready = this.device === "cpu" ? Promise.resolve() : rpcSync(this.owner, MOVE, [this.moduleRRef, this.device]);
    this.ready.catch(() => undefined); // NB: reported by the first call that awaits it
  }

  /** A RemoteModule over a module that already lives on `remoteDevice`'s worker (torch's init_from_module_rref). */
  static initFromModuleRRef<M extends Module>(remoteDevice: string, moduleRRef: RRef<M>): RemoteModule<M> {
    const [owner] = parseRemoteDevice(remoteDevice);
    if (owner !== moduleRRef.ownerName())
      throw new ValueError(`the module RRef is owned by "${moduleRRef.ownerName()}", not "${owner}"`);
    const rm = Object.create(RemoteModule.prototype) as RemoteModule<M>;
    const [, device] = parseRemoteDevice(remoteDevice);
    Object.assign(rm, { owner, device, moduleRRef, ready: Promise.resolve() });
    return rm;
  }

  /** Runs forward on the owner and resolves to its result. */
  forward(...args: Parameters<Forward<M>>): ReturnType<Forward<M>> {
    return this.ready.then(() =>
      (this.moduleRRef.rpcSync() as unknown as { forward: Forward<M> }).forward(...args),
    ) as ReturnType<Forward<M>>;
  }

  /** As forward; the returned Promise is the future. */
  forwardAsync(...args: Parameters<Forward<M>>): ReturnType<Forward<M>> {
    return this.forward(...args);
  }

  /** RRefs to the module's parameters (owned by its worker), e.g. for a DistributedOptimizer. */
  async remoteParameters(recurse = true): Promise<RRef<Tensor>[]> {
    await this.ready;
    return rpcSync<RRef<Tensor>[]>(this.owner, PARAMS, [this.moduleRRef, recurse]);
  }

  /** The RRef to the module on its owner. */
  getModuleRRef(): RRef<M> {
    return this.moduleRRef;
  }

  toString(): string {
    return `RemoteModule(${this.owner}/${this.device})`;
  }
}
