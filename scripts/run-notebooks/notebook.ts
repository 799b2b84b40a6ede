/**
 * Executes one .ipynb file on a fresh kernel and writes the executed copy:
 * 1. read the notebook (nbformat 4); start a kernel of the given kernelspec;
 * 2. run the code cells in order (per-cell timeout, bounded by what is left of the
 *    per-notebook timeout), writing each cell's outputs and execution count;
 * 3. stop at the first cell that fails or times out (later cells keep no outputs);
 * 4. shut the kernel down, whatever happened, and write the notebook to `outPath`
 *    (never over the source).
 */
import fs from "node:fs";
import path from "node:path";
import { executeCell, type CellResult, type KernelLike } from "./execute.js";
import { OutputCollector, toLines, type Output } from "./outputs.js";

export interface KernelHandle extends KernelLike {
  shutdown(): Promise<void>;
}

export interface NotebookRunOptions {
  cellTimeoutMs: number;
  notebookTimeoutMs: number;
  /** Called after each cell (progress lines). */
  onCell?: (index: number, total: number, r: CellResult) => void;
}

export interface NotebookResult {
  path: string;
  outPath: string;
  ok: boolean;
  cells: number;
  failed?: { index: number; ename: string; evalue: string; status: CellResult["status"] };
  /** Sum of the cells' wall times, ms. */
  cellMs: number;
  /** Everything else: kernel start and shutdown, reading and writing, ms. */
  overheadMs: number;
  /** Parts of the overhead: starting the kernel (until kernel_info answers) and shutting it down, ms. */
  kernelStartMs: number;
  kernelShutdownMs: number;
}

interface Cell {
  cell_type: string;
  source: string | string[];
  outputs?: Output[];
  execution_count?: number | null;
  metadata?: Record<string, unknown>;
}
interface Notebook {
  cells: Cell[];
  metadata: Record<string, unknown>;
  nbformat: number;
}

/** Multi-line strings as nbformat lists of lines (stable diffs of the executed files). */
function nbText(o: Output): Output {
  if (o.output_type === "stream") return { ...o, text: toLines(o.text) as unknown as string };
  if (o.output_type === "display_data" || o.output_type === "execute_result") {
    const data: Record<string, unknown> = {};
    for (const [k, v] of Object.entries(o.data))
      data[k] = typeof v === "string" && k.startsWith("text/") && v.includes("\n") ? toLines(v) : v;
    return { ...o, data: data as typeof o.data };
  }
  return o;
}

export async function runNotebook(
  file: string,
  outPath: string,
  startKernel: () => Promise<KernelHandle>,
  opts: NotebookRunOptions,
): Promise<NotebookResult> {
  const t0 = performance.now();
  const nb = JSON.parse(fs.readFileSync(file, "utf8")) as Notebook;
  if (nb.nbformat !== 4) throw new Error(`${file}: nbformat ${nb.nbformat} is not supported (4 is)`);
  const code = nb.cells.filter((c) => c.cell_type === "code");
  for (const c of code) {
    c.outputs = [];
    c.execution_count = null;
  }
  const result: NotebookResult = {
    path: file,
    outPath,
    ok: true,
    cells: code.length,
    cellMs: 0,
    overheadMs: 0,
    kernelStartMs: 0,
    kernelShutdownMs: 0,
  };
  const collector = new OutputCollector();
  const deadline = Date.now() + opts.notebookTimeoutMs;
  const tStart = performance.now();
  const kernel = await startKernel();
  result.kernelStartMs = performance.now() - tStart;
  try {
    for (let i = 0; i < code.length; i++) {
      const cell = code[i]!;
      const src = Array.isArray(cell.source) ? cell.source.join("") : cell.source;
      const outputs: Output[] = [];
      collector.begin(outputs);
      cell.outputs = outputs;
      const left = deadline - Date.now();
      const r = await executeCell(kernel, src, collector, {
        timeoutMs: Math.max(1, Math.min(opts.cellTimeoutMs, left)),
      });
      result.cellMs += r.ms;
      cell.execution_count = r.executionCount;
      opts.onCell?.(i, code.length, r);
      if (r.status !== "ok") {
        result.ok = false;
        result.failed = { index: i, ename: r.ename ?? r.status, evalue: r.evalue ?? "", status: r.status };
        break;
      }
    }
  } finally {
    const tStop = performance.now();
    await kernel.shutdown().catch(() => undefined);
    result.kernelShutdownMs = performance.now() - tStop;
    for (const c of code) c.outputs = (c.outputs ?? []).map(nbText);
    fs.mkdirSync(path.dirname(outPath), { recursive: true });
    fs.writeFileSync(outPath, JSON.stringify(nb, null, 1) + "\n");
    result.overheadMs = performance.now() - t0 - result.cellMs;
  }
  return result;
}
