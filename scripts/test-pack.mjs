#!/usr/bin/env node
/**
 * The pack-and-install check (npm run test:pack; CI runs it after npm test): the two packages of this
 * repository, packed and installed as a user would, with no compiler on PATH.
 *
 * 1. Build: tsc (npm run build), then the linux-x64 prebuild: `npm run prebuildify` (a full compile, which
 *    node-gyp does afresh in native/build; then `npm run build:native` puts back the
 *    native/build/Release/tprpc.node that prebuildify moved into prebuilds/), or
 *    with --from-build the checkout's native/build/Release/tprpc.node stripped into the same place (what
 *    prebuildify produces, without compiling again). The prebuild must carry no symbol table or debug
 *    sections and need only glibc (ldd).
 * 2. `npm pack` both packages: tprpc (the repository root) and tprpc-kernel (kernel-ext/). The tprpc
 *    tarball holds dist/sdk (.js and .d.ts, no source maps), the native sources and the prebuild; the
 *    kernel's holds its bin and compiled dist; neither holds tests or build folders.
 * 3. A PATH without a compiler: a folder of links to every command on PATH except the compilers and make
 *    (checked: `command -v` finds none of them), and CC/CXX pointing nowhere.
 * 4. A scratch project in a temp folder installs the tprpc tarball (TPRPC_NATIVE_STRICT=1: a failed
 *    compile would fail the install), then the tprpc-kernel tarball; each one's installed size (its
 *    files and the dependencies it added) is printed, and tprpc over 40 MB fails the check.
 * 5. In the scratch project: `import("tprpc")` and `require("tprpc")` give the same API; the addon loads
 *    from the prebuild and answers; no native/build was made; `npx tprpc-kernel install --prefix P`
 *    writes a kernelspec that runs the installed kernel, which imports the installed SDK and tslab.
 * 6. The master script from README.md (the ```ts block starting `// master.ts`) and the tsconfig.json
 *    the README's set-up writes, compiled by the scratch project's own TypeScript (no @types/node
 *    installed by hand; library checks on), then run: two `tprpc worker` processes of the installed
 *    package, rpcSync with a tensor, remote and toHere, shutdown; its output must be the README's.
 * 7. Without the prebuild and the compiler, `npm rebuild tprpc` warns and exits 0, and importing tprpc
 *    prints exactly one warning and uses the TypeScript backend.
 * Every child process runs under a timeout.
 *
 * Usage: node scripts/test-pack.mjs [--from-build] [--keep]   (a JSON summary last on stdout; exit 1 on failure)
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
const scratch = path.join(work, "scratch");
const t0 = Date.now();
const log = (msg) => process.stderr.write(`[test:pack ${((Date.now() - t0) / 1000).toFixed(1)}s] ${msg}\n`);
const summary = { ok: false, fromBuild, work };
const MAX_TPRPC_BYTES = 40e6;
const PREBUILD_REL = "native/prebuilds/linux-x64/tprpc.glibc.node";

// NB: under `npm run`, npm exports npm_config_local_prefix and friends; the nested npm commands
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

/** Runs a command (bounded by `timeout` ms); throws with its output unless it exits 0. */
function sh(cmd, args, opts = {}) {
  const r = spawnSync(cmd, args, {
    encoding: "utf8",
    stdio: ["ignore", "pipe", "pipe"],
    timeout: 300_000,
    maxBuffer: 64 << 20,
    ...opts,
  });
  if (r.status !== 0)
    throw new Error(
      `${cmd} ${args.join(" ")} failed (${r.error?.message ?? r.status ?? r.signal}):\n${r.stdout ?? ""}\n${r.stderr ?? ""}`,
    );
  return r.stdout;
}

function check(cond, what) {
  if (!cond) throw new Error(`check failed: ${what}`);
}

const lastLine = (s) => s.trim().split("\n").pop();

