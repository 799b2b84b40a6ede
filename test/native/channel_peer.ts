/**
 * One channel context in this process and its peer in a real child process
 * (test/native/fixtures/channel-context-peer.mjs, which runs the compiled dist/), with the
 * bootstrap messages carried over the child's stdio as a pipe's control connection would carry
 * them. When the child dies, its stdout ends and the bootstrap's onClose fires, as a pipe's would.
 * Used by the channel suites (test/native/channels_harness.ts) and `npm run bench:channels`.
 *
 * Protocol of an echo (the identity round trip):
 *  1. We call channel.send(bytes) and write { t: "echo", d: descriptor, n, k } at once,
 *     so the child's recvs come in our send order.
 *  2. The child receives into a pooled, pre-faulted buffer, sends it back and writes
 *     { t: "echoed", d, n, k } (k numbers our echoes: recvs may complete out of order, e.g. over UCX).
 *  3. We call channel.recv(d, dest) for each "echoed" line in arrival order.
 */
import { spawn, type ChildProcess } from "node:child_process";
import fs from "node:fs";
import path from "node:path";
import readline from "node:readline";
import { fileURLToPath } from "node:url";
import type {
  Capabilities,
  Channel,
  ChannelBootstrap,
  ChannelContext,
  HostIdentity,
  SetupValue,
} from "../../sdk/channel/interface.js";
import { loadNative } from "../../sdk/native/binding.js";

/** The repository root: the nearest directory above this file whose package.json is named "tprpc". */
function repoRoot(): string {
  let dir = path.dirname(fileURLToPath(import.meta.url));
  for (;;) {
    const pkg = path.join(dir, "package.json");
    if (fs.existsSync(pkg) && (JSON.parse(fs.readFileSync(pkg, "utf8")) as { name?: string }).name === "tprpc")
      return dir;
    const up = path.dirname(dir);
    if (up === dir) throw new Error("channel_peer: no tprpc package.json above " + dir);
    dir = up;
  }
}

const PEER_SCRIPT = path.join(repoRoot(), "test", "native", "fixtures", "channel-context-peer.mjs");

type Json = null | boolean | number | string | Json[] | { [k: string]: Json };

function enc(v: unknown): Json {
  if (v instanceof Uint8Array) return { $b: Buffer.from(v.buffer, v.byteOffset, v.byteLength).toString("base64") };
  if (Array.isArray(v)) return v.map(enc);
  if (v && typeof v === "object") return Object.fromEntries(Object.entries(v).map(([k, x]) => [k, enc(x)]));
  return v as Json;
}

function dec(v: Json): SetupValue {
  if (v && typeof v === "object" && !Array.isArray(v) && typeof v.$b === "string")
    return new Uint8Array(Buffer.from(v.$b, "base64"));
  if (Array.isArray(v)) return v.map(dec);
  if (v && typeof v === "object") return Object.fromEntries(Object.entries(v).map(([k, x]) => [k, dec(x)]));
  return v;
}

export function hostIdentity(): HostIdentity {
  const namespaces: Record<string, string> = {};
  for (const k of ["ipc", "pid", "user", "net", "mnt"]) {
    try {
      namespaces[k] = fs.readlinkSync(`/proc/self/ns/${k}`).replace(/^\w+:\[(\d+)\]$/, "$1");
    } catch {
      // unreadable: not offered
    }
  }
  let bootId = "";
  try {
    bootId = fs.readFileSync("/proc/sys/kernel/random/boot_id", "utf8").trim();
  } catch {
    // unknown
  }
  return { hostname: "test", bootId, namespaces, pid: process.pid, uid: process.getuid?.() ?? -1 };
}

/** byte i = (i * 31 + seed) & 255, in a pooled buffer (as the child computes it). */
export function pattern(n: number, seed: number): Uint8Array {
  const b = new Uint8Array(loadNative()!.alloc(n, { zero: false }));
  const period = Math.min(n, 1 << 16);
  for (let i = 0; i < period; i++) b[i] = (i * 31 + seed) & 255;
  for (let at = period; at < n; at += period) b.copyWithin(at, 0, Math.min(period, n - at));
  return b;
}

export function openFds(): number {
  return fs.readdirSync("/proc/self/fd").length;
}

const OURS = /^(tprpc|ucx)/i;

/**
 * /dev/shm entries that tprpc's channels or UCX could leave behind (names starting "tprpc" or "ucx").
 * NB: other programs' entries (e.g. Python's sem.mp-*) come and go on a shared machine; they are not ours.
 */
export function devShm(names: RegExp = OURS): string[] {
  if (!fs.existsSync("/dev/shm")) return [];
  return fs
    .readdirSync("/dev/shm")
    .filter((n) => names.test(n))
    .sort();
}

