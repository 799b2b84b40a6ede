/**
 * The two commands, `tprpc` (bin/tprpc.mjs) and `tprpc-kernel` (kernel-ext/bin/tprpc-kernel.mjs), run for
 * real as child processes: -h / --help on stdout with exit 0 at every level; no command, the usage on
 * stderr with exit 2; a typo'd option or command, one line naming it plus the usage, exit 2, no stack;
 * invalid values named with what was given; `tprpc-kernel list` honouring --prefix and --user as
 * install does; and install loading neither the SDK nor a native addon (recorded by a preload hook).
 */
import { spawnSync } from "node:child_process";
import fs from "node:fs";
import os from "node:os";
import path from "node:path";
import { pathToFileURL } from "node:url";
import { afterAll, describe, expect, it } from "vitest";
import { rpc } from "../../sdk/index.js";
import { loadNative } from "../../sdk/native/binding.js";

const root = path.resolve(import.meta.dirname, "../..");
const TPRPC = path.join(root, "bin/tprpc.mjs");
const KERNEL = path.join(root, "kernel-ext/bin/tprpc-kernel.mjs");
const RECORD = path.join(root, "test/cli/record_loads.mjs");
const tmp = fs.mkdtempSync(path.join(os.tmpdir(), "tprpc-cli-"));
/**
 * The kernel names a `list` printed (each line's first column). NB: not a substring test of the whole
 * output: the paths contain `tmp`, whose random suffix can spell "cli-a", "cli-b", ...
 */
const kernelNames = (out: string): string[] => out.split("\n").map((l) => l.split("\t")[0]!);
const version = JSON.parse(fs.readFileSync(path.join(root, "package.json"), "utf8")).version as string;

// NB: Jupyter's folders point into tmp, and no RANK / TPRPC_NATIVE from the caller leaks in.
const baseEnv: NodeJS.ProcessEnv = {
  ...process.env,
  JUPYTER_PATH: path.join(tmp, "jupyter-path"),
  JUPYTER_DATA_DIR: path.join(tmp, "user"),
};
for (const k of ["RANK", "WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT", "TPRPC_WORKER_NAME", "TPRPC_NATIVE"])
  delete baseEnv[k];

function run(script: string, args: string[], opts: { env?: NodeJS.ProcessEnv; nodeArgs?: string[] } = {}) {
  const r = spawnSync(process.execPath, [...(opts.nodeArgs ?? []), script, ...args], {
    env: opts.env ?? baseEnv,
    encoding: "utf8",
    timeout: 30_000,
  });
  expect(r.error, `${script} ${args.join(" ")}`).toBeUndefined();
  return { code: r.status, out: r.stdout, err: r.stderr };
}
const tprpc = (...args: string[]) => run(TPRPC, args);
const kernel = (...args: string[]) => run(KERNEL, args);

/** A usage error: exit 2, nothing on stdout, the first stderr line as given, then the usage, no stack. */
function expectUsageError(r: ReturnType<typeof run>, line: string, usage: string) {
  expect({ code: r.code, out: r.out }, r.err).toEqual({ code: 2, out: "" });
  const lines = r.err.trimEnd().split("\n");
  expect(lines[0]).toBe(line);
  expect(lines[1]).toBe(usage);
  expect(r.err).not.toMatch(/^\s+at /m);
  expect(r.err).not.toContain("ERR_");
}

const WORKER_USAGE = "usage: tprpc worker --name NAME [--rank R] [--world-size N] [--init-method URL]";
const KERNEL_USAGE =
  "usage: tprpc-kernel install [--user | --prefix PATH | --sys-prefix] [--name NAME] [--display-name TEXT]";

afterAll(() => fs.rmSync(tmp, { recursive: true, force: true }));

