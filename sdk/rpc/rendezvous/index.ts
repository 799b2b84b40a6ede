/**
 * Rendezvous and membership: option parsing (initMethod / launcher env),
 * the authenticated key-value store rank 0 hosts, the registration and
 * barrier protocols on top of it. See docs/architecture.md, "Rendezvous and membership".
 */
export {
  parseInitOptions,
  parseTcpUrl,
  formatTcpUrl,
  DEFAULT_RPC_TIMEOUT_MS,
  DEFAULT_INIT_TIMEOUT_MS,
  type RendezvousInitOptions,
  type InitConfig,
} from "./options.js";
export { StoreServer, type StoreServerOptions, type StoreLogEvent } from "./store_server.js";
export { StoreClient, type StoreClientOptions, type StoreEvent } from "./store_client.js";
export { rendezvous, Membership, type WorkerInfo, type RendezvousOptions } from "./rendezvous.js";
export { barrier } from "./barrier.js";
export { MAX_FRAME } from "./protocol.js";
