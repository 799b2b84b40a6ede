/**
 * Shared by the native tests: the addon (or a skip reason when this machine truly
 * cannot build it), and a runner for child-process fixtures.
 */
import { spawnSync } from "node:child_process";
import fs from "node:fs";
import path from "node:path";
import { fileURLToPath } from "node:url";
import { loadNative, nativeLoadError, type NativeBinding } from "../../sdk/native/binding.js";

export const repoRoot = path.resolve(path.dirname(fileURLToPath(import.meta.url)), "../..");
export const fixtures = path.join(repoRoot, "test", "native", "fixtures");

const OPENBLAS_A = "/usr/lib/x86_64-linux-gnu/openblas-pthread/libopenblas.a";

function which(cmd: string): boolean {
  return spawnSync("sh", ["-c", `command -v ${cmd}`], { stdio: "ignore" }).status === 0;
}

/** Why the addon cannot be built on this machine, or null when it can (then it must load). */
export function cannotBuild(): string | null {
  const missing = ["g++", "make", "python3"].filter((c) => !which(c));
  if (!fs.existsSync(OPENBLAS_A)) missing.push("libopenblas-pthread-dev");
  if (process.platform !== "linux" || process.arch !== "x64")
    return `no prebuild for ${process.platform}-${process.arch}`;
  return missing.length ? `cannot build the addon here: missing ${missing.join(", ")} (bash scripts/setup.sh)` : null;
}

/**
 * The addon, or the reason to skip (TPRPC_NATIVE=0, or a machine that cannot build it). Throws when
 * the machine could build it but it does not load: that is a broken build, not a missing capability.
 */
export function nativeOrSkip(): { native: NativeBinding | null; skip: string | null } {
  const native = loadNative();
  if (native) return { native, skip: null };
  const why = process.env.TPRPC_NATIVE === "0" ? "TPRPC_NATIVE=0 is set" : cannotBuild();
  if (why) {
    console.warn(`[test/native] skipped: ${why}`);
    return { native: null, skip: why };
  }
  throw new Error(
    `the addon should build on this machine but did not load: ${nativeLoadError()}; run npm run build:native`,
  );
}

/** Runs `node [flags] fixtures/<script> ...args` and parses the JSON it prints last. */
export function runFixture<T>(
  script: string,
  args: string[] = [],
  opts: { flags?: string[]; env?: NodeJS.ProcessEnv; timeoutMs?: number } = {},
): { result: T; stderr: string } {
  const r = spawnSync(process.execPath, [...(opts.flags ?? []), path.join(fixtures, script), ...args], {
    encoding: "utf8",
    env: { ...process.env, ...opts.env },
    timeout: opts.timeoutMs ?? 30_000,
  });
  if (r.status !== 0) throw new Error(`${script} exited with ${r.status ?? r.signal}:\n${r.stdout}\n${r.stderr}`);
  const lines = r.stdout.trim().split("\n");
  return { result: JSON.parse(lines[lines.length - 1]!) as T, stderr: r.stderr };
}
