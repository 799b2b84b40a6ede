/**
 * Shared helpers of the reliability suite: the CI / full size switch
 * (TPRPC_RELIABILITY_FULL=1), seeded randomness, a checksum, bounded polling
 * and process-liveness checks. Nothing here retries: every wait is bounded
 * and reports whether its condition was met.
 */
import fs from "node:fs";

/** True with TPRPC_RELIABILITY_FULL=1: every test runs at its full size (see README.md). */
export const FULL = process.env.TPRPC_RELIABILITY_FULL === "1";

/** `ci` in CI, `full` with TPRPC_RELIABILITY_FULL=1. */
export function size<T>(ci: T, full: T): T {
  return FULL ? full : ci;
}

/** A seeded 32-bit PRNG (mulberry32): each call returns a uint32. */
export function prng(seed: number): () => number {
  let a = seed >>> 0;
  return () => {
    a = (a + 0x6d2b79f5) >>> 0;
    let t = a;
    t = Math.imul(t ^ (t >>> 15), t | 1);
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
    return (t ^ (t >>> 14)) >>> 0;
  };
}

/** A uniform integer in [0, n) from `rand`. */
export function below(rand: () => number, n: number): number {
  return rand() % n;
}

/** `n` float32 values in [0, 1), from the seed alone. */
export function seededFloats(n: number, seed: number): Float32Array {
  const rand = prng(seed);
  const out = new Float32Array(n);
  for (let i = 0; i < n; i++) out[i] = rand() / 2 ** 32;
  return out;
}

/** `n` bytes from the seed alone. */
export function seededBytes(n: number, seed: number): Buffer {
  const rand = prng(seed);
  const out = Buffer.allocUnsafe(n);
  for (let i = 0; i < n; i++) out[i] = rand() & 0xff;
  return out;
}

/** FNV-1a (32 bit) over the bytes of a typed array. */
export function fnv1a(a: ArrayBufferView): number {
  const b = new Uint8Array(a.buffer, a.byteOffset, a.byteLength);
  let h = 0x811c9dc5;
  for (let i = 0; i < b.length; i++) h = Math.imul(h ^ b[i]!, 0x01000193) >>> 0;
  return h;
}

/** Polls `cond` every `stepMs` until it holds or `ms` have passed; resolves to whether it held. */
export async function waitUntil(cond: () => boolean | Promise<boolean>, ms: number, stepMs = 20): Promise<boolean> {
  const end = performance.now() + ms;
  for (;;) {
    if (await cond()) return true;
    if (performance.now() >= end) return false;
    await sleep(stepMs);
  }
}

export function sleep(ms: number): Promise<void> {
  return new Promise((r) => setTimeout(r, ms));
}

/**
 * Whether process `pid` has ended: it no longer exists, or it is a zombie (it exited and only
 * its reaping by its new parent is left; that is init's job, not tprpc's).
 */
export function pidGone(pid: number): boolean {
  try {
    process.kill(pid, 0);
  } catch (e) {
    return (e as NodeJS.ErrnoException).code === "ESRCH";
  }
  try {
    const stat = fs.readFileSync(`/proc/${pid}/stat`, "utf8");
    return stat.slice(stat.lastIndexOf(")") + 2).startsWith("Z");
  } catch {
    return true;
  }
}

/** SIGKILLs `pid` if it still runs (only for processes the test started). */
export function killIfAlive(pid: number | undefined): void {
  if (pid === undefined || pid <= 0 || pidGone(pid)) return;
  try {
    process.kill(pid, "SIGKILL");
  } catch {
    // gone meanwhile
  }
}

/** One line of figures in the test output. */
export function report(topic: string, line: string): void {
  process.stdout.write(`[reliability:${topic}] ${line}\n`);
}

/** Milliseconds since `t0` (performance.now()), rounded to 0.1. */
export function since(t0: number): number {
  return Math.round((performance.now() - t0) * 10) / 10;
}
