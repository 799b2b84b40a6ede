/**
 * `npm run gpu:check`'s device half (scripts/gpu_check/main.mjs) run here, in a child process,
 * against the compiled SDK (dist/) and the stand-in driver of ./cuda_standin.ts: the device
 * suites (caching allocator, pinned memory, copies, streams, tensors) must pass on it, so a
 * mistake in them shows before a GPU is lent; without a driver every section is "not available"
 * with the reason and the exit status is 3 (the channels section too: cuda_ipc and the CUDA-RPC recipe). The pack itself (node binary, pruned install, the
 * 64 MiB check) is what `npm run gpu:check` checks when it runs.
 */
import { spawnSync } from "node:child_process";
import fs from "node:fs";
import os from "node:os";
import path from "node:path";
import { fileURLToPath } from "node:url";
import { afterAll, describe, expect, it } from "vitest";
import { buildStandInDriver } from "./cuda_standin.js";
import { gpuStatus } from "../../sdk/native/gpu.js";
import { nativeOrSkip } from "./helpers.js";

const { native, skip } = nativeOrSkip();
const root = path.resolve(path.dirname(fileURLToPath(import.meta.url)), "../..");
const tmp = fs.mkdtempSync(path.join(os.tmpdir(), "tprpc-gpu-check-"));
afterAll(() => fs.rmSync(tmp, { recursive: true, force: true }));

interface Section {
  name: string;
  status: string;
  detail?: string;
  result?: { name: string; status: string; detail: string }[];
}

function main(
  out: string,
  env: NodeJS.ProcessEnv,
  sections = "device,suites",
): { status: number | null; sections: Section[] } {
  const r = spawnSync(
    process.execPath,
    ["--expose-gc", "scripts/gpu_check/main.mjs", root, path.join(tmp, "none.json"), out, sections],
    { cwd: root, encoding: "utf8", env: { ...process.env, ...env }, timeout: 120_000 },
  );
  const report = JSON.parse(fs.readFileSync(path.join(out, "report.json"), "utf8")) as { sections: Section[] };
  return { status: r.status, sections: report.sections };
}

describe.skipIf(skip !== null)("gpu:check's device half", () => {
  it("passes its suites against the stand-in driver", () => {
    const dir = buildStandInDriver(path.join(tmp, "driver"), native!.libraryTable().cuda.symbols);
    const { status, sections } = main(path.join(tmp, "standin"), {
      LD_LIBRARY_PATH: dir,
      STANDIN_EVENTS_DONE: "1",
      STANDIN_MEM_LIMIT: String(2 ** 31),
    });
    expect(sections.map((s) => [s.name, s.status])).toEqual([
      ["device", "ok"],
      ["suites", "ok"],
    ]);
    expect(sections[1]!.result!.filter((r) => r.status !== "ok")).toEqual([]);
    expect(status).toBe(0);
    expect(fs.readFileSync(path.join(tmp, "standin", "report.md"), "utf8")).toMatch(
      /\| suites \| ok \| 7 ok, 0 failed/,
    );
  });

  it("runs the channels section's cuda_ipc rows between two processes against the stand-in", () => {
    const dir = buildStandInDriver(path.join(tmp, "driver-ipc"), native!.libraryTable().cuda.symbols);
    const ipc = path.join(tmp, "ipc");
    fs.mkdirSync(ipc);
    const { sections } = main(
      path.join(tmp, "channels"),
      { LD_LIBRARY_PATH: dir, STANDIN_EVENTS_DONE: "1", STANDIN_IPC_DIR: ipc, TPRPC_GPU_CHECK_IPC_MB: "1,2" },
      "channels",
    );
    const rows = sections[0]!.result!;
    expect(rows.slice(0, 2).map((r) => [r.name, r.status, r.detail.split(";")[0]])).toEqual([
      ["cuda_ipc 1 MB", "ok", "intact"],
      ["cuda_ipc 2 MB", "ok", "intact"],
    ]);
    // The stand-in runs no kernels, so the recipe's shards cannot: reported, the run goes on.
    expect(rows[2]!.name).toMatch(/^CUDA-RPC recipe/);
    expect(rows[2]!.detail).toMatch(/cuModuleLoadData/);
  });

  // NB: where a real driver is installed an empty LD_LIBRARY_PATH does not hide it: skipped there.
  it.skipIf(skip === null && gpuStatus().cuda.viable)(
    "reports every section not available, with the reason, where there is no CUDA driver",
    () => {
      const { status, sections } = main(
        path.join(tmp, "none"),
        { LD_LIBRARY_PATH: path.join(tmp, "empty") },
        "device,suites,channels",
      );
      expect(status).toBe(3);
      expect(sections.map((s) => s.name)).toEqual(["device", "suites", "channels"]);
      for (const s of sections) {
        expect(s.status).toBe("not available");
        expect(s.detail).toMatch(/^no CUDA device: .*libcuda\.so\.1/);
      }
    },
  );
});
