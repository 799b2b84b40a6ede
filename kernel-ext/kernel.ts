/**
 * The tprpc Jupyter kernel: tslab, started through its own startKernel, with
 * the SDK preloaded and notebook-grade errors, results and cleanup. tslab has
 * no plugin hook, so this wraps two of its modules before starting it:
 *
 * 1. executor.createExecutor: every executor first runs a hidden prelude cell,
 *    `import * as tprpc from "<this package's dist/sdk/index.js>"`, which makes
 *    `tprpc` (with its types) a name in every later cell. Its console (tslab
 *    prints a cell's errors and its last expression through it) is replaced: an
 *    error is kept for the cell's error output, the last expression becomes an
 *    execute_result with a rich MIME bundle (tensors render as tables). A cell
 *    that fails or is interrupted keeps the declarations whose statements ran
 *    (keepPartialCells, partial_cell.ts). Shorthand properties are written out
 *    before tslab compiles a cell, so an earlier cell's name in `{ aa }` works (shorthand.ts).
 * 2. ZmqServer.handleExecute: also publishes the cell's `error` output (ename,
 *    evalue, traceback — with the remote stack of a RemoteError) and puts them in
 *    the execute_reply; tslab alone only writes errors to stderr.
 *    ZmqServer.close (after a shutdown_request): shuts the cluster down, then exits.
 *    JupyterHandlerImpl.handleExecute: cells queue in exec_queue.ts, which aborts
 *    after an error as ipykernel does (honouring stop_on_error).
 * 3. An unhandled rejection or uncaught exception while a cell runs fails that
 *    cell (through tslab's interrupt, which ends the cell's await) instead of
 *    vanishing into stderr; the cell also waits one event-loop turn after its
 *    code returns, so a promise rejected right away is caught too. A rejection of
 *    a promise an earlier cell made is shown as stderr on the running cell (which
 *    goes on) or, while none runs, on the next cell.
 * 4. SIGINT (Jupyter's interrupt reaches the whole process group; the workers
 *    ignore it): rpc.cancelPending() rejects every pending RPC, and tslab's own
 *    handler interrupts the cell. SIGTERM and exit SIGKILL every worker left, so
 *    shutdown, restart and a killed kernel leave no worker process behind.
 * 5. A kernel whose Jupyter server died (JPY_PARENT_PID no longer its parent) exits.
 */
import { createRequire } from "node:module";
import { fileURLToPath } from "node:url";
import { promiseHooks } from "node:v8";
import type * as TS from "typescript";
import * as tprpc from "tprpc";
import { compileErrorContent, errorContent, interruptContent, type ErrorContent } from "./error_output.js";
import { ExecQueue, type ExecRequestFlags } from "./exec_queue.js";
import { assignsExport, mergeDecls, splitExportInit } from "./partial_cell.js";
import { expandShorthand } from "./shorthand.js";

const require = createRequire(import.meta.url);

// The parts of tslab 1.0.x this file wraps (tslab/dist/*.js, CommonJS).
interface Executor {
  /** The cells' shared `exports` object (top-level names). */
  locals?: object;
  execute(src: string): Promise<boolean>;
  interrupt(): void;
}
type ExecutorConsole = { log: (...a: unknown[]) => void; error: (...a: unknown[]) => void };
/** What tslab's converter makes of a cell (converter.js's convert). */
interface Converted {
  output?: string;
  declOutput?: string;
  diagnostics: unknown[];
  lastExpressionVar?: string;
}
interface Converter {
  convert(prevDecl: string, src: string): Converted;
  inspect(prevDecl: string, src: string, position: number): unknown;
  complete(prevDecl: string, src: string, position: number): unknown;
}
interface ExecutorModule {
  createExecutor(rootDir: string, convs: { node: Converter }, console: ExecutorConsole): Executor;
}
interface ZmqMsg {
  createReply(): { header: { msg_type: string }; content: unknown; signAndSend(key: string, sock: unknown): void };
  content: unknown;
}
interface Handler {
  execCount: number;
  handleExecuteImpl: ExecuteImpl;
  handleExecute(
    req: unknown,
    writeStream: (name: string, text: string) => void,
    writeDisplayData: (data: unknown, update: boolean) => void,
  ): Promise<{ status: string; execution_count?: number } & Partial<ErrorContent>>;
}
interface ZmqServerProto {
  handler: Handler;
  shell: { readable?: boolean };
  connInfo: { key: string };
  iopub: unknown;
  handleExecute(sock: unknown, msg: ZmqMsg): Promise<void>;
  close(): void;
}
type ExecuteImpl = (
  req: unknown,
  writeStream: (name: string, text: string) => void,
  writeDisplayData: (data: unknown, update: boolean) => void,
) => Promise<unknown>;
interface JupyterModule {
  ZmqServer: { prototype: ZmqServerProto };
  JupyterHandlerImpl: { prototype: Handler };
  lastWriteDisplayData: ((data: unknown, update: boolean) => void) | null;
}
interface MainModule {
  startKernel(o: { configPath: string; enableFindLocal?: boolean; jsKernel?: boolean }): void;
}

