/**
 * The ucx channel: tensor bytes through UCX's UCP tag API (libucp loaded at run
 * time; native/src/channels/ucx/), the engine for InfiniBand/RoCE across
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
 * (../native_common.ts); the data path below is for larger ones.
 * Transfers: send() is a tagged send with tag = a per-direction counter (the
 * descriptor carries it and the length); recv() posts the matching tagged
 * receive into the destination. Large sends complete (`done`) only once the
 * peer's recv took the bytes (UCX's rendezvous).
 *
 * Domain: "ucx/<tls>" — two workers with the same transport setting can talk.
 * Priority: CHANNEL_PRIORITY.ucx for cpu-cpu (below shm/cma on one host).
 */
import { ChannelNotViableError } from "../../errors/index.js";
import { nativeChannels } from "../../native/channels.js";
import { debug } from "../../util/index.js";
import { registerChannel } from "../index.js";
import {
  CHANNEL_PRIORITY,
  type Channel,
  type ChannelAdvert,
  type ChannelBootstrap,
  type ChannelContext,
} from "../interface.js";
import { channelError, Inbox, pipeClosedError, INLINE_MAX } from "../native_common.js";
import { TaggedChannel } from "../shm/tagged_channel.js";

/** The UCX transports tprpc asks for: TPRPC_UCX_TLS, else UCX's own UCX_TLS (or its default). */
function tls(): string {
  return process.env.TPRPC_UCX_TLS ?? "";
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
    const channel = new TaggedChannel("ucx", conn, b.peerName, "this build moves host memory only");
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
