/**
 * A pipe: the one link between two workers for messages from the side that opened it. Control bytes
 * (the rpc layer's header and payload) go over an authenticated transport connection; each tensor buffer
 * goes through the channel negotiated for its (source device, target device) pair. ./frame.ts has the
 * byte layout; the handshake bodies are msgpack (./handshake.ts).
 *
 * States, step by step (`pipe.state`; ./state.ts holds the table of legal
 * transitions, and `transition` throws on any other):
 * 1. handshaking, from construction: the connector has an authenticated
 *    connection (sdk/transport) and sends HELLO with its Capabilities
 *    (./capabilities.ts); the acceptor waits for HELLO.
 * 2. handshaking → settingUp: the acceptor got HELLO, ran `negotiate()`
 *    (./negotiate.ts) and answered ACCEPT with its Capabilities, the choice
 *    per device pair and the channel table (the chosen names, in index
 *    order); the connector got that ACCEPT and checked the choice. Both
 *    create the chosen channels at once; their setup messages travel as SETUP
 *    frames tagged with the channel index. Until step 4, sends wait in order
 *    (sendsBeforeOpen) and so do the peer's MESSAGE frames (framesBeforeOpen).
 * 3. handshaking → refusing (acceptor): negotiation failed, or the HELLO is
 *    of another pipe protocol version (PipeVersionError). REFUSE goes out with
 *    the reason, the peer's bytes are ignored until it left, then step 5.
 * 4. settingUp → open: every channel is ready; the opening timer stops,
 *    `ready` resolves, framesBeforeOpen are delivered, sendsBeforeOpen go.
 * 5. any state → closed: close() — ours, opening took over timeoutMs, the
 *    connection broke, a ProtocolError (malformed or out-of-turn frame), a
 *    failed channel, or the peer's REFUSE. Everything pending rejects with
 *    WorkerUnavailableError naming the peer (ChannelNotViableError and
 *    PipeVersionError pass as they are). Final; close() again does nothing.
 * Sending a message: for each buffer, `channel.send` (in order), then one
 * MESSAGE frame [head + entries, descriptors, control] on the connection;
 * the send resolves once the frame was written and every buffer's `done`.
 * Receiving: for each entry, the destination on its target device (the
 * channel's adoptBuffer, else the onDestination hook's, else fresh memory)
 * and `channel.recv` into it (in frame order, so each channel sees its sends'
 * order); messages are delivered in frame order once all their buffers are in.
 */
import { ChannelNotViableError, ProtocolError, WorkerUnavailableError } from "../errors/index.js";
import { debug } from "../util/index.js";
import { getChannel } from "../channel/index.js";
import { ensureHeapHeadroom } from "../channel/heap_headroom.js";
import { ensureLatencySlice } from "../channel/latency_slice.js";
import { loadNative } from "../native/binding.js";
import {
  type Capabilities,
  type Channel,
  type ChannelBootstrap,
  type ChannelBuffer,
  type DevicePairKey,
  type DeviceRef,
  type SetupValue,
  bufferDevice,
  bufferLength,
} from "../channel/interface.js";
import type { TransportConnection } from "../transport/interface.js";
import { type Frame, FrameCutter, type FrameEntry, FrameKind, PipeVersionError, encodeFrameHead } from "./frame.js";
import {
  type Accept,
  type HandshakeBodies,
  type HandshakeKind,
  decodeHandshake,
  encodeHandshake,
} from "./handshake.js";
import { type Negotiation, checkChoice, flipNegotiation, negotiate } from "./negotiate.js";
import { type PipeState, PipeStateMachine } from "./state.js";

export interface PipeOptions {
  /** This worker's capabilities (localCapabilities()). */
  local: Capabilities;
  /** The group secret (channels authenticate their own connections with it). */
  secret: string | Buffer;
  /** The address this worker advertises (channels may listen there). */
  host: string;
  /** Bound on opening the pipe (handshake and channel setup), ms. */
  timeoutMs: number;
  /** Memory for an incoming buffer on `device`; default: fresh host memory (cpu only). */
  allocate?: (byteLength: number, device: DeviceRef) => ChannelBuffer;
  /** Memory for an incoming buffer whose target is a device (not the CPU), when `allocate` is not given. */
  allocateDevice?: (byteLength: number, device: DeviceRef) => ChannelBuffer;
}

/** One message to send: control bytes (written as given, in order) and buffers. */
export interface PipeMessage {
  control: readonly Uint8Array[];
  /** `target` is the device it should land on at the peer (default: the same kind and index). */
  buffers: readonly { buffer: ChannelBuffer; target?: DeviceRef }[];
}

