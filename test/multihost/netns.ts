/**
 * A test bed of simulated hosts: network namespaces joined by a Linux bridge, as machines on one
 * switch. Each host namespace gets one end of a veth pair as eth0 with 10.A.B.(i+1)/24; the other end
 * is a port of bridge br0, which lives in its own "switch" namespace (where a capture of every byte
 * between hosts runs). Names carry this process's pid, so concurrent runs never collide; teardown
 * kills whatever still runs in the namespaces and deletes them (the veths go with them).
 */
import { type ChildProcess, type SpawnOptions, spawn, spawnSync } from "node:child_process";

export function sh(cmd: string, args: string[], timeoutMs = 15_000): { ok: boolean; out: string } {
  const r = spawnSync(cmd, args, { encoding: "utf8", timeout: timeoutMs });
  return { ok: r.status === 0, out: `${r.stdout ?? ""}${r.stderr ?? ""}${r.error ? r.error.message : ""}`.trim() };
}

function must(cmd: string, args: string[]): void {
  const r = sh(cmd, args);
  if (!r.ok) throw new Error(`${cmd} ${args.join(" ")}: ${r.out}`);
}

/** Why the bed cannot be built here (null: it can), checked by creating and deleting a namespace. */
export function whyNoTestBed(tools: string[]): string | null {
  if (process.platform !== "linux") return "Linux only";
  if (process.getuid?.() !== 0) return "needs root to create network namespaces, veth pairs and a bridge";
  for (const tool of ["ip", ...tools])
    if (!sh("sh", ["-c", `command -v ${tool}`]).ok)
      return `${tool} is not installed (bash scripts/setup.sh installs it)`;
  const probe = `tpprobe${process.pid % 100000}`;
  const r = sh("ip", ["netns", "add", probe]);
  if (!r.ok) return `ip netns add is not permitted here: ${r.out}`;
  sh("ip", ["netns", "del", probe]);
  return null;
}

export class TestBed {
  readonly tag = `tm${process.pid % 100000}`;
  readonly net = `10.${100 + (process.pid % 100)}.${(process.pid >> 7) % 250}`;
  readonly switchNs = `${this.tag}sw`;
  private readonly made: string[] = [];

  constructor(readonly hosts: number) {}

  ns(i: number): string {
    return `${this.tag}h${i}`;
  }

  addr(i: number): string {
    return `${this.net}.${i + 1}`;
  }

  setup(): void {
    must("ip", ["netns", "add", this.switchNs]);
    this.made.push(this.switchNs);
    const sw = ["netns", "exec", this.switchNs];
    must("ip", [...sw, "ip", "link", "add", "br0", "type", "bridge"]);
    must("ip", [...sw, "ip", "link", "set", "br0", "up"]);
    for (let i = 0; i < this.hosts; i++) this.addHost(i);
  }

  /** Host i on the bridge (setup() makes 0..hosts-1; a later call adds one, as a machine plugged in). */
  addHost(i: number): void {
    const sw = ["netns", "exec", this.switchNs];
    const ns = this.ns(i);
    const a = `${this.tag}v${i}`;
    const b = `${this.tag}p${i}`;
    must("ip", ["netns", "add", ns]);
    this.made.push(ns);
    must("ip", ["link", "add", a, "type", "veth", "peer", "name", b]);
    must("ip", ["link", "set", a, "netns", ns]);
    must("ip", ["link", "set", b, "netns", this.switchNs]);
    must("ip", [...sw, "ip", "link", "set", b, "master", "br0"]);
    must("ip", [...sw, "ip", "link", "set", b, "up"]);
    const h = ["netns", "exec", ns];
    must("ip", [...h, "ip", "link", "set", a, "name", "eth0"]);
    must("ip", [...h, "ip", "addr", "add", `${this.addr(i)}/24`, "dev", "eth0"]);
    must("ip", [...h, "ip", "link", "set", "eth0", "up"]);
    must("ip", [...h, "ip", "link", "set", "lo", "up"]);
  }

  /** An extra namespace with only loopback up: a host with no route anywhere. */
  isolated(): string {
    const ns = `${this.tag}iso`;
    must("ip", ["netns", "add", ns]);
    this.made.push(ns);
    must("ip", ["netns", "exec", ns, "ip", "link", "set", "lo", "up"]);
    return ns;
  }

