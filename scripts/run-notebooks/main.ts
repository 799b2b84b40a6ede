/**
 * `npm run notebooks` — executes notebooks headless on the tprpc kernel.
 *
 *   node dist/scripts/run-notebooks/main.js [NOTEBOOK.ipynb ...] [--out DIR] [--kernel NAME]
 *        [--cell-timeout SECONDS] [--notebook-timeout SECONDS]
 *
 * With no files it runs every notebooks/*.ipynb, in name order. Each executed copy goes to
 * --out (default dist/notebooks/), never over its source. One private Jupyter server
 * (scripts/run-notebooks/server.ts) serves the whole run; each notebook gets a fresh kernel.
 * Stops at the first failing cell. Exit codes: 0 all ran, 1 a cell failed or timed out,
 * 2 bad usage or no Jupyter. The server and kernels are stopped on every exit path
 * (normal end, error, SIGINT, SIGTERM).
 */
import fs from "node:fs";
import path from "node:path";
import { fileURLToPath } from "node:url";
import { parseArgs } from "node:util";
import { KernelManager, ServerConnection } from "@jupyterlab/services";
import { runNotebook, type KernelHandle, type NotebookResult } from "./notebook.js";
import { RunnerSetupError, startServer, type JupyterServer } from "./server.js";

export interface RunOptions {
  files: string[];
  outDir: string;
  kernelName?: string;
  cellTimeoutMs: number;
  notebookTimeoutMs: number;
  /** Progress lines (default: stderr). */
  log?: (line: string) => void;
}

export interface RunResult {
  ok: boolean;
  serverStartMs: number;
  notebooks: NotebookResult[];
}

/** The repository root (where package.json is), from dist/scripts/run-notebooks or scripts/run-notebooks. */
export function repoRoot(): string {
  let dir = path.dirname(fileURLToPath(import.meta.url));
  while (!fs.existsSync(path.join(dir, "package.json"))) dir = path.dirname(dir);
  return dir;
}

/** Runs the notebooks on one server; see the file's top. */
export async function runNotebooks(o: RunOptions): Promise<RunResult> {
  const log = o.log ?? ((l: string) => process.stderr.write(`${l}\n`));
  const files = o.files.map((f) => path.resolve(f));
  for (const f of files) if (!fs.existsSync(f)) throw new RunnerSetupError(`no such notebook: ${f}`);
  const rootDir = files.length ? commonDir(files) : process.cwd();
  const t0 = performance.now();
  const server = await startServer({ rootDir, kernelName: o.kernelName });
  const stopOnSignal = (sig: NodeJS.Signals) => {
    log(`[notebooks] ${sig}: stopping the Jupyter server and its kernels`);
    void server
      .stop()
      .catch((e: unknown) => log(`[notebooks] stopping the Jupyter server failed: ${(e as Error)?.stack ?? String(e)}`))
      .finally(() => process.exit(sig === "SIGINT" ? 130 : 143));
  };
  process.once("SIGINT", stopOnSignal);
  process.once("SIGTERM", stopOnSignal);
  const result: RunResult = { ok: true, serverStartMs: performance.now() - t0, notebooks: [] };
  const manager = kernelManager(server);
  try {
    log(`[notebooks] Jupyter server up in ${(result.serverStartMs / 1000).toFixed(1)} s (kernel ${server.kernelName})`);
    for (const file of files) {
      const outPath = path.join(o.outDir, path.basename(file));
      if (path.resolve(outPath) === file) throw new RunnerSetupError(`--out would overwrite the source ${file}`);
      log(`[notebooks] ${path.relative(process.cwd(), file)}`);
      const r = await runNotebook(
        file,
        outPath,
        () => startKernel(manager, server.kernelName, path.relative(rootDir, path.dirname(file))),
        {
          cellTimeoutMs: o.cellTimeoutMs,
          notebookTimeoutMs: o.notebookTimeoutMs,
          onCell: (i, n, c) =>
            log(
              `  cell ${i + 1}/${n}: ${c.status}${c.ename ? ` — ${c.ename}: ${c.evalue}` : ""} (${(c.ms / 1000).toFixed(2)} s)`,
            ),
        },
      );
      result.notebooks.push(r);
      log(
        `  ${r.ok ? "ok" : "FAILED"}: cells ${(r.cellMs / 1000).toFixed(1)} s, runner overhead ${(r.overheadMs / 1000).toFixed(2)} s (kernel start ${(r.kernelStartMs / 1000).toFixed(2)} s, shutdown ${(r.kernelShutdownMs / 1000).toFixed(2)} s) -> ${path.relative(process.cwd(), r.outPath)}`,
      );
      if (!r.ok) {
        result.ok = false;
        break;
      }
    }
  } finally {
    try {
      manager.dispose();
    } finally {
      await server.stop();
    }
    process.off("SIGINT", stopOnSignal);
    process.off("SIGTERM", stopOnSignal);
  }
  return result;
}

