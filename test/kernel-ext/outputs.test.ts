/**
 * The runner's iopub -> nbformat conversion (scripts/run-notebooks/outputs.ts) and its
 * cell executor (execute.ts) against sinon fakes of a kernel connection: stream merging,
 * display ids updated across cells, clear_output(wait), errors, execute_result counts,
 * and a cell past its timeout being interrupted.
 */
import sinon from "sinon";
import { afterEach, describe, expect, it } from "vitest";
import { executeCell, type FutureLike, type KernelLike } from "../../scripts/run-notebooks/execute.js";
import { OutputCollector, toLines, type IopubMessage, type Output } from "../../scripts/run-notebooks/outputs.js";

const msg = (msg_type: string, content: Record<string, unknown>): IopubMessage => ({ header: { msg_type }, content });

describe("OutputCollector", () => {
  it("merges consecutive writes to the same stream and keeps stdout/stderr apart", () => {
    const c = new OutputCollector();
    const out: Output[] = [];
    c.begin(out);
    c.handle(msg("status", { execution_state: "busy" }));
    c.handle(msg("stream", { name: "stdout", text: "a\n" }));
    c.handle(msg("stream", { name: "stdout", text: "b\n" }));
    c.handle(msg("stream", { name: "stderr", text: "oops\n" }));
    c.handle(msg("stream", { name: "stdout", text: "c" }));
    expect(out).toEqual([
      { output_type: "stream", name: "stdout", text: "a\nb\n" },
      { output_type: "stream", name: "stderr", text: "oops\n" },
      { output_type: "stream", name: "stdout", text: "c" },
    ]);
  });

  it("writes display_data without transient, execute_result with its count, and errors", () => {
    const c = new OutputCollector();
    const out: Output[] = [];
    c.begin(out);
    c.handle(msg("display_data", { data: { "text/plain": "x" }, metadata: { a: 1 }, transient: { display_id: "d" } }));
    c.handle(msg("execute_result", { execution_count: 7, data: { "text/plain": "42" }, metadata: {} }));
    c.handle(msg("error", { ename: "RemoteError", evalue: "bad", traceback: ["l1", "l2"] }));
    expect(out).toEqual([
      { output_type: "display_data", data: { "text/plain": "x" }, metadata: { a: 1 } },
      { output_type: "execute_result", execution_count: 7, data: { "text/plain": "42" }, metadata: {} },
      { output_type: "error", ename: "RemoteError", evalue: "bad", traceback: ["l1", "l2"] },
    ]);
  });

  it("update_display_data replaces every output shown under that id, in earlier cells too, and adds none", () => {
    const c = new OutputCollector();
    const cell1: Output[] = [];
    const cell2: Output[] = [];
    c.begin(cell1);
    c.handle(msg("display_data", { data: { "text/plain": "0%" }, metadata: {}, transient: { display_id: "bar" } }));
    c.handle(msg("display_data", { data: { "text/plain": "other" }, metadata: {}, transient: { display_id: "o" } }));
    c.begin(cell2);
    c.handle(msg("display_data", { data: { "text/plain": "0%" }, metadata: {}, transient: { display_id: "bar" } }));
    c.handle(
      msg("update_display_data", {
        data: { "text/plain": "100%" },
        metadata: { m: 1 },
        transient: { display_id: "bar" },
      }),
    );
    c.handle(
      msg("update_display_data", { data: { "text/plain": "?" }, metadata: {}, transient: { display_id: "unknown" } }),
    );
    expect(cell1.map((o) => (o as { data: object }).data)).toEqual([
      { "text/plain": "100%" },
      { "text/plain": "other" },
    ]);
    expect(cell2).toEqual([{ output_type: "display_data", data: { "text/plain": "100%" }, metadata: { m: 1 } }]);
  });

  it("clear_output clears now, or with wait just before the next output", () => {
    const c = new OutputCollector();
    const out: Output[] = [];
    c.begin(out);
    c.handle(msg("stream", { name: "stdout", text: "1" }));
    c.handle(msg("clear_output", { wait: false }));
    expect(out).toEqual([]);
    c.handle(msg("stream", { name: "stdout", text: "2" }));
    c.handle(msg("clear_output", { wait: true }));
    expect(out).toHaveLength(1);
    c.handle(msg("stream", { name: "stdout", text: "3" }));
    expect(out).toEqual([{ output_type: "stream", name: "stdout", text: "3" }]);
  });

  it("a cleared display no longer receives updates", () => {
    const c = new OutputCollector();
    const out: Output[] = [];
    c.begin(out);
    c.handle(msg("display_data", { data: { "text/plain": "a" }, metadata: {}, transient: { display_id: "x" } }));
    const shown = out[0];
    c.handle(msg("clear_output", { wait: false }));
    c.handle(msg("update_display_data", { data: { "text/plain": "b" }, metadata: {}, transient: { display_id: "x" } }));
    expect(out).toEqual([]);
    expect((shown as { data: object }).data).toEqual({ "text/plain": "a" });
  });

  it("toLines splits like nbformat", () => {
    expect(toLines("a\nb\n")).toEqual(["a\n", "b\n"]);
    expect(toLines("a\nb")).toEqual(["a\n", "b"]);
    expect(toLines("")).toEqual([]);
  });
});

