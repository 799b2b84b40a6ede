#!/usr/bin/env node
/**
 * Builds tprpc's native addon. Published with the package: npm runs it on install.
 *
 *   node native/build.mjs              install: keep a build or prebuild that loads, else compile;
 *                                      a failed compile only warns (tprpc then uses its TypeScript
 *                                      backend) unless TPRPC_NATIVE_STRICT=1
 *   node native/build.mjs --rebuild    npm run build:native: compile (incrementally), fail loudly
 *   node native/build.mjs --prebuild   npm run prebuildify: native/prebuilds/<platform>-<arch>/tprpc.glibc.node
 *                                      (N-API, stripped; one file for every Node version)
 *   node native/build.mjs --fatbin     only native/gen/tprpc_fatbin.inc (the CUDA kernels' fatbin, or empty with the reason)
 *   node native/build.mjs --check      fail unless the linux-x64 prebuild exists and is newer than the
 *                                      sources (npm prepack)
 *
 * CUDA kernels: before compiling, src/cuda/kernels.cu is built by nvcc (TPRPC_NVCC, else
 * $CUDA_HOME/bin/nvcc, nvcc on PATH, /usr/local/cuda/bin/nvcc) into a fatbin (sm_80 and sm_90 code,
 * compute_90 PTX, compressed) that gen/tprpc_fatbin.inc embeds in the addon; without nvcc (or with
 * TPRPC_NVCC=0) the .inc is empty and says why, and the addon runs CUDA kernels only emulated.
 *
 * NB: node-gyp downloads Node's headers unless it is given a nodedir. Node installs from
 * distribution packages ship them next to the binary (<prefix>/include/node), so when
 * npm_config_nodedir is not set and they are there, they are used: the build works offline.
 */
import { spawnSync } from "node:child_process";
import fs from "node:fs";
import { createRequire } from "node:module";
import path from "node:path";
import { fileURLToPath } from "node:url";

const dir = path.dirname(fileURLToPath(import.meta.url));
const require = createRequire(import.meta.url);
const mode = process.argv[2] ?? "--install";
const log = (msg) => process.stderr.write(`[tprpc native] ${msg}\n`);

function env() {
  const e = { ...process.env, JOBS: process.env.JOBS ?? "max" };
  const prefix = path.resolve(path.dirname(process.execPath), "..");
  if (!e.npm_config_nodedir && fs.existsSync(path.join(prefix, "include", "node", "node_api.h")))
    e.npm_config_nodedir = prefix;
  return e;
}

/** [node, script] or [binary] of node-gyp: ours (devDependency), npm's bundled one, or PATH. */
function nodeGyp() {
  try {
    return [process.execPath, require.resolve("node-gyp/bin/node-gyp.js")];
  } catch {
    const npms = process.env.npm_config_node_gyp;
    return npms && fs.existsSync(npms) ? [process.execPath, npms] : ["node-gyp"];
  }
}

function run(argv) {
  const [cmd, ...args] = argv;
  const r = spawnSync(cmd, args, { cwd: dir, env: env(), stdio: "inherit" });
  if (r.error) log(`${cmd}: ${r.error.message}`);
  return r.status === 0;
}

/** The addon that node-gyp-build would load, if it loads; else null. */
function loadable() {
  try {
    const file = require("node-gyp-build").path(dir);
    require(file);
    return file;
  } catch {
    return null;
  }
}

/** nvcc's path, or null with the reason. */
function findNvcc() {
  const wanted = process.env.TPRPC_NVCC;
  if (wanted === "0") return { nvcc: null, why: "TPRPC_NVCC=0 turned the CUDA kernel build off" };
  if (wanted)
    return fs.existsSync(wanted) ? { nvcc: wanted } : { nvcc: null, why: `TPRPC_NVCC=${wanted} does not exist` };
  const candidates = [];
  if (process.env.CUDA_HOME) candidates.push(path.join(process.env.CUDA_HOME, "bin", "nvcc"));
  for (const p of (process.env.PATH ?? "").split(path.delimiter)) if (p) candidates.push(path.join(p, "nvcc"));
  candidates.push("/usr/local/cuda/bin/nvcc");
  const nvcc = candidates.find((c) => fs.existsSync(c));
  return nvcc
    ? { nvcc }
    : { nvcc: null, why: "nvcc was not found ($CUDA_HOME/bin, PATH, /usr/local/cuda/bin) when the addon was built" };
}

