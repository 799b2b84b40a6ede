/**
 * The collective algorithms, built on point-to-point messages (./p2p.ts) with
 * per-collective tags (./group.ts), so their bytes cross the same channels.
 *
 * Algorithm by size (the tensor's bytes against TPRPC_RING_MIN_BYTES, default
 * 256 KiB; below, latency dominates, above, bandwidth):
 * - allReduce, every member a process on this host (TPRPC_ALLREDUCE_ALGO auto, a
 *   CPU tensor of a dtype the native kernel reduces): through shared memory,
 *   ./host_shm.ts; the group falls back to the pipe algorithms below when its
 *   set-up fails anywhere.
 * - allReduce, small: direct. Every member sends its tensor to every other
 *   one, and each reduces the n contributions in rank order, so every rank
 *   computes the same bits. One round, (n-1)·size bytes out per rank.
 * - allReduce, large: ring. The flat tensor is cut into n segments; n-1
 *   reduce-scatter steps (send segment i-s to the next rank, reduce the one
 *   from the previous rank into segment i-s-1) leave each rank with one fully
 *   reduced segment (AVG divides it there), and n-1 all-gather steps pass
 *   those around. 2(n-1)/n·size bytes out per rank, whatever n is. Each
 *   segment is cut into pieces (TPRPC_RING_CHUNK_BYTES) whose step chains run
 *   at once, a pipeline (ringAllReduce).
 * - reduceScatter and allGather: direct when small, the ring's half when large.
 * - broadcast: a binomial tree from the source (ceil(log2 n) rounds) at any size.
 * - barrier: a small allReduce.
 * Each step awaits its sends' completion (the channel released the bytes), so
 * a segment is never changed while in flight. A non-contiguous tensor is worked on in a contiguous copy,
 * written back at the end.
 */
import { ValueError } from "../errors/index.js";
import * as raw from "../tensor/raw.js";
import { Tensor } from "../tensor/tensor.js";
import { itemSize } from "../tensor/dtype.js";
import type { ProcessGroup } from "./group.js";
import { allReduceAlgo, hostAllReduce, hostEligible, hostState } from "./host_shm.js";
import { type ReduceOp, copyMessage, finishAvg, reduceInto } from "./reduce_op.js";

const DEFAULT_RING_MIN_BYTES = 256 * 1024;

/** Tensors of at least this many bytes use the ring algorithms. */
export function ringMinBytes(): number {
  const v = Number(process.env.TPRPC_RING_MIN_BYTES);
  return process.env.TPRPC_RING_MIN_BYTES && Number.isFinite(v) && v >= 0 ? v : DEFAULT_RING_MIN_BYTES;
}

const bytesOf = (t: Tensor) => t.numel() * itemSize(t.dtype);

/** A 1-D view of `len` elements of a contiguous tensor's storage from element `start`. */
function segment(t: Tensor, start: number, len: number): Tensor {
  return new Tensor(t.storage, [len], [1], t.offset + start);
}

/** One collective's context: its group, tag prefix, timeout and name. */
interface Ctx {
  g: ProcessGroup;
  tag: string;
  timeoutMs: number;
  what: string;
}

function send(c: Ctx, t: Tensor, toPos: number, step: number | string): Promise<void> {
  return c.g.p2p.send(t, c.g.globalRank(toPos), `${c.tag}:${step}`, c.timeoutMs);
}

function recv(
  c: Ctx,
  like: Tensor,
  fromPos: number,
  step: number | string,
  consume: (t: Tensor) => void,
  /** consume copies or reduces the message into place (its buffer is then released at once: ./mailbox.ts) */
  copiesOut = true,
): Promise<number> {
  return c.g.p2p.recv(
    {
      src: c.g.globalRank(fromPos),
      tag: `${c.tag}:${step}`,
      expect: { shape: like.shape, dtype: like.dtype, device: like.device.toString() },
      consume,
      dependsOn: c.g.rankSet,
      what: c.what,
      copiesOut,
    },
    c.timeoutMs,
  );
}

/** Every member at once: `own` goes to everyone else, and `got[j]` receives member j's tensor. */
async function exchangeAll(
  c: Ctx,
  own: (j: number) => Tensor,
  like: Tensor,
  got: (Tensor | null)[],
  step = "x",
): Promise<void> {
  const n = c.g.size();
  const me = c.g.rank();
  const ops: Promise<unknown>[] = [];
  for (let j = 0; j < n; j++) {
    if (j === me) continue;
    ops.push(send(c, own(j), j, step));
    ops.push(recv(c, like, j, step, (t) => (got[j] = t), false));
  }
  await Promise.all(ops);
}