export interface ReceivedMessage {
  control: Uint8Array;
  buffers: ChannelBuffer[];
  /** Bytes on the wire: frame, control and buffers. */
  bytes: number;
}

/**
 * Chooses where entry `index` of an arriving message lands (see Pipe.onDestination): a buffer of exactly
 * the entry's length on its target device, or null for the default (fresh memory).
 */
export type DestinationHook = (
  control: Uint8Array,
  index: number,
  entries: readonly FrameEntry[],
) => ChannelBuffer | null;

/** What rpc.pipeInfo(peer) shows. */
export interface PipeInfo {
  peer: string;
  /** The transport of the control connection, e.g. "tcp". */
  transport: string;
  /** The connection's remote end, e.g. "tcp://127.0.0.1:41234". */
  remote: string;
  role: "connector" | "acceptor";
  /** Per device pair (our side first), the channel moving tensor bytes. */
  channels: Partial<Record<DevicePairKey, string>>;
  /** Pairs no channel serves, with why. */
  missing: Partial<Record<DevicePairKey, string>>;
  /** The channels each side offered. */
  offered: { local: string[]; remote: string[] };
}

const native = loadNative();
/** Received buffers above this many bytes come from the addon's pool (env TPRPC_POOL_MIN_BYTES). */
const POOL_MIN_BYTES = Number(process.env.TPRPC_POOL_MIN_BYTES ?? 32 << 20);

function defaultAllocate(n: number, device: DeviceRef): ChannelBuffer {
  if (device.type !== "cpu")
    throw new ChannelNotViableError(`this pipe cannot receive into ${device.type}:${device.index} (no allocator)`);
  if (n < 65536) return { kind: "cpu", bytes: new Uint8Array(n) };
  // NB: every byte is overwritten, so skip zeroing. Up to POOL_MIN_BYTES, V8's own allocator: a dead
  // receive buffer is then freed by the next scavenge, and glibc hands the same warm memory back (its
  // mmap threshold rises to 32 MiB after the first free). The addon's pool frees a block only after a
  // full mark-compact runs its finalizer, which would make every few 4 MB messages cost one (3–4 ms of
  // a 7 ms round trip). Larger buffers come from the pool: warm (huge pages, no 1.6 GB/s faulting)
  // where V8's would be a fresh mapping each time, and the GC is cheap beside the transfer.
  // An ArrayBuffer of its own at offset 0 lets tensors view it.
  const ab = native && n > POOL_MIN_BYTES ? native.alloc(n, { zero: false }) : Buffer.allocUnsafeSlow(n).buffer;
  return { kind: "cpu", bytes: new Uint8Array(ab, 0, n) };
}

/** A send made before the pipe opened, waiting for step 4. */
interface QueuedSend {
  msg: PipeMessage;
  resolve: () => void;
  reject: (e: Error) => void;
}

/**
 * The pipe's side of one channel being set up (what its ChannelBootstrap talks to): the peer's SETUP
 * messages that came before the channel listened, the channel's listener, and its close listeners.
 */
interface ChannelSetup {
  unread: SetupValue[];
  listener: ((m: SetupValue) => void) | null;
  closeCbs: ((e: Error | null) => void)[];
}

export class Pipe {
  private readonly cutter: FrameCutter;
  private readonly sm = new PipeStateMachine();
  /** The peer's capabilities; set on HELLO / ACCEPT (info() shows its offer). */
  private remoteCaps: Capabilities | null = null;
  private negotiation: Negotiation = { choice: {}, missing: {} };
  private channelNames: string[] = [];
  private channels: Channel[] = [];
  private readonly pairIndex = new Map<DevicePairKey, number>();
  /** Per channel index, from settingUp on. */
  private channelSetups: ChannelSetup[] = [];
  private readonly sendsBeforeOpen: QueuedSend[] = [];
  /** MESSAGE frames that came before the pipe opened, delivered in step 4. */
  private readonly framesBeforeOpen: Frame[] = [];
  private msgCb: ((m: ReceivedMessage) => void) | null = null;
  private destCb: DestinationHook | null = null;
  private readonly closeCbs: ((e: Error | null) => void)[] = [];
  private deliveryChain: Promise<void> = Promise.resolve();
  private inFlight = 0;
  private closeError: Error | null = null;
  readonly ready: Promise<void>;
  private readyRes!: () => void;
  private readyRej!: (e: Error) => void;
  /** The opening timer: bounds steps 1–4; cleared on open and on close. */
  private readonly openTimer: NodeJS.Timeout;