  /**
   * Host i joined not by a veth on the bridge but through a user-space relay (./lossy_router.py, as
   * netem is missing here) that delays every packet by `delayMs` and drops a seeded random fraction
   * `loss`. The relay runs in the switch namespace with two TUN devices: one stays there (the switch
   * routes host i's /32 to it, forwarding between it and br0, which gets address .254), the other is
   * moved into host i's namespace as its eth0 with addr(i)/24. The bridge's hosts reach addr(i) via .254.
   * So every packet between host i and the others is read and written by the relay. stop() ends
   * the relay and returns its counters.
   */
  async relayedHost(
    i: number,
    delayMs: number,
    loss: number,
    seed: number,
  ): Promise<{ stop: () => Promise<Record<string, number>> }> {
    const script = new URL("./lossy_router.py", import.meta.url).pathname;
    const sw = ["netns", "exec", this.switchNs];
    const a = `${this.tag}ra`;
    const b = `${this.tag}rb`;
    const relay = this.spawnIn(this.switchNs, "python3", [script, a, b, String(delayMs), String(loss), String(seed)], {
      stdio: ["ignore", "pipe", "pipe"],
    });
    let out = "";
    let err = "";
    relay.stdout!.on("data", (d: Buffer) => (out += d.toString()));
    relay.stderr!.on("data", (d: Buffer) => (err += d.toString()));
    const gone = new Promise<void>((resolve) => relay.once("exit", () => resolve()));
    const until = Date.now() + 10_000;
    while (!out.includes("READY")) {
      if (relay.exitCode !== null) throw new Error(`the relay exited: ${err}`);
      if (Date.now() > until) {
        relay.kill("SIGKILL");
        throw new Error(`the relay did not start within 10 s: ${err}`);
      }
      await new Promise((r) => setTimeout(r, 20));
    }
    const stop = async (): Promise<Record<string, number>> => {
      if (relay.exitCode === null && relay.signalCode === null) {
        relay.kill("SIGTERM");
        const timer = setTimeout(() => relay.kill("SIGKILL"), 5_000);
        await gone;
        clearTimeout(timer);
      }
      const last = out.trim().split("\n").at(-1) ?? "";
      if (!last.startsWith("{")) throw new Error(`the relay left no counters: ${out} ${err}`);
      return JSON.parse(last) as Record<string, number>;
    };
    try {
      must("sh", ["-c", `ip netns exec ${this.switchNs} sh -c 'echo 1 > /proc/sys/net/ipv4/ip_forward'`]);
      must("ip", [...sw, "ip", "addr", "add", `${this.net}.254/24`, "dev", "br0"]);
      const ns = this.ns(i);
      must("ip", ["netns", "add", ns]);
      this.made.push(ns);
      const h = ["netns", "exec", ns];
      must("ip", [...h, "ip", "link", "set", "lo", "up"]);
      // NB: a TUN device keeps its reader's file descriptor when moved to another namespace
      must("ip", [...sw, "ip", "link", "set", b, "netns", ns]);
      must("ip", [...h, "ip", "link", "set", b, "name", "eth0"]);
      must("ip", [...h, "ip", "addr", "add", `${this.addr(i)}/24`, "dev", "eth0"]);
      must("ip", [...h, "ip", "link", "set", "eth0", "up"]);
      must("ip", [...sw, "ip", "link", "set", a, "up"]);
      must("ip", [...sw, "ip", "route", "add", `${this.addr(i)}/32`, "dev", a]);
      for (let j = 0; j < this.hosts; j++)
        must("ip", ["netns", "exec", this.ns(j), "ip", "route", "add", `${this.addr(i)}/32`, "via", `${this.net}.254`]);
    } catch (e) {
      await stop().catch(() => undefined);
      throw e;
    }
    return { stop };
  }

  /** Starts `cmd args` inside namespace `ns`. */
  spawnIn(ns: string, cmd: string, args: string[], opts: SpawnOptions = {}): ChildProcess {
    return spawn("ip", ["netns", "exec", ns, cmd, ...args], opts);
  }

  /** Sets host i's link (its eth0) up or down: down cuts it off the bridge, a partition. */
  link(i: number, up: boolean): void {
    must("ip", ["netns", "exec", this.ns(i), "ip", "link", "set", "eth0", up ? "up" : "down"]);
  }

  /** The pids still running in namespace `ns` (processes started there, and their children). */
  pids(ns: string): number[] {
    return sh("ip", ["netns", "pids", ns])
      .out.split(/\s+/)
      .filter((x) => /^[0-9]+$/.test(x))
      .map(Number);
  }

  teardown(): void {
    for (const ns of this.made.splice(0).reverse()) {
      for (const pid of this.pids(ns))
        try {
          process.kill(pid, "SIGKILL");
        } catch {
          // gone already
        }
      sh("ip", ["netns", "del", ns]);
    }
  }
}
