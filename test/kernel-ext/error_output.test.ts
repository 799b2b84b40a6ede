/**
 * Cell errors as Jupyter error outputs (kernel-ext/error_output.ts): ename/evalue from the
 * error, tslab and Node-internal frames dropped, a RemoteError's remote stack appended,
 * causes chained, non-Error throws and TypeScript diagnostics handled.
 */
import { describe, expect, it } from "vitest";
import { compileErrorContent, errorContent, interruptContent } from "../../kernel-ext/error_output.js";
import { RemoteError, ValueError } from "../../sdk/index.js";

describe("errorContent", () => {
  it("takes ename and evalue from the error and drops tslab / node internals from the stack", () => {
    const e = new ValueError("bad size");
    e.stack = [
      "ValueError: bad size",
      "    at evalmachine.<anonymous>:2:7",
      "    at Script.runInThisContext (node:vm:135:14)",
      "    at Object.execute (/x/node_modules/tslab/dist/executor.js:10:2)",
      "    at processTicksAndRejections (node:internal/process/task_queues:95:5)",
    ].join("\n");
    expect(errorContent(e)).toEqual({
      ename: "ValueError",
      evalue: "bad size",
      traceback: ["ValueError: bad size", "    at evalmachine.<anonymous>:2:7"],
    });
  });

  it("appends a RemoteError's remote traceback with the worker's name", () => {
    const e = new RemoteError(
      'TypeError on worker "worker1": nope',
      "worker1",
      "TypeError",
      "TypeError: nope\n    at f (shipped:3:9)",
    );
    const c = errorContent(e);
    expect(c.ename).toBe("RemoteError");
    expect(c.evalue).toBe('TypeError on worker "worker1": nope');
    const i = c.traceback.indexOf('Remote traceback (TypeError on worker "worker1"):');
    expect(i).toBeGreaterThan(0);
    expect(c.traceback.slice(i + 1)).toEqual(["TypeError: nope", "    at f (shipped:3:9)"]);
  });

  it("chains causes and handles thrown non-errors", () => {
    const e = new Error("outer", { cause: new TypeError("inner") });
    const tb = errorContent(e).traceback.join("\n");
    expect(tb).toContain("Caused by:");
    expect(tb).toContain("TypeError: inner");
    expect(errorContent(42)).toMatchObject({ ename: "Error", evalue: "a non-Error value was thrown: 42" });
  });

  it("turns diagnostics into one CompileError and interrupts into an InterruptError", () => {
    const c = compileErrorContent([
      "1:5 - Cannot find name 'x'.",
      "2:1 - Type 'string' is not assignable to type 'number'.",
    ]);
    expect(c.ename).toBe("CompileError");
    expect(c.evalue).toBe("1:5 - Cannot find name 'x'.");
    expect(c.traceback).toHaveLength(3);
    expect(interruptContent(2).evalue).toContain("2 pending RPCs were cancelled");
    expect(interruptContent(0).evalue).toBe("the cell was interrupted (a running cluster stays usable)");
  });
});
