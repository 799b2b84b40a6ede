/**
 * Free-name analysis with scopes (sdk/rpc/shipping/free_names.ts): each case gives the exact set
 * of names a function source captures, so a scan that ignores scopes (a name declared anywhere
 * counts as declared everywhere) or one that treats keys, labels, `this` or `arguments` as names
 * fails. Then the same analysis through analyzeSource (method and getter sources, the shapes
 * accepted off the wire) and describeTarget (which names become shipped dependencies).
 */
import { describe, expect, it } from "vitest";
import { BuiltinIndex, describeTarget, Registry, scanFreeNames } from "../../sdk/rpc/shipping/index.js";
import { analyzeSource, NotShippableSourceError } from "../../sdk/rpc/shipping/source.js";

/** [source, free names, exports names] */
type Case = [string, string[], string[]?];

const groups: Record<string, Case[]> = {
  shadowing: [
    ["(scale) => scale * 2", []],
    ["(x) => { let Math = { max: 1 }; return Math.max + x }", []],
    ["(x) => { const helper = 1; return helper + other }", ["other"]],
    ["function f(k) { return (k2 = k) => k2 + kk }", ["kk"]],
    ["(exports) => exports.scale", [], []],
  ],
  destructuring: [
    ["({ a = d1, b: [c = d2] = d3 }, ...[e = d4]) => a + c + e", ["d1", "d2", "d3", "d4"]],
    ["(o) => { const { p = d5, q: { r } = d6 } = o, [s = d7, ...t] = o; return p + r + s + t }", ["d5", "d6", "d7"]],
    ["(a, b = a, { c } = b) => a + b + c", []],
    // a parameter default does not see the body's own declarations
    ["function f(a = v) { var v = 1; return a + v }", ["v"]],
    ["(o) => { let x, y; ({ x, y = dy } = o); [x, y] = [y, x]; return x + y }", ["dy"]],
    ["(o) => { ({ w } = o); [z] = o }", ["w", "z"]],
  ],
  classes: [
    ["class A { static make() { return new A() } m() { return A.x + this.y } }", []],
    ["class B extends Base { constructor() { super(); this.k = k0 } }", ["Base", "k0"]],
    ["class C extends mixin(Base, C2) {}", ["mixin", "Base", "C2"]],
    [
      "class C { a = outerA; static b = outerB; #c = outerC; [key] = 1; static { boot(C) } m() { return this.#c + outerM } }",
      ["outerA", "outerB", "outerC", "key", "boot", "outerM"],
    ],
    ["class D { #p; static has(o) { return #p in o } get v() { return this.#p } set v(x) { this.#p = x } }", []],
    ["(x) => [class K { m() { return K } }, K]", ["K"]],
    ["(x) => { class L {} return new L(x) }", []],
  ],
  closures: [
    ["(x) => { const y = 1; return () => (z) => x + y + z + w }", ["w"]],
    ["function outer() { function inner() { return captured + local } const local = 1; return inner }", ["captured"]],
    ["(n) => Array.from({ length: n }, (_, i) => i * step)", ["Array", "step"]],
    ["(xs) => xs.map(function named(v) { return v ? named(v - 1) : base })", ["base"]],
  ],
  "direct eval": [["(x) => { const local = 1; return eval('local') + x + other }", ["eval", "other"]]],
  "this and arguments": [
    ["function f() { return this.a + arguments[0] + arguments.length }", []],
    ["() => this.x + arguments[0]", []],
    ["class E { m() { return this.v + super.toString() + (() => this.w)() } }", []],
    ["function F() { if (!new.target) throw err; }", ["err"]],
  ],
  "labels, keys and members": [
    ["() => { loop: for (;;) { if (a) break loop; continue loop } }", ["a"]],
    ["() => ({ loop: 1, [k]: 2, m: o.loop, get g() { return 1 }, Math: 3 }).Math", ["k", "o"]],
    ["(o) => o.foo.bar?.baz + o?.['qux'] + o[idx]", ["idx"]],
    ["() => { lbl: { break lbl } return { lbl } }", ["lbl"]],
  ],
  typeof: [
    ["() => typeof undeclared === 'undefined'", []],
    ["() => typeof maybe === 'function' ? maybe() : 0", ["maybe"]],
    ["() => typeof x.y", ["x"]],
    ["() => typeof exports.a", [], ["a"]],
  ],
  catch: [
    ["() => { try { f() } catch (e) { return e + g } }", ["f", "g"]],
    ["() => { try { f() } catch (e) { } return e }", ["f", "e"]],
    ["() => { try {} catch ({ message = dm }) { return message } }", ["dm"]],
  ],
  "for-of and for-in": [
    ["(xs) => { for (const x of xs) use(x); for (let k in obj) use(k); return x + k }", ["use", "obj", "x", "k"]],
    ["(xs) => { for (var v of xs); return v }", []],
    ["(xs) => { for ([a, b] of xs); for (c in xs); }", ["a", "b", "c"]],
    ["(n) => { for (let i = 0; i < n; i++) {} return i }", ["i"]],
  ],
  "function declarations": [
    ["() => { return helper(); function helper() { return h2() } }", ["h2"]],
    ["function f() { return g(); function g() { return f } }", []],
    // sloppy-mode code may call a block's function declaration from outside the block
    ["() => { { function blockFn() {} } return blockFn() }", []],
  ],
  "block scoping": [
    ["(x) => { if (x) { let t = 1; const u = 2; class V {} } return t + u + V }", ["t", "u", "V"]],
    ["(x) => { let t = 1; { let t = 2; t++ } return t }", []],
    ["(x) => { switch (x) { case 1: let s = 1; } return s }", ["s"]],
    ["(x) => { { var hoisted = 1 } return hoisted }", []],
  ],
  exports: [
    ["(x) => exports['scale'] * x + exports.bias + exports?.gain", [], ["scale", "bias", "gain"]],
    ["(x) => Object.keys(exports).length + exports[x]", ["Object"], []],
  ],
};

