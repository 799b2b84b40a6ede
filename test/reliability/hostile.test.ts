/**
 * Hostile connections to a worker's listening port and to the rendezvous
 * store's port (hosted by the master), with real processes on 127.0.0.1.
 * The attack bytes are real: a pipe HELLO plus three REQUEST messages calling
 * a counter the test registered on worker1 ("rel.bump"), and store SET / ADD
 * frames. A positive control first sends them after a correct handshake and
 * sees them run, so the later "nothing ran" checks can fail. Then, without the
 * secret (no handshake, a proof made with a wrong secret, a zero proof sent
 * ahead, a proof replayed from an earlier session, the frames in the proof's
 * place), seeded random bytes (bare, after the magic, after magic and a nonce),
 * garbage after a correct handshake, and 2,000 connections per port held open
 * mid-handshake: the server closes every connection it can judge, the counter
 * and the store stay untouched, the worker stays up, and legitimate calls
 * (old pipes, a new pipe worker2 → worker1, a new store client) keep working
 * during and after. The open-files limit is not raised: 2,000 per port need
 * about 6,500 descriptors here; under a lower limit the CI size holds fewer
 * and says so (the full size fails instead).
 */
import { createHmac } from "node:crypto";
import fs from "node:fs";
import net from "node:net";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { rpc } from "../../sdk/index.js";
import { FrameKind, encodeFrameHead } from "../../sdk/pipe/frame.js";
import { encodeHandshake, localCapabilities } from "../../sdk/pipe/index.js";
import { StoreClient, parseTcpUrl } from "../../sdk/rpc/rendezvous/index.js";
import { Op, encodeFrame } from "../../sdk/rpc/rendezvous/protocol.js";
import { SERVER_REPLY_BYTES, clientHandshake } from "../../sdk/transport/auth.js";
import { MessageType, encodeMessage } from "../../sdk/wire/index.js";
import { type Cluster, startGroup, stopGroup, within } from "../conformance/group.js";
import { FULL, below, prng, report, seededBytes, since, size, waitUntil } from "./common.js";

declare const tprpc: typeof import("../../sdk/index.js");

const SECRET = "conformance-secret-0123456789"; // startGroup's
const MAGIC = Buffer.from("TPRPCA1\0", "latin1");
const SEED = 0x4057113;
const ROUNDS = size(10, 100); // per scenario and port
const RANDOM_CONNS = size(300, 3_000);
/** This process's soft open-files limit (Infinity where it cannot be read). */
function openFilesLimit(): number {
  try {
    const m = /^Max open files\s+(\d+|unlimited)/m.exec(fs.readFileSync("/proc/self/limits", "utf8"));
    return m && m[1] !== "unlimited" ? Number(m[1]) : Infinity;
  } catch {
    return Infinity;
  }
}
const WANTED = 2_000; // per port, in both sizes
// NB: this process holds 3 descriptors per held pair (2 client sockets, the store's server side); a CI
// machine with a low limit (ulimit -n 1024) runs fewer, says so, and the full size refuses to.
const FD_ROOM = Math.floor((openFilesLimit() - 512) / 3);
const HELD = Math.max(0, Math.min(WANTED, FD_ROOM - (FD_ROOM % 200)));
const HOLD_MS = size(0, 12_000); // full: held past the 10 s authentication timeout

interface Conn {
  sock: net.Socket;
  /** Resolves when the socket closed (either side). */
  closed: Promise<void>;
  isClosed(): boolean;
  /** Everything received so far. */
  received(): Buffer;
}

function open(port: number, ms = 10_000): Promise<Conn> {
  return new Promise((resolve, reject) => {
    const sock = net.connect({ host: "127.0.0.1", port });
    const chunks: Buffer[] = [];
    let done = false;
    const closed = new Promise<void>((r) => sock.once("close", () => ((done = true), r())));
    sock.on("error", () => undefined); // ECONNRESET when the server drops us: expected
    sock.on("data", (d: Buffer) => chunks.push(d));
    const timer = setTimeout(() => {
      sock.destroy();
      reject(new Error(`could not connect to port ${port} within ${ms} ms`));
    }, ms);
    sock.once("connect", () => {
      clearTimeout(timer);
      resolve({ sock, closed, isClosed: () => done, received: () => Buffer.concat(chunks) });
    });
  });
}

