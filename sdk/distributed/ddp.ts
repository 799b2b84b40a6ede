/**
 * DistributedDataParallel: data-parallel training of an nn.Module over a
 * process group, as torch.nn.parallel.DistributedDataParallel. Each rank
 * runs the same model on its own batch; the gradients are averaged across
 * the group during backward, so every rank's optimizer takes the same step.
 *
 *   const ddp = await tprpc.distributed.DistributedDataParallel.create(model);
 *   const loss = lossFn(ddp.forward(x), y);
 *   loss.backward();                 // gradient hooks launch bucket all-reduces
 *   await ddp.finishGradientSync();  // the reduced (averaged) gradients are in .grad
 *   opt.step();
 *
 * How (the reducer's steps, as PyTorch's):
 * 1. At construction the parameters that require grad are cut into buckets
 *    of about `bucketCapMb` (25 MB) in reverse registration order (roughly
 *    the order backward produces their gradients), one dtype per bucket, and
 *    rank `src` (the group's first) broadcasts its parameters and buffers so
 *    every replica starts equal (`ready`; `create` awaits it).
 * 2. A hook on every parameter marks it ready when backward reaches it. A
 *    bucket whose parameters are all ready is launched: its gradients are
 *    copied into one flat buffer and all-reduced with ReduceOp.AVG
 *    (asynchronously, on the ring or direct algorithm by size). Buckets are
 *    launched in bucket order on every rank, since collectives on a group are
 *    matched by call order.
 * 3. `finishGradientSync()` launches the buckets not launched yet (parameters
 *    that got no gradient this iteration contribute zeros), awaits them all
 *    and copies the averages back into each `.grad`.
 * 4. `noSync(fn)`: backward passes inside fn only accumulate local gradients;
 *    the next synchronized backward reduces the accumulated sum.
 * 5. Inside a distributed autograd context (distAutograd.backward), the
 *    gradients are the context's, not .grad: the iteration reads and writes
 *    those (in place), so a DistributedOptimizer steps with the averages.
 *
 * What overlaps: tprpc's autograd engine is synchronous, so no message can
 * move while backward runs. The hooks mark buckets during backward and the
 * launch is queued as a microtask: every bucket's all-reduce starts as soon
 * as backward returns, in bucket order, and the buckets then run concurrently
 * with each other (their chunks interleave on the pipes) and with whatever
 * the program does before it awaits finishGradientSync(). Communication does
 * not overlap the backward computation itself, as it does in PyTorch.
 * Buffers are broadcast once, at construction (not before every forward). Wrapping a module
 * again (a notebook cell run twice) leaves the older wrapper's hooks inert.
 */
import { ValueError } from "../errors/index.js";
import { currentContextId, findContext } from "../dist_autograd/context.js";
import type { Parameter } from "../nn/parameter.js";
import { Module } from "../nn/module.js";
import * as raw from "../tensor/raw.js";
import { contiguousStrides } from "../tensor/shape.js";
import { Tensor } from "../tensor/tensor.js";
import type { DType } from "../tensor/dtype.js";
import { itemSize } from "../tensor/dtype.js";
import { type ProcessGroup } from "./group.js";
import { allReduce, broadcast } from "./api.js";
import type { Work } from "./work.js";

export interface DistributedDataParallelOptions {
  /** The group whose members train replicas (default: every worker). */
  processGroup?: ProcessGroup;
  /** Bucket size in MiB (default 25, as torch). */
  bucketCapMb?: number;
  /** Broadcast the parameters and buffers of the group's first rank at construction (default true). */
  broadcastAtStart?: boolean;
  /** Timeout of each bucket's all-reduce, ms (default: the RPC timeout). */
  timeoutMs?: number;
}

interface Bucket {
  params: Parameter[];
  /** Element offset of each parameter in the flat buffer. */
  offsets: number[];
  numel: number;
  dtype: DType;
  ready: number;
  flat: Tensor | null;
  work: Work | null;
}

