/**
 * Turns what a cell threw into a Jupyter error output (ename, evalue,
 * traceback). A RemoteError brings the remote stack after the local one;
 * frames inside tslab and Node's internals are left out; TypeScript
 * diagnostics become one "CompileError" listing every diagnostic.
 */
import { inspect } from "node:util";

export interface ErrorContent {
  ename: string;
  evalue: string;
  traceback: string[];
}

// Frames of tslab, of this kernel and of Node's vm/internals say nothing about the cell.
const NOISE =
  /\/node_modules\/tslab\/|\/kernel-ext\/|\((node:internal\/|node:vm:)|^\s+at (node:internal\/|sigintHandlersWrap )/;

function stackLines(stack: string): string[] {
  return stack.split("\n").filter((l) => !NOISE.test(l));
}

/** The error output for a thrown value. */
export function errorContent(e: unknown): ErrorContent {
  if (!(e instanceof Error)) {
    const v = typeof e === "string" ? e : inspect(e);
    return { ename: "Error", evalue: `a non-Error value was thrown: ${v}`, traceback: [`Uncaught ${v}`] };
  }
  const ename = e.name || e.constructor?.name || "Error";
  const traceback = stackLines(e.stack ?? `${ename}: ${e.message}`);
  const remote = e as Error & { remoteStack?: unknown; workerName?: unknown; remoteName?: unknown };
  if (typeof remote.remoteStack === "string" && remote.remoteStack) {
    traceback.push(
      "",
      `Remote traceback (${String(remote.remoteName ?? "Error")} on worker "${String(remote.workerName ?? "?")}"):`,
      ...stackLines(remote.remoteStack),
    );
  }
  if (e.cause !== undefined) traceback.push("", "Caused by:", ...errorContent(e.cause).traceback);
  return { ename, evalue: e.message, traceback };
}

/** The error output for TypeScript diagnostics ("line:col - message" each). */
export function compileErrorContent(diagnostics: readonly string[]): ErrorContent {
  return {
    ename: "CompileError",
    evalue: diagnostics[0] ?? "the cell did not compile",
    traceback: ["TypeScript found errors in this cell:", ...diagnostics],
  };
}

/** The error output for a cell stopped by a Jupyter interrupt. */
export function interruptContent(cancelled: number): ErrorContent {
  const rpcs = cancelled ? `; ${cancelled} pending RPC${cancelled === 1 ? " was" : "s were"} cancelled` : "";
  return {
    ename: "InterruptError",
    evalue: `the cell was interrupted${rpcs} (a running cluster stays usable)`,
    traceback: [`InterruptError: the cell was interrupted${rpcs} (a running cluster stays usable)`],
  };
}
