#!/usr/bin/env node
/**
 * `npm run gpu:check`: packs what a run on the device machine needs into .gpu-pack/ (ignored by
 * git) and prints the device tool call that runs scripts/gpu_check/run.sh there.
 *
 * 1. Builds the TypeScript (npm run build) unless --no-build; the addon must be built already
 *    (npm run build:native) and is taken from native/build/Release with whatever else lies there
 *    (kernel fatbins included), stripped.
 * 2. .gpu-pack/tprpc.tar.gz: package.json, bin, dist/sdk (no maps, no .d.ts), native/build/Release,
 *    and node_modules pruned to the runtime closure of package.json's dependencies (no tslab, no
 *    node-addon-api: build-time only; no dev tools).
 * 3. .gpu-pack/node.gz: this node binary (process.execPath), stripped and gzipped, for a device
 *    machine without Node >= 20.19 (it reaches no registry); kept while the binary is unchanged.
 * 4. Checks that what travels (tracked files, untracked files git does not ignore, .gpu-pack)
 *    stays within the device tool's 64 MiB, unpacks the tarball into a scratch folder and imports
 *    tprpc from it, then prints the call.
 * Usage: npm run gpu:check [-- --no-build]
 */
import { execFileSync, spawnSync } from "node:child_process";
import fs from "node:fs";
import os from "node:os";
import path from "node:path";
import { fileURLToPath, pathToFileURL } from "node:url";

const root = path.resolve(path.dirname(fileURLToPath(import.meta.url)), "../..");
const PACK = path.join(root, ".gpu-pack");
const LIMIT = 64 * 2 ** 20;
const SKIP_DEPS = new Set(["tslab", "node-addon-api", "typescript"]);
const log = (m) => process.stdout.write(`[gpu:check] ${m}\n`);
const mib = (b) => `${(b / 2 ** 20).toFixed(1)} MiB`;

function run(cmd, args, opts = {}) {
  const r = spawnSync(cmd, args, { cwd: root, stdio: "inherit", ...opts });
  if (r.status !== 0) throw new Error(`${cmd} ${args.join(" ")} failed (${r.status ?? r.signal})`);
}

function copyTree(src, dst, keep = () => true) {
  fs.mkdirSync(dst, { recursive: true });
  for (const e of fs.readdirSync(src, { withFileTypes: true })) {
    const s = path.join(src, e.name);
    const d = path.join(dst, e.name);
    if (!keep(s, e)) continue;
    const st = fs.statSync(s);
    if (st.isDirectory()) copyTree(s, d, keep);
    else fs.copyFileSync(s, d);
  }
}

/** The runtime dependency closure: package folder paths under node_modules. */
function runtimeDeps() {
  const pkg = JSON.parse(fs.readFileSync(path.join(root, "package.json"), "utf8"));
  const found = new Map();
  const visit = (name, fromDir) => {
    if (SKIP_DEPS.has(name)) return;
    for (let dir = fromDir; ; dir = path.dirname(dir)) {
      const cand = path.join(dir, "node_modules", name);
      if (fs.existsSync(path.join(cand, "package.json"))) {
        const real = fs.realpathSync(cand);
        if (found.has(real)) return;
        found.set(real, name);
        const p = JSON.parse(fs.readFileSync(path.join(real, "package.json"), "utf8"));
        for (const d of Object.keys({ ...p.dependencies, ...p.optionalDependencies })) visit(d, real);
        return;
      }
      if (dir === path.dirname(dir)) return; // an optional dependency not installed here
    }
  };
  for (const d of Object.keys(pkg.dependencies ?? {})) visit(d, root);
  return [...found].map(([real, name]) => ({ real, name }));
}

function stage(dir) {
  fs.copyFileSync(path.join(root, "package.json"), path.join(dir, "package.json"));
  copyTree(
    path.join(root, "dist/sdk"),
    path.join(dir, "dist/sdk"),
    (s, e) => e.isDirectory() || (s.endsWith(".js") && !s.endsWith(".d.js")),
  );
  // NB: bin/tprpc.mjs is what rpc.startLocalWorkers starts (the channels section's recipe).
  copyTree(path.join(root, "bin"), path.join(dir, "bin"));
  const release = path.join(root, "native/build/Release");
  if (!fs.existsSync(path.join(release, "tprpc.node")))
    throw new Error("native/build/Release/tprpc.node is missing: run npm run build:native first");
  const out = path.join(dir, "native/build/Release");
  copyTree(release, out, (s, e) => !(e.isDirectory() && ["obj.target", ".deps"].includes(e.name)));
  for (const f of fs.readdirSync(out)) if (f.endsWith(".node")) execFileSync("strip", [path.join(out, f)]);
  const deps = runtimeDeps();
  // NB: a nested node_modules of a package travels with it (copied whole).
  for (const { real, name } of deps) copyTree(real, path.join(dir, "node_modules", name));
  return deps.map((d) => d.name).sort();
}