// NB: tslab points process.stderr.write at the running cell; kernel diagnostics go to the real stderr.
const stderrWrite = process.stderr.write.bind(process.stderr);
const debugLevel = Number(process.env.TPRPC_DEBUG ?? 0);
function debug(msg: string): void {
  if (debugLevel >= 1) stderrWrite(`[tprpc:kernel] ${msg}\n`);
}

/** What the running cell produced besides streams. */
interface CellState {
  errors: unknown[];
  diagnostics: string[];
  interrupted: boolean;
  cancelled: number;
  publish: (type: string, content: unknown) => void;
  executionCount: () => number;
}
let cell: CellState | null = null;
/** Each queued cell's state, by the stream writer tslab hands to its handler. */
const cells = new WeakMap<object, CellState>();

/** The module path the prelude imports: this package's SDK entry. */
export function sdkEntry(): string {
  return fileURLToPath(import.meta.resolve("tprpc"));
}

/** The hidden first cell. */
export function preludeSource(): string {
  return `import * as tprpc from ${JSON.stringify(sdkEntry())};`;
}

function cellError(c: CellState): ErrorContent {
  if (c.diagnostics.length) return compileErrorContent(c.diagnostics);
  const first = c.errors.find((e) => !(e instanceof Error && e.message === "Interrupted asynchronously"));
  if (first !== undefined) return errorContent(first);
  if (c.interrupted || c.errors.length) return interruptContent(c.cancelled);
  return { ename: "Error", evalue: "the cell failed", traceback: ["the cell failed (no error was recorded)"] };
}

/**
 * Makes a failed or interrupted cell keep the declarations it made before it stopped
 * (partial_cell.ts tells the rule): the kernel owns the declaration text tslab's converter
 * type-checks against (tslab keeps its own only for cells that succeeded), removes the
 * `exports.x = void 0` line from each compiled cell, and records which names a cell assigned.
 */
function keepPartialCells(conv: Converter): { run: (execute: () => Promise<boolean>) => Promise<boolean> } {
  const ts = createRequire(require.resolve("tslab/package.json"))("@tslab/typescript-for-tslab") as typeof TS;
  let prevDecl = "";
  let last: (Converted & { names: string[] }) | null = null;
  const convert = conv.convert.bind(conv);
  const inspect = conv.inspect.bind(conv);
  const complete = conv.complete.bind(conv);
  conv.convert = (_prev, src) => {
    // NB: tslab leaves the earlier cells' names in shorthand properties bare (shorthand.ts).
    const expanded = expandShorthand(ts, src);
    let r = convert(prevDecl, expanded);
    // NB: a cell that does not compile is reported on the text the user wrote.
    if (expanded !== src && r.diagnostics.length) r = convert(prevDecl, src);
    const split = r.output ? splitExportInit(r.output) : { names: [], js: r.output };
    last = Object.assign(r, { output: split.js, names: split.names });
    return r;
  };
  conv.inspect = (_prev, src, pos) => inspect(prevDecl, src, pos);
  conv.complete = (_prev, src, pos) => complete(prevDecl, src, pos);
  // NB: compiled cells write `exports.NAME` through globalThis.__tslab__.exports (tslab's proxy);
  // a proxy in front of it records the names a cell assigned.
  const slot = (globalThis as { __tslab__?: { exports: object } }).__tslab__;
  const assigned = new Set<string>();
  if (slot) {
    slot.exports = new Proxy(slot.exports, {
      set(target, p, v) {
        if (typeof p === "string") assigned.add(p);
        return Reflect.set(target, p, v);
      },
      defineProperty(target, p, attrs) {
        if (typeof p === "string") assigned.add(p);
        return Reflect.defineProperty(target, p, attrs);
      },
    });
  }
  return {
    async run(execute) {
      last = null;
      assigned.clear();
      const ok = await execute();
      const c = last as (Converted & { names: string[] }) | null;
      if (!c || c.diagnostics.length) return ok; // nothing ran
      const decl = c.declOutput ?? "";
      if (ok) prevDecl = decl;
      else {
        const js = c.output ?? "";
        const dropped = new Set(
          c.names.filter((n) => n !== c.lastExpressionVar && !assigned.has(n) && assignsExport(js, n)),
        );
        prevDecl = mergeDecls(ts, prevDecl, decl, dropped);
        debug(`failed cell keeps ${c.names.filter((n) => !dropped.has(n)).join(", ") || "no names"}`);
      }
      return ok;
    },
  };
}

