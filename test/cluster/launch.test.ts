/**
 * `tprpc launch` run for real (bin/tprpc.mjs launch, child scripts in a temp folder): the variables
 * each child gets (from flags, from Slurm's, from a launcher above), restarts up to --max-restarts,
 * the first failure's exit code with the siblings stopped, SIGTERM/SIGINT forwarded, SIGKILL after the
 * grace period, no child outliving a SIGKILLed launcher, usage errors; and an RPC group across two
 * launchers on this host, one running a script (rank 0 the master) and one --worker.
 */
import { type ChildProcess, spawn, spawnSync } from "node:child_process";
import fs from "node:fs";
import os from "node:os";
import path from "node:path";
import { pathToFileURL } from "node:url";
import { afterAll, describe, expect, it } from "vitest";
import { freePort } from "../../sdk/rpc/launcher.js";
import { firstSlurmHost } from "../../sdk/cluster/launch_plan.js";

const root = path.resolve(import.meta.dirname, "../..");
const TPRPC = path.join(root, "bin/tprpc.mjs");
const tmp = fs.mkdtempSync(path.join(os.tmpdir(), "tprpc-launch-"));
const USAGE_START = "usage: tprpc launch [--nnodes N]";

const baseEnv: NodeJS.ProcessEnv = { ...process.env };
for (const k of Object.keys(baseEnv))
  if (/^(SLURM_|RANK$|WORLD_SIZE$|LOCAL_RANK$|MASTER_|TPRPC_SECRET$|TPRPC_WORKER_NAME$|TPRPC_NUM_THREADS$)/.test(k))
    delete baseEnv[k];

afterAll(() => fs.rmSync(tmp, { recursive: true, force: true }));

let n = 0;
/** Writes a child script; `OUT` in it is a fresh folder for this test's files. */
function script(body: string): { file: string; out: string } {
  const out = path.join(tmp, `out${++n}`);
  fs.mkdirSync(out);
  const file = path.join(tmp, `child${n}.mjs`);
  fs.writeFileSync(
    file,
    `import fs from "node:fs";\nimport path from "node:path";\nconst OUT = ${JSON.stringify(out)};\n${body}\n`,
  );
  return { file, out };
}

function launchSync(args: string[], env: NodeJS.ProcessEnv = {}) {
  const r = spawnSync(process.execPath, [TPRPC, "launch", ...args], {
    env: { ...baseEnv, ...env },
    encoding: "utf8",
    timeout: 30_000,
  });
  expect(r.error).toBeUndefined();
  return { code: r.status, out: r.stdout, err: r.stderr };
}

function launch(args: string[], env: NodeJS.ProcessEnv = {}): { proc: ChildProcess; exit: Promise<number | null> } {
  const proc = spawn(process.execPath, [TPRPC, "launch", ...args], {
    env: { ...baseEnv, ...env },
    stdio: ["ignore", "inherit", "inherit"],
  });
  return { proc, exit: new Promise((r) => proc.once("exit", (code) => r(code))) };
}

async function waitFor<T>(what: string, f: () => T | undefined, ms = 20_000): Promise<T> {
  const until = Date.now() + ms;
  for (;;) {
    const v = f();
    if (v !== undefined) return v;
    if (Date.now() > until) throw new Error(`timed out after ${ms} ms waiting for ${what}`);
    await new Promise((r) => setTimeout(r, 50));
  }
}

function within<T>(p: Promise<T>, ms: number, what: string): Promise<T> {
  return Promise.race([
    p,
    new Promise<T>((_, rej) => setTimeout(() => rej(new Error(`timed out after ${ms} ms: ${what}`)), ms)),
  ]);
}

function alive(pid: number): boolean {
  try {
    process.kill(pid, 0);
    return true;
  } catch {
    return false;
  }
}

/** The pids the children wrote (file `pid.<RANK>`), once all `count` are there. */
function pids(out: string, count: number): number[] | undefined {
  const f = fs.readdirSync(out).filter((x) => x.startsWith("pid."));
  if (f.length < count) return undefined;
  return f.map((x) => Number(fs.readFileSync(path.join(out, x), "utf8")));
}

