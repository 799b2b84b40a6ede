/**
 * The receive side of point-to-point messages on one worker: matching what
 * arrives against the receives posted, as MPI and gloo match.
 *
 * 1. A message is an envelope {src, tag, shape, dtype, device} plus the
 *    tensor the pipe's channel carried. Messages from one sender arrive in the
 *    order it sent them (one pipe per direction, served in frame order).
 * 2. An arriving message goes to the first posted receive (in posting order)
 *    with the same tag whose source is its sender or "any source".
 * 3. With none, it is held as "unexpected" (the received buffer itself, no
 *    copy) until a receive matches it; a receive looks at the held messages
 *    first, oldest first. So two messages between a pair with the same tag
 *    match two receives in order.
 * 4. Held bytes are bounded (TPRPC_P2P_HOLD_BYTES, default 1 GiB per
 *    worker): a message that would go past the bound is refused (deliver
 *    throws); ./p2p.ts then holds the refusal (no bytes) in its place, and the
 *    receive matching it fails with that DistributedError. A message being
 *    received is in memory once: the bound is on what waits unmatched.
 * 5. A posted receive ends by a match, its timeout, or the death of a peer it
 *    depends on (its source; for a collective, any member of the group).
 * 6. A receive whose consume copies the message out (`copiesOut`: the
 *    collectives' ring steps and broadcast) releases the received buffer as
 *    soon as consume returns (releaseReceived): an shm landing block goes back
 *    to the sender at once, a channel's receive buffer to its allocator,
 *    instead of waiting for a garbage collection. A user's receive does the same
 *    in ./p2p.ts (receiveInto), which may adopt the buffer instead.
 * 7. Matching at the header (reserve): when a message's header arrives (the
 *    pipe's destination hook, before its bytes) and the receive it matches
 *    names a contiguous tensor of the message's size (a user's recv/irecv),
 *    the match happens then and the channel writes the bytes straight into
 *    that tensor: no fresh buffer and no copy (issue #18). deliver finds the
 *    reservation by the bytes the tensor landed in. The pipe asks only while
 *    every earlier message from that sender was delivered, so rule 3 holds.
 *    A reserved receive that times out before its bytes are in fails, and
 *    its message is dropped when it comes (the tensor's bytes are then
 *    unspecified, as after any failed receive).
 */
import { DistributedError, RpcTimeoutError, TensorMismatchError } from "../errors/index.js";
import { loadNative } from "../native/binding.js";
import { itemSize } from "../tensor/dtype.js";
import type { Tensor } from "../tensor/tensor.js";
import { debug } from "../util/index.js";
import { type Deadline, deadline } from "./deadlines.js";

const native = loadNative();

/** Smaller received buffers are left to the garbage collector (nothing large to give back). */
const RELEASE_MIN_BYTES = 64 << 10;

/**
 * Releases the buffer under a received message's tensor now (the addon's detachBuffer): its memory goes
 * back at once (an shm landing block to the peer, which fills it again; a pool block to the pool) rather
 * than at the collection that would free it. Only for a tensor the pipe decoded for this message, once
 * nothing reads it any more: every view of the buffer reads as empty afterwards. Returns whether it did.
 */
export function releaseReceived(t: Tensor): boolean {
  if (!native || t.storage.device.type !== "cpu") return false;
  const d = t.storage.data;
  // NB: only a buffer the storage covers whole: a view into a larger one (an allocator's arena) may hold more
  if (d.buffer.byteLength < RELEASE_MIN_BYTES || d.byteOffset !== 0 || d.byteLength !== d.buffer.byteLength)
    return false;
  return native.detachBuffer(d);
}

/** What travels beside a point-to-point tensor. */
export interface Envelope {
  /** The sender's (global) rank. */
  src: number;
  /** "u:<n>" for a user tag n, "c:<group>:<seq>:<step>" inside a collective. */
  tag: string;
  shape: number[];
  dtype: string;
  device: string;
}

