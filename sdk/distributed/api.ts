/**
 * The public `distributed` API, a camelCase mirror of torch.distributed's
 * point-to-point and collective functions, over the RPC group (call
 * rpc.initRpc first; a worker's rank is its RPC rank):
 *
 *   await tprpc.distributed.send(x, 1, { tag: 7 });           // on rank 0
 *   const from = await tprpc.distributed.recv(y);              // on rank 1: any source
 *   await tprpc.distributed.allReduce(grad, { op: ReduceOp.AVG });
 *   const w = tprpc.distributed.allReduce(g, { asyncOp: true }); await w.wait();
 *
 * JS cannot block, so the "blocking" functions return a Promise and the
 * non-blocking ones (isend, irecv, asyncOp: true) a Work. Every operation is
 * bounded by `timeoutMs` (default: the RPC timeout, rpc.getRpcTimeout()).
 */
import { RpcTimeoutError, ValueError } from "../errors/index.js";
import { currentAgent } from "../rpc/api.js";
import { Tensor } from "../tensor/tensor.js";
import * as algo from "./collectives.js";
import { type ProcessGroup, makeGroup, worldOf } from "./group.js";
import { deadline } from "./deadlines.js";
import { rejected } from "./mailbox.js";
import { P2P } from "./p2p.js";
import { type ReduceOp, checkReduceOp } from "./reduce_op.js";
import { Work } from "./work.js";

export interface OpOptions {
  /** The group (default: every worker). */
  group?: ProcessGroup;
  /** ms, 0 = none; default: the RPC timeout. */
  timeoutMs?: number;
}

export interface P2POptions extends OpOptions {
  /** Messages match receives with the same tag (an integer, default 0). */
  tag?: number;
}

export interface CollectiveOptions extends OpOptions {
  /** true: return a Work at once instead of a Promise (torch's async_op). */
  asyncOp?: boolean;
}

export interface ReduceOptions extends CollectiveOptions {
  /** Default ReduceOp.SUM. */
  op?: ReduceOp;
}

type Async<O> = O & { asyncOp: true };
type Sync<O> = O & { asyncOp?: false };

function checkTensor(t: unknown, what: string, name = "tensor"): asserts t is Tensor {
  if (!(t instanceof Tensor)) throw new ValueError(`${what}: ${name} must be a Tensor, got ${typeof t}`);
}

function userTag(tag: unknown, what: string): string {
  if (tag === undefined) return "u:0";
  if (typeof tag !== "number" || !Number.isInteger(tag)) throw new ValueError(`${what}: tag is an integer, got ${tag}`);
  return `u:${tag}`;
}

function groupOf(p: P2P, opts: OpOptions, what: string): ProcessGroup {
  const g = opts.group ?? worldOf(p);
  if (g.p2p !== p)
    throw new ValueError(`${what}: that group belongs to another RPC agent (made before a new initRpc?)`);
  if (g.rank() < 0) throw new ValueError(`${what}: rank ${p.rank} is not a member of ${g.toString()}`);
  return g;
}

/** Races `p` against the operation's overall timeout. */
function bounded<T>(p: Promise<T>, timeoutMs: number, what: string): Promise<T> {
  if (timeoutMs === 0) return p;
  return new Promise<T>((resolve, reject) => {
    const timer = deadline(timeoutMs, () =>
      reject(new RpcTimeoutError(`${what} did not complete within ${timeoutMs} ms (timeoutMs)`, timeoutMs)),
    );
    p.then(
      (v) => {
        timer.cancel();
        resolve(v);
      },
      (e: Error) => {
        timer.cancel();
        reject(e);
      },
    );
  });
}

/** Starts a point-to-point operation; synchronous errors become its promise's rejection. */
function startP2P<T>(start: (p: P2P) => Promise<T>): Promise<T> {
  try {
    return start(P2P.current());
  } catch (e) {
    return rejected(e as Error);
  }
}

/** Sends `tensor` to rank `dst` (torch.distributed.isend); the Work completes once the channel released the tensor's bytes (the tensor may then change), as gloo's does. */
export function isend(tensor: Tensor, dst: number, opts: P2POptions = {}): Work {
  const what = `isend to rank ${dst} (tag ${opts.tag ?? 0})`;
  return new Work(startSend(tensor, dst, opts, what), what);
}