const ENV_KEYS = ["RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE", "GROUP_RANK", "MASTER_ADDR", "MASTER_PORT"];
const envScript = () =>
  script(
    `fs.writeFileSync(path.join(OUT, "env." + process.env.RANK), JSON.stringify({ ${ENV_KEYS.map(
      (k) => `${k}: process.env.${k}`,
    ).join(
      ", ",
    )}, secret: !!process.env.TPRPC_SECRET, restart: process.env.TORCHELASTIC_RESTART_COUNT, args: process.argv.slice(2) }));`,
  );

function envs(out: string): Record<string, Record<string, unknown>> {
  const o: Record<string, Record<string, unknown>> = {};
  for (const f of fs.readdirSync(out).filter((x) => x.startsWith("env.")))
    o[f.slice(4)] = JSON.parse(fs.readFileSync(path.join(out, f), "utf8")) as Record<string, unknown>;
  return o;
}

describe("tprpc launch: the children's variables", () => {
  it("gives each child torchrun's variables from the flags, and passes the script's arguments", () => {
    const { file, out } = envScript();
    const r = launchSync(
      [
        "--nnodes",
        "2",
        "--node-rank=1",
        "--nproc_per_node",
        "2",
        "--master-addr",
        "10.1.2.3",
        "--master-port",
        "1234",
        file,
        "--lr",
        "0.1",
      ],
      { TPRPC_SECRET: "s3cret" },
    );
    expect(r.code, r.err).toBe(0);
    const e = envs(out);
    expect(Object.keys(e).sort()).toEqual(["2", "3"]);
    expect(e["3"]).toEqual({
      RANK: "3",
      WORLD_SIZE: "4",
      LOCAL_RANK: "1",
      LOCAL_WORLD_SIZE: "2",
      GROUP_RANK: "1",
      MASTER_ADDR: "10.1.2.3",
      MASTER_PORT: "1234",
      secret: true,
      restart: "0",
      args: ["--lr", "0.1"],
    });
  });

  it("gives each child max(1, floor(cores / nproc-per-node)) kernel threads unless TPRPC_NUM_THREADS is set", () => {
    const body = `fs.writeFileSync(path.join(OUT, "env." + process.env.RANK), JSON.stringify({ t: process.env.TPRPC_NUM_THREADS }));`;
    const cores = os.availableParallelism();
    for (const [nproc, given, want] of [
      [2, undefined, String(Math.max(1, Math.floor(cores / 2)))],
      [3, undefined, String(Math.max(1, Math.floor(cores / 3)))],
      [2, "5", "5"],
    ] as const) {
      const { file, out } = script(body);
      const env = given === undefined ? {} : { TPRPC_NUM_THREADS: given };
      const r = launchSync(["--nproc-per-node", String(nproc), "--master-port", "1234", file], env);
      expect(r.code, r.err).toBe(0);
      expect(Object.values(envs(out)).map((e) => e.t)).toEqual(Array.from({ length: nproc }, () => want));
    }
  });

  it("reads Slurm's variables: one launcher per task, the master is the first host of the node list", () => {
    const { file, out } = envScript();
    const r = launchSync(["--nproc-per-node", "2", file], {
      SLURM_PROCID: "1",
      SLURM_NTASKS: "2",
      SLURM_LOCALID: "0",
      SLURM_NODELIST: "gpu[07-08,11]",
      TPRPC_SECRET: "s",
    });
    expect(r.code, r.err).toBe(0);
    const e = envs(out);
    expect(Object.keys(e).sort()).toEqual(["2", "3"]);
    expect(e["2"]).toMatchObject({
      WORLD_SIZE: "4",
      LOCAL_RANK: "0",
      GROUP_RANK: "1",
      MASTER_ADDR: "gpu07",
      MASTER_PORT: "29500",
    });
    expect(firstSlurmHost("n1,n2")).toBe("n1");
    expect(firstSlurmHost("node[001-004]")).toBe("node001");
  });

  it("reads a launcher above it (RANK, WORLD_SIZE, LOCAL_RANK, MASTER_ADDR, MASTER_PORT) as its node's place", () => {
    const { file, out } = envScript();
    const r = launchSync(["--nproc-per-node", "2", file], {
      RANK: "2",
      WORLD_SIZE: "3",
      LOCAL_RANK: "1",
      MASTER_ADDR: "10.9.9.9",
      MASTER_PORT: "4321",
      TPRPC_SECRET: "s",
    });
    expect(r.code, r.err).toBe(0);
    const e = envs(out);
    expect(Object.keys(e).sort()).toEqual(["4", "5"]);
    expect(e["5"]).toMatchObject({
      WORLD_SIZE: "6",
      LOCAL_RANK: "3",
      GROUP_RANK: "2",
      MASTER_ADDR: "10.9.9.9",
      MASTER_PORT: "4321",
    });
  });

  it("refuses mistakes with one line and the usage (exit 2), and prints --help on stdout", () => {
    const usage = (args: string[], line: string, env: NodeJS.ProcessEnv = {}) => {
      const r = launchSync(args, env);
      expect({ code: r.code, out: r.out }).toEqual({ code: 2, out: "" });
      const lines = r.err.trimEnd().split("\n");
      expect(lines).toHaveLength(2);
      expect(lines[0]).toBe(`tprpc launch: ${line}`);
      expect(lines[1]!.startsWith(USAGE_START)).toBe(true);
    };
    usage(["--nprocs", "2", "x.mjs"], "unknown option --nprocs");
    usage(["--nproc-per-node"], "--nproc-per-node needs a value");
    usage(["--nproc-per-node", "zero", "x.mjs"], '--nproc-per-node must be a whole number >= 1, got "zero"');
    usage([], "no script to run: give a script (or --worker)");
    usage(["--nnodes", "2", "--node-rank", "2", "x.mjs"], "the node rank 2 is out of range for 2 node(s) (0..1)");
    usage(
      ["--nnodes", "2", "--master-addr", "h", "x.mjs"],
      "with 2 nodes every launcher needs the same group secret: set TPRPC_SECRET (e.g. openssl rand -hex 32) on every node",
    );
    const h = launchSync(["--nproc-per-node", "2", "--help"]);
    expect(h.code).toBe(0);
    expect(h.out.startsWith(USAGE_START)).toBe(true);
    expect(h.err).toBe("");
  });
});

