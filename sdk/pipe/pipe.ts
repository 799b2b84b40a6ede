/**
 * A pipe: the one link between two workers for messages from the side that
 * opened it. Control bytes (the rpc layer's header and payload) go over an
 * authenticated transport connection; each tensor buffer goes through the
 * channel negotiated for its (source device, target device) pair.
 *
 * Opening, step by step (./frame.ts has the byte layout):
 * 1. The connector has an authenticated connection (sdk/transport) and sends
 *    HELLO with its Capabilities (./capabilities.ts).
 * 2. The acceptor runs `negotiate()` (./negotiate.ts) and answers ACCEPT with
 *    its Capabilities, the choice per device pair and the channel table (the
 *    chosen names, in index order) — or REFUSE with a reason.
 * 3. Both sides create the chosen channels at once; their setup messages
 *    travel as SETUP frames tagged with the channel index. The pipe is ready
 *    when every channel is; sends made before are queued in order, and
 *    MESSAGE frames that arrive before are held.
 * Sending a message: for each buffer, `channel.send` (in order), then one
 * MESSAGE frame [head + entries, descriptors, control] on the connection;
 * the send resolves once the frame was written and every buffer's `done`.
 * Receiving: for each entry, allocate the destination on its target device
 * and `channel.recv` it (in frame order, so each channel sees its sends'
 * order); messages are delivered in frame order once all their buffers are in.
 * A broken connection, a ProtocolError or a failed channel closes the pipe;
 * everything pending rejects with WorkerUnavailableError naming the peer.
 */
import { ChannelNotViableError, ProtocolError, WorkerUnavailableError } from "../errors/index.js";
import { debug } from "../util/index.js";
import { getChannel } from "../channel/index.js";
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
import { type Frame, FrameCutter, FrameKind, encodeFrameHead } from "./frame.js";
import { type Negotiation, checkChoice, flipNegotiation, negotiate } from "./negotiate.js";

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
  // full mark-compact runs its finalizer, which made every few 4 MB messages cost one (measured: 3–4 ms
  // of a 7 ms round trip). Larger buffers come from the pool: warm (huge pages, no 1.6 GB/s faulting)
  // where V8's would be a fresh mapping each time, and the GC is cheap beside the transfer.
  // An ArrayBuffer of its own at offset 0 lets tensors view it.
  const ab = native && n > POOL_MIN_BYTES ? native.alloc(n, { zero: false }) : Buffer.allocUnsafeSlow(n).buffer;
  return { kind: "cpu", bytes: new Uint8Array(ab, 0, n) };
}

const json = {
  encode(v: unknown): Buffer {
    return Buffer.from(
      JSON.stringify(v, (_k, x: unknown) =>
        x instanceof Uint8Array ? { $b: Buffer.from(x.buffer, x.byteOffset, x.byteLength).toString("base64") } : x,
      ),
    );
  },
  decode(b: Uint8Array): unknown {
    try {
      return JSON.parse(Buffer.from(b.buffer, b.byteOffset, b.byteLength).toString("utf8"), (_k, x: unknown) =>
        x && typeof x === "object" && typeof (x as { $b?: unknown }).$b === "string" && Object.keys(x).length === 1
          ? new Uint8Array(Buffer.from((x as { $b: string }).$b, "base64"))
          : x,
      );
    } catch (e) {
      throw new ProtocolError(`bad pipe frame: body is not JSON (${(e as Error).message})`);
    }
  },
};

interface Queued {
  msg: PipeMessage;
  resolve: () => void;
  reject: (e: Error) => void;
}

interface Boot {
  queue: SetupValue[];
  cb: ((m: SetupValue) => void) | null;
  closeCbs: ((e: Error | null) => void)[];
}

export class Pipe {
  private readonly cutter: FrameCutter;
  private remoteCaps: Capabilities | null = null;
  private negotiation: Negotiation = { choice: {}, missing: {} };
  private channelNames: string[] = [];
  private channels: Channel[] = [];
  private readonly pairIndex = new Map<DevicePairKey, number>();
  private boots: Boot[] = [];
  private isReady = false;
  private refused = false;
  private readonly sendQueue: Queued[] = [];
  private readonly held: Frame[] = [];
  private msgCb: ((m: ReceivedMessage) => void) | null = null;
  private readonly closeCbs: ((e: Error | null) => void)[] = [];
  private deliveryChain: Promise<void> = Promise.resolve();
  private inFlight = 0;
  private closeError: Error | null = null;
  closed = false;
  readonly ready: Promise<void>;
  private readyRes!: () => void;
  private readyRej!: (e: Error) => void;
  private timer: NodeJS.Timeout | null;

