/**
 * Code shipping, caller to callee in one process: describeTarget on the caller,
 * a JSON round trip standing in for the wire, materializeTarget on the callee with
 * its own (fake) SDK namespace, registry and cache. Notebook cells are simulated as
 * tslab compiles them: a top-level name from an earlier cell reads `exports.NAME`.
 */
import { createHash } from "node:crypto";
import fs from "node:fs";
import os from "node:os";
import path from "node:path";
import { describe, expect, it } from "vitest";
import { ProtocolError } from "../../sdk/errors/index.js";
import {
  BuiltinIndex,
  describeTarget,
  explainReferenceError,
  materializeTarget,
  Registry,
  ShippedCodeCache,
  ShippedCodeMissingError,
  shippedScopeOf,
  UnknownTargetError,
  UnresolvedNameError,
  UnshippableValueError,
  type CallTarget,
  type TargetRecord,
} from "../../sdk/rpc/shipping/index.js";

/** A stand-in for the SDK namespace; each worker gets its own copy (its own class objects). */
function fakeSdk() {
  class Module {
    training = true;
    forward(x: number): number {
      return x;
    }
    call(x: number): number {
      return this.forward(x);
    }
  }
  class Linear extends Module {}
  const nn = { Module, Linear, functional: { relu: (x: number) => Math.max(0, x) } };
  return { add: (a: number, b: number) => a + b, zeros: (n: number) => new Array<number>(n).fill(0), nn };
}

/** A caller ("master") and a callee ("worker1"), each with its own SDK, registry and cache. */
function pair(scope: object = {}) {
  const caller = { sdk: fakeSdk(), registry: new Registry(), cache: new ShippedCodeCache() };
  const callee = { sdk: fakeSdk(), registry: new Registry(), cache: new ShippedCodeCache() };
  const describeIt = (target: CallTarget, unresolved: "throw" | "defer" = "throw") =>
    describeTarget(target, { builtins: BuiltinIndex.of(caller.sdk), registry: caller.registry, scope, unresolved });
  /** The wire: structured payload as JSON. */
  const wire = (r: TargetRecord): unknown => JSON.parse(JSON.stringify(r));
  const receive = (r: unknown) =>
    materializeTarget(r, {
      sdk: callee.sdk,
      registry: callee.registry,
      cache: callee.cache,
      peer: "master",
      workerName: "worker1",
    });
  const ship = async <T>(target: CallTarget): Promise<T> =>
    (await receive(wire(caller.cache.outgoing("worker1", describeIt(target))))) as T;
  return { caller, callee, describeIt, wire, receive, ship };
}

/** Runs `body` as a tslab cell does: top-level names of earlier cells are `exports.NAME`. */
function cell(scope: object, body: string): unknown {
  return new Function("exports", body)(scope);
}