/** Cuts `params` (already in reverse order) into buckets of at most `capBytes` (a larger parameter gets its own). */
function makeBuckets(params: readonly Parameter[], capBytes: number): Bucket[] {
  const out: Bucket[] = [];
  let cur: Bucket | null = null;
  for (const p of params) {
    const bytes = p.numel() * itemSize(p.dtype);
    if (!cur || cur.dtype !== p.dtype || (cur.numel > 0 && cur.numel * itemSize(cur.dtype) + bytes > capBytes)) {
      cur = { params: [], offsets: [], numel: 0, dtype: p.dtype, ready: 0, flat: null, work: null };
      out.push(cur);
    }
    cur.params.push(p);
    cur.offsets.push(cur.numel);
    cur.numel += p.numel();
  }
  return out;
}

/** The DDP instance each parameter reports to: the latest one that wrapped it (older ones' hooks go inert). */
const ownerOf = new WeakMap<Parameter, object>();

export class DistributedDataParallel<M extends Module = Module> extends Module {
  /** Resolves once the starting parameters and buffers have been broadcast. */
  readonly ready: Promise<void>;
  readonly #group: ProcessGroup | undefined;
  readonly #timeoutMs: number | undefined;
  readonly #buckets: Bucket[];
  readonly #bucketOf = new Map<Parameter, Bucket>();
  #sync = true;
  /** Buckets launched in this iteration (they launch in order: 0 .. launched-1). */
  #launched = 0;
  #launchQueued = false;
  #active = false;
  /** The distributed autograd context this iteration's backward ran in (its gradients are there), or null. */
  #ctxId: number | null = null;

