/**
 * `tprpc launch`'s plan: which global ranks this launcher starts, where the group's store is, and
 * what each child gets in its environment — resolved from the command line, then from the variables
 * a cluster manager sets, as torchrun does.
 *
 * A "node" here is one launcher instance. Its index and the number of them come from, first found:
 * 1. --node-rank / --nnodes;
 * 2. Slurm: SLURM_PROCID / SLURM_NTASKS (one launcher per Slurm task; with one task per node these are
 *    SLURM_NODEID / SLURM_NNODES), SLURM_LOCALID for the local ranks;
 * 3. a launcher above us (torchrun, mpirun, a Kubernetes PyTorchJob): RANK / WORLD_SIZE / LOCAL_RANK;
 * 4. one node, index 0.
 * The store's address: --rdzv-endpoint HOST:PORT, else --master-addr / --master-port, else
 * MASTER_ADDR / MASTER_PORT, else (Slurm) the first host of SLURM_NODELIST; on one node 127.0.0.1;
 * the port defaults to 29500 (torchrun's).
 *
 * Child i of node n (i < nprocPerNode) is global rank n * nprocPerNode + i, and gets RANK, WORLD_SIZE,
 * LOCAL_RANK, LOCAL_WORLD_SIZE, GROUP_RANK, GROUP_WORLD_SIZE, MASTER_ADDR, MASTER_PORT,
 * TORCHELASTIC_RESTART_COUNT, TORCHELASTIC_MAX_RESTARTS (torchrun's set) and TPRPC_SECRET; with
 * --dynamic, WORLD_SIZE is empty (a dynamic group: a restarted child rejoins it).
 */
import { ValueError } from "../errors/index.js";

export interface LaunchFlags {
  nnodes?: string;
  nodeRank?: string;
  nprocPerNode?: string;
  masterAddr?: string;
  masterPort?: string;
  rdzvEndpoint?: string;
  maxRestarts?: string;
  iface?: string;
  tls?: string;
  graceMs?: string;
  worker?: boolean;
  noNode?: boolean;
  dynamic?: boolean;
  /** The script and its arguments (script mode). */
  command: string[];
}

export interface LaunchPlan {
  nnodes: number;
  nodeRank: number;
  nprocPerNode: number;
  /** LOCAL_RANK of the first child (several launchers on one host: SLURM_LOCALID / LOCAL_RANK × nprocPerNode). */
  localBase: number;
  masterAddr: string;
  masterPort: number;
  maxRestarts: number;
  /** ms between a forwarded signal (or a failure's SIGTERM) and SIGKILL. */
  graceMs: number;
  /** Script mode: the script (run with node unless noNode) and its arguments; worker mode: null. */
  command: string[] | null;
  noNode: boolean;
  /** A group without a fixed size: the children get no WORLD_SIZE (members join and leave at will). */
  dynamic: boolean;
  /** Set for the children when given (TPRPC_IFACE, TPRPC_TLS). */
  iface?: string;
  tls?: "off" | "auto" | "on";
  /** The group secret the children share; null: none given and several nodes (an error before this). */
  secret: string | null;
}

/** A whole number >= min from a flag or a variable, else a ValueError naming it. */
function whole(v: string | undefined, what: string, min: number): number | undefined {
  if (v === undefined || v === "") return undefined;
  const n = /^\s*[0-9]+\s*$/.test(v) ? Number(v) : NaN;
  if (!Number.isSafeInteger(n) || n < min)
    throw new ValueError(`${what} must be a whole number >= ${min}, got ${JSON.stringify(v)}`);
  return n;
}

/**
 * The first host of a Slurm host list: "node[07-09,12],gpu3" -> "node07"; "a,b" -> "a"; "n1" -> "n1".
 * NB: Slurm compresses runs of numbered names into brackets and keeps the digits' zero padding.
 */
export function firstSlurmHost(list: string): string {
  const s = list.trim();
  const m = /^([^,[]*)\[([^\]]+)\]/.exec(s);
  if (m) return m[1]! + m[2]!.split(",")[0]!.split("-")[0]!;
  return s.split(",")[0]!;
}

/** "HOST:PORT" or "[v6]:PORT". */
function parseEndpoint(v: string): { host: string; port?: string } {
  const m = /^(\[[^\]]+\]|[^:[\]]+)(?::([^:]*))?$/.exec(v);
  if (!m) throw new ValueError(`--rdzv-endpoint must be HOST:PORT, got ${JSON.stringify(v)}`);
  return { host: m[1]!.replace(/^\[|\]$/g, ""), port: m[2] };
}

function port(v: string, what: string): number {
  const n = whole(v, what, 1)!;
  if (n > 65535) throw new ValueError(`${what} must be a port in 1..65535, got ${JSON.stringify(v)}`);
  return n;
}

