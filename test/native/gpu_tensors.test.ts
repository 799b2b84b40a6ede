/**
 * CUDA tensors through the real chain — sdk/index.ts wiring, the tensor
 * layer's CUDA DeviceBackend, the addon's gpu() memory calls and the dlopen
 * table — against a stand-in libcuda compiled here, whose "device" memory is
 * host malloc memory and which refuses a pointer used under another device's
 * context (CUDA_ERROR_INVALID_CONTEXT), so a missing context switch shows,
 * and which counts live allocations (cuMemGetInfo), so leaks show; the
 * caching allocator, pinned memory and streams are reached through tprpc.cuda.
 * The compiled SDK runs in a child process with LD_LIBRARY_PATH set.
 * NB: this checks tprpc's glue, not a GPU; issue 9 part B runs it on one.
 */
import fs from "node:fs";
import os from "node:os";
import path from "node:path";
import { afterAll, describe, expect, it } from "vitest";
import { buildStandInDriver } from "./cuda_standin.js";
import { nativeOrSkip, runFixture } from "./helpers.js";

const { native, skip } = nativeOrSkip();
const tmp = fs.mkdtempSync(path.join(os.tmpdir(), "tprpc-gpu-tensors-"));
afterAll(() => fs.rmSync(tmp, { recursive: true, force: true }));

describe.skipIf(skip !== null)("CUDA tensors over a stand-in driver", () => {
  it("move, print, differentiate and fail as the DeviceBackend contract says", () => {
    const dir = buildStandInDriver(path.join(tmp, "driver"), native!.libraryTable().cuda.symbols);
    const r = runFixture<Record<string, unknown>>("gpu-tensors.mjs", [], {
      env: { LD_LIBRARY_PATH: dir },
      flags: ["--expose-gc"],
    }).result;
    const m = [
      [1, 2, 3],
      [4, 5, 6],
    ];
    expect(r).toEqual({
      // 50 storages of 64 B: 512 B blocks of one 2 MiB segment, handed back when collected
      memory: {
        allocated: 50 * 512,
        reserved: 2 << 20,
        driverUsed: 2 << 20,
        peak: 50 * 512,
        collected: true,
        driverFreeAfterEmptyCache: true,
      },
      available: true,
      count: 2,
      device: "cuda:1",
      roundTrip: m,
      transposed: [
        [1, 4],
        [2, 5],
        [3, 6],
      ],
      peer: m,
      sameDevice: m,
      int64: [0, 1, 2, 3, 4],
      zeros: [0, 0, 0, 0],
      printed: "tensor([1.5000], device='cuda:0')",
      // the CUDA kernel backend launches through the driver (which here cannot load the fatbin), or
      // says why this build has no kernels
      op: {
        error: expect.stringMatching(
          /^NativeError: CUDA kernel backend \(device\): cuModuleLoadData \(the addon's fatbin\) failed|^DeviceError: no kernels for tensors on 'cuda:0'/,
        ),
      },
      badOrdinal: {
        error: expect.stringMatching(/^DeviceError: CUDA error: invalid device ordinal: 'cuda:2' .* 2 CUDA device/),
      },
      grad: [3, 4],
      pinned: {
        pinned: true,
        source: false,
        values: [
          [1, 4],
          [2, 5],
          [3, 6],
        ],
        nonBlocking: [
          [1, 4],
          [2, 5],
          [3, 6],
        ],
      },
      stream: { values: m, idle: true, defaultAfter: true },
    });
  });
});
