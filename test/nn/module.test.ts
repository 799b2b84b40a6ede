/**
 * The Module system: how parameters, buffers and submodules are found and
 * named, state dicts (round trip, strict errors), train/eval, zeroGrad,
 * apply, to(), requiresGrad_ and the printed summary.
 */
import { describe, expect, it } from "vitest";
import {
  DeviceError,
  DTypeError,
  manualSeed,
  NotImplementedError,
  nn,
  ones,
  randn,
  ShapeError,
  type Tensor,
  tensor,
  ValueError,
  zeros,
} from "../../sdk/index.js";

class Net extends nn.Module<[Tensor], Tensor> {
  fc1 = new nn.Linear(3, 4);
  act = new nn.ReLU();
  fc2 = new nn.Linear(4, 2, { bias: false });
  scale = new nn.Parameter(ones([2]));
  notAParam = zeros([2]); // a plain tensor field registers nothing, as in PyTorch
  constructor() {
    super();
    this.registerBuffer("runningMean", zeros([2]));
    this.registerBuffer("cache", ones([1]), false);
  }
  forward(x: Tensor): Tensor {
    return this.fc2
      .forward(this.act.forward(this.fc1.forward(x)))
      .mul(this.scale)
      .add(this.runningMean);
  }
  declare runningMean: Tensor;
}

const names = (pairs: [string, unknown][]): string[] => pairs.map(([k]) => k);

