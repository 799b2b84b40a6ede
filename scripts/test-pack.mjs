#!/usr/bin/env node
/**
 * Packaging check: the npm tarball carries the linux-x64 prebuild, and installing it in a
 * scratch project needs no compiler: the addon loads from the prebuild and no build/ appears.
 *
 * 1. Stage the package in a temporary folder: package.json, README.md, native/ sources, kernel-ext/bin,
 *    dist/ compiled there by tsc (the checkout's dist/ and native/build are left alone).
 * 2. Prebuild: `prebuildify --napi --strip` in the stage (a full compile), or with --from-build,
 *    the checkout's native/build/Release/tprpc.node stripped into the same place (what
 *    prebuildify produces, without compiling again; the vitest suite uses this).
 * 3. `npm pack` the stage (its prepack refuses a tarball without the prebuild); list the tarball.
 * 4. `npm install <tarball> --prefer-offline` into a scratch project, with TPRPC_NATIVE_STRICT=1.
 * 5. In the scratch project: `import("tprpc")` and `require("tprpc")` work; the installed loader returns the addon from
 *    prebuilds/ and capabilities() answers; no native/build folder was made; `npx tprpc-kernel install
 *    --prefix` writes a kernelspec that starts the installed package's kernel.
 * 6. Delete the prebuild and hide the compiler (CC, CXX): `npm rebuild tprpc` warns and exits 0;
 *    importing tprpc prints exactly one warning and uses the TypeScript backend.
 *
 * Usage: node scripts/test-pack.mjs [--from-build] [--keep]   (prints a JSON summary last; exit 1 on failure)
 */
import { spawnSync } from "node:child_process";
import fs from "node:fs";
import os from "node:os";
import path from "node:path";
import { fileURLToPath } from "node:url";

const root = path.resolve(path.dirname(fileURLToPath(import.meta.url)), "..");
const fromBuild = process.argv.includes("--from-build");
const keep = process.argv.includes("--keep");
const work = fs.mkdtempSync(path.join(os.tmpdir(), "tprpc-pack-"));
const stage = path.join(work, "stage");
const scratch = path.join(work, "scratch");
const t0 = Date.now();
const log = (msg) => process.stderr.write(`[test:pack ${((Date.now() - t0) / 1000).toFixed(1)}s] ${msg}\n`);
const summary = { ok: false, fromBuild, work };

// NB: under `npm test`, npm exports npm_config_local_prefix and friends; the nested npm commands
// below must not inherit them (they would act on the checkout), so they get a clean environment.
const KEEP_NPM = new Set([
  "npm_config_cache",
  "npm_config_userconfig",
  "npm_config_globalconfig",
  "npm_config_registry",
]);
const cleanEnv = Object.fromEntries(
  Object.entries(process.env).filter(([k]) => !k.toLowerCase().startsWith("npm_") || KEEP_NPM.has(k.toLowerCase())),
);

// The probes below decide for themselves whether the addon loads.
for (const k of ["TPRPC_NATIVE", "TPRPC_NATIVE_DIR", "TPRPC_BACKEND"]) delete cleanEnv[k];

function sh(cmd, args, opts = {}) {
  const r = spawnSync(cmd, args, { encoding: "utf8", stdio: ["ignore", "pipe", "pipe"], ...opts });
  if (r.status !== 0)
    throw new Error(`${cmd} ${args.join(" ")} failed (${r.status ?? r.signal}):\n${r.stdout ?? ""}\n${r.stderr ?? ""}`);
  return r.stdout;
}

function check(cond, what) {
  if (!cond) throw new Error(`check failed: ${what}`);
}

