/**
 * The tprpc kernel keeps the user's work, as Python's does, under a real Jupyter server:
 * a cell that throws or is interrupted keeps the declarations whose statements ran (their
 * values and types), a name it did not reach keeps its earlier value; with
 * `stop_on_error: false` a request sent right after an error runs, with the default the
 * requests already queued behind a failed cell are aborted; a promise that rejects after its
 * cell ended is shown on the running cell, or on the next one. Skipped where no Python has jupyter_server.
 */
import { type Kernel, type KernelMessage } from "@jupyterlab/services";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { exec, hasJupyter, type KernelSession, openKernel } from "./helpers.js";

/** Sends `code` without waiting; resolves to the reply content and the cell's stderr. */
function send(k: Kernel.IKernelConnection, code: string, stopOnError: boolean, ms = 60_000) {
  const f = k.requestExecute({ code, stop_on_error: stopOnError, allow_stdin: false });
  let stderr = "";
  f.onIOPub = (m: KernelMessage.IIOPubMessage) => {
    const c = m.content as { name?: string; text?: string };
    if (m.header.msg_type === "stream" && c.name === "stderr") stderr += c.text;
  };
  let timer: NodeJS.Timeout | undefined;
  return Promise.race([
    f.done.then((r) => ({ ...(r.content as { status: string; ename?: string; evalue?: string }), stderr })),
    new Promise<never>((_, rej) => (timer = setTimeout(() => rej(new Error(`no reply in ${ms} ms: ${code}`)), ms))),
  ]).finally(() => {
    clearTimeout(timer);
    f.dispose();
  });
}

describe.skipIf(!hasJupyter)("tprpc kernel keeps the user's work (e2e)", () => {
  let session: KernelSession | undefined;
  let k: Kernel.IKernelConnection;

  beforeAll(async () => {
    session = await openKernel();
    k = session.kernel;
  }, 120_000);

  afterAll(async () => {
    await session?.close();
  });

  it("a failed cell keeps the declarations that ran; a name it did not reach keeps its earlier value", async () => {
    expect((await exec(k, 'let later = "before"; const keep = 0;')).status).toBe("ok");
    const failed = await exec(
      k,
      [
        "const a = 1;",
        "let f = () => 2;",
        "function g(x: number): string { return `g${x}`; }",
        "class Box { constructor(public v: number) {} }",
        "interface Shape { w: number }",
        "const s: Shape = { w: 3 };",
        'throw new Error("x");',
        "const later = 5;",
        "const notReached = 6;",
        "function hoisted(): number { return 7; }",
      ].join("\n"),
    );
    expect(failed.status).toBe("error");
    expect(failed.errorOutput).toMatchObject({ ename: "Error", evalue: "x" });
    // Values and types: `later` is still the string of the first cell (its redeclaration did not run).
    const used = await exec(
      k,
      "const r: string = `${a + f()} ${g(1)} ${new Box(4).v} ${s.w} ${later.toUpperCase()}`;\nr",
    );
    expect(used.status, JSON.stringify(used)).toBe("ok");
    expect(used.result).toBe("3 g1 4 3 BEFORE");
    const notReached = await exec(k, "notReached");
    expect(notReached.status).toBe("error");
    expect(notReached.errorOutput?.ename).toBe("CompileError");
    expect(notReached.errorOutput?.evalue).toContain("Cannot find name 'notReached'");
    // A function declared below the failing line is not kept either (as a Python def below a raise),
    // although JavaScript hoists it within the cell.
    const hoisted = await exec(k, "hoisted()");
    expect(hoisted.errorOutput?.evalue).toContain("Cannot find name 'hoisted'");
  }, 120_000);

  it("an interrupted cell keeps the declarations made before the await it was stopped in", async () => {
    let started!: () => void;
    const waiting = new Promise<void>((r) => (started = r));
    const cellP = exec(
      k,
      'const before = 41;\nconsole.log("waiting");\nawait new Promise((r) => setTimeout(r, 30_000));\nconst after = 1;',
      60_000,
      (text) => text.includes("waiting") && started(),
    );
    // NB: interrupt once the cell runs, however slow the machine.
    await waiting;
    await new Promise((r) => setTimeout(r, 500));
    await k.interrupt();
    const interrupted = await cellP;
    expect(interrupted.status).toBe("error");
    expect(interrupted.ename).toBe("InterruptError");
    const next = await send(k, "before + 1", false);
    expect(next.status).toBe("ok");
    const after = await exec(k, "after");
    expect(after.errorOutput?.evalue).toContain("Cannot find name 'after'");
  }, 120_000);

  it("with stop_on_error false a request sent right after an error runs; with true, those queued behind it are aborted", async () => {
    // As nbclient with allow-errors: the next request goes out as soon as the error reply is in.
    const err = await send(k, 'throw new Error("first")', false);
    expect(err.status).toBe("error");
    const right = await send(k, "const ranRightAfter = 7; ranRightAfter", false);
    expect(right.status, JSON.stringify(right)).toBe("ok");

    // As "Run all": three requests sent at once; the first fails and stops on error. NB: only requests
    // the kernel has received when the cell fails are aborted (ipykernel's abort window is 0), so the
    // first cell waits 1.5 s before it throws: the other two, sent right behind it, are queued by then.
    const p1 = send(k, 'let mark = 1;\nawait new Promise((r) => setTimeout(r, 1500));\nthrow new Error("stops")', true);
    const p2 = send(k, "mark = 2;", true);
    const p3 = send(k, "mark = 3;", false);
    const [r1, r2, r3] = await Promise.all([p1, p2, p3]);
    expect(r1.status).toBe("error");
    expect(r2).toMatchObject({ status: "error", ename: "AbortedError" });
    expect(r3).toMatchObject({ status: "error", ename: "AbortedError" });
    // A request arriving after the failure runs (no 200 ms window); mark was kept by the failed cell.
    const later = await send(k, "mark", true);
    expect(later.status).toBe("ok");
    expect((await exec(k, "mark")).result).toBe("1");
  }, 120_000);

  it("a promise that rejects after its cell ended is shown on the next cell or the running one, which goes on", async () => {
    const started = await exec(
      k,
      'setTimeout(() => void Promise.reject(new tprpc.ValueError("late failure")), 300);\n"scheduled"',
    );
    expect(started.status).toBe("ok");
    await new Promise((r) => setTimeout(r, 1_500));
    const next = await send(k, "40 + 2", true);
    expect(next.status).toBe("ok");
    expect(next.stderr).toMatch(/A promise rejected after cell \[\d+\] ended, with nothing awaiting it:/);
    expect(next.stderr).toContain("ValueError: late failure");
    // Shown once.
    expect((await send(k, "1", true)).stderr).toBe("");

    // A promise made by an earlier cell that rejects while another cell runs: shown on the running cell,
    // which goes on and succeeds (a rejection nothing awaited from the running cell itself fails it).
    const made = await exec(
      k,
      'const background = (async () => { await new Promise((r) => setTimeout(r, 2_000)); throw new tprpc.ValueError("from an earlier cell"); })();\n"started"',
    );
    expect(made.status).toBe("ok");
    const running = await send(k, 'await new Promise((r) => setTimeout(r, 4_000));\n"finished"', true);
    expect(running.status, JSON.stringify(running)).toBe("ok");
    expect(running.stderr).toMatch(
      /A promise from cell \[\d+\] rejected while cell \[\d+\] ran, with nothing awaiting it:/,
    );
    expect(running.stderr).toContain("ValueError: from an earlier cell");
  }, 120_000);
});
