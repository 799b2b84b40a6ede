/**
 * The free-name scan behind caller-side checks of shipped code: free names are
 * found, and bound names (params, destructuring, keys, members, labels) never reported.
 */
import { describe, expect, it } from "vitest";
import { scanFreeNames } from "../../sdk/rpc/shipping/index.js";

const cases: [string, string[], string[]?][] = [
  ["(x, y) => x + y", []],
  ["(x) => x * k", ["k"]],
  ["(x) => exports.helper(x) * 2", [], ["helper"]],
  ["async function f(a) { const b = await g(a); return b + h }", ["g", "h"]],
  [
    "class Net extends nn.Module { constructor(n) { super(); this.lin = new nn.Linear(n, n); } forward(x) { return this.lin.forward(x).relu(); } }",
    ["nn"],
  ],
  [
    "class A { x = foo; static y = 2; #p = 3; get z() { return this.#p } static { init() } [Symbol.iterator](q) { return q } async *gen(a) { yield a } }",
    ["foo", "init", "Symbol"],
  ],
  ["function f({a, b: c, ...d}, [e, f2] = [], g = dflt) { return a + c + d + e + f2 + g + zz }", ["dflt", "zz"]],
  ["(o) => ({ a: 1, b, [key]: 2, get c() { return 3 }, m(x) { return x }, ...rest })", ["b", "key", "rest"]],
  ["() => { outer: for (const x of xs) { if (x) continue outer; } }", ["xs"]],
  ["(s) => `a ${s + t} b ${ {q: 1}.q } c` + /re{x}/g.source", ["t"]],
  ["(x) => { try { return x } catch (err) { return err + y } }", ["y"]],
  ["(a) => a ? { u: v } : w", ["v", "w"]],
  ["(x) => { switch (x) { case K: { return 1 } default: return 2 } }", ["K"]],
  ["(x) => { let a = 1, b = [a], {c} = x; var d\n e(d); return a + b + c }", ["e"]],
  ["(x) => typeof window === 'undefined' ? Math.max(x, 0) : x", ["Math"]],
  ["(x) => { // comment k\n /* z */ return x.y?.z ?? 'k' }", []],
  ["function* g(n) { for (let i = 0; i < n; i++) yield i * m }", ["m"]],
  ["(x) => x.map(function inner(v) { return v + inner.length + q })", ["q"]],
  ["(x) => exports?.scale * x + exports.bias", [], ["scale", "bias"]],
];

describe("scanFreeNames", () => {
  for (const [src, free, exportsRefs] of cases)
    it(src.split("\n")[0].slice(0, 70), () => {
      const scan = scanFreeNames(`(${src}\n)`);
      expect([...scan.free].sort()).toEqual([...free].sort());
      if (exportsRefs) expect([...scan.exportsRefs].sort()).toEqual([...exportsRefs].sort());
    });

  it("scans a method source in its object-literal form", () => {
    const scan = scanFreeNames("({forward(x) { return super.forward(x) + this.k + j }\n})");
    expect([...scan.free]).toEqual(["j"]);
  });
});