  private constructor(
    private readonly conn: TransportConnection,
    readonly role: "connector" | "acceptor",
    private peer: string,
    private readonly opts: PipeOptions,
  ) {
    this.ready = new Promise((res, rej) => ((this.readyRes = res), (this.readyRej = rej)));
    this.ready.catch(() => undefined);
    ensureHeapHeadroom(); // NB: a plain `node` master's heap is too small for received tensors (../channel/heap_headroom.ts)
    ensureLatencySlice(); // NB: woken by frames, this thread needs its core at once under load (../channel/latency_slice.ts)
    this.openTimer = setTimeout(
      () =>
        this.close(
          new WorkerUnavailableError(`the pipe to "${this.peer}" did not open within ${opts.timeoutMs} ms`, this.peer),
        ),
      opts.timeoutMs,
    );
    this.cutter = new FrameCutter((f) => this.onFrame(f));
    conn.onData((chunk) => {
      // NB: refusing ignores the peer: closing now would drop the REFUSE still being written
      if (this.state === "closed" || this.state === "refusing") return;
      try {
        this.cutter.push(chunk);
      } catch (e) {
        // NB: bytes after a refused HELLO in the same chunk are ignored, as later chunks are; the cast because
        // TypeScript keeps the narrowing from before push(), which may have moved the state
        if ((this.state as PipeState) === "refusing") return;
        let err = e as Error;
        // NB: the cutter knows no names; say which peer speaks the other version
        if (err instanceof PipeVersionError)
          err = new PipeVersionError(err.remoteVersion, err.localVersion, `worker "${this.peer}"`);
        if (err instanceof PipeVersionError && this.role === "acceptor" && this.state === "handshaking") {
          this.refuse(err);
          return;
        }
        debug(1, "pipe", `closing the pipe to ${this.peer}: ${err.message}`);
        this.close(err);
      }
    });
    conn.onClose((e) =>
      this.close(
        new WorkerUnavailableError(
          `worker "${this.peer}" is unavailable (its connection closed${e ? `: ${e.message}` : ""})`,
          this.peer,
        ),
      ),
    );
  }

  /** Opens a pipe over a fresh connection to `peer`; resolves once it is ready. */
  static async connect(conn: TransportConnection, peer: string, opts: PipeOptions): Promise<Pipe> {
    const p = Pipe.open(conn, peer, opts);
    await p.ready;
    return p;
  }

  /** Starts opening a pipe to `peer` (sends HELLO) and returns it at once, handshaking; `ready` tells when it is open. */
  static open(conn: TransportConnection, peer: string, opts: PipeOptions): Pipe {
    const p = new Pipe(conn, "connector", peer, opts);
    p.write(FrameKind.HELLO, opts.local).catch(() => undefined);
    return p;
  }

  /** Serves a connection a peer opened; messages flow once `ready` resolves. */
  static accept(conn: TransportConnection, opts: PipeOptions): Pipe {
    return new Pipe(conn, "acceptor", conn.remote, opts);
  }

  get peerName(): string {
    return this.peer;
  }

  /** The peer's device counts, from its capabilities (null until the handshake brought them). */
  get peerDevices(): Readonly<Record<string, number>> | null {
    return this.remoteCaps?.devices ?? null;
  }

  /** Where the pipe is in its life (see the file comment). */
  get state(): PipeState {
    return this.sm.state;
  }

  /** True once the pipe closed (state "closed"). */
  get closed(): boolean {
    return this.sm.state === "closed";
  }

  /** One line for sdk/rpc/state_dump.ts: state, messages waiting for their buffers, what waits for the opening. */
  debugState(): string {
    return `${this.state}, ${this.inFlight} message(s) waiting for their buffers, ${this.sendsBeforeOpen.length} send(s) and ${this.framesBeforeOpen.length} frame(s) waiting for it to open`;
  }

  /** Receives every message, in order. One listener. */
  onMessage(cb: (m: ReceivedMessage) => void): void {
    this.msgCb = cb;
  }

  /**
   * Where arriving buffers land, when the message's receiver already knows (tprpc.distributed: straight
   * into the tensor a posted receive names, instead of fresh memory and a copy). One hook. The pipe asks
   * it per entry the channel does not adopt (adoptBuffer wins: its bytes are already here) and only while
   * every earlier message of this pipe was delivered, so a hook that matches messages against receives
   * matches them in delivery order. Not asked under a custom allocator (PipeOptions.allocate).
   */
  onDestination(cb: DestinationHook): void {
    this.destCb = cb;
  }