function kernelManager(server: JupyterServer): KernelManager {
  const serverSettings = ServerConnection.makeSettings({
    baseUrl: server.baseUrl,
    wsUrl: server.baseUrl.replace(/^http/, "ws"),
    token: server.token,
    appendToken: true,
  });
  return new KernelManager({ serverSettings });
}

/** Starts a kernel whose working directory is `dir` (relative to the server's root), as Jupyter does for a notebook. */
async function startKernel(manager: KernelManager, name: string, dir: string): Promise<KernelHandle> {
  await manager.ready;
  // NB: jupyter-server's POST /api/kernels takes a `path` (the kernel's cwd); without it the kernel inherits the
  // server's cwd, so a notebook's relative paths would depend on how the runner was started.
  const k = await manager.startNew({ name, path: dir } as { name: string });
  // NB: messages sent before the websocket connects are refused; then kernel_info's reply means the kernel is up.
  if (k.connectionStatus !== "connected") {
    let timer: NodeJS.Timeout | undefined;
    await new Promise<void>((resolve, reject) => {
      timer = setTimeout(() => reject(new RunnerSetupError(`kernel ${name} did not connect within 60 s`)), 60_000);
      k.connectionStatusChanged.connect((_, s) => {
        if (s === "connected") resolve();
      });
    }).finally(() => clearTimeout(timer));
  }
  await k.requestKernelInfo();
  return {
    requestExecute: (content) => k.requestExecute(content) as never,
    interrupt: () => k.interrupt(),
    shutdown: () => k.shutdown(),
  };
}

function commonDir(files: string[]): string {
  let dir = path.dirname(files[0]!);
  while (!files.every((f) => f.startsWith(dir + path.sep))) dir = path.dirname(dir);
  return dir;
}

async function main(): Promise<number> {
  // NB: @jupyterlab/services reports each websocket start and kernel status with console.debug (stdout in Node),
  // and disposing a connection to a dead kernel rejects promises nobody awaits: report those, never crash on them
  // (the finally blocks must still stop the server).
  if (!Number(process.env.TPRPC_DEBUG ?? 0)) console.debug = () => undefined;
  process.on("unhandledRejection", (e) =>
    process.stderr.write(`[notebooks] (ignored) ${(e as Error)?.message ?? e}\n`),
  );
  const { values, positionals } = parseArgs({
    allowPositionals: true,
    options: {
      out: { type: "string" },
      kernel: { type: "string" },
      "cell-timeout": { type: "string" },
      "notebook-timeout": { type: "string" },
    },
  });
  const root = repoRoot();
  const files = positionals.length
    ? positionals
    : fs
        .readdirSync(path.join(root, "notebooks"))
        .filter((f) => f.endsWith(".ipynb"))
        .sort()
        .map((f) => path.join(root, "notebooks", f));
  if (!files.length) {
    process.stderr.write("[notebooks] no notebooks to run\n");
    return 0;
  }
  const seconds = (v: string | undefined, d: number) => {
    const n = v === undefined ? d : Number(v);
    if (!(n > 0)) throw new RunnerSetupError(`a timeout must be a positive number of seconds, got ${v}`);
    return n * 1000;
  };
  const r = await runNotebooks({
    files,
    outDir: path.resolve(values.out ?? path.join(root, "dist", "notebooks")),
    kernelName: values.kernel,
    cellTimeoutMs: seconds(values["cell-timeout"], 600),
    notebookTimeoutMs: seconds(values["notebook-timeout"], 1800),
  });
  const failed = r.notebooks.find((n) => !n.ok);
  if (failed?.failed)
    process.stderr.write(
      `[notebooks] ${path.basename(failed.path)}: cell ${failed.failed.index + 1} failed: ${failed.failed.ename}: ${failed.failed.evalue} (outputs in ${failed.outPath})\n`,
    );
  else process.stderr.write(`[notebooks] ${r.notebooks.length} notebook(s) ran\n`);
  return r.ok ? 0 : 1;
}

if (process.argv[1] && fileURLToPath(import.meta.url) === path.resolve(process.argv[1])) {
  main().then(
    (code) => process.exit(code),
    (e: unknown) => {
      process.stderr.write(
        `[notebooks] ${e instanceof RunnerSetupError ? e.message : ((e as Error).stack ?? String(e))}\n`,
      );
      process.exit(2);
    },
  );
}