/** The /dev/shm names that process `pid` holds open or mapped (empty when it is gone or unreadable). */
function heldBy(pid: string): Set<string> {
  const held = new Set<string>();
  const add = (target: string): void => {
    const m = /^\/dev\/shm\/([^ ]+)/.exec(target);
    if (m) held.add(m[1]);
  };
  try {
    for (const fd of fs.readdirSync(`/proc/${pid}/fd`)) {
      try {
        add(fs.readlinkSync(`/proc/${pid}/fd/${fd}`));
      } catch {
        // closed while we looked
      }
    }
    for (const line of fs.readFileSync(`/proc/${pid}/maps`, "utf8").split("\n")) {
      const at = line.indexOf("/dev/shm/");
      if (at >= 0) add(line.slice(at));
    }
  } catch {
    // the process ended while we looked, or is not ours to read
  }
  return held;
}

/**
 * The /dev/shm entries (see devShm) that appeared since `before` and that a test's own processes left
 * behind: held by this process, or by no living process at all (a dead peer's). Entries that other test
 * files' processes create and remove meanwhile (vitest runs files side by side, and every process that
 * starts UCX makes ucx_shm_posix_* entries) are held by those processes, so they are not counted, and an
 * entry that disappeared is never a leak.
 */
export function devShmLeaks(before: readonly string[], names: RegExp = OURS): string[] {
  const fresh = devShm(names).filter((n) => !before.includes(n));
  if (fresh.length === 0) return [];
  const mine = heldBy("self");
  const others = new Set<string>();
  for (const pid of fs.readdirSync("/proc")) {
    if (!/^\d+$/.test(pid) || Number(pid) === process.pid) continue;
    for (const n of heldBy(pid)) others.add(n);
  }
  // NB: read again, so that an entry another process created and removed while we scanned is not counted.
  const still = new Set(devShm(names));
  return fresh.filter((n) => still.has(n) && (mine.has(n) || !others.has(n)));
}

type Line = { t: string } & Record<string, SetupValue>;

export class ChannelPeer {
  readonly proc: ChildProcess;
  channel!: Channel;
  /** Errors the child reported (its own sends' `done` or recvs failing). */
  readonly childErrors: string[] = [];
  private bootListener: ((m: SetupValue) => void) | null = null;
  private readonly bootQueue: SetupValue[] = [];
  private closeListener: ((e: Error | null) => void) | null = null;
  private readonly returns = new Map<
    number,
    { into: Uint8Array; res: (b: Uint8Array) => void; rej: (e: unknown) => void }
  >();
  private nextEcho = 0;
  private readonly sentWaiters: Array<(d: { d: Uint8Array; n: number }) => void> = [];
  private hello!: (caps: Capabilities) => void;
  private ready!: () => void;
  readonly exited: Promise<void>;

  private constructor(name: string, env: NodeJS.ProcessEnv, wrap: readonly string[]) {
    const argv = [...wrap, process.execPath, PEER_SCRIPT, name];
    this.proc = spawn(argv[0]!, argv.slice(1), {
      stdio: ["pipe", "pipe", "inherit"],
      env: { ...process.env, ...env },
    });
    this.exited = new Promise((res) => this.proc.on("exit", () => res()));
    // NB: a write after the child died (a test killed it) fails with EPIPE here; the death itself is
    // seen through stdout's end (closeListener) and "exit", and bootstrap.send rejects from then on
    this.proc.stdin!.on("error", () => undefined);
    readline.createInterface({ input: this.proc.stdout! }).on("line", (text) => {
      // NB: libraries in the child (UCX) may print their own lines on stdout; ours are JSON objects.
      if (text.startsWith("{")) this.onLine(dec(JSON.parse(text) as Json) as Line);
      else process.stderr.write(`[${name} peer] ${text}\n`);
    });
    this.proc.stdout!.on("end", () => this.closeListener?.(new Error("the peer process exited")));
  }

