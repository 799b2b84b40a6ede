/**
 * The tprpc kernel under a real Jupyter server (the runner's private one): it
 * fails cells with compile errors and unhandled rejections (as error outputs); a kernel that
 * started a cluster is interrupted mid-RPC (the call fails with an interrupt error, the
 * workers ignore the SIGINT and the cluster stays usable), restarted (its workers are gone
 * by pid; the prelude runs again) and shut down (the kernel and its new workers are gone).
 * Skipped where no Python has jupyter_server.
 */
import { type Kernel } from "@jupyterlab/services";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { alive, exec, gone, hasJupyter, type KernelSession, openKernel } from "./helpers.js";

describe.skipIf(!hasJupyter)("tprpc kernel lifecycle (e2e)", () => {
  let session: KernelSession | undefined;
  let k: Kernel.IKernelConnection;

  beforeAll(async () => {
    session = await openKernel();
    k = session.kernel;
  }, 120_000);

  afterAll(async () => {
    await session?.close(false);
  });

  it("reports compile errors and unhandled rejections as error outputs, and rich results", async () => {
    const compile = await exec(k, 'const n: number = "x";');
    expect(compile.status).toBe("error");
    expect(compile.errorOutput?.ename).toBe("CompileError");
    expect(compile.errorOutput?.evalue).toContain("not assignable to type 'number'");
    const lost = await exec(k, 'Promise.reject(new tprpc.ValueError("lost in the background"));\n1');
    expect(lost.status).toBe("error");
    expect(lost.errorOutput).toMatchObject({ ename: "ValueError", evalue: "lost in the background" });
    const ok = await exec(k, "tprpc.tensor([[1, 2], [3, 4]])");
    expect(ok.status).toBe("ok");
    expect(ok.result).toContain("tensor([[1, 2],");
  }, 120_000);

  it("interrupts a pending RPC, restarts and shuts down without orphan workers", async () => {
    const start =
      "const c = await tprpc.cluster.start({ workers: 2 }); console.log(JSON.stringify([process.pid, ...c.pids]));";
    const first = await exec(k, start, 120_000);
    expect(first.status, JSON.stringify(first)).toBe("ok");
    const [kernelPid, ...pids] = JSON.parse(first.stdout.trim().split("\n").at(-1)!) as number[];
    expect(pids).toHaveLength(2);
    expect(pids.every(alive)).toBe(true);

    // Interrupt a call the worker would answer only after 20 s.
    const t0 = Date.now();
    let started!: () => void;
    const calling = new Promise<void>((r) => (started = r));
    const pending = exec(
      k,
      'console.log("calling");\nawait tprpc.rpc.rpcSync("worker1", async () => { await new Promise((r) => setTimeout(r, 20_000)); return 1; })',
      60_000,
      (text) => text.includes("calling") && started(),
    );
    // NB: interrupt only once the cell runs (the RPC is sent right after the log line), however slow the machine.
    await calling;
    await new Promise((r) => setTimeout(r, 500));
    await k.interrupt();
    const interrupted = await pending;
    expect(Date.now() - t0).toBeLessThan(15_000);
    expect(interrupted.status).toBe("error");
    expect(interrupted.ename).toBe("InterruptError");
    expect(interrupted.errorOutput?.evalue).toContain("1 pending RPC was cancelled");
    expect(pids.every(alive)).toBe(true); // the workers ignored the group's SIGINT
    const after = await exec(k, 'await tprpc.rpc.rpcSync("worker2", (a: number) => a + 1, [41])');
    expect(after.status, JSON.stringify(after)).toBe("ok");
    expect(after.result).toBe("42");

    // Restart: the old kernel and its workers are gone; the new kernel has `tprpc` again.
    await k.restart();
    expect(await gone([kernelPid!, ...pids], 15_000)).toEqual([]);
    const second = await exec(k, start, 120_000);
    expect(second.status, JSON.stringify(second)).toBe("ok");
    const [kernelPid2, ...pids2] = JSON.parse(second.stdout.trim().split("\n").at(-1)!) as number[];
    expect(kernelPid2).not.toBe(kernelPid);
    expect(pids2.every(alive)).toBe(true);

    // Shutdown: the kernel and its workers are gone.
    await k.shutdown();
    expect(await gone([kernelPid2!, ...pids2], 15_000)).toEqual([]);
  }, 240_000);
});