// NB: send and recv return the operation's own promise: no Work (two more promises and their reactions per
// message) where nobody can look at one (issue #18: p2p's per-message cost). Those promises are marked as
// handled when they fail (mailbox.ts's Posted.fail, P2P.send), as a Work's are: a recv started now and
// awaited after another operation is no unhandled rejection when it fails meanwhile
function startSend(tensor: Tensor, dst: number, opts: P2POptions, what: string): Promise<void> {
  return startP2P((p) => {
    checkTensor(tensor, what);
    const tag = userTag(opts.tag, what);
    const g = groupOf(p, opts, what);
    p.checkPeer(dst, what);
    if (!g.rankSet.has(dst)) throw new ValueError(`${what}: rank ${dst} is not in ${g.toString()}`);
    if (dst === p.rank) throw new ValueError(`${what}: a worker cannot send to itself (rank ${dst})`);
    return p.send(tensor, dst, tag, p.timeout(opts.timeoutMs, what));
  });
}

/**
 * Receives into `tensor` (written in place, any strides) from rank `src`, or from any rank when
 * `src` is omitted or null (torch.distributed.irecv); the Work's result is the sender's rank.
 * As in torch, the tensor must not be in a send still in flight (an isend, an RPC argument) while
 * the receive writes it. Over shm a large message into a whole contiguous tensor may replace the
 * tensor's memory with the block it arrived in (no second copy): take `typedArray()` views after
 * receiving, since a view of the memory before reads as empty once a later receive gives that block
 * back (sdk/distributed/p2p.ts, receiveInto).
 */
export function irecv(tensor: Tensor, src?: number | null, opts: P2POptions = {}): Work<number> {
  const from = src === undefined || src === null ? null : src;
  const what = `irecv from ${from === null ? "any rank" : `rank ${from}`} (tag ${opts.tag ?? 0})`;
  return new Work(startRecv(tensor, from, opts, what), what);
}

function startRecv(tensor: Tensor, from: number | null, opts: P2POptions, what: string): Promise<number> {
  return startP2P((p) => {
    checkTensor(tensor, what);
    const tag = userTag(opts.tag, what);
    const g = groupOf(p, opts, what);
    if (from !== null) {
      p.checkPeer(from, what);
      if (!g.rankSet.has(from)) throw new ValueError(`${what}: rank ${from} is not in ${g.toString()}`);
      if (from === p.rank) throw new ValueError(`${what}: a worker cannot receive from itself (rank ${from})`);
    }
    return p.recvInto(tensor, from, tag, what, p.timeout(opts.timeoutMs, what));
  });
}

/** isend, awaited: resolves once the tensor may change again (torch.distributed.send). */
export function send(tensor: Tensor, dst: number, opts: P2POptions = {}): Promise<void> {
  return startSend(tensor, dst, opts, `send to rank ${dst} (tag ${opts.tag ?? 0})`);
}

/** irecv, awaited: resolves to the sender's rank once `tensor` holds the message (torch.distributed.recv). */
export function recv(tensor: Tensor, src?: number | null, opts: P2POptions = {}): Promise<number> {
  const from = src === undefined || src === null ? null : src;
  const what = `recv from ${from === null ? "any rank" : `rank ${from}`} (tag ${opts.tag ?? 0})`;
  return startRecv(tensor, from, opts, what);
}

/** One operation of batchIsendIrecv (torch.distributed.P2POp). */
export class P2POp {
  readonly op: "isend" | "irecv";
  constructor(
    op: "isend" | "irecv" | typeof isend | typeof irecv,
    readonly tensor: Tensor,
    readonly peer: number,
    readonly opts: P2POptions = {},
  ) {
    if (op === isend || op === "isend") this.op = "isend";
    else if (op === irecv || op === "irecv") this.op = "irecv";
    else throw new ValueError('P2POp: op is isend or irecv (the function or "isend" / "irecv")');
  }
}

/** Starts every operation, in order, and returns their Works (torch.distributed.batch_isend_irecv). */
export function batchIsendIrecv(ops: readonly P2POp[]): Work<void | number>[] {
  if (!Array.isArray(ops) || ops.some((o) => !(o instanceof P2POp)))
    throw new ValueError("batchIsendIrecv(ops): ops is an array of P2POp");
  return ops.map((o) => (o.op === "isend" ? isend(o.tensor, o.peer, o.opts) : irecv(o.tensor, o.peer, o.opts)));
}

/**
 * Runs a collective: takes the group's next tag at once (call order matches collectives across
 * members), bounds it by the timeout, and returns a Work (asyncOp) or a Promise.
 */
