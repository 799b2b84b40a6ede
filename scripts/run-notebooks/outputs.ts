/**
 * Turns a kernel's iopub messages into nbformat 4 outputs, as Jupyter's own
 * front ends do:
 * 1. stream: appended to the previous output when it is the same stream, else a new output.
 * 2. display_data / execute_result / error: a new output (transient fields are dropped;
 *    a display_id is remembered with the output it belongs to).
 * 3. update_display_data: replaces data and metadata of every output shown so far
 *    under that display_id, in any cell of the notebook; nothing new is added.
 * 4. clear_output: empties the cell's outputs now, or with wait=true just before the
 *    next output arrives (in-place redraws without flicker).
 * 5. status, execute_input and anything else: ignored.
 */

/** The nbformat 4 output shapes written to .ipynb files. */
export type MimeData = Record<string, string | string[] | object>;
export type Output =
  | { output_type: "stream"; name: "stdout" | "stderr"; text: string }
  | { output_type: "display_data"; data: MimeData; metadata: object }
  | { output_type: "execute_result"; execution_count: number | null; data: MimeData; metadata: object }
  | { output_type: "error"; ename: string; evalue: string; traceback: string[] };

/** The part of an iopub message this module reads (KernelMessage.IIOPubMessage fits). */
export interface IopubMessage {
  header: { msg_type: string };
  content: Record<string, unknown>;
}

/** Collects one notebook's outputs; begin() starts each cell. */
export class OutputCollector {
  private outputs: Output[] = [];
  private clearOnNext = false;
  /** display_id -> the outputs shown under it (in any cell). */
  private readonly byDisplayId = new Map<string, Array<Extract<Output, { data: MimeData }>>>();

  /** Starts collecting into `outputs` (a cell's outputs array, emptied first). */
  begin(outputs: Output[]): void {
    outputs.length = 0;
    this.outputs = outputs;
    this.clearOnNext = false;
  }

  /** The current cell's outputs. */
  get current(): readonly Output[] {
    return this.outputs;
  }

  /** Applies one iopub message (see the file's top). */
  handle(msg: IopubMessage): void {
    const c = msg.content;
    switch (msg.header.msg_type) {
      case "stream": {
        this.beforeOutput();
        const name = c.name === "stderr" ? "stderr" : "stdout";
        const text = String(c.text ?? "");
        const last = this.outputs[this.outputs.length - 1];
        if (last && last.output_type === "stream" && last.name === name) last.text += text;
        else this.outputs.push({ output_type: "stream", name, text });
        return;
      }
      case "display_data":
      case "execute_result": {
        this.beforeOutput();
        const data = (c.data ?? {}) as MimeData;
        const metadata = (c.metadata ?? {}) as object;
        const out: Extract<Output, { data: MimeData }> =
          msg.header.msg_type === "display_data"
            ? { output_type: "display_data", data, metadata }
            : {
                output_type: "execute_result",
                execution_count: typeof c.execution_count === "number" ? c.execution_count : null,
                data,
                metadata,
              };
        this.outputs.push(out);
        const id = displayId(c);
        if (id !== null) {
          const list = this.byDisplayId.get(id) ?? [];
          list.push(out);
          this.byDisplayId.set(id, list);
        }
        return;
      }
      case "update_display_data": {
        const id = displayId(c);
        if (id === null) return;
        for (const out of this.byDisplayId.get(id) ?? []) {
          out.data = (c.data ?? {}) as MimeData;
          out.metadata = (c.metadata ?? {}) as object;
        }
        return;
      }
      case "error":
        this.beforeOutput();
        this.outputs.push({
          output_type: "error",
          ename: String(c.ename ?? "Error"),
          evalue: String(c.evalue ?? ""),
          traceback: Array.isArray(c.traceback) ? c.traceback.map(String) : [],
        });
        return;
      case "clear_output":
        if (c.wait) this.clearOnNext = true;
        else this.clear();
        return;
      default:
        return;
    }
  }

  private beforeOutput(): void {
    if (this.clearOnNext) this.clear();
  }

  private clear(): void {
    this.clearOnNext = false;
    for (const out of this.outputs) {
      if (out.output_type !== "display_data" && out.output_type !== "execute_result") continue;
      for (const [id, list] of this.byDisplayId) {
        const kept = list.filter((o) => o !== out);
        if (kept.length) this.byDisplayId.set(id, kept);
        else this.byDisplayId.delete(id);
      }
    }
    this.outputs.length = 0;
  }
}

function displayId(content: Record<string, unknown>): string | null {
  const t = content.transient as { display_id?: unknown } | undefined;
  return typeof t?.display_id === "string" ? t.display_id : null;
}

/**
 * nbformat stores multi-line text as a list of lines (each but the last keeping its "\n");
 * this splits a string that way, for stable diffs of executed notebooks.
 */
export function toLines(text: string): string[] {
  const lines = text.split(/(?<=\n)/);
  return lines.length && lines[lines.length - 1] === "" ? lines.slice(0, -1) : lines;
}
