/**
 * The command line of `tprpc launch` (bin/tprpc.mjs dispatches here): parses the flags torchrun
 * users know (both `--nproc-per-node` and torchrun's `--nproc_per_node` spellings), then runs
 * ./launch.ts. Everything after the script is the script's own arguments.
 *
 * As the rest of the CLI: -h / --help prints the help on stdout, exit 0; a mistake (an unknown flag, a
 * missing or invalid value, no script) is one line naming it plus the usage on stderr, exit 2.
 */
import { ValueError } from "../errors/index.js";
import { runLaunch } from "./launch.js";
import { type LaunchFlags, resolvePlan } from "./launch_plan.js";

export const LAUNCH_USAGE =
  "usage: tprpc launch [--nnodes N] [--node-rank R] [--nproc-per-node P] [--master-addr HOST --master-port PORT | --rdzv-endpoint HOST:PORT] [--max-restarts K] (--worker | SCRIPT [ARGS...])";

export const LAUNCH_HELP = `${LAUNCH_USAGE}

Starts this node's processes of a group, as torchrun: child i of node R is rank R * P + i of a group of
N * P, with RANK, WORLD_SIZE, LOCAL_RANK, LOCAL_WORLD_SIZE, GROUP_RANK, MASTER_ADDR, MASTER_PORT,
TORCHELASTIC_RESTART_COUNT and TPRPC_SECRET set. Rank 0 hosts the group's store at the master address.
Exits 0 when every child did; else with the first failure's code (128 + N for signal N).

options:
  --nnodes N            launchers (nodes) in the group (default 1; Slurm: SLURM_NTASKS; else WORLD_SIZE)
  --node-rank R         this launcher's index, 0..N-1 (default 0; Slurm: SLURM_PROCID; else RANK)
  --nproc-per-node P    processes this launcher starts (default 1)
  --master-addr HOST    the host of rank 0, where the store listens (default MASTER_ADDR; Slurm: the first
                        host of SLURM_NODELIST; one node: 127.0.0.1)
  --master-port PORT    the store's port (default MASTER_PORT, else 29500)
  --rdzv-endpoint H:P   the same two as one value
  --max-restarts K      start a failed child again, up to K times in all (default 0)
  --worker              run \`tprpc worker --name worker<RANK>\` children instead of a script
  --no-node             run SCRIPT as an executable, not with node
  --dynamic             a group without a fixed size: WORLD_SIZE is left empty, members join and leave at
                        will, and a restarted child rejoins it (rpc.onWorkerJoin / onWorkerLeave)
  --iface NAME          advertise the address of this network interface (TPRPC_IFACE for the children)
  --tls off|auto|on     encryption between hosts (TPRPC_TLS for the children; default auto)
  --grace-ms MS         after a forwarded signal or a failure, SIGKILL the children still alive after MS
                        (default 5000)
  -h, --help            print this help and exit

SIGINT, SIGTERM and SIGHUP are forwarded to the children; no child outlives the launcher.
env: TPRPC_SECRET, the group secret (required with several nodes: the same value everywhere).
`;

type Key = Exclude<keyof LaunchFlags, "command">;
const VALUED: Record<string, Key> = {
  nnodes: "nnodes",
  "node-rank": "nodeRank",
  "nproc-per-node": "nprocPerNode",
  "master-addr": "masterAddr",
  "master-port": "masterPort",
  "rdzv-endpoint": "rdzvEndpoint",
  "max-restarts": "maxRestarts",
  iface: "iface",
  tls: "tls",
  "grace-ms": "graceMs",
};
const BOOLEAN: Record<string, Key> = { worker: "worker", "no-node": "noNode", dynamic: "dynamic" };

/** A command line that cannot be run: exit 2 with the usage. */
export class LaunchUsageError extends ValueError {}

/** Parses the flags up to the script; returns null for --help. */
export function parseLaunchArgs(argv: readonly string[]): LaunchFlags | null {
  const flags: LaunchFlags = { command: [] };
  const seen = new Set<string>();
  let i = 0;
  // NB: --help anywhere before the script wins over any other mistake, as in argparse
  for (let j = 0; j < argv.length; j++) {
    const a = argv[j]!;
    if (a === "-h" || a === "--help") return null;
    if (a === "--" || !a.startsWith("-")) break;
    if (!a.includes("=") && VALUED[a.replace(/^--?/, "").replace(/_/g, "-")]) j++;
  }
  for (; i < argv.length; i++) {
    const a = argv[i]!;
    if (a === "--") {
      i++;
      break;
    }
    if (!a.startsWith("-") || a === "-") break;
    const eq = a.indexOf("=");
    const raw = eq >= 0 ? a.slice(0, eq) : a;
    const name = raw.replace(/^--?/, "").replace(/_/g, "-");
    const bool = BOOLEAN[name];
    const valued = VALUED[name];
    if (!raw.startsWith("--") || (!bool && !valued)) throw new LaunchUsageError(`unknown option ${raw}`);
    if (seen.has(name)) throw new LaunchUsageError(`${raw} is given twice`);
    seen.add(name);
    if (bool) {
      if (eq >= 0) throw new LaunchUsageError(`${raw} takes no value`);
      (flags as unknown as Record<string, boolean>)[bool] = true;
      continue;
    }
    let v: string | undefined;
    if (eq >= 0) v = a.slice(eq + 1);
    else {
      v = argv[i + 1];
      if (v === undefined || v.startsWith("--")) throw new LaunchUsageError(`${raw} needs a value`);
      i++;
    }
    (flags as unknown as Record<string, string>)[valued!] = v;
  }
  flags.command = argv.slice(i);
  return flags;
}

/** Runs `tprpc launch ARGV`; resolves with the process's exit code. */
export async function launchMain(argv: readonly string[]): Promise<number> {
  let plan;
  try {
    const flags = parseLaunchArgs(argv);
    if (flags === null) {
      process.stdout.write(LAUNCH_HELP);
      return 0;
    }
    plan = resolvePlan(flags);
  } catch (e) {
    if (!(e instanceof ValueError)) throw e;
    process.stderr.write(`tprpc launch: ${e.message}\n${LAUNCH_USAGE}\n`);
    return 2;
  }
  return runLaunch(plan);
}
