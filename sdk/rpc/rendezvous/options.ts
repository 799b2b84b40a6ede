/**
 * `initRpc`'s rendezvous options, validated into one config: who this worker
 * is (name, rank), how big the group is (worldSize, or undefined for dynamic
 * membership), where the store lives (host, port) and the group's secret.
 *
 * Sources, first found wins per field:
 * 1. `options` (rank, worldSize, initMethod, secret, rpcTimeoutMs);
 * 2. the launcher's env variables RANK, WORLD_SIZE, MASTER_ADDR, MASTER_PORT
 *    (torchrun, Slurm, Kubernetes and mpirun set them) and TPRPC_SECRET.
 * `initMethod: "tcp://host:port"` names the store directly; `"env://"` (the
 * default) reads MASTER_ADDR and MASTER_PORT, as PyTorch does.
 *
 * Device maps (`deviceMaps`, `devices`; see ../device_map.ts) are validated
 * here too: syntax, one-to-one, and that source devices exist on this machine.
 *
 * The secret: rank 0 generates one when none is given (`secretGenerated`),
 * and whoever starts the other workers passes it on as TPRPC_SECRET; a worker
 * of rank > 0 without one cannot join, so that is an error here.
 */
import { ValueError } from "../../errors/index.js";
import { generateSecret } from "../../transport/auth.js";
import { cuda, type Device } from "../../tensor/device.js";
import { MAX_TIMER_MS } from "../timeouts.js";
import {
  type DeviceMap,
  type DeviceMapInitOptions,
  checkLocalDevices,
  parseDeviceMaps,
  parseDevices,
} from "../device_map.js";

/** The rendezvous part of `initRpc`'s options. */
export interface RendezvousInitOptions extends DeviceMapInitOptions {
  rank?: number;
  /** Number of workers; undefined means dynamic membership (workers join and leave later). */
  worldSize?: number;
  /** "tcp://host:port" (IPv4, [IPv6] or a hostname) or "env://" (MASTER_ADDR/MASTER_PORT). */
  initMethod?: string;
  /** The group secret; defaults to env TPRPC_SECRET, and rank 0 generates one when neither is set. */
  secret?: string;
  /** Default timeout of every RPC in ms (0 = none). Default 60 000. */
  rpcTimeoutMs?: number;
  /** Bound on connecting to the store and waiting for the group to assemble, in ms. Default 60 000. */
  initTimeoutMs?: number;
}

/** The validated config. */
export interface InitConfig {
  name: string;
  rank: number;
  /** undefined: dynamic membership. */
  worldSize: number | undefined;
  /** The store's address (rank 0 hosts it). */
  host: string;
  port: number;
  /** Normalized "tcp://host:port" (IPv6 in brackets). */
  initMethod: string;
  secret: string;
  /** True when rank 0 generated the secret: pass it to the other workers as TPRPC_SECRET. */
  secretGenerated: boolean;
  rpcTimeoutMs: number;
  initTimeoutMs: number;
  /** Validated device maps, by callee (empty: CPU tensors only). */
  deviceMaps: ReadonlyMap<string, DeviceMap>;
  /** Local CUDA devices the agent uses (empty: those in the maps). */
  devices: readonly Device[];
}

export const DEFAULT_RPC_TIMEOUT_MS = 60_000;
export const DEFAULT_INIT_TIMEOUT_MS = 60_000;
const NAME = /^[A-Za-z0-9_.-]+$/;
/** As PyTorch's WorkerInfo: longer names are refused (RRef and fork ids embed the name, and must decode). */
export const MAX_NAME_LENGTH = 128;

