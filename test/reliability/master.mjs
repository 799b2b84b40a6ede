// A master in a process of its own, for kill.test.ts (which SIGKILLs it). Runs the compiled SDK in dist/,
// as workers do. `node master.mjs launcher` starts 3 workers with rpc.startLocalWorkers (each watches its
// stdin pipe from here); `node master.mjs manual` spawns 3 `tprpc worker` processes by hand, stdin closed,
// as on other machines, so only the store connection tells them the master is gone. Once the group has
// met, every worker has answered a call and has a long call running for the master, it prints one line
//   READY {"master": pid, "workers": [pid, pid, pid]}
// and waits to be killed.
import { spawn } from "node:child_process";
import { rpc } from "../../dist/sdk/index.js";
import { freePort, workerArgs } from "../../dist/sdk/rpc/launcher.js";

const mode = process.argv[2];
const secret = "reliability-master-secret-0123456789";
const names = ["worker1", "worker2", "worker3"];
let pids;
if (mode === "launcher") {
  const cluster = await rpc.startLocalWorkers({ workers: names, secret, stdio: "inherit" });
  pids = cluster.workers.map((w) => w.pid);
  await rpc.initRpc("master", { ...cluster.initOptions, initTimeoutMs: 30_000 });
} else if (mode === "manual") {
  const initMethod = `tcp://127.0.0.1:${await freePort()}`;
  const children = names.map((n, i) =>
    spawn(process.execPath, workerArgs(n, i + 1, names.length + 1, initMethod), {
      env: { ...process.env, TPRPC_SECRET: secret },
      stdio: ["ignore", "inherit", "inherit"],
    }),
  );
  pids = children.map((c) => c.pid);
  await rpc.initRpc("master", { rank: 0, worldSize: names.length + 1, initMethod, secret, initTimeoutMs: 30_000 });
} else {
  console.error("usage: node master.mjs launcher|manual");
  process.exit(2);
}
const served = await Promise.all(names.map((n) => rpc.rpcSync(n, () => process.pid)));
if (served.join() !== pids.join()) throw new Error(`worker pids ${served} are not the spawned ${pids}`);
for (const n of names)
  rpc.rpcAsync(n, () => new Promise((r) => setTimeout(r, 120_000)), [], { timeoutMs: 0 }).catch(() => undefined);
// NB: the long calls are on the wire once a short call after them returns (one pipe per peer, in order)
await Promise.all(names.map((n) => rpc.rpcSync(n, () => 0)));
process.stdout.write(`READY ${JSON.stringify({ master: process.pid, workers: pids })}\n`);
setInterval(() => undefined, 1 << 30);
