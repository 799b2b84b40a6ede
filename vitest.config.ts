import { defineConfig } from "vitest/config";

export default defineConfig({
  test: {
    include: ["test/**/*.test.ts"],
    testTimeout: 60_000,
    hookTimeout: 60_000,
    pool: "forks",
    globalSetup: ["test/global-setup.ts"],
    // NB: the RRef reference-counting test drives garbage collection with gc().
    execArgv: ["--expose-gc"],
    // NB: route every size to the native kernels, so the suites run per backend really test them.
    env: { TPRPC_NATIVE_MIN_NUMEL: "0" },
  },
});