function wrapExecutor(mod: ExecutorModule): void {
  const orig = mod.createExecutor;
  mod.createExecutor = (rootDir, convs, _console) => {
    const console: ExecutorConsole = {
      log: (...args) => {
        // tslab prints a cell's last expression with console.log(value).
        if (!cell) return void stderrWrite(`${args.map(String).join(" ")}\n`);
        cell.publish("execute_result", {
          execution_count: cell.executionCount(),
          data: tprpc.display.toBundle(args[0]),
          metadata: {},
        });
      },
      error: (...args) => {
        if (!cell) return void stderrWrite(`${args.map(String).join(" ")}\n`);
        // Diagnostics come as ("%s%d:%d - %s", file, line, col, message); runtime errors as (error).
        if (args[0] === "%s%d:%d - %s") cell.diagnostics.push(`${args[2]}:${args[3]} - ${String(args[4])}`);
        else cell.errors.push(args[0]);
      },
    };
    const ex = orig(rootDir, convs, console);
    const partial = keepPartialCells(convs.node);
    // NB: tslab compiles a name from an earlier cell to `exports.NAME`; code shipping resolves those
    // (and bare top-level names) on this executor's exports object.
    tprpc.rpc.setShippingScope(ex.locals ?? null);
    const execute = ex.execute.bind(ex);
    let prelude: Promise<void> | null = (async () => {
      const saved = cell;
      const ok = await partial.run(() => execute(preludeSource()));
      cell = saved;
      if (!ok) stderrWrite(`tprpc kernel: the prelude failed to import ${sdkEntry()}\n`);
      debug(`prelude ${ok ? "ran" : "FAILED"}`);
    })();
    executor = ex;
    ex.execute = async (src) => {
      if (prelude) {
        await prelude;
        prelude = null;
      }
      let ok = await partial.run(() => execute(src));
      // NB: a promise the cell rejected without awaiting is reported after the microtasks drain.
      await new Promise((r) => setImmediate(r));
      if (cell && (cell.errors.length || cell.diagnostics.length)) ok = false;
      return ok;
    };
    return ex;
  };
}

let executor: Executor | null = null;

type ZmqSocketProto = { send(msg: unknown): Promise<void> };

/**
 * zeromq 6 allows one send in flight per socket and throws "Socket is busy writing" on a second;
 * tslab sends without awaiting, so a cell that updates several displays quickly (a progress bar and a
 * live chart) could fail. Every send of the kernel's publisher and routers goes through a per-socket queue.
 */
function serializeSends(zmq: Record<string, { prototype: ZmqSocketProto }>): void {
  const queues = new WeakMap<object, Promise<void>>();
  for (const kind of ["Publisher", "Router"]) {
    const proto = zmq[kind]?.prototype;
    if (!proto) continue;
    const send = proto.send;
    // NB: zeromq defines send read-only on a parent prototype: shadow it with defineProperty.
    Object.defineProperty(proto, "send", {
      configurable: true,
      writable: true,
      value: function (this: ZmqSocketProto, msg: unknown): Promise<void> {
        const next = (queues.get(this) ?? Promise.resolve()).then(() => send.call(this, msg));
        // NB: a failed send must not wedge the queue; the caller still sees its own rejection.
        queues.set(
          this,
          next.catch(() => undefined),
        );
        return next;
      },
    });
  }
}

/** The kernel's shell socket (zeromq's `readable`: a message waits to be read). */
let shellSocket: { readable?: boolean } | null = null;

/** Lets the event loop read the execute requests already waiting on the shell socket (bounded). */
async function settleShell(): Promise<void> {
  const deadline = Date.now() + 200;
  do await new Promise((r) => setImmediate(r));
  while (shellSocket?.readable && Date.now() < deadline);
  await new Promise((r) => setImmediate(r));
}

