/**
 * Harness for the native channel suites (test/channel/{shm,cma,ucx}.test.ts): one
 * channel context in this process, its peer in a real child process
 * (fixtures/channel-context-peer.mjs), the bootstrap messages carried over the
 * child's stdio as a pipe's control connection would carry them. When the child
 * dies, its stdout ends and the bootstrap's onClose fires, as a pipe's would.
 *
 * Protocol of an echo (the identity round trip):
 *  1. We call channel.send(bytes) and write { t: "echo", d: descriptor, n } at once,
 *     so the child's recvs come in our send order.
 *  2. The child receives into a fresh buffer, sends it back and writes { t: "echoed", d, n, k }
 *     (k numbers our echoes: recvs may complete out of order, e.g. over UCX).
 *  3. We call channel.recv(d, dest) for each "echoed" line in arrival order.
 */
import { spawn, type ChildProcess } from "node:child_process";
import fs from "node:fs";
import path from "node:path";
import readline from "node:readline";
import type {
  Capabilities,
  Channel,
  ChannelBootstrap,
  ChannelContext,
  HostIdentity,
  SetupValue,
} from "../../sdk/channel/interface.js";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { WorkerUnavailableError } from "../../sdk/errors/index.js";
import { loadNative } from "../../sdk/native/binding.js";
import { fixtures } from "./helpers.js";

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

export function devShm(): string[] {
  return fs.existsSync("/dev/shm") ? fs.readdirSync("/dev/shm").sort() : [];
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

  private constructor(name: string, env: NodeJS.ProcessEnv) {
    this.proc = spawn(process.execPath, [path.join(fixtures, "channel-context-peer.mjs"), name], {
      stdio: ["pipe", "pipe", "inherit"],
      env: { ...process.env, ...env },
    });
    this.exited = new Promise((res) => this.proc.on("exit", () => res()));
    readline.createInterface({ input: this.proc.stdout! }).on("line", (text) => {
      // NB: libraries in the child (UCX) may print their own lines on stdout; ours are JSON objects.
      if (text.startsWith("{")) this.onLine(dec(JSON.parse(text) as Json) as Line);
      else process.stderr.write(`[${name} peer] ${text}\n`);
    });
    this.proc.stdout!.on("end", () => this.closeListener?.(new Error("the peer process exited")));
  }

  /** Starts the child and sets up `ctx`'s channel with it (we are the connector). */
  static async start(ctx: ChannelContext, env: NodeJS.ProcessEnv = {}, timeoutMs = 30_000): Promise<ChannelPeer> {
    const peer = new ChannelPeer(ctx.name, env);
    const host = hostIdentity();
    const devices = { cpu: 1, cuda: 0 };
    const advert = ctx.advertise(host, devices);
    const local: Capabilities = { version: 1, name: "parent", host, devices, channels: advert ? [advert] : [] };
    const remote = await new Promise<Capabilities>((res) => {
      peer.hello = res;
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
      host: "127.0.0.1",
      timeoutMs,
      send: async (msg) => peer.write({ t: "boot", msg }),
      onMessage: (cb) => {
        peer.bootListener = cb;
        for (const m of peer.bootQueue.splice(0)) cb(m);
      },
      onClose: (cb) => (peer.closeListener = cb),
    };
    peer.channel = await ctx.createChannel(bootstrap);
    await ready;
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

/** A seeded generator (mulberry32), so sizes are the same on every run. */
export function rng(seed: number): () => number {
  let a = seed >>> 0;
  return () => {
    a = (a + 0x6d2b79f5) >>> 0;
    let t = a;
    t = Math.imul(t ^ (t >>> 15), t | 1);
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  };
}

function same(a: Uint8Array, b: Uint8Array): boolean {
  return (
    a.byteLength === b.byteLength &&
    Buffer.compare(
      Buffer.from(a.buffer, a.byteOffset, a.byteLength),
      Buffer.from(b.buffer, b.byteOffset, b.byteLength),
    ) === 0
  );
}

/**
 * The channel suite, run over one native context with a real peer process: ordering with
 * every size in flight at once (0 bytes, odd sizes, several rings' worth), 256 concurrent small
 * tensors, a 1 GB tensor, the peer killed mid-transfer (a typed WorkerUnavailableError, later
 * sends fail too), and no file descriptor or /dev/shm entry left behind.
 */
export function channelSuite(
  label: string,
  load: () => Promise<ChannelContext>,
  opts: { env?: NodeJS.ProcessEnv; skip: string | null; bigBytes?: number },
): void {
  describe.skipIf(opts.skip !== null)(label, () => {
    let ctx: ChannelContext;
    let peer: ChannelPeer;
    let fds: number;
    let shm: string[];
    const saved: NodeJS.ProcessEnv = {};

    beforeAll(async () => {
      for (const [k, v] of Object.entries(opts.env ?? {})) {
        saved[k] = process.env[k];
        process.env[k] = v;
      }
      ctx = await load();
      fds = openFds();
      shm = devShm();
      peer = await ChannelPeer.start(ctx, opts.env);
    });

    afterAll(async () => {
      await peer?.kill();
      for (const [k, v] of Object.entries(saved)) {
        if (v === undefined) delete process.env[k];
        else process.env[k] = v;
      }
    });

    it("echoes 0-byte, odd and multi-megabyte tensors, all in flight at once, in order", async () => {
      const r = rng(11);
      const sizes = [0, 1, 3, 7, 4095, 4097, 65_537, 1_000_003, 70_000_001];
      for (let i = 0; i < 24; i++) sizes.push(Math.floor(r() * 2_000_000));
      const sent = sizes.map((n, i) => pattern(n, i));
      const echoes = sent.map((b) => peer.echo(b));
      const back = await Promise.all(echoes.map((e) => e.back));
      await Promise.all(echoes.map((e) => e.done));
      sizes.forEach((n, i) => expect(same(back[i]!, sent[i]!), `size ${n}`).toBe(true));
      expect(peer.childErrors).toEqual([]);
    });

    it("256 concurrent small tensors each come back intact", async () => {
      const r = rng(5);
      const sent = Array.from({ length: 256 }, (_, i) => pattern(1 + Math.floor(r() * 65_536), i));
      const back = await Promise.all(sent.map((b) => peer.echo(b).back));
      sent.forEach((b, i) => expect(same(back[i]!, b), `tensor ${i}`).toBe(true));
    });

    it("a 1 GB tensor makes the round trip", async () => {
      const n = opts.bigBytes ?? 1 << 30;
      const big = pattern(n, 9);
      const { back, done } = peer.echo(big);
      const got = await back;
      await done;
      expect(got.byteLength).toBe(n);
      expect(same(got, big)).toBe(true);
    }, 120_000);

    it("peer killed mid-transfer: pending and later sends fail with WorkerUnavailableError; nothing leaks", async () => {
      const big = pattern(256 << 20, 1);
      const held = peer.hold(big).then(
        () => null,
        (e: unknown) => e,
      );
      await new Promise((r) => setTimeout(r, 200));
      await peer.kill();
      const e = await held;
      expect(e).toBeInstanceOf(WorkerUnavailableError);
      expect((e as WorkerUnavailableError).workerName).toBe("peer");
      const later = await peer.channel.send({ kind: "cpu", bytes: new Uint8Array(8) }).done.then(
        () => null,
        (err: unknown) => err,
      );
      expect(later).toBeInstanceOf(WorkerUnavailableError);
      peer.channel.close();
      peer.channel.close();
      expect(peer.channel.closed).toBe(true);
      expect(openFds()).toBe(fds);
      expect(devShm()).toEqual(shm);
    });
  });
}
