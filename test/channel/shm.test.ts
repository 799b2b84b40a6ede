/**
 * The channel suite (test/native/channels_harness.ts) over the shm channel, with a real peer
 * process: shared-memory rings passed as memfds, nothing in /dev/shm.
 */
import { channelSuite } from "../native/channels_harness.js";
import { nativeOrSkip } from "../native/helpers.js";

const { skip } = nativeOrSkip();

channelSuite("shm channel", async () => (await import("../../sdk/channel/shm/index.js")).shmChannelContext, { skip });
