/**
 * allReduce on one host through shared memory: every member maps every other
 * member's region (native/src/channels/host_region.cc), so the reduction reads
 * the peers' bytes where they lie instead of passing them around a ring of pipes.
 *
 * Set-up, once per group (inside its first such allReduce, so every member is there):
 *   each member creates a region (a 4 KiB header with a random token, then two
 *   halves of TPRPC_HOST_CHUNK_BYTES), sends everyone {pid, fd, token}, maps each
 *   peer's region through /proc/<pid>/fd/<fd> and checks its token; then the
 *   members agree (a direct allReduce of "failed" flags). Any failure anywhere
 *   (another host, another uid, no native addon) and the whole group keeps the
 *   pipe algorithms for good.
 *
 * One allReduce, per chunk k of at most a half (the halves alternate, over the
 * group's whole life):
 *   1. copy the chunk into my region's half (all but my own slice); say "filled";
 *   2. once all said filled, reduce my 1/n slice of the chunk, reading every
 *      region's slice in rank order (mine from my tensor; one native pass, reduceN: the same bits as
 *      the direct algorithm's rank-order reduction), into my tensor; AVG divides
 *      there; copy the result over my own region's slice (nobody else reads my
 *      slice's inputs); say "reduced";
 *   3. once all said reduced, copy every other member's result slice out of its region.
 * Chunk k + 1 goes in before chunk k comes out (the others reduce it meanwhile).
 * Why a half is never overwritten while read: a member fills chunk k + 1's half
 * (chunk k - 1's) only after everyone said "reduced" for chunk k, which each
 * says after it copied chunk k - 1 out.
 * Signals: each member's progress counter in its region's header (2q + 1 once
 * chunk q of the group's life is filled, 2q + 2 once reduced), set with a futex
 * wake; waiters block in futex waits of SLICE_MS on the JS thread, giving the
 * event loop a turn between them (one wake-up instead of a message through a
 * channel's threads and the event loop). A member that leaves the group fails
 * the wait with WorkerUnavailableError, the timeout with RpcTimeoutError; the
 * group then uses the pipe algorithms. Members in one process (agents of a
 * test group) never use this path: they would wait on each other on one thread.
 * Per rank and byte: 2 (n-1)/n (copy in) + 1 + 1/n (reduce) + 2/n (publish) + 2 (n-1)/n (copy out) of
 * memory traffic, against a ring's 2(n-1) pipe messages through the channels.
 */
import os from "node:os";
import { RpcTimeoutError, ValueError, WorkerUnavailableError } from "../errors/index.js";
import { type NativeChannels, nativeChannels } from "../native/channels.js";
import * as raw from "../tensor/raw.js";
import { Tensor } from "../tensor/tensor.js";
import { type DType, itemSize } from "../tensor/dtype.js";
import type { ProcessGroup } from "./group.js";
import { type ReduceOp, finishAvg } from "./reduce_op.js";

/** The collective context of ./collectives.ts (tag prefix, timeout, name). */
export interface HostCtx {
  g: ProcessGroup;
  tag: string;
  timeoutMs: number;
  what: string;
}

const HEADER = 4096;
const DEFAULT_CHUNK = 16 << 20;
const OPS: Partial<Record<ReduceOp, number>> = { sum: 0, avg: 0, product: 1, max: 2, min: 3 };
const NATIVE_DTYPES: ReadonlySet<DType> = new Set(["float32", "float64", "int32", "int64", "uint8", "bool"]);

/** Bytes per half of a region (TPRPC_HOST_CHUNK_BYTES, default 16 MiB; a multiple of 8). */
export function hostChunkBytes(): number {
  const v = Number(process.env.TPRPC_HOST_CHUNK_BYTES);
  const b = process.env.TPRPC_HOST_CHUNK_BYTES && Number.isFinite(v) && v >= 64 ? v : DEFAULT_CHUNK;
  return Math.floor(b / 8) * 8;
}

/** TPRPC_ALLREDUCE_ALGO: "auto" (default), "host" (shared memory whenever the group has it), "pipes". */
export function allReduceAlgo(): "auto" | "host" | "pipes" {
  const v = process.env.TPRPC_ALLREDUCE_ALGO ?? "auto";
  if (v === "" || v === "auto") return "auto";
  if (v === "host" || v === "pipes") return v;
  throw new ValueError(`TPRPC_ALLREDUCE_ALGO is auto, host or pipes, got "${v}"`);
}

