import { defineConfig } from "vitest/config";

/**
 * Suites that leave nothing behind in this process: no environment variable, signal handler or device
 * double left set, the backend switched back, every RPC group shut down and every process they start (the
 * CLI, launcher and kernelspec suites) ended by the end of the file, and no count of this process's file
 * descriptors or memory asserted (the channel and reliability suites do, so they stay isolated). They run
 * in project "shared", without isolation: one worker process takes file after file and the SDK's modules
 * are loaded once per worker, not once per file (a fresh worker and SDK cost about half a second of CPU
 * per file on this 2-core machine; measured on the first 37 of these files: 28.7 s of CPU isolated, 14.8 s
 * shared). Checked: the project passes with its files shuffled, four workers and one. A suite that reads
 * the environment at import (test/rpc/rref_pressure.test.ts), asserts the state of a fresh process
 * (test/tensor/device.test.ts: CUDA's reason for being unavailable, which a device double's removal
 * elsewhere changes), leaves an initRpc waiting when it ends (test/cluster/cluster.test.ts, whose last test
 * does so on purpose), loads the compiled SDK besides the sources (test/kernel-ext/png.test.ts, through
 * "tprpc": its wire types re-register msgpackr's extensions, which every later file in the worker would then
 * decode with) or needs a process of its own stays in "isolated", a fresh process per file, as does every
 * suite not listed here.
 */
const SHARED = [
  "test/autograd/**/*.test.ts",
  "test/conformance/**/*.test.ts",
  "test/dist_autograd/**/*.test.ts",
  "test/rpc/in_process.test.ts",
  "test/rpc/rendezvous_options.test.ts",
  "test/rpc/device_map.test.ts",
  "test/nn/**/*.test.ts",
  "test/optim/**/*.test.ts",
  "test/parity/**/*.test.ts",
  "test/wire/**/*.test.ts",
  "test/display/**/*.test.ts",
  "test/docs/**/*.test.ts",
  "test/tensor/tensor.test.ts",
  "test/pipe/**/*.test.ts",
  "test/transport/**/*.test.ts",
  "test/rpc/rendezvous_store.test.ts",
  "test/native/kernels.test.ts",
  "test/native/kernels_vmath.test.ts",
  "test/rpc/address.test.ts",
  "test/rpc/api_types.test.ts",
  "test/rpc/free_names.test.ts",
  "test/rpc/shipping.test.ts",
  "test/rpc/shipping_scan.test.ts",
  "test/rpc/shipping_sdk.test.ts",
  "test/kernel-ext/error_output.test.ts",
  "test/kernel-ext/exec_queue.test.ts",
  "test/kernel-ext/outputs.test.ts",
  "test/kernel-ext/partial_cell.test.ts",
  "test/kernel-ext/shorthand.test.ts",
  "test/kernel-ext/kernelspec.test.ts",
  "test/rpc/launcher.test.ts",
  "test/rpc/rendezvous.test.ts",
  "test/cli/**/*.test.ts",
  "test/cluster/launch.test.ts",
  "test/layers.test.ts",
];

const common = {
  testTimeout: 60_000,
  hookTimeout: 60_000,
  // NB: the RRef reference-counting test drives garbage collection with gc().
  execArgv: ["--expose-gc"],
  // NB: route every size to the native kernels, so the suites run per backend really test them.
  env: { TPRPC_NATIVE_MIN_NUMEL: "0" },
};

export default defineConfig({
  test: {
    pool: "forks",
    // NB: most suites wait on other processes (workers, sockets, timeouts) rather than compute, and
    // vitest's default on a 2-core machine runs one file at a time: four at once halves the wall time
    // (measured here: 211 s -> 110 s for the whole suite, same results).
    maxWorkers: 4,
    // NB: each source file's transform (TypeScript to JavaScript) is kept on disk, in
    // node_modules/.experimental-vitest-cache, keyed by its content and the config: a run reuses what an
    // earlier run transformed (about 2 s of CPU of ~12 s on a 13-file sample here, measured back to back)
    experimental: { fsModuleCache: true },
    // NB: the root's global setup runs once, before the suites of both projects
    globalSetup: ["test/global-setup.ts"],
    projects: [
      { test: { ...common, name: "shared", include: SHARED, isolate: false } },
      {
        test: {
          ...common,
          name: "isolated",
          include: ["test/**/*.test.ts"],
          exclude: SHARED,
        },
      },
    ],
  },
});
