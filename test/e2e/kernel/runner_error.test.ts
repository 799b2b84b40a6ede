/**
 * `npm run notebooks`' runner end to end on a notebook whose second cell fails with a
 * RemoteError from a worker: exit code 1, the executed copy written to --out (the source
 * untouched) with the first cell's output, the error output (ename, evalue, the remote
 * traceback) and no execution of the third cell; the workers that cell started are gone.
 * Skipped where no Python has jupyter_server.
 */
import { spawn } from "node:child_process";
import fs from "node:fs";
import os from "node:os";
import path from "node:path";
import { afterAll, describe, expect, it } from "vitest";
import { gone, hasJupyter } from "./helpers.js";

const root = path.resolve(import.meta.dirname, "../../..");

const cells = [
  'console.log("before the error");',
  [
    "const c = await tprpc.cluster.start({ workers: 1 });",
    'console.log("PIDS " + JSON.stringify(c.pids));',
    "function checkPositive(n: number): number {",
    '  if (n > 0) throw new TypeError("bad n " + n);',
    "  return n;",
    "}",
    'await tprpc.rpc.rpcSync("worker1", checkPositive, [3]);',
  ].join("\n"),
  'console.log("never runs");',
];

describe.skipIf(!hasJupyter)("notebook runner (e2e)", () => {
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), "tprpc-runner-test-"));
  afterAll(() => fs.rmSync(dir, { recursive: true, force: true }));

  it("stops at the failing cell with exit code 1 and writes its outputs", async () => {
    const src = path.join(dir, "fails.ipynb");
    const nb = {
      cells: cells.map((source) => ({ cell_type: "code", source, metadata: {}, outputs: [], execution_count: null })),
      metadata: {},
      nbformat: 4,
      nbformat_minor: 5,
    };
    fs.writeFileSync(src, JSON.stringify(nb));
    const before = fs.readFileSync(src, "utf8");
    const outDir = path.join(dir, "out");
    const child = spawn(
      process.execPath,
      [path.join(root, "dist/scripts/run-notebooks/main.js"), src, "--out", outDir],
      {
        stdio: ["ignore", "pipe", "pipe"],
      },
    );
    let log = "";
    child.stdout.on("data", (b: Buffer) => (log += b));
    child.stderr.on("data", (b: Buffer) => (log += b));
    const code = await new Promise<number | null>((resolve, reject) => {
      const t = setTimeout(() => {
        child.kill("SIGTERM");
        reject(new Error(`the runner took over 150 s:\n${log}`));
      }, 150_000);
      child.once("exit", (c) => {
        clearTimeout(t);
        resolve(c);
      });
    });
    expect(code, log).toBe(1);
    expect(log).toContain("cell 2 failed: RemoteError");
    expect(fs.readFileSync(src, "utf8")).toBe(before);

    const out = JSON.parse(fs.readFileSync(path.join(outDir, "fails.ipynb"), "utf8")) as {
      cells: Array<{ execution_count: number | null; outputs: Array<Record<string, unknown>> }>;
    };
    const [c1, c2, c3] = out.cells;
    expect(c1!.execution_count).toBe(1);
    expect(c1!.outputs).toEqual([{ output_type: "stream", name: "stdout", text: ["before the error\n"] }]);
    expect(c2!.execution_count).toBe(2);
    const err = c2!.outputs.find((o) => o.output_type === "error") as {
      ename: string;
      evalue: string;
      traceback: string[];
    };
    expect(err.ename).toBe("RemoteError");
    expect(err.evalue).toContain("bad n 3");
    expect(err.evalue).toContain("worker1");
    const tb = err.traceback.join("\n");
    expect(tb).toContain('Remote traceback (TypeError on worker "worker1")');
    expect(tb).toContain("checkPositive");
    expect(c3!.execution_count).toBeNull();
    expect(c3!.outputs).toEqual([]);

    const stdout = c2!.outputs
      .filter((o) => o.output_type === "stream")
      .map((o) => (o.text as string[]).join(""))
      .join("");
    const pids = JSON.parse(/PIDS (\[.*\])/.exec(stdout)![1]!) as number[];
    expect(pids).toHaveLength(1);
    expect(await gone(pids, 10_000)).toEqual([]);
  }, 180_000);
});
