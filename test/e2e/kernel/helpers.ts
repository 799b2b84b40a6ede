/**
 * Helpers for the kernel end-to-end tests: process liveness by pid (a zombie counts as
 * gone: its process has exited, only its parent has not reaped it yet), a bounded wait
 * for pids to go, and executing a cell on a @jupyterlab/services kernel connection.
 */
import { spawnSync } from "node:child_process";
import fs from "node:fs";
import os from "node:os";
import { KernelManager, ServerConnection, type Kernel, type KernelMessage } from "@jupyterlab/services";
import { startServer, type JupyterServer } from "../../../scripts/run-notebooks/server.js";

/** Whether some Python here has jupyter_server (the kernel end-to-end tests are skipped otherwise). */
export const hasJupyter = [process.env.TPRPC_JUPYTER_PYTHON, "/usr/bin/python3", "python3"]
  .filter(Boolean)
  .some((py) => spawnSync(py!, ["-c", "import jupyter_server"], { stdio: "ignore" }).status === 0);

/** A tprpc kernel on the runner's private Jupyter server, and how to take both down. */
export interface KernelSession {
  kernel: Kernel.IKernelConnection;
  /** Shuts the kernel down (unless `shutdownKernel` is false: the test did), then stops the server. */
  close(shutdownKernel?: boolean): Promise<void>;
}

/** Starts the runner's Jupyter server and a tprpc kernel on it; a failed start stops what it started. */
export async function openKernel(): Promise<KernelSession> {
  const server: JupyterServer = await startServer({ rootDir: os.tmpdir() });
  let manager: KernelManager | undefined;
  try {
    manager = new KernelManager({
      serverSettings: ServerConnection.makeSettings({
        baseUrl: server.baseUrl,
        wsUrl: server.baseUrl.replace(/^http/, "ws"),
        token: server.token,
        appendToken: true,
      }),
    });
    await manager.ready;
    const kernel = await manager.startNew({ name: server.kernelName });
    const m = manager;
    return {
      kernel,
      async close(shutdownKernel = true) {
        if (shutdownKernel) await kernel.shutdown().catch(() => undefined);
        m.dispose();
        await server.stop();
      },
    };
  } catch (e) {
    manager?.dispose();
    await server.stop();
    throw e;
  }
}

export function alive(pid: number): boolean {
  try {
    const stat = fs.readFileSync(`/proc/${pid}/stat`, "utf8");
    // NB: the state follows the parenthesised command name, which may itself hold spaces.
    return stat.slice(stat.lastIndexOf(")") + 2, stat.lastIndexOf(")") + 3) !== "Z";
  } catch {
    return false;
  }
}

/** Polls until every pid is gone; resolves to those still alive after `ms`. */
export async function gone(pids: readonly number[], ms: number): Promise<number[]> {
  const deadline = Date.now() + ms;
  for (;;) {
    const left = pids.filter(alive);
    if (left.length === 0 || Date.now() > deadline) return left;
    await new Promise((r) => setTimeout(r, 100));
  }
}

export interface Executed {
  status: string;
  ename?: string;
  evalue?: string;
  traceback?: string[];
  stdout: string;
  /** text/plain of the execute_result, if any. */
  result?: string;
  /** The iopub `error` output, if any. */
  errorOutput?: { ename: string; evalue: string; traceback: string[] };
}

/** Runs `code`, bounded by `ms`; `onStdout` sees the cell's stdout so far after each write. */
export async function exec(
  k: Kernel.IKernelConnection,
  code: string,
  ms = 60_000,
  onStdout?: (text: string) => void,
): Promise<Executed> {
  const f = k.requestExecute({ code, stop_on_error: true, allow_stdin: false });
  const out: Executed = { status: "?", stdout: "" };
  f.onIOPub = (m: KernelMessage.IIOPubMessage) => {
    const c = m.content as Record<string, unknown>;
    if (m.header.msg_type === "stream" && c.name === "stdout") {
      out.stdout += String(c.text);
      onStdout?.(out.stdout);
    }
    if (m.header.msg_type === "execute_result") out.result = String((c.data as Record<string, string>)["text/plain"]);
    if (m.header.msg_type === "error") out.errorOutput = c as Executed["errorOutput"];
  };
  let timer: NodeJS.Timeout | undefined;
  try {
    const reply = await Promise.race([
      f.done,
      new Promise<never>(
        (_, reject) => (timer = setTimeout(() => reject(new Error(`cell took over ${ms} ms: ${code}`)), ms)),
      ),
    ]);
    Object.assign(out, reply.content);
    return out;
  } finally {
    clearTimeout(timer);
    f.dispose();
  }
}
