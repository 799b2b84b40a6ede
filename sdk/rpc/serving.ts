/**
 * The callee's side of the agent: serving what arrives on inbound pipes.
 *
 * A call (REQUEST, REMOTE_CALL, RREF_FETCH), step by step:
 * 0. REQUEST and REMOTE_CALL queue (./serve_queue.ts): back to back while they
 *    are cheap; after a turn's budget the JS thread goes back to the event
 *    loop, so replies leave and fetches are answered between computations.
 *    RREF_FETCH does not queue: its value is made or being made.
 * 1. Wait for the RRefs among its arguments: values owned here must be made,
 *    user forks confirmed by their owners (`waits`, from RpcPipe).
 * 2. Materialize the target (./shipping: builtin, registered, global, module
 *    or shipped source, compiled once per peer and hash), run the message
 *    hooks' `incoming` on the arguments, and call it inside the hooks'
 *    `around` with this agent current (./process.ts); classes are
 *    constructed, promises awaited. The target starts synchronously when the
 *    queue starts the call (a call with RRefs to wait for queues once they settled).
 * 3. Reply RESPONSE {value} or ERROR {error} on the same pipe. REMOTE_CALL
 *    keeps the value (or its error, for toHere) in the RRefContext and
 *    replies once it is made; RREF_FETCH replies with an owned value.
 * The RRef protocol's one-way messages (fork request, child accept, user
 * delete, collect) are handled at once (./rref.ts has the protocol).
 */
import { debug } from "../util/index.js";
import { type DecodedMessage, MessageType } from "../wire/index.js";
import type { Agent } from "./agent.js";
import { collectGarbage } from "./gc.js";
import { DECLINED, dropAhead, fetchAhead, fetchAheadOn, fitsAhead } from "./fetch_ahead.js";
import { hookAround, hookIncoming, hookOutgoing, hookScope } from "./hooks.js";
import { runServing } from "./process.js";
import { nowMs } from "./profiler.js";
import type { RRef } from "./rref.js";
import type { RpcPipe } from "./rpc_pipe.js";
import { ServeQueue } from "./serve_queue.js";
import {
  ShippedCodeMissingError,
  type TargetRecord,
  explainReferenceError,
  materializeTargetNow,
} from "./shipping/index.js";

interface RequestPayload {
  from: string;
  target: TargetRecord;
  args: unknown[];
  /** Metadata of message hooks, by hook key. */
  ext?: Record<string, unknown>;
  rrefId?: string;
  /** "1" on a fetch ahead (./fetch_ahead.ts). */
  ahead?: string;
  fork?: string;
  parent?: string;
  /** 1 when the caller's profiler wants the span the target ran here. */
  prof?: unknown;
}

