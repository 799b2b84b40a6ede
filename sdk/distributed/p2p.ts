/**
 * Point-to-point messages between the workers of an RPC group, per agent.
 *
 * A message is one one-way pipe message (MessageType.P2P_MESSAGE, no reply)
 * with the payload {envelope, tensor}: the tensor goes out of band like any
 * RPC tensor argument, so the pipe's negotiated channel (shm, cma, ucx or
 * tcp) carries its bytes (a contiguous tensor as a zero-copy window; a
 * strided view keeps its strides when its window is small, see
 * sdk/wire/tensor.ts), on the same per-peer pipes as the group's RPCs.
 *
 * 1. send: the sender's rank, the tag and the tensor's metadata go in the
 *    envelope; the tensor is sent detached (distributed autograd does not
 *    record it).
 * 2. A send completes when the pipe wrote the message and its channel
 *    released the tensor's bytes (the channel's `done`: the sender may change
 *    its tensor), as a gloo send completes locally. No acknowledgement
 *    travels back: an RPC request plus reply per message cost twice the
 *    work of an rpcSync round trip per p2p round trip (issue #18's 4 KB gap).
 * 3. On the receiver, the pipe's serving code hands the message synchronously,
 *    in frame order, to this agent's Mailbox (./mailbox.ts), which matches it
 *    against posted receives or holds it. A message the mailbox refuses
 *    (TPRPC_P2P_HOLD_BYTES) or a malformed one is kept as a refusal that
 *    fails the receive matching it with the DistributedError. See receiveInto
 *    for how a receive writes into the given tensor.
 * 4. A send fails with RpcTimeoutError after its timeout, and with
 *    WorkerUnavailableError when the pipe to the peer closes first.
 * 5. Receives are bounded by the same default timeout (the agent's RPC
 *    timeout) and fail with WorkerUnavailableError when a peer they depend on
 *    leaves the group (the membership reports deaths: store claims are
 *    ephemeral).
 */
import {
  DistributedError,
  RpcNotInitializedError,
  RpcTimeoutError,
  ValueError,
  WorkerUnavailableError,
} from "../errors/index.js";
import { reusableBuffers } from "../channel/interface.js";
import { loadNative } from "../native/binding.js";
import type { Agent } from "../rpc/agent.js";
import { currentAgent } from "../rpc/api.js";
import { setOneWayHandler } from "../rpc/serving.js";
import { setP2PDestination } from "../rpc/rpc_pipe.js";
import type { FrameEntry } from "../pipe/frame.js";
import type { TensorPeek } from "../wire/index.js";
import { checkTimeoutMs } from "../rpc/timeouts.js";
import { Tensor } from "../tensor/tensor.js";
import { debug } from "../util/index.js";
import { deadline } from "./deadlines.js";
import { type Envelope, Mailbox, type PostedRecv, releaseReceived } from "./mailbox.js";
import { copyMessage } from "./reduce_op.js";

const native = loadNative();

const states = new WeakMap<Agent, P2P>();
/** The same states by their agent's RRefContext (what the pipe's destination hook knows of its agent). */
const byRRefs = new WeakMap<object, P2P>();

const ignore = (): void => undefined;

/** Whether a worker of `workers` has id `rank` (per message: no closure). */
function isMember(workers: readonly { id: number }[], rank: number): boolean {
  for (let i = 0; i < workers.length; i++) if (workers[i]!.id === rank) return true;
  return false;
}

/** A detached view of the same bytes (what travels; autograd metadata stays home). */
function wireView(t: Tensor): Tensor {
  return new Tensor(t.storage, t.shape, t.strides, t.offset);
}

export class P2P {
  readonly rank: number;
  readonly mailbox: Mailbox;
  /** Ranks that left the group, with their names (./host_shm.ts's waits check it). */
  readonly gone = new Map<number, string>();

  private constructor(readonly agent: Agent) {
    this.rank = agent.workerInfo().id;
    this.mailbox = new Mailbox(this.rank);
    byRRefs.set(agent.rrefs, this);
    agent.membership.onLeave((w) => {
      debug(1, "distributed", `rank ${w.id} (${w.name}) left: failing what waits on it`);
      this.gone.set(w.id, w.name);
      this.mailbox.peerGone(
        w.id,
        () =>
          new WorkerUnavailableError(
            `worker "${w.name}" (rank ${w.id}) left the group before a pending distributed operation completed`,
            w.name,
          ),
      );
    });
  }

  /** The state of `agent` (made on first use, also by an arriving message). */
  static of(agent: Agent): P2P {
    let s = states.get(agent);
    if (!s) {
      s = new P2P(agent);
      states.set(agent, s);
    }
    return s;
  }

  /** The state of the current agent; RpcNotInitializedError before initRpc. */
  static current(): P2P {
    const a = currentAgent();
    if (!a)
      throw new RpcNotInitializedError(
        "tprpc.distributed needs the RPC group: call rpc.initRpc first (the rank is the worker's rank)",
      );
    return P2P.of(a);
  }