/**
 * Writes gen/tprpc_fatbin.inc: the fatbin of src/cuda/kernels.cu as bytes, or an empty one and
 * the reason. Skipped when the .inc is newer than every CUDA source and nvcc's presence is unchanged.
 */
function buildFatbin() {
  const gen = path.join(dir, "gen");
  const inc = path.join(gen, "tprpc_fatbin.inc");
  fs.mkdirSync(gen, { recursive: true });
  const { nvcc, why } = findNvcc();
  // NB: what nvcc reads: the kernel sources, their headers, and the CPU kernels' op codes
  const cudaDir = path.join(dir, "src", "cuda");
  const inputs = fs
    .readdirSync(cudaDir)
    .filter((f) => /\.(cu|cuh)$/.test(f) || f === "params.h")
    .map((f) => path.join(cudaDir, f))
    .concat(path.join(dir, "src", "kernels", "ops.h"));
  const newest = Math.max(...inputs.map((f) => fs.statSync(f).mtimeMs));
  if (fs.existsSync(inc) && fs.statSync(inc).mtimeMs > newest) {
    const had = !fs.readFileSync(inc, "utf8").includes("kTprpcFatbinSize = 0;");
    if (had === (nvcc !== null)) return;
  }
  const write = (bytes, reason) => {
    const hex = [];
    for (let i = 0; i < bytes.length; i += 24)
      hex.push(Array.from(bytes.subarray(i, i + 24), (b) => `0x${b.toString(16)}`).join(","));
    fs.writeFileSync(
      inc,
      "// Generated by native/build.mjs from src/cuda/kernels.cu; do not edit.\n" +
        `alignas(64) static const unsigned char kTprpcFatbin[${Math.max(bytes.length, 1)}] = {${bytes.length ? hex.join(",\n") : "0"}};\n` +
        `static const size_t kTprpcFatbinSize = ${bytes.length};\n` +
        `static const char* const kTprpcFatbinReason = ${JSON.stringify(reason)};\n`,
    );
  };
  if (!nvcc) {
    log(`no CUDA kernels in this build: ${why}`);
    write(new Uint8Array(0), why);
    return;
  }
  const out = path.join(gen, "tprpc.fatbin");
  const t = Date.now();
  // NB: nvcc compiles host code with the addon's C++ compiler (node-gyp's CXX) when one is named
  const ccbin = process.env.CXX ? ["-ccbin", process.env.CXX] : [];
  const r = spawnSync(
    nvcc,
    [
      ...ccbin,
      "-fatbin",
      "-O3",
      "-std=c++17",
      "-fmad=false",
      "-Isrc",
      "-diag-suppress",
      "186",
      "-Xfatbin",
      "-compress-all",
      "-gencode",
      "arch=compute_80,code=sm_80",
      "-gencode",
      "arch=compute_90,code=sm_90",
      "-gencode",
      "arch=compute_90,code=compute_90",
      "-o",
      out,
      "src/cuda/kernels.cu",
    ],
    { cwd: dir, stdio: "inherit" },
  );
  if (r.status !== 0) {
    const reason = `nvcc (${nvcc}) failed on src/cuda/kernels.cu (exit ${r.status ?? r.error?.message})`;
    log(`no CUDA kernels in this build: ${reason}`);
    write(new Uint8Array(0), reason);
    return;
  }
  const bytes = fs.readFileSync(out);
  log(`CUDA kernels: ${path.relative(dir, out)}, ${bytes.length} bytes, in ${((Date.now() - t) / 1000).toFixed(1)} s`);
  write(bytes, "");
}