/** Bytes of every file under dir (symlinks counted as links, not followed). */
function treeBytes(dir) {
  let n = 0;
  for (const e of fs.readdirSync(dir, { withFileTypes: true })) {
    const p = path.join(dir, e.name);
    if (e.isDirectory()) n += treeBytes(p);
    else n += fs.lstatSync(p).size;
  }
  return n;
}
const mb = (bytes) => Number((bytes / 1e6).toFixed(1));

/** Every .js / .mjs file under dir (not following links, skipping node_modules). */
function jsFiles(dir) {
  return fs
    .readdirSync(dir, { withFileTypes: true, recursive: true })
    .filter(
      (e) =>
        e.isFile() &&
        /\.m?js$/.test(e.name) &&
        !path.relative(dir, e.parentPath).split(path.sep).includes("node_modules"),
    )
    .map((e) => path.join(e.parentPath, e.name));
}

/** A folder of links to every command on PATH except C/C++ compilers, linkers' drivers and make. */
function pathWithoutCompiler() {
  const bin = path.join(work, "bin-nocc");
  fs.mkdirSync(bin);
  const banned =
    /^(cc|c\+\+|cpp|gcc|g\+\+|clang|clang\+\+|make|gmake|cmake|ninja)(-[\d.]+)?$|-(gcc|g\+\+|cc|c\+\+|cpp)(-[\d.]+)?$/;
  for (const dir of (process.env.PATH ?? "").split(path.delimiter).filter(Boolean)) {
    if (!fs.existsSync(dir)) continue;
    for (const name of fs.readdirSync(dir)) {
      if (banned.test(name) || fs.existsSync(path.join(bin, name))) continue;
      fs.symlinkSync(path.join(dir, name), path.join(bin, name));
    }
  }
  // NB: node itself first, whichever node runs this script.
  fs.rmSync(path.join(bin, "node"), { force: true });
  fs.symlinkSync(process.execPath, path.join(bin, "node"));
  return bin;
}

/** The README's master script and the tsconfig.json its set-up writes. */
function readmeMaster() {
  const readme = fs.readFileSync(path.join(root, "README.md"), "utf8");
  const block = readme.match(/```ts\n(\/\/ master\.ts[^\n]*\n[\s\S]*?)```/);
  check(block, "README.md has a ```ts block starting with `// master.ts`");
  const tsconfig = readme.match(/^echo '(\{ "compilerOptions"[^']*\})' > tsconfig\.json/m);
  check(tsconfig, "README.md's set-up writes a tsconfig.json with echo '{ \"compilerOptions\" ... }'");
  // Each `console.log(...); // expected` line of the script says what it prints.
  const expected = [...block[1].matchAll(/console\.log\("([^"]*)", [^;]*\); \/\/ (.+)$/gm)].map(
    (m) => `${m[1]} ${m[2]}`,
  );
  check(expected.length >= 2, "the master script says what it prints");
  return { source: block[1], tsconfig: JSON.parse(tsconfig[1]), expected };
}