function collective(
  name: string,
  opts: CollectiveOptions,
  run: (c: algo.CollectiveContext) => Promise<void>,
): Work | Promise<void> {
  let promise: Promise<void>;
  let what = name;
  try {
    const p = P2P.current();
    const g = groupOf(p, opts, name);
    what = `${name} on ${g.toString()}`;
    const timeoutMs = p.timeout(opts.timeoutMs, name);
    const ctx = { g, tag: g.nextTag(), timeoutMs, what };
    for (const r of g.ranks) p.checkPeer(r, what);
    promise = bounded(run(ctx), timeoutMs, what);
  } catch (e) {
    promise = Promise.reject(e as Error);
  }
  return opts.asyncOp ? new Work(promise, what) : promise;
}

/** Reduces `tensor` across the group in place on every member (torch.distributed.all_reduce). */
export function allReduce(tensor: Tensor, opts: Async<ReduceOptions>): Work;
export function allReduce(tensor: Tensor, opts?: Sync<ReduceOptions>): Promise<void>;
export function allReduce(tensor: Tensor, opts: ReduceOptions = {}): Work | Promise<void> {
  return collective("allReduce", opts, (c) => {
    checkTensor(tensor, c.what);
    return algo.allReduce(c, tensor, checkReduceOp(opts.op ?? "sum", tensor, c.what));
  });
}

/** Copies rank `src`'s `tensor` into every member's `tensor` (torch.distributed.broadcast). */
export function broadcast(tensor: Tensor, src: number, opts: Async<CollectiveOptions>): Work;
export function broadcast(tensor: Tensor, src: number, opts?: Sync<CollectiveOptions>): Promise<void>;
export function broadcast(tensor: Tensor, src: number, opts: CollectiveOptions = {}): Work | Promise<void> {
  return collective("broadcast", opts, (c) => {
    checkTensor(tensor, c.what);
    const pos = c.g.ranks.indexOf(src);
    if (pos < 0) throw new ValueError(`${c.what}: the source rank ${src} is not a member`);
    return algo.broadcast(c, tensor, pos);
  });
}

/** Fills tensorList[i] with member i's `tensor` on every member (torch.distributed.all_gather). */
export function allGather(tensorList: Tensor[], tensor: Tensor, opts: Async<CollectiveOptions>): Work;
export function allGather(tensorList: Tensor[], tensor: Tensor, opts?: Sync<CollectiveOptions>): Promise<void>;
export function allGather(tensorList: Tensor[], tensor: Tensor, opts: CollectiveOptions = {}): Work | Promise<void> {
  return collective("allGather", opts, (c) => {
    checkTensor(tensor, c.what);
    return algo.allGather(c, tensorList, tensor);
  });
}

/** Member i's `output` gets the reduction of every member's inputList[i] (torch.distributed.reduce_scatter). */
export function reduceScatter(output: Tensor, inputList: Tensor[], opts: Async<ReduceOptions>): Work;
export function reduceScatter(output: Tensor, inputList: Tensor[], opts?: Sync<ReduceOptions>): Promise<void>;
export function reduceScatter(output: Tensor, inputList: Tensor[], opts: ReduceOptions = {}): Work | Promise<void> {
  return collective("reduceScatter", opts, (c) => {
    checkTensor(output, c.what, "output");
    return algo.reduceScatter(c, output, inputList, checkReduceOp(opts.op ?? "sum", output, c.what));
  });
}

/** Resolves once every member has reached it (torch.distributed.barrier). */
export function barrier(opts: Async<CollectiveOptions>): Work;
export function barrier(opts?: Sync<CollectiveOptions>): Promise<void>;
export function barrier(opts: CollectiveOptions = {}): Work | Promise<void> {
  return collective("barrier", opts, (c) => algo.barrier(c));
}

/** A group of the given ranks (default: every worker); members must create their groups in the same order. */
export function newGroup(ranks?: readonly number[]): ProcessGroup {
  return makeGroup(P2P.current(), ranks);
}

/** This worker's rank: its RPC rank, or its position in `group`. */
export function getRank(group?: ProcessGroup): number {
  const p = P2P.current();
  return group ? group.rank() : p.rank;
}

/** The number of workers in `group` (default: every worker). */
export function getWorldSize(group?: ProcessGroup): number {
  return (group ?? worldOf(P2P.current())).size();
}

/** True once rpc.initRpc has joined this worker to a group (torch.distributed.is_initialized). */
export function isInitialized(): boolean {
  return currentAgent() !== null;
}
