/**
 * The cma channel: the receiver copies tensor bytes straight out of the
 * sender's memory with process_vm_readv (native/src/channels/cma.cc) — one
 * copy per transfer, into the destination the pipe allocated.
 *
 * Viability:
 *  1. Here: the addon is loaded, Yama's ptrace_scope (when present) is 0, and
 *     a process_vm_readv of our own probe word works (a seccomp profile may
 *     forbid the syscall).
 *  2. Per pipe: the advert carries our probe word {pid, address, value}; in
 *     createChannel each side reads the peer's and both exchange the verdict,
 *     so the channel comes up on both sides or on neither (ChannelNotViableError
 *     with the reason, e.g. the Yama setting).
 * Buffers up to INLINE_MAX (16 KiB) ride inside their descriptor, on the control connection
 * (../native_common.ts); the data path below is for larger ones.
 * Transfers:
 *  1. send(): the descriptor is {id, length, address}; the pipe keeps the buffer
 *     alive and unchanged until `done`.
 *  2. recv(): cmaRead from the peer into the destination (off the JS thread),
 *     then an ack { done: [ids] } to the peer (acks of one tick are batched).
 *  3. The ack resolves the sender's `done`. A dead peer fails reads with
 *     WorkerUnavailableError; the pipe's close fails pending `done`s.
 *
 * Domain: same boot id, pid and user namespace, same uid.
 */
import { ChannelNotViableError } from "../../errors/index.js";
import { loadNative } from "../../native/binding.js";
import { nativeChannels, type NativeCmaProbe } from "../../native/channels.js";
import { debug } from "../../util/index.js";
import { registerChannel } from "../index.js";
import {
  CHANNEL_PRIORITY,
  type Channel,
  type ChannelAdvert,
  type ChannelBootstrap,
  type ChannelBuffer,
  type ChannelContext,
  type ChannelSend,
  type HostIdentity,
  type SetupValue,
} from "../interface.js";
import {
  channelError,
  closedError,
  Inbox,
  Pending,
  pipeClosedError,
  RECORD,
  INLINE_MAX,
  inlineDescriptor,
  takeInline,
  sameHostDomain,
} from "../native_common.js";

const DESCRIPTOR_BYTES = 25; // RECORD, then the fields

function encode(id: number, length: number, address: number, kind: number): Uint8Array {
  const d = new Uint8Array(DESCRIPTOR_BYTES);
  const v = new DataView(d.buffer);
  d[0] = kind;
  v.setFloat64(1, id, true);
  v.setFloat64(9, length, true);
  v.setFloat64(17, address, true);
  return d;
}

function decode(d: Uint8Array): { id: number; length: number; address: number } {
  if (d.byteLength !== DESCRIPTOR_BYTES)
    throw new ChannelNotViableError(
      `cma channel: a descriptor of ${d.byteLength} bytes is not ours (expected ${DESCRIPTOR_BYTES})`,
    );
  const v = new DataView(d.buffer, d.byteOffset, d.byteLength);
  return { id: v.getFloat64(1, true), length: v.getFloat64(9, true), address: v.getFloat64(17, true) };
}

function isRecord(m: SetupValue): m is { readonly [key: string]: SetupValue } {
  return typeof m === "object" && m !== null && !Array.isArray(m) && !(m instanceof Uint8Array);
}

/**
 * A cma channel over `b`: also the shm channel's path for its largest buffers (../shm/index.ts), where
 * `kind` (the descriptor's first byte) tells its descriptors from the shm ones.
 */
export class CmaChannel implements Channel {
  readonly name = "cma";
  private readonly pending = new Pending();
  private readonly acks = new Map<number, { resolve: () => void; bytes: Uint8Array }>();
  private readonly outgoingAcks: number[] = [];
  private nextId = 0;
  private isClosed = false;