/** Resolves the plan; a ValueError says what is missing or wrong (the CLI prints it with the usage, exit 2). */
export function resolvePlan(f: LaunchFlags, env: NodeJS.ProcessEnv = process.env): LaunchPlan {
  if (f.worker && f.command.length > 0)
    throw new ValueError(`give either --worker or a script, not both (got --worker and "${f.command[0]}")`);
  if (!f.worker && f.command.length === 0) throw new ValueError("no script to run: give a script (or --worker)");
  if (f.worker && f.noNode) throw new ValueError("--no-node applies to a script, not to --worker");

  const slurm = env.SLURM_PROCID !== undefined && env.SLURM_NTASKS !== undefined;
  const above = !slurm && env.RANK !== undefined && env.WORLD_SIZE !== undefined;
  const nnodes =
    whole(f.nnodes, "--nnodes", 1) ??
    (slurm ? whole(env.SLURM_NTASKS, "SLURM_NTASKS", 1) : above ? whole(env.WORLD_SIZE, "WORLD_SIZE", 1) : 1)!;
  const nodeRank =
    whole(f.nodeRank, "--node-rank", 0) ??
    (slurm ? whole(env.SLURM_PROCID, "SLURM_PROCID", 0) : above ? whole(env.RANK, "RANK", 0) : 0)!;
  if (nodeRank >= nnodes)
    throw new ValueError(`the node rank ${nodeRank} is out of range for ${nnodes} node(s) (0..${nnodes - 1})`);
  const nprocPerNode = whole(f.nprocPerNode, "--nproc-per-node", 1) ?? 1;
  const localId =
    (slurm ? whole(env.SLURM_LOCALID, "SLURM_LOCALID", 0) : above ? whole(env.LOCAL_RANK, "LOCAL_RANK", 0) : 0) ?? 0;

  let masterAddr: string | undefined;
  let masterPort: number | undefined;
  if (f.rdzvEndpoint !== undefined) {
    if (f.masterAddr !== undefined || f.masterPort !== undefined)
      throw new ValueError("give either --rdzv-endpoint or --master-addr/--master-port, not both");
    const e = parseEndpoint(f.rdzvEndpoint);
    masterAddr = e.host;
    if (e.port !== undefined) masterPort = port(e.port, "the port of --rdzv-endpoint");
  }
  masterAddr ??=
    f.masterAddr || env.MASTER_ADDR || (slurm && env.SLURM_NODELIST ? firstSlurmHost(env.SLURM_NODELIST) : undefined);
  if (masterAddr === undefined) {
    if (nnodes > 1)
      throw new ValueError(
        `with ${nnodes} nodes every launcher needs the master's address: --master-addr HOST (or --rdzv-endpoint HOST:PORT, or MASTER_ADDR)`,
      );
    masterAddr = "127.0.0.1";
  }
  masterAddr = masterAddr.replace(/^\[|\]$/g, "");
  masterPort ??=
    f.masterPort !== undefined
      ? port(f.masterPort, "--master-port")
      : env.MASTER_PORT
        ? port(env.MASTER_PORT, "MASTER_PORT")
        : 29500;

  const secret = env.TPRPC_SECRET || null;
  if (secret === null && nnodes > 1)
    throw new ValueError(
      `with ${nnodes} nodes every launcher needs the same group secret: set TPRPC_SECRET (e.g. openssl rand -hex 32) on every node`,
    );
  let tls: LaunchPlan["tls"];
  if (f.tls !== undefined) {
    if (f.tls !== "off" && f.tls !== "auto" && f.tls !== "on")
      throw new ValueError(`--tls must be off, auto or on, got ${JSON.stringify(f.tls)}`);
    tls = f.tls;
  }
  if (f.iface !== undefined && !/^[A-Za-z0-9_.:@-]{1,15}$/.test(f.iface))
    throw new ValueError(`--iface must be a network interface name (e.g. eth0), got ${JSON.stringify(f.iface)}`);
  return {
    nnodes,
    nodeRank,
    nprocPerNode,
    localBase: localId * nprocPerNode,
    masterAddr,
    masterPort,
    maxRestarts: whole(f.maxRestarts, "--max-restarts", 0) ?? 0,
    graceMs: whole(f.graceMs, "--grace-ms", 0) ?? 5_000,
    command: f.worker ? null : f.command,
    noNode: f.noNode === true,
    dynamic: f.dynamic === true,
    iface: f.iface,
    tls,
    secret,
  };
}

/** The global rank of local child i. */
export function globalRank(plan: LaunchPlan, i: number): number {
  return plan.nodeRank * plan.nprocPerNode + i;
}

/** What child i gets on top of the launcher's environment (as torchrun sets, plus tprpc's own). */
export function childEnv(plan: LaunchPlan, i: number, secret: string, restarts: number): Record<string, string> {
  const env: Record<string, string> = {
    RANK: String(globalRank(plan, i)),
    WORLD_SIZE: String(plan.nnodes * plan.nprocPerNode),
    LOCAL_RANK: String(plan.localBase + i),
    LOCAL_WORLD_SIZE: String(plan.nprocPerNode),
    GROUP_RANK: String(plan.nodeRank),
    GROUP_WORLD_SIZE: String(plan.nnodes),
    ROLE_RANK: String(globalRank(plan, i)),
    ROLE_WORLD_SIZE: String(plan.nnodes * plan.nprocPerNode),
    MASTER_ADDR: plan.masterAddr,
    MASTER_PORT: String(plan.masterPort),
    TORCHELASTIC_RESTART_COUNT: String(restarts),
    TORCHELASTIC_MAX_RESTARTS: String(plan.maxRestarts),
    TPRPC_SECRET: secret,
  };
  // NB: an empty WORLD_SIZE is a dynamic group to initRpc (and it overrides one the launcher inherited)
  if (plan.dynamic) env.WORLD_SIZE = env.ROLE_WORLD_SIZE = "";
  if (plan.iface !== undefined) env.TPRPC_IFACE = plan.iface;
  if (plan.tls !== undefined) env.TPRPC_TLS = plan.tls;
  return env;
}