describe("tprpc launch: failures, restarts and signals", () => {
  it("restarts a failed child with TORCHELASTIC_RESTART_COUNT + 1 and exits 0 once it succeeds", () => {
    const { file, out } = script(
      `const k = process.env.TORCHELASTIC_RESTART_COUNT;\nfs.writeFileSync(path.join(OUT, "run." + process.env.RANK + "." + k), "");\nif (process.env.RANK === "1" && k === "0") process.exit(3);`,
    );
    const r = launchSync(["--nproc-per-node", "2", "--max-restarts", "1", file]);
    expect(r.code, r.err).toBe(0);
    expect(fs.readdirSync(out).sort()).toEqual(["run.0.0", "run.1.0", "run.1.1"]);
    expect(r.err).toContain("rank 1 exited with code 3; restarting it (restart 1 of 1)");
  });

  it("exits with the first failure's code once restarts are spent, stopping its siblings", async () => {
    const { file, out } = script(
      `fs.writeFileSync(path.join(OUT, "pid." + process.env.RANK), String(process.pid));\n` +
        `if (process.env.RANK === "1") { while (!fs.existsSync(path.join(OUT, "pid.0"))) await new Promise((r) => setTimeout(r, 20)); process.exit(7); }\n` +
        `setInterval(() => {}, 1000);`,
    );
    const { exit } = launch(["--nproc-per-node", "2", "--max-restarts", "1", file]);
    const code = await within(exit, 30_000, "the launcher's exit");
    expect(code).toBe(7);
    const [p0] = pids(out, 1)!;
    expect(alive(p0!)).toBe(false);
  }, 40_000);

  it("forwards SIGTERM to every child and exits 0 when they all handled it", async () => {
    const { file, out } = script(
      `process.on("SIGTERM", () => { fs.writeFileSync(path.join(OUT, "term." + process.env.RANK), ""); process.exit(0); });\n` +
        `fs.writeFileSync(path.join(OUT, "pid." + process.env.RANK), String(process.pid));\nsetInterval(() => {}, 1000);`,
    );
    const { proc, exit } = launch(["--nproc-per-node", "3", file]);
    const ps = await waitFor("3 children", () => pids(out, 3));
    proc.kill("SIGTERM");
    expect(await within(exit, 20_000, "the launcher's exit")).toBe(0);
    expect(
      fs
        .readdirSync(out)
        .filter((f) => f.startsWith("term."))
        .sort(),
    ).toEqual(["term.0", "term.1", "term.2"]);
    for (const p of ps) expect(alive(p)).toBe(false);
  }, 40_000);

  it("forwards SIGINT; a child that ignores it is killed after --grace-ms, and the exit code says so", async () => {
    const { file, out } = script(
      `process.on("SIGINT", () => fs.writeFileSync(path.join(OUT, "int." + process.env.RANK), ""));\n` +
        `fs.writeFileSync(path.join(OUT, "pid." + process.env.RANK), String(process.pid));\nsetInterval(() => {}, 1000);`,
    );
    const { proc, exit } = launch(["--nproc-per-node", "2", "--grace-ms", "500", file]);
    const ps = await waitFor("2 children", () => pids(out, 2));
    proc.kill("SIGINT");
    expect(await within(exit, 20_000, "the launcher's exit")).toBe(128 + os.constants.signals.SIGKILL);
    expect(
      fs
        .readdirSync(out)
        .filter((f) => f.startsWith("int."))
        .sort(),
    ).toEqual(["int.0", "int.1"]);
    for (const p of ps) expect(alive(p)).toBe(false);
  }, 40_000);

  it("leaves no child behind when the launcher itself is SIGKILLed", async () => {
    const { file, out } = script(
      `fs.writeFileSync(path.join(OUT, "pid." + process.env.RANK), String(process.pid));\nsetInterval(() => {}, 1000);`,
    );
    const { proc, exit } = launch(["--nproc-per-node", "2", file]);
    const ps = await waitFor("2 children", () => pids(out, 2));
    proc.kill("SIGKILL");
    await within(exit, 10_000, "the launcher's exit");
    await waitFor("the children to exit", () => (ps.every((p) => !alive(p)) ? true : undefined), 10_000);
  }, 30_000);
});

