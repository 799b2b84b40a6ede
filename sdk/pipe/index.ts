/**
 * The pipe layer: one pipe per peer pair and direction, opened lazily by the
 * rpc agent. Control bytes over an authenticated transport; tensor bytes
 * through channels negotiated per device pair (./pipe.ts tells the story).
 */
import "../channel/backends.js";

export {
  Pipe,
  type DestinationHook,
  type PipeInfo,
  type PipeMessage,
  type PipeOptions,
  type ReceivedMessage,
} from "./pipe.js";
export { PIPE_TRANSITIONS, IllegalPipeTransitionError, type PipeState } from "./state.js";
export { PIPE_VERSION, PipeVersionError } from "./frame.js";
export { encodeHandshake, decodeHandshake } from "./handshake.js";
export { negotiate, parseChannelList, CAPABILITIES_VERSION, type Negotiation } from "./negotiate.js";
export { hostIdentity, localCapabilities, checkAllowedChannels } from "./capabilities.js";