interface HostState {
  half: number;
  /** Every member's region, by group position (mine included). */
  regions: ArrayBuffer[];
  /** Chunks done over the group's life: chunk k uses half k % 2. */
  chunks: number;
  /** A failed allReduce left the halves' order unknown: the group uses the pipes from then on. */
  broken: boolean;
}

const states = new WeakMap<ProcessGroup, HostState | null>();

/**
 * Whether `t` may take the shared-memory path: by dtype, device and op only, the same on every
 * member (a member without the native addon still joins the set-up, and fails it for everyone).
 */
export function hostEligible(t: Tensor, op: ReduceOp): boolean {
  return t.device.type === "cpu" && NATIVE_DTYPES.has(t.dtype) && OPS[op] !== undefined;
}

type Exchange = (c: HostCtx, mine: Tensor, step: string) => Promise<Tensor[]>;

/**
 * The group's state, set up on first use (a collective step: every member calls it at the same
 * allReduce); null when the group cannot use shared memory.
 */
export async function hostState(c: HostCtx, exchange: Exchange): Promise<HostState | null> {
  const known = states.get(c.g);
  if (known !== undefined) return known && !known.broken ? known : null;
  const native = nativeChannels();
  const n = c.g.size();
  const me = c.g.rank();
  const half = hostChunkBytes();
  let own: { buffer: ArrayBuffer; pid: number; fd: number } | null = null;
  const token = Array.from({ length: 4 }, () => (Math.random() * 2 ** 31) | 0);
  try {
    own = native ? native.hostRegionCreate(HEADER + 2 * half) : null;
    if (own) new Int32Array(own.buffer, 0, 4).set(token);
  } catch {
    own = null;
  }
  const card = ints(own ? [own.pid, own.fd, ...token, half] : [-1, -1, 0, 0, 0, 0, half]);
  const cards = await exchange(c, card, "hs1");
  const regions: ArrayBuffer[] = [];
  // NB: members in one process (agents of a test group) would wait on each other on one thread
  const pids = new Set(cards.map((t) => (t.typedArray() as Int32Array)[0]));
  let ok = own !== null && native !== null && pids.size === n;
  for (let j = 0; j < n && ok; j++) {
    if (j === me) {
      regions.push(own!.buffer);
      continue;
    }
    const d = cards[j]!.typedArray() as Int32Array; // NB: a received tensor may view a larger buffer
    const peer = d[0]! >= 0 && d[6] === half ? openPeer(native!, d, half) : undefined;
    // NB: the token tells the peer's file from one a reused pid and fd would name
    ok = peer !== undefined && [0, 1, 2, 3].every((i) => new Int32Array(peer, 0, 4)[i] === d[2 + i]);
    if (peer) regions.push(peer);
  }
  const flags = await exchange(c, ints([ok ? 0 : 1]), "hs2");
  const all = ok && flags.every((f) => (f.typedArray() as Int32Array)[0] === 0);
  const st = all ? { half, regions, chunks: 0, broken: false } : null;
  states.set(c.g, st);
  return st;
}

function ints(values: number[]): Tensor {
  const t = raw.empty([values.length], "int32");
  (t.storage.data as Int32Array).set(values);
  return t;
}

function openPeer(native: NativeChannels, d: Int32Array, half: number): ArrayBuffer | undefined {
  try {
    return native.hostRegionOpen(d[0]!, d[1]!, HEADER + 2 * half);
  } catch {
    return undefined;
  }
}

const COUNTER = 64;
/** How long one wait blocks the JS thread before the event loop gets a turn (ms). */
const SLICE_MS = 5;

/** Sets my progress counter (and wakes whoever waits on it). */
function post(st: HostState, me: number, value: number): void {
  nativeChannels()!.hostPost(st.regions[me]!, COUNTER, value >>> 0);
}

/**
 * Waits until every other member's counter reached `target`: blocking futex waits of SLICE_MS, with
 * an event-loop turn between them (timers, RPCs, membership); a member that left fails it with
 * WorkerUnavailableError, the operation's timeout with RpcTimeoutError.
 */
async function waitAll(c: HostCtx, st: HostState, target: number, deadline: number): Promise<void> {
  const native = nativeChannels()!;
  const me = c.g.rank();
  const others = st.regions.filter((_, j) => j !== me);
  for (;;) {
    if (native.hostWait(others, COUNTER, target >>> 0, SLICE_MS)) return;
    await new Promise((r) => setImmediate(r));
    const dead = c.g.ranks.find((r) => c.g.p2p.gone.has(r));
    if (dead !== undefined) {
      const name = c.g.p2p.gone.get(dead)!;
      throw new WorkerUnavailableError(
        `worker "${name}" (rank ${dead}) left the group before a pending distributed operation completed (${c.what})`,
        name,
      );
    }
    if (deadline > 0 && performance.now() > deadline)
      throw new RpcTimeoutError(
        `${c.what} on rank ${c.g.p2p.rank} did not complete within ${c.timeoutMs} ms`,
        c.timeoutMs,
      );
  }
}