/** A receive waiting for its message. */
export interface PostedRecv {
  /** The sender it wants, or null for any source. */
  src: number | null;
  tag: string;
  /** The shape, dtype and device it accepts (checked before consume runs). */
  expect: { shape: readonly number[]; dtype: string; device: string };
  /** Takes the received tensor (copies or reduces it into place); may throw. */
  consume(t: Tensor, env: Envelope): void;
  /** Ranks whose death fails this receive. */
  dependsOn: ReadonlySet<number> | null;
  /** For messages: "recv from rank 2 (tag 0)". */
  what: string;
  /**
   * consume copies (or reduces) the received tensor into place and keeps no reference to it: the
   * received buffer is released once consume returns (see releaseReceived). Leave it unset for a
   * consume that keeps the tensor.
   */
  copiesOut?: boolean;
  /**
   * Where a message for this receive may land as its bytes arrive (the bytes of the tensor it fills,
   * when that is one contiguous run of host memory), or null; see Mailbox.reserve.
   */
  landing?(): Uint8Array | null;
}

/**
 * A posted receive: the PostedRecv's fields copied into one fixed shape (an object spread per receive cost
 * microseconds per message, issue #18), with its promise's settle functions and its deadline.
 */
class Posted implements PostedRecv {
  readonly src: number | null;
  readonly tag: string;
  readonly expect: PostedRecv["expect"];
  readonly consume: PostedRecv["consume"];
  readonly dependsOn: ReadonlySet<number> | null;
  readonly what: string;
  readonly copiesOut: boolean;
  readonly landing: PostedRecv["landing"];
  timer: Deadline | null = null;
  /** Set by reserve: the bytes its message is landing in, and its sender. */
  landed: Uint8Array | null = null;
  landedFrom = -1;
  /** A reserved receive that failed (timeout) before its message was in: that message is dropped. */
  failed = false;
  /** The promise post() returned (set right after it is made). */
  promise: Promise<number> | null = null;

  constructor(
    r: PostedRecv,
    readonly resolve: (src: number) => void,
    private readonly reject: (e: Error) => void,
  ) {
    this.src = r.src;
    this.tag = r.tag;
    this.expect = r.expect;
    this.consume = r.consume;
    this.dependsOn = r.dependsOn;
    this.what = r.what;
    this.copiesOut = r.copiesOut === true;
    this.landing = r.landing;
  }

  /**
   * Rejects the receive's promise, marked as handled first: a receive started now and awaited later (after
   * awaiting another operation) that fails meanwhile is no unhandled rejection. Marking it only here saves
   * a promise per successful receive (issue #18).
   */
  fail(e: Error): void {
    this.promise?.catch(ignore);
    this.reject(e);
  }
}

const ignore = (): void => undefined;

/** A rejected promise, marked as handled (see Posted.fail). */
export function rejected<T>(e: Error): Promise<T> {
  const p = Promise.reject(e);
  p.catch(ignore);
  return p;
}

/** Whether `t` is a tensor decoded over exactly the bytes `b` (a message that landed where reserve said). */
function landedOn(b: Uint8Array, t: Tensor): boolean {
  if (t.storage.device.type !== "cpu") return false;
  const d = t.storage.data;
  return d.buffer === b.buffer && d.byteOffset === b.byteOffset && d.byteLength === b.byteLength;
}

/** The first posted receive (posting order) that `env`'s message matches (rule 2), or -1; no closure per message. */
function postedFor(posted: readonly Posted[], env: Envelope): number {
  for (let i = 0; i < posted.length; i++) {
    const p = posted[i]!;
    if (p.tag === env.tag && (p.src === null || p.src === env.src)) return i;
  }
  return -1;
}

interface Held {
  env: Envelope;
  tensor: Tensor | null;
  bytes: number;
  /** A refused message: the receive matching it fails with this. */
  error?: Error;
}

const DEFAULT_HOLD_BYTES = 2 ** 30;

