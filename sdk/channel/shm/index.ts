/**
 * The shm channel: tensor bytes between two processes on one host through a
 * pair of shared-memory rings (native/src/channels/shm.cc: memfd segments
 * passed over an abstract unix socket, futex wake-ups; nothing is named in
 * /dev/shm, so nothing can outlive both processes).
 *
 * Setup (createChannel), over the pipe's control connection:
 *  1. The acceptor listens on a fresh abstract socket and sends { name }.
 *  2. The connector connects to it; each side checks that the socket's peer
 *     is the pid the peer announced in its Capabilities (so no third process
 *     can take its place) and maps the other's ring.
 * Buffers up to INLINE_MAX (16 KiB) ride inside their descriptor, on the control connection
 * (../shm/pending.ts); the data path below is for larger ones.
 * Transfers: send() writes [id, length, bytes] into our ring in call order and
 * resolves `done` once the bytes are in the ring; the descriptor carries the id
 * and length; recv() takes that record from the peer's ring into the
 * destination. Both sides copy concurrently (the ring is published per MiB).
 *
 * Domain: same boot id, network namespace (abstract sockets live there) and
 * pid namespace (the pid check). Priority: CHANNEL_PRIORITY.shm for cpu-cpu.
 */
import { ChannelNotViableError } from "../../errors/index.js";
import { nativeChannels, type NativeShmChannel } from "../../native/channels.js";
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
} from "./pending.js";

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
      `shm channel: a descriptor of ${d.byteLength} bytes is not ours (expected ${DESCRIPTOR_BYTES})`,
    );
  const v = new DataView(d.buffer, d.byteOffset, d.byteLength);
  return { id: v.getFloat64(1, true), length: v.getFloat64(9, true) };
}

class ShmChannel implements Channel {
  readonly name = "shm";
  private readonly pending = new Pending();
  private nextId = 0;
  private isClosed = false;

  constructor(
    private readonly conn: NativeShmChannel,
    private readonly peer: string,
  ) {}

  send(buffer: ChannelBuffer): ChannelSend {
    if (buffer.kind !== "cpu") {
      const done = Promise.reject(
        new ChannelNotViableError("shm channel: moves host memory only; a cuda buffer needs cuda_ipc or ucx"),
      );
      return { descriptor: new Uint8Array(0), done };
    }
    if (buffer.bytes.byteLength <= INLINE_MAX)
      return { descriptor: inlineDescriptor(buffer.bytes), done: this.pending.track(Promise.resolve(), (e) => e) };
    const id = this.nextId++;
    const descriptor = encode(id, buffer.bytes.byteLength);
    const done = this.pending.track(this.conn.send(id, buffer.bytes), (e) => channelError("shm", this.peer, e));
    return { descriptor, done };
  }

  recv(descriptor: Uint8Array, into: ChannelBuffer): Promise<void> {
    if (into.kind !== "cpu")
      return Promise.reject(new ChannelNotViableError("shm channel: receives into host memory only"));
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
          `shm channel: transfer ${d.id} has ${d.length} bytes but the destination has ${into.bytes.byteLength}`,
        ),
      );
    return this.pending.track(this.conn.recv(d.id, into.bytes), (e) => channelError("shm", this.peer, e));
  }

  close(error?: Error): void {
    if (this.isClosed) return;
    this.isClosed = true;
    this.pending.failAll(error ?? closedError("shm", this.peer));
    this.conn.close();
    debug(2, "channel", `shm channel to ${this.peer} closed`);
  }

  get closed(): boolean {
    return this.isClosed;
  }
}

export class ShmChannelContext implements ChannelContext {
  readonly name = "shm";

  isViable(): boolean {
    return this.whyNotViable() === undefined;
  }

  whyNotViable(): string | undefined {
    if (process.platform !== "linux") return "shm channel: Linux only (memfd, abstract unix sockets, futexes)";
    if (!nativeChannels()) return "shm channel: the native addon is not loaded (npm run build:native)";
    return undefined;
  }

  advertise(host: HostIdentity): ChannelAdvert | null {
    const domain = sameHostDomain(host, ["net", "pid"]);
    return { name: this.name, priorities: { "cpu-cpu": CHANNEL_PRIORITY.shm }, domain };
  }

  async createChannel(b: ChannelBootstrap): Promise<Channel> {
    const native = nativeChannels();
    if (!native) throw new ChannelNotViableError(this.whyNotViable() ?? "shm channel: not viable");
    const peerPid = b.remote.host.pid;
    const inbox = new Inbox(b);
    let conn: NativeShmChannel;
    if (b.role === "acceptor") {
      const listener = native.shmListen();
      try {
        await b.send({ name: listener.name });
      } catch (e) {
        listener.close();
        throw channelError("shm", b.peerName, e);
      }
      conn = await listener.accept(peerPid, b.timeoutMs).catch((e: unknown) => {
        throw setupError(b, e);
      });
    } else {
      const msg = await inbox.next(b.timeoutMs, () =>
        setupError(b, new Error(`no socket name within ${b.timeoutMs} ms`)),
      );
      const name =
        typeof msg === "object" && msg !== null && !Array.isArray(msg) ? (msg as { name?: unknown }).name : undefined;
      if (typeof name !== "string")
        throw new ChannelNotViableError(`shm channel: ${b.peerName} sent a malformed setup message`);
      conn = await native.shmConnect(name, peerPid, b.timeoutMs).catch((e: unknown) => {
        throw setupError(b, e);
      });
    }
    const channel = new ShmChannel(conn, b.peerName);
    b.onClose((error) => channel.close(error ? pipeClosedError("shm", b.peerName, error) : undefined));
    debug(2, "channel", `shm channel to ${b.peerName} (pid ${peerPid}) up, rings of ${conn.ringBytes} bytes`);
    return channel;
  }
}

function setupError(b: ChannelBootstrap, e: unknown): Error {
  const why = e instanceof Error ? e.message : String(e);
  return new ChannelNotViableError(`shm channel to ${b.peerName} could not be set up: ${why}`);
}

export const shmChannelContext = new ShmChannelContext();
registerChannel(shmChannelContext);
