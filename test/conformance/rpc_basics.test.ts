/**
 * RPC basics, ported from PyTorch's rpc_test.py: test_self_add (by name), test_add, test_scalar_add,
 * test_async_add, test_multi_rpc, test_py_built_in, test_py_user_defined, test_py_class_constructor,
 * test_py_class_instance_method, test_py_class_method, test_py_class_static_method,
 * test_py_multi_async_call, test_py_no_return_result, test_py_tensors, test_py_tensors_multi_async_call,
 * test_py_tensors_in_container, test_nested_rpc, test_stress_light_rpc, test_stress_heavy_rpc,
 * test_expected_src and test_non_cont_tensors; plus payload round trips PyTorch covers through its
 * pickler (every dtype, nested containers, null, strings, views, a 4 MiB tensor). Keyword arguments
 * become one object argument; functions travel by source, helpers they use through the shipping scope.
 */
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { DTYPES, type Tensor, add, arange, ones, rpc, tensor } from "../../sdk/index.js";
import { type Group, startGroup, stopGroup, within } from "./group.js";

// NB: shipped functions run on the callee against the SDK namespace, named `tprpc` there.
declare const tprpc: typeof import("../../sdk/index.js");

/** PyTorch's MyClass. */
class MyClass {
  a: number;
  constructor(a: number) {
    this.a = a;
  }
  myInstanceMethod(b: number): number {
    return this.a + b;
  }
  static myClassMethod(d: number, e: number): number {
    return d + e;
  }
  static myStaticMethod(f: number): boolean {
    return f > 10;
  }
}

function myFunction({ a, b, c }: { a: number; b: number; c: number }): number {
  return a + b + c;
}

function myTensorFunction(a: Tensor, b: Tensor): Tensor {
  return a.add(b);
}

function myComplexTensorFunction(
  listInput: Tensor[],
  tensorClassInput: { tensors: unknown[] },
  dictInput: Record<string, Tensor>,
): unknown[] {
  let res = listInput[0]!;
  for (const t of listInput) res = res.add(t);
  for (const v of Object.values(dictInput)) res = res.add(v);
  const complex = tensorClassInput.tensors;
  return [res, complex[0], complex[1], complex[2]];
}

/** PyTorch's build_complex_tensors without the dict keyed by a tensor (tested on its own below). */
function buildComplexTensors(): unknown[] {
  const a = ones([3, 3]);
  const b = [a, a];
  const c = [b, b];
  const d = [a, b];
  return [a, b, c, d];
}

/** Tensors as {dtype, shape, values}, the rest as is: what equality of two payloads means here. */
function plain(v: unknown): unknown {
  if (v !== null && typeof v === "object" && "tolist" in v && "dtype" in v) {
    const t = v as Tensor;
    return { dtype: t.dtype, shape: t.shape, values: t.tolist() };
  }
  if (Array.isArray(v)) return v.map(plain);
  if (v !== null && typeof v === "object") return Object.fromEntries(Object.entries(v).map(([k, x]) => [k, plain(x)]));
  return v;
}

const twos = (n: number) => Array.from({ length: n }, () => Array.from({ length: n }, () => 2));

