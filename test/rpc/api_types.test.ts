/**
 * The public call functions' types (checked by tsc in `npm run typecheck`, which covers test/):
 * a function target types the result (when the arguments fit its parameters), a class types
 * remote()'s RRef, and an explicit type argument still types a call by name.
 */
import { describe, expectTypeOf, it } from "vitest";
import { type Tensor, rpc } from "../../sdk/index.js";

describe("rpc call types", () => {
  it("infer the result from the function passed", () => {
    // NB: never called: only the types are under test (rpc is not initialized here)
    const check = () => {
      const t = undefined as unknown as Tensor;
      expectTypeOf(rpc.rpcSync("w", (x: Tensor) => x.sum().item(), [t])).toEqualTypeOf<Promise<number>>();
      expectTypeOf(rpc.rpcAsync("w", async (a: number, b: string) => `${a}${b}`, [1, "x"])).toEqualTypeOf<
        Promise<string>
      >();
      expectTypeOf(rpc.remote("w", (n: number) => [n], [1])).toEqualTypeOf<rpc.RRef<number[]>>();
      class Counter {
        constructor(readonly start: number) {}
      }
      expectTypeOf(rpc.remote("w", Counter, [3])).toEqualTypeOf<rpc.RRef<Counter>>();
      expectTypeOf(rpc.rpcSync<Tensor>("w", "registeredName", [1])).toEqualTypeOf<Promise<Tensor>>();
      // NB: arguments that do not fit the function fall back to the untyped form: the result is unknown,
      // so using it as the function's result type fails to compile further on
      expectTypeOf(rpc.rpcSync("w", (x: Tensor) => x.sum().item(), ["not a tensor"])).toEqualTypeOf<Promise<unknown>>();
    };
    expectTypeOf(check).toBeFunction();
  });
});
