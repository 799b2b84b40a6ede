/**
 * The shm channel: tensor bytes between two processes on one host through a
 * pair of shared-memory rings (native/src/channels/shm/: memfd segments
 * passed over an abstract unix socket, futex wake-ups; nothing is named in
 * /dev/shm, so nothing can outlive both processes).
 *
 * Setup (createChannel), over the pipe's control connection:
 *  1. The acceptor listens on a fresh abstract socket and sends { name }.
 *  2. The connector connects to it; each side checks that the socket's peer
 *     is the pid the peer announced in its Capabilities (so no third process
 *     can take its place) and maps the other's ring.
 * Buffers up to INLINE_MAX (16 KiB) ride inside their descriptor, on the control connection
 * (../native_common.ts); the data path below is for larger ones.
 * Transfers: send() writes [id, length, bytes] into our ring in call order and
 * resolves `done` once the bytes are in the ring; the descriptor carries the id
 * and length; recv() takes that record from the peer's ring into the
 * destination. Both sides copy concurrently (the ring is published per MiB).
 * Landing: buffers of 64 KiB to 64 MiB go instead, in one copy, into blocks of the
 * receiver's shared memory, which the receiving pipe takes as the received buffer.
 * The design (offers, budget TPRPC_SHM_LANDING_BYTES, taking idle blocks back) is
 * described once, in native/src/channels/shm/landing.h.
 * Direct reads: larger buffers (from TPRPC_SHM_CMA_BYTES, default 64 MiB + 1; 0: never) go as the
 * cma channel sends them (../cma: the receiver reads the sender's memory with process_vm_readv, on
 * two or more threads, and acks), where both sides may: each advertises its cma probe word, and
 * createChannel trades verdicts after the socket is up. One copy instead of the ring's two, and
 * none on the sender: 400 MB round trips 127-130 ms against the ring's 191-200 on a machine whose
 * memcpy moves 5.3 GB/s (docs/architecture.md, "shm under load"). Elsewhere (Yama ptrace_scope 1,
 * a seccomp profile) those buffers go through the ring.
 *
 * Domain: same boot id, network namespace (abstract sockets live there) and
 * pid namespace (the pid check), and the same SHM_PROTOCOL. Priority: CHANNEL_PRIORITY.shm for cpu-cpu.
 */
import { ChannelNotViableError, WorkerUnavailableError } from "../../errors/index.js";
import { CmaChannel, cmaChannelContext, exchangeCmaVerdicts } from "../cma/index.js";
import { nativeChannels, type NativeShmChannel } from "../../native/channels.js";
import { debug } from "../../util/index.js";
import { registerChannel } from "../index.js";
import {
  CHANNEL_PRIORITY,
  type Channel,
  type ChannelAdvert,
  type ChannelBootstrap,
  type ChannelContext,
  type HostIdentity,
} from "../interface.js";
import { channelError, DIRECT, Inbox, pipeClosedError, INLINE_MAX, sameHostDomain } from "../native_common.js";
import { TaggedChannel } from "./tagged_channel.js";

/**
 * Revision of what the two sides say over the channel's socket and in descriptors: 2 added landing
 * blocks (kMsgOffer/kMsgFree, LANDED) and shared storages (kMsgShare, SHARED); 3 added taking idle
 * landing blocks back (kMsgRevoke/kMsgRevoked); 4 frees landing blocks through the ring header's queue
 * (native/src/channels/shm/ring.h, FreeQueue) instead of kMsgFree; 5 added direct reads (a cma verdict
 * exchange at setup where both adverts carry a probe word, and DIRECT descriptors).
 */
export const SHM_PROTOCOL = 5;

/** Smallest buffer sent by direct read (TPRPC_SHM_CMA_BYTES; default just above the landing range; 0: never). */
function directMin(): number {
  const v = process.env.TPRPC_SHM_CMA_BYTES;
  const n = v === undefined || v === "" ? 64 * 2 ** 20 + 1 : Number(v);
  return Number.isFinite(n) && n > 0 ? Math.max(n, INLINE_MAX + 1) : Infinity;
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
    // NB: the protocol revision is part of the domain, so workers of different revisions pick another channel
    const domain = `${sameHostDomain(host, ["net", "pid"])}/shm-protocol-${SHM_PROTOCOL}`;
    // NB: the cma probe word, where direct reads are on and cma is viable here (createChannel trades verdicts)
    const info = directMin() === Infinity ? undefined : cmaChannelContext.probeInfo();
    return { name: this.name, priorities: { "cpu-cpu": CHANNEL_PRIORITY.shm }, domain, ...(info ? { info } : {}) };
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
    // Direct reads: both adverts carry a probe word. NB: our advert as the peer got it, not as advertise()
    // would make it now, so that both sides see the same two adverts and both trade verdicts or neither does
    let large: { channel: CmaChannel; min: number } | undefined;
    const ours = b.local.channels.find((c) => c.name === this.name)?.info;
    if (ours !== undefined && b.remoteAdvert.info !== undefined) {
      const v = await exchangeCmaVerdicts(b, inbox, b.remoteAdvert.info).catch((e: unknown) => {
        conn.close();
        throw e instanceof WorkerUnavailableError ? e : setupError(b, e);
      });
      if (v.ok) large = { channel: new CmaChannel(b, v.pid, inbox, DIRECT), min: directMin() };
      else debug(1, "channel", `shm channel to ${b.peerName}: no direct reads (${v.why}); large buffers use the ring`);
    }
    const channel = new TaggedChannel(
      "shm",
      conn,
      b.peerName,
      "moves host memory only; a cuda buffer needs cuda_ipc or ucx",
      large,
    );
    b.onClose((error) => channel.close(error ? pipeClosedError("shm", b.peerName, error) : undefined));
    debug(
      2,
      "channel",
      `shm channel to ${b.peerName} (pid ${peerPid}) up, rings of ${conn.ringBytes} bytes, direct reads ${large ? `from ${large.min} bytes` : "off"}`,
    );
    return channel;
  }
}

function setupError(b: ChannelBootstrap, e: unknown): Error {
  const why = e instanceof Error ? e.message : String(e);
  return new ChannelNotViableError(`shm channel to ${b.peerName} could not be set up: ${why}`);
}

export const shmChannelContext = new ShmChannelContext();
registerChannel(shmChannelContext);