function view(dtype: DType, buf: ArrayBuffer, byteOffset: number, len: number): ArrayBufferView {
  switch (dtype) {
    case "float32":
      return new Float32Array(buf, byteOffset, len);
    case "float64":
      return new Float64Array(buf, byteOffset, len);
    case "int32":
      return new Int32Array(buf, byteOffset, len);
    case "int64":
      return new BigInt64Array(buf, byteOffset, len);
    default:
      return new Uint8Array(buf, byteOffset, len);
  }
}

/** The allReduce of a contiguous 1-D `flat` through the group's regions (see the file comment). */
export async function hostAllReduce(
  c: HostCtx,
  st: HostState,
  flat: Tensor,
  op: ReduceOp,
  bounds: (numel: number, n: number) => [number, number][],
): Promise<void> {
  const native = nativeChannels()!;
  const n = c.g.size();
  const me = c.g.rank();
  const esz = itemSize(flat.dtype);
  const per = Math.floor(st.half / esz);
  // NB: typed as one kind: set and subarray behave alike on every kind, and both sides are the same kind
  const data = flat.storage.data as unknown as Float32Array;
  const opCode = OPS[op]!;
  // NB: a one-input reduceN is a memcpy split across the kernel threads (a typed array's set is one thread)
  // NB: the n members share this host's cores: each forks over its share only (1 on a small machine)
  const threads = Math.max(1, Math.floor(os.availableParallelism() / n));
  const copy = (to: ArrayBufferView, from: ArrayBufferView) => native.reduceN(0, to, [from], threads);
  const count = Math.ceil(flat.numel() / per);
  const chunk = (k: number) => {
    const len = Math.min(per, flat.numel() - k * per);
    return { len, at: flat.offset + k * per, base: HEADER + ((st.chunks + k) % 2) * st.half, slices: bounds(len, n) };
  };
  const deadline = c.timeoutMs > 0 ? performance.now() + c.timeoutMs : 0;
  // NB: chunk q of the group's life: counter 2q + 1 once filled, 2q + 2 once reduced
  const filled = (k: number) => 2 * (st.chunks + k) + 1;
  /** Copies chunk k into my half and says so. */
  const fill = (k: number): void => {
    const { len, at, base, slices } = chunk(k);
    // NB: all but my own slice: nobody else reads it, and I reduce it from my tensor
    const [s, l] = slices[me]!;
    if (s > 0) copy(view(flat.dtype, st.regions[me]!, base, s), data.subarray(at, at + s));
    if (s + l < len)
      copy(view(flat.dtype, st.regions[me]!, base + (s + l) * esz, len - s - l), data.subarray(at + s + l, at + len));
    post(st, me, filled(k));
  };
  if (count === 0) return; // NB: posting for no chunk would put my counter ahead of the others' waits
  try {
    fill(0);
    for (let k = 0; k < count; k++) {
      const { at, base, slices } = chunk(k);
      await waitAll(c, st, filled(k), deadline);
      const [s, l] = slices[me]!;
      if (l > 0) {
        const out = data.subarray(at + s, at + s + l);
        const ins = st.regions.map((r, j) => (j === me ? out : view(flat.dtype, r, base + s * esz, l)));
        native.reduceN(opCode, out, ins, threads);
        if (op === "avg") finishAvg(op, new Tensor(flat.storage, [l], [1], at + s), n);
        copy(view(flat.dtype, st.regions[me]!, base + s * esz, l), out);
      }
      post(st, me, filled(k) + 1);
      await waitAll(c, st, filled(k) + 1, deadline);
      // NB: chunk k + 1 goes in before chunk k comes out, so the others can reduce it meanwhile: its half
      // held chunk k - 1, which everyone copied out before it said "reduced" for chunk k
      if (k + 1 < count) fill(k + 1);
      for (let j = 0; j < n; j++) {
        const [sj, lj] = slices[j]!;
        if (j === me || lj === 0) continue;
        copy(data.subarray(at + sj, at + sj + lj), view(flat.dtype, st.regions[j]!, base + sj * esz, lj));
      }
    }
  } catch (e) {
    st.broken = true;
    throw e;
  } finally {
    st.chunks += count;
  }
  flat.storage.version++;
}