/** Parses "tcp://host:port"; the host may be IPv4, a hostname or a bracketed IPv6 address. */
export function parseTcpUrl(url: string): { host: string; port: number } {
  const m = /^tcp:\/\/(\[[0-9A-Fa-f:.%\w]+\]|[^\s:/[\]?#@]+):([0-9]+)\/?$/.exec(url);
  if (!m)
    throw new ValueError(
      `initMethod "${url}" is not of the form "tcp://host:port" (e.g. "tcp://127.0.0.1:29500", "tcp://[::1]:29500")`,
    );
  const host = m[1]!.startsWith("[") ? m[1]!.slice(1, -1) : m[1]!;
  return { host, port: parsePort(m[2]!, `the port in initMethod "${url}"`) };
}

function parsePort(s: string | number, what: string): number {
  const port = typeof s === "number" ? s : /^[0-9]+$/.test(s) ? Number(s) : NaN;
  if (!Number.isInteger(port) || port < 1 || port > 65535)
    throw new ValueError(`${what} must be an integer in 1..65535, got ${JSON.stringify(s)}`);
  return port;
}

function parseInt(v: number | string, what: string, hint: string): number {
  const n = typeof v === "number" ? v : /^\s*-?[0-9]+\s*$/.test(v) ? Number(v) : NaN;
  if (!Number.isSafeInteger(n)) throw new ValueError(`${what} must be an integer, got ${JSON.stringify(v)}; ${hint}`);
  return n;
}

function parseTimeout(v: number | undefined, dflt: number, what: string, allowZero: boolean, max: number): number {
  if (v === undefined) return dflt;
  if (typeof v !== "number" || !Number.isFinite(v) || v < 0 || (!allowZero && v === 0) || v > max)
    throw new ValueError(
      `${what} must be a number of milliseconds in ${allowZero ? "0" : "1"}..${max}${allowZero ? " (0 = none)" : ""}, got ${String(v)}`,
    );
  return v;
}

/** Formats host and port as an initMethod URL (brackets around IPv6). */
export function formatTcpUrl(host: string, port: number): string {
  return `tcp://${host.includes(":") ? `[${host}]` : host}:${port}`;
}

/**
 * Validates `initRpc(name, options)`'s rendezvous fields against the env and
 * returns the config. Throws ValueError saying what to set.
 */
export function parseInitOptions(
  name: string,
  options: RendezvousInitOptions = {},
  env: NodeJS.ProcessEnv = process.env,
): InitConfig {
  if (typeof name !== "string" || !NAME.test(name))
    throw new ValueError(
      `worker name ${JSON.stringify(name)} is invalid: give a non-empty name of letters, digits, "_", "." and "-" (e.g. "worker1")`,
    );
  if (name.length > MAX_NAME_LENGTH)
    throw new ValueError(
      `worker name "${name.slice(0, 20)}…" is ${name.length} characters long; worker names are at most ${MAX_NAME_LENGTH} characters`,
    );

  const rankSrc = options.rank ?? env.RANK;
  if (rankSrc === undefined || rankSrc === "")
    throw new ValueError(`no rank for worker "${name}": pass options.rank or set the env variable RANK`);
  const rank = parseInt(rankSrc, "rank", "pass options.rank or set RANK to 0 for the master, 1, 2, ... for the others");
  if (rank < 0) throw new ValueError(`rank must be >= 0, got ${rank}`);

  const wsSrc = options.worldSize ?? (env.WORLD_SIZE === "" ? undefined : env.WORLD_SIZE);
  let worldSize: number | undefined;
  if (wsSrc !== undefined) {
    worldSize = parseInt(wsSrc, "worldSize", "pass options.worldSize or set WORLD_SIZE (leave both unset for dynamic)");
    if (worldSize < 1) throw new ValueError(`worldSize must be >= 1, got ${worldSize}`);
    if (rank >= worldSize)
      throw new ValueError(`rank ${rank} is out of range for worldSize ${worldSize}: ranks are 0..${worldSize - 1}`);
  }

  const method = options.initMethod ?? "env://";
  let host: string;
  let port: number;
  if (method === "env://") {
    const addr = env.MASTER_ADDR;
    const p = env.MASTER_PORT;
    if (!addr || !p)
      throw new ValueError(
        `no store address: pass options.initMethod ("tcp://host:port") or set the env variables MASTER_ADDR and MASTER_PORT` +
          ` (missing: ${[!addr && "MASTER_ADDR", !p && "MASTER_PORT"].filter(Boolean).join(", ")})`,
      );
    host = addr.startsWith("[") && addr.endsWith("]") ? addr.slice(1, -1) : addr;
    port = parsePort(p, "MASTER_PORT");
  } else if (typeof method === "string" && method.startsWith("tcp://")) {
    ({ host, port } = parseTcpUrl(method));
  } else {
    throw new ValueError(
      `initMethod ${JSON.stringify(method)} is not supported: use "tcp://host:port" or "env://" (MASTER_ADDR, MASTER_PORT)`,
    );
  }

  let secret = options.secret ?? env.TPRPC_SECRET;
  let secretGenerated = false;
  if (secret === undefined || secret === "") {
    if (rank !== 0)
      throw new ValueError(
        `worker "${name}" (rank ${rank}) has no group secret: set the env variable TPRPC_SECRET or options.secret to the master's secret`,
      );
    secret = generateSecret();
    secretGenerated = true;
  }
  if (typeof secret !== "string") throw new ValueError("options.secret must be a string");

  const deviceMaps = parseDeviceMaps(name, options.deviceMaps);
  const devices = parseDevices(options.devices);
  if (deviceMaps.size > 0 || devices.length > 0)
    checkLocalDevices(name, deviceMaps, devices, cuda.deviceCount(), cuda.unavailableReason());

  return {
    name,
    rank,
    worldSize,
    host,
    port,
    initMethod: formatTcpUrl(host, port),
    secret,
    secretGenerated,
    rpcTimeoutMs: parseTimeout(
      options.rpcTimeoutMs,
      DEFAULT_RPC_TIMEOUT_MS,
      "rpcTimeoutMs",
      true,
      Number.MAX_SAFE_INTEGER,
    ),
    initTimeoutMs: parseTimeout(options.initTimeoutMs, DEFAULT_INIT_TIMEOUT_MS, "initTimeoutMs", false, MAX_TIMER_MS),
    deviceMaps,
    devices,
  };
}