/** The first `n` bytes the server sent (bounded). */
async function reply(c: Conn, n: number, ms = 5_000): Promise<Buffer> {
  const got = await waitUntil(() => c.received().length >= n || c.isClosed(), ms, 5);
  if (!got || c.received().length < n) throw new Error(`the server sent ${c.received().length} of ${n} bytes`);
  return c.received().subarray(0, n);
}

/** Whether the server closed `c` within `ms`. */
function closedWithin(c: Conn, ms: number): Promise<boolean> {
  return within(c.closed, ms, "close").then(
    () => true,
    () => false,
  );
}

const mac = (secret: string, role: string, a: Buffer, b: Buffer) =>
  createHmac("sha256", secret).update(role).update(a).update(b).digest();

/** A correct client handshake; resolves to the hello and proof sent (for the replay scenario). */
async function handshake(c: Conn): Promise<{ hello: Buffer; proof: Buffer }> {
  const h = clientHandshake(SECRET);
  c.sock.write(h.hello);
  const proof = h.answer(await reply(c, SERVER_REPLY_BYTES));
  c.sock.write(proof);
  return { hello: h.hello, proof };
}

/** What a peer sends on a worker's port once authenticated: HELLO (no channels), then REQUESTs to "rel.bump". */
function pipeAttack(): Buffer {
  const caps = Buffer.from(
    encodeHandshake(FrameKind.HELLO, localCapabilities("intruder", [], { cpu: 1, cuda: 0 }))[1]!,
  );
  const parts: Buffer[] = [encodeFrameHead(FrameKind.HELLO, caps.length, []), caps];
  for (let id = 1; id <= 3; id++) {
    const m = encodeMessage({
      type: MessageType.REQUEST,
      id,
      payload: { from: "intruder", target: { kind: "registered", name: "rel.bump" }, args: [] },
    });
    parts.push(encodeFrameHead(FrameKind.MESSAGE, m.header.length + m.payload.length, []), m.header, m.payload);
  }
  return Buffer.concat(parts);
}

/** What a client sends on the store's port once authenticated: a SET and an ADD. */
function storeAttack(): Buffer {
  return Buffer.concat([encodeFrame(Op.SET, 1, ["hostile/set", "1"]), encodeFrame(Op.ADD, 2, ["hostile/add", "5"])]);
}