  /** Called once when the pipe closes: null after our own close(), else why. */
  onClose(cb: (e: Error | null) => void): void {
    if (this.state === "closed") cb(this.closeError);
    else this.closeCbs.push(cb);
  }

  info(): PipeInfo {
    return {
      peer: this.peer,
      transport: /^([a-z0-9_]+):/.exec(this.conn.remote)?.[1] ?? "tcp",
      remote: this.conn.remote,
      role: this.role,
      // NB: the channel that runs: a direct GPU channel that fell back at setup runs cuda_staging
      channels: Object.fromEntries(
        Object.entries(this.negotiation.choice).map(([p, n]) => [
          p,
          this.channels[this.pairIndex.get(p as DevicePairKey)!]?.name ?? n,
        ]),
      ),
      missing: { ...this.negotiation.missing },
      offered: {
        local: this.opts.local.channels.map((c) => c.name),
        remote: this.remoteCaps?.channels.map((c) => c.name) ?? [],
      },
    };
  }

  /** Sends one message (see the file comment); rejects if the pipe closes first or no channel serves a buffer's pair. */
  send(msg: PipeMessage): Promise<void> {
    if (this.state === "closed") return Promise.reject(this.closedError());
    if (this.state !== "open")
      return new Promise((resolve, reject) => this.sendsBeforeOpen.push({ msg, resolve, reject }));
    return this.sendNow(msg);
  }

  private sendNow(msg: PipeMessage): Promise<void> {
    const n = msg.buffers.length;
    let bodyBytes = 0;
    for (const c of msg.control) bodyBytes += c.byteLength;
    if (n === 0) return this.conn.write([encodeFrameHead(FrameKind.MESSAGE, bodyBytes, []), ...msg.control]);
    // NB: check every pair before the first channel.send, so a refused message leaves no channel out of step
    const plan: { ch: number; target: DeviceRef }[] = [];
    for (const { buffer, target } of msg.buffers) {
      const src = bufferDevice(buffer);
      const tgt = target ?? src;
      const pair: DevicePairKey = `${src.type}-${tgt.type}`;
      const ch = this.pairIndex.get(pair);
      if (ch === undefined)
        return Promise.reject(
          new ChannelNotViableError(
            `no channel moves ${pair} tensors to "${this.peer}" (${this.negotiation.missing[pair] ?? "no such device"}); ` +
              "move the tensor to the CPU first, or enable a channel for that pair on both workers",
          ),
        );
      plan.push({ ch, target: tgt });
    }
    const entries: { byteLength: number; channel: number; target: DeviceRef; descriptorBytes: number }[] = [];
    const descs: Uint8Array[] = [];
    const dones: Promise<void>[] = [];
    msg.buffers.forEach(({ buffer }, i) => {
      const { ch, target } = plan[i]!;
      const s = this.channels[ch]!.send(buffer);
      entries.push({ byteLength: bufferLength(buffer), channel: ch, target, descriptorBytes: s.descriptor.byteLength });
      if (s.descriptor.byteLength > 0) descs.push(s.descriptor);
      dones.push(s.done);
    });
    const head = encodeFrameHead(FrameKind.MESSAGE, bodyBytes, entries);
    dones.push(this.conn.write([head, ...descs, ...msg.control]));
    return Promise.all(dones).then(
      () => undefined,
      (e: Error) => {
        // NB: a buffer that could not be moved leaves the peer waiting for it: the pipe is unusable
        this.close(e);
        throw this.state === "closed" ? this.closedError(e) : e;
      },
    );
  }

  private write<K extends HandshakeKind>(kind: K, body: HandshakeBodies[K]): Promise<void> {
    return this.conn.write(encodeHandshake(kind, body));
  }