function packNode() {
  const gz = path.join(PACK, "node.gz");
  const stampFile = path.join(PACK, "node.stamp");
  const st = fs.statSync(process.execPath);
  const stamp = `${process.execPath} ${process.version} ${st.size} ${st.mtimeMs}`;
  if (fs.existsSync(gz) && fs.existsSync(stampFile) && fs.readFileSync(stampFile, "utf8") === stamp) return;
  const tmp = path.join(os.tmpdir(), `tprpc-node-${process.pid}`);
  execFileSync("strip", ["-o", tmp, process.execPath]);
  execFileSync("sh", ["-c", `gzip -6 -c "${tmp}" > "${gz}"`]);
  fs.rmSync(tmp);
  fs.writeFileSync(stampFile, stamp);
}

/** Bytes that would travel: tracked and untracked-not-ignored files, plus the pack. */
function travelling() {
  const list = (args) =>
    execFileSync("git", ["ls-files", "-z", ...args], { cwd: root, encoding: "utf8" })
      .split("\0")
      .filter(Boolean);
  let bytes = 0;
  for (const f of new Set([...list([]), ...list(["--others", "--exclude-standard"])])) {
    try {
      const st = fs.lstatSync(path.join(root, f));
      if (st.isFile()) bytes += st.size;
    } catch {
      // deleted in the work tree: does not travel
    }
  }
  let pack = 0;
  for (const f of fs.readdirSync(PACK)) pack += fs.statSync(path.join(PACK, f)).size;
  return { tree: bytes, pack };
}

async function main() {
  if (!process.argv.includes("--no-build"))
    run(process.execPath, ["node_modules/typescript/bin/tsc", "-p", "tsconfig.json"]);
  fs.mkdirSync(PACK, { recursive: true });
  const stageDir = fs.mkdtempSync(path.join(os.tmpdir(), "tprpc-gpu-pack-"));
  try {
    const deps = stage(stageDir);
    log(`runtime node_modules: ${deps.join(", ")}`);
    execFileSync("tar", ["-czf", path.join(PACK, "tprpc.tar.gz"), "-C", stageDir, "."]);
  } finally {
    fs.rmSync(stageDir, { recursive: true, force: true });
  }
  packNode();
  const { tree, pack } = travelling();
  for (const f of fs.readdirSync(PACK)) log(`.gpu-pack/${f}: ${mib(fs.statSync(path.join(PACK, f)).size)}`);
  log(`travels: working tree ${mib(tree)} + .gpu-pack ${mib(pack)} = ${mib(tree + pack)} of ${mib(LIMIT)}`);
  if (tree + pack > LIMIT) throw new Error("over the device tool's 64 MiB: ignore or carry less");

  // Smoke test: tprpc imports from the unpacked tarball and adds on the CPU.
  const check = fs.mkdtempSync(path.join(os.tmpdir(), "tprpc-gpu-unpack-"));
  try {
    execFileSync("tar", ["-xzf", path.join(PACK, "tprpc.tar.gz"), "-C", check]);
    const t = await import(pathToFileURL(path.join(check, "dist/sdk/index.js")).href);
    const sum = t.tensor([1, 2]).add(1).tolist();
    if (JSON.stringify(sum) !== "[2,3]") throw new Error(`unpacked tprpc computed ${JSON.stringify(sum)}`);
    log(
      `unpacked tprpc loads (CPU backend ${t.backend.getBackend().name}); CUDA here: ${t.cuda.isAvailable() ? "yes" : "no"}`,
    );
  } finally {
    fs.rmSync(check, { recursive: true, force: true });
  }
  log("on the device machine, call the device tool's run with:");
  process.stdout.write(
    JSON.stringify({ command: "bash scripts/gpu_check/run.sh", carry: [".gpu-pack"], timeout_s: 590 }) + "\n",
  );
  log("dry run here (no CUDA device): OUT=/tmp/gpu-check-out bash scripts/gpu_check/run.sh");
}

main().catch((e) => {
  process.stderr.write(`[gpu:check] ${e.message}\n`);
  process.exit(1);
});