try {
  const master = readmeMaster();

  // 1. Build.
  log("npm run build (tsc)");
  sh("npm", ["run", "build", "--silent"], { cwd: root, env: cleanEnv });
  const prebuild = path.join(root, PREBUILD_REL);
  if (fromBuild) {
    const built = path.join(root, "native", "build", "Release", "tprpc.node");
    check(fs.existsSync(built), `${built} exists (npm run build:native)`);
    fs.mkdirSync(path.dirname(prebuild), { recursive: true });
    sh("strip", ["--strip-all", "-o", prebuild, built]);
  } else {
    log("npm run prebuildify (a full compile)");
    sh("npm", ["run", "prebuildify", "--silent"], { cwd: root, env: cleanEnv, timeout: 1_800_000 });
    // NB: prebuildify moves native/build/Release/tprpc.node into prebuilds/; make copies it back from obj.target/.
    sh("npm", ["run", "build:native", "--silent"], { cwd: root, env: cleanEnv, timeout: 1_800_000 });
  }
  check(fs.existsSync(prebuild), `${prebuild} exists`);
  summary.prebuildBytes = fs.statSync(prebuild).size;
  const sections = sh("readelf", ["-S", "-W", prebuild]);
  check(!/\.symtab|\.debug_/.test(sections), "the prebuild is stripped: no .symtab, no .debug_* sections");
  // NB: OpenBLAS and the C++ runtime are linked statically: the prebuild needs only glibc.
  summary.ldd = sh("ldd", [prebuild])
    .trim()
    .split("\n")
    .map((l) => l.trim().split(" ")[0])
    .sort();
  check(
    summary.ldd.every((l) => /^(linux-vdso\.so\.1|\/lib64\/ld-linux-x86-64\.so\.2|libc\.so\.6|libm\.so\.6)$/.test(l)),
    `the prebuild needs only glibc (${summary.ldd.join(" ")})`,
  );

  // 2. Pack.
  log("npm pack (tprpc, tprpc-kernel)");
  const pack = (extra) =>
    JSON.parse(sh("npm", ["pack", "--json", "--pack-destination", work, ...extra], { cwd: root, env: cleanEnv }))[0];
  const sdkPack = pack([]);
  const kernelPack = pack(["--workspace", "tprpc-kernel"]);
  const sdkFiles = sdkPack.files.map((f) => f.path);
  const kernelFiles = kernelPack.files.map((f) => f.path);
  summary.tarballs = {
    tprpc: { file: sdkPack.filename, bytes: sdkPack.size, files: sdkFiles.length },
    "tprpc-kernel": { file: kernelPack.filename, bytes: kernelPack.size, files: kernelFiles.length },
  };
  check(sdkFiles.includes(PREBUILD_REL), "the tprpc tarball holds the prebuild");
  check(
    sdkFiles.includes("native/binding.gyp") && sdkFiles.includes("native/build.mjs"),
    "tprpc can build from source",
  );
  for (const f of ["dist/sdk/index.js", "dist/sdk/index.d.ts", "dist/sdk/native/binding.js", "bin/tprpc.mjs"])
    check(sdkFiles.includes(f), `the tprpc tarball holds ${f}`);
  for (const f of ["bin/tprpc-kernel.mjs", "dist/cli.js", "dist/kernel.js", "dist/kernelspec.js"])
    check(kernelFiles.includes(f), `the tprpc-kernel tarball holds ${f}`);
  check(!sdkFiles.some((f) => f.endsWith(".map")), "no source maps in the tprpc tarball (their .ts are not shipped)");
  check(
    ![...sdkFiles, ...kernelFiles].some((f) => /^(native\/build|test|kernel-ext|dist\/(test|bench|scripts))\//.test(f)),
    "no build/, tests, kernel sources or non-SDK output in the tarballs",
  );
  check(!kernelFiles.some((f) => f.endsWith(".ts") && !f.endsWith(".d.ts")), "no .ts sources in the kernel tarball");

  // 3. No compiler.
  const nocc = {
    ...cleanEnv,
    PATH: pathWithoutCompiler(),
    CC: "/nonexistent/cc",
    CXX: "/nonexistent/c++",
    TPRPC_NATIVE_STRICT: "1",
  };
  const found = spawnSync("sh", ["-c", "command -v cc gcc g++ c++ clang make"], { env: nocc, encoding: "utf8" });
  check(found.stdout.trim() === "", `no compiler on the scratch PATH (found: ${found.stdout.trim()})`);

  // 4. Install, measuring each package.
  fs.mkdirSync(scratch);
  fs.writeFileSync(
    path.join(scratch, "package.json"),
    JSON.stringify({ name: "scratch", version: "1.0.0", private: true, type: "module" }, null, 2),
  );
  const install = (...specs) => {
    const r = spawnSync(
      "npm",
      ["install", ...specs, "--prefer-offline", "--no-audit", "--no-fund", "--foreground-scripts"],
      { cwd: scratch, encoding: "utf8", env: nocc, timeout: 300_000, maxBuffer: 64 << 20 },
    );
    check(r.status === 0, `npm install ${specs.join(" ")} succeeded:\n${r.stdout}\n${r.stderr}`);
    return r.stdout + r.stderr;
  };
  const nm = path.join(scratch, "node_modules");
  log(`npm install ${sdkPack.filename} (no compiler on PATH)`);
  const said = install(path.join(work, sdkPack.filename));
  const sdkBytes = treeBytes(nm);
  log(`npm install ${kernelPack.filename}`);
  install(path.join(work, kernelPack.filename));
  const kernelBytes = treeBytes(nm) - sdkBytes;
  summary.installedMB = { tprpc: mb(sdkBytes), "tprpc-kernel": mb(kernelBytes), prebuild: mb(summary.prebuildBytes) };
  log(
    `installed size with dependencies: tprpc ${mb(sdkBytes)} MB (prebuild ${mb(summary.prebuildBytes)} MB), ` +
      `tprpc-kernel adds ${mb(kernelBytes)} MB`,
  );
  check(sdkBytes <= MAX_TPRPC_BYTES, `tprpc installs in at most ${MAX_TPRPC_BYTES / 1e6} MB (${mb(sdkBytes)} MB)`);
  check(!fs.existsSync(path.join(nm, "tslab")) || kernelBytes > 0, "tslab arrives with tprpc-kernel");
  const pkg = path.join(nm, "tprpc");
  summary.installSaid = (said.match(/\[tprpc native\][^\n]*/g) ?? []).join(" | ");
  check(
    summary.installSaid.includes("using prebuilds/linux-x64/tprpc.glibc.node"),
    "the install script took the prebuild",
  );
  check(!fs.existsSync(path.join(pkg, "native", "build")), "the install compiled nothing (no native/build)");
  const mapped = [...jsFiles(pkg), ...jsFiles(path.join(nm, "tprpc-kernel"))].filter((f) =>
    fs.readFileSync(f, "utf8").includes("//# sourceMappingURL="),
  );
  check(mapped.length === 0, `no installed .js of ours points to a source map (${mapped.slice(0, 3).join(", ")})`);

  // 5. Use it from JavaScript.
  log("import and require tprpc in the scratch project");
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
    lastLine(
      sh(process.execPath, ["--input-type=module", "-e", probe], { cwd: scratch, env: cleanEnv, timeout: 60_000 }),
    ),
  );
  summary.installed = used;
  check(used.exports > 10, "import('tprpc') exports the API");
  check(used.path === path.join(pkg, PREBUILD_REL), `the addon came from the prebuild (${used.path})`);
  check(typeof used.blas === "string" && used.aligned === true, "capabilities() and alloc() work");
  // NB: the package is ESM; Node >= 20.19 loads it through require() as well (require(esm)).
  const required = lastLine(
    sh(
      process.execPath,
      ["-e", 'const t = require("tprpc"); console.log(typeof t.rpc.initRpc, typeof t.tensor, Object.keys(t).length)'],
      { cwd: scratch, env: cleanEnv, timeout: 60_000 },
    ),
  );
  check(required === `function function ${used.exports}`, `require("tprpc") gives the same API (${required})`);

  log("npx tprpc-kernel install --prefix in the scratch project");
  const jupyterPrefix = path.join(work, "jupyter-prefix");
  sh("npx", ["--no-install", "tprpc-kernel", "install", "--prefix", jupyterPrefix], {
    cwd: scratch,
    env: cleanEnv,
    timeout: 60_000,
  });
  const spec = JSON.parse(fs.readFileSync(path.join(jupyterPrefix, "share/jupyter/kernels/tprpc/kernel.json"), "utf8"));
  // NB: node's flags (rpc.RPC_NODE_FLAGS) come between node and the script.
  const script = spec.argv.find((a) => !a.startsWith("-") && a !== spec.argv[0]);
  check(
    script === path.join(nm, "tprpc-kernel/bin/tprpc-kernel.mjs"),
    `the kernelspec runs the installed kernel (${spec.argv.join(" ")})`,
  );
  summary.kernelspec = spec.argv.slice(0, 3);
  // The installed kernel finds the installed SDK (its prelude's import) and tslab's modules it wraps.
  const kernelJs = path.join(nm, "tprpc-kernel/dist/kernel.js");
  const wiring = `
    const k = await import(${JSON.stringify(kernelJs)});
    const { createRequire } = await import("node:module");
    const req = createRequire(${JSON.stringify(kernelJs)});
    console.log(JSON.stringify({ sdk: k.sdkEntry(), tslab: typeof req("tslab/dist/executor.js").createExecutor }));`;
  const wired = JSON.parse(
    lastLine(
      sh(process.execPath, ["--input-type=module", "-e", wiring], { cwd: scratch, env: cleanEnv, timeout: 60_000 }),
    ),
  );
  check(
    wired.sdk === path.join(pkg, "dist/sdk/index.js") && wired.tslab === "function",
    `the installed kernel imports the installed SDK and tslab (${JSON.stringify(wired)})`,
  );

  // 6. The README's master script, in TypeScript.
  log(`npm install typescript@${tsVersion()} (the scratch project's own compiler)`);
  install(`typescript@${tsVersion()}`);
  const own = JSON.parse(fs.readFileSync(path.join(scratch, "package.json"), "utf8"));
  check(
    !own.dependencies?.["@types/node"] && !own.devDependencies?.["@types/node"],
    "no @types/node installed by hand",
  );
  fs.writeFileSync(path.join(scratch, "tsconfig.json"), JSON.stringify(master.tsconfig, null, 2));
  fs.writeFileSync(path.join(scratch, "master.ts"), master.source);
  log("tsc (the README's tsconfig.json: library .d.ts checked too)");
  sh(process.execPath, [path.join(nm, "typescript/bin/tsc"), "-p", "."], { cwd: scratch, env: nocc, timeout: 180_000 });
  log("node master.js (two tprpc workers)");
  const run = spawnSync(process.execPath, ["master.js"], {
    cwd: scratch,
    env: cleanEnv,
    encoding: "utf8",
    timeout: 120_000,
    killSignal: "SIGKILL",
  });
  summary.master = { code: run.status, stdout: run.stdout.trim().split("\n") };
  check(run.status === 0, `the master script exits 0 (${run.status ?? run.signal}):\n${run.stdout}\n${run.stderr}`);
  for (const line of master.expected)
    check(summary.master.stdout.includes(line), `the master script prints "${line}":\n${run.stdout}\n${run.stderr}`);

  // 7. Without the prebuild and without a compiler.
  log("without the prebuild and a compiler");
  fs.rmSync(path.join(pkg, "native", "prebuilds"), { recursive: true });
  const rb = spawnSync("npm", ["rebuild", "tprpc", "--foreground-scripts"], {
    cwd: scratch,
    encoding: "utf8",
    env: { ...nocc, TPRPC_NATIVE_STRICT: "0" },
    timeout: 300_000,
  });
  check(rb.status === 0, `npm rebuild without a compiler exits 0:\n${rb.stdout}\n${rb.stderr}`);
  check(/WARNING: the build failed; tprpc will use its TypeScript backend/.test(rb.stdout + rb.stderr), "it warns");
  const fb = spawnSync(process.execPath, ["--input-type=module", "-e", probe], {
    cwd: scratch,
    encoding: "utf8",
    env: cleanEnv,
    timeout: 60_000,
  });
  check(fb.status === 0, `the fallback run exits 0: ${fb.stderr}`);
  const warnings = fb.stderr.split("\n").filter((l) => l.startsWith("tprpc: warning"));
  summary.fallback = { ...JSON.parse(lastLine(fb.stdout)), warnings: warnings.length };
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

/** The TypeScript version this repository builds with (the scratch project installs the same). */
function tsVersion() {
  return JSON.parse(fs.readFileSync(path.join(root, "node_modules", "typescript", "package.json"), "utf8")).version;
}
