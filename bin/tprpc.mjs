#!/usr/bin/env node
// The `tprpc` command. `tprpc worker --name worker1 --rank 1 --world-size 3 --init-method tcp://host:port`
// (or the env variables RANK, WORLD_SIZE, MASTER_ADDR, MASTER_PORT, TPRPC_SECRET) joins a group,
// serves calls until the group shuts down, and exits when its master goes away.
import { parseArgs } from "node:util";

const usage = `usage: tprpc worker --name NAME [--rank R] [--world-size N] [--init-method tcp://HOST:PORT]
  (env: RANK, WORLD_SIZE, MASTER_ADDR, MASTER_PORT, TPRPC_SECRET; TPRPC_WORKER_NAME for --name)`;

async function worker(argv) {
  const { values } = parseArgs({
    args: argv,
    options: {
      name: { type: "string" },
      rank: { type: "string" },
      "world-size": { type: "string" },
      "init-method": { type: "string" },
    },
  });
  const name = values.name ?? process.env.TPRPC_WORKER_NAME;
  if (!name) throw new Error(`--name is required\n${usage}`);
  const { rpc } = await import("../dist/sdk/index.js");
  // NB: a notebook's interrupt signals the kernel's whole process group; workers keep serving.
  process.on("SIGINT", () => {});
  await rpc.initRpc(name, {
    rank: values.rank === undefined ? undefined : Number(values.rank),
    worldSize: values["world-size"] === undefined ? undefined : Number(values["world-size"]),
    initMethod: values["init-method"],
  });
  rpc.currentAgent()?.onGroupLost(() => {
    console.error(`tprpc worker ${name}: lost the connection to the group's master; exiting`);
    process.exit(1);
  });
  if (rpc.currentAgent()?.membership.dynamic) {
    // A dynamic group has no shutdown barrier: serve until SIGTERM, then leave gracefully.
    await new Promise((resolve) => process.once("SIGTERM", resolve));
    await rpc.shutdown({ graceful: true, timeoutMs: 30_000 });
  } else {
    // Serve until every worker (the master included) calls shutdown.
    await rpc.shutdown({ graceful: true, timeoutMs: 2 ** 31 - 1 });
  }
  process.exit(0);
}

const [cmd, ...rest] = process.argv.slice(2);
if (cmd !== "worker") {
  console.error(usage);
  process.exit(2);
}
worker(rest).catch((e) => {
  console.error(`tprpc worker: ${e?.stack ?? e}`);
  process.exit(1);
});