describe("--help, --version and no command", () => {
  it.each([
    [TPRPC, [], WORKER_USAGE],
    [TPRPC, ["worker"], WORKER_USAGE],
    [KERNEL, [], KERNEL_USAGE],
    [KERNEL, ["install"], KERNEL_USAGE],
    [KERNEL, ["uninstall"], "usage: tprpc-kernel uninstall [--user | --prefix PATH | --sys-prefix] [--name NAME]"],
    [KERNEL, ["list"], "usage: tprpc-kernel list [--user | --prefix PATH | --sys-prefix]"],
    [KERNEL, ["kernel"], "usage: tprpc-kernel kernel --config-path CONNECTION_FILE"],
  ])("%s %j --help / -h: the usage on stdout, exit 0", (script, cmd, usage) => {
    for (const flag of ["--help", "-h"]) {
      const r = run(script, [...cmd, flag]);
      expect({ code: r.code, err: r.err }, `${cmd.join(" ")} ${flag}`).toEqual({ code: 0, err: "" });
      expect(r.out.split("\n")[0]).toBe(usage);
      expect(r.out).toContain("-h, --help");
    }
  });

  it("the top-level help lists the commands; a command's help lists its options", () => {
    expect(tprpc("--help").out).toMatch(/^ {2}worker {2,}/m);
    for (const c of ["install", "uninstall", "list", "kernel"]) expect(kernel("--help").out).toMatch(`\n  ${c} `);
    const worker = tprpc("worker", "--help").out;
    for (const o of ["--name NAME", "--rank R", "--world-size N", "--init-method URL"]) expect(worker).toContain(o);
    expect(kernel("list", "--help").out).toContain("--prefix PATH");
  });

  it("--help wins over another mistake on the same command line", () => {
    expect(tprpc("worker", "--rank", "abc", "--bogus", "--help").code).toBe(0);
    expect(kernel("install", "--bogus", "-h").code).toBe(0);
  });

  it("--version prints package.json's version", () => {
    expect(tprpc("--version")).toEqual({ code: 0, out: `${version}\n`, err: "" });
    expect(kernel("--version")).toEqual({ code: 0, out: `${version}\n`, err: "" });
  });

  it("no command: the usage on stderr, exit 2", () => {
    for (const [r, usage] of [
      [tprpc(), WORKER_USAGE],
      [kernel(), KERNEL_USAGE],
    ] as const) {
      expect({ code: r.code, out: r.out }).toEqual({ code: 2, out: "" });
      expect(r.err.split("\n")[0]).toBe(usage);
    }
  });
});

