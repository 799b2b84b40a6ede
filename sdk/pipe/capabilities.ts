/**
 * What this process tells a peer when a pipe connects (sdk/channel/interface.ts,
 * `Capabilities`): its host identity — boot id and namespace inodes decide
 * whether two processes share a kernel, IPC and PID space — its devices, and
 * the adverts of the viable channels it allows.
 */
import fs from "node:fs";
import os from "node:os";
import { ChannelNotViableError } from "../errors/index.js";
import { getChannel, registeredChannels, viableChannels } from "../channel/index.js";
import type { Capabilities, ChannelAdvert, ChannelDeviceType, HostIdentity } from "../channel/interface.js";
import { CAPABILITIES_VERSION } from "./negotiate.js";

const NAMESPACES = ["ipc", "pid", "user", "net", "mnt", "uts"];

function readTrim(path: string): string {
  try {
    return fs.readFileSync(path, "utf8").trim();
  } catch {
    return "";
  }
}

let identity: HostIdentity | null = null;

/** This process's identity (read once; /proc missing on non-Linux gives empty fields). */
export function hostIdentity(): HostIdentity {
  if (identity && identity.pid === process.pid) return identity;
  const namespaces: Record<string, string> = {};
  for (const ns of NAMESPACES) {
    try {
      const m = /\[(\d+)\]/.exec(fs.readlinkSync(`/proc/self/ns/${ns}`));
      if (m) namespaces[ns] = m[1]!;
    } catch {
      // NB: unreadable namespaces (no /proc, hardened containers): same-host channels then compare ""
    }
  }
  identity = {
    hostname: os.hostname(),
    bootId: readTrim("/proc/sys/kernel/random/boot_id"),
    namespaces,
    pid: process.pid,
    uid: typeof process.geteuid === "function" ? process.geteuid() : -1,
  };
  return identity;
}

/**
 * Checks a forced channel list against the registry: every name must be
 * registered and viable here. Throws ChannelNotViableError saying why not.
 */
export function checkAllowedChannels(allowed: readonly string[] | null): void {
  if (!allowed) return;
  for (const name of allowed) {
    const ctx = getChannel(name);
    if (!ctx)
      throw new ChannelNotViableError(
        `channel "${name}" (options.channels / TPRPC_CHANNELS) is not registered in this process; ` +
          `known: ${viableChannels()
            .map((c) => c.name)
            .join(", ")}`,
      );
    let ok = false;
    try {
      ok = ctx.isViable();
    } catch {
      ok = false;
    }
    if (!ok)
      throw new ChannelNotViableError(
        `channel "${name}" is not viable here${ctx.whyNotViable ? `: ${ctx.whyNotViable() ?? ""}` : ""}; ` +
          "remove it from options.channels / TPRPC_CHANNELS",
      );
  }
}

/** The capabilities this worker offers peers. */
export function localCapabilities(
  name: string,
  allowed: readonly string[] | null,
  devices: Readonly<Record<ChannelDeviceType, number>>,
): Capabilities {
  const host = hostIdentity();
  const channels: ChannelAdvert[] = [];
  // NB: filter by name before asking isViable(): probing a channel may load a library (UCX, CUDA)
  const candidates = allowed ? registeredChannels().filter((c) => allowed.includes(c.name)) : registeredChannels();
  for (const ctx of candidates) {
    let viable = false;
    try {
      viable = ctx.isViable();
    } catch {
      viable = false;
    }
    if (!viable) continue;
    try {
      const ad = ctx.advertise(host, devices);
      if (ad) channels.push(ad);
    } catch {
      // NB: a context whose advert fails is treated as not viable for this pipe
    }
  }
  return { version: CAPABILITIES_VERSION, name, host, devices: { ...devices, cpu: 1 }, channels };
}