/** Every member's `mine` (same shape on all), by position. */
async function exchangeTensors(c: Ctx, mine: Tensor, step: string): Promise<Tensor[]> {
  const got: (Tensor | null)[] = new Array<Tensor | null>(c.g.size()).fill(null);
  got[c.g.rank()] = mine;
  await exchangeAll(c, () => mine, mine, got, step);
  return got as Tensor[];
}

/** Contiguous working copy (or the tensor itself) and how to write it back. */
function working(t: Tensor): { flat: Tensor; writeBack: () => void } {
  if (t.isContiguous()) return { flat: segment(t, 0, t.numel()), writeBack: () => undefined };
  const c = raw.contiguous(t);
  return { flat: segment(c, 0, c.numel()), writeBack: () => raw.copyInto(t, c) };
}

function bounds(numel: number, n: number): [number, number][] {
  const base = Math.floor(numel / n);
  const extra = numel % n;
  const out: [number, number][] = [];
  let start = 0;
  for (let k = 0; k < n; k++) {
    const len = base + (k < extra ? 1 : 0);
    out.push([start, len]);
    start += len;
  }
  return out;
}

const mod = (a: number, n: number) => ((a % n) + n) % n;

const DEFAULT_RING_CHUNK_BYTES = 4 << 20;

/** The ring cuts each segment into pieces of about this many bytes (TPRPC_RING_CHUNK_BYTES, default 4 MiB). */
export function ringChunkBytes(): number {
  const v = Number(process.env.TPRPC_RING_CHUNK_BYTES);
  return process.env.TPRPC_RING_CHUNK_BYTES && Number.isFinite(v) && v >= 1 ? v : DEFAULT_RING_CHUNK_BYTES;
}

/**
 * The ring allReduce of a contiguous 1-D `flat`, pipelined: each of the n segments is cut into k
 * pieces, and the k pieces run their own chains of 2(n-1) steps at once (tags carry the piece), so
 * piece j's next send leaves as soon as its reduction is done while other pieces are still on the
 * wire or being reduced. One chain's steps are in order, so a piece is never changed while in flight.
 */
async function ringAllReduce(c: Ctx, flat: Tensor, op: ReduceOp): Promise<void> {
  const n = c.g.size();
  const me = c.g.rank();
  const segs = bounds(flat.numel(), n);
  const maxLen = segs[0]![1];
  const minLen = segs[n - 1]![1];
  const k = Math.max(1, Math.min(64, minLen, Math.ceil((maxLen * itemSize(flat.dtype)) / ringChunkBytes())));
  const pieces = segs.map(([s, l]) => bounds(l, k).map(([ps, pl]) => segment(flat, s + ps, pl)));
  const chain = async (j: number): Promise<void> => {
    const at = (i: number) => pieces[mod(i, n)]![j]!;
    for (let s = 0; s < n - 1; s++) {
      const into = at(me - s - 1);
      await Promise.all([
        send(c, at(me - s), me + 1, `rs${s}.${j}`),
        recv(c, into, me - 1, `rs${s}.${j}`, (x) => reduceInto(op, into, x)),
      ]);
    }
    finishAvg(op, at(me + 1), n);
    for (let s = 0; s < n - 1; s++) {
      const into = at(me - s);
      await Promise.all([
        send(c, at(me + 1 - s), me + 1, `ag${s}.${j}`),
        recv(c, into, me - 1, `ag${s}.${j}`, (x) => copyMessage(into, x)),
      ]);
    }
  };
  await Promise.all(Array.from({ length: k }, (_, j) => chain(j)));
}

export async function allReduce(c: Ctx, t: Tensor, op: ReduceOp): Promise<void> {
  const n = c.g.size();
  const { flat, writeBack } = working(t);
  const algo = allReduceAlgo();
  const host =
    n > 1 && algo !== "pipes" && hostEligible(t, op) && (algo === "host" || bytesOf(t) >= ringMinBytes())
      ? await hostState(c, exchangeTensors)
      : null;
  if (host) {
    await hostAllReduce(c, host, flat, op, bounds);
  } else if (n > 1 && bytesOf(t) >= ringMinBytes() && t.numel() >= n) {
    await ringAllReduce(c, flat, op);
  } else if (n > 1) {
    const got: (Tensor | null)[] = new Array<Tensor | null>(n).fill(null);
    const mine = raw.copyAs(flat);
    got[c.g.rank()] = mine;
    await exchangeAll(c, () => mine, flat, got);
    copyMessage(flat, got[0]!);
    for (let j = 1; j < n; j++) reduceInto(op, flat, got[j]!);
    finishAvg(op, flat, n);
  }
  writeBack();
}

