/**
 * The wire codec: messages round-trip with tensors of every dtype out of band,
 * views compacted, shared storages deduplicated, errors, bigints; tensors decode
 * without a copy when their bytes are aligned.
 */
import { describe, expect, it } from "vitest";
import {
  DTYPES,
  type DType,
  Device,
  ProtocolError,
  RemoteError,
  Tensor,
  arange,
  randn,
  tensor,
  zeros,
  manualSeed,
} from "../../sdk/index.js";
import { decodeTensor } from "../../sdk/wire/tensor.js";
import {
  HEADER_BYTES,
  MessageType,
  RemoteErrorRecord,
  WIRE_EXT,
  decodeMessage,
  encodeMessage,
  errorFromWire,
  registerWireType,
} from "../../sdk/wire/index.js";

function roundTrip(payload: unknown, type = MessageType.REQUEST, id = 42, flags = 3) {
  const m = encodeMessage({ type, id, flags, payload });
  return { m, back: decodeMessage(m.header, m.payload, m.buffers) };
}

function sample(dtype: DType): Tensor {
  const vals =
    dtype === "bool" ? [1, 0, 1, 1, 0, 0] : [1, -2, 3, 4, 5, 100].map((v) => (dtype === "uint8" ? Math.abs(v) : v));
  return tensor(vals, { dtype }).reshape([2, 3]);
}