/** Treats a function whose source starts with `class` as a constructor. */
function isClass(fn: unknown): fn is new (...a: unknown[]) => unknown {
  return typeof fn === "function" && /^class[\s{]/.test(Function.prototype.toString.call(fn));
}

type OneWayHandler = (agent: Agent, body: Record<string, unknown>) => void;
let oneWayHandler: OneWayHandler | null = null;

/** @internal tprpc.distributed's receiver of P2P_MESSAGE (runs synchronously, in frame order; must not throw). */
export function setOneWayHandler(h: OneWayHandler): void {
  oneWayHandler = h;
}

export class CallServer {
  /** Calls being served (their replies not yet sent). */
  private readonly running = new Set<Promise<unknown>>();
  private readonly queue = new ServeQueue();
  /**
   * Calls waiting for their RRef arguments before they queue, held here. NB: else only the promises
   * they wait for would reach them (an unconfirmed RRef's own callbacks, see RRefContext.pendingUsers).
   */
  private readonly waitingForRRefs = new Set<() => void>();

  constructor(private readonly agent: Agent) {}

  /** How many calls are being served now (queued ones included). */
  get active(): number {
    return this.running.size + this.queue.size + this.waitingForRRefs.size;
  }

  /** One line for ./state_dump.ts. */
  debugState(): string {
    return `serving: ${this.running.size} call(s) running, ${this.queue.size} queued, ${this.waitingForRRefs.size} waiting for their RRef arguments`;
  }

  /** Serves one message that arrived on `from` (see the file's top). */
  serve(m: DecodedMessage, from: RpcPipe, waits: Promise<unknown>[] | null, users?: RRef<unknown>[] | null): void {
    const body = m.payload as RequestPayload;
    const rrefs = this.agent.rrefs;
    switch (m.type) {
      case MessageType.RREF_USER_DELETE:
        rrefs.dropFork(body.rrefId!, body.fork!);
        return;
      case MessageType.RREF_CHILD_ACCEPT:
        rrefs.childAccepted(body.fork!);
        return;
      case MessageType.RREF_COLLECT:
        collectGarbage();
        return;
      case MessageType.RREF_FORK_REQUEST:
        // the owner registers the child, then lets the parent go and confirms the child
        if (rrefs.addFork(body.rrefId!, body.fork!, body.from)) {
          void this.agent.notify(body.parent!, "childAccept", { fork: body.fork! });
          if (body.from !== body.parent) void this.agent.notify(body.from, "childAccept", { fork: body.fork! });
        }
        return;
      case MessageType.P2P_MESSAGE: {
        // NB: one-way and synchronous, in frame order (point-to-point matching relies on it)
        if (oneWayHandler) oneWayHandler(this.agent, body as unknown as Record<string, unknown>);
        else debug(1, "rpc", `dropping a point-to-point message from ${body.from}: tprpc.distributed is not loaded`);
        return;
      }
      case MessageType.REQUEST:
      case MessageType.REMOTE_CALL:
      case MessageType.RREF_FETCH:
        break;
      default:
        debug(1, "rpc", `ignoring a message of type ${m.type} from ${body.from}`);
        return;
    }
    const start = (): void => {
      const work = runServing(this.agent, () => this.reply(m, body, from));
      this.running.add(work);
      // NB: reply() never rejects: a failure is answered with ERROR (and a failed ERROR send is dropped)
      void work.finally(() => {
        this.running.delete(work);
        // NB: a value fetched ahead is for this call only (later toHere() calls fetch the owner's value then)
        if (users) dropAhead(users);
      });
    };
    if (m.type === MessageType.REMOTE_CALL) rrefs.remoteQueued(body.rrefId!);
    if (users && fetchAheadOn()) {
      // NB: inside the call's hooks; a hook that rejects the message's metadata fails the call, not this (./fetch_ahead.ts)
      const agent = this.agent;
      try {
        void runServing(agent, () =>
          hookAround(body.ext, body.from, async () => fetchAhead(users, hookScope(agent))),
        ).catch(() => undefined);
      } catch {
        // the call itself reports it
      }
    }
    if (m.type === MessageType.RREF_FETCH) start();
    else if (!waits) this.queue.push(start);
    else {
      // NB: queued once its RRef arguments settled, so that its target starts inside a turn too
      this.waitingForRRefs.add(start);
      void Promise.allSettled(waits).then(() => {
        this.waitingForRRefs.delete(start);
        this.queue.push(start);
      });
    }
  }

  private async reply(m: DecodedMessage, body: RequestPayload, to: RpcPipe): Promise<void> {
    const t0 = body.prof === 1 ? nowMs() : 0;
    try {
      let value: unknown = null;
      if (m.type === MessageType.REQUEST) value = await this.runTarget(body);
      else if (m.type === MessageType.RREF_FETCH) {
        // NB: a fetch ahead gets small tensors only, of a value whose REMOTE_CALL is here; else the caller
        // fetches as before (./fetch_ahead.ts)
        const ahead = body.ahead === "1";
        if (!ahead || this.agent.rrefs.valueKnown(body.rrefId!)) value = await this.agent.rrefs.valueOf(body.rrefId!);
        if (ahead && (!this.agent.rrefs.valueKnown(body.rrefId!) || !fitsAhead(value))) {
          await to.send(MessageType.ERROR, m.id, { error: DECLINED }).catch(() => undefined);
          return;
        }
      } else {
        // REMOTE_CALL: the owner keeps the value (or its error, for toHere); the reply, once the value
        // is made, is the confirmation (the caller's timeout covers making it, as PyTorch's does)
        const made = this.runTarget(body);
        this.agent.rrefs.own(body.rrefId!, made, body.fork!, body.from);
        await made.catch(() => undefined);
      }
      const out = hookOutgoing(this.agent, body.from, "response", value, body.ext);
      await to.send(MessageType.RESPONSE, m.id, {
        value: out.values,
        ...(out.ext ? { ext: out.ext } : {}),
        // NB: the caller's profiler asked for the span its target ran here
        ...(t0 ? { prof: [t0, nowMs()] } : {}),
      });
    } catch (e) {
      const err = e instanceof Error ? e : new Error(String(e));
      if (!(err instanceof ShippedCodeMissingError)) debug(2, "rpc", `call from ${body.from} failed: ${err.message}`);
      await to.send(MessageType.ERROR, m.id, { error: err }).catch(() => undefined);
    }
  }

  /** Materializes and runs a request's target (classes are constructed, promises awaited). */
  private runTarget(req: RequestPayload): Promise<unknown> {
    const a = this.agent;
    let fn: unknown;
    try {
      // NB: synchronous but for module targets: the target then computes in the turn that started it
      fn = materializeTargetNow(req.target, {
        sdk: a.sdk,
        registry: a.registry,
        cache: a.codeCache,
        peer: req.from,
        workerName: a.name,
      });
    } catch (e) {
      return Promise.reject(e);
    }
    if (fn instanceof Promise) return fn.then((f) => this.runWith(f, req));
    return this.runWith(fn, req);
  }

  private async runWith(fn: unknown, req: RequestPayload): Promise<unknown> {
    const args = hookIncoming(this.agent, req.from, "request", req.args, req.ext) as unknown[];
    try {
      return await hookAround(req.ext, req.from, async () =>
        isClass(fn) ? new fn(...args) : await (fn as (...a: unknown[]) => unknown)(...args),
      );
    } catch (e) {
      throw explainReferenceError(e);
    }
  }
}