/** A fake kernel whose execute requests are answered by `script` (iopub messages, then the reply). */
function fakeKernel(script: (future: FutureLike & { resolve: (c: unknown) => void }) => void) {
  const futures: Array<FutureLike & { resolve: (c: unknown) => void }> = [];
  const kernel: KernelLike = {
    requestExecute: sinon.fake((_content: { code: string }) => {
      let resolve!: (c: unknown) => void;
      const done = new Promise<{ content: unknown }>((r) => (resolve = (content) => r({ content })));
      const f = { onIOPub: (_m: never) => undefined, done, dispose: sinon.fake(), resolve };
      futures.push(f);
      queueMicrotask(() => script(f));
      return f;
    }),
    interrupt: sinon.fake.resolves(undefined),
  };
  return { kernel, futures };
}

describe("executeCell", () => {
  afterEach(() => sinon.restore());

  it("sends the code with stop_on_error, feeds iopub to the collector and returns the reply", async () => {
    const { kernel, futures } = fakeKernel((f) => {
      (f.onIOPub as (m: IopubMessage) => void)(msg("stream", { name: "stdout", text: "hi\n" }));
      (f.onIOPub as (m: IopubMessage) => void)(
        msg("execute_result", { execution_count: 3, data: { "text/plain": "1" } }),
      );
      f.resolve({ status: "ok", execution_count: 3 });
    });
    const c = new OutputCollector();
    const out: Output[] = [];
    c.begin(out);
    const r = await executeCell(kernel, "1", c, { timeoutMs: 5_000 });
    expect(r).toMatchObject({ status: "ok", executionCount: 3 });
    const req = (kernel.requestExecute as sinon.SinonSpy).firstCall.args[0];
    expect(req).toMatchObject({ code: "1", stop_on_error: true, allow_stdin: false });
    expect(out.map((o) => o.output_type)).toEqual(["stream", "execute_result"]);
    expect(futures[0]!.dispose).toHaveProperty("callCount", 1);
    expect((kernel.interrupt as sinon.SinonSpy).called).toBe(false);
  });

  it("reports an error reply's ename and evalue", async () => {
    const { kernel } = fakeKernel((f) =>
      f.resolve({ status: "error", execution_count: 2, ename: "RemoteError", evalue: "x" }),
    );
    const c = new OutputCollector();
    c.begin([]);
    expect(await executeCell(kernel, "throw", c, { timeoutMs: 5_000 })).toMatchObject({
      status: "error",
      executionCount: 2,
      ename: "RemoteError",
      evalue: "x",
    });
  });

  it("fails the cell with a KernelDiedError output when the kernel dies under it", async () => {
    // @jupyterlab/services rejects the future's done when the kernel dies or restarts.
    const died = Promise.reject(new Error("Canceled future for execute_request message before replies were done"));
    died.catch(() => undefined);
    const kernel: KernelLike = {
      requestExecute: sinon.fake.returns({ onIOPub: () => undefined, done: died, dispose: sinon.fake() }),
      interrupt: sinon.fake.resolves(undefined),
    };
    const c = new OutputCollector();
    const out: Output[] = [];
    c.begin(out);
    const r = await executeCell(kernel, "process.exit(3)", c, { timeoutMs: 60_000 });
    expect(r).toMatchObject({ status: "error", executionCount: null, ename: "KernelDiedError" });
    expect(r.evalue).toContain("Canceled future");
    expect(out).toEqual([expect.objectContaining({ output_type: "error", ename: "KernelDiedError" })]);
  });

  it("interrupts a cell past its timeout and adds a CellTimeoutError output", async () => {
    const clock = sinon.useFakeTimers({ toFake: ["setTimeout", "clearTimeout"] });
    const { kernel, futures } = fakeKernel(() => undefined); // never replies by itself
    (kernel.interrupt as sinon.SinonSpy) = sinon.fake(async () => {
      futures[0]!.resolve({ status: "error", execution_count: 5, ename: "InterruptError", evalue: "interrupted" });
    });
    const c = new OutputCollector();
    const out: Output[] = [];
    c.begin(out);
    const p = executeCell(kernel, "while(true){}", c, { timeoutMs: 1_000 });
    await clock.tickAsync(999);
    expect((kernel.interrupt as sinon.SinonSpy).called).toBe(false);
    await clock.tickAsync(2);
    const r = await p;
    expect((kernel.interrupt as sinon.SinonSpy).callCount).toBe(1);
    expect(r).toMatchObject({ status: "timeout", executionCount: 5, ename: "CellTimeoutError" });
    expect(out.at(-1)).toMatchObject({ output_type: "error", ename: "CellTimeoutError" });
  });

  it("gives up after the interrupt grace period when the kernel does not answer", async () => {
    const clock = sinon.useFakeTimers({ toFake: ["setTimeout", "clearTimeout"] });
    const { kernel } = fakeKernel(() => undefined);
    const c = new OutputCollector();
    c.begin([]);
    const p = executeCell(kernel, "hang", c, { timeoutMs: 100, interruptGraceMs: 500 });
    await clock.tickAsync(700);
    const r = await p;
    expect(r.status).toBe("timeout");
    expect(r.evalue).toContain("did not answer the interrupt");
  });
});
