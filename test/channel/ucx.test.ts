/**
 * The channel suite (test/native/channels_harness.ts) over the ucx channel, with a real peer
 * process, once over UCX's shared-memory transports and once over its TCP transport
 * (TPRPC_UCX_TLS); skipped with the reason where libucp is missing (apt install libucx0).
 */
import { ucxChannelContext } from "../../sdk/channel/ucx/index.js";
import { channelSuite } from "../native/channels_harness.js";
import { nativeOrSkip } from "../native/helpers.js";

const { skip } = nativeOrSkip();
const notViable = skip ?? ucxChannelContext.whyNotViable() ?? null;
if (skip === null && notViable !== null) console.warn(`[test/channel/ucx] skipped: ${notViable}`);

channelSuite("ucx channel over UCX shared memory", async () => ucxChannelContext, {
  skip: notViable,
  env: { TPRPC_UCX_TLS: "shm,self" },
});
channelSuite("ucx channel over UCX tcp", async () => ucxChannelContext, {
  skip: notViable,
  env: { TPRPC_UCX_TLS: "tcp,self", UCX_NET_DEVICES: "lo" },
});