  constructor(
    /** The wrapped module (torch's `ddp.module`). */
    readonly module: M,
    opts: DistributedDataParallelOptions = {},
  ) {
    super();
    if (!(module instanceof Module)) throw new ValueError("DistributedDataParallel wraps an nn.Module");
    const cap = opts.bucketCapMb ?? 25;
    if (!(typeof cap === "number" && cap > 0)) throw new ValueError(`bucketCapMb must be > 0, got ${cap}`);
    this.#group = opts.processGroup;
    this.#timeoutMs = opts.timeoutMs;
    const params = module.parameters().filter((p) => p.requiresGrad);
    this.#buckets = makeBuckets([...params].reverse(), cap * 2 ** 20);
    for (const b of this.#buckets) for (const p of b.params) this.#bucketOf.set(p, b);
    for (const p of params) {
      ownerOf.set(p, this);
      p.registerHook(() => {
        if (ownerOf.get(p) === this) this.#markReady(p);
      });
    }
    this.ready = opts.broadcastAtStart === false ? Promise.resolve() : this.#broadcastState();
    this.ready.catch(() => undefined);
  }

  /** Wraps `module` and resolves once every replica holds the first rank's parameters and buffers. */
  static async create<M extends Module>(
    module: M,
    opts: DistributedDataParallelOptions = {},
  ): Promise<DistributedDataParallel<M>> {
    const ddp = new DistributedDataParallel(module, opts);
    await ddp.ready;
    return ddp;
  }

  forward(...args: unknown[]): unknown {
    return (this.module.forward as (...a: unknown[]) => unknown)(...args);
  }

  /** The number of buckets and the parameters in each, by name (reverse registration order). */
  bucketLayout(): string[][] {
    const names = new Map(this.module.namedParameters().map(([n, p]) => [p, n]));
    return this.#buckets.map((b) => b.params.map((p) => names.get(p)!));
  }

  /**
   * Runs `fn` with gradient synchronization off (torch's no_sync()): its backward passes only
   * accumulate into .grad. An async fn keeps it off until its promise settles.
   */
  noSync<T>(fn: () => T): T {
    const was = this.#sync;
    this.#sync = false;
    let r: T;
    try {
      r = fn();
    } catch (e) {
      this.#sync = was;
      throw e;
    }
    if (r instanceof Promise) return r.finally(() => (this.#sync = was)) as T;
    this.#sync = was;
    return r;
  }

  /**
   * Launches the buckets not launched yet, awaits every bucket's all-reduce and writes the averaged
   * gradients into .grad. Await it after backward and before the optimizer step.
   */
  async finishGradientSync(): Promise<void> {
    await this.ready;
    if (!this.#active) return;
    this.#launchReady(true);
    const failures: Error[] = [];
    for (const b of this.#buckets) {
      try {
        await b.work!.wait();
        this.#unpack(b);
      } catch (e) {
        failures.push(e as Error);
      }
      b.work = null;
      b.flat = null;
      b.ready = 0;
    }
    this.#launched = 0;
    this.#active = false;
    this.#ctxId = null;
    if (failures.length) throw failures[0]!;
  }

  #markReady(p: Parameter): void {
    if (!this.#sync) return;
    const b = this.#bucketOf.get(p)!;
    if (!this.#active) this.#ctxId = currentContextId();
    this.#active = true;
    b.ready++;
    // NB: the hook runs before the gradient is accumulated into .grad; the launch reads .grad, so
    // it waits for a microtask: after the (synchronous) backward has returned
    if (!this.#launchQueued) {
      this.#launchQueued = true;
      queueMicrotask(() => {
        this.#launchQueued = false;
        this.#launchReady(false);
      });
    }
  }

  /** Launches, in bucket order, each bucket whose parameters are all ready (all of them when forced). */
  #launchReady(force: boolean): void {
    while (this.#launched < this.#buckets.length) {
      const b = this.#buckets[this.#launched]!;
      if (!force && b.ready < b.params.length) return;
      this.#launched++;
      const flat = raw.empty([b.numel], b.dtype);
      b.params.forEach((p, i) => {
        const g = this.#gradOf(p);
        if (g) raw.copyInto(new Tensor(flat.storage, [...p.shape], contiguousStrides(p.shape), b.offsets[i]!), g);
      });
      b.flat = flat;
      b.work = allReduce(flat, {
        op: "avg",
        asyncOp: true,
        ...(this.#group ? { group: this.#group } : {}),
        ...(this.#timeoutMs !== undefined ? { timeoutMs: this.#timeoutMs } : {}),
      });
    }
  }

  /** A parameter's gradient of this iteration: its .grad, or its entry in the distributed autograd context. */
  #gradOf(p: Parameter): Tensor | null {
    if (this.#ctxId === null) return p.grad;
    return findContext(this.#ctxId)?.grads.get(p) ?? null;
  }

  /** Copies a reduced bucket back into its parameters' .grad (or their context entries, in place). */
  #unpack(b: Bucket): void {
    const flat = b.flat!;
    const ctx = this.#ctxId === null ? null : findContext(this.#ctxId);
    b.params.forEach((p, i) => {
      const avg = new Tensor(flat.storage, [...p.shape], contiguousStrides(p.shape), b.offsets[i]!);
      const cur = ctx ? (ctx.grads.get(p) ?? null) : p.grad;
      if (cur && cur.isContiguous() && cur.dtype === avg.dtype) raw.copyInto(cur, avg);
      else if (ctx) ctx.grads.set(p, raw.copyAs(avg));
      else p.grad = raw.copyAs(avg);
    });
  }

  async #broadcastState(): Promise<void> {
    const g = this.#group;
    const src = g ? g.ranks[0]! : 0;
    const opts = {
      ...(g ? { group: g } : {}),
      ...(this.#timeoutMs !== undefined ? { timeoutMs: this.#timeoutMs } : {}),
    };
    const tensors = [...this.module.parameters(), ...this.module.buffers()];
    await Promise.all(tensors.map((t) => broadcast(t, src, opts)));
  }
}
