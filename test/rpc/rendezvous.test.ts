/**
 * Rendezvous and barriers on a real store over 127.0.0.1: a static group of
 * 4 (in-process clients, and child processes configured only by the launcher
 * env), unique names and ranks (the first holder unaffected), worldSize
 * agreement, timeouts on time and naming who is missing, barrier reuse over
 * several rounds, and dynamic joins and leaves seen by the others.
 */
import { spawn } from "node:child_process";
import path from "node:path";
import { afterEach, describe, expect, it } from "vitest";
import { AuthenticationError, RpcTimeoutError, ValueError } from "../../sdk/errors/index.js";
import {
  barrier,
  rendezvous,
  StoreClient,
  StoreServer,
  type Membership,
  type WorkerInfo,
} from "../../sdk/rpc/rendezvous/index.js";

const SECRET = "rendezvous-test-secret";
const cleanup: (() => Promise<void> | void)[] = [];
afterEach(async () => {
  for (const c of cleanup.splice(0).reverse()) await c();
});

async function group(n: number): Promise<{ server: StoreServer; clients: StoreClient[] }> {
  const server = await StoreServer.listen({ port: 0, secret: SECRET });
  cleanup.push(() => server.close());
  const clients = await Promise.all(
    Array.from({ length: n }, () =>
      StoreClient.connect({ host: "127.0.0.1", port: server.port, secret: SECRET, timeoutMs: 5_000 }),
    ),
  );
  for (const c of clients) cleanup.push(() => c.close());
  return { server, clients };
}

const addr = (rank: number) => ({ host: "127.0.0.1", port: 41000 + rank });

function until(cond: () => boolean, ms = 3_000): Promise<void> {
  const t0 = Date.now();
  return new Promise((resolve, reject) => {
    const tick = () =>
      cond() ? resolve() : Date.now() - t0 > ms ? reject(new Error("condition not met")) : setTimeout(tick, 5);
    tick();
  });
}