  /** One frame from the peer; throws ProtocolError on a malformed or out-of-turn one (the pipe then closes). */
  private onFrame(f: Frame): void {
    if (this.state === "refusing") return;
    switch (f.kind) {
      case FrameKind.MESSAGE:
        if (this.state !== "open") this.framesBeforeOpen.push(f);
        else this.onMessageFrame(f);
        return;
      case FrameKind.SETUP: {
        const { c, m } = decodeHandshake(FrameKind.SETUP, f.body);
        // NB: no channel setups before settingUp, so a SETUP while handshaking fails here too
        const setup = this.channelSetups[c];
        if (!setup) throw new ProtocolError(`bad pipe frame: setup message for unknown channel ${c}`);
        if (setup.listener) setup.listener(m);
        else setup.unread.push(m);
        return;
      }
      case FrameKind.HELLO:
        if (this.role !== "acceptor" || this.state !== "handshaking")
          throw new ProtocolError("bad pipe frame: unexpected HELLO");
        this.onHello(decodeHandshake(FrameKind.HELLO, f.body));
        return;
      case FrameKind.ACCEPT:
        if (this.role !== "connector" || this.state !== "handshaking")
          throw new ProtocolError("bad pipe frame: unexpected ACCEPT");
        this.onAccept(decodeHandshake(FrameKind.ACCEPT, f.body));
        return;
      case FrameKind.REFUSE: {
        const { reason } = decodeHandshake(FrameKind.REFUSE, f.body);
        this.close(new ChannelNotViableError(`worker "${this.peer}" refused the pipe: ${reason}`));
        return;
      }
    }
  }

  /** Step 2 on the acceptor (or step 3 when negotiation fails). */
  private onHello(caps: Capabilities): void {
    this.peer = caps.name;
    this.remoteCaps = caps;
    let n: Negotiation;
    try {
      n = negotiate(this.opts.local, caps);
    } catch (e) {
      this.refuse(e as Error);
      return;
    }
    this.negotiation = n;
    const names = [...new Set(Object.values(n.choice))].sort();
    this.write(FrameKind.ACCEPT, { caps: this.opts.local, negotiation: n, channels: names }).catch(() => undefined);
    this.startChannels(names, caps);
  }

  /** Step 3: answer REFUSE, ignore the peer meanwhile, then close with `why`. */
  private refuse(why: Error): void {
    this.sm.transition("refusing");
    // NB: close only once REFUSE left (destroying the socket drops unsent bytes)
    void this.write(FrameKind.REFUSE, { reason: why.message })
      .catch(() => undefined)
      .then(() => this.close(why));
  }

  /** Step 2 on the connector. */
  private onAccept(a: Accept): void {
    this.remoteCaps = a.caps;
    const n = flipNegotiation(a.negotiation);
    checkChoice(this.opts.local, n);
    if (!Object.values(n.choice).every((c) => a.channels.includes(c)))
      throw new ProtocolError("bad pipe frame: ACCEPT's channel table lacks a chosen channel");
    this.negotiation = n;
    this.startChannels(a.channels, a.caps);
  }

  /** Steps 2 and 4: create the chosen channels, then open and flush what waited for them. */
  private startChannels(names: string[], remote: Capabilities): void {
    this.sm.transition("settingUp");
    this.channelNames = names;
    for (const [pair, name] of Object.entries(this.negotiation.choice))
      this.pairIndex.set(pair as DevicePairKey, names.indexOf(name));
    const made = names.map((name, index) => {
      const ctx = getChannel(name);
      const advert = remote.channels.find((c) => c.name === name);
      if (!ctx || !advert) return Promise.reject(new ChannelNotViableError(`channel "${name}" is not available here`));
      const setup: ChannelSetup = { unread: [], listener: null, closeCbs: [] };
      this.channelSetups[index] = setup;
      const bootstrap: ChannelBootstrap = {
        role: this.role,
        peerName: this.peer,
        local: this.opts.local,
        remote,
        remoteAdvert: advert,
        pairs: (Object.entries(this.negotiation.choice) as [DevicePairKey, string][])
          .filter(([, c]) => c === name)
          .map(([p]) => p),
        secret: this.opts.secret,
        host: this.opts.host,
        timeoutMs: this.opts.timeoutMs,
        send: (m) =>
          this.state === "closed" ? Promise.reject(this.closedError()) : this.write(FrameKind.SETUP, { c: index, m }),
        onMessage: (cb) => {
          setup.listener = cb;
          for (const m of setup.unread.splice(0)) cb(m);
        },
        onClose: (cb) => {
          if (this.state === "closed") cb(this.closeError);
          else setup.closeCbs.push(cb);
        },
      };
      return ctx.createChannel(bootstrap);
    });
    Promise.all(made).then(
      (chs) => {
        if (this.state === "closed") {
          for (const c of chs) c.close();
          return;
        }
        this.channels = chs;
        this.sm.transition("open");
        clearTimeout(this.openTimer);
        this.readyRes();
        try {
          for (const f of this.framesBeforeOpen.splice(0)) this.onMessageFrame(f);
        } catch (e) {
          this.close(e as Error);
          return;
        }
        for (const q of this.sendsBeforeOpen.splice(0)) this.sendNow(q.msg).then(q.resolve, q.reject);
      },
      (e: Error) => {
        for (const p of made)
          p.then(
            (c) => c.close(),
            () => undefined,
          );
        this.close(e);
      },
    );
  }

