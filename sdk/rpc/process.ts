/**
 * What belongs to the process rather than to one agent:
 * - the SDK namespace shipped code runs against (sdk/index.ts hands it over);
 * - the names registered with rpc.register (every agent of the process serves them);
 * - the agent initRpc made, which the module-level API (rpc.rpcSync, ...) uses;
 * - which agent is current: inside a call that agent A serves, A is current
 *   (Node's AsyncLocalStorage carries it across awaits), so shipped code that
 *   calls rpc.rpcSync or makes an RRef acts as A even when several agents live
 *   in one process (the in-process test groups do); elsewhere it is initRpc's.
 */
import { AsyncLocalStorage } from "node:async_hooks";
import type { Agent } from "./agent.js";
import { installStateDump } from "./state_dump.js";

let sdk: Readonly<Record<string, unknown>> = {};
const registered = new Map<string, unknown>();
let initAgent: Agent | null = null;
const serving = new AsyncLocalStorage<Agent>();
const live = new Set<Agent>();

/** @internal sdk/index.ts hands over the SDK namespace shipped code runs against. */
export function setSdkNamespace(ns: Readonly<Record<string, unknown>>): void {
  sdk = ns;
}

export function sdkNamespace(): Readonly<Record<string, unknown>> {
  return sdk;
}

/** The names registered with rpc.register in this process, for every agent. */
export function registrations(): ReadonlyMap<string, unknown> {
  return registered;
}

/** rpc.register: every agent of the process, present and future, serves `value` as `name`. */
export function registerEverywhere(name: string, value: unknown): void {
  registered.set(name, value);
  for (const a of live) a.registry.register(name, value, { replace: true });
}

/** @internal agents announce themselves while they run (for registerEverywhere). */
export function agentStarted(a: Agent): void {
  live.add(a);
  installStateDump(() => live);
}

export function agentStopped(a: Agent): void {
  live.delete(a);
}

/** The agent serving the current call, else the one initRpc made, else null. */
export function currentAgent(): Agent | null {
  return serving.getStore() ?? initAgent;
}

/** The agent initRpc made (null before initRpc and after shutdown). */
export function initRpcAgent(): Agent | null {
  return initAgent;
}

export function setInitRpcAgent(a: Agent | null): void {
  initAgent = a;
}

/** Runs `fn` (a call `agent` serves) with `agent` current. */
export function runServing<T>(agent: Agent, fn: () => T): T {
  return serving.run(agent, fn);
}
