/**
 * Debian's classic Jupyter Notebook server (`jupyter-notebook`, Notebook 6) for the browser test:
 * this checkout's kernelspec written as "tprpc" (the name the notebooks ask for) into a temporary
 * JUPYTER_PATH folder, temporary config and runtime folders, 127.0.0.1, a free port, a random token,
 * its own process group. Up when GET /api/status answers (bounded); stop() kills the group and removes
 * the temporary folders (an 'exit' hook SIGKILLs the group should this process exit without stop()).
 */
import { spawn } from "node:child_process";
import { randomBytes } from "node:crypto";
import fs from "node:fs";
import os from "node:os";
import path from "node:path";
import { install } from "tprpc-kernel/kernelspec";
import { freePort } from "../../sdk/rpc/launcher.js";

export interface NotebookServer {
  baseUrl: string;
  token: string;
  stop(): Promise<void>;
}

export class BrowserTestSetupError extends Error {
  override name = "BrowserTestSetupError";
}

/** Debian's `jupyter-notebook` command. */
export function notebookCommand(): string {
  const cmd = "/usr/bin/jupyter-notebook";
  if (!fs.existsSync(cmd))
    throw new BrowserTestSetupError(
      `no Jupyter Notebook server at ${cmd}: install it with \`apt-get install jupyter-notebook\` (bash scripts/setup.sh does)`,
    );
  return cmd;
}

export async function startNotebookServer(rootDir: string, startTimeoutMs = 60_000): Promise<NotebookServer> {
  const cmd = notebookCommand();
  const tmp = fs.mkdtempSync(path.join(os.tmpdir(), "tprpc-browser-"));
  const dataDir = path.join(tmp, "data");
  install({ dir: dataDir, name: "tprpc", displayName: "TypeScript (tprpc)" });
  const port = await freePort();
  const token = randomBytes(24).toString("hex");
  const child = spawn(
    cmd,
    [
      "--no-browser",
      "--NotebookApp.ip=127.0.0.1",
      `--NotebookApp.port=${port}`,
      "--NotebookApp.port_retries=0",
      `--NotebookApp.token=${token}`,
      `--NotebookApp.notebook_dir=${rootDir}`,
      "--NotebookApp.log_level=WARN",
      // NB: CI runs as root, which the server refuses without this.
      "--allow-root",
    ],
    {
      env: {
        ...process.env,
        JUPYTER_PATH: [dataDir, process.env.JUPYTER_PATH].filter(Boolean).join(path.delimiter),
        JUPYTER_CONFIG_DIR: path.join(tmp, "config"),
        JUPYTER_RUNTIME_DIR: path.join(tmp, "runtime"),
        JUPYTER_DATA_DIR: dataDir,
      },
      stdio: ["ignore", "pipe", "pipe"],
      detached: true,
    },
  );
  let log = "";
  const keep = (b: Buffer) => {
    log = (log + b.toString()).slice(-20_000);
  };
  child.stdout!.on("data", keep);
  child.stderr!.on("data", keep);
  const gone = new Promise<void>((r) => child.once("exit", () => r()));
  const kill = (sig: NodeJS.Signals) => {
    try {
      process.kill(-child.pid!, sig);
    } catch {
      // the group is gone
    }
  };
  const killOnExit = () => kill("SIGKILL");
  process.on("exit", killOnExit);
  let stopping: Promise<void> | null = null;
  const stop = (): Promise<void> =>
    (stopping ??= (async () => {
      process.off("exit", killOnExit);
      await shutdownKernels().catch(() => undefined);
      kill("SIGTERM");
      const timer = setTimeout(() => kill("SIGKILL"), 5_000);
      await gone;
      clearTimeout(timer);
      kill("SIGKILL"); // kernels and workers left in the group
      fs.rmSync(tmp, { recursive: true, force: true });
    })());

  const baseUrl = `http://127.0.0.1:${port}`;
  const api = (p: string, method = "GET") =>
    fetch(`${baseUrl}${p}`, {
      method,
      headers: { Authorization: `token ${token}` },
      signal: AbortSignal.timeout(10_000),
    });
  // NB: the server starts kernels in sessions of their own: shut them down (and with them their workers) first.
  const shutdownKernels = async () => {
    const r = await api("/api/kernels");
    if (!r.ok) return;
    const kernels = (await r.json()) as { id: string }[];
    await Promise.all(kernels.map((k) => api(`/api/kernels/${k.id}`, "DELETE").catch(() => undefined)));
  };
  const deadline = Date.now() + startTimeoutMs;
  for (;;) {
    if (child.exitCode !== null || child.signalCode !== null) {
      await stop();
      throw new BrowserTestSetupError(`the notebook server exited at start:\n${log}`);
    }
    try {
      const r = await fetch(`${baseUrl}/api/status`, { headers: { Authorization: `token ${token}` } });
      if (r.ok) break;
    } catch {
      // not listening yet
    }
    if (Date.now() > deadline) {
      await stop();
      throw new BrowserTestSetupError(`the notebook server did not answer within ${startTimeoutMs} ms:\n${log}`);
    }
    await new Promise((r) => setTimeout(r, 100));
  }
  return { baseUrl, token, stop };
}
