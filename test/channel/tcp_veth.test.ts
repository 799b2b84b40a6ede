/**
 * The tcp channel across two network namespaces joined by a veth pair: a link between two "hosts" that is
 * not loopback.
 *
 * 1. Setup (needs root and `ip`; otherwise the suite is skipped with the reason printed): a namespace
 *    "tprpc-veth-<pid>" holding one end of a veth pair, the other end in ours, addresses 10.<a>.<b>.1
 *    (ours) and .2 (theirs) on a /30.
 * 2. The peer process (test/native/channel_peer.ts) runs inside the namespace; 200 MB echoes come back
 *    intact, several in flight at once.
 * 3. The veth pair and the namespace are deleted afterwards, whatever happened.
 * NB: a bandwidth is not asserted here (a test's timing depends on what else runs on the machine):
 * `npm run bench:tls` measures the plain channel on the same kind of link as a fraction of iperf3's
 * bandwidth, and what TLS costs on top.
 * NB: the two namespaces are two hosts to TPRPC_TLS=auto, so the channel would be TLS; this checks the
 * plain channel (TPRPC_TLS=off on both sides), and test/transport the TLS one.
 */
import { spawnSync } from "node:child_process";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { ChannelPeer, pattern } from "../native/channel_peer.js";

const NS = `tprpc-veth-${process.pid}`;
const OURS = `tpv${process.pid % 100000}a`;
const THEIRS = `tpv${process.pid % 100000}b`;
const NET = `10.${200 + (process.pid % 50)}.${(process.pid >> 6) % 250}`;

function sh(cmd: string, args: string[], timeoutMs = 15_000): { ok: boolean; out: string } {
  const r = spawnSync(cmd, args, { encoding: "utf8", timeout: timeoutMs });
  return { ok: r.status === 0, out: `${r.stdout ?? ""}${r.stderr ?? ""}${r.error ? r.error.message : ""}`.trim() };
}

function whyNot(): string | null {
  if (process.platform !== "linux") return "Linux only";
  if (process.getuid?.() !== 0) return "needs root to create network namespaces and a veth pair";
  if (!sh("sh", ["-c", "command -v ip"]).ok) return "ip is not installed (apt-get install iproute2)";
  const probe = sh("ip", ["netns", "add", NS]);
  if (!probe.ok) return `ip netns add is not permitted here: ${probe.out}`;
  return null;
}

const skip = whyNot();
if (skip) console.warn(`[test/channel/tcp_veth] skipped: ${skip}`);

describe.skipIf(skip !== null)("tcp channel across a veth pair between network namespaces", () => {
  beforeAll(() => {
    const steps: Array<[string, string[]]> = [
      ["ip", ["link", "add", OURS, "type", "veth", "peer", "name", THEIRS]],
      ["ip", ["link", "set", THEIRS, "netns", NS]],
      ["ip", ["addr", "add", `${NET}.1/30`, "dev", OURS]],
      ["ip", ["link", "set", OURS, "up"]],
      ["ip", ["netns", "exec", NS, "ip", "addr", "add", `${NET}.2/30`, "dev", THEIRS]],
      ["ip", ["netns", "exec", NS, "ip", "link", "set", THEIRS, "up"]],
      ["ip", ["netns", "exec", NS, "ip", "link", "set", "lo", "up"]],
    ];
    for (const [cmd, args] of steps) {
      const r = sh(cmd, args);
      if (!r.ok) throw new Error(`${cmd} ${args.join(" ")}: ${r.out}`);
    }
  });

  afterAll(() => {
    sh("ip", ["link", "del", OURS]);
    sh("ip", ["netns", "del", NS]);
  });

  it("echoes 200 MB intact between the namespaces, then three 20 MB messages in flight at once", async () => {
    const { tcpChannelContext } = await import("../../sdk/channel/tcp/index.js");
    const savedTls = process.env.TPRPC_TLS;
    process.env.TPRPC_TLS = "off";
    const peer = await ChannelPeer.start(tcpChannelContext, { TPRPC_PEER_HOST: `${NET}.2`, TPRPC_TLS: "off" }, 30_000, {
      host: `${NET}.1`,
      wrap: ["ip", "netns", "exec", NS],
    });
    try {
      const n = 200_000_000;
      const x = pattern(n, 5);
      const into = pattern(n, 0);
      const same = (got: Uint8Array, want: Uint8Array): number =>
        Buffer.compare(
          Buffer.from(got.buffer, got.byteOffset, got.byteLength),
          Buffer.from(want.buffer, want.byteOffset, want.byteLength),
        );
      expect(same(await peer.echo(x, into).back, x)).toBe(0);
      const xs = [1, 2, 3].map((seed) => pattern(20_000_000, seed));
      const backs = await Promise.all(xs.map((xi) => peer.echo(xi).back));
      backs.forEach((got, i) => expect(same(got, xs[i]!), `echo ${i}`).toBe(0));
      expect(peer.childErrors).toEqual([]);
    } finally {
      await peer.close();
      if (savedTls === undefined) delete process.env.TPRPC_TLS;
      else process.env.TPRPC_TLS = savedTls;
    }
  }, 120_000);
});
