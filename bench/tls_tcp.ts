/**
 * What TLS costs the tcp channel between hosts (`npm run bench:tls`; root, `ip` and iperf3 needed):
 * two network namespaces joined by a veth pair (this one and "tprpc-tls-<pid>"), and on that link
 * 1. iperf3 for 3 s: the link's TCP bandwidth, one way;
 * 2. the tcp channel (test/native/channel_peer.ts in the other namespace) with TPRPC_TLS=off: echoes of
 *    N bytes (default 200 MB; argv[2] in MB), bandwidth = 2N / median time of 3 after a warm-up;
 * 3. the same with TPRPC_TLS=auto, which between the two namespaces is TLS 1.3 (AES-GCM) on every lane.
 * It prints each bandwidth and TLS as a fraction of plain and of iperf3, in one run, so the ratios hold
 * on a loaded machine even when the absolute figures do not. The namespace and veth are deleted
 * whatever happens.
 */
import { spawnSync } from "node:child_process";
import { tcpChannelContext } from "../sdk/channel/tcp/index.js";
import { ChannelPeer, pattern } from "../test/native/channel_peer.js";

const NS = `tprpc-tls-${process.pid}`;
const OURS = `tpt${process.pid % 100000}a`;
const THEIRS = `tpt${process.pid % 100000}b`;
const NET = `10.${150 + (process.pid % 50)}.${(process.pid >> 6) % 250}`;

function sh(cmd: string, args: string[], timeoutMs = 15_000): { ok: boolean; out: string } {
  const r = spawnSync(cmd, args, { encoding: "utf8", timeout: timeoutMs });
  return { ok: r.status === 0, out: `${r.stdout ?? ""}${r.stderr ?? ""}${r.error ? r.error.message : ""}`.trim() };
}

function must(cmd: string, args: string[]): void {
  const r = sh(cmd, args);
  if (!r.ok) throw new Error(`${cmd} ${args.join(" ")}: ${r.out}`);
}

function setup(): void {
  must("ip", ["netns", "add", NS]);
  must("ip", ["link", "add", OURS, "type", "veth", "peer", "name", THEIRS]);
  must("ip", ["link", "set", THEIRS, "netns", NS]);
  must("ip", ["addr", "add", `${NET}.1/30`, "dev", OURS]);
  must("ip", ["link", "set", OURS, "up"]);
  must("ip", ["netns", "exec", NS, "ip", "addr", "add", `${NET}.2/30`, "dev", THEIRS]);
  must("ip", ["netns", "exec", NS, "ip", "link", "set", THEIRS, "up"]);
  must("ip", ["netns", "exec", NS, "ip", "link", "set", "lo", "up"]);
}

function teardown(): void {
  sh("ip", ["link", "del", OURS]);
  sh("ip", ["netns", "del", NS]);
}

async function iperf(): Promise<number> {
  const port = String(20_000 + (process.pid % 20_000));
  must("sh", ["-c", `ip netns exec ${NS} iperf3 -s -1 -D -B ${NET}.2 -p ${port}`]);
  await new Promise((r) => setTimeout(r, 300));
  const c = sh("iperf3", ["-c", `${NET}.2`, "-p", port, "-t", "3", "-J"], 30_000);
  if (!c.ok) throw new Error(`iperf3: ${c.out.slice(0, 300)}`);
  return (
    (JSON.parse(c.out) as { end: { sum_received: { bits_per_second: number } } }).end.sum_received.bits_per_second / 8
  );
}

/** Bytes per second of the tcp channel's echoes with TPRPC_TLS=mode on both sides. */
async function channel(mode: "off" | "auto", n: number): Promise<number> {
  process.env.TPRPC_TLS = mode;
  const peer = await ChannelPeer.start(tcpChannelContext, { TPRPC_PEER_HOST: `${NET}.2`, TPRPC_TLS: mode }, 30_000, {
    host: `${NET}.1`,
    wrap: ["ip", "netns", "exec", NS],
  });
  try {
    const x = pattern(n, 5);
    const into = pattern(n, 0);
    const first = await peer.echo(x, into).back;
    if (Buffer.compare(Buffer.from(first.buffer, first.byteOffset, n), Buffer.from(x.buffer, x.byteOffset, n)) !== 0)
      throw new Error(`TPRPC_TLS=${mode}: the echo came back different`);
    const times: number[] = [];
    for (let i = 0; i < 3; i++) {
      const t0 = performance.now();
      await peer.echo(x, into).back;
      times.push((performance.now() - t0) / 1000);
    }
    times.sort((a, b) => a - b);
    if (peer.childErrors.length > 0) throw new Error(`peer errors: ${peer.childErrors.join("; ")}`);
    return (2 * n) / times[1]!;
  } finally {
    await peer.close();
  }
}

async function main(): Promise<void> {
  if (process.getuid?.() !== 0) throw new Error("needs root (network namespaces, a veth pair)");
  const mb = Number(process.argv[2] ?? 200);
  const n = Math.round(mb * 1e6);
  setup();
  try {
    const ip = await iperf();
    const plain = await channel("off", n);
    const tls = await channel("auto", n);
    const gb = (b: number) => `${(b / 1e9).toFixed(2)} GB/s`;
    const pct = (a: number, b: number) => `${((100 * a) / b).toFixed(0)}%`;
    console.log(`tcp channel across a veth pair, ${mb} MB echoes (median of 3 after a warm-up):`);
    console.log(`  iperf3 (one way)         ${gb(ip)}`);
    console.log(`  tcp channel, TLS off     ${gb(plain)}  (${pct(plain, ip)} of iperf3)`);
    console.log(`  tcp channel, TLS 1.3     ${gb(tls)}  (${pct(tls, plain)} of TLS off, ${pct(tls, ip)} of iperf3)`);
  } finally {
    teardown();
  }
}

main().then(
  () => process.exit(0),
  (e: unknown) => {
    console.error(e);
    teardown();
    process.exit(1);
  },
);
