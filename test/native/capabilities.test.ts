/**
 * capabilities() (native/src/dynlib.cc) against what this machine really has: the CPU's SIMD
 * flags, the linked OpenBLAS, and each dlopen'ed library, checked independently with
 * ldconfig and nm. A library that is absent must be "not viable" with a reason, never a crash.
 */
import { spawnSync } from "node:child_process";
import fs from "node:fs";
import { describe, expect, it } from "vitest";
import type { NativeLibName } from "../../sdk/native/binding.js";
import { nativeOrSkip } from "./helpers.js";

const { native, skip } = nativeOrSkip();

/** soname -> path, from the dynamic loader's cache. */
function ldconfig(): Map<string, string> {
  const r = spawnSync("/sbin/ldconfig", ["-p"], { encoding: "utf8" });
  const m = new Map<string, string>();
  for (const line of (r.stdout ?? "").split("\n")) {
    const hit = /^\s*(\S+) \(([^)]*)\) => (\S+)/.exec(line);
    if (hit && hit[2]!.includes("x86-64") && !m.has(hit[1]!)) m.set(hit[1]!, hit[3]!);
  }
  return m;
}

function cpuSimd(): string {
  const flags = new Set((/^flags\s*:(.*)$/m.exec(fs.readFileSync("/proc/cpuinfo", "utf8"))?.[1] ?? "").split(/\s+/));
  if (flags.has("avx512f")) return "avx512";
  if (flags.has("avx2") && flags.has("fma")) return "avx2";
  if (flags.has("sse4_2")) return "sse4";
  return "none";
}

const UCX_SYMBOLS = ["ucp_init_version", "ucp_worker_create", "ucp_ep_create", "ucp_tag_send_nbx", "ucp_tag_recv_nbx"];

describe.skipIf(skip !== null)("native capabilities", () => {
  const n = native!;
  const caps = n.capabilities();
  const libs = ldconfig();

  it("reports the CPU's SIMD level and the thread pool size", () => {
    expect(caps.simd).toBe(cpuSimd());
    expect(caps.threads).toBe(n.getNumThreads());
    expect(caps.threads).toBeGreaterThanOrEqual(1);
  });

  it("reports the statically linked OpenBLAS with run-time core selection", () => {
    expect(caps.blas.name).toBe("openblas");
    expect(caps.blas.version).toMatch(/^\d+\.\d+\.\d+$/);
    expect(caps.blas.config).toMatch(/^OpenBLAS \d+\.\d+\.\d+ .*DYNAMIC_ARCH/);
    expect(caps.blas.corename.length).toBeGreaterThan(0);
    expect(caps.blas.threads).toBeGreaterThanOrEqual(1);
  });

  it("has a status for every run-time library, with a reason whenever one is not viable", () => {
    expect(Object.keys(caps.libs).sort()).toEqual(["cublas", "cuda", "nccl", "nvrtc", "ucx"]);
    for (const [name, s] of Object.entries(caps.libs)) {
      expect(typeof s.viable, name).toBe("boolean");
      if (s.viable) {
        expect(s.reason, name).toBeUndefined();
        expect(s.path, name).toMatch(/\.so/);
      } else {
        expect(s.reason, name).toMatch(new RegExp(`${name}.*(not installed|lacks|cuInit|no devices)`, "i"));
      }
    }
  });

  const sonames: Record<NativeLibName, string> = {
    cuda: "libcuda.so.1",
    nvrtc: "libnvrtc.so",
    cublas: "libcublas.so",
    nccl: "libnccl.so.2",
    ucx: "libucp.so.0",
  };
  for (const [name, soname] of Object.entries(sonames) as [NativeLibName, string][]) {
    const present = [...libs.keys()].some((k) => k.startsWith(soname));
    it.skipIf(present)(`${name}: absent here, so not viable, and the reason names ${soname}`, () => {
      const s = caps.libs[name];
      expect(s.viable).toBe(false);
      expect(s.path).toBeUndefined();
      expect(s.reason).toContain(soname);
      expect(s.reason).toMatch(/LD_LIBRARY_PATH/);
    });
  }

  it("ucx is viable iff libucp.so.0 is installed with every symbol tprpc needs", () => {
    const file = libs.get("libucp.so.0");
    let expected = false;
    if (file) {
      const nm = spawnSync("nm", ["-D", "--defined-only", file], { encoding: "utf8" });
      const defined = new Set(nm.stdout.split("\n").map((l) => l.trim().split(/\s+/).pop()));
      expected = UCX_SYMBOLS.every((s) => defined.has(s));
    }
    const s = caps.libs.ucx;
    expect(s.viable).toBe(expected);
    if (expected) {
      expect(fs.realpathSync(s.path!)).toBe(fs.realpathSync(file!));
      expect(s.version).toMatch(/^\d+\.\d+\.\d+$/);
      expect(s.missing).toBeUndefined();
    }
  });

  it("is cached: a second call gives the same answer", () => {
    expect(n.capabilities()).toEqual(caps);
  });
});
