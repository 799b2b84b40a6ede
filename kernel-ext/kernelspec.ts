/**
 * Jupyter kernelspecs for the tprpc kernel, written and removed without any
 * Python tooling: a kernelspec is a folder `<data dir>/kernels/<name>/` holding
 * kernel.json, whose argv starts this Node (its absolute path) on this
 * package's `tprpc-kernel kernel` command.
 *
 * Where (as jupyter_core's paths, Linux and macOS):
 * - per user (default): $JUPYTER_DATA_DIR, else ~/Library/Jupyter on macOS, else
 *   $XDG_DATA_HOME/jupyter or ~/.local/share/jupyter;
 * - --prefix P: P/share/jupyter;  --sys-prefix: the active virtualenv / conda env, or
 *   the sys.prefix of `python3` (the one place that asks Python).
 *
 * NB: this file imports no part of the SDK, so that `tprpc-kernel install / uninstall / list` start
 * in a few tens of ms and never load the native addon (test/cli/cli.test.ts checks both).
 */
import { execFileSync } from "node:child_process";
import fs from "node:fs";
import os from "node:os";
import path from "node:path";
import { fileURLToPath } from "node:url";

export const DEFAULT_NAME = "tprpc";
export const DEFAULT_DISPLAY_NAME = "TypeScript (tprpc)";

/**
 * The kernel's node flags: the SDK's `rpc.RPC_NODE_FLAGS` (the notebook is the master and receives
 * tensors), copied here so that writing a kernelspec does not load the SDK; test/cli/cli.test.ts
 * checks that the two agree.
 */
export const KERNEL_NODE_FLAGS: readonly string[] = ["--initial-old-space-size=256"];

/** A kernelspec request that cannot be done (a bad name, conflicting locations); the message says why. */
export class KernelspecError extends Error {
  constructor(message: string) {
    super(message);
    this.name = "KernelspecError";
  }
}

export interface Location {
  user?: boolean;
  prefix?: string;
  sysPrefix?: boolean;
}

/** The per-user Jupyter data folder. */
export function userDataDir(env: NodeJS.ProcessEnv = process.env): string {
  if (env.JUPYTER_DATA_DIR) return env.JUPYTER_DATA_DIR;
  if (process.platform === "darwin") return path.join(os.homedir(), "Library", "Jupyter");
  return path.join(env.XDG_DATA_HOME || path.join(os.homedir(), ".local", "share"), "jupyter");
}

function sysPrefix(): string {
  const env = process.env.VIRTUAL_ENV || process.env.CONDA_PREFIX;
  if (env) return env;
  try {
    return execFileSync("python3", ["-c", "import sys; print(sys.prefix)"], { encoding: "utf8" }).trim();
  } catch {
    throw new KernelspecError(
      "--sys-prefix: no VIRTUAL_ENV or CONDA_PREFIX is set and python3 did not run; use --prefix PATH",
    );
  }
}

/** The data folder a location flag set points at. */
export function dataDir(loc: Location): string {
  const n = Number(!!loc.prefix) + Number(!!loc.sysPrefix) + Number(!!loc.user);
  if (n > 1) throw new KernelspecError("choose one of --user, --prefix PATH and --sys-prefix");
  if (loc.prefix) return path.join(path.resolve(loc.prefix), "share", "jupyter");
  if (loc.sysPrefix) return path.join(sysPrefix(), "share", "jupyter");
  return userDataDir();
}

/** Every folder Jupyter reads kernelspecs from, in its order of precedence. */
export function searchDirs(env: NodeJS.ProcessEnv = process.env): string[] {
  const fromPath = (env.JUPYTER_PATH ?? "").split(path.delimiter).filter(Boolean);
  return [...fromPath, userDataDir(env), "/usr/local/share/jupyter", "/usr/share/jupyter"].map((d) =>
    path.join(d, "kernels"),
  );
}

