/**
 * A private Jupyter server for the notebook runner.
 * 1. Find a Python with jupyter_server (TPRPC_JUPYTER_PYTHON, else /usr/bin/python3, else python3;
 *    NB: Debian ships no `jupyter-server` command, so it runs as `python -m jupyter_server`).
 * 2. Write this checkout's tprpc kernelspec into a temporary JUPYTER_PATH folder, so the run
 *    uses this tree's kernel whatever kernelspec the user installed (and needs none).
 * 3. Start the server on 127.0.0.1, a free port and a random token, in its own process
 *    group, with temporary config and runtime folders (no user config leaks in).
 * 4. Wait until GET /api/status answers (bounded), or fail with the server's output.
 * 5. stop(): SIGTERM to the server's group, SIGKILL after a grace period, remove the temp folders
 *    (and, should this process exit without stop(), its 'exit' hook SIGKILLs the group).
 */
import { type ChildProcess, spawn, spawnSync } from "node:child_process";
import { randomBytes } from "node:crypto";
import fs from "node:fs";
import os from "node:os";
import path from "node:path";
import { install } from "tprpc-kernel/kernelspec";
import { freePort } from "../../sdk/rpc/launcher.js";

export interface JupyterServer {
  baseUrl: string;
  token: string;
  /** The kernelspec name to start (this checkout's kernel, or the one asked for). */
  kernelName: string;
  pid: number;
  stop(): Promise<void>;
}

export class RunnerSetupError extends Error {
  override name = "RunnerSetupError";
}

function findPython(): string {
  const candidates = [process.env.TPRPC_JUPYTER_PYTHON, "/usr/bin/python3", "python3"].filter(Boolean) as string[];
  for (const py of candidates) {
    const r = spawnSync(py, ["-c", "import jupyter_server"], { stdio: "ignore" });
    if (r.status === 0) return py;
  }
  throw new RunnerSetupError(
    `no Python with jupyter_server found (tried ${candidates.join(", ")}): install it with ` +
      "`apt-get install python3-jupyter-server` (bash scripts/setup.sh does) or set TPRPC_JUPYTER_PYTHON",
  );
}

function exited(child: ChildProcess): Promise<void> {
  return child.exitCode !== null || child.signalCode !== null
    ? Promise.resolve()
    : new Promise((r) => child.once("exit", () => r()));
}

/** Starts the server; `kernelName` picks an installed kernelspec instead of this checkout's. */
export async function startServer(opts: {
  rootDir: string;
  kernelName?: string;
  startTimeoutMs?: number;
}): Promise<JupyterServer> {
  const python = findPython();
  const tmp = fs.mkdtempSync(path.join(os.tmpdir(), "tprpc-nb-"));
  const dataDir = path.join(tmp, "data");
  let kernelName = opts.kernelName;
  if (!kernelName) {
    kernelName = "tprpc-runner";
    install({ dir: dataDir, name: kernelName, displayName: "TypeScript (tprpc, runner)" });
  }
  const port = await freePort();
  const token = randomBytes(24).toString("hex");
  const env = {
    ...process.env,
    JUPYTER_PATH: [dataDir, process.env.JUPYTER_PATH].filter(Boolean).join(path.delimiter),
    JUPYTER_CONFIG_DIR: path.join(tmp, "config"),
    JUPYTER_RUNTIME_DIR: path.join(tmp, "runtime"),
  };
  const child = spawn(
    python,
    [
      "-m",
      "jupyter_server",
      "--no-browser",
      "--ServerApp.ip=127.0.0.1",
      `--ServerApp.port=${port}`,
      "--ServerApp.port_retries=0",
      `--ServerApp.token=${token}`,
      `--ServerApp.root_dir=${opts.rootDir}`,
      "--ServerApp.log_level=WARN",
      // NB: CI runs as root, which jupyter_server refuses without this.
      "--allow-root",
    ],
    { env, stdio: ["ignore", "pipe", "pipe"], detached: true },
  );
  let log = "";
  const keep = (b: Buffer) => {
    log = (log + b.toString()).slice(-20_000);
  };
  child.stdout!.on("data", keep);
  child.stderr!.on("data", keep);
  const gone = exited(child);

  // NB: the last resort when this process exits without stop() (the server is in its own group).
  const killOnExit = () => {
    try {
      process.kill(-child.pid!, "SIGKILL");
    } catch {
      // gone
    }
  };
  process.on("exit", killOnExit);

  let stopping: Promise<void> | null = null;
  const stop = (): Promise<void> => {
    stopping ??= (async () => {
      process.off("exit", killOnExit);
      const kill = (sig: NodeJS.Signals) => {
        try {
          process.kill(-child.pid!, sig);
        } catch {
          // the group is gone
        }
      };
      kill("SIGTERM");
      const timer = setTimeout(() => kill("SIGKILL"), 5_000);
      await gone;
      clearTimeout(timer);
      kill("SIGKILL"); // anything the server left in its group
      fs.rmSync(tmp, { recursive: true, force: true });
    })();
    return stopping;
  };

  const baseUrl = `http://127.0.0.1:${port}`;
  const deadline = Date.now() + (opts.startTimeoutMs ?? 60_000);
  for (;;) {
    if (child.exitCode !== null || child.signalCode !== null) {
      await stop();
      throw new RunnerSetupError(`the Jupyter server exited at start (${child.exitCode ?? child.signalCode}):\n${log}`);
    }
    try {
      const r = await fetch(`${baseUrl}/api/status`, { headers: { Authorization: `token ${token}` } });
      if (r.ok) break;
    } catch {
      // not listening yet
    }
    if (Date.now() > deadline) {
      await stop();
      throw new RunnerSetupError(
        `the Jupyter server did not answer within ${opts.startTimeoutMs ?? 60_000} ms:\n${log}`,
      );
    }
    await new Promise((r) => setTimeout(r, 100));
  }
  return { baseUrl, token, kernelName, pid: child.pid!, stop };
}