function holdLimit(): number {
  const v = Number(process.env.TPRPC_P2P_HOLD_BYTES);
  return Number.isFinite(v) && v >= 0 && process.env.TPRPC_P2P_HOLD_BYTES !== "" ? v : DEFAULT_HOLD_BYTES;
}

const fmtShape = (s: readonly number[]) => `[${s.join(", ")}]`;

/** Throws TensorMismatchError when the message does not fit the receive. */
function checkFits(p: PostedRecv, env: Envelope, self: number): void {
  const ctx = `${p.what} on rank ${self}: rank ${env.src} sent`;
  const e = p.expect;
  if (env.dtype !== e.dtype)
    throw new TensorMismatchError(
      `${ctx} a ${env.dtype} tensor into a ${e.dtype} one; send and receive the same dtype`,
      "dtype",
      e.dtype,
      env.dtype,
    );
  if (env.device !== e.device)
    throw new TensorMismatchError(
      `${ctx} a tensor on ${env.device} into one on ${e.device}; receive into a tensor on the sender's device`,
      "device",
      e.device,
      env.device,
    );
  if (env.shape.length !== e.shape.length || env.shape.some((d, i) => d !== e.shape[i]))
    throw new TensorMismatchError(
      `${ctx} shape ${fmtShape(env.shape)} into shape ${fmtShape(e.shape)}; both sides must use the same shape`,
      "shape",
      fmtShape(e.shape),
      fmtShape(env.shape),
    );
}

export class Mailbox {
  private readonly posted: Posted[] = [];
  /** Receives matched to a message whose bytes are landing in their tensor (reserve), in match order. */
  private readonly reserved: Posted[] = [];
  private readonly held: Held[] = [];
  private heldBytes = 0;
  /** Messages matched at their header so far (reserve): their bytes landed in the receive's tensor. */
  landed = 0;

  constructor(private readonly self: number) {}

  /** Bytes held for receives not yet posted. */
  get bytesHeld(): number {
    return this.heldBytes;
  }

  /** Number of receives waiting (reserved ones included). */
  get waiting(): number {
    return this.posted.length + this.reserved.length;
  }

  /**
   * The header of `env`'s message of `byteLength` bytes arrived, before its bytes (the pipe's destination
   * hook, see ./p2p.ts): when the receive it matches (rule 2) gives a landing (PostedRecv.landing) of
   * that length and accepts the message (shape, dtype, device), the match happens now: the receive
   * leaves the posted ones, and its landing is returned for the bytes to arrive in. Null otherwise
   * (nothing changes; deliver matches as always). The pipe asks only when every earlier message from
   * that sender was delivered, so matching here keeps rule 3's order.
   */
  reserve(env: Envelope, byteLength: number): Uint8Array | null {
    const i = postedFor(this.posted, env);
    const p = this.posted[i];
    if (!p?.landing) return null;
    try {
      checkFits(p, env, this.self);
    } catch {
      return null; // NB: deliver fails the receive with the mismatch, as without a reservation
    }
    const b = p.landing();
    if (!b || b.byteLength !== byteLength) return null;
    this.posted.splice(i, 1);
    p.landed = b;
    p.landedFrom = env.src;
    this.reserved.push(p);
    this.landed++;
    return b;
  }

  /** A message arrived (./p2p.ts's handler); throws when it must be refused (the sender's op fails). */
  deliver(env: Envelope, tensor: Tensor): void {
    let r = -1;
    for (let k = 0; k < this.reserved.length; k++)
      if (this.reserved[k]!.tag === env.tag && landedOn(this.reserved[k]!.landed!, tensor)) {
        r = k;
        break;
      }
    if (r >= 0) {
      const p = this.reserved[r]!;
      this.reserved.splice(r, 1);
      if (p.failed) {
        debug(1, "distributed", `${p.what} on rank ${this.self} failed before its message came in: dropped`);
        return;
      }
      this.complete(p, env, tensor);
      return;
    }
    const i = postedFor(this.posted, env);
    if (i >= 0) {
      const p = this.posted[i]!;
      this.posted.splice(i, 1);
      this.complete(p, env, tensor);
      return;
    }
    const bytes = tensor.numel() * itemSize(tensor.dtype);
    const limit = holdLimit();
    if (this.heldBytes + bytes > limit)
      throw new DistributedError(
        `rank ${this.self} refused a ${bytes}-byte message from rank ${env.src}: ${this.heldBytes} bytes already wait ` +
          `for receives not yet posted (TPRPC_P2P_HOLD_BYTES = ${limit}); post the receive earlier or raise the bound`,
      );
    this.heldBytes += bytes;
    this.held.push({ env, tensor, bytes });
  }

