/**
 * A direct GPU channel (cuda_ipc, nccl) for one pipe, or cuda_staging on the
 * same pipe where the direct one cannot be set up on either side (its driver
 * says not viable there, a handle does not open, a communicator fails). The
 * two sides must reach the same answer, so:
 * 1. The bootstrap is split in two tagged lanes: {d: m} carries the direct
 *    channel's own messages (during setup and after), {s: m} staging's.
 * 2. Each side runs its direct setup and sends exactly one verdict {v}: null
 *    when its setup succeeded, else the reason; a side whose peer's failure
 *    arrives first sends its verdict at once ("the peer failed") without
 *    waiting for its own setup.
 * 3. Each side decides from both verdicts: both null, the direct channel;
 *    otherwise it closes whatever its direct setup built (now or when that
 *    setup settles) and both build cuda_staging over the {s} lane.
 * So a direct driver that is advertised but fails at setup costs the pipe
 * nothing but the time to find out; every wait is bounded by the pipe's own
 * opening timeout, which closes the bootstrap.
 */
import { ProtocolError } from "../../errors/index.js";
import type { Channel, ChannelBootstrap } from "../interface.js";
import { splitBootstrap } from "./split.js";

/** What `directOrStaging` built, and why it fell back (null when it did not). */
export interface DirectOrStaging {
  channel: Channel;
  fellBack: string | null;
}

/** The direct channel `direct` builds, or `staging`'s where either side's direct setup failed. */
export async function directOrStaging(
  b: ChannelBootstrap,
  direct: (lane: ChannelBootstrap) => Promise<Channel>,
  staging: (lane: ChannelBootstrap) => Promise<Channel>,
): Promise<DirectOrStaging> {
  let peerVerdict!: (v: string | null) => void;
  const peer = new Promise<string | null>((resolve) => (peerVerdict = resolve));
  const lanes = splitBootstrap(b, ["d", "s"], (m) => {
    if (!("v" in m)) throw new ProtocolError(`a GPU channel setup message from "${b.peerName}" has no lane`);
    peerVerdict(typeof m.v === "string" ? m.v : null);
  });
  let sent = false;
  const verdict = (v: string | null): void => {
    if (sent) return;
    sent = true;
    b.send({ v }).catch(() => undefined); // NB: a closed pipe fails the setup through its own close
  };
  const mine = direct(lanes.d).then(
    (ch) => ({ ch, why: null as string | null }),
    (e: unknown) => ({ ch: null, why: e instanceof Error ? e.message : String(e) }),
  );
  void mine.then((r) => verdict(r.why));
  // NB: a peer that failed first is answered at once: our own setup may be waiting on that peer
  void peer.then((v) => v !== null && verdict("the peer's setup failed"));
  const theirs = await peer;
  const ours = theirs === null ? await mine : null;
  if (ours?.ch && theirs === null) return { channel: ours.ch, fellBack: null };
  void mine.then((r) => r.ch?.close());
  const why = theirs !== null ? `on "${b.peerName}": ${theirs}` : `here: ${ours?.why ?? "unknown"}`;
  return { channel: await staging(lanes.s), fellBack: why };
}
