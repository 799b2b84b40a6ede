/**
 * The ucx channel: tensor bytes through UCX's UCP tag API (libucp loaded at run
 * time; native/src/channels/ucx.cc), the engine for InfiniBand/RoCE across
 * hosts. Which UCX transports carry the bytes is UCX's choice within
 * UCX_TLS (or TPRPC_UCX_TLS, which overrides it for tprpc only): on an IB host
 * the default picks the verbs transports (rc/dc/ud) on the active HCA ports
 * (UCX_NET_DEVICES=mlx5_0:1 pins one); here the tests run it over "shm" and
 * "tcp". GPU buffers would need a CUDA-enabled UCX (cuda_copy/cuda_ipc/gdr_copy);
 * this context moves host memory only (cpu-cpu).
 *
 * Setup (createChannel), over the pipe's control connection:
 *  1. Each side creates a UCX context and worker and sends { address }.
 *  2. Each side connects an endpoint to the peer's worker address.
 * Buffers up to INLINE_MAX (16 KiB) ride inside their descriptor, on the control connection
 * (../shm/pending.ts); the data path below is for larger ones.
 * Transfers: send() is a tagged send with tag = a per-direction counter (the
 * descriptor carries it and the length); recv() posts the matching tagged
 * receive into the destination. Large sends complete (`done`) only once the
 * peer's recv took the bytes (UCX's rendezvous).
 *
 * Domain: "ucx/<tls>" — two workers with the same transport setting can talk.
 * Priority: CHANNEL_PRIORITY.ucx for cpu-cpu (below shm/cma on one host).
 */
import { ChannelNotViableError } from "../../errors/index.js";
import { nativeChannels, type NativeUcxChannel } from "../../native/channels.js";
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
} from "../shm/pending.js";

const DESCRIPTOR_BYTES = 17; // RECORD, then the fields

function encode(id: number, length: number): Uint8Array {
  const d = new Uint8Array(DESCRIPTOR_BYTES);
  const v = new DataView(d.buffer);
  d[0] = RECORD;
  v.setFloat64(1, id, true);
  v.setFloat64(9, length, true);
  return d;
}

function decode(d: Uint8Array): { id: number; length: number } {
  if (d.byteLength !== DESCRIPTOR_BYTES)
    throw new ChannelNotViableError(
      `ucx channel: a descriptor of ${d.byteLength} bytes is not ours (expected ${DESCRIPTOR_BYTES})`,
    );
  const v = new DataView(d.buffer, d.byteOffset, d.byteLength);
  return { id: v.getFloat64(1, true), length: v.getFloat64(9, true) };
}

/** The UCX transports tprpc asks for: TPRPC_UCX_TLS, else UCX's own UCX_TLS (or its default). */
function tls(): string {
  return process.env.TPRPC_UCX_TLS ?? "";
}

class UcxChannel implements Channel {
  readonly name = "ucx";
  private readonly pending = new Pending();
  private nextId = 0;
  private isClosed = false;

  constructor(
    private readonly conn: NativeUcxChannel,
    private readonly peer: string,
  ) {}

  send(buffer: ChannelBuffer): ChannelSend {
    if (buffer.kind !== "cpu") {
      const done = Promise.reject(new ChannelNotViableError("ucx channel: this build moves host memory only"));
      return { descriptor: new Uint8Array(0), done };
    }
    if (buffer.bytes.byteLength <= INLINE_MAX)
      return { descriptor: inlineDescriptor(buffer.bytes), done: this.pending.track(Promise.resolve(), (e) => e) };
    const id = this.nextId++;
    const descriptor = encode(id, buffer.bytes.byteLength);
    const done = this.pending.track(this.conn.send(id, buffer.bytes), (e) => channelError("ucx", this.peer, e));
    return { descriptor, done };
  }

  recv(descriptor: Uint8Array, into: ChannelBuffer): Promise<void> {
    if (into.kind !== "cpu")
      return Promise.reject(new ChannelNotViableError("ucx channel: receives into host memory only"));
    try {
      if (takeInline(this.name, descriptor, into.bytes)) return this.pending.track(Promise.resolve(), (e) => e);
    } catch (e) {
      return Promise.reject(e);
    }
    let d: { id: number; length: number };
    try {
      d = decode(descriptor);
    } catch (e) {
      return Promise.reject(e);
    }
    if (d.length !== into.bytes.byteLength)
      return Promise.reject(
        new ChannelNotViableError(
          `ucx channel: transfer ${d.id} has ${d.length} bytes but the destination has ${into.bytes.byteLength}`,
        ),
      );
    return this.pending.track(this.conn.recv(d.id, into.bytes), (e) => channelError("ucx", this.peer, e));
  }

  close(error?: Error): void {
    if (this.isClosed) return;
    this.isClosed = true;
    this.pending.failAll(error ?? closedError("ucx", this.peer));
    this.conn.close();
    debug(2, "channel", `ucx channel to ${this.peer} closed`);
  }

  get closed(): boolean {
    return this.isClosed;
  }
}

export class UcxChannelContext implements ChannelContext {
  readonly name = "ucx";
  private reason: string | undefined | null = null;

  isViable(): boolean {
    return this.whyNotViable() === undefined;
  }

  whyNotViable(): string | undefined {
    if (this.reason !== null) return this.reason;
    const native = nativeChannels();
    if (!native) return (this.reason = "ucx channel: the native addon is not loaded (npm run build:native)");
    const info = native.ucxInfo();
    return (this.reason = info.viable
      ? undefined
      : (info.reason ?? "ucx channel: libucp not usable") + " (Debian: apt install libucx0)");
  }

  advertise(): ChannelAdvert | null {
    if (!this.isViable()) return null;
    return {
      name: this.name,
      priorities: { "cpu-cpu": CHANNEL_PRIORITY.ucx },
      domain: `ucx/${tls() || process.env.UCX_TLS || "default"}`,
    };
  }

  async createChannel(b: ChannelBootstrap): Promise<Channel> {
    const native = nativeChannels();
    if (!native || !this.isViable()) throw new ChannelNotViableError(this.whyNotViable() ?? "ucx channel: not viable");
    const inbox = new Inbox(b);
    const conn = await native.ucxCreate(tls() || undefined).catch((e: unknown) => {
      throw new ChannelNotViableError(`ucx channel: ${e instanceof Error ? e.message : String(e)}`);
    });
    try {
      await b.send({ address: conn.address });
      const msg = await inbox.next(
        b.timeoutMs,
        () => new ChannelNotViableError(`ucx channel: ${b.peerName} sent no worker address within ${b.timeoutMs} ms`),
      );
      const address =
        typeof msg === "object" && msg !== null && !Array.isArray(msg)
          ? (msg as { address?: unknown }).address
          : undefined;
      if (!(address instanceof Uint8Array))
        throw new ChannelNotViableError(`ucx channel: ${b.peerName} sent a malformed setup message`);
      await conn.connect(address);
    } catch (e) {
      conn.close();
      throw channelError("ucx", b.peerName, e);
    }
    const channel = new UcxChannel(conn, b.peerName);
    b.onClose((error) => channel.close(error ? pipeClosedError("ucx", b.peerName, error) : undefined));
    debug(
      2,
      "channel",
      `ucx channel to ${b.peerName} up (transports: ${tls() || process.env.UCX_TLS || "UCX default"})`,
    );
    return channel;
  }
}

export const ucxChannelContext = new UcxChannelContext();
registerChannel(ucxChannelContext);
