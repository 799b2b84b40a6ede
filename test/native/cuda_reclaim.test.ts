/**
 * CUDA memory back from garbage in processes started without --expose-gc (fixtures/cuda-reclaim.mjs
 * over the compiled SDK): on the emulated device, a synchronous loop of 1 MiB temporaries stays
 * bounded with the gc() sdk/util/gc.ts takes from V8; over the stand-in libcuda (./cuda_standin.ts)
 * with 64 MiB of "device" memory, an allocation that fails with out-of-memory while a dropped
 * storage still holds its block succeeds after the backend's full GC, sweep and emptyCache, and one
 * that fails while everything is held still throws EOOM, leaving the held tensors intact.
 */
import fs from "node:fs";
import os from "node:os";
import path from "node:path";
import { afterAll, describe, expect, it } from "vitest";
import { buildStandInDriver } from "./cuda_standin.js";
import { nativeOrSkip, runFixture } from "./helpers.js";

const { native, skip } = nativeOrSkip();
const tmp = fs.mkdtempSync(path.join(os.tmpdir(), "tprpc-cuda-reclaim-"));
afterAll(() => fs.rmSync(tmp, { recursive: true, force: true }));
const MiB = 2 ** 20;
// NB: the child's environment is this one's plus these; a budget set here must not leak into it
const env = { TPRPC_CUDA_RECLAIM_MB: "" };

describe.skipIf(skip !== null)("CUDA memory back from garbage, without --expose-gc", () => {
  it("keeps a synchronous loop of 3,000 1 MiB temporaries under 600 MB on the emulated device", () => {
    const r = runFixture<Record<string, unknown>>("cuda-reclaim.mjs", ["emulate"], {
      env: { ...env, TPRPC_CUDA: "emulate" },
    }).result;
    expect(r.exposedGc).toBe(false);
    expect(r.peak as number).toBeLessThan(600 * MiB);
    expect(r.minorGcs as number).toBeGreaterThan(0);
  });

  it("retries an out-of-memory allocation after collecting garbage, and only then (stand-in driver)", () => {
    const dir = buildStandInDriver(path.join(tmp, "driver"), native!.libraryTable().cuda.symbols);
    const r = runFixture<Record<string, unknown>>("cuda-reclaim.mjs", ["standin"], {
      env: { ...env, LD_LIBRARY_PATH: dir, STANDIN_MEM_LIMIT: String(64 * MiB), TPRPC_CUDA: "" },
    }).result;
    expect(r).toEqual({
      exposedGc: false,
      afterDrop: 40 * MiB + 512, // the dropped storage is not collected yet (and the 12 B tensor's 512 B block)
      second: { ok: true }, // out of memory, then the dropped one collected, swept, its segment freed: room
      third: { code: "EOOM" }, // both held: nothing to collect
      secondIntact: true,
      smallIntact: true,
      oomRetries: 2,
      numOoms: 3, // the allocator counts each EOOM it threw: the second's first try, the third's two
    });
  });
});