describe("rpc basics", () => {
  let cluster: Group | undefined;
  beforeAll(async () => {
    cluster = await startGroup();
    // helpers shipped functions name travel by source from here (a notebook's scope, in a test file)
    rpc.setShippingScope({ MyClass });
  }, 40_000);
  afterAll(async () => {
    rpc.setShippingScope(null);
    await stopGroup(cluster);
  }, 20_000);

  it("calls itself by name (test_self_add)", async () => {
    const [fut, ret] = await Promise.all([
      rpc.rpcAsync<Tensor>("master", add, [ones([2, 2]), 1]),
      rpc.rpcSync<Tensor>("master", add, [ones([2, 2]), 1]),
    ]);
    expect(fut.tolist()).toEqual(twos(2));
    expect(ret.tolist()).toEqual(twos(2));
  });

  it("runs a builtin with tensors, from every rank to the next (test_add)", async () => {
    const ret = await rpc.rpcSync<Tensor>("worker1", add, [ones([1, 1]), ones([1, 1])]);
    expect(ret.tolist()).toEqual(twos(1));
    const body = (dst: string, n: number) =>
      tprpc.rpc
        .rpcSync<Tensor>(dst, tprpc.add, [tprpc.ones([n, n]), tprpc.ones([n, n])])
        .then((t) => [t.shape, t.tolist()]);
    const names = ["master", "worker1", "worker2", "worker3"];
    for (const r of [1, 2, 3]) {
      const n = r + 1;
      const got = await rpc.rpcSync(names[r]!, body, [names[(r + 1) % 4]!, n]);
      expect(got).toEqual([[n, n], twos(n)]);
    }
  });

  it("adds a scalar to a tensor (test_scalar_add)", async () => {
    const n = 2;
    const ret = await rpc.rpcSync<Tensor>("worker2", add, [ones([n, n]), n]);
    expect(ret.tolist()).toEqual([
      [3, 3],
      [3, 3],
    ]);
  });

  it("resolves rpcAsync's future to the result (test_async_add)", async () => {
    const fut = rpc.rpcAsync<Tensor>("worker1", add, [ones([3, 3]), ones([3, 3])]);
    expect((await fut).tolist()).toEqual(twos(3));
  });

  it("makes 20 calls in a row (test_multi_rpc)", async () => {
    for (let i = 0; i < 20; i++) {
      const ret = await rpc.rpcSync<Tensor>("worker1", add, [ones([2, 2]), ones([2, 2])]);
      expect(ret.tolist()).toEqual(twos(2));
    }
  });

  it("calls a language built-in, Math.min (test_py_built_in)", async () => {
    const n = 1;
    expect(await rpc.rpcSync("worker1", Math.min, [n, n + 1, n + 2])).toBe(Math.min(n, n + 1, n + 2));
  });

  it("calls a user function with named arguments, as one object (test_py_user_defined)", async () => {
    const n = 1;
    const args = { a: n, b: n + 1, c: n + 2 };
    expect(await rpc.rpcSync("worker1", myFunction, [args])).toBe(myFunction(args));
  });

  it("constructs a class on the callee and returns the instance's data (test_py_class_constructor)", async () => {
    const ret = await rpc.rpcSync<{ a: number }>("worker1", MyClass, [2]);
    expect(ret.a).toBe(2);
  });

  it("calls an instance method, a static method using the class and a static predicate", async () => {
    const n = 1;
    // test_py_class_instance_method: JS methods do not travel bound to their instance; a closure over a new one does
    expect(await rpc.rpcSync("worker1", (b: number) => new MyClass(2).myInstanceMethod(b), [n])).toBe(
      new MyClass(2).myInstanceMethod(n),
    );
    // test_py_class_method, test_py_class_static_method
    expect(await rpc.rpcSync("worker1", MyClass.myClassMethod, [n, n + 1])).toBe(MyClass.myClassMethod(n, n + 1));
    expect(await rpc.rpcSync("worker1", MyClass.myStaticMethod, [n + 10])).toBe(MyClass.myStaticMethod(n + 10));
    expect(await rpc.rpcSync("worker1", MyClass.myStaticMethod, [n])).toBe(false);
  });

  it("keeps two futures to one WorkerInfo in flight (test_py_multi_async_call)", async () => {
    const n = 1;
    const dst = rpc.getWorkerInfo("worker1") as unknown as string;
    const [a, b] = await Promise.all([
      rpc.rpcAsync(dst, MyClass.myStaticMethod, [n + 10]),
      rpc.rpcAsync(dst, Math.min, [n, n + 1, n + 2]),
    ]);
    expect(a).toBe(true);
    expect(b).toBe(1);
  });

  it("returns what a function without a return statement returns (test_py_no_return_result)", async () => {
    const noResult = (): void => {};
    expect(await rpc.rpcSync("worker1", noResult)).toBe(noResult());
  });

  it("passes and returns tensors (test_py_tensors)", async () => {
    for (const n of [1, 2, 3]) {
      const ret = await rpc.rpcSync<Tensor>("worker2", myTensorFunction, [ones([n, n]), ones([n, n])]);
      expect(ret.tolist()).toEqual(myTensorFunction(ones([n, n]), ones([n, n])).tolist());
    }
  });

  it("keeps 100 futures with tensors of 0x0 to 99x99 in flight (test_py_tensors_multi_async_call)", async () => {
    const futs = Array.from({ length: 100 }, (_, i) =>
      rpc.rpcAsync<Tensor>("worker1", myTensorFunction, [ones([i, i]), ones([i, i])]),
    );
    const vals = await within(Promise.all(futs), 30_000, "100 futures");
    vals.forEach((v, j) => {
      expect(v.shape).toEqual([j, j]);
      expect(v.tolist()).toEqual(twos(j));
    });
  });

  it("passes tensors in lists, objects and records of nested lists (test_py_tensors_in_container)", async () => {
    const n = 2;
    const a = [ones([n, n]), ones([n, n])];
    const b = { tensors: buildComplexTensors() };
    const c = { foo: ones([n, n]), bar: ones([n, n]) };
    const ret = await rpc.rpcSync("worker1", myComplexTensorFunction, [a, b, c]);
    expect(plain(ret)).toEqual(plain(myComplexTensorFunction(a, b, c)));
  });

  it("passes a map keyed by a tensor, as build_complex_tensors' {a: d} (test_py_tensors_in_container)", async () => {
    const a = ones([3, 3]);
    const e = new Map<unknown, unknown>([[a, [a, [a, a]]]]);
    const got = await within(
      rpc.rpcSync<[number, number[][]]>(
        "worker1",
        (m: Map<Tensor, unknown>) => {
          const [k, v] = [...m.entries()][0]!;
          return [m.size, k.tolist(), (v as Tensor[])[0]!.tolist()];
        },
        [e],
        { timeoutMs: 10_000 },
      ),
      15_000,
      "the call",
    );
    expect(got).toEqual([1, a.tolist(), a.tolist()]);
  });

  it("calls back the caller from inside a call (test_nested_rpc)", async () => {
    const nestedRpc = (dst: string) =>
      tprpc.rpc.rpcSync<Tensor>(dst, tprpc.add, [tprpc.ones([2, 2]), 1]).then((t) => t.tolist());
    expect(await rpc.rpcSync("worker1", nestedRpc, ["master"])).toEqual(twos(2));
    // and between two workers: worker2 calls worker3, which calls back worker2
    const viaPeer = (dst: string, back: string) => {
      const inner = (d: string) =>
        tprpc.rpc.rpcSync<Tensor>(d, tprpc.add, [tprpc.ones([2, 2]), 1]).then((t) => t.tolist());
      return tprpc.rpc.rpcSync(dst, inner, [back]);
    };
    expect(await rpc.rpcSync("worker2", viaPeer, ["worker3", "worker2"])).toEqual(twos(2));
  });

  it("answers 1000 light calls in flight at once (test_stress_light_rpc)", async () => {
    const lightRpc = () => 0;
    const futs = Array.from({ length: 1000 }, () => rpc.rpcAsync("worker1", lightRpc));
    const vals = await within(Promise.all(futs), 30_000, "1000 light calls");
    expect(vals.every((v) => v === 0)).toBe(true);
  });

  it("answers 20 heavy calls in flight at once (test_stress_heavy_rpc)", async () => {
    const heavyRpc = (t: Tensor) => {
      for (let i = 1; i < 100; i++) {
        t.mul_(i);
        t.div_(i + 1);
      }
      return 0;
    };
    const futs = Array.from({ length: 20 }, () => rpc.rpcAsync("worker1", heavyRpc, [ones([100, 100])]));
    const vals = await within(Promise.all(futs), 30_000, "20 heavy calls");
    expect(vals).toEqual(Array(20).fill(0));
  });

  it("delivers a value to the worker the caller named, from the rank before it (test_expected_src)", async () => {
    let setValue!: (v: number) => void;
    const value = new Promise<number>((resolve) => (setValue = resolve));
    rpc.register("conformance.setValue", (v: number) => setValue(v));
    // each rank sends its rank to the next; the master (rank 0) hears from rank 3
    await rpc.rpcSync("worker3", () =>
      tprpc.rpc.rpcSync("master", "conformance.setValue", [tprpc.rpc.getWorkerInfo().id]),
    );
    expect(await within(value, 5_000, "setValue")).toBe(3);
  });

  it("keeps a non-contiguous view non-contiguous, both ways (test_non_cont_tensors)", async () => {
    const t = arange(0, 25, 1, { dtype: "float32" }).reshape([5, 5]);
    const tView = t.narrow(1, 2, 2);
    expect(tView.isContiguous()).toBe(false);
    const tCont = tView.contiguous();
    expect(tCont.isContiguous()).toBe(true);
    const nonContTest = (v: Tensor, c: Tensor) => {
      if (v.isContiguous()) throw new Error("t_view is contiguous!");
      if (!c.isContiguous()) throw new Error("t_cont is not contiguous!");
      if (JSON.stringify(v.tolist()) !== JSON.stringify(c.tolist())) throw new Error("t_view is not equal to t_cont!");
      return v;
    };
    const tRet = await rpc.rpcSync<Tensor>("worker1", nonContTest, [tView, tCont]);
    expect(tRet.tolist()).toEqual(tView.tolist());
    expect(tRet.isContiguous()).toBe(false);
  });

  describe("payload types", () => {
    const identity = (x: unknown) => x;

    it("round-trips a tensor of every dtype, seen with that dtype on the callee", async () => {
      const ts = DTYPES.map((dtype) => tensor([1, 0, 1, 1], { dtype }).reshape([2, 2]));
      const seen = await rpc.rpcSync<[string, number[]][]>(
        "worker1",
        (xs: Tensor[]) => xs.map((x) => [x.dtype, x.shape]),
        [ts],
      );
      expect(seen).toEqual(DTYPES.map((d) => [d, [2, 2]]));
      const back = await rpc.rpcSync<Tensor[]>("worker1", identity, [ts]);
      expect(back.map((t) => plain(t))).toEqual(ts.map((t) => plain(t)));
      // values a float16 / bfloat16 holds exactly
      const halves = [tensor([0.5, -2, 1024], { dtype: "float16" }), tensor([0.5, -2, 1024], { dtype: "bfloat16" })];
      expect(plain(await rpc.rpcSync("worker1", identity, [halves]))).toEqual(plain(halves));
    });

    it("round-trips nested lists and objects with null, strings, numbers, booleans and tensors", async () => {
      const x = tensor([1.5, 2.5]);
      const payload = {
        list: [1, [2, [3, null]], "s", true, false],
        obj: { deep: { deeper: { s: "ünïcödé ✓ — 漢字", n: -0.25 } } },
        empty: { s: "", l: [] as unknown[], o: {} },
        nil: null,
        big: Number.MAX_SAFE_INTEGER,
        tensors: [x, { inner: x.mul(2) }],
      };
      const described = await rpc.rpcSync(
        "worker1",
        (p: Record<string, unknown>) =>
          Object.entries(p).map(([k, v]) => [k, v === null ? "null" : Array.isArray(v) ? "array" : typeof v]),
        [payload],
      );
      expect(described).toEqual([
        ["list", "array"],
        ["obj", "object"],
        ["empty", "object"],
        ["nil", "null"],
        ["big", "number"],
        ["tensors", "array"],
      ]);
      expect(plain(await rpc.rpcSync("worker1", identity, [payload]))).toEqual(plain(payload));
    });

    it("passes null and undefined as arguments and as results", async () => {
      expect(
        await rpc.rpcSync("worker1", (a: unknown, b: unknown) => [a === null, b === undefined], [null, undefined]),
      ).toEqual([true, true]);
      expect(await rpc.rpcSync("worker1", () => null)).toBeNull();
      expect(await rpc.rpcSync("worker1", () => undefined)).toBeUndefined();
    });

    it("passes a 1 MiB string and gets it back unchanged", async () => {
      const s = "tprpc✓".repeat(1 << 18);
      expect(await rpc.rpcSync("worker1", (x: string) => x.length, [s])).toBe(s.length);
      expect(await rpc.rpcSync("worker1", identity, [s])).toBe(s);
    });

    it("passes views: a reshaped tensor, a row of a larger storage, a transpose", async () => {
      const base = arange(0, 1000, 1, { dtype: "float32" }).reshape([10, 100]);
      const views = [arange(0, 6, 1, { dtype: "float64" }).view([2, 3]), base.narrow(0, 3, 1), base.transpose(0, 1)];
      const seen = await rpc.rpcSync("worker1", (vs: Tensor[]) => vs.map((v) => [v.shape, v.tolist()]), [views]);
      expect(seen).toEqual(views.map((v) => [v.shape, v.tolist()]));
      expect(plain(await rpc.rpcSync("worker1", identity, [views]))).toEqual(plain(views));
    });

    it("passes a 4 MiB tensor and gets the result back", async () => {
      const n = 1 << 20;
      const x = arange(0, n, 1, { dtype: "float32" });
      const y = await within(
        rpc.rpcSync<Tensor>("worker1", (t: Tensor) => t.add(1), [x], { timeoutMs: 20_000 }),
        25_000,
        "a 4 MiB call",
      );
      expect(y.shape).toEqual([n]);
      const v = y.toArray();
      for (const i of [0, 1, n / 2, n - 1]) expect(v[i]).toBe(i + 1);
    });
  });
});