  constructor(
    private readonly b: ChannelBootstrap,
    private readonly peerPid: number,
    inbox: Inbox,
    private readonly kind = RECORD,
  ) {
    inbox.listen((m) => {
      if (!isRecord(m) || !Array.isArray(m.done)) return;
      for (const id of m.done as readonly SetupValue[]) {
        const waiting = this.acks.get(id as number);
        this.acks.delete(id as number);
        waiting?.resolve();
      }
    });
  }

  send(buffer: ChannelBuffer): ChannelSend {
    if (buffer.kind !== "cpu") {
      const done = Promise.reject(
        new ChannelNotViableError("cma channel: moves host memory only; a cuda buffer needs cuda_ipc or ucx"),
      );
      return { descriptor: new Uint8Array(0), done };
    }
    if (buffer.bytes.byteLength <= INLINE_MAX)
      return { descriptor: inlineDescriptor(buffer.bytes), done: this.pending.finished() };
    // NB: no ack can come any more (close cleared the table): nothing to hold the buffer for
    if (this.isClosed) return { descriptor: new Uint8Array(0), done: this.pending.finished() };
    const id = this.nextId++;
    const n = buffer.bytes.byteLength;
    // NB: addressOf moves a small on-heap typed array's bytes off the V8 heap first, so the address stays valid.
    const address = loadNative()!.addressOf(buffer.bytes);
    const descriptor = encode(id, n, address, this.kind);
    // NB: the entry also holds the bytes: the peer reads them until it acks, whatever the caller keeps.
    const acked = new Promise<void>((resolve) => this.acks.set(id, { resolve, bytes: buffer.bytes }));
    return { descriptor, done: this.pending.track(acked, (e) => e) };
  }

  recv(descriptor: Uint8Array, into: ChannelBuffer): Promise<void> {
    if (into.kind !== "cpu")
      return Promise.reject(new ChannelNotViableError("cma channel: receives into host memory only"));
    try {
      if (takeInline(this.name, descriptor, into.bytes)) return this.pending.finished();
    } catch (e) {
      return Promise.reject(e);
    }
    let d: { id: number; length: number; address: number };
    try {
      d = decode(descriptor);
    } catch (e) {
      return Promise.reject(e);
    }
    if (d.length !== into.bytes.byteLength)
      return Promise.reject(
        new ChannelNotViableError(
          `cma channel: transfer ${d.id} has ${d.length} bytes but the destination has ${into.bytes.byteLength}`,
        ),
      );
    if (this.isClosed) return this.pending.finished();
    const read = nativeChannels()!.cmaRead(this.peerPid, d.address, into.bytes);
    // The sender may reuse its buffer once we are done reading, whether the read worked or not.
    void read.then(
      () => this.ack(d.id),
      () => this.ack(d.id),
    );
    return this.pending.track(read, (e) => channelError("cma", this.b.peerName, e));
  }

  private ack(id: number): void {
    if (this.isClosed) return;
    this.outgoingAcks.push(id);
    if (this.outgoingAcks.length > 1) return; // a flush is already scheduled
    queueMicrotask(() => {
      const ids = this.outgoingAcks.splice(0);
      if (!this.isClosed)
        this.b.send({ done: ids }).catch((e: unknown) => this.close(channelError("cma", this.b.peerName, e) as Error));
    });
  }

  close(error?: Error): void {
    if (this.isClosed) return;
    this.isClosed = true;
    this.acks.clear();
    this.pending.failAll(error ?? closedError("cma", this.b.peerName));
    debug(2, "channel", `cma channel to ${this.b.peerName} closed`);
  }

  get closed(): boolean {
    return this.isClosed;
  }
}

export class CmaChannelContext implements ChannelContext {
  readonly name = "cma";
  private reason: string | undefined | null = null; // null: not checked yet
  private probe: NativeCmaProbe | null = null;

  isViable(): boolean {
    return this.whyNotViable() === undefined;
  }