describe("command-line mistakes: one line naming it, the usage, exit 2", () => {
  it("an unknown option or command", () => {
    expectUsageError(tprpc("worker", "--rnak", "1"), "tprpc worker: unknown option --rnak", WORKER_USAGE);
    expectUsageError(tprpc("worker", "-x"), "tprpc worker: unknown option -x", WORKER_USAGE);
    expectUsageError(tprpc("--bogus"), "tprpc: unknown option --bogus", WORKER_USAGE);
    expectUsageError(tprpc("wroker"), 'tprpc: unknown command "wroker"', WORKER_USAGE);
    expectUsageError(kernel("install", "--prefx", tmp), "tprpc-kernel install: unknown option --prefx", KERNEL_USAGE);
    expectUsageError(kernel("instal"), 'tprpc-kernel: unknown command "instal"', KERNEL_USAGE);
  });

  it("a missing value, a value given to a flag, a stray argument", () => {
    expectUsageError(tprpc("worker", "--name"), "tprpc worker: --name needs a value", WORKER_USAGE);
    expectUsageError(tprpc("worker", "--name", "--rank", "1"), "tprpc worker: --name needs a value", WORKER_USAGE);
    expectUsageError(tprpc("worker", "--name", "w", "1"), 'tprpc worker: unexpected argument "1"', WORKER_USAGE);
    expectUsageError(
      kernel("install", "--prefix"),
      "tprpc-kernel install: --prefix needs a value (--prefix PATH)",
      KERNEL_USAGE,
    );
    expectUsageError(kernel("install", "--user=yes"), "tprpc-kernel install: --user takes no value", KERNEL_USAGE);
    expectUsageError(
      kernel("kernel"),
      "tprpc-kernel kernel: --config-path is required",
      "usage: tprpc-kernel kernel --config-path CONNECTION_FILE",
    );
  });

  it("invalid values, named with what was given (before the SDK loads)", () => {
    const w = (...args: string[]) => tprpc("worker", "--name", "w", ...args);
    expectUsageError(
      w("--rank", "abc"),
      'tprpc worker: --rank must be a non-negative integer, got "abc"',
      WORKER_USAGE,
    );
    expectUsageError(w("--rank", "-1"), 'tprpc worker: --rank must be a non-negative integer, got "-1"', WORKER_USAGE);
    expectUsageError(
      w("--rank", "1.5"),
      'tprpc worker: --rank must be a non-negative integer, got "1.5"',
      WORKER_USAGE,
    );
    expectUsageError(
      w("--rank", "1", "--world-size", "abc"),
      'tprpc worker: --world-size must be a positive integer, got "abc"',
      WORKER_USAGE,
    );
    expectUsageError(
      w("--rank", "0", "--world-size", "0"),
      'tprpc worker: --world-size must be a positive integer, got "0"',
      WORKER_USAGE,
    );
    expectUsageError(
      w("--rank", "2", "--world-size", "2"),
      "tprpc worker: --rank 2 is out of range for --world-size 2 (ranks 0..1)",
      WORKER_USAGE,
    );
    for (const bad of ["foo://x", "tcp://127.0.0.1", "tcp://127.0.0.1:0", "tcp://127.0.0.1:65536", "127.0.0.1:29500"])
      expectUsageError(
        w("--rank", "1", "--init-method", bad),
        `tprpc worker: --init-method must be tcp://HOST:PORT (port 1..65535) or env://, got "${bad}"`,
        WORKER_USAGE,
      );
    expectUsageError(
      tprpc("worker", "--rank", "1"),
      "tprpc worker: --name is required (or the env variable TPRPC_WORKER_NAME)",
      WORKER_USAGE,
    );
    expectUsageError(
      tprpc("worker", "--name", "w"),
      "tprpc worker: --rank is required (or the env variable RANK)",
      WORKER_USAGE,
    );
  });

  it("an error from the SDK (here an invalid worker name) is one line, exit 1", () => {
    const r = tprpc(
      "worker",
      "--name",
      "a/b",
      "--rank",
      "1",
      "--world-size",
      "2",
      "--init-method",
      "tcp://127.0.0.1:1",
    );
    expect(r.code, r.err).toBe(1);
    expect(r.err.trimEnd().split("\n")).toEqual([
      expect.stringMatching(/^tprpc worker: ValueError: worker name "a\/b"/),
    ]);
  });
});