  private constructor(
    private readonly conn: TransportConnection,
    readonly role: "connector" | "acceptor",
    private peer: string,
    private readonly opts: PipeOptions,
  ) {
    this.ready = new Promise((res, rej) => ((this.readyRes = res), (this.readyRej = rej)));
    this.ready.catch(() => undefined);
    this.timer = setTimeout(
      () =>
        this.close(
          new WorkerUnavailableError(`the pipe to "${this.peer}" did not open within ${opts.timeoutMs} ms`, this.peer),
        ),
      opts.timeoutMs,
    );
    this.cutter = new FrameCutter((f) => this.onFrame(f));
    conn.onData((chunk) => {
      if (this.closed) return;
      try {
        this.cutter.push(chunk);
      } catch (e) {
        debug(1, "pipe", `closing the pipe to ${this.peer}: ${(e as Error).message}`);
        this.close(e as Error);
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
    const p = new Pipe(conn, "connector", peer, opts);
    p.write(FrameKind.HELLO, opts.local).catch(() => undefined);
    await p.ready;
    return p;
  }

  /** Serves a connection a peer opened; messages flow once `ready` resolves. */
  static accept(conn: TransportConnection, opts: PipeOptions): Pipe {
    return new Pipe(conn, "acceptor", conn.remote, opts);
  }

  get peerName(): string {
    return this.peer;
  }

  /** Receives every message, in order. One listener. */
  onMessage(cb: (m: ReceivedMessage) => void): void {
    this.msgCb = cb;
  }

  /** Called once when the pipe closes: null after our own close(), else why. */
  onClose(cb: (e: Error | null) => void): void {
    if (this.closed) cb(this.closeError);
    else this.closeCbs.push(cb);
  }

  info(): PipeInfo {
    return {
      peer: this.peer,
      transport: /^([a-z0-9_]+):/.exec(this.conn.remote)?.[1] ?? "tcp",
      remote: this.conn.remote,
      role: this.role,
      channels: { ...this.negotiation.choice },
      missing: { ...this.negotiation.missing },
      offered: {
        local: this.opts.local.channels.map((c) => c.name),
        remote: this.remoteCaps?.channels.map((c) => c.name) ?? [],
      },
    };
  }

  /** Sends one message (see the file comment); rejects if the pipe closes first or no channel serves a buffer's pair. */
  send(msg: PipeMessage): Promise<void> {
    if (this.closed) return Promise.reject(this.closedError());
    if (!this.isReady) return new Promise((resolve, reject) => this.sendQueue.push({ msg, resolve, reject }));
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
        throw this.closed ? this.closedError(e) : e;
      },
    );
  }

  private write(kind: FrameKind, value: unknown): Promise<void> {
    const body = json.encode(value);
    return this.conn.write([encodeFrameHead(kind, body.byteLength, []), body]);
  }

  private onFrame(f: Frame): void {
    if (this.refused) return;
    switch (f.kind) {
      case FrameKind.MESSAGE:
        if (!this.isReady) this.held.push(f);
        else this.onMessageFrame(f);
        return;
      case FrameKind.SETUP: {
        const m = json.decode(f.body) as { c?: unknown; m?: unknown };
        const boot = typeof m?.c === "number" ? this.boots[m.c] : undefined;
        if (!boot) throw new ProtocolError(`bad pipe frame: setup message for unknown channel ${String(m?.c)}`);
        if (boot.cb) boot.cb(m.m as SetupValue);
        else boot.queue.push(m.m as SetupValue);
        return;
      }
      case FrameKind.HELLO:
        if (this.role !== "acceptor" || this.remoteCaps) throw new ProtocolError("bad pipe frame: unexpected HELLO");
        this.onHello(json.decode(f.body) as Capabilities);
        return;
      case FrameKind.ACCEPT: {
        if (this.role !== "connector" || this.remoteCaps) throw new ProtocolError("bad pipe frame: unexpected ACCEPT");
        const a = json.decode(f.body) as { caps: Capabilities; negotiation: Negotiation; channels: string[] };
        this.onAccept(a);
        return;
      }
      case FrameKind.REFUSE: {
        const r = json.decode(f.body) as { reason?: unknown };
        this.close(new ChannelNotViableError(`worker "${this.peer}" refused the pipe: ${String(r?.reason)}`));
        return;
      }
    }
  }

  private checkCaps(c: Capabilities): void {
    const ok =
      c !== null &&
      typeof c === "object" &&
      typeof c.name === "string" &&
      typeof c.version === "number" &&
      Array.isArray(c.channels) &&
      c.channels.every(
        (x) =>
          x &&
          typeof x.name === "string" &&
          typeof x.domain === "string" &&
          x.priorities &&
          typeof x.priorities === "object",
      ) &&
      c.host !== null &&
      typeof c.host === "object" &&
      c.devices !== null &&
      typeof c.devices === "object";
    if (!ok) throw new ProtocolError("bad pipe frame: malformed capabilities");
  }

  private onHello(caps: Capabilities): void {
    this.checkCaps(caps);
    this.peer = caps.name;
    this.remoteCaps = caps;
    let n: Negotiation;
    try {
      n = negotiate(this.opts.local, caps);
    } catch (e) {
      // NB: close only once REFUSE left (destroying the socket drops unsent bytes); ignore the peer meanwhile
      this.refused = true;
      void this.write(FrameKind.REFUSE, { reason: (e as Error).message })
        .catch(() => undefined)
        .then(() => this.close(e as Error));
      return;
    }
    this.negotiation = n;
    const names = [...new Set(Object.values(n.choice))].sort();
    this.write(FrameKind.ACCEPT, { caps: this.opts.local, negotiation: n, channels: names }).catch(() => undefined);
    this.startChannels(names);
  }

  private onAccept(a: { caps: Capabilities; negotiation: Negotiation; channels: string[] }): void {
    this.checkCaps(a?.caps);
    if (!a.negotiation || typeof a.negotiation.choice !== "object" || !Array.isArray(a.channels))
      throw new ProtocolError("bad pipe frame: malformed ACCEPT");
    this.remoteCaps = a.caps;
    const n = flipNegotiation(a.negotiation);
    checkChoice(this.opts.local, n);
    if (!Object.values(n.choice).every((c) => a.channels.includes(c)))
      throw new ProtocolError("bad pipe frame: ACCEPT's channel table lacks a chosen channel");
    this.negotiation = n;
    this.startChannels(a.channels);
  }

  /** Step 3: create the chosen channels, then flush what waited for them. */
  private startChannels(names: string[]): void {
    this.channelNames = names;
    for (const [pair, name] of Object.entries(this.negotiation.choice))
      this.pairIndex.set(pair as DevicePairKey, names.indexOf(name));
    const remote = this.remoteCaps!;
    const made = names.map((name, index) => {
      const ctx = getChannel(name);
      const advert = remote.channels.find((c) => c.name === name);
      if (!ctx || !advert) return Promise.reject(new ChannelNotViableError(`channel "${name}" is not available here`));
      const boot: Boot = { queue: [], cb: null, closeCbs: [] };
      this.boots[index] = boot;
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
        send: (m) => (this.closed ? Promise.reject(this.closedError()) : this.write(FrameKind.SETUP, { c: index, m })),
        onMessage: (cb) => {
          boot.cb = cb;
          for (const m of boot.queue.splice(0)) cb(m);
        },
        onClose: (cb) => {
          if (this.closed) cb(this.closeError);
          else boot.closeCbs.push(cb);
        },
      };
      return ctx.createChannel(bootstrap);
    });
    Promise.all(made).then(
      (chs) => {
        if (this.closed) {
          for (const c of chs) c.close();
          return;
        }
        this.channels = chs;
        this.isReady = true;
        if (this.timer) clearTimeout(this.timer);
        this.timer = null;
        this.readyRes();
        try {
          for (const f of this.held.splice(0)) this.onMessageFrame(f);
        } catch (e) {
          this.close(e as Error);
          return;
        }
        for (const q of this.sendQueue.splice(0)) this.sendNow(q.msg).then(q.resolve, q.reject);
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
    const alloc = this.opts.allocate ?? defaultAllocate;
    for (const e of f.entries) {
      const ch = this.channels[e.channel];
      if (!ch) throw new ProtocolError(`bad pipe frame: buffer on unknown channel ${e.channel}`);
      let into: ChannelBuffer;
      try {
        // NB: a custom allocator (opts.allocate) wins over the channel's own buffer
        into =
          (this.opts.allocate ? null : ch.adoptBuffer?.(e.descriptor, e.byteLength, e.target)) ??
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

  private deliver(m: ReceivedMessage): void {
    if (this.closed) return;
    try {
      this.msgCb?.(m);
    } catch (e) {
      debug(1, "pipe", `closing the pipe to ${this.peer}: ${(e as Error).message}`);
      this.close(e as Error);
    }
  }

  private closedError(cause?: Error): Error {
    const e = cause ?? this.closeError;
    if (e instanceof WorkerUnavailableError || e instanceof ChannelNotViableError) return e;
    return new WorkerUnavailableError(`the pipe to "${this.peer}" is closed${e ? ` (${e.message})` : ""}`, this.peer);
  }

  /** Closes the pipe and its channels; idempotent. Pending sends reject; onClose gets `error` (null when none). */
  close(error?: Error): void {
    if (this.closed) return;
    this.closed = true;
    this.closeError = error ?? null;
    if (this.timer) clearTimeout(this.timer);
    this.timer = null;
    const why = this.closedError();
    this.readyRej(why);
    for (const q of this.sendQueue.splice(0)) q.reject(why);
    this.held.length = 0;
    for (const c of this.channels) c.close(why);
    for (const b of this.boots) for (const cb of b?.closeCbs.splice(0) ?? []) cb(this.closeError);
    this.conn.close();
    for (const cb of this.closeCbs.splice(0)) cb(this.closeError);
  }
}