/** This package's root (the folder holding its package.json) and its tprpc-kernel script. */
export function packagePaths(): { root: string; script: string } {
  // NB: this file runs as dist/kernelspec.js (or from source in tests): walk up to tprpc-kernel's package.json.
  for (let dir = path.dirname(fileURLToPath(import.meta.url)); ;) {
    try {
      const pkg = JSON.parse(fs.readFileSync(path.join(dir, "package.json"), "utf8")) as { name?: string };
      if (pkg.name === "tprpc-kernel") return { root: dir, script: path.join(dir, "bin", "tprpc-kernel.mjs") };
    } catch {
      // no package.json here
    }
    const up = path.dirname(dir);
    if (up === dir) throw new KernelspecError(`cannot find the tprpc-kernel package root above ${import.meta.url}`);
    dir = up;
  }
}

export interface KernelJson {
  argv: string[];
  display_name: string;
  language: string;
  interrupt_mode: "signal";
  env?: Record<string, string>;
  metadata: { tprpc: { root: string } };
}

/** kernel.json for this package and this Node. */
export function kernelJson(displayName = DEFAULT_DISPLAY_NAME, env?: Record<string, string>): KernelJson {
  const { root, script } = packagePaths();
  return {
    argv: [process.execPath, ...KERNEL_NODE_FLAGS, script, "kernel", "--config-path", "{connection_file}"],
    display_name: displayName,
    language: "typescript",
    // NB: Jupyter interrupts by SIGINT to the kernel's process group; the kernel cancels its pending RPCs.
    interrupt_mode: "signal",
    ...(env ? { env } : {}),
    metadata: { tprpc: { root } },
  };
}

/** Writes `<dir>/kernels/<name>/kernel.json`; returns the kernelspec's folder. */
export function install(
  opts: Location & { name?: string; displayName?: string; env?: Record<string, string>; dir?: string } = {},
): string {
  const name = opts.name ?? DEFAULT_NAME;
  if (!/^[a-zA-Z0-9._-]+$/.test(name))
    throw new KernelspecError(`kernel name "${name}" may only hold letters, digits, ".", "_" and "-"`);
  const specDir = path.join(opts.dir ?? dataDir(opts), "kernels", name);
  fs.mkdirSync(specDir, { recursive: true });
  fs.writeFileSync(
    path.join(specDir, "kernel.json"),
    JSON.stringify(kernelJson(opts.displayName, opts.env), null, 2) + "\n",
  );
  return specDir;
}

/** Removes the kernelspec folder; returns it, or null when there was none. */
export function uninstall(opts: Location & { name?: string } = {}): string | null {
  const specDir = path.join(dataDir(opts), "kernels", opts.name ?? DEFAULT_NAME);
  if (!fs.existsSync(path.join(specDir, "kernel.json"))) return null;
  fs.rmSync(specDir, { recursive: true, force: true });
  return specDir;
}

export interface FoundSpec {
  name: string;
  dir: string;
  displayName: string;
  /** The package root its argv starts, when it is a tprpc kernel. */
  root: string | null;
}

/**
 * The tprpc kernelspecs Jupyter would see (the first folder wins for a name, as in Jupyter); with a
 * location (--user, --prefix PATH or --sys-prefix, as for install) only those in that one folder.
 */
export function list(loc: Location = {}, env: NodeJS.ProcessEnv = process.env): FoundSpec[] {
  const located = !!(loc.user || loc.prefix || loc.sysPrefix);
  const seen = new Map<string, FoundSpec>();
  for (const kdir of located ? [path.join(dataDir(loc), "kernels")] : searchDirs(env)) {
    if (!fs.existsSync(kdir)) continue;
    for (const name of fs.readdirSync(kdir)) {
      if (seen.has(name)) continue;
      try {
        const spec = JSON.parse(fs.readFileSync(path.join(kdir, name, "kernel.json"), "utf8")) as Partial<KernelJson>;
        const root = spec.metadata?.tprpc?.root ?? null;
        if (root !== null)
          seen.set(name, { name, dir: path.join(kdir, name), displayName: spec.display_name ?? name, root });
      } catch {
        // not a readable kernelspec
      }
    }
  }
  return [...seen.values()];
}