describe("wire codec", () => {
  it("round-trips header fields and nested plain payloads", () => {
    const payload = {
      f: [2 ** 40, -(2 ** 40), 2 ** 53 - 1, -0.5, Number.NaN],
      a: [1, 2.5, "x", null, true, { deep: [[["y"]]] }],
      n: -7,
      big: 2n ** 80n,
      i64: -(2n ** 62n),
      u: undefined,
    };
    const { m, back } = roundTrip(payload, MessageType.RESPONSE, 2 ** 40 + 5, 0xbeef);
    expect(m.header.byteLength).toBe(HEADER_BYTES);
    expect(back.type).toBe(MessageType.RESPONSE);
    expect(back.id).toBe(2 ** 40 + 5);
    expect(back.flags).toBe(0xbeef);
    expect(back.payload).toEqual(payload);
    expect((back.payload as { big: bigint }).big).toBe(2n ** 80n);
    expect(typeof (back.payload as { f: unknown[] }).f[0]).toBe("number");
    expect((back.payload as { i64: bigint }).i64).toBe(-(2n ** 62n));
  });

  it("round-trips every dtype, 0-d and empty tensors, out of band", () => {
    const ts: Record<string, Tensor> = {};
    for (const d of DTYPES) ts[d] = sample(d);
    const scalar = tensor(3.5);
    const empty = zeros([0, 4], { dtype: "int32" });
    const { m, back } = roundTrip({ nested: { ts: [ts] }, scalar, empty });
    expect(m.buffers.length).toBe(DTYPES.length + 2);
    const p = back.payload as { nested: { ts: [Record<string, Tensor>] }; scalar: Tensor; empty: Tensor };
    for (const d of DTYPES) {
      const got = p.nested.ts[0][d]!;
      expect(got).toBeInstanceOf(Tensor);
      expect(got.dtype).toBe(d);
      expect(got.shape).toEqual([2, 3]);
      expect(got.tolist()).toEqual(ts[d]!.tolist());
    }
    expect(p.scalar.shape).toEqual([]);
    expect(p.scalar.item()).toBe(3.5);
    expect(p.empty.shape).toEqual([0, 4]);
    expect(p.empty.dtype).toBe("int32");
    expect(back.tensors.length).toBe(DTYPES.length + 2);
  });

  it("keeps requiresGrad and the device string", () => {
    const w = randn([3]).requiresGrad_();
    const { back } = roundTrip([w]);
    const got = (back.payload as Tensor[])[0]!;
    expect(got.requiresGrad).toBe(true);
    expect(got.isLeaf).toBe(true);
    expect(got.device.toString()).toBe("cpu");
  });

  it("never puts tensor bytes in the payload", () => {
    manualSeed(0);
    const big = randn([1024, 1024]); // 4 MB
    const { m, back } = roundTrip({ x: big, note: "hi" });
    expect(m.payload.byteLength).toBeLessThan(64);
    expect(m.buffers[0]!.byteLength).toBe(4 * 2 ** 20);
    expect((back.payload as { x: Tensor }).x.toArray().slice(0, 5)).toEqual(big.toArray().slice(0, 5));
  });

  it("keeps the strides of views that span little more than their own bytes, as PyTorch does", () => {
    const base = arange(0, 25, 1, { dtype: "float32" }).reshape([5, 5]);
    const view = base.narrow(1, 2, 2); // test_non_cont_tensors: 10 elements spanning 22
    const t = base.transpose(0, 1);
    const e = tensor([1, 2, 3], { dtype: "float32" }).reshape([3, 1]).expand([3, 4]); // stride 0
    const { m, back } = roundTrip([view, t, e]);
    expect(m.buffers.map((b) => b.byteLength)).toEqual([22 * 4, 25 * 4, 3 * 4]);
    const [v2, t2, e2] = back.payload as Tensor[];
    expect([v2!.isContiguous(), t2!.isContiguous(), e2!.isContiguous()]).toEqual([false, false, false]);
    expect(v2!.stride()).toEqual(view.stride());
    expect(e2!.stride()).toEqual([1, 0]);
    expect(v2!.tolist()).toEqual(view.tolist());
    expect(t2!.tolist()).toEqual(t.tolist());
    expect(e2!.tolist()).toEqual(e.tolist());
  });

  it("refuses a strided descriptor that reaches outside its buffer", () => {
    const ctx = () => ({ buffers: [new Uint8Array(22 * 4)], descriptors: [], tensors: [], mapDevice: Device.parse });
    const ok = decodeTensor(["float32", [5, 2], 0, "cpu", false, [5, 1], 0], ctx() as never);
    expect(ok.stride()).toEqual([5, 1]);
    for (const [strides, offset] of [
      [[5, 1], 1], // its last element would be the 23rd of 22
      [[6, 1], 0],
      [[5, -1], 0],
      [[5], 0],
      [[5, 1], -1],
      [[5, 1.5], 0],
    ] as const)
      expect(() => decodeTensor(["float32", [5, 2], 0, "cpu", false, strides, offset], ctx() as never)).toThrow(
        ProtocolError,
      );
  });

  it("compacts non-contiguous views and slices of big storages", () => {
    const base = arange(0, 1000, 1, { dtype: "float32" }).reshape([10, 100]);
    const t = base.transpose(0, 1); // non-contiguous, whole storage
    const slice = base.narrow(0, 3, 1); // contiguous 100 of 1000 elements
    const col = base.narrow(1, 5, 2); // non-contiguous 20 elements
    const { m, back } = roundTrip([t, slice, col]);
    expect(m.buffers.map((b) => b.byteLength)).toEqual([4000, 400, 80]);
    const [t2, s2, c2] = back.payload as Tensor[];
    expect(t2!.tolist()).toEqual(t.tolist());
    expect(t2!.isContiguous()).toBe(false); // the whole storage, transposed: sent as it is
    expect(s2!.tolist()).toEqual(slice.tolist());
    expect(c2!.tolist()).toEqual(col.tolist());
    expect(c2!.isContiguous()).toBe(true); // 20 elements spread over 902: compacted
  });

  it("sends a storage shared by full views once and rebuilds the sharing", () => {
    const x = arange(0, 6, 1, { dtype: "float64" });
    const v = x.view([2, 3]);
    const { m, back } = roundTrip({ x, v, again: x });
    expect(m.buffers.length).toBe(1);
    const p = back.payload as { x: Tensor; v: Tensor; again: Tensor };
    expect(p.v.shape).toEqual([2, 3]);
    expect(p.x.storage).toBe(p.v.storage);
    expect(p.x.storage).toBe(p.again.storage);
  });

  it("decodes aligned buffers without a copy, misaligned ones into aligned arrays", () => {
    const x = tensor([1, 2, 3, 4], { dtype: "float32" });
    const m = encodeMessage({ type: MessageType.REQUEST, id: 1, payload: x });
    const aligned = new Uint8Array(new ArrayBuffer(16));
    aligned.set(m.buffers[0] as Uint8Array);
    const a = decodeMessage(m.header, m.payload, [aligned]).payload as Tensor;
    expect(a.storage.data.buffer).toBe(aligned.buffer);
    const mis = new Uint8Array(new ArrayBuffer(17), 1, 16);
    mis.set(m.buffers[0] as Uint8Array);
    const b = decodeMessage(m.header, m.payload, [mis]).payload as Tensor;
    expect(b.storage.data.buffer).not.toBe(mis.buffer);
    expect(b.storage.data.byteOffset % 4).toBe(0);
    expect(b.tolist()).toEqual([1, 2, 3, 4]);
  });

  it("carries errors as records that become RemoteErrors", () => {
    const e = Object.assign(new TypeError("bad thing"), { code: "E_BAD" });
    const { back } = roundTrip({ error: e }, MessageType.ERROR);
    const rec = (back.payload as { error: RemoteErrorRecord }).error;
    expect(rec).toBeInstanceOf(RemoteErrorRecord);
    expect(rec.name).toBe("TypeError");
    expect(rec.stack).toContain("bad thing");
    const err = errorFromWire(rec, "worker1");
    expect(err).toBeInstanceOf(RemoteError);
    expect(err.workerName).toBe("worker1");
    expect(err.remoteName).toBe("TypeError");
    expect(err.remoteStack).toBe(e.stack);
    expect(err.message).toContain("bad thing");
    expect((err as RemoteError & { code?: string }).code).toBe("E_BAD");
    // forwarded on by worker1: the origin stays worker1
    const again = errorFromWire(roundTrip(err).back.payload as RemoteErrorRecord, "worker2");
    expect(again.workerName).toBe("worker1");
    expect(again.remoteName).toBe("TypeError");
    expect(again.message).toBe(err.message);
  });

  it("lets the rpc layer register its own types in the reserved range", () => {
    class WorkerInfo {
      constructor(
        readonly name: string,
        readonly id: number,
      ) {}
    }
    registerWireType(WIRE_EXT.RPC_FIRST + 1, {
      Class: WorkerInfo,
      match: (w) => w.id >= 0,
      encode: (w) => [w.name, w.id],
      decode: (d) => new WorkerInfo((d as [string, number])[0], (d as [string, number])[1]),
    });
    const { back } = roundTrip({ to: new WorkerInfo("w1", 1), odd: new WorkerInfo("x", -1) });
    const p = back.payload as { to: WorkerInfo; odd: unknown };
    expect(p.to).toBeInstanceOf(WorkerInfo);
    expect(p.to.name).toBe("w1");
    expect(p.odd).toEqual({ name: "x", id: -1 }); // match() declined: sent as a plain object
    expect(() => registerWireType(0x10, { Class: WorkerInfo, encode: () => 0, decode: () => 0 })).toThrow(/reserved/);
    expect(() =>
      registerWireType(WIRE_EXT.RPC_FIRST + 1, { Class: WorkerInfo, encode: () => 0, decode: () => 0 }),
    ).toThrow(/already registered/);
  });

  it("refuses bad messages on the sending side", () => {
    expect(() => encodeMessage({ type: 0xee as MessageType, id: 1, payload: null })).toThrow(/unknown message type/);
    expect(() => encodeMessage({ type: MessageType.REQUEST, id: -1, payload: null })).toThrow(/id/);
    expect(() =>
      encodeMessage({ type: MessageType.REQUEST, id: 1, payload: "x".repeat(100) }, { maxPayloadBytes: 50 }),
    ).toThrow(/out of band/);
  });
});
