/**
 * The TCP channel: always viable, between any two workers that can reach
 * each other. Small buffers travel inside their descriptor (so on the pipe's
 * control connection, in the same write as the message); larger ones on
 * lanes (./lane.ts): extra sockets per pipe, dialed by the receiver so the
 * kernel copies straight into the destination, and striped across all lanes
 * for large buffers.
 *
 * Setup (both sides at once, over the bootstrap's setup messages):
 * 1. Each side listens on an ephemeral port and sends
 *    { host, port, lanes, stripeMin }: how many lanes it sends on, and from
 *    which size it splits a buffer across them.
 * 2. On the peer's message, each side dials that many lanes to the peer's
 *    port (its receive lanes) and accepts as many as it announced (its send
 *    lanes). Once both sets are up, the listener closes.
 * Transfers (per direction, in send order — the pipe calls recv in that order):
 * - n ≤ INLINE_MAX bytes: the descriptor is the bytes themselves.
 * - larger: the descriptor is the transfer's sequence number (u32); a buffer
 *   of at least stripeMin bytes is cut into `lanes` page-aligned parts, part
 *   i on lane i; a smaller one goes whole on lane (seq mod lanes).
 * The receiver tells the two apart by length: an inline descriptor is exactly
 * as long as the destination, a sequence number is 4 bytes and lane transfers
 * are longer than INLINE_MAX.
 *
 * Env: TPRPC_TCP_LANES (default 2), TPRPC_TCP_STRIPE_MIN (bytes, default 8 MiB).
 */
import net from "node:net";
import { ChannelNotViableError, ProtocolError, WorkerUnavailableError } from "../../errors/index.js";
import { debug } from "../../util/index.js";
import { registerChannel } from "../index.js";
import {
  CHANNEL_PRIORITY,
  type Channel,
  type ChannelBootstrap,
  type ChannelBuffer,
  type ChannelContext,
  type ChannelSend,
  type SetupValue,
} from "../interface.js";
import { RecvLane, SendLane, acceptLane } from "./lane.js";

/** Buffers up to this size ride inside their descriptor. */
export const INLINE_MAX = 64 * 1024;
const PAGE = 4096;

function envInt(name: string, dflt: number, min: number, max: number): number {
  const v = process.env[name];
  const n = v === undefined || v === "" ? dflt : Number(v);
  return Number.isInteger(n) && n >= min && n <= max ? n : dflt;
}

interface Part {
  lane: number;
  start: number;
  end: number;
}

/** How a lane transfer of `n` bytes is cut: the same function on both sides. */
export function splitTransfer(n: number, seq: number, lanes: number, stripeMin: number): Part[] {
  if (lanes <= 1 || n < stripeMin) return [{ lane: seq % lanes, start: 0, end: n }];
  const part = Math.ceil(n / lanes / PAGE) * PAGE;
  const out: Part[] = [];
  for (let i = 0; i < lanes && i * part < n; i++)
    out.push({ lane: i, start: i * part, end: Math.min(n, (i + 1) * part) });
  return out;
}

interface PeerPlan {
  host: string;
  port: number;
  lanes: number;
  stripeMin: number;
}

function parsePlan(m: SetupValue, peer: string): PeerPlan {
  const o = m as Record<string, unknown> | null;
  const ok =
    o !== null &&
    typeof o === "object" &&
    typeof o.host === "string" &&
    Number.isInteger(o.port) &&
    Number.isInteger(o.lanes) &&
    (o.lanes as number) >= 1 &&
    (o.lanes as number) <= 64 &&
    Number.isInteger(o.stripeMin) &&
    (o.stripeMin as number) > INLINE_MAX;
  if (!ok) throw new ProtocolError(`the tcp channel of "${peer}" sent a malformed setup message`);
  return o as unknown as PeerPlan;
}

class TcpChannel implements Channel {
  readonly name = "tcp";
  closed = false;
  private sendSeq = 0;
  private recvSeq = 0;
  private error: Error | null = null;

  constructor(
    private readonly peer: string,
    private readonly send_: SendLane[],
    private readonly recv_: RecvLane[],
    private readonly stripeMin: number,
    private readonly peerStripeMin: number,
  ) {
    for (const l of [...send_, ...recv_]) l.onFailure((e) => this.close(e));
  }

  send(buffer: ChannelBuffer): ChannelSend {
    if (buffer.kind !== "cpu")
      return failed(new ChannelNotViableError("the tcp channel moves host memory only; copy the tensor to the CPU"));
    const bytes = buffer.bytes;
    if (bytes.byteLength <= INLINE_MAX) return { descriptor: bytes, done: Promise.resolve() };
    if (this.closed) return failed(this.closedError());
    const seq = this.sendSeq++;
    const parts = splitTransfer(bytes.byteLength, seq, this.send_.length, this.stripeMin);
    // NB: start the lane writes after the current tick, so the pipe's control frame (written right
    // after this returns) reaches the peer first and it has posted the destination when the bytes
    // arrive: they then land there directly instead of stalling the lane in a scratch buffer.
    const done = new Promise<void>((resolve) => process.nextTick(resolve)).then(() =>
      Promise.all(parts.map((p) => this.send_[p.lane]!.write(bytes.subarray(p.start, p.end)))).then(() => undefined),
    );
    done.catch(() => undefined);
    const descriptor = new Uint8Array(4);
    new DataView(descriptor.buffer).setUint32(0, seq >>> 0, true);
    return { descriptor, done };
  }