describe("tprpc launch: an RPC group over two launchers", () => {
  it("node 0 runs the master script, node 1 serves as --worker; the group computes and shuts down", async () => {
    const sdk = pathToFileURL(path.join(root, "dist/sdk/index.js")).href;
    const { file, out } = script(
      `const { rpc, ones } = await import(${JSON.stringify(sdk)});\n` +
        `const rank = Number(process.env.RANK);\n` +
        `await rpc.initRpc(rank === 0 ? "master" : "worker" + rank, { initTimeoutMs: 30_000 });\n` +
        `if (rank === 0) {\n` +
        `  const names = rpc.workers().map((w) => w.name).sort();\n` +
        `  const sums = [];\n` +
        `  for (const w of names.filter((x) => x !== "master")) sums.push(await rpc.rpcSync(w, (x, r) => x.mul(r).sum().item(), [ones([4]), Number(w.slice(6))]));\n` +
        `  fs.writeFileSync(path.join(OUT, "result.json"), JSON.stringify({ names, sums }));\n` +
        `}\nawait rpc.shutdown();\n`,
    );
    const port = String(await freePort());
    const secret = "launch-test-secret";
    const common = ["--nnodes", "2", "--nproc-per-node", "2", "--master-addr", "127.0.0.1", "--master-port", port];
    const a = launch([...common, "--node-rank", "0", file], { TPRPC_SECRET: secret });
    const b = launch([...common, "--node-rank", "1", "--worker"], { TPRPC_SECRET: secret });
    const [ca, cb] = await within(Promise.all([a.exit, b.exit]), 60_000, "both launchers' exits");
    expect([ca, cb]).toEqual([0, 0]);
    expect(JSON.parse(fs.readFileSync(path.join(out, "result.json"), "utf8"))).toEqual({
      names: ["master", "worker1", "worker2", "worker3"],
      sums: [4, 8, 12],
    });
  }, 70_000);
});