describe("registration and naming", () => {
  it("finds parameters, buffers and children in declaration order with dotted names", () => {
    manualSeed(0);
    const net = new Net();
    expect(names(net.namedParameters())).toEqual(["scale", "fc1.weight", "fc1.bias", "fc2.weight"]);
    expect(names(net.namedChildren())).toEqual(["fc1", "act", "fc2"]);
    expect(names(net.namedModules())).toEqual(["", "fc1", "act", "fc2"]);
    expect(names(net.namedBuffers())).toEqual(["runningMean", "cache"]);
    expect(net.parameters().every((p) => p instanceof nn.Parameter && p.requiresGrad && p.isLeaf)).toBe(true);
    expect(net.parameters(false)).toHaveLength(1);
    expect(net.numParameters()).toBe(2 + 12 + 4 + 8);
    expect(net.forward(randn([5, 3])).shape).toEqual([5, 2]);
  });

  it("registerParameter/registerModule accept null placeholders and later assignments", () => {
    class M extends nn.Module<[Tensor], Tensor> {
      declare w: nn.Parameter | null;
      declare sub: nn.Linear | null;
      constructor() {
        super();
        this.registerParameter("w", null);
        this.registerModule("sub", null);
      }
      forward(x: Tensor): Tensor {
        return x;
      }
    }
    const m = new M();
    expect(m.namedParameters()).toEqual([]);
    m.registerParameter("w", new nn.Parameter(ones([2])));
    m.sub = new nn.Linear(2, 2);
    expect(names(m.namedParameters())).toEqual(["w", "sub.weight", "sub.bias"]);
  });

  it("refuses bad names and plain tensors as parameters", () => {
    const m = new nn.Linear(2, 2);
    expect(() => m.registerParameter("a.b", new nn.Parameter(ones([1])))).toThrow(ValueError);
    expect(() => m.registerParameter("", null)).toThrow(/empty string/);
    expect(() => m.registerParameter("forward", null)).toThrow(/already exists/);
    expect(() => m.registerParameter("p", ones([1]) as nn.Parameter)).toThrow(/new Parameter/);
    expect(() => m.registerBuffer("inFeatures", ones([1]))).toThrow(/already exists/);
    m.registerBuffer("stats", null);
    expect(() => m.registerParameter("stats", null)).toThrow(/already exists/);
  });

  it("Parameter shares storage with its data and is a Tensor", () => {
    const t = tensor([1, 2, 3], { dtype: "float32" });
    const p = new nn.Parameter(t);
    expect(p.storage).toBe(t.storage);
    expect(p.requiresGrad).toBe(true);
    expect(new nn.Parameter(t, false).requiresGrad).toBe(false);
    expect(p.toString()).toMatch(/^Parameter containing:\ntensor\(\[1\., 2\., 3\.\]/);
  });

  it("Sequential and ModuleList name children by index", () => {
    const seq = new nn.Sequential(new nn.Linear(2, 3), new nn.Tanh(), new nn.Linear(3, 1));
    expect(names(seq.namedParameters())).toEqual(["0.weight", "0.bias", "2.weight", "2.bias"]);
    expect(seq.length).toBe(3);
    expect(seq.at(-1)).toBe(seq.at(2));
    expect(seq.forward(randn([4, 2])).shape).toEqual([4, 1]);
    const list = new nn.ModuleList([new nn.Linear(1, 1)]).append(new nn.Linear(1, 2, { bias: false }));
    expect(names(list.namedParameters())).toEqual(["0.weight", "0.bias", "1.weight"]);
    expect([...list].map((l) => (l as nn.Linear).outFeatures)).toEqual([1, 2]);
    expect(() => list.at(2)).toThrow(/out of range/);
    expect(() => list.forward()).toThrow(NotImplementedError);
  });

  it("lists a shared (tied) parameter once, but under each name in the state dict", () => {
    const a = new nn.Linear(2, 2);
    const b = new nn.Linear(2, 2);
    b.weight = a.weight;
    const seq = new nn.Sequential(a, b);
    expect(names(seq.namedParameters())).toEqual(["0.weight", "0.bias", "1.bias"]);
    expect(Object.keys(seq.stateDict())).toEqual(["0.weight", "0.bias", "1.weight", "1.bias"]);
  });

  it("getSubmodule follows dotted paths", () => {
    const seq = new nn.Sequential(new nn.Sequential(new nn.Linear(1, 1)));
    expect(seq.getSubmodule("0.0")).toBeInstanceOf(nn.Linear);
    expect(() => seq.getSubmodule("0.3")).toThrow(/no submodule/);
  });
});

describe("stateDict / loadStateDict", () => {
  it("returns detached tensors sharing storage, with persistent buffers only", () => {
    const net = new Net();
    const sd = net.stateDict();
    expect(Object.keys(sd)).toEqual(["scale", "runningMean", "fc1.weight", "fc1.bias", "fc2.weight"]);
    expect(sd["fc1.weight"]!.requiresGrad).toBe(false);
    expect(sd["fc1.weight"]!.storage).toBe(net.fc1.weight.storage);
    expect(net.stateDict({ keepVars: true })["fc1.weight"]).toBe(net.fc1.weight);
  });

  it("round-trips values into a fresh model (in place, without a graph)", () => {
    manualSeed(1);
    const a = new Net();
    manualSeed(2);
    const b = new Net();
    const x = randn([3, 3]);
    expect(a.forward(x).toArray()).not.toEqual(b.forward(x).toArray());
    const w = b.fc1.weight;
    expect(b.loadStateDict(a.stateDict())).toEqual({ missingKeys: [], unexpectedKeys: [] });
    expect(b.fc1.weight).toBe(w);
    expect(w.isLeaf && w.requiresGrad).toBe(true);
    expect(b.forward(x).toArray()).toEqual(a.forward(x).toArray());
  });

  it("strict loading lists missing and unexpected keys as PyTorch does", () => {
    const m = new nn.Linear(2, 3);
    const sd = m.stateDict();
    const bad = { weight: sd.weight!, foo: zeros([1]), bar: zeros([1]) };
    expect(() => m.loadStateDict(bad)).toThrow(ValueError);
    expect(() => m.loadStateDict(bad)).toThrow(
      'Error(s) in loading state_dict for Linear:\n\tMissing key(s) in state_dict: "bias".\n\tUnexpected key(s) in state_dict: "foo", "bar".',
    );
    expect(m.loadStateDict(bad, false)).toEqual({ missingKeys: ["bias"], unexpectedKeys: ["foo", "bar"] });
  });

  it("size mismatches throw even when not strict, and copy nothing", () => {
    const m = new nn.Linear(2, 3);
    const before = m.weight.toArray();
    const sd = { weight: zeros([3, 4]), bias: zeros([3]) };
    expect(() => m.loadStateDict(sd, false)).toThrow(ShapeError);
    expect(() => m.loadStateDict(sd)).toThrow(
      "size mismatch for weight: copying a param with shape [3, 4] from checkpoint, the shape in current model is [3, 2].",
    );
    expect(m.weight.toArray()).toEqual(before);
    expect(m.bias!.toArray()).not.toEqual([0, 0, 0]);
  });
});

describe("modes and bulk updates", () => {
  it("train()/eval() reach every submodule and switch Dropout", () => {
    manualSeed(3);
    const seq = new nn.Sequential(new nn.Linear(4, 4), new nn.Dropout(0.5));
    expect(seq.modules().every((m) => m.training)).toBe(true);
    const x = ones([8, 4]);
    const drop = seq.at(1);
    expect(
      drop
        .forward(x)
        .toArray()
        .some((v) => v === 0),
    ).toBe(true);
    expect(seq.eval()).toBe(seq);
    expect(seq.modules().every((m) => !m.training)).toBe(true);
    expect(drop.forward(x)).toBe(x);
    seq.train();
    expect(drop.training).toBe(true);
    expect(() => seq.train("no" as unknown as boolean)).toThrow(/boolean/);
  });

  it("zeroGrad sets grads to null, or to zeros in place", () => {
    const m = new nn.Linear(3, 2);
    m.forward(randn([4, 3]))
      .sum()
      .backward();
    const g = m.weight.grad!;
    m.zeroGrad(false);
    expect(m.weight.grad).toBe(g);
    expect(g.toArray().every((v) => v === 0)).toBe(true);
    m.zeroGrad();
    expect(m.weight.grad).toBeNull();
    expect(m.bias!.grad).toBeNull();
  });

  it("apply visits children before the parent", () => {
    const seen: string[] = [];
    new nn.Sequential(new nn.ReLU(), new nn.Tanh()).apply((m) => seen.push(m.constructor.name));
    expect(seen).toEqual(["ReLU", "Tanh", "Sequential"]);
  });

  it("to(dtype) casts floating parameters and buffers; cpu is a no-op; cuda is refused", () => {
    const net = new Net();
    const x = randn([2, 3]);
    const y32 = net.forward(x);
    net.to("float64");
    expect(net.parameters().every((p) => p.dtype === "float64" && p instanceof nn.Parameter && p.requiresGrad)).toBe(
      true,
    );
    expect(net.runningMean.dtype).toBe("float64");
    const y64 = net.forward(x.double());
    y64.toArray().forEach((v, i) => expect(v).toBeCloseTo(y32.toArray()[i]!, 5));
    expect(net.to("cpu")).toBe(net);
    expect(() => net.to("cuda:0")).toThrow(DeviceError);
    expect(() => net.to("int64")).toThrow(DTypeError);
  });

  it("requiresGrad_(false) freezes every parameter", () => {
    const m = new nn.Linear(2, 2).requiresGrad_(false);
    expect(m.parameters().some((p) => p.requiresGrad)).toBe(false);
    expect(m.numParameters(true)).toBe(0);
  });

  it("prints like PyTorch's module repr", () => {
    const seq = new nn.Sequential(new nn.Linear(4, 8), new nn.ReLU(), new nn.Sequential(new nn.Dropout(0.1)));
    expect(seq.toString()).toBe(
      [
        "Sequential(",
        "  (0): Linear(inFeatures=4, outFeatures=8, bias=true)",
        "  (1): ReLU()",
        "  (2): Sequential(",
        "    (0): Dropout(p=0.1)",
        "  )",
        ")",
      ].join("\n"),
    );
  });
});
