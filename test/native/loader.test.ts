/**
 * sdk/native/binding.ts: native errors become the sdk's NativeError; TPRPC_NATIVE=0 disables the
 * addon silently; an addon that cannot be found warns once on stderr and returns null (so the
 * sdk falls back to its TypeScript backend). Each case loads a fresh copy of the module.
 */
import fs from "node:fs";
import { createRequire } from "node:module";
import os from "node:os";
import path from "node:path";
import { afterEach, describe, expect, it, vi } from "vitest";
import { NativeError, TprpcError } from "../../sdk/errors/index.js";
import { NATIVE_FUNCTIONS, toNativeError } from "../../sdk/native/binding.js";
import { nativeOrSkip } from "./helpers.js";

const { native, skip } = nativeOrSkip();

/** A fresh binding module under `env`, and everything it wrote to stderr. */
async function freshLoad(env: Record<string, string | undefined>, calls = 2) {
  const saved = { ...process.env };
  Object.assign(process.env, env);
  for (const [k, v] of Object.entries(env)) if (v === undefined) delete process.env[k];
  const writes: string[] = [];
  const spy = vi.spyOn(process.stderr, "write").mockImplementation((chunk: string | Uint8Array) => {
    writes.push(String(chunk));
    return true;
  });
  try {
    vi.resetModules();
    const mod = await import("../../sdk/native/binding.js");
    const results = Array.from({ length: calls }, () => mod.loadNative());
    return { results, writes, error: mod.nativeLoadError() };
  } finally {
    spy.mockRestore();
    process.env = saved;
  }
}

afterEach(() => vi.resetModules());

describe("native loader", () => {
  it("maps errors named NativeError to the sdk's NativeError and passes others through", () => {
    const raw = Object.assign(new Error("boom (Too many open files)"), {
      name: "NativeError",
      code: "EMFD",
      errno: 24,
    });
    const e = toNativeError(raw) as NativeError;
    expect(e).toBeInstanceOf(NativeError);
    expect(e).toBeInstanceOf(TprpcError);
    expect([e.name, e.code, e.errno, e.message]).toEqual(["NativeError", "EMFD", 24, "boom (Too many open files)"]);
    const t = new TypeError("x");
    expect(toNativeError(t)).toBe(t);
  });

  it("TPRPC_NATIVE=0 disables the addon without a warning", async () => {
    const { results, writes, error } = await freshLoad({ TPRPC_NATIVE: "0" });
    expect(results).toEqual([null, null]);
    expect(writes).toEqual([]);
    expect(error).toMatch(/TPRPC_NATIVE=0/);
  });

  it("without a build or a prebuild, warns exactly once and returns null", async () => {
    const empty = fs.mkdtempSync(path.join(os.tmpdir(), "tprpc-nonative-"));
    try {
      const { results, writes, error } = await freshLoad({ TPRPC_NATIVE: undefined, TPRPC_NATIVE_DIR: empty }, 3);
      expect(results).toEqual([null, null, null]);
      expect(writes).toHaveLength(1);
      expect(writes[0]).toMatch(/^tprpc: warning: the native addon did not load/);
      expect(writes[0]).toMatch(/TypeScript backend/);
      expect(writes[0]).toMatch(/npm rebuild tprpc/);
      expect(writes[0]).toMatch(/npm run build:native/);
      expect(writes[0]).toContain("No native build was found");
      expect(error).toContain(empty);
    } finally {
      fs.rmSync(empty, { recursive: true, force: true });
    }
  });

  describe.skipIf(skip !== null)("with the addon", () => {
    it("loads once, from native/build or native/prebuilds", async () => {
      const { results, writes } = await freshLoad({ TPRPC_NATIVE: undefined, TPRPC_NATIVE_DIR: undefined });
      expect(results[0]).not.toBeNull();
      expect(results[1]).toBe(results[0]);
      expect(writes).toEqual([]);
      expect(results[0]!.path).toMatch(/native\/(build\/Release\/tprpc|prebuilds\/linux-x64\/tprpc\.glibc)\.node$/);
    });

    it("declares exactly the functions the addon exports", () => {
      const raw = createRequire(import.meta.url)(native!.path) as Record<string, unknown>;
      expect(Object.keys(raw).sort()).toEqual([...NATIVE_FUNCTIONS].sort());
      for (const f of NATIVE_FUNCTIONS) expect(typeof native![f], f).toBe("function");
    });

    it("throwNativeError arrives as NativeError with code, errno and the strerror text", () => {
      let err: unknown;
      try {
        native!.throwNativeError("EMFD", 24, "memfd_create failed");
      } catch (e) {
        err = e;
      }
      expect(err).toBeInstanceOf(NativeError);
      const e = err as NativeError;
      expect([e.code, e.errno]).toEqual(["EMFD", 24]);
      expect(e.message).toBe("memfd_create failed (Too many open files)");
      expect(e.stack).toMatch(/^NativeError: memfd_create failed/);
    });
  });
});