  /**
   * Starts the child and sets up `ctx`'s channel with it (we are the connector). `host` is the
   * address we advertise (the child's comes in env TPRPC_PEER_HOST); `wrap` prefixes the child's
   * command line (e.g. ["ip", "netns", "exec", ns] to run it in another network namespace).
   */
  static async start(
    ctx: ChannelContext,
    env: NodeJS.ProcessEnv = {},
    timeoutMs = 30_000,
    opts: { host?: string; wrap?: readonly string[] } = {},
  ): Promise<ChannelPeer> {
    const peer = new ChannelPeer(ctx.name, env, opts.wrap ?? []);
    const host = hostIdentity();
    const devices = { cpu: 1, cuda: 0 };
    const advert = ctx.advertise(host, devices);
    const local: Capabilities = { version: 1, name: "parent", host, devices, channels: advert ? [advert] : [] };
    const remote = await new Promise<Capabilities>((res, rej) => {
      peer.hello = res;
      void peer.exited.then(() => rej(new Error(`${ctx.name}: the peer process exited during setup`)));
      peer.write({ t: "hello", caps: local });
    });
    const remoteAdvert = remote.channels.find((a) => a.name === ctx.name);
    if (!remoteAdvert || !advert) throw new Error(`${ctx.name}: no advert on one side`);
    if (remoteAdvert.domain !== advert.domain) throw new Error(`${ctx.name}: domains differ`);
    const ready = new Promise<void>((res) => (peer.ready = res));
    const bootstrap: ChannelBootstrap = {
      role: "connector",
      peerName: "peer",
      local,
      remote,
      remoteAdvert,
      pairs: ["cpu-cpu"],
      secret: "s",
      host: opts.host ?? "127.0.0.1",
      timeoutMs,
      send: async (msg) => {
        // NB: as a pipe's bootstrap: rejects once the peer is gone
        if (peer.proc.exitCode !== null || peer.proc.signalCode !== null) throw new Error("the peer process exited");
        peer.write({ t: "boot", msg });
      },
      onMessage: (cb) => {
        peer.bootListener = cb;
        for (const m of peer.bootQueue.splice(0)) cb(m);
      },
      onClose: (cb) => (peer.closeListener = cb),
    };
    let timer: NodeJS.Timeout | undefined;
    const timeout = new Promise<never>((_, rej) => {
      timer = setTimeout(() => rej(new Error(`${ctx.name}: setup took more than ${timeoutMs} ms`)), timeoutMs);
    });
    try {
      peer.channel = await Promise.race([ctx.createChannel(bootstrap), timeout]);
      await Promise.race([ready, timeout]);
    } catch (e) {
      peer.proc.kill("SIGKILL");
      throw e;
    } finally {
      clearTimeout(timer);
    }
    return peer;
  }

  private write(o: unknown): void {
    this.proc.stdin!.write(JSON.stringify(enc(o)) + "\n");
  }

  private onLine(m: Line): void {
    if (m.t === "hello") this.hello(m.caps as unknown as Capabilities);
    else if (m.t === "ready") this.ready();
    else if (m.t === "boot") {
      if (this.bootListener) this.bootListener(m.msg!);
      else this.bootQueue.push(m.msg!);
    } else if (m.t === "echoed") {
      const r = this.returns.get(m.k as number)!;
      this.returns.delete(m.k as number);
      const n = m.n as number;
      const into = r.into.byteLength === n ? r.into : new Uint8Array(n);
      this.channel.recv(m.d as Uint8Array, { kind: "cpu", bytes: into }).then(() => r.res(into), r.rej);
    } else if (m.t === "sent") this.sentWaiters.shift()?.({ d: m.d as Uint8Array, n: m.n as number });
    else if (m.t === "error") this.childErrors.push(String(m.message));
  }

  /** Sends `bytes` to the child and resolves with what came back (received into `into`, or a new buffer). */
  echo(bytes: Uint8Array, into?: Uint8Array): { back: Promise<Uint8Array>; done: Promise<void> } {
    const { descriptor, done } = this.channel.send({ kind: "cpu", bytes });
    const k = this.nextEcho++;
    const back = new Promise<Uint8Array>((res, rej) =>
      this.returns.set(k, {
        into: into ?? new Uint8Array(loadNative()!.alloc(bytes.byteLength, { zero: false })),
        res,
        rej,
      }),
    );
    this.write({ t: "echo", d: descriptor, n: bytes.byteLength, k });
    return { back, done };
  }

  /** Sends `bytes` to a child that never receives them. */
  hold(bytes: Uint8Array): Promise<void> {
    const { descriptor, done } = this.channel.send({ kind: "cpu", bytes });
    this.write({ t: "hold", d: descriptor, n: bytes.byteLength });
    return done;
  }

  /** Asks the child to send a pattern of n bytes; resolves with the descriptor it sent. */
  askSend(n: number, seed: number): Promise<{ d: Uint8Array; n: number }> {
    const p = new Promise<{ d: Uint8Array; n: number }>((res) => this.sentWaiters.push(res));
    this.write({ t: "send", n, seed });
    return p;
  }

  async kill(): Promise<void> {
    this.proc.kill("SIGKILL");
    await this.exited;
  }

  /** Closes our channel and ends the child (its stdin closes). */
  async close(): Promise<void> {
    this.channel?.close();
    this.proc.stdin!.end();
    await this.exited;
  }
}
