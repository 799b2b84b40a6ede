/**
 * Code shipping against the real SDK namespace: builtins indexed from `import * as tprpc`,
 * and a shipped class extending the real nn.Module that builds, counts and runs its layers.
 */
import { describe, expect, it } from "vitest";
import * as tprpc from "../../sdk/index.js";
import { BuiltinIndex, describeTarget, materializeTarget, Registry } from "../../sdk/rpc/shipping/index.js";

const sdk = tprpc as unknown as Record<string, unknown>;

describe("code shipping with the real SDK", () => {
  it("names SDK functions, classes and nested namespaces", () => {
    const index = BuiltinIndex.of(sdk);
    expect(index.nameOf(tprpc.add)).toBe("add");
    expect(index.nameOf(tprpc.nn.Linear)).toBe("nn.Linear");
    expect(index.nameOf(tprpc.nn)).toBe("nn");
    expect(index.resolve("nn.Linear")).toBe(tprpc.nn.Linear);
  });

  it("ships a class extending nn.Module; the instance is a real nn.Module on the callee", async () => {
    const Net = new Function(
      "nn",
      "tprpc",
      `return class Net extends nn.Module {
         constructor(n) { super(); this.lin = new nn.Linear(n, 3); this.registerModule("lin", this.lin); }
         forward(x) { return tprpc.relu(this.lin.forward(x)); }
       }`,
    )(tprpc.nn, tprpc);
    const registry = new Registry();
    const rec = describeTarget(Net, { builtins: BuiltinIndex.of(sdk), registry, scope: {} });
    const Shipped = (await materializeTarget(JSON.parse(JSON.stringify(rec)), { sdk, registry })) as new (
      n: number,
    ) => {
      forward(x: tprpc.Tensor): tprpc.Tensor;
      numParameters(): number;
    };
    tprpc.manualSeed(0);
    const net = new Shipped(2);
    expect(net).toBeInstanceOf(tprpc.nn.Module);
    expect(net.numParameters()).toBe(2 * 3 + 3);
    expect(net.forward(tprpc.ones([4, 2])).shape).toEqual([4, 3]);
  });
});
