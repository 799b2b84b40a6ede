/**
 * Runs one cell on a kernel and collects its outputs:
 * 1. send an execute_request (stop_on_error, no stdin) and feed every iopub message of it to
 *    the collector;
 * 2. wait for the execute_reply (a kernel that dies meanwhile fails the cell with a KernelDiedError
 *    output); past `timeoutMs`, interrupt the kernel and wait up to
 *    `interruptGraceMs` more for the reply, then report a timeout (with an error output
 *    saying so, added after whatever the interrupted cell wrote).
 */
import type { IopubMessage, OutputCollector } from "./outputs.js";

/** What this module needs of a kernel (@jupyterlab/services' IKernelConnection fits). */
export interface KernelLike {
  requestExecute(content: {
    code: string;
    silent?: boolean;
    store_history?: boolean;
    allow_stdin?: boolean;
    stop_on_error?: boolean;
  }): FutureLike;
  interrupt(): Promise<void>;
}

export interface FutureLike {
  onIOPub: (msg: never) => void;
  readonly done: Promise<{ content: unknown }>;
  dispose(): void;
}

export interface CellResult {
  status: "ok" | "error" | "timeout" | "abort";
  executionCount: number | null;
  ename?: string;
  evalue?: string;
  /** Wall time of the cell, ms. */
  ms: number;
}

export interface ExecuteOptions {
  timeoutMs: number;
  interruptGraceMs?: number;
}

export async function executeCell(
  kernel: KernelLike,
  code: string,
  collector: OutputCollector,
  opts: ExecuteOptions,
): Promise<CellResult> {
  const t0 = performance.now();
  const future = kernel.requestExecute({ code, store_history: true, allow_stdin: false, stop_on_error: true });
  future.onIOPub = ((msg: IopubMessage) => collector.handle(msg)) as (msg: never) => void;
  let timer: NodeJS.Timeout | undefined;
  const timedOut = new Promise<"timeout">((resolve) => (timer = setTimeout(() => resolve("timeout"), opts.timeoutMs)));
  try {
    const first = await Promise.race([future.done, timedOut]).catch((e: unknown) => e as Error);
    if (first instanceof Error) {
      // The kernel died (and is being restarted) or its connection was lost while the cell ran.
      const evalue = `the kernel stopped while the cell ran (${first.message})`;
      collector.handle({
        header: { msg_type: "error" },
        content: { ename: "KernelDiedError", evalue, traceback: [`KernelDiedError: ${evalue}`] },
      });
      return { status: "error", executionCount: null, ename: "KernelDiedError", evalue, ms: performance.now() - t0 };
    }
    if (first !== "timeout") return fromReply(first.content, performance.now() - t0);
    await kernel.interrupt().catch(() => undefined);
    const grace = new Promise<"late">(
      (resolve) => (timer = setTimeout(() => resolve("late"), opts.interruptGraceMs ?? 10_000)),
    );
    const after = await Promise.race([future.done.catch(() => null), grace]);
    const count = after && after !== "late" ? fromReply(after.content, 0).executionCount : null;
    const evalue = `the cell ran longer than ${opts.timeoutMs / 1000} s and was interrupted${after === "late" ? " (the kernel did not answer the interrupt)" : ""}`;
    collector.handle({
      header: { msg_type: "error" },
      content: { ename: "CellTimeoutError", evalue, traceback: [`CellTimeoutError: ${evalue}`] },
    });
    return { status: "timeout", executionCount: count, ename: "CellTimeoutError", evalue, ms: performance.now() - t0 };
  } finally {
    clearTimeout(timer);
    future.dispose();
  }
}

function fromReply(content: unknown, ms: number): CellResult {
  const c = (content ?? {}) as { status?: string; execution_count?: unknown; ename?: unknown; evalue?: unknown };
  const status = c.status === "ok" || c.status === "error" || c.status === "abort" ? c.status : "error";
  const r: CellResult = {
    status,
    executionCount: typeof c.execution_count === "number" ? c.execution_count : null,
    ms,
  };
  if (status === "error") {
    r.ename = typeof c.ename === "string" ? c.ename : "Error";
    r.evalue = typeof c.evalue === "string" ? c.evalue : "";
  }
  return r;
}
