/**
 * Helpers for the kernel end-to-end tests: process liveness by pid (a zombie counts as
 * gone: its process has exited, only its parent has not reaped it yet), a bounded wait
 * for pids to go, and executing a cell on a @jupyterlab/services kernel connection.
 */
import fs from "node:fs";
import type { Kernel, KernelMessage } from "@jupyterlab/services";

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