  /** The default timeout of an operation (the RPC timeout), or `timeoutMs` checked. */
  timeout(timeoutMs: number | undefined, what: string): number {
    return timeoutMs === undefined ? this.agent.rpcTimeoutMs : checkTimeoutMs(timeoutMs, `${what}: timeoutMs`);
  }

  /** Ranks of the members now, ascending. */
  ranks(): number[] {
    return this.agent.membership.workers.map((w) => w.id).sort((a, b) => a - b);
  }

  /** Throws WorkerUnavailableError unless `rank` is a member now. */
  checkPeer(rank: number, what: string): void {
    if (!Number.isInteger(rank) || rank < 0) throw new ValueError(`${what}: a rank is an integer >= 0, got ${rank}`);
    if (!isMember(this.agent.membership.workers, rank))
      throw new WorkerUnavailableError(
        `${what}: no worker has rank ${rank} (ranks now: ${this.ranks().join(", ")})`,
        String(rank),
      );
  }

  /** Sends `t` to `dst` under `tag`; resolves once the receiver has it. */
  send(t: Tensor, dst: number, tag: string, timeoutMs: number): Promise<void> {
    const env: Envelope = {
      src: this.rank,
      tag,
      shape: [...t.shape],
      dtype: t.dtype,
      device: t.device.toString(),
    };
    const sent = this.agent.sendOneWay(dst, { env, t: wireView(t) });
    if (!(timeoutMs > 0)) {
      const done = sent.then(() => undefined);
      done.catch(ignore);
      return done;
    }
    // NB: a shared deadline lane, not a timer per message (./deadlines.ts); the promise is marked as handled
    // only when it fails (a send awaited late is no unhandled rejection), no promise more per message
    const out: Promise<void> = new Promise<void>((resolve, reject) => {
      const fail = (e: Error): void => {
        out.catch(ignore);
        reject(e);
      };
      const timer = deadline(timeoutMs, () =>
        fail(new RpcTimeoutError(`send to rank ${dst} (${tag}) was not delivered within ${timeoutMs} ms`, timeoutMs)),
      );
      sent.then(
        () => {
          timer.cancel();
          resolve();
        },
        (e: Error) => {
          timer.cancel();
          fail(e);
        },
      );
    });
    return out;
  }

  /** Posts a receive; resolves to the sender's rank once the message was consumed into place. */
  recv(r: PostedRecv, timeoutMs: number): Promise<number> {
    return this.mailbox.post(r, timeoutMs);
  }

  /** A receive that copies the message into `into` (any strides), or has it land there (landingOf). */
  recvInto(into: Tensor, src: number | null, tag: string, what: string, timeoutMs: number): Promise<number> {
    return this.recv(
      {
        src,
        tag,
        expect: { shape: into.shape, dtype: into.dtype, device: into.device.toString() },
        consume: (t) => receiveInto(into, t),
        dependsOn: null,
        what,
        landing: () => landingOf(into),
      },
      timeoutMs,
    );
  }
}

/** Messages smaller than this are copied: a fresh small buffer and its copy cost less than the look at the header. */
const LAND_MIN_BYTES = 64 << 10;

/** The bytes of `t` when they are one contiguous run of host memory (a whole tensor or a contiguous view). */
function landingOf(t: Tensor): Uint8Array | null {
  if (t.device.type !== "cpu" || t.storage.device.type !== "cpu" || !t.isContiguous()) return null;
  const d = t.storage.data;
  const size = d.BYTES_PER_ELEMENT;
  const n = t.numel() * size;
  if (n < LAND_MIN_BYTES) return null;
  return new Uint8Array(d.buffer, d.byteOffset + t.offset * size, n);
}

/**
 * The pipe's destination hook for a point-to-point message (sdk/rpc/rpc_pipe.ts): a one-buffer message
 * whose tensor covers that buffer in order lands in the tensor of the receive it matches, when the
 * mailbox reserves one (./mailbox.ts, rule 7). Anything else lands in fresh memory, as before.
 */
function destinationOf(rrefs: object, peek: () => unknown, index: number, entries: readonly FrameEntry[]) {
  const p2p = byRRefs.get(rrefs);
  if (!p2p || p2p.mailbox.waiting === 0 || index !== 0 || entries.length !== 1) return null;
  const e = entries[0]!;
  if (e.target.type !== "cpu" || e.byteLength < LAND_MIN_BYTES) return null;
  // NB: decoded only here, past the cheap checks (a small message never pays for the look)
  const payload = peek();
  if (payload === null || typeof payload !== "object") return null;
  const { env, t } = payload as { env?: Envelope; t?: TensorPeek };
  if (!t || t.peekedTensor !== true || t.strided || t.index !== 0 || !validEnvelope(env)) return null;
  const into = p2p.mailbox.reserve(env, e.byteLength);
  return into ? { kind: "cpu" as const, bytes: into } : null;
}