describe("code shipping", () => {
  it("ships a lambda", async () => {
    const { ship, describeIt } = pair();
    const r = describeIt((x: number, y: number) => x + y);
    expect(r).toMatchObject({ kind: "source", deps: {} });
    const f = await ship<(x: number, y: number) => number>((x: number, y: number) => x + y);
    expect(f(2, 3)).toBe(5);
  });

  it("ships an async function, returned as is and awaited by the caller of it", async () => {
    const { ship } = pair();
    async function slowDouble(x: number) {
      await new Promise((r) => setTimeout(r, 5));
      return x * 2;
    }
    const f = await ship<typeof slowDouble>(slowDouble);
    expect(f.constructor.name).toBe("AsyncFunction");
    await expect(f(21)).resolves.toBe(42);
  });

  it("ships exports.helper from an earlier cell, its own dependencies, and plain data by value", async () => {
    const scope: Record<string, unknown> = {};
    scope.offset = 10; // cell 1: const offset = 10
    scope.table = { scale: [1, 2, 3], name: "t" }; // cell 1: const table = {...}
    // cell 2: function helper(x) { return x + offset }   (same-cell names stay bare in tslab)
    scope.helper = cell(scope, "return function helper(x) { return x + exports.offset + exports.table.scale[2] }");
    const f = cell(scope, "return (x) => exports.helper(x) * 2") as CallTarget;
    const { ship, describeIt } = pair(scope);
    const r = describeIt(f);
    expect(r.kind === "source" && "deps" in r && Object.keys(r.deps)).toEqual(["helper", "offset", "table"]);
    expect(r).toMatchObject({ deps: { offset: { kind: "value", value: 10 }, table: { kind: "value" } } });
    const g = await ship<(x: number) => number>(f);
    expect(g(1)).toBe((1 + 10 + 3) * 2);
    scope.table = { scale: [0, 0, 0] }; // the callee got a snapshot
    expect(g(1)).toBe((1 + 10 + 3) * 2);
  });

  it("ships bare same-cell names found on the scope, and mutually recursive helpers", async () => {
    const scope: Record<string, unknown> = {};
    cell(
      scope,
      `function isEven(n) { return n === 0 ? true : isOdd(n - 1) }
       function isOdd(n) { return n === 0 ? false : isEven(n - 1) }
       exports.isEven = isEven; exports.isOdd = isOdd;`,
    );
    const f = cell(scope, "return (n) => exports.isEven(n)") as CallTarget;
    const { ship } = pair(scope);
    const g = await ship<(n: number) => boolean>(f);
    expect([g(10), g(7)]).toEqual([true, false]);
  });

  it("ships code on from the callee, with the helpers it came with (a nested call forwarding it)", async () => {
    const scope: Record<string, unknown> = {};
    cell(scope, "function twice(n) { return 2 * n }\nexports.twice = twice;");
    const f = cell(scope, "return (n) => twice(n) + 1") as CallTarget;
    const first = pair(scope);
    const g = await first.ship<(n: number) => number>(f);
    expect(g(3)).toBe(7);
    // on the callee `twice` is bound only inside the compiled code: forwarding needs its compile scope
    const second = pair(shippedScopeOf(g));
    expect(shippedScopeOf(g)).toBeDefined();
    const h = await second.ship<(n: number) => number>(g as CallTarget);
    expect(h(5)).toBe(11);
    expect(() => pair({}).describeIt(g as CallTarget)).toThrow(UnresolvedNameError);
  });

  it("ships a class extending the callee's own nn.Module (instanceof holds there), with super calls", async () => {
    const { ship, callee, caller } = pair();
    const Net = new Function(
      "nn",
      `return class Net extends nn.Module {
         constructor(k) { super(); this.k = k; }
         forward(x) { return super.forward(x) * this.k + nn.functional.relu(-x); }
       }`,
    )(caller.sdk.nn) as CallTarget;
    const Shipped = await ship<new (k: number) => { call(x: number): number; training: boolean }>(Net);
    const net = new Shipped(3);
    expect(net).toBeInstanceOf(callee.sdk.nn.Module);
    expect(net).not.toBeInstanceOf(caller.sdk.nn.Module);
    expect(net.training).toBe(true);
    expect(net.call(2)).toBe(6);
    expect(net.call(-2)).toBe(-6 + 2);
  });

  it("ships a class dependency before the class that extends it", async () => {
    const scope2: Record<string, unknown> = {};
    scope2.Base = cell(scope2, "return class Base { forward(x) { return x + 1 } }");
    scope2.Derived = cell(
      scope2,
      "return class Derived extends exports.Base { forward(x) { return super.forward(x) * 2 } }",
    );
    const f = cell(scope2, "return (x) => new exports.Derived().forward(x)") as CallTarget;
    const g = await pair(scope2).ship<(x: number) => number>(f);
    expect(g(4)).toBe(10);
  });

  it("ships a method taken off an object", async () => {
    const obj = {
      k: 5,
      scaled(x: number) {
        return x * 7;
      },
    };
    const f = await pair().ship<(x: number) => number>(obj.scaled);
    expect(f(2)).toBe(14);
  });

  it("fails on the caller, naming a captured closure variable and saying how to pass it", () => {
    const { describeIt } = pair();
    const k = 3;
    const f = (x: number) => x * k;
    let err: unknown;
    try {
      describeIt(f);
    } catch (e) {
      err = e;
    }
    expect(err).toBeInstanceOf(UnresolvedNameError);
    expect(err).toMatchObject({ identifier: "k", side: "caller" });
    expect((err as Error).message).toMatch(
      /"k".*pass it as an argument, or register it with rpc\.register\("k", value\)/,
    );
  });

  it("with unresolved: 'defer', the callee names the identifier before running anything", async () => {
    const { describeIt, wire, receive } = pair();
    const k = 3;
    const r = describeIt((x: number) => x * k, "defer");
    await expect(receive(wire(r))).rejects.toMatchObject({
      name: "UnresolvedNameError",
      identifier: "k",
      side: "callee",
    });
  });

  it("a name registered on every worker resolves in shipped code", async () => {
    const { ship, caller, callee } = pair();
    caller.registry.register("scale", 4);
    callee.registry.register("scale", 5);
    const f = new Function("return (x) => x * scale")() as CallTarget; // `scale` would be a free name
    expect((await ship<(x: number) => number>(f))(2)).toBe(10);
  });

  it("rewrites a run-time ReferenceError into an UnresolvedNameError naming the identifier", async () => {
    // A name built at run time (inside eval) is not reported by the scan; it fails when called.
    const f = await pair().ship<(x?: number) => number>(
      new Function('return (x) => eval("hid" + "den")')() as CallTarget,
    );
    let err: unknown;
    try {
      f();
    } catch (e) {
      err = explainReferenceError(e, "f");
    }
    expect(err).toBeInstanceOf(UnresolvedNameError);
    expect(err).toMatchObject({ identifier: "hidden" });
    expect((err as Error).message).toMatch(/pass it as an argument/);
  });

  it("refuses a dependency that is neither code nor plain data, naming it", () => {
    const scope = { w: new Map([[1, 2]]), t: { data: new Float32Array(2) } };
    const { describeIt } = pair(scope);
    expect(() => describeIt(cell(scope, "return (x) => exports.w.get(x)") as CallTarget)).toThrow(
      UnshippableValueError,
    );
    expect(() => describeIt(cell(scope, "return (x) => exports.w.get(x)") as CallTarget)).toThrow(
      /"w", which is a Map.*pass it as an argument/,
    );
    expect(() => describeIt(cell(scope, "return (x) => exports.t") as CallTarget)).toThrow(
      /"t", which is a Float32Array/,
    );
    expect(() => describeIt(cell(scope, "return (x) => exports.missing") as CallTarget)).toThrow(/"missing"/);
    // NB: a bound function, like a native one that is not a standard built-in, has no source and no path
    expect(() => describeIt(((a: number) => a).bind(null) as CallTarget)).toThrow(/native or bound/);
  });

  it("sends JavaScript's standard built-ins by their global path, and refuses other paths off the wire", async () => {
    const { describeIt, ship, receive } = pair();
    expect(describeIt(Math.min as CallTarget)).toEqual({ kind: "global", name: "Math.min" });
    expect(describeIt(JSON.stringify as CallTarget)).toEqual({ kind: "global", name: "JSON.stringify" });
    expect(describeIt(parseInt as CallTarget)).toEqual({ kind: "global", name: "parseInt" });
    expect((await ship<(...a: number[]) => number>(Math.min as CallTarget))(3, 1, 2)).toBe(1);
    expect((await ship<(s: string) => number>(parseInt as CallTarget))("42")).toBe(42);
    await expect(receive({ kind: "global", name: "process.exit" })).rejects.toThrow(UnknownTargetError);
    await expect(receive({ kind: "global", name: "Math" })).rejects.toThrow(/not a standard JavaScript built-in/);
  });

  it("calls registered functions by name, and says what to do for an unknown name", async () => {
    const { describeIt, wire, receive, caller, callee } = pair();
    const myAdd = (a: number, b: number) => a + b;
    caller.registry.register("myAdd", myAdd);
    const calleeAdd = (a: number, b: number) => a + b + 1000;
    callee.registry.register("myAdd", calleeAdd);
    expect(describeIt(myAdd)).toEqual({ kind: "registered", name: "myAdd" });
    expect(await receive(wire(describeIt(myAdd)))).toBe(calleeAdd);
    expect(await receive(wire(describeIt("myAdd")))).toBe(calleeAdd);
    const err = await receive({ kind: "registered", name: "nope" }).catch((e: unknown) => e);
    expect(err).toBeInstanceOf(UnknownTargetError);
    expect((err as Error).message).toMatch(
      /Nothing is registered as "nope" on worker "worker1".*rpc\.register\("nope"/,
    );
  });

  it("keeps registered names unique both ways", () => {
    const reg = new Registry();
    const f = () => 1;
    const g = () => 2;
    reg.register("f", f);
    reg.register("f", f); // the same pair again is fine
    expect(() => reg.register("f", g)).toThrow(/already registered.*replace: true/);
    expect(() => reg.register("f2", f)).toThrow(/already registered as "f"/);
    reg.register("f", g, { replace: true });
    expect([reg.lookup("f"), reg.nameOf(g), reg.nameOf(f)]).toEqual([g, "f", undefined]);
    expect(reg.unregister("f")).toBe(true);
    expect(reg.has("f")).toBe(false);
    expect(() => reg.lookup("f")).toThrow(/rpc\.register\("f", fnOrClass\)/);
  });

  it("sends SDK builtins by path, nested namespaces included, and resolves them on the callee's SDK", async () => {
    const { describeIt, wire, receive, caller, callee } = pair();
    expect(describeIt(caller.sdk.add)).toEqual({ kind: "builtin", name: "add" });
    expect(describeIt(caller.sdk.nn.Linear)).toEqual({ kind: "builtin", name: "nn.Linear" });
    expect(describeIt(caller.sdk.nn.functional.relu)).toEqual({ kind: "builtin", name: "nn.functional.relu" });
    expect(await receive(wire(describeIt(caller.sdk.nn.Linear)))).toBe(callee.sdk.nn.Linear);
    expect(await receive(wire(describeIt("zeros")))).toBe(callee.sdk.zeros);
    await expect(receive({ kind: "builtin", name: "nn.Nope" })).rejects.toThrow(/"nn.Nope" does not exist/);
    await expect(receive({ kind: "builtin", name: "nn.__proto__" })).rejects.toThrow(UnknownTargetError);
  });

  it("an SDK value used from an earlier cell goes by name, not by value", async () => {
    const scope: Record<string, unknown> = {};
    const { ship, caller, callee } = pair(scope);
    scope.Lin = caller.sdk.nn.Linear; // cell 1: const Lin = nn.Linear
    const f = cell(scope, "return () => new exports.Lin()") as CallTarget;
    expect((await ship<() => object>(f))()).toBeInstanceOf(callee.sdk.nn.Linear);
  });

  it("sends the source once per peer and compiles it once; a peer that lost it gets it again", async () => {
    const { describeIt, wire, receive, caller, callee } = pair();
    const f = (x: number) => x + 1;
    const first = caller.cache.outgoing("worker1", describeIt(f));
    const second = caller.cache.outgoing("worker1", describeIt(f));
    expect("source" in first).toBe(true);
    expect(second).toEqual({ kind: "source", hash: (first as { hash: string }).hash });
    expect("source" in caller.cache.outgoing("worker2", describeIt(f))).toBe(true); // another peer
    const a = await receive(wire(first));
    for (let i = 0; i < 10; i++) expect(await receive(wire(second))).toBe(a);
    expect(callee.cache.compilations).toBe(1);

    callee.cache.forgetPeer("master"); // the callee restarted
    const err = await receive(wire(second)).catch((e: unknown) => e);
    expect(err).toBeInstanceOf(ShippedCodeMissingError);
    caller.cache.forget("worker1", (err as ShippedCodeMissingError).hash);
    expect(await receive(wire(caller.cache.outgoing("worker1", describeIt(f))))).toBeTypeOf("function");
    expect(callee.cache.compilations).toBe(2);
  });

  it("hashes the canonical record: stable, order-free, and sensitive to every dependency", () => {
    const scope: Record<string, unknown> = { a: 1, b: 2 };
    const { describeIt } = pair(scope);
    const src = "return (x) => exports.a + exports.b + x";
    const h1 = (describeIt(cell(scope, src) as CallTarget) as { hash: string }).hash;
    const h2 = (describeIt(cell(scope, src) as CallTarget) as { hash: string }).hash; // another function object
    const h3 = (describeIt(cell(scope, "return (x) => exports.b + exports.a + x") as CallTarget) as { hash: string })
      .hash;
    scope.b = 3;
    const h4 = (describeIt(cell(scope, src) as CallTarget) as { hash: string }).hash;
    expect(h1).toBe(h2);
    expect(h3).not.toBe(h1);
    expect(h4).not.toBe(h1);
    const canonical =
      '{"deps":{"a":{"kind":"value","value":1},"b":{"kind":"value","value":2}},"source":"(x) => exports.a + exports.b + x"}';
    expect(h1).toBe(createHash("sha256").update(canonical).digest("hex"));
  });

  it("imports module references and names a missing export", async () => {
    const dir = fs.mkdtempSync(path.join(os.tmpdir(), "tprpc-ship-"));
    const file = path.join(dir, "mod.mjs");
    fs.writeFileSync(file, "export const triple = (x) => 3 * x; export default (x) => -x;\n");
    const { describeIt, wire, receive } = pair();
    const r = describeIt(`${file}#triple`);
    expect(r).toEqual({ kind: "module", ref: `${file}#triple` });
    expect(((await receive(wire(r))) as (x: number) => number)(2)).toBe(6);
    expect(((await receive(wire(describeIt(file)))) as (x: number) => number)(2)).toBe(-2);
    await expect(receive({ kind: "module", ref: `${file}#nope` })).rejects.toThrow(/no export "nope".*exports: triple/);
    await expect(receive({ kind: "module", ref: `${dir}/absent.mjs#x` })).rejects.toThrow(/Cannot load module/);
    fs.rmSync(dir, { recursive: true });
  });

  it("treats records from the wire as hostile", async () => {
    const { describeIt, receive } = pair({ v: 1 });
    const good = describeIt(cell({ v: 1 }, "return () => exports.v") as CallTarget) as {
      hash: string;
      source: string;
      deps: object;
    };
    await expect(receive(null)).rejects.toThrow(ProtocolError);
    await expect(receive({ kind: "eval", source: "1" })).rejects.toThrow(ProtocolError);
    await expect(receive({ ...good, source: "() => process.exit(1)" })).rejects.toThrow(/does not match its hash/);
    await expect(
      receive({ ...good, deps: JSON.parse('{"__proto__": {"kind": "value", "value": 1}}') }),
    ).rejects.toThrow(ProtocolError);
    await expect(receive({ ...good, deps: { "a; process.exit(1)": { kind: "value", value: 1 } } })).rejects.toThrow(
      /not an identifier/,
    );
    await expect(receive({ kind: "source", hash: "zz" })).rejects.toThrow(/64 hex digits/);
  });
});
