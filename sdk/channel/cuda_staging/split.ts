/**
 * One channel bootstrap as several, for a channel built from parts that each
 * speak over it (cuda_staging's chunk notices and its inner tcp channel; a
 * direct GPU channel and its staging fallback). A message {tag: m} goes to
 * that tag's bootstrap; each part's messages wait until its listener is set.
 * `other` gets messages with none of the tags (null: a ProtocolError).
 */
import { ProtocolError } from "../../errors/index.js";
import type { ChannelBootstrap, SetupValue } from "../interface.js";

export function splitBootstrap<T extends string>(
  b: ChannelBootstrap,
  tags: readonly T[],
  other: ((m: Record<string, SetupValue>) => void) | null = null,
): Record<T, ChannelBootstrap> {
  const queued = new Map<string, SetupValue[]>(tags.map((t) => [t, []]));
  const listeners = new Map<string, (m: SetupValue) => void>();
  b.onMessage((msg) => {
    const m = msg as Record<string, SetupValue> | null;
    const tag = m !== null && typeof m === "object" ? tags.find((t) => t in m) : undefined;
    if (tag === undefined) {
      if (other && m !== null && typeof m === "object") return other(m);
      throw new ProtocolError(`a setup message from "${b.peerName}" names no part of the channel`);
    }
    const l = listeners.get(tag);
    if (l) l(m![tag]!);
    else queued.get(tag)!.push(m![tag]!);
  });
  const part = (tag: T): ChannelBootstrap => ({
    ...b,
    send: (m) => b.send({ [tag]: m }),
    onMessage: (cb) => {
      listeners.set(tag, cb);
      for (const m of queued.get(tag)!.splice(0)) cb(m);
    },
  });
  return Object.fromEntries(tags.map((t) => [t, part(t)])) as Record<T, ChannelBootstrap>;
}