describe("rendezvous", () => {
  it("assembles a static group of 4: everyone sees the same members, ordered by rank", async () => {
    const { clients } = await group(4);
    const order = [2, 0, 3, 1];
    const ms = await Promise.all(
      order.map((rank, i) =>
        rendezvous(clients[i]!, { name: `w${rank}`, rank, worldSize: 4, address: addr(rank), timeoutMs: 5_000 }),
      ),
    );
    const expected: WorkerInfo[] = [0, 1, 2, 3].map((r) => ({ name: `w${r}`, id: r, ...addr(r) }));
    for (const [i, m] of ms.entries()) {
      expect(m.workers).toEqual(expected);
      expect(m.self).toEqual(expected[order[i]!]);
      expect(m.get("w3")).toEqual(expected[3]);
    }
  });

  it("refuses a second worker claiming a taken name or rank, naming it, and the first is unaffected", async () => {
    const { server, clients } = await group(4);
    const [a, b, c, d] = clients as [StoreClient, StoreClient, StoreClient, StoreClient];
    const first = await rendezvous(a, { name: "alice", rank: 0, worldSize: undefined, address: addr(0) });
    const before = await a.list("rdzv/");
    const attempts = [
      [b, { name: "alice", rank: 1 }, /worker name "alice" is already taken by rank 0/],
      [c, { name: "bob", rank: 0 }, /rank 0 is already taken by worker "alice"/],
      [d, { name: "alice", rank: 0 }, /rank 0 is already taken by worker "alice"/],
    ] as const;
    for (const [client, who, re] of attempts) {
      const err = await rendezvous(client, { ...who, worldSize: undefined, address: addr(9) }).catch((e) => e);
      expect(err).toBeInstanceOf(ValueError);
      expect(err.message).toMatch(re);
    }
    const after = await a.list("rdzv/");
    expect([...after.entries()].map(([k, v]) => [k, v.toString()])).toEqual(
      [...before.entries()].map(([k, v]) => [k, v.toString()]),
    );
    expect(server.peek("rdzv/rank/1")).toBeUndefined();
    expect(first.workers.map((w) => w.name)).toEqual(["alice"]);
    // The refused worker can join under a free name.
    const bob = await rendezvous(b, { name: "bob", rank: 1, worldSize: undefined, address: addr(1) });
    expect(bob.workers.map((w) => w.name)).toEqual(["alice", "bob"]);
  });

  it("refuses a worker whose worldSize differs from the group's", async () => {
    const { clients } = await group(2);
    const ok = rendezvous(clients[0]!, { name: "a", rank: 0, worldSize: 2, address: addr(0), timeoutMs: 300 });
    const err = await rendezvous(clients[1]!, { name: "b", rank: 1, worldSize: 3, address: addr(1) }).catch((e) => e);
    expect(err).toBeInstanceOf(ValueError);
    expect(err.message).toMatch(/worldSize 3 but the group has 2/);
    await expect(ok).rejects.toThrow(RpcTimeoutError);
  });

  it("times out within 10% when the group never completes, naming the missing ranks", async () => {
    const { server, clients } = await group(2);
    const t0 = Date.now();
    // NB: c waits longer, so it is still registered when a gives up and lists who is there.
    const late = rendezvous(clients[1]!, { name: "c", rank: 2, worldSize: 4, address: addr(2), timeoutMs: 900 });
    const err = await rendezvous(clients[0]!, {
      name: "a",
      rank: 0,
      worldSize: 4,
      address: addr(0),
      timeoutMs: 600,
    }).catch((e) => e);
    const dt = Date.now() - t0;
    await expect(late).rejects.toThrow(RpcTimeoutError);
    expect(err).toBeInstanceOf(RpcTimeoutError);
    expect(err.message).toMatch(/2 of 4 workers registered, rank\(s\) 1, 3 missing/);
    expect(dt).toBeGreaterThanOrEqual(595);
    expect(dt).toBeLessThan(600 + 150); // NB: 10% or 150 ms of scheduling slack, whichever is more
    // Their claims were released: the group can still assemble, with the same names.
    const again = await Promise.all(
      [0, 1, 2, 3].map((rank) =>
        StoreClient.connect({ host: "127.0.0.1", port: server.port, secret: SECRET, timeoutMs: 5_000 }).then((c) => {
          cleanup.push(() => c.close());
          return rendezvous(c, { name: ["a", "b", "c", "d"][rank]!, rank, worldSize: 4, address: addr(rank) });
        }),
      ),
    );
    expect(again[3]!.workers.map((w) => w.name)).toEqual(["a", "b", "c", "d"]);
  });

  it("dynamic groups: members at once, joins and leaves seen by the others", async () => {
    const { clients } = await group(3);
    const m0 = await rendezvous(clients[0]!, { name: "m", rank: 0, worldSize: undefined, address: addr(0) });
    expect(m0.dynamic).toBe(true);
    expect(m0.workers.map((w) => w.name)).toEqual(["m"]);
    const events: string[] = [];
    m0.onJoin((w) => events.push(`join ${w.name}@${w.port}`));
    m0.onLeave((w) => events.push(`leave ${w.name}`));
    const m1 = await rendezvous(clients[1]!, { name: "x", rank: 7, worldSize: undefined, address: addr(7) });
    expect(m1.workers.map((w) => w.name)).toEqual(["m", "x"]);
    const seen1: string[] = [];
    m1.onJoin((w) => seen1.push(w.name));
    const m2 = await rendezvous(clients[2]!, { name: "y", rank: 3, worldSize: undefined, address: addr(3) });
    expect(m2.workers.map((w) => w.id)).toEqual([0, 3, 7]);
    await until(() => events.length === 2 && seen1.length === 1);
    await m1.leave();
    await m1.leave();
    await until(() => events.length === 3);
    expect(events).toEqual([`join x@${addr(7).port}`, `join y@${addr(3).port}`, "leave x"]);
    expect(m0.workers.map((w) => w.name)).toEqual(["m", "y"]);
    await until(() => m2.workers.length === 2);
    // The name and rank are free again.
    const back = await rendezvous(clients[1]!, { name: "x", rank: 7, worldSize: undefined, address: addr(7) });
    expect(back.workers.map((w) => w.name)).toEqual(["m", "y", "x"]); // by rank: 0, 3, 7
  });
});