describe("scanFreeNames with scopes", () => {
  for (const [group, cases] of Object.entries(groups))
    describe(group, () => {
      for (const [src, free, exportsRefs] of cases)
        it(src.slice(0, 90), () => {
          const scan = scanFreeNames(`(${src}\n)`);
          expect([...scan.free].sort()).toEqual([...free].sort());
          expect([...scan.exportsRefs].sort()).toEqual([...(exportsRefs ?? [])].sort());
        });
    });

  it("a script's own top-level declarations are bound", () => {
    expect([...scanFreeNames("let a = 1; function g() { return a + b + g }").free]).toEqual(["b"]);
  });

  it("throws a SyntaxError on text that is not JavaScript", () => {
    expect(() => scanFreeNames("(x) => {")).toThrow(SyntaxError);
  });
});

describe("analyzeSource", () => {
  const methods = {
    forward(x: number) {
      return x;
    },
    async *gen(a: number) {
      yield a;
    },
    get size() {
      return 1;
    },
    [Symbol.iterator]() {
      return [][Symbol.iterator]();
    },
  };

  it("takes methods, generators, getters and computed-key methods off an object literal", () => {
    const d = Object.getOwnPropertyDescriptors(methods);
    for (const fn of [d.forward.value, d.gen.value, d.size.get, d[Symbol.iterator as unknown as string].value]) {
      const a = analyzeSource(Function.prototype.toString.call(fn));
      expect(a.expr.startsWith("(function (o)")).toBe(true);
    }
    const a = analyzeSource("forward(x) { return super.forward(x) + this.k + helper(x) }");
    expect([...a.scan.free].sort()).toEqual(["Reflect", "helper"]); // Reflect: the wrapper's own
  });

  it("accepts one function, class or method expression and nothing around it", () => {
    for (const source of ["x => x), (globalThis.pwned = 1", "1", "a() {}, b: evil()", "x => x; evil()", "f(x) {} + 1"])
      expect(() => analyzeSource(source), source).toThrow(NotShippableSourceError);
    for (const source of ["async (x) => x", "function* g() {}", "class {}", "async m() {}", "set v(x) {}"])
      expect(analyzeSource(source).source).toBe(source);
  });
});

describe("describeTarget ships exactly the captured names", () => {
  const helper = (x: number) => x + 1;
  const scope = { k: 3, helper, exports: {} };
  const depsOf = (body: string) =>
    Object.keys(
      (
        describeTarget(new Function(body)() as Function, {
          builtins: BuiltinIndex.of({}),
          registry: new Registry(),
          scope,
        }) as { deps: object }
      ).deps,
    );

  it("a shadowed top-level name is not a dependency; one used outside the shadowing block is", () => {
    expect(depsOf("return (k) => k + 1")).toEqual([]);
    expect(depsOf("return (x) => { { let k = x } return helper(k) }")).toEqual(["helper", "k"]);
    expect(depsOf("return (x, helper = (y) => y) => helper(x)")).toEqual([]);
  });

  it("a parameter default and a method taken off an object capture their names", () => {
    expect(depsOf("return (x, f = helper) => f(x) * k")).toEqual(["helper", "k"]);
    expect(depsOf("return ({ m(x) { return helper(x) + k } }).m")).toEqual(["helper", "k"]);
    expect(depsOf("return Object.getOwnPropertyDescriptor({ get g() { return k } }, 'g').get")).toEqual(["k"]);
  });
});