describe("tprpc-kernel list and install", () => {
  const a = path.join(tmp, "prefix-a");
  const b = path.join(tmp, "prefix-b");

  it("list --prefix P lists what install --prefix P wrote, and only there", () => {
    expect(kernel("install", "--prefix", a, "--name", "cli-a").code).toBe(0);
    const inA = kernel("list", "--prefix", a);
    expect(inA.code, inA.err).toBe(0);
    expect(inA.out).toBe(
      `cli-a\t${path.join(a, "share/jupyter/kernels/cli-a")}\t(TypeScript (tprpc); package ${path.join(root, "kernel-ext")})\n`,
    );
    expect(kernel("list", "--prefix", b).out).toBe(
      "no tprpc kernelspec installed there (run: npx tprpc-kernel install)\n",
    );
    // NB: without a location, list shows what Jupyter sees (JUPYTER_PATH, the user folder, ...), not prefix-a.
    expect(kernelNames(kernel("list").out)).not.toContain("cli-a");
    expect(kernel("uninstall", "--prefix", a, "--name", "cli-a").code).toBe(0);
    expect(kernel("list", "--prefix", a).out).toContain("no tprpc kernelspec installed there");
  });

  it("list --user lists the per-user folder only; --sys-prefix the active virtualenv", () => {
    expect(kernel("install", "--name", "cli-user").code).toBe(0);
    expect(kernel("install", "--prefix", b, "--name", "cli-b").code).toBe(0);
    const user = kernel("list", "--user").out;
    expect(user).toContain(`cli-user\t${path.join(tmp, "user/kernels/cli-user")}\t`);
    expect(kernelNames(user)).not.toContain("cli-b");
    const venv = run(KERNEL, ["list", "--sys-prefix"], { env: { ...baseEnv, VIRTUAL_ENV: b } });
    expect(venv.out).toContain(`cli-b\t${path.join(b, "share/jupyter/kernels/cli-b")}\t`);
    expect(kernelNames(venv.out)).not.toContain("cli-user");
    expect(kernel("list", "--user", "--prefix", b)).toMatchObject({
      code: 1,
      err: "tprpc-kernel list: choose one of --user, --prefix PATH and --sys-prefix\n",
    });
  });

  it("install's kernel.json starts node with the SDK's RPC_NODE_FLAGS", () => {
    expect(kernel("install", "--prefix", a, "--name", "cli-flags").code).toBe(0);
    const spec = JSON.parse(fs.readFileSync(path.join(a, "share/jupyter/kernels/cli-flags/kernel.json"), "utf8"));
    expect(spec.argv).toEqual([
      process.execPath,
      ...rpc.RPC_NODE_FLAGS,
      KERNEL,
      "kernel",
      "--config-path",
      "{connection_file}",
    ]);
  });

  /** Runs `node --import record_loads.mjs ...argv`: its exit code, and the ES modules and native addons it loaded. */
  function loads(...argv: string[]) {
    const file = path.join(tmp, `loads-${Math.random().toString(36).slice(2)}.txt`);
    const r = spawnSync(process.execPath, ["--import", RECORD, ...argv], {
      env: { ...baseEnv, TPRPC_RECORD_LOADS: file },
      encoding: "utf8",
      timeout: 30_000,
    });
    expect(r.error).toBeUndefined();
    const lines = fs.readFileSync(file, "utf8").trimEnd().split("\n");
    return {
      code: r.status,
      modules: lines.filter((l) => l.startsWith("load ")).map((l) => l.slice(5)),
      addons: lines.filter((l) => l.startsWith("dlopen ")).map((l) => l.slice(7)),
    };
  }
  const url = (p: string) => pathToFileURL(path.join(root, p)).href;
  const heavy = (modules: string[]) => modules.filter((m) => m.includes("/dist/sdk/") || m.includes("/node_modules/"));

  it("the recorder sees the SDK and its addon when a process does load them", () => {
    const r = loads("--input-type=module", "-e", `await import(${JSON.stringify(url("dist/sdk/index.js"))})`);
    expect(r.code).toBe(0);
    expect(r.modules).toContain(url("dist/sdk/index.js"));
    // NB: TPRPC_NATIVE is unset for the children; loadNative() says whether this machine has the addon.
    if (loadNative()) expect(r.addons.some((f) => f.endsWith("tprpc.node"))).toBe(true);
  });

  it("install, uninstall and list load neither the SDK nor any native addon", () => {
    for (const args of [
      ["install", "--prefix", a, "--name", "cli-light"],
      ["list", "--prefix", a],
      ["list"],
      ["uninstall", "--prefix", a, "--name", "cli-light"],
      ["install", "--help"],
    ]) {
      const r = loads(KERNEL, ...args);
      expect(r.code, args.join(" ")).toBe(0);
      expect(r.modules, args.join(" ")).toContain(url("kernel-ext/dist/kernelspec.js"));
      expect(heavy(r.modules), args.join(" ")).toEqual([]);
      expect(r.addons, args.join(" ")).toEqual([]);
    }
  });

  it("tprpc --help and a usage error load neither the SDK nor any native addon", () => {
    for (const [args, code] of [
      [["--help"], 0],
      [["worker", "--help"], 0],
      [["worker", "--name", "w", "--rank", "abc"], 2],
    ] as const) {
      const r = loads(TPRPC, ...args);
      expect(r.code, args.join(" ")).toBe(code);
      expect(r.modules, args.join(" ")).toContain(url("bin/tprpc.mjs"));
      expect(heavy(r.modules), args.join(" ")).toEqual([]);
      expect(r.addons, args.join(" ")).toEqual([]);
    }
  });
});
