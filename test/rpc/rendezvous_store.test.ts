/**
 * The rendezvous store over real sockets on 127.0.0.1: every op, blocking
 * get satisfied by a later set, atomic add from 20 clients, watch events,
 * bounded waits that time out on time, a wrong secret refused with the data
 * untouched, garbage after auth closing only that connection, connect
 * retrying until the server appears, and close() releasing parked waiters.
 */
import net from "node:net";
import { afterEach, describe, expect, it } from "vitest";
import { AuthenticationError, RpcError, RpcTimeoutError, ValueError } from "../../sdk/errors/index.js";
import {
  StoreClient,
  StoreServer,
  type StoreEvent,
  type StoreLogEvent,
  MAX_FRAME,
} from "../../sdk/rpc/rendezvous/index.js";
import { authenticateAsClient } from "../../sdk/transport/auth.js";

const SECRET = "0123456789abcdef-test-secret";
const cleanup: (() => Promise<void> | void)[] = [];
afterEach(async () => {
  for (const c of cleanup.splice(0).reverse()) await c();
});

async function server(logs: StoreLogEvent[] = [], port = 0): Promise<StoreServer> {
  const s = await StoreServer.listen({ port, secret: SECRET, authTimeoutMs: 2_000, onLog: (e) => logs.push(e) });
  cleanup.push(() => s.close());
  return s;
}

async function client(s: { port: number }, secret = SECRET, timeoutMs = 5_000): Promise<StoreClient> {
  const c = await StoreClient.connect({ host: "127.0.0.1", port: s.port, secret, timeoutMs });
  cleanup.push(() => c.close());
  return c;
}

function until(cond: () => boolean, ms = 3_000): Promise<void> {
  const t0 = Date.now();
  return new Promise((resolve, reject) => {
    const tick = () =>
      cond() ? resolve() : Date.now() - t0 > ms ? reject(new Error("condition not met")) : setTimeout(tick, 5);
    tick();
  });
}