  /** Holds a refusal of `env`'s message in its place: the receive that matches it fails with `error`. */
  refuse(env: Envelope, error: Error): void {
    this.held.push({ env, tensor: null, bytes: 0, error });
  }

  /** Posts a receive; resolves to the sender's rank once a message was consumed into place. */
  post(r: PostedRecv, timeoutMs: number): Promise<number> {
    let i = -1;
    for (let k = 0; k < this.held.length; k++) {
      const e = this.held[k]!.env;
      if (e.tag === r.tag && (r.src === null || r.src === e.src)) {
        i = k;
        break;
      }
    }
    if (i >= 0) {
      const h = this.held[i]!;
      this.held.splice(i, 1);
      this.heldBytes -= h.bytes;
      if (h.error) return rejected(h.error);
      const failed = this.take(r, h.env, h.tensor!);
      return failed ? rejected(failed) : Promise.resolve(h.env.src);
    }
    let posted: Posted;
    const promise = new Promise<number>((resolve, reject) => {
      const p = (posted = new Posted(r, resolve, reject));
      if (timeoutMs > 0)
        p.timer = deadline(timeoutMs, () => {
          // NB: a reserved receive's message is landing in its tensor: it stays reserved to be dropped
          if (p.landed) p.failed = true;
          else this.remove(p);
          p.fail(
            new RpcTimeoutError(`${r.what} on rank ${this.self} got no message within ${timeoutMs} ms`, timeoutMs),
          );
        });
      this.posted.push(p);
    });
    posted!.promise = promise;
    return promise;
  }

  /** Rank `rank` died or left: fail every receive that depends on it. */
  peerGone(rank: number, error: () => Error): void {
    for (const p of [...this.posted])
      if (p.src === rank || p.dependsOn?.has(rank)) {
        this.remove(p);
        p.fail(error());
      }
    for (const p of [...this.reserved])
      if (p.src === rank || p.dependsOn?.has(rank) || (p.src === null && p.landedFrom === rank)) {
        this.reserved.splice(this.reserved.indexOf(p), 1);
        p.timer?.cancel();
        if (!p.failed) p.fail(error());
      }
  }

  /** Fails every waiting receive and drops held messages (shutdown). */
  close(error: Error): void {
    for (const p of [...this.posted.splice(0), ...this.reserved.splice(0)]) {
      p.timer?.cancel();
      if (!p.failed) p.fail(error);
    }
    this.held.length = 0;
    this.heldBytes = 0;
  }

  private remove(p: Posted): void {
    const i = this.posted.indexOf(p);
    if (i >= 0) this.posted.splice(i, 1);
    p.timer?.cancel();
  }

  private complete(p: Posted, env: Envelope, tensor: Tensor): void {
    p.timer?.cancel();
    const failed = this.take(p, env, tensor);
    if (failed) p.fail(failed);
    else p.resolve(env.src);
  }

  /** Consumes the message into the receive's place; returns the error that failed it, or null. */
  private take(p: PostedRecv, env: Envelope, tensor: Tensor): Error | null {
    try {
      checkFits(p, env, this.self);
      p.consume(tensor, env);
      return null;
    } catch (e) {
      return e as Error;
    } finally {
      // NB: also after a mismatch or a failed consume: the message is dropped either way
      if (p.copiesOut) releaseReceived(tensor);
    }
  }
}
