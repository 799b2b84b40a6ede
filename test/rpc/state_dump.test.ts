/**
 * The state dump (sdk/rpc/state_dump.ts) that tells what each process of a hung group waits for:
 * in one process, the calls an agent waits on, the calls its peer serves and RRef forks waiting
 * for their owner; in a real worker with TPRPC_DEBUG=1, SIGUSR2 writes it to stderr.
 */
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { rpc } from "../../sdk/index.js";
import type { Agent } from "../../sdk/rpc/agent.js";
import { stateDump } from "../../sdk/rpc/state_dump.js";
import { freePort, startWorker } from "../e2e/workers.js";
import { inProcessGroup, stopInProcessGroup } from "./in_process.js";

/** Shipped: resolves after `ms`. */
const sleepFor = (ms: number): Promise<number> => new Promise((r) => setTimeout(() => r(ms), ms));

describe("state dump of agents in one process", () => {
  let a: Agent, b: Agent;
  beforeAll(async () => {
    [a, b] = await inProcessGroup(["a", "b"]);
    await a.call("b", sleepFor, [0]);
  }, 20_000);
  afterAll(() => stopInProcessGroup([a, b], false), 20_000);

  it("shows the call a waits on and the call b runs", async () => {
    const call = a.call("b", sleepFor, [300]);
    await new Promise((r) => setTimeout(r, 100));
    const dump = stateDump([a, b]);
    expect(dump).toMatch(/agent a\n(.*\n)*.*waits on call \d+ to b: call sleepFor, for \d+ ms/);
    expect(dump).toMatch(
      /agent b\n(.*\n)*.*serving: 1 call\(s\) running, 0 queued, 0 waiting for their RRef arguments/,
    );
    expect(dump).toMatch(/pipe to b: open, 0 message\(s\) waiting for their buffers/);
    await call;
    expect(stateDump([a])).not.toMatch(/waits on call/);
  });
});

describe("SIGUSR2 with TPRPC_DEBUG=1", () => {
  const SECRET = "state-dump-secret-0123456789";
  let child: ReturnType<typeof startWorker>;
  beforeAll(async () => {
    const port = await freePort();
    child = startWorker("worker1", 1, 2, port, { secret: SECRET, env: { TPRPC_DEBUG: "1" } });
    await rpc.initRpc("master", { rank: 0, worldSize: 2, initMethod: `tcp://127.0.0.1:${port}`, secret: SECRET });
    await rpc.rpcSync("worker1", sleepFor, [0]);
  }, 30_000);
  afterAll(async () => {
    await rpc.shutdown({ timeoutMs: 10_000 }).catch(() => undefined);
    if (child.exitCode === null && child.signalCode === null) child.kill("SIGKILL");
  });

  it("writes the worker's state to its stderr, and the worker goes on serving", async () => {
    let err = "";
    child.stderr!.on("data", (d: Buffer) => (err += d.toString()));
    const call = rpc.rpcAsync("worker1", sleepFor, [3_000]);
    // NB: one dump per signal; on a loaded machine the call may not have started at the first one
    const end = Date.now() + 2_500;
    while (!/serving: 1 call\(s\) running/.test(err) && Date.now() < end) {
      child.kill("SIGUSR2");
      await new Promise((r) => setTimeout(r, 250));
    }
    expect(err).toMatch(/\[tprpc:state\] agent worker1\n/);
    expect(err).toMatch(/serving: 1 call\(s\) running/);
    expect(await call).toBe(3_000);
  }, 30_000);
});
