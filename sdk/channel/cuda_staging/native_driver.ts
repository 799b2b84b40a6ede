/**
 * cuda_staging's StagingDriver over the addon's CUDA memory calls
 * (sdk/native/gpu.ts, native/src/gpu/cuda_memory.cc): pinned blocks from the
 * pinned host allocator, one staging stream per device, stream-ordered copies.
 *
 * NB: the addon exposes no events to JS yet, so a fence is a query of the
 * whole staging stream (cuStreamQuery). That is never early, only later than
 * an event would be when more work follows on the stream. Tested against the
 * compiled stand-in libcuda (test/native/cuda_staging_native.test.ts); no GPU
 * has run it.
 */
import type { NativeCudaMemory } from "../../native/gpu.js";
import type { StagingDriver } from "./staging.js";

export function nativeStagingDriver(gpu: NativeCudaMemory): StagingDriver {
  const streams = new Map<number, bigint>();
  return {
    pinned: (bytes) => new Uint8Array(gpu.hostAlloc(bytes)),
    stream(device) {
      let s = streams.get(device);
      if (s === undefined) streams.set(device, (s = gpu.streamCreate(device)));
      return s;
    },
    dtoh: (device, ptr, offset, dst, stream) => gpu.copyDtoHAsync(device, ptr, offset, dst, stream, false),
    htod: (device, ptr, offset, src, stream) => gpu.copyHtoDAsync(device, ptr, offset, src, stream, false),
    fence: (device, stream) => () => gpu.streamQuery(device, stream),
  };
}