/**
 * Rejections nothing awaited that did not come from the running cell. A promise is tagged with the
 * cell running when it was made (or, between cells, with its parent promise's cell). A rejection from
 * the running cell fails that cell; one from an earlier cell is shown as stderr on the running cell,
 * which goes on, or, while no cell runs, on the next cell to run. Why there: a Jupyter front end drops
 * output addressed to a cell whose request has finished (JupyterLab disposes the request's future), and
 * ipykernel likewise shows output and tracebacks of background work on the cell running when they come.
 */
const CELL_OF = Symbol("tprpc.cellOf");
type Tagged = { [CELL_OF]?: number };
/** The execution count of the cell running now; 0 between cells. */
let runningCell = 0;
let lastCellCount = 0;
const lateRejections: { error: unknown; from: number | undefined; after: number }[] = [];

function tagPromises(): void {
  // NB: one property write per promise made; the tag says which cell a rejection nothing awaited came from.
  promiseHooks.onInit((promise, parent) => {
    const tag = runningCell || (parent as Tagged | undefined)?.[CELL_OF];
    if (tag) (promise as Tagged)[CELL_OF] = tag;
  });
}

function lateRejectionText(error: unknown, from: number | undefined, when: string): string {
  const origin = from ? `from cell [${from}] ` : "";
  return `A promise ${origin}rejected ${when}, with nothing awaiting it:\n${errorContent(error).traceback.join("\n")}\n\n`;
}

function showLateRejections(c: CellState): void {
  for (const { error, from, after } of lateRejections.splice(0)) {
    const when = after ? `after cell [${after}] ended` : "before any cell ran";
    c.publish("stream", { name: "stderr", text: lateRejectionText(error, from, when) });
  }
}

function wrapServer(mod: JupyterModule): void {
  const proto = mod.ZmqServer.prototype;
  proto.handleExecute = async function (this: ZmqServerProto, sock: unknown, msg: ZmqMsg): Promise<void> {
    const publish = (type: string, content: unknown) => {
      const r = msg.createReply();
      r.header.msg_type = type;
      r.content = content;
      r.signAndSend(this.connInfo.key, this.iopub);
    };
    const state: CellState = {
      errors: [],
      diagnostics: [],
      interrupted: false,
      cancelled: 0,
      publish,
      executionCount: () => this.handler.execCount,
    };
    const writeStream = (name: string, text: string) => publish("stream", { name, text });
    cells.set(writeStream, state);
    shellSocket = this.shell;
    const content = await this.handler.handleExecute(msg.content, writeStream, (data, update) =>
      publish(update ? "update_display_data" : "display_data", data),
    );
    if (content.status === "aborted") {
      // NB: message spec 5.1 deprecates the "aborted" status for an error reply (ipykernel 7 does so); no
      // error output, as the cell did not run.
      Object.assign(content, {
        status: "error",
        ename: "AbortedError",
        evalue: "not run: an earlier cell failed, and its request asked to stop on error",
        traceback: [],
      });
    } else if (content.status === "error") {
      const err = cellError(state);
      publish("error", err);
      Object.assign(content, err);
    }
    if (cell === state) {
      cell = null;
      runningCell = 0;
      lastCellCount = this.handler.execCount;
    }
    const reply = msg.createReply();
    reply.header.msg_type = "execute_reply";
    reply.content = content;
    reply.signAndSend(this.connInfo.key, sock);
  };
  // NB: tslab queues cells; a cell's state becomes current when the queue starts running it.
  const hproto = mod.JupyterHandlerImpl.prototype;
  const impl = hproto.handleExecuteImpl;
  hproto.handleExecuteImpl = function (this: Handler, req, writeStream, writeDisplayData) {
    cell = cells.get(writeStream) ?? null;
    if (cell) {
      // NB: tslab's handleExecuteImpl numbers the cell execCount + 1 first thing
      runningCell = this.execCount + 1;
      showLateRejections(cell);
    }
    return impl.call(this, req, writeStream, writeDisplayData);
  };
  // tslab's handleExecute (queue, and abort whatever arrives within 200 ms of any error) is replaced.
  const queue = new ExecQueue(settleShell);
  hproto.handleExecute = async function (this: Handler, req, writeStream, writeDisplayData) {
    const out = await queue.add(req as ExecRequestFlags, async () => {
      try {
        const c = (await this.handleExecuteImpl(req, writeStream, writeDisplayData)) as { count: number };
        return { ok: true, executionCount: c.count };
      } catch (e) {
        // NB: tslab's handleExecuteImpl throws its ExecutionCount object when the cell failed.
        const count = (e as { count?: unknown } | null)?.count;
        if (typeof count !== "number") stderrWrite(`tprpc kernel: unexpected error: ${String(e)}\n`);
        return { ok: false, executionCount: typeof count === "number" ? count : undefined };
      }
    });
    return { status: out.status, execution_count: "executionCount" in out ? out.executionCount : undefined };
  };
  const close = proto.close;
  proto.close = function (this: ZmqServerProto): void {
    close.call(this);
    void exitCleanly(0);
  };
}

