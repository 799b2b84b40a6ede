/**
 * Channel negotiation, as a pure function of the two sides' Capabilities.
 *
 * 1. The pairs to serve: every (local kind, remote kind) where both sides
 *    have at least one device of that kind (cpu-cpu always).
 * 2. A channel is a candidate for pair a-b when our advert lists a-b, the
 *    peer's advert of the same name lists b-a, and their domain descriptors
 *    are equal (same host / namespaces / fabric, as the context defines it).
 * 3. Candidates rank by the lower of the two sides' priorities for the pair,
 *    then the higher, then by name; so both sides, given the same two
 *    Capabilities, reach the same choice (the acceptor's is authoritative
 *    and sent back; the connector checks it with `checkChoice`).
 * 4. A pair without a candidate is listed in `missing` with the reason; a
 *    tensor for it fails with ChannelNotViableError when sent.
 */
import { ChannelNotViableError, ValueError } from "../errors/index.js";
import {
  type Capabilities,
  type ChannelAdvert,
  type ChannelDeviceType,
  type DevicePairKey,
  flipPair,
} from "../channel/interface.js";

/** Bumped when the capability exchange changes shape. */
export const CAPABILITIES_VERSION = 1;

export interface Negotiation {
  /** Per pair (our side first), the chosen channel's name. */
  choice: Partial<Record<DevicePairKey, string>>;
  /** Pairs no channel serves, with why. */
  missing: Partial<Record<DevicePairKey, string>>;
}

const KINDS: readonly ChannelDeviceType[] = ["cpu", "cuda"];

function has(caps: Capabilities, kind: ChannelDeviceType): boolean {
  return kind === "cpu" || (caps.devices[kind] ?? 0) > 0;
}

/** Picks per device pair the best channel both sides can use (see the file comment). */
export function negotiate(local: Capabilities, remote: Capabilities): Negotiation {
  if (local.version !== remote.version)
    throw new ChannelNotViableError(
      `worker "${remote.name}" speaks capability version ${remote.version}, this worker ${local.version}; ` +
        "run the same tprpc version on every worker",
    );
  const theirs = new Map<string, ChannelAdvert>(remote.channels.map((c) => [c.name, c]));
  const out: Negotiation = { choice: {}, missing: {} };
  for (const a of KINDS) {
    if (!has(local, a)) continue;
    for (const b of KINDS) {
      if (!has(remote, b)) continue;
      const pair: DevicePairKey = `${a}-${b}`;
      let best: { name: string; lo: number; hi: number } | null = null;
      const why: string[] = [];
      for (const mine of local.channels) {
        const p = mine.priorities[pair];
        if (p === undefined) continue;
        const other = theirs.get(mine.name);
        const q = other?.priorities[flipPair(pair)];
        if (!other || q === undefined) {
          why.push(`${mine.name}: not offered by "${remote.name}" for ${flipPair(pair)}`);
          continue;
        }
        if (other.domain !== mine.domain) {
          why.push(`${mine.name}: different domains ("${mine.domain}" here, "${other.domain}" there)`);
          continue;
        }
        const cand = { name: mine.name, lo: Math.min(p, q), hi: Math.max(p, q) };
        if (
          !best ||
          cand.lo > best.lo ||
          (cand.lo === best.lo && (cand.hi > best.hi || (cand.hi === best.hi && cand.name < best.name)))
        )
          best = cand;
      }
      if (best) out.choice[pair] = best.name;
      else
        out.missing[pair] =
          why.length > 0 ? why.join("; ") : `no channel offered for ${pair} here (${local.channels.length} offered)`;
    }
  }
  return out;
}

/** The acceptor's choice seen from the connector's side (pairs flipped). */
export function flipNegotiation(n: Negotiation): Negotiation {
  const flip = (r: Partial<Record<DevicePairKey, string>>) =>
    Object.fromEntries(Object.entries(r).map(([k, v]) => [flipPair(k as DevicePairKey), v])) as Partial<
      Record<DevicePairKey, string>
    >;
  return { choice: flip(n.choice), missing: flip(n.missing) };
}

/**
 * The connector's check of the acceptor's answer (already flipped to our side):
 * every chosen channel must be one we advertised for that pair. Throws
 * ChannelNotViableError otherwise (a peer running other code, or a hostile one).
 */
export function checkChoice(local: Capabilities, n: Negotiation): void {
  for (const [pair, name] of Object.entries(n.choice)) {
    const mine = local.channels.find((c) => c.name === name);
    if (!mine || mine.priorities[pair as DevicePairKey] === undefined)
      throw new ChannelNotViableError(
        `the peer chose channel "${name}" for ${pair}, which this worker did not offer; run the same tprpc version everywhere`,
      );
  }
}

/**
 * The allowed channel names from options.channels or env TPRPC_CHANNELS
 * ("shm,tcp"): null = every viable channel. Names are checked for shape
 * here; whether they are registered and viable is checked at initRpc.
 */
export function parseChannelList(spec: string | readonly string[] | undefined): string[] | null {
  if (spec === undefined) return null;
  const names = (typeof spec === "string" ? spec.split(",") : [...spec]).map((s) => s.trim()).filter(Boolean);
  if (names.length === 0) return null;
  for (const n of names)
    if (!/^[a-z][a-z0-9_]{0,31}$/.test(n))
      throw new ValueError(
        `channel name ${JSON.stringify(n)} in options.channels / TPRPC_CHANNELS is not a channel name; ` +
          'use a comma-separated list such as "shm,tcp"',
      );
  return [...new Set(names)];
}
