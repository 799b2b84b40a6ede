/**
 * The channel suite (test/native/channels_harness.ts) over the cma channel (process_vm_readv),
 * with a real peer process; skipped with the reason where ptrace rules forbid cma.
 */
import { cmaChannelContext } from "../../sdk/channel/cma/index.js";
import { channelSuite } from "../native/channels_harness.js";
import { nativeOrSkip } from "../native/helpers.js";

const { skip } = nativeOrSkip();
const notViable = skip ?? cmaChannelContext.whyNotViable() ?? null;
if (skip === null && notViable !== null) console.warn(`[test/channel/cma] skipped: ${notViable}`);

channelSuite("cma channel", async () => cmaChannelContext, { skip: notViable });
