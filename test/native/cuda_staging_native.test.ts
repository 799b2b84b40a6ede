/**
 * cuda_staging's Stager over the addon's CUDA memory calls
 * (sdk/channel/cuda_staging/native_driver.ts) and the compiled stand-in
 * libcuda of ./cuda_standin.ts, in a child process
 * (fixtures/cuda-staging.mjs): device 0 -> pinned -> lane -> pinned ->
 * device 1 in 64 KiB chunks, sizes not multiples of the chunk. The stand-in's
 * "device" memory is host memory, so this checks the chunking and the calls,
 * not a GPU.
 */
import fs from "node:fs";
import os from "node:os";
import path from "node:path";
import { afterAll, describe, expect, it } from "vitest";
import { buildStandInDriver } from "./cuda_standin.js";
import { nativeOrSkip, runFixture } from "./helpers.js";

const { native, skip } = nativeOrSkip();
const tmp = fs.mkdtempSync(path.join(os.tmpdir(), "tprpc-cuda-staging-"));
afterAll(() => fs.rmSync(tmp, { recursive: true, force: true }));

describe.skipIf(skip !== null)("cuda_staging over the addon and a stand-in driver", () => {
  it("moves every size intact, one DtoH and one HtoD per chunk, pinned slots reused", () => {
    const dir = buildStandInDriver(path.join(tmp, "driver"), native!.libraryTable().cuda.symbols);
    const log = path.join(tmp, "calls.log");
    const r = runFixture<Record<string, unknown>>("cuda-staging.mjs", [], {
      env: { LD_LIBRARY_PATH: dir, STANDIN_LOG: log },
    }).result;
    const K = 64 * 1024;
    const chunks = (n: number): number => Math.ceil(n / K);
    for (const n of [1, K - 1, K, 5 * K + 77]) {
      // A slot per Stager for the first one-chunk transfer, reused by the next two; the 6-chunk one
      // needs a second slot per Stager; nothing else is allocated.
      const hostAllocs = n === 1 || n > K ? 2 : 0;
      expect(r[n], `${n} bytes`).toEqual({ intact: true, dtoh: chunks(n), htod: chunks(n), hostAllocs });
    }
    expect(r.pinnedBlocks).toBe(4);
  });
});