function compile({ clean }) {
  buildFatbin();
  const gyp = nodeGyp();
  const makefile = path.join(dir, "build", "Makefile");
  const stale =
    !fs.existsSync(makefile) || fs.statSync(path.join(dir, "binding.gyp")).mtimeMs > fs.statSync(makefile).mtimeMs;
  if (clean || stale) {
    if (!run([...gyp, clean ? "rebuild" : "configure"])) return false;
    if (clean) return true;
  }
  return run([...gyp, "build"]);
}

/** binding.gyp and every file under src/. */
function sources() {
  const out = [path.join(dir, "binding.gyp")];
  const walk = (d) => {
    for (const e of fs.readdirSync(d, { withFileTypes: true }))
      if (e.isDirectory()) walk(path.join(d, e.name));
      else out.push(path.join(d, e.name));
  };
  walk(path.join(dir, "src"));
  return out;
}

function prebuildDir() {
  return path.join(dir, "prebuilds", `${process.platform}-${process.arch}`);
}

const t0 = Date.now();
switch (mode) {
  case "--install": {
    const found = loadable();
    if (found) {
      log(`using ${path.relative(dir, found)}`);
      break;
    }
    log("no prebuilt or built addon loads here: compiling it (needs g++, make, python3 and libopenblas-pthread-dev)");
    if (compile({ clean: true }) && loadable()) {
      log(`built in ${((Date.now() - t0) / 1000).toFixed(1)} s`);
      break;
    }
    if (process.env.TPRPC_NATIVE_STRICT === "1") {
      log("the build failed (TPRPC_NATIVE_STRICT=1)");
      process.exit(1);
    }
    log(
      "WARNING: the build failed; tprpc will use its TypeScript backend. Fix the error above, then `npm rebuild tprpc`.",
    );
    break;
  }
  case "--fatbin":
    // NB: only gen/tprpc_fatbin.inc (test/native/fatbin_build.test.ts checks the build without nvcc)
    buildFatbin();
    break;
  case "--rebuild":
    if (!compile({ clean: process.argv.includes("--clean") })) process.exit(1);
    log(`built native/build/Release/tprpc.node in ${((Date.now() - t0) / 1000).toFixed(1)} s`);
    break;
  case "--prebuild": {
    buildFatbin();
    const bin = require.resolve("prebuildify/bin.js");
    // NB: prebuildify runs `node-gyp` from node_modules/.bin (it puts the ancestors' .bin first on PATH).
    const r = spawnSync(process.execPath, [bin, "--napi", "--strip", "--tag-libc", "--name", "tprpc"], {
      cwd: dir,
      env: env(),
      stdio: "inherit",
    });
    if (r.status !== 0) process.exit(1);
    log(`prebuilt ${path.relative(dir, prebuildDir())} in ${((Date.now() - t0) / 1000).toFixed(1)} s`);
    break;
  }
  case "--check": {
    // NB: the package ships the linux-x64 prebuild whichever machine packs it.
    const shipped = path.join(dir, "prebuilds", "linux-x64", "tprpc.glibc.node");
    if (!fs.existsSync(shipped)) {
      log(`no ${path.relative(dir, shipped)}: run \`npm run prebuildify\` on linux-x64 before packing`);
      process.exit(1);
    }
    const built = fs.statSync(shipped).mtimeMs;
    const newer = sources().filter((f) => fs.statSync(f).mtimeMs > built);
    if (newer.length) {
      log(`${path.relative(dir, shipped)} is older than ${path.relative(dir, newer[0])}: run \`npm run prebuildify\``);
      process.exit(1);
    }
    break;
  }
  default:
    log(`unknown option ${mode}; use --rebuild, --prebuild or --check`);
    process.exit(2);
}