describe("StoreServer / StoreClient", () => {
  it("set, get, add, compareSet, delete, check, numKeys, list", async () => {
    const s = await server();
    const c = await client(s);
    await c.set("a", "hello");
    await c.set("bin", new Uint8Array([0, 255, 7]));
    expect((await c.get("a")).toString()).toBe("hello");
    expect([...(await c.get("bin"))]).toEqual([0, 255, 7]);
    expect(await c.add("n", 5)).toBe(5);
    expect(await c.add("n", -2)).toBe(3);
    await expect(c.add("a", 1)).rejects.toThrow(ValueError);
    expect((await c.compareSet("cas", null, "first"))!.toString()).toBe("first");
    expect((await c.compareSet("cas", null, "second"))!.toString()).toBe("first");
    expect((await c.compareSet("cas", "wrong", "third"))!.toString()).toBe("first");
    expect((await c.compareSet("cas", "first", "third"))!.toString()).toBe("third");
    expect(await c.compareSet("absent", "x", "y")).toBeNull();
    expect(await c.check(["a", "n"])).toBe(true);
    expect(await c.check(["a", "zzz"])).toBe(false);
    expect(await c.numKeys()).toBe(4);
    expect(await c.delete("a")).toBe(true);
    expect(await c.delete("a")).toBe(false);
    expect(await c.numKeys()).toBe(3);
    await c.set("p/x", "1");
    await c.set("p/y", "2");
    const l = await c.list("p/");
    expect([...l.keys()].sort()).toEqual(["p/x", "p/y"]);
    expect(l.get("p/y")!.toString()).toBe("2");
    await c.set("big", new Uint8Array(1 << 20).fill(9));
    expect((await c.get("big")).length).toBe(1 << 20);
  });

  it("a blocking get and wait are satisfied by a later set from another client", async () => {
    const s = await server();
    const [a, b] = [await client(s), await client(s)];
    const got = a.get("late", 3_000);
    const waited = a.wait(["late", "later"], 3_000);
    await new Promise((r) => setTimeout(r, 100));
    await b.set("late", "v");
    expect((await got).toString()).toBe("v");
    let done = false;
    waited.then(
      () => (done = true),
      () => undefined, // NB: a rejection fails the `await waited` below
    );
    await new Promise((r) => setTimeout(r, 50));
    expect(done).toBe(false);
    await b.set("later", "w");
    await waited;
  });

  it("get and wait time out within 10% of their timeout, naming the keys", async () => {
    const s = await server();
    const c = await client(s);
    for (const [op, ms] of [
      [() => c.get("never", 500), 500],
      [() => c.wait(["k1", "never2"], 300), 300],
    ] as const) {
      const t0 = Date.now();
      const err = await op().catch((e: unknown) => e);
      const dt = Date.now() - t0;
      expect(err).toBeInstanceOf(RpcTimeoutError);
      expect((err as Error).message).toMatch(/"never2?"/);
      expect((err as RpcTimeoutError).timeoutMs).toBe(ms);
      expect(dt).toBeGreaterThanOrEqual(ms - 5);
      expect(dt).toBeLessThan(ms + Math.max(ms * 0.1, 150)); // NB: 10% or 150 ms of scheduling slack
    }
    await expect(c.get("x", 0)).rejects.toThrow(ValueError);
  });

  it("add is atomic under 20 concurrent clients", async () => {
    const s = await server();
    const clients = await Promise.all(Array.from({ length: 20 }, () => client(s)));
    const results = await Promise.all(clients.flatMap((c) => Array.from({ length: 25 }, () => c.add("ctr", 1))));
    expect(new Set(results).size).toBe(500);
    expect(Math.min(...results)).toBe(1);
    expect(Math.max(...results)).toBe(500);
    expect(s.peek("ctr")!.toString()).toBe("500");
  });

  it("watch pushes sets and deletes under a prefix, in order, until cancelled", async () => {
    const s = await server();
    const [a, b] = [await client(s), await client(s)];
    const seen: StoreEvent[] = [];
    const stop = await a.watch("members/", (e) => seen.push(e));
    await b.set("members/w1", "addr1");
    await b.set("other/x", "ignored");
    await b.set("members/w2", "addr2");
    await b.delete("members/w1");
    await until(() => seen.length === 3);
    expect(seen.map((e) => [e.kind, e.key, e.value.toString()])).toEqual([
      ["set", "members/w1", "addr1"],
      ["set", "members/w2", "addr2"],
      ["delete", "members/w1", "addr1"],
    ]);
    await stop();
    await b.set("members/w3", "addr3");
    await b.check(["members/w3"]);
    await a.numKeys(); // a round trip on a's connection: any event would have arrived before this reply
    expect(seen.length).toBe(3);
  });

  it("ephemeral compareSet claims go when their client's connection drops, unless replaced", async () => {
    const s = await server();
    const watcher = await client(s);
    const events: string[] = [];
    await watcher.watch("eph/", (e: StoreEvent) => events.push(`${e.kind} ${e.key}`));
    const dying = await StoreClient.connect({ host: "127.0.0.1", port: s.port, secret: SECRET, timeoutMs: 5_000 });
    await dying.compareSet("eph/a", null, "mine", { ephemeral: true });
    await dying.compareSet("eph/b", null, "mine", { ephemeral: true });
    await dying.compareSet("eph/keep", null, "plain");
    await watcher.set("eph/b", "replaced"); // someone else's value now: must survive
    dying.close();
    await until(() => events.includes("delete eph/a"));
    const left = await watcher.list("eph/");
    expect([...left.keys()].sort()).toEqual(["eph/b", "eph/keep"]);
    expect(left.get("eph/b")!.toString()).toBe("replaced");
  });

  it("refuses a client with a wrong secret, and the server's data is unchanged", async () => {
    const logs: StoreLogEvent[] = [];
    const s = await server(logs);
    const good = await client(s);
    await good.set("keep", "1");
    await expect(client(s, "wrong-secret")).rejects.toThrow(AuthenticationError);
    // A raw peer that fakes the hello and sends valid SET frames for "evil" where its proof belongs: never decoded.
    const raw = net.connect(s.port, "127.0.0.1");
    await new Promise((r) => raw.once("connect", r));
    const frame = Buffer.from([
      0,
      0,
      0,
      21,
      1,
      0,
      0,
      0,
      1,
      0,
      2,
      0,
      0,
      0,
      4,
      ...Buffer.from("evil"),
      0,
      0,
      0,
      2,
      0x68,
      0x69,
    ]);
    raw.write(Buffer.concat([Buffer.from("TPRPCA1\0"), Buffer.alloc(32), frame, frame]));
    await until(() => logs.filter((l) => l.kind === "auth-refused").length >= 2);
    raw.destroy();
    expect(await good.check(["evil"])).toBe(false);
    expect(s.peek("evil")).toBeUndefined();
    expect(await good.numKeys()).toBe(1);
    expect(logs.every((l) => l.error instanceof AuthenticationError)).toBe(true);
  });

  it("garbage after auth closes that connection with a ProtocolError logged; others keep being served", async () => {
    const logs: StoreLogEvent[] = [];
    const s = await server(logs);
    const good = await client(s);
    for (const garbage of [
      Buffer.from([0xff, 0xff, 0xff, 0xff, 1, 2, 3]), // length over MAX_FRAME
      Buffer.from([0, 0, 0, 7, 77, 0, 0, 0, 1, 0, 0]), // unknown op
      Buffer.from([0, 0, 0, 11, 1, 0, 0, 0, 1, 0, 1, 0, 0, 0, 99]), // field overruns the frame
    ]) {
      const raw = net.connect(s.port, "127.0.0.1");
      await new Promise((r) => raw.once("connect", r));
      await authenticateAsClient(raw, SECRET, 2_000);
      const closed = new Promise((r) => raw.once("close", r));
      raw.write(garbage);
      raw.resume();
      await closed;
    }
    expect(logs.map((l) => l.kind)).toEqual(["protocol-error", "protocol-error", "protocol-error"]);
    expect(logs[0]!.error.message).toMatch(String(MAX_FRAME));
    await good.set("still", "ok");
    expect((await good.get("still")).toString()).toBe("ok");
  });

  it("connect retries until the server starts listening, and gives up with a clear error", async () => {
    const probe = net.createServer();
    await new Promise<void>((r) => probe.listen(0, "127.0.0.1", r));
    const port = (probe.address() as net.AddressInfo).port;
    await new Promise((r) => probe.close(r));
    const connecting = client({ port }, SECRET, 5_000);
    await new Promise((r) => setTimeout(r, 300));
    await server([], port);
    const c = await connecting;
    await c.set("k", "v");
    const t0 = Date.now();
    const err = await StoreClient.connect({ host: "127.0.0.1", port: 1, secret: SECRET, timeoutMs: 400 }).catch(
      (e) => e,
    );
    expect(err).toBeInstanceOf(RpcTimeoutError);
    expect(err.message).toMatch(/is rank 0 running/);
    expect(Date.now() - t0).toBeLessThan(440);
  });

  it("close() rejects parked waiters with a clear error and is idempotent on both sides", async () => {
    const s = await server();
    const c = await client(s);
    const parked = c.get("never", 5_000).catch((e: unknown) => e);
    await c.numKeys();
    const closes = [s.close(), s.close()];
    const err = await parked;
    expect(err).toBeInstanceOf(RpcError);
    expect((err as Error).message).toMatch(/store shut down/);
    await Promise.all(closes);
    await until(() => c.closed);
    await expect(c.set("x", "y")).rejects.toThrow(/closed/);
    c.close();
    c.close();
  });
});
