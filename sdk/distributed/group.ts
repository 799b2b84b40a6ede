/**
 * Process groups: the world (every member of the RPC group) or a subset made
 * by newGroup(ranks). Ranks are global (the workers' RPC ranks), as
 * torch.distributed's src/dst arguments are; a group's own numbering is the
 * position in its sorted rank list.
 *
 * Collectives on one group are matched by call order, as in torch: every
 * member counts the collectives it starts on the group, and the messages of
 * the k-th one carry the tag "c:<group id>:<k>:<step>". A group's id is its
 * rank list plus how many groups with that list this worker made before, so
 * members that create the same groups in the same order agree on it
 * (non-members need not call newGroup, unlike torch).
 */
import { ValueError } from "../errors/index.js";
import type { P2P } from "./p2p.js";

export class ProcessGroup {
  private seq = 0;
  /** The members' ranks, ascending. */
  readonly ranks: readonly number[];
  /** For the mailbox: the ranks whose death fails a collective's receive. */
  readonly rankSet: ReadonlySet<number>;

  /** @internal use newGroup() */
  constructor(
    /** @internal */
    readonly p2p: P2P,
    ranks: readonly number[],
    readonly id: string,
  ) {
    this.ranks = [...ranks].sort((a, b) => a - b);
    this.rankSet = new Set(this.ranks);
  }

  /** Number of members. */
  size(): number {
    return this.ranks.length;
  }

  /** This worker's position in the group, -1 when it is not a member. */
  rank(): number {
    return this.ranks.indexOf(this.p2p.rank);
  }

  /** The global rank of the member at position `i`. */
  globalRank(i: number): number {
    return this.ranks[((i % this.ranks.length) + this.ranks.length) % this.ranks.length]!;
  }

  /** @internal the tag prefix of the next collective on this group (every member calls it once per collective). */
  nextTag(): string {
    return `c:${this.id}:${this.seq++}`;
  }

  toString(): string {
    return `ProcessGroup(${this.id === "world" ? "world" : `ranks [${this.ranks.join(", ")}]`})`;
  }
}

const worlds = new WeakMap<P2P, ProcessGroup>();
const made = new WeakMap<P2P, Map<string, number>>();

/** The default group: every member when it is first used. */
export function worldOf(p2p: P2P): ProcessGroup {
  let g = worlds.get(p2p);
  if (!g) {
    g = new ProcessGroup(p2p, p2p.ranks(), "world");
    worlds.set(p2p, g);
  }
  return g;
}

/** newGroup's work: validates the ranks (distinct members) and names the group. */
export function makeGroup(p2p: P2P, ranks: readonly number[] | undefined): ProcessGroup {
  if (ranks === undefined) return new ProcessGroup(p2p, p2p.ranks(), nextId(p2p, "all"));
  if (!Array.isArray(ranks) || ranks.length === 0)
    throw new ValueError("newGroup(ranks): ranks is a non-empty array of worker ranks");
  const sorted = [...ranks].sort((a, b) => a - b);
  for (let i = 0; i < sorted.length; i++) {
    p2p.checkPeer(sorted[i]!, "newGroup(ranks)");
    if (i > 0 && sorted[i] === sorted[i - 1])
      throw new ValueError(`newGroup(ranks): rank ${sorted[i]} is listed twice`);
  }
  return new ProcessGroup(p2p, sorted, nextId(p2p, sorted.join(",")));
}

function nextId(p2p: P2P, key: string): string {
  let m = made.get(p2p);
  if (!m) made.set(p2p, (m = new Map()));
  const k = m.get(key) ?? 0;
  m.set(key, k + 1);
  return `${key}#${k}`;
}
