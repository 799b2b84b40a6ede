// The device half of `npm run gpu:check`, started by scripts/gpu_check/run.sh:
//   node main.mjs <unpacked tprpc root> <torch_ref.json> <report dir> [sections, e.g. device,suites]
// 1. loads tprpc from the unpacked pack (dist/sdk, the addon, pruned node_modules);
// 2. runs the sections: device, suites (suites.mjs), parity, bench and gpt (ops.mjs), channels
//    (channels.mjs: cuda_ipc between two processes, the CUDA-RPC recipe), each
//    "ok", "failed" or "not available (why)", comparing against PyTorch's numbers from the same
//    run (torch_ref.py wrote them);
// 3. writes report.json and report.md into the report dir; exits 1 when a section failed, 3 when
//    tprpc saw no CUDA device (a dry run on a machine without one: every section "not available").
// Against test/native/cuda_standin.ts's driver (LD_LIBRARY_PATH) the suites run in CI too
// (test/native/gpu_check.test.ts).
import fs from "node:fs";
import path from "node:path";
import { pathToFileURL } from "node:url";
import { runBench, runGptStep, runParity, isMissingKernel } from "./ops.mjs";
import { runSuites } from "./suites.mjs";
import { runChannels } from "./channels.mjs";

const [root, refFile, outDir, only] = process.argv.slice(2);
const wanted = only ? new Set(only.split(",")) : null;
if (!root || !refFile || !outDir) {
  process.stderr.write("usage: node scripts/gpu_check/main.mjs <tprpc root> <torch_ref.json> <report dir>\n");
  process.exit(2);
}
const tprpc = await import(pathToFileURL(path.join(root, "dist/sdk/index.js")).href);
const { nativeGpu, gpuStatus, cudaDevices } = await import(
  pathToFileURL(path.join(root, "dist/sdk/native/gpu.js")).href
);
let ref = {};
try {
  ref = JSON.parse(fs.readFileSync(refFile, "utf8"));
} catch (e) {
  ref = { error: `no PyTorch reference (${e.message})` };
}

const sections = [];
const available = tprpc.cuda.isAvailable();
const why = available ? null : `no CUDA device: ${tprpc.cuda.unavailableReason()}`;
const torchWhy = (part) => ref.error ?? ref[part]?.error ?? null;

async function section(name, f, { needsTorch = null } = {}) {
  if (wanted && !wanted.has(name)) return;
  const t0 = Date.now();
  let s;
  if (!available) s = { status: "not available", detail: why };
  else {
    try {
      const result = await f();
      const rows = Array.isArray(result) ? result : null;
      const failed = rows ? rows.filter((r) => r.status === "failed").length : 0;
      const missing = rows ? rows.filter((r) => r.status === "not available").length : 0;
      s = {
        status: failed ? "failed" : rows && missing === rows.length ? "not available" : "ok",
        detail: rows ? `${rows.length - failed - missing} ok, ${failed} failed, ${missing} not available` : "",
        result,
      };
    } catch (e) {
      s = { status: isMissingKernel(e) ? "not available" : "failed", detail: `${e.name}: ${e.message}`.slice(0, 500) };
    }
  }
  if (needsTorch && torchWhy(needsTorch)) s.torch = `PyTorch reference missing: ${torchWhy(needsTorch)}`;
  sections.push({ name, seconds: (Date.now() - t0) / 1000, ...s });
  process.stdout.write(`[gpu:check] ${name}: ${s.status}${s.detail ? ` (${s.detail})` : ""}\n`);
}

await section("device", () => ({
  devices: cudaDevices(),
  libraries: gpuStatus(),
  torch: { version: ref.torch ?? null, device: ref.device ?? null },
}));
await section("suites", () => runSuites(tprpc, nativeGpu()));
await section("parity", () => runParity(tprpc, ref.parity ?? {}), { needsTorch: "parity" });
await section("bench", () => runBench(tprpc, nativeGpu(), ref.bench?.error ? null : ref.bench), {
  needsTorch: "bench",
});
await section("gpt", () => runGptStep(tprpc, ref.gpt?.error ? null : ref.gpt), { needsTorch: "gpt" });
await section("channels", () => runChannels(tprpc, nativeGpu(), root, ref), { needsTorch: "cuda_rpc" });

const report = { date: new Date().toISOString(), node: process.version, available, sections };
fs.mkdirSync(outDir, { recursive: true });
fs.writeFileSync(path.join(outDir, "report.json"), JSON.stringify(report, null, 2));

const md = [
  `# tprpc gpu:check, ${report.date}`,
  "",
  `node ${process.version}; CUDA ${available ? "available" : why}`,
  "",
];
md.push("| section | status | detail |", "| --- | --- | --- |");
for (const s of sections) md.push(`| ${s.name} | ${s.status} | ${(s.detail ?? "").replace(/\|/g, "/")} |`);
for (const s of sections) {
  if (!Array.isArray(s.result)) continue;
  md.push("", `## ${s.name}`, "", "| case | status | detail |", "| --- | --- | --- |");
  for (const r of s.result) {
    const { name, status, detail, ...rest } = r;
    const extra = Object.keys(rest).length ? JSON.stringify(rest) : "";
    md.push(`| ${name} | ${status} | ${[detail, extra].filter(Boolean).join(" ").replace(/\|/g, "/")} |`);
  }
}
const gpt = sections.find((s) => s.name === "gpt");
if (gpt?.result) md.push("", "## gpt", "", "```json", JSON.stringify(gpt.result, null, 2), "```");
fs.writeFileSync(path.join(outDir, "report.md"), md.join("\n") + "\n");
process.exit(sections.some((s) => s.status === "failed") ? 1 : available ? 0 : 3);
