/**
 * initRpc's network part, before an Agent exists:
 * 1. choose the channels this worker offers (options.channels, else
 *    TPRPC_CHANNELS, else every viable one but ucx when TLS guards the group
 *    across hosts: ucx is not encrypted) and its capabilities;
 * 2. choose the address to advertise (./address.ts) and listen for peers on
 *    an authenticated TCP transport (loopback when that address is, else
 *    every interface);
 * 3. rank 0 hosts the rendezvous store; everyone connects to it;
 * 4. rendezvous (./rendezvous): the membership;
 * 5. static groups: device maps may only name members, and only target
 *    devices those members have (both known only now: each worker's claim
 *    carries its CUDA device count), as PyTorch checks at init.
 * Anything that fails closes what was opened and throws, with one delay: when
 * the group cannot assemble (a duplicate name or rank), rank 0 keeps serving
 * the store for a while (LINGER_MS), so the ranks still connecting read the
 * refusal there instead of waiting out their init timeout.
 */
import { registeredChannels } from "../channel/index.js";
import type { Capabilities } from "../channel/interface.js";
import { ValueError } from "../errors/index.js";
import { checkAllowedChannels, localCapabilities, parseChannelList } from "../pipe/index.js";
import { deviceBackendFor } from "../tensor/backend/devices.js";
import type { TransportListener } from "../transport/interface.js";
import { tcpTransport } from "../transport/tcp/index.js";
import { wantsTls } from "../transport/tls.js";
import { advertisedAddress, isLoopback } from "./address.js";
import { type InitConfig, type Membership, StoreClient, StoreServer, rendezvous } from "./rendezvous/index.js";

/** How the agent's pipes choose channels. */
export interface AgentPipeOptions {
  /** Allowed channel names ("shm,tcp" or an array); default env TPRPC_CHANNELS, else every viable one. */
  channels?: string | readonly string[];
}

/** What joining gives the agent. */
export interface Joined {
  listener: TransportListener;
  store: StoreClient;
  /** The store, when this worker (rank 0) hosts it. */
  storeServer: StoreServer | null;
  membership: Membership;
  /** The address peers dial for this worker. */
  advertised: string;
  caps: Capabilities;
}

/** CUDA devices this worker can offer a channel for (0 without a CUDA backend). */
function cudaDevices(): number {
  try {
    return deviceBackendFor("cuda")?.deviceCount() ?? 0;
  } catch {
    return 0;
  }
}

/** How long a refused group's store stays up for the ranks still on their way. */
const LINGER_MS = 10_000;
/** Stores kept up after a refusal, by port; a new initRpc on that port closes its own at once. */
const lingering = new Map<number, StoreServer>();

function linger(server: StoreServer, port: number, ms: number): void {
  lingering.set(port, server);
  setTimeout(() => {
    if (lingering.get(port) === server) lingering.delete(port);
    void server.close(); // NB: StoreServer.close() never rejects
  }, ms).unref();
}

export async function joinGroup(config: InitConfig, pipes: AgentPipeOptions = {}): Promise<Joined> {
  const old = lingering.get(config.port);
  if (old) {
    lingering.delete(config.port);
    await old.close();
  }
  let allowed = parseChannelList(pipes.channels ?? process.env.TPRPC_CHANNELS);
  checkAllowedChannels(allowed);
  // NB: ucx's bytes are not encrypted: where TLS guards a group across hosts, ucx is used only when named
  if (allowed === null && wantsTls(config.host))
    allowed = registeredChannels()
      .map((c) => c.name)
      .filter((n) => n !== "ucx");
  const cuda = cudaDevices();
  const caps = localCapabilities(config.name, allowed, { cpu: 1, cuda });
  // NB: the store (rank 0) stays on loopback for a loopback group; our listener binds the advertised
  // address's side: loopback, or every interface
  const storeBind = isLoopback(config.host) ? config.host.replace(/^\[|\]$/g, "") : "0.0.0.0";
  const advertised = await advertisedAddress(config.host, config.port);
  const bindHost = isLoopback(advertised) ? advertised : "0.0.0.0";
  const listener = await tcpTransport.listen({ host: bindHost, port: 0, secret: config.secret });
  let storeServer: StoreServer | null = null;
  let store: StoreClient | null = null;
  let assembled = false;
  try {
    if (config.rank === 0)
      storeServer = await StoreServer.listen({ host: storeBind, port: config.port, secret: config.secret });
    store = await StoreClient.connect({
      host: config.host,
      port: config.port,
      secret: config.secret,
      timeoutMs: config.initTimeoutMs,
    });
    const membership = await rendezvous(store, {
      name: config.name,
      rank: config.rank,
      worldSize: config.worldSize,
      address: { host: advertised, port: listener.address.port },
      cudaDevices: cuda,
      timeoutMs: config.initTimeoutMs,
    });
    assembled = true;
    if (config.worldSize !== undefined) {
      // NB: as PyTorch's init: a static group's maps may only name its members
      const names = new Set(membership.workers.map((w) => w.name));
      const strangers = [...config.deviceMaps.keys()].filter((n) => !names.has(n));
      let refusal: string | null = null;
      if (strangers.length > 0)
        refusal =
          `deviceMaps names ${strangers.map((n) => `"${n}"`).join(", ")}, not in the group ` +
          `(${[...names].join(", ")}); device maps may only name the group's workers`;
      for (const [to, map] of config.deviceMaps) {
        if (refusal || !names.has(to)) break;
        const have = membership.cudaDevices(to);
        const missing = map.targets().find((d) => d.type === "cuda" && d.index >= have);
        if (missing)
          refusal =
            `deviceMaps["${to}"] maps to ${missing}, but "${to}" has ${have} CUDA device(s); ` +
            "map only to devices the callee has";
      }
      if (refusal) {
        await membership.leave().catch(() => undefined);
        throw new ValueError(`worker "${config.name}": ${refusal}`);
      }
    }
    return { listener, store, storeServer, membership, advertised, caps };
  } catch (e) {
    store?.close();
    // NB: a ValueError from the rendezvous is a refusal every rank must hear (see the top)
    if (storeServer && !assembled && e instanceof ValueError)
      linger(storeServer, config.port, Math.min(LINGER_MS, config.initTimeoutMs));
    else await storeServer?.close();
    await listener.close();
    throw e;
  }
}