/** No closure per message (validEnvelope runs for every one). */
function allIntegers(a: readonly unknown[]): boolean {
  for (let i = 0; i < a.length; i++) if (!Number.isInteger(a[i])) return false;
  return true;
}

function validEnvelope(env: unknown): env is Envelope {
  const e = env as Envelope;
  return (
    e !== null &&
    typeof e === "object" &&
    Number.isInteger(e.src) &&
    typeof e.tag === "string" &&
    Array.isArray(e.shape) &&
    allIntegers(e.shape) &&
    typeof e.dtype === "string" &&
    typeof e.device === "string"
  );
}

/** Receives of at least this many bytes may adopt the received buffer instead of copying it. */
const ADOPT_MIN_BYTES = 64 << 10;

/** The buffers receiveInto made a storage's memory (shm landing blocks), until a later receive replaces them. */
const adopted = new WeakSet<ArrayBufferLike>();

/**
 * into = x for a user's receive.
 *
 * 1. x over an shm landing block of at least ADOPT_MIN_BYTES, into a contiguous CPU tensor over its
 *    whole storage (not shared memory) of the same dtype: the storage adopts the block (Storage.adoptHost_)
 *    instead of a copy, so a message costs the one copy the sender made into the block, as an RPC reply
 *    does. When the array the storage had was a block an earlier receive adopted, that block is released
 *    now (detached: it goes back to the sender, which fills it again), not when V8 collects it: waiting
 *    made every process scavenge every few 4 MB messages (the landing code shows the blocks' memory to V8
 *    when a size runs short) and sent each message into a block unused for a dozen messages, out of
 *    cache (issue #18: p2p at 0.6-0.85x of rpcSync at 4 MB over shm). So a typedArray() view taken before
 *    such a receive reads as empty after the next one into the same tensor: take views after receiving.
 * 2. Otherwise one copy into `into` (any strides; its storage stays the same, as torch's recv writes into
 *    the tensor), then the received buffer is released at once (./mailbox.ts, releaseReceived): a
 *    channel's receive buffer kept for a round trip was promoted and cost mark-compacts on cma and tcp.
 */
function receiveInto(into: Tensor, x: Tensor): void {
  const d = x.storage.device.type === "cpu" ? x.storage.data : null;
  // NB: landed in place (the mailbox's reservation): the bytes are there; never release the user's memory
  if (d !== null && x.offset === 0 && x.isContiguous() && sameBytes(d, into)) {
    into.storage.version++;
    return;
  }
  const whole = (t: Tensor) =>
    t.device.type === "cpu" && t.offset === 0 && t.isContiguous() && t.numel() === t.storage.data.length;
  if (
    d !== null &&
    reusableBuffers.has(d.buffer) &&
    into.dtype === x.dtype &&
    d.byteLength >= ADOPT_MIN_BYTES &&
    d.byteOffset === 0 &&
    d.byteLength === d.buffer.byteLength &&
    whole(into) &&
    whole(x) &&
    // NB: a block adopted before is not shared memory; the lookup (native) costs a few microseconds
    (adopted.has(into.storage.data.buffer) || !into.storage.isShared)
  ) {
    const old = into.storage.data;
    into.storage.adoptHost_(d);
    adopted.add(d.buffer);
    if (adopted.delete(old.buffer)) native?.detachBuffer(old);
    return;
  }
  copyMessage(into, x);
  releaseReceived(x);
}

/** Whether `d` is exactly the bytes of contiguous CPU tensor `t`. */
function sameBytes(d: ArrayBufferView, t: Tensor): boolean {
  if (t.storage.device.type !== "cpu" || !t.isContiguous()) return false;
  const o = t.storage.data;
  return (
    d.buffer === o.buffer &&
    d.byteOffset === o.byteOffset + t.offset * o.BYTES_PER_ELEMENT &&
    d.byteLength === t.numel() * o.BYTES_PER_ELEMENT
  );
}

/** The receiver's end of every message (the pipe's serving code calls it in frame order; never throws). */
function onMessage(agent: Agent, body: Record<string, unknown>): void {
  if (body === null || typeof body !== "object") return;
  const env = body.env as Envelope;
  const t = body.t;
  const mailbox = P2P.of(agent).mailbox;
  const ok = validEnvelope(env) && t instanceof Tensor;
  if (!ok) {
    debug(1, "distributed", `dropping a malformed point-to-point message from ${String(body.from)}`);
    return;
  }
  try {
    mailbox.deliver(env, t);
  } catch (e) {
    const err = e instanceof Error ? e : new DistributedError(String(e));
    debug(1, "distributed", err.message);
    mailbox.refuse(env, err);
  }
}

setOneWayHandler(onMessage);
setP2PDestination(destinationOf);
