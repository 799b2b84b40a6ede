/**
 * The channel suite (test/native/channels_harness.ts) over the shm channel, with a real peer
 * process: shared-memory rings passed as memfds, nothing in /dev/shm. Twice: as configured by
 * default (buffers above 64 MiB by direct read where cma is allowed here, see
 * test/channel/shm_direct.test.ts), and with direct reads off, so that the large buffers cross the rings.
 */
import { channelSuite } from "../native/channels_harness.js";
import { nativeOrSkip } from "../native/helpers.js";

const { skip } = nativeOrSkip();
const load = async () => (await import("../../sdk/channel/shm/index.js")).shmChannelContext;

channelSuite("shm channel", load, { skip });
channelSuite("shm channel, large buffers through the rings (TPRPC_SHM_CMA_BYTES=0)", load, {
  skip,
  env: { TPRPC_SHM_CMA_BYTES: "0" },
});