export async function broadcast(c: Ctx, t: Tensor, srcPos: number): Promise<void> {
  const n = c.g.size();
  const v = mod(c.g.rank() - srcPos, n);
  const pos = (virt: number) => mod(virt + srcPos, n);
  let mask = 1;
  if (v !== 0) {
    while (mask * 2 <= v) mask *= 2;
    await recv(c, t, pos(v - mask), "b", (x) => copyMessage(t, x));
    mask *= 2;
  }
  const sends: Promise<void>[] = [];
  for (; mask < n; mask *= 2) if (v + mask < n) sends.push(send(c, t, pos(v + mask), "b"));
  await Promise.all(sends);
}

function checkList(list: readonly Tensor[], t: Tensor, n: number, what: string, listName: string): void {
  if (!Array.isArray(list) || list.length !== n)
    throw new ValueError(`${what}: ${listName} holds one tensor per group member (${n}), got ${list?.length}`);
  for (const [i, x] of list.entries())
    if (!(x instanceof Tensor) || x.dtype !== t.dtype || x.shape.join() !== t.shape.join())
      throw new ValueError(
        `${what}: ${listName}[${i}] must have the shape [${t.shape.join(", ")}] and dtype ${t.dtype} of the tensor`,
      );
}

export async function allGather(c: Ctx, outs: readonly Tensor[], t: Tensor): Promise<void> {
  const n = c.g.size();
  const me = c.g.rank();
  checkList(outs, t, n, c.what, "tensorList");
  raw.copyInto(outs[me]!, t);
  if (n === 1) return;
  if (bytesOf(t) >= ringMinBytes()) {
    for (let s = 0; s < n - 1; s++) {
      const into = outs[mod(me - s - 1, n)]!;
      await Promise.all([
        send(c, outs[mod(me - s, n)]!, me + 1, `ag${s}`),
        recv(c, into, me - 1, `ag${s}`, (x) => copyMessage(into, x)),
      ]);
    }
    return;
  }
  const got: (Tensor | null)[] = new Array<Tensor | null>(n).fill(null);
  await exchangeAll(c, () => t, t, got);
  for (let j = 0; j < n; j++) if (j !== me) copyMessage(outs[j]!, got[j]!);
}

export async function reduceScatter(c: Ctx, out: Tensor, ins: readonly Tensor[], op: ReduceOp): Promise<void> {
  const n = c.g.size();
  const me = c.g.rank();
  checkList(ins, out, n, c.what, "inputList");
  const acc = raw.copyAs(ins[me]!);
  if (n > 1 && bytesOf(out) >= ringMinBytes()) {
    // NB: two buffers: the one sent in a step is not the one the step's receive writes
    const bufs = [raw.empty(out.shape, out.dtype), raw.empty(out.shape, out.dtype)];
    for (let s = 0; s < n - 1; s++) {
      const payload = s === 0 ? ins[mod(me - 1, n)]! : bufs[s % 2]!;
      const into = bufs[(s + 1) % 2]!;
      const block = ins[mod(me - s - 2, n)]!;
      await Promise.all([
        send(c, payload, me + 1, `rs${s}`),
        recv(c, into, me - 1, `rs${s}`, (x) => {
          raw.copyInto(into, block);
          reduceInto(op, into, x);
        }),
      ]);
    }
    raw.copyInto(acc, bufs[(n - 1) % 2]!);
  } else if (n > 1) {
    const got: (Tensor | null)[] = new Array<Tensor | null>(n).fill(null);
    got[me] = acc;
    await exchangeAll(c, (j) => ins[j]!, out, got);
    const r = raw.copyAs(got[0]!);
    for (let j = 1; j < n; j++) reduceInto(op, r, got[j]!);
    raw.copyInto(acc, r);
  }
  finishAvg(op, acc, n);
  raw.copyInto(out, acc);
}

export async function barrier(c: Ctx): Promise<void> {
  await allReduce(c, raw.empty([1], "int32"), "sum");
}

export type { Ctx as CollectiveContext };