try {
  // 1. Stage.
  fs.mkdirSync(path.join(stage, "native"), { recursive: true });
  for (const f of ["package.json", "README.md"]) fs.copyFileSync(path.join(root, f), path.join(stage, f));
  fs.cpSync(path.join(root, "kernel-ext", "bin"), path.join(stage, "kernel-ext", "bin"), { recursive: true });
  for (const f of ["build.mjs", "binding.gyp", "src"])
    fs.cpSync(path.join(root, "native", f), path.join(stage, "native", f), { recursive: true });
  // NB: the stage resolves node-addon-api, node-gyp and prebuildify from the checkout's node_modules.
  fs.symlinkSync(path.join(root, "node_modules"), path.join(stage, "node_modules"), "dir");
  log("tsc -> stage/dist");
  sh(process.execPath, [
    path.join(root, "node_modules/typescript/bin/tsc"),
    "-p",
    path.join(root, "tsconfig.json"),
    "--outDir",
    path.join(stage, "dist"),
  ]);

  // 2. Prebuild.
  const prebuild = path.join(stage, "native", "prebuilds", `${process.platform}-${process.arch}`, "tprpc.glibc.node");
  if (fromBuild) {
    const built = path.join(root, "native", "build", "Release", "tprpc.node");
    check(fs.existsSync(built), `${built} exists (npm run build:native)`);
    fs.mkdirSync(path.dirname(prebuild), { recursive: true });
    sh("strip", ["--strip-all", "-o", prebuild, built]);
  } else {
    log("prebuildify (full compile)");
    const r = spawnSync(process.execPath, [path.join(stage, "native", "build.mjs"), "--prebuild"], {
      cwd: stage,
      stdio: ["ignore", "inherit", "inherit"],
    });
    check(r.status === 0, "prebuildify succeeded");
    fs.rmSync(path.join(stage, "native", "build"), { recursive: true, force: true });
  }
  check(fs.existsSync(prebuild), `${prebuild} exists`);
  summary.prebuildBytes = fs.statSync(prebuild).size;
  summary.ldd = sh("ldd", [prebuild])
    .trim()
    .split("\n")
    .map((l) => l.trim().split(" ")[0]);

  // 3. Pack.
  log("npm pack");
  const packOut = JSON.parse(sh("npm", ["pack", "--json", "--pack-destination", work], { cwd: stage, env: cleanEnv }));
  const tarball = path.join(work, packOut[0].filename);
  const files = packOut[0].files.map((f) => f.path);
  summary.tarball = { file: path.basename(tarball), bytes: packOut[0].size, files: files.length };
  check(files.includes("native/prebuilds/linux-x64/tprpc.glibc.node"), "the tarball holds the prebuild");
  check(
    files.includes("native/binding.gyp") && files.includes("native/build.mjs"),
    "the tarball can build from source",
  );
  check(
    files.includes("dist/sdk/index.js") && files.includes("dist/sdk/native/binding.js"),
    "the tarball holds dist/sdk",
  );
  check(
    !files.some((f) => f.startsWith("native/build/") || f.startsWith("test/")),
    "no build/ or test/ in the tarball",
  );

  // 4. Install into a scratch project.
  log(`npm install ${path.basename(tarball)}`);
  fs.mkdirSync(scratch);
  fs.writeFileSync(
    path.join(scratch, "package.json"),
    JSON.stringify({ name: "scratch", private: true, type: "module" }),
  );
  const inst = spawnSync(
    "npm",
    ["install", tarball, "--prefer-offline", "--no-audit", "--no-fund", "--foreground-scripts"],
    {
      cwd: scratch,
      encoding: "utf8",
      env: { ...cleanEnv, TPRPC_NATIVE_STRICT: "1" },
    },
  );
  check(inst.status === 0, `npm install succeeded:\n${inst.stdout}\n${inst.stderr}`);
  const pkg = path.join(scratch, "node_modules", "tprpc");
  summary.installSaid = ((inst.stdout + inst.stderr).match(/\[tprpc native\][^\n]*/g) ?? []).join(" | ");
  check(
    summary.installSaid.includes("using prebuilds/linux-x64/tprpc.glibc.node"),
    "the install script took the prebuild",
  );
  check(!fs.existsSync(path.join(pkg, "native", "build")), "the install compiled nothing (no native/build)");

  // 5. Use it.
  log("import tprpc in the scratch project");
  const probe = `
    const tprpc = await import("tprpc");
    const { loadNative } = await import(${JSON.stringify(path.join(pkg, "dist/sdk/native/binding.js"))});
    const native = loadNative();
    const caps = native && native.capabilities();
    const buf = native && native.alloc(4096);
    console.log(JSON.stringify({ exports: Object.keys(tprpc).length, path: native && native.path,
      backend: tprpc.backend ? tprpc.backend.getBackend().name : null,
      blas: caps && caps.blas.corename, simd: caps && caps.simd, aligned: buf && native.addressOf(buf) % 64 === 0 }));`;
  const used = JSON.parse(
    sh(process.execPath, ["--input-type=module", "-e", probe], { cwd: scratch, env: cleanEnv })
      .trim()
      .split("\n")
      .pop(),
  );
  summary.installed = used;
  check(used.exports > 10, "import('tprpc') exports the API");
  check(
    used.path === path.join(pkg, "native/prebuilds/linux-x64/tprpc.glibc.node"),
    `the addon came from the prebuild (${used.path})`,
  );
  check(typeof used.blas === "string" && used.aligned === true, "capabilities() and alloc() work");
  // NB: the package is ESM; Node >= 20.19 loads it through require() as well (require(esm))
  const required = sh(
    process.execPath,
    ["-e", 'const t = require("tprpc"); console.log(typeof t.rpc.initRpc, typeof t.tensor, Object.keys(t).length)'],
    { cwd: scratch, env: cleanEnv },
  )
    .trim()
    .split("\n")
    .pop();
  check(required === `function function ${used.exports}`, `require("tprpc") gives the same API (${required})`);

  // 5b. The notebook kernel: `npx tprpc-kernel install` from the depending project writes a kernelspec
  //     that starts the installed package's kernel.
  log("npx tprpc-kernel install in the scratch project");
  const jupyterPrefix = path.join(work, "jupyter-prefix");
  sh("npx", ["--no-install", "tprpc-kernel", "install", "--prefix", jupyterPrefix], { cwd: scratch, env: cleanEnv });
  const spec = JSON.parse(fs.readFileSync(path.join(jupyterPrefix, "share/jupyter/kernels/tprpc/kernel.json"), "utf8"));
  // NB: node's flags (rpc.RPC_NODE_FLAGS) come between node and the script
  const script = spec.argv.find((a) => !a.startsWith("-") && a !== spec.argv[0]);
  check(
    script === path.join(pkg, "kernel-ext/bin/tprpc-kernel.mjs"),
    `the kernelspec runs the installed kernel (${spec.argv.join(" ")})`,
  );
  summary.kernelspec = spec.argv.slice(0, 3);

  // 6. Without the prebuild and without a compiler: `npm rebuild tprpc` warns but succeeds, and
  //    importing tprpc warns once and uses the TypeScript backend.
  log("without the prebuild and a compiler");
  fs.rmSync(path.join(pkg, "native", "prebuilds"), { recursive: true });
  const nocc = { ...cleanEnv, CC: "/nonexistent/cc", CXX: "/nonexistent/c++" };
  const rb = spawnSync("npm", ["rebuild", "tprpc", "--foreground-scripts"], {
    cwd: scratch,
    encoding: "utf8",
    env: nocc,
  });
  check(rb.status === 0, `npm rebuild without a compiler exits 0:\n${rb.stdout}\n${rb.stderr}`);
  check(/WARNING: the build failed; tprpc will use its TypeScript backend/.test(rb.stdout + rb.stderr), "it warns");
  const fb = spawnSync(process.execPath, ["--input-type=module", "-e", probe], {
    cwd: scratch,
    encoding: "utf8",
    env: cleanEnv,
  });
  check(fb.status === 0, `the fallback run exits 0: ${fb.stderr}`);
  const warnings = fb.stderr.split("\n").filter((l) => l.startsWith("tprpc: warning"));
  summary.fallback = { ...JSON.parse(fb.stdout.trim().split("\n").pop()), warnings: warnings.length };
  check(summary.fallback.path === null && warnings.length === 1, "without an addon: null and exactly one warning");
  check(summary.fallback.backend === null || summary.fallback.backend === "ts", "without an addon: the ts backend");

  summary.ok = true;
} catch (e) {
  summary.error = e instanceof Error ? e.message : String(e);
} finally {
  summary.seconds = Number(((Date.now() - t0) / 1000).toFixed(1));
  if (!keep) fs.rmSync(work, { recursive: true, force: true });
  process.stdout.write(JSON.stringify(summary) + "\n");
  process.exitCode = summary.ok ? 0 : 1;
}