  recv(descriptor: Uint8Array, into: ChannelBuffer): Promise<void> {
    if (into.kind !== "cpu")
      return Promise.reject(new ChannelNotViableError("the tcp channel receives into host memory only"));
    const dest = into.bytes;
    if (descriptor.byteLength === dest.byteLength && dest.byteLength <= INLINE_MAX) {
      dest.set(descriptor);
      return Promise.resolve();
    }
    if (this.closed) return Promise.reject(this.closedError());
    if (descriptor.byteLength !== 4 || dest.byteLength <= INLINE_MAX)
      return this.fatal(`a descriptor of ${descriptor.byteLength} bytes for ${dest.byteLength} bytes`);
    const seq = new DataView(descriptor.buffer, descriptor.byteOffset, 4).getUint32(0, true);
    if (seq !== this.recvSeq >>> 0) return this.fatal(`transfer ${seq} where ${this.recvSeq} was next`);
    this.recvSeq++;
    const parts = splitTransfer(dest.byteLength, seq, this.recv_.length, this.peerStripeMin);
    return Promise.all(parts.map((p) => this.recv_[p.lane]!.post(dest.subarray(p.start, p.end)))).then(() => undefined);
  }

  private fatal(what: string): Promise<never> {
    const e = new ProtocolError(`tcp channel from "${this.peer}" out of step: ${what}`);
    this.close(e);
    return Promise.reject(e);
  }

  private closedError(): Error {
    return this.error ?? new WorkerUnavailableError(`the tcp channel to "${this.peer}" is closed`, this.peer);
  }

  close(error?: Error): void {
    if (this.closed) return;
    this.closed = true;
    this.error = error ?? null;
    if (error) debug(2, "tcp-channel", `closing the channel to ${this.peer}: ${error.message}`);
    for (const l of this.recv_) l.close();
    for (const l of this.send_) l.close();
  }
}

function failed(e: Error): ChannelSend {
  const done = Promise.reject(e);
  done.catch(() => undefined);
  return { descriptor: new Uint8Array(0), done };
}

/** Where our per-channel listener binds: the advertised address when it is a loopback one, else every interface. */
function bindHostFor(host: string): string {
  return /^(127\.|localhost$|::1$)/.test(host) ? host : "0.0.0.0";
}

async function createTcpChannel(boot: ChannelBootstrap): Promise<Channel> {
  const peer = boot.peerName;
  const lanes = envInt("TPRPC_TCP_LANES", 2, 1, 64);
  const stripeMin = envInt("TPRPC_TCP_STRIPE_MIN", 8 * 2 ** 20, INLINE_MAX + 1, 2 ** 40);
  const server = net.createServer({ pauseOnConnect: true });
  const accepted: net.Socket[] = [];
  const recv: RecvLane[] = [];
  const cleanup = () => {
    server.close();
    for (const s of accepted) s.destroy();
    for (const l of recv) l.close();
  };
  await new Promise<void>((resolve, reject) => {
    server.once("error", reject);
    server.listen(0, bindHostFor(boot.host), () => resolve());
  });
  const port = (server.address() as net.AddressInfo).port;
  let timer: NodeJS.Timeout | undefined;
  try {
    const sendLanes = new Promise<SendLane[]>((resolve, reject) => {
      const lanesByIndex = new Map<number, SendLane>();
      server.on("connection", (sock) => {
        accepted.push(sock);
        acceptLane(sock, boot.secret, boot.timeoutMs).then(
          ({ sock: lane, index }) => {
            if (index >= lanes || lanesByIndex.has(index)) return lane.destroy();
            lanesByIndex.set(index, new SendLane(lane, peer));
            if (lanesByIndex.size === lanes) resolve([...Array(lanes).keys()].map((i) => lanesByIndex.get(i)!));
          },
          (e: Error) => debug(1, "tcp-channel", `refused a lane from ${sock.remoteAddress}: ${e.message}`),
        );
      });
      server.on("error", reject);
    });
    const plan = new Promise<PeerPlan>((resolve, reject) =>
      boot.onMessage((m) => {
        try {
          resolve(parsePlan(m, peer));
        } catch (e) {
          reject(e as Error);
        }
      }),
    );
    const closed = new Promise<never>((_, reject) =>
      boot.onClose((e) =>
        reject(
          new WorkerUnavailableError(
            `the pipe to "${peer}" closed while the tcp channel was set up${e ? `: ${e.message}` : ""}`,
            peer,
          ),
        ),
      ),
    );
    const timeout = new Promise<never>((_, reject) => {
      timer = setTimeout(
        () =>
          reject(
            new ChannelNotViableError(
              `the tcp channel's lanes to "${peer}" were not up within ${boot.timeoutMs} ms; ` +
                "check that the workers can open TCP connections to each other's ephemeral ports",
            ),
          ),
        boot.timeoutMs,
      );
    });
    for (const p of [plan, closed, timeout, sendLanes]) p.catch(() => undefined);
    await boot.send({ host: boot.host, port, lanes, stripeMin });
    const theirs = await Promise.race([plan, closed, timeout]);
    for (let i = 0; i < theirs.lanes; i++) recv.push(new RecvLane(theirs.host, theirs.port, i, boot.secret, peer));
    const [sendL] = await Promise.race([Promise.all([sendLanes, ...recv.map((l) => l.ready)]), closed, timeout]);
    server.close();
    const ch = new TcpChannel(peer, sendL as SendLane[], recv, stripeMin, theirs.stripeMin);
    boot.onClose((e) => ch.close(e ?? undefined));
    return ch;
  } catch (e) {
    cleanup();
    throw e;
  } finally {
    clearTimeout(timer);
  }
}

export const tcpChannelContext: ChannelContext = {
  name: "tcp",
  isViable: () => true,
  advertise: () => ({ name: "tcp", priorities: { "cpu-cpu": CHANNEL_PRIORITY.tcp }, domain: "tcp" }),
  createChannel: createTcpChannel,
};

registerChannel(tcpChannelContext);