/** Shuts the cluster down (bounded), kills what is left and exits. */
async function exitCleanly(code: number): Promise<never> {
  debug(`exiting: shutting down the cluster (workers ${tprpc.cluster.livePids().join(", ") || "none"})`);
  const bound = new Promise((r) => setTimeout(r, 1_500).unref());
  try {
    await Promise.race([tprpc.cluster.shutdown().catch(() => undefined), bound]);
    tprpc.cluster.killAll();
  } finally {
    // NB: exit even if the above threw: the callers do not await this, so it must never reject
    process.exit(code);
  }
}

function installProcessHooks(): void {
  process.on("SIGINT", () => {
    const n = tprpc.rpc.cancelPending(
      new tprpc.RpcError("the RPC was cancelled by an interrupt (the cluster stays usable)"),
    );
    if (cell) {
      cell.interrupted = true;
      cell.cancelled += n;
    }
    debug(`SIGINT: cancelled ${n} pending RPCs`);
  });
  const failCell = (e: unknown, what: string, from?: number) => {
    if (cell && (from === undefined || from === runningCell)) {
      cell.errors.unshift(e);
      executor?.interrupt();
    } else if (cell) {
      cell.publish("stream", { name: "stderr", text: lateRejectionText(e, from, `while cell [${runningCell}] ran`) });
    } else {
      stderrWrite(`tprpc kernel: ${what} outside a cell: ${(e as Error)?.stack ?? String(e)}\n`);
      lateRejections.push({ error: e, from, after: lastCellCount });
    }
  };
  tagPromises();
  process.on("unhandledRejection", (e, p) => failCell(e, "unhandled rejection", (p as Tagged)[CELL_OF]));
  process.on("uncaughtException", (e) => failCell(e, "uncaught exception"));
  process.on("SIGTERM", () => {
    tprpc.cluster.killAll();
    process.exit(143);
  });
  process.on("exit", () => tprpc.cluster.killAll());
  // NB: Jupyter starts kernels in their own session, so a server that dies hard takes no kernel with
  // it; JPY_PARENT_PID names the server, and a kernel whose parent changed exits (workers included).
  const parent = Number(process.env.JPY_PARENT_PID);
  if (parent > 1 && parent !== process.ppid) {
    debug(`the Jupyter server (pid ${parent}) was gone before the kernel started; exiting`);
    process.exit(1);
  }
  if (parent > 1)
    setInterval(() => {
      if (process.ppid !== parent) {
        debug(`the Jupyter server (pid ${parent}) is gone; exiting`);
        void exitCleanly(1);
      }
    }, 1_000).unref();
}

/** Starts the kernel on a Jupyter connection file (what kernel.json's argv runs). */
export function startKernel(configPath: string): void {
  const executorMod = require("tslab/dist/executor.js") as ExecutorModule;
  const jupyterMod = require("tslab/dist/jupyter.js") as JupyterModule;
  const mainMod = require("tslab/dist/main.js") as MainModule;
  wrapExecutor(executorMod);
  wrapServer(jupyterMod);
  serializeSends(createRequire(require.resolve("tslab/package.json"))("zeromq") as never);
  tprpc.display.setDisplaySink({
    display(bundle, opts) {
      const write = jupyterMod.lastWriteDisplayData;
      if (!write) return;
      write(
        { data: bundle, metadata: {}, transient: opts.displayId ? { display_id: opts.displayId } : {} },
        !!opts.update,
      );
    },
  });
  installProcessHooks();
  // NB: enableFindLocal false: a tslab found near the notebook would be another, unwrapped copy.
  const before = new Set<unknown>([
    ...process.listeners("unhandledRejection"),
    ...process.listeners("uncaughtException"),
  ]);
  mainMod.startKernel({ configPath, enableFindLocal: false });
  // NB: tslab's own handlers would also print these into the cell's stderr; the error output says it all.
  for (const l of process.listeners("unhandledRejection")) if (!before.has(l)) process.off("unhandledRejection", l);
  for (const l of process.listeners("uncaughtException")) if (!before.has(l)) process.off("uncaughtException", l);
  debug(`started (pid ${process.pid}, SDK ${sdkEntry()})`);
}