  private onMessageFrame(f: Frame): void {
    let bytes = 16 + 16 * f.entries.length + f.body.byteLength;
    if (f.entries.length === 0 && this.inFlight === 0) {
      this.deliver({ control: f.body, buffers: [], bytes });
      return;
    }
    const buffers: ChannelBuffer[] = [];
    const recvs: Promise<void>[] = [];
    const { allocate, allocateDevice } = this.opts;
    const alloc = (n: number, d: DeviceRef): ChannelBuffer =>
      (allocate ?? (d.type !== "cpu" && allocateDevice ? allocateDevice : defaultAllocate))(n, d);
    // NB: only while nothing earlier waits for delivery (see onDestination)
    const dest = allocate || this.inFlight > 0 ? null : this.destCb;
    for (const [i, e] of f.entries.entries()) {
      const ch = this.channels[e.channel];
      if (!ch) throw new ProtocolError(`bad pipe frame: buffer on unknown channel ${e.channel}`);
      let into: ChannelBuffer;
      try {
        // NB: a custom allocator (opts.allocate) wins over the channel's own buffer
        into =
          (allocate ? null : ch.adoptBuffer?.(e.descriptor, e.byteLength, e.target)) ??
          this.destinationOf(dest, f, i) ??
          alloc(e.byteLength, e.target);
      } catch (err) {
        throw new ProtocolError(
          `cannot receive a ${e.byteLength}-byte buffer on ${e.target.type}:${e.target.index}: ${(err as Error).message}`,
        );
      }
      buffers.push(into);
      bytes += e.byteLength + e.descriptor.byteLength;
      recvs.push(ch.recv(e.descriptor, into));
    }
    // NB: the control bytes may view the connection's chunk buffer; they are consumed at delivery
    const control = f.body;
    this.inFlight++;
    const all = Promise.all(recvs);
    this.deliveryChain = this.deliveryChain
      .then(() => all)
      .then(
        () => {
          this.inFlight--;
          this.deliver({ control, buffers, bytes });
        },
        (e: Error) => this.close(e),
      );
  }

  /** The hook's destination for entry i of `f`, checked: exactly the entry's length, on the CPU. */
  private destinationOf(hook: DestinationHook | null, f: Frame, i: number): ChannelBuffer | null {
    const b = hook?.(f.body, i, f.entries) ?? null;
    if (b === null) return null;
    const e = f.entries[i]!;
    if (b.kind !== "cpu" || e.target.type !== "cpu" || b.bytes.byteLength !== e.byteLength)
      throw new Error(`the destination hook gave a ${bufferLength(b)}-byte ${b.kind} buffer for ${e.byteLength} bytes`);
    return b;
  }

  private deliver(m: ReceivedMessage): void {
    if (this.state === "closed") return;
    try {
      this.msgCb?.(m);
    } catch (e) {
      debug(1, "pipe", `closing the pipe to ${this.peer}: ${(e as Error).message}`);
      this.close(e as Error);
    }
  }

  private closedError(cause?: Error): Error {
    const e = cause ?? this.closeError;
    if (e instanceof WorkerUnavailableError || e instanceof ChannelNotViableError || e instanceof PipeVersionError)
      return e;
    return new WorkerUnavailableError(`the pipe to "${this.peer}" is closed${e ? ` (${e.message})` : ""}`, this.peer);
  }

  /** Closes the pipe and its channels; idempotent. Pending sends reject; onClose gets `error` (null when none). */
  close(error?: Error): void {
    if (this.state === "closed") return;
    this.sm.transition("closed");
    this.closeError = error ?? null;
    clearTimeout(this.openTimer);
    const why = this.closedError();
    this.readyRej(why);
    for (const q of this.sendsBeforeOpen.splice(0)) q.reject(why);
    this.framesBeforeOpen.length = 0;
    for (const c of this.channels) c.close(why);
    for (const s of this.channelSetups) for (const cb of s?.closeCbs.splice(0) ?? []) cb(this.closeError);
    this.conn.close();
    for (const cb of this.closeCbs.splice(0)) cb(this.closeError);
  }
}