  whyNotViable(): string | undefined {
    if (this.reason !== null) return this.reason;
    const native = process.platform === "linux" ? nativeChannels() : null;
    if (!native) return (this.reason = "cma channel: needs Linux and the native addon (npm run build:native)");
    const probe = native.cmaProbeWord();
    const self = native.cmaCheck(probe.pid, probe.address, probe.value);
    if (!self.viable) return (this.reason = self.reason ?? "cma channel: process_vm_readv is refused here");
    if (self.yama > 0)
      return (this.reason = `cma channel: Yama ptrace_scope is ${self.yama}, so workers cannot read each other's memory; set /proc/sys/kernel/yama/ptrace_scope to 0 to use cma`);
    this.probe = probe;
    return (this.reason = undefined);
  }

  /** Our probe word for a peer to read (see the file comment), or undefined where cma is not viable here. */
  probeInfo(): SetupValue | undefined {
    if (!this.isViable()) return undefined;
    const p = this.probe!;
    return { pid: p.pid, address: p.address, value: p.value };
  }

  advertise(host: HostIdentity): ChannelAdvert | null {
    if (!this.isViable()) return null;
    const domain = sameHostDomain(host, ["pid", "user"]);
    return {
      name: this.name,
      priorities: { "cpu-cpu": CHANNEL_PRIORITY.cma },
      // NB: an unknown uid (-1) still makes a valid, if unusual, domain: both sides would need it.
      domain: `${domain}/uid:${host.uid}`,
      info: this.probeInfo(),
    };
  }

  async createChannel(b: ChannelBootstrap): Promise<Channel> {
    const native = nativeChannels();
    if (!native || !this.isViable()) throw new ChannelNotViableError(this.whyNotViable() ?? "cma channel: not viable");
    const inbox = new Inbox(b);
    const v = await exchangeCmaVerdicts(b, inbox, b.remoteAdvert.info);
    if (!v.ok) throw new ChannelNotViableError(`cma channel: ${v.why}`);
    const channel = new CmaChannel(b, v.pid, inbox);
    b.onClose((error) => channel.close(error ? pipeClosedError("cma", b.peerName, error) : undefined));
    debug(2, "channel", `cma channel to ${b.peerName} (pid ${v.pid}) up`);
    return channel;
  }
}

/**
 * Viability, step 2 (see the file comment), over `b`'s setup messages: reads the peer's probe word
 * (`info`, from its advert) and trades verdicts with the peer, so that both sides agree. A refusal on
 * either side is `ok: false` with the reason; a peer that sends no verdict within b.timeoutMs throws.
 */
export async function exchangeCmaVerdicts(
  b: ChannelBootstrap,
  inbox: Inbox,
  info: SetupValue | undefined,
): Promise<{ ok: true; pid: number } | { ok: false; why: string }> {
  const native = nativeChannels()!;
  const p = isRecord(info ?? null) ? (info as { pid?: unknown; address?: unknown; value?: unknown }) : {};
  let verdict: { ok: boolean; reason: string };
  if (typeof p.pid !== "number" || typeof p.address !== "number" || typeof p.value !== "number") {
    verdict = { ok: false, reason: `${b.peerName} sent no cma probe word` };
  } else {
    const c = native.cmaCheck(p.pid, p.address, p.value);
    verdict = { ok: c.viable, reason: c.reason ?? "" };
  }
  // Both sides must be able to read each other's memory: exchange the verdicts.
  await b.send({ ok: verdict.ok, reason: verdict.reason });
  const theirs = await inbox.next(
    b.timeoutMs,
    () => new ChannelNotViableError(`cma channel: ${b.peerName} sent no verdict within ${b.timeoutMs} ms`),
  );
  const their = isRecord(theirs) ? theirs : {};
  if (!verdict.ok) return { ok: false, why: `reading ${b.peerName}'s memory failed: ${verdict.reason}` };
  if (their.ok !== true)
    return { ok: false, why: `${b.peerName} cannot read our memory: ${String(their.reason ?? "")}` };
  return { ok: true, pid: p.pid as number };
}

export const cmaChannelContext = new CmaChannelContext();
registerChannel(cmaChannelContext);