describe("hostile connections to a worker's port and the store's port", () => {
  let cluster: Cluster | undefined;
  let store: StoreClient | undefined;
  let workerPort = 0;
  let storePort = 0;
  const target = () => [
    { name: "worker", port: workerPort, attack: pipeAttack() },
    { name: "store", port: storePort, attack: storeAttack() },
  ];
  const bumps = () =>
    rpc.rpcSync<number>("worker1", () => (globalThis as unknown as { __relBumps?: number }).__relBumps ?? -1);
  const hostileKeys = async () =>
    [(await store!.check(["hostile/set"])) ? 1 : 0, (await store!.check(["hostile/add"])) ? 1 : 0] as const;
  /** Nothing ran: the counter and the store are as the control left them, worker1 is up and answers. */
  const expectUntouched = async () => {
    expect(await bumps()).toBe(0);
    expect(await hostileKeys()).toEqual([0, 0]);
    expect(cluster!.workers[0]!.process.exitCode).toBeNull();
  };
  const legitCalls = async (n: number) => {
    const t0 = performance.now();
    const got = await within(
      Promise.all(Array.from({ length: n }, (_, i) => rpc.rpcSync<number>("worker1", (k: number) => k * 2, [i]))),
      20_000,
      "legitimate calls",
    );
    expect(got).toEqual(Array.from({ length: n }, (_, i) => i * 2));
    return since(t0);
  };

  beforeAll(async () => {
    cluster = await startGroup({ workers: 2, processes: true });
    workerPort = rpc.getWorkerInfo("worker1").port;
    storePort = parseTcpUrl(cluster.initMethod).port;
    store = await StoreClient.connect({ host: "127.0.0.1", port: storePort, secret: SECRET, timeoutMs: 10_000 });
    await rpc.rpcSync("worker1", () => {
      const g = globalThis as unknown as { __relBumps?: number };
      g.__relBumps = 0;
      tprpc.rpc.register("rel.bump", () => (g.__relBumps = (g.__relBumps ?? 0) + 1));
    });
  }, 60_000);
  afterAll(async () => {
    store?.close();
    await stopGroup(cluster);
  }, 30_000);

  it("runs the attack frames when they come after a correct handshake (positive control)", async () => {
    for (const t of target()) {
      const c = await open(t.port);
      await handshake(c);
      c.sock.write(t.attack);
      if (t.name === "worker") expect(await waitUntil(async () => (await bumps()) === 3, 5_000, 50)).toBe(true);
      else expect(await waitUntil(async () => (await hostileKeys()).join() === "1,1", 5_000, 50)).toBe(true);
      c.sock.destroy();
    }
    await rpc.rpcSync("worker1", () => void ((globalThis as unknown as { __relBumps?: number }).__relBumps = 0));
    await store!.delete("hostile/set");
    await store!.delete("hostile/add");
    await expectUntouched();
  });

  it(`refuses frames sent without the secret (5 ways × ${ROUNDS} × 2 ports) and runs none`, async () => {
    const recorded = new Map<number, { hello: Buffer; proof: Buffer }>();
    for (const t of target()) {
      const legit = await open(t.port);
      recorded.set(t.port, await handshake(legit));
      legit.sock.destroy();
    }
    const scenarios: Record<string, (c: Conn, attack: Buffer, port: number) => Promise<void>> = {
      "no handshake": async (c, attack) => void c.sock.write(attack),
      "a wrong secret": async (c, attack) => {
        const nc = seededBytes(32, SEED);
        c.sock.write(Buffer.concat([MAGIC, nc]));
        const ns = (await reply(c, SERVER_REPLY_BYTES)).subarray(MAGIC.length, MAGIC.length + 32);
        c.sock.write(Buffer.concat([mac("not-the-secret", "client", ns, nc), attack]));
      },
      "a zero proof sent ahead": async (c, attack) =>
        void c.sock.write(Buffer.concat([MAGIC, seededBytes(32, SEED + 1), Buffer.alloc(32), attack])),
      "a replayed proof": async (c, attack, port) => {
        const { hello, proof } = recorded.get(port)!;
        c.sock.write(hello);
        await reply(c, SERVER_REPLY_BYTES);
        c.sock.write(Buffer.concat([proof, attack]));
      },
      "the frames in the proof's place": async (c, attack) =>
        void c.sock.write(Buffer.concat([MAGIC, seededBytes(32, SEED + 2), attack])),
    };
    const lines: string[] = [];
    for (const [name, run] of Object.entries(scenarios)) {
      for (const t of target()) {
        let closed = 0;
        let slowest = 0;
        for (let r = 0; r < ROUNDS; r++) {
          const c = await open(t.port);
          const t0 = performance.now();
          await run(c, t.attack, t.port);
          if (await closedWithin(c, 3_000)) closed++;
          slowest = Math.max(slowest, since(t0));
          c.sock.destroy();
        }
        lines.push(`${name} → ${t.name}: ${closed}/${ROUNDS} closed by the server (slowest ${slowest.toFixed(0)} ms)`);
        expect(closed, `${name} → ${t.name}`).toBe(ROUNDS);
      }
    }
    report("hostile", lines.join("; "));
    await expectUntouched();
    await legitCalls(50);
  }, 120_000);

  it(`closes ${RANDOM_CONNS} connections of seeded random bytes, and garbage after a correct handshake`, async () => {
    const rand = prng(SEED + 3);
    let closed = 0;
    const t0 = performance.now();
    for (let i = 0; i < RANDOM_CONNS; i += 50) {
      const batch = Array.from({ length: Math.min(50, RANDOM_CONNS - i) }, async (_, j) => {
        const port = (i + j) % 2 === 0 ? workerPort : storePort;
        const body = seededBytes(1 + below(rand, 4096), SEED + 100 + i + j);
        const kind = below(rand, 3);
        const head = kind === 0 ? Buffer.alloc(0) : kind === 1 ? MAGIC : Buffer.concat([MAGIC, seededBytes(32, i + j)]);
        const c = await open(port);
        c.sock.end(Buffer.concat([head, body]));
        if (await closedWithin(c, 10_000)) closed++;
        c.sock.destroy();
      });
      await within(Promise.all(batch), 30_000, "a batch of random connections");
    }
    let garbageClosed = 0;
    const garbage = size(20, 200);
    for (let i = 0; i < garbage; i++) {
      const c = await open(i % 2 === 0 ? workerPort : storePort);
      await handshake(c);
      c.sock.end(seededBytes(64 + below(rand, 4096), SEED + 10_000 + i));
      if (await closedWithin(c, 3_000)) garbageClosed++;
      c.sock.destroy();
    }
    report(
      "hostile",
      `random bytes: ${closed}/${RANDOM_CONNS} connections closed (${since(t0).toFixed(0)} ms in all); ` +
        `garbage after a correct handshake: ${garbageClosed}/${garbage} closed`,
    );
    expect(closed).toBe(RANDOM_CONNS);
    expect(garbageClosed).toBe(garbage);
    await expectUntouched();
    await legitCalls(50);
  }, 180_000);

  it(`keeps serving with ${HELD} connections held open mid-handshake on each port`, async () => {
    if (HELD < WANTED)
      report("hostile", `open-files limit ${openFilesLimit()}: holding ${HELD} connections per port, not ${WANTED}`);
    // CI: at least 200 per port; full: all 2,000
    expect(HELD, `raise the open-files limit (ulimit -n) to hold ${WANTED} per port`).toBeGreaterThanOrEqual(
      FULL ? WANTED : 200,
    );
    const rssOf = (w: string) => rpc.rpcSync<number>(w, () => process.memoryUsage().rss);
    const rss0 = await rssOf("worker1");
    const baseline = await legitCalls(200);
    const held: Conn[] = [];
    const t0 = performance.now();
    for (const port of [workerPort, storePort])
      for (let i = 0; i < HELD; i += 200) {
        const batch = await within(
          Promise.all(Array.from({ length: 200 }, () => open(port))),
          30_000,
          "opening held connections",
        );
        batch.forEach((c, j) => {
          if ((i + j) % 2 === 1) c.sock.write(Buffer.concat([MAGIC, seededBytes(10, i + j)]));
        });
        held.push(...batch);
      }
    const opened = since(t0);
    try {
      const during = await legitCalls(200);
      // a pipe opened now (worker2 has never called worker1) and a new store client
      const t1 = performance.now();
      const fresh = await within(
        rpc.rpcSync<number>("worker2", () => tprpc.rpc.rpcSync<number>("worker1", (k: number) => k + 1, [41])),
        20_000,
        "a new pipe worker2 → worker1",
      );
      const freshMs = since(t1);
      expect(fresh).toBe(42);
      const other = await StoreClient.connect({
        host: "127.0.0.1",
        port: storePort,
        secret: SECRET,
        timeoutMs: 10_000,
      });
      await other.set("legit/during", "yes");
      expect((await store!.get("legit/during", 5_000)).toString()).toBe("yes");
      await other.close();
      let shedBy = -1;
      if (HOLD_MS > 0) {
        const shed = await waitUntil(() => held.every((c) => c.isClosed()), HOLD_MS, 250);
        shedBy = shed ? since(t0) : -1;
      }
      const closedEarly = held.filter((c) => c.isClosed()).length;
      report(
        "hostile",
        `${held.length} connections opened in ${opened.toFixed(0)} ms; 200 calls took ${baseline.toFixed(0)} ms before, ` +
          `${during.toFixed(0)} ms while held; new pipe worker2 → worker1 in ${freshMs.toFixed(0)} ms; ` +
          `${closedEarly} closed by the servers while held` +
          (HOLD_MS > 0 ? `; all shed by the authentication timeout: ${shedBy >= 0 ? `after ${shedBy} ms` : "no"}` : ""),
      );
      if (HOLD_MS > 0) expect(shedBy).toBeGreaterThanOrEqual(0);
    } finally {
      for (const c of held) c.sock.destroy();
    }
    await legitCalls(200);
    await expectUntouched();
    const rss1 = await rssOf("worker1");
    report(
      "hostile",
      `worker1 RSS ${(rss0 / 2 ** 20).toFixed(0)} MiB before, ${(rss1 / 2 ** 20).toFixed(0)} MiB after`,
    );
    expect(rss1 - rss0).toBeLessThan(256 * 2 ** 20);
  }, 120_000);
});