describe("barrier", () => {
  it("is reusable: nobody passes round r before all arrived, and old generations are cleaned up", async () => {
    const { server, clients } = await group(3);
    const arrived = [0, 0, 0, 0, 0];
    const passedEarly: string[] = [];
    await Promise.all(
      clients.map(async (c, i) => {
        for (let r = 0; r < 5; r++) {
          await new Promise((res) => setTimeout(res, (i * 7 + r * 3) % 20));
          arrived[r]!++;
          const gen = await barrier(c, "rounds", 3, 3_000);
          expect(gen).toBe(r);
          if (arrived[r] !== 3) passedEarly.push(`worker ${i} round ${r}`);
        }
      }),
    );
    expect(passedEarly).toEqual([]);
    expect(server.peek("barrier/rounds/arrived")!.toString()).toBe("15");
    expect(server.numKeys).toBeLessThanOrEqual(3);
  });

  it("times out within 10% and says how many arrived", async () => {
    const { clients } = await group(2);
    const t0 = Date.now();
    const errs = await Promise.all(clients.map((c) => barrier(c, "short", 3, 500).catch((e) => e)));
    const dt = Date.now() - t0;
    for (const e of errs) {
      expect(e).toBeInstanceOf(RpcTimeoutError);
      expect(e.message).toMatch(/barrier "short" timed out after 500 ms: 2 of 3 workers arrived/);
    }
    expect(dt).toBeGreaterThanOrEqual(495);
    expect(dt).toBeLessThan(500 + 150); // NB: 10% or 150 ms of scheduling slack, whichever is more
  });
});

describe("rendezvous across processes", () => {
  // NB: Node 20 cannot run TypeScript; the children load the compiled module from dist/, which
  // test/global-setup.ts builds from the sources before any suite runs.
  const compiled = path.resolve("dist/sdk/rpc/rendezvous/index.js");

  function worker(env: Record<string, string>): Promise<{ code: number | null; out: string; err: string }> {
    const child = spawn(process.execPath, [path.resolve("test/rpc/fixtures/rendezvous_worker.mjs")], {
      env: { PATH: process.env.PATH!, TPRPC_RDZV_MODULE: compiled, ...env },
      stdio: ["ignore", "pipe", "pipe"],
    });
    cleanup.push(async () => void child.kill("SIGKILL"));
    let out = "";
    let err = "";
    child.stdout.on("data", (d) => (out += d));
    child.stderr.on("data", (d) => (err += d));
    return new Promise((resolve) => child.on("close", (code) => resolve({ code, out, err })));
  }

  it("3 child workers configured by the launcher env join an in-process rank 0 and pass a barrier", async () => {
    const server = await StoreServer.listen({ port: 0, secret: SECRET });
    cleanup.push(() => server.close());
    const env = { MASTER_ADDR: "127.0.0.1", MASTER_PORT: String(server.port), WORLD_SIZE: "4", TPRPC_SECRET: SECRET };
    // The children may register before the master: the group completes with whoever is last.
    const children = [1, 2, 3].map((r) => worker({ ...env, RANK: String(r), WORKER_NAME: `worker${r}` }));
    const master = await StoreClient.connect({
      host: "127.0.0.1",
      port: server.port,
      secret: SECRET,
      timeoutMs: 10_000,
    });
    cleanup.push(() => master.close());
    const m: Membership = await rendezvous(master, { name: "master", rank: 0, worldSize: 4, address: addr(0) });
    const atStart = m.workers.map((w) => w.name);
    await barrier(master, "done", 4, 10_000);
    const results = await Promise.all(children);
    const names = ["master", "worker1", "worker2", "worker3"];
    expect(atStart).toEqual(names);
    for (const [i, r] of results.entries()) {
      expect(r.code, r.err).toBe(0);
      const seen = JSON.parse(r.out) as { self: WorkerInfo; workers: WorkerInfo[] };
      expect(seen.self).toEqual({ name: `worker${i + 1}`, id: i + 1, host: "127.0.0.1", port: 40001 + i });
      expect(seen.workers.map((w) => w.name)).toEqual(names);
    }
    await until(() => m.workers.length === 1); // the children left
  });

  it("a child with the wrong secret is refused and never registers", async () => {
    const server = await StoreServer.listen({ port: 0, secret: SECRET });
    cleanup.push(() => server.close());
    const r = await worker({
      ...{ MASTER_ADDR: "127.0.0.1", MASTER_PORT: String(server.port), WORLD_SIZE: "2", RANK: "1" },
      ...{ TPRPC_SECRET: "not-the-secret", WORKER_NAME: "intruder" },
    });
    expect(r.code).toBe(3);
    expect(r.err).toMatch(new RegExp(`^${AuthenticationError.name}: .*group secret`));
    expect(server.numKeys).toBe(0);
  });
});
