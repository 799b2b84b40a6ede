#!/usr/bin/env -S node --initial-old-space-size=256
// NB: the shebang passes rpc.RPC_NODE_FLAGS (sdk/rpc/launcher.ts: fewer mark-compacts while tensors land in a
// small heap), as startLocalWorkers does for its workers; `node bin/tprpc.mjs` runs without it.
// The `tprpc` command. `tprpc worker --name worker1 --rank 1 --world-size 3 --init-method tcp://host:port`
// (or the env variables RANK, WORLD_SIZE, MASTER_ADDR, MASTER_PORT, TPRPC_SECRET) joins a group,
// serves calls until the group shuts down, and exits when its master goes away.
//
// `-h` / `--help` prints the usage on stdout, exit 0; no command prints it on stderr, exit 2 (as npm, git
// and argparse-style tools); a mistake on the command line (an unknown command or option, a missing or
// invalid value) is one line naming it plus the usage on stderr, exit 2. The SDK is loaded only once the
// command line is valid.
import fs from "node:fs";
import { parseArgs } from "node:util";

const USAGE = `usage: tprpc worker --name NAME [--rank R] [--world-size N] [--init-method URL]`;

const HELP = `${USAGE}

commands:
  worker      join an RPC group as a worker and serve its calls (tprpc worker --help)
  launch      start this node's processes of a group, as torchrun (tprpc launch --help)

options:
  -h, --help  print this help and exit
  --version   print tprpc's version and exit
`;

const WORKER_HELP = `${USAGE}

Joins an RPC group as worker NAME and serves calls until the group shuts down (in a group without a
world size, until SIGTERM), then exits 0; exits 1 when the group's master goes away.

options:
  --name NAME        this worker's name (env TPRPC_WORKER_NAME)
  --rank R           its rank: 0 is the master, the others 1, 2, ... (env RANK)
  --world-size N     the number of workers, the master included; unset: join a dynamic group (env WORLD_SIZE)
  --init-method URL  the store's address: tcp://HOST:PORT, or env:// (the default) for the env variables
                     MASTER_ADDR and MASTER_PORT
  -h, --help         print this help and exit

env: TPRPC_SECRET, the group's secret (every worker but the master needs the master's)
`;

/** A command line that cannot be run: the message names what was wrong; exit 2 with the usage. */
class UsageError extends Error {}

/**
 * util.parseArgs, with its errors (unknown option, missing value, stray argument) as one-line UsageErrors.
 * NB: parsed non-strict with tokens, so that `-h` / `--help` wins over any other mistake, as in argparse.
 */
function parse(args, options) {
  const { values, tokens } = parseArgs({
    args,
    options: { ...options, help: { type: "boolean", short: "h" } },
    strict: false,
    allowPositionals: true,
    tokens: true,
  });
  if (values.help === true) return { help: true, values };
  for (const t of tokens) {
    if (t.kind === "positional") throw new UsageError(`unexpected argument "${t.value}"`);
    if (t.kind !== "option") continue;
    const o = options[t.name];
    if (!o) throw new UsageError(`unknown option ${t.rawName}`);
    // NB: `--name --rank 1` takes "--rank" as the name; refuse it, as parseArgs' strict mode does.
    if (o.type === "string" && (t.value === undefined || (!t.inlineValue && /^(--|-h$)/.test(t.value))))
      throw new UsageError(`${t.rawName} needs a value`);
    if (o.type === "boolean" && t.inlineValue) throw new UsageError(`${t.rawName} takes no value`);
  }
  return { help: false, values };
}

/** An integer flag's value: digits only, at least `min`. */
function integer(flag, v, min) {
  if (v === undefined) return undefined;
  const n = /^[0-9]+$/.test(v) ? Number(v) : NaN;
  if (!Number.isSafeInteger(n) || n < min)
    throw new UsageError(`${flag} must be a ${min ? "positive" : "non-negative"} integer, got ${JSON.stringify(v)}`);
  return n;
}

/** --init-method: "env://" or "tcp://HOST:PORT" (the SDK checks the host; the port is checked here). */
function initMethod(v) {
  if (v === undefined || v === "env://") return v;
  const m = /^tcp:\/\/(\[[^\]\s]+\]|[^\s:/[\]?#@]+):([0-9]+)\/?$/.exec(v);
  const port = m ? Number(m[2]) : 0;
  if (!m || port < 1 || port > 65535)
    throw new UsageError(`--init-method must be tcp://HOST:PORT (port 1..65535) or env://, got ${JSON.stringify(v)}`);
  return v;
}

async function worker(argv) {
  const { help, values } = parse(argv, {
    name: { type: "string" },
    rank: { type: "string" },
    "world-size": { type: "string" },
    "init-method": { type: "string" },
  });
  if (help) {
    process.stdout.write(WORKER_HELP);
    process.exit(0);
  }
  const name = values.name ?? process.env.TPRPC_WORKER_NAME;
  if (!name) throw new UsageError("--name is required (or the env variable TPRPC_WORKER_NAME)");
  const options = {
    rank: integer("--rank", values.rank, 0),
    worldSize: integer("--world-size", values["world-size"], 1),
    initMethod: initMethod(values["init-method"]),
  };
  if (options.rank !== undefined && options.worldSize !== undefined && options.rank >= options.worldSize)
    throw new UsageError(
      `--rank ${options.rank} is out of range for --world-size ${options.worldSize} (ranks 0..${options.worldSize - 1})`,
    );
  if (options.rank === undefined && !process.env.RANK)
    throw new UsageError("--rank is required (or the env variable RANK)");

  const { rpc, TprpcError } = await import("../dist/sdk/index.js");
  // NB: a notebook's interrupt signals the kernel's whole process group; workers keep serving.
  process.on("SIGINT", () => {});
  try {
    await rpc.initRpc(name, options);
  } catch (e) {
    // NB: the SDK's own errors (a bad env variable, rank out of range, no store) are one line; a bug keeps its stack.
    if (e instanceof TprpcError) {
      console.error(`tprpc worker: ${e.name}: ${e.message}`);
      process.exit(1);
    }
    throw e;
  }
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

function main(argv) {
  const [cmd, ...rest] = argv;
  if (cmd === "worker") return worker(rest);
  // NB: launch parses its own command line (usage errors: one line + usage, exit 2) and returns its exit code
  if (cmd === "launch")
    return import("../dist/sdk/cluster/launch_cli.js").then(async (m) => process.exit(await m.launchMain(rest)));
  if (cmd !== undefined && !cmd.startsWith("-")) throw new UsageError(`unknown command "${cmd}"`);
  const { help, values } = parse(argv, { version: { type: "boolean" } });
  if (help) process.stdout.write(HELP);
  else if (values.version)
    process.stdout.write(
      `${JSON.parse(fs.readFileSync(new URL("../package.json", import.meta.url), "utf8")).version}\n`,
    );
  else process.stderr.write(`${USAGE}\n(tprpc --help for more)\n`);
  process.exit(help || values.version ? 0 : 2);
}

const argv = process.argv.slice(2);
const where = argv[0] === "worker" ? "tprpc worker" : "tprpc";
Promise.resolve()
  .then(() => main(argv))
  .catch((e) => {
    if (e instanceof UsageError) {
      console.error(`${where}: ${e.message}\n${USAGE}`);
      process.exit(2);
    }
    console.error(`${where}: ${e?.stack ?? e}`);
    process.exit(1);
  });
