/**
 * The tprpc-kernel CLI's kernelspec handling, through the real command: install into a
 * --prefix (kernel.json starts this Node on this package's tprpc-kernel), `list` and
 * Jupyter's own `jupyter kernelspec list` see it through JUPYTER_PATH, uninstall removes it;
 * bad names and conflicting location flags are refused with a message.
 */
import { spawnSync } from "node:child_process";
import fs from "node:fs";
import os from "node:os";
import path from "node:path";
import { afterAll, describe, expect, it } from "vitest";

const root = path.resolve(import.meta.dirname, "../..");
const bin = path.join(root, "kernel-ext/bin/tprpc-kernel.mjs");
const dir = fs.mkdtempSync(path.join(os.tmpdir(), "tprpc-kernelspec-"));
const env = {
  ...process.env,
  JUPYTER_PATH: path.join(dir, "share", "jupyter"),
  JUPYTER_DATA_DIR: path.join(dir, "user"),
};

function cli(...args: string[]) {
  const r = spawnSync(process.execPath, [bin, ...args], { env, encoding: "utf8", timeout: 30_000 });
  return { code: r.status, out: r.stdout + r.stderr };
}

const jupyter = spawnSync("jupyter", ["kernelspec", "--version"], { stdio: "ignore" }).status === 0;

describe("tprpc-kernel install / list / uninstall", () => {
  afterAll(() => fs.rmSync(dir, { recursive: true, force: true }));

  it("installs a kernelspec that runs this package's kernel with this node", () => {
    const r = cli("install", "--prefix", dir, "--name", "tprpc-test");
    expect(r.code, r.out).toBe(0);
    const spec = JSON.parse(fs.readFileSync(path.join(dir, "share/jupyter/kernels/tprpc-test/kernel.json"), "utf8"));
    expect(spec.argv).toEqual([
      process.execPath,
      "--initial-old-space-size=256",
      bin,
      "kernel",
      "--config-path",
      "{connection_file}",
    ]);
    expect(spec.display_name).toBe("TypeScript (tprpc)");
    expect(spec.interrupt_mode).toBe("signal");
    expect(spec.metadata.tprpc.root).toBe(path.join(root, "kernel-ext"));
    const listed = cli("list");
    expect(listed.out).toContain("tprpc-test");
  });

  it.skipIf(!jupyter)("is seen by `jupyter kernelspec list`", () => {
    const r = spawnSync("jupyter", ["kernelspec", "list", "--json"], { env, encoding: "utf8", timeout: 30_000 });
    const specs = JSON.parse(r.stdout).kernelspecs as Record<string, { spec: { display_name: string } }>;
    expect(specs["tprpc-test"]?.spec.display_name).toBe("TypeScript (tprpc)");
  });

  it("installs per user by default (JUPYTER_DATA_DIR) and uninstalls", () => {
    expect(cli("install").code).toBe(0);
    expect(fs.existsSync(path.join(dir, "user/kernels/tprpc/kernel.json"))).toBe(true);
    expect(cli("uninstall").code).toBe(0);
    expect(fs.existsSync(path.join(dir, "user/kernels/tprpc"))).toBe(false);
    expect(cli("uninstall").code).toBe(1); // nothing left to remove
    expect(cli("uninstall", "--prefix", dir, "--name", "tprpc-test").code).toBe(0);
    expect(cli("list").out).toContain("no tprpc kernelspec installed");
  });

  it("--sys-prefix installs into the active virtualenv", () => {
    const venv = path.join(dir, "venv");
    const r = spawnSync(process.execPath, [bin, "install", "--sys-prefix"], {
      env: { ...env, VIRTUAL_ENV: venv },
      encoding: "utf8",
      timeout: 30_000,
    });
    expect(r.status, r.stderr).toBe(0);
    expect(fs.existsSync(path.join(venv, "share/jupyter/kernels/tprpc/kernel.json"))).toBe(true);
  });

  it("refuses a bad name and two locations at once", () => {
    const bad = cli("install", "--prefix", dir, "--name", "../evil");
    expect(bad.code).toBe(1);
    expect(bad.out).toContain("may only hold letters");
    const two = cli("install", "--user", "--prefix", dir);
    expect(two.code).toBe(1);
    expect(two.out).toContain("choose one of");
    expect(cli("frobnicate").code).toBe(2);
  });
});
