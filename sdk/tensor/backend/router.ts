/**
 * Routes each kernel call by the device of its tensors: CPU views go to the
 * current CPU backend (ts or native, ./registry.ts), views on another device
 * to that device type's kernel backend (the CUDA one: ./cuda/kernels.ts). The
 * op layer allocates every result on its inputs' device, so a call's views
 * share one device; a mix is torch's "Expected all tensors to be on the same
 * device" DeviceError. The one exception is `copy`, which takes a source on
 * another device by staging it through the device copies (x.copy_(y) across
 * devices, as torch allows).
 */
import { DeviceError } from "../../errors/index.js";
import type { Device, DeviceType } from "../device.js";
import type { AdamStepArgs, Backend, BinaryOp, ReduceOp, SgdStepArgs, TensorView, UnaryOp } from "./interface.js";

const kernels = new Map<DeviceType, Backend>();
const reasons = new Map<DeviceType, string>();
let stage: ((v: TensorView, to: Device) => TensorView) | null = null;

/** Makes `b` run the kernels of tensors on devices of `type` (sdk/index.ts, when viable). */
export function registerDeviceKernels(type: Exclude<DeviceType, "cpu">, b: Backend): void {
  kernels.set(type, b);
  reasons.delete(type);
}

/** Why tensors on `type` have no kernels here (ops on them give a DeviceError saying so). */
export function noteDeviceKernelsUnavailable(type: Exclude<DeviceType, "cpu">, reason: string): void {
  if (!kernels.has(type)) reasons.set(type, reason);
}

/** The kernel backend for `type`, if registered (tests, diagnostics). */
export function deviceKernelsFor(type: DeviceType): Backend | undefined {
  return kernels.get(type);
}

/** Installed by ../device_copy.ts: a copy of `v` on `to` (NB: a hook, to avoid an import cycle). */
export function setDeviceStager(fn: (v: TensorView, to: Device) => TensorView): void {
  stage = fn;
}

/** Throws the DeviceError of `pick` unless tensors on `device` have kernels (checked before allocating). */
export function requireKernels(device: Device): void {
  if (device.type !== "cpu" && !kernels.has(device.type))
    throw new DeviceError(
      `no kernels for tensors on '${device}' here: ${reasons.get(device.type) ?? "no kernel backend is registered"}; ` +
        "call .cpu() first",
    );
}

function deviceOf(v: TensorView): Device {
  return v.storage.device;
}

/** The backend for views that must share a device (nulls skipped). */
function pick(cpu: Backend, views: readonly (TensorView | null | undefined)[]): Backend {
  let dev: Device | null = null;
  for (const v of views) {
    if (!v) continue;
    const d = deviceOf(v);
    if (dev === null) dev = d;
    else if (!dev.equals(d))
      throw new DeviceError(
        `Expected all tensors to be on the same device, but found at least two devices, ${dev} and ${d}! ` +
          "Move them with .to(device) first.",
      );
  }
  if (dev === null || dev.type === "cpu") return cpu;
  requireKernels(dev);
  return kernels.get(dev.type)!;
}

/** A Backend that forwards each call to the backend of its tensors' device. */
export class DeviceRouter implements Backend {
  constructor(private readonly cpu: () => Backend) {}

  get name(): string {
    return this.cpu().name;
  }

  get allocArray(): Backend["allocArray"] {
    return this.cpu().allocArray;
  }

  copy(src: TensorView, dst: TensorView): void {
    if (stage && !deviceOf(src).equals(deviceOf(dst))) src = stage(src, deviceOf(dst));
    pick(this.cpu(), [src, dst]).copy(src, dst);
  }
  fill(dst: TensorView, value: number): void {
    pick(this.cpu(), [dst]).fill(dst, value);
  }
  unary(op: UnaryOp, x: TensorView, out: TensorView, args?: readonly number[]): void {
    pick(this.cpu(), [x, out]).unary(op, x, out, args);
  }
  binary(op: BinaryOp, a: TensorView, b: TensorView, out: TensorView): void {
    pick(this.cpu(), [a, b, out]).binary(op, a, b, out);
  }
  where(cond: TensorView, a: TensorView, b: TensorView, out: TensorView): void {
    pick(this.cpu(), [cond, a, b, out]).where(cond, a, b, out);
  }
  reduce(op: ReduceOp, x: TensorView, dims: readonly number[], out: TensorView): void {
    pick(this.cpu(), [x, out]).reduce(op, x, dims, out);
  }
  argReduce(op: "argmax" | "argmin", x: TensorView, dim: number, out: TensorView): void {
    pick(this.cpu(), [x, out]).argReduce(op, x, dim, out);
  }
  matmul(a: TensorView, b: TensorView, out: TensorView, accumulate?: boolean): void {
    pick(this.cpu(), [a, b, out]).matmul(a, b, out, accumulate);
  }
  softmax(x: TensorView, dim: number, log: boolean, out: TensorView): void {
    pick(this.cpu(), [x, out]).softmax(x, dim, log, out);
  }
  maskedSoftmax(x: TensorView, mask: TensorView, divisor: number, out: TensorView): void {
    pick(this.cpu(), [x, mask, out]).maskedSoftmax(x, mask, divisor, out);
  }
  softmaxBackward(y: TensorView, g: TensorView, dim: number, log: boolean, out: TensorView): void {
    pick(this.cpu(), [y, g, out]).softmaxBackward(y, g, dim, log, out);
  }
  indexSelect(x: TensorView, dim: number, index: TensorView, out: TensorView): void {
    pick(this.cpu(), [x, index, out]).indexSelect(x, dim, index, out);
  }
  gather(x: TensorView, dim: number, index: TensorView, out: TensorView): void {
    pick(this.cpu(), [x, index, out]).gather(x, dim, index, out);
  }
  scatterAdd(dst: TensorView, dim: number, index: TensorView, src: TensorView): void {
    pick(this.cpu(), [dst, index, src]).scatterAdd(dst, dim, index, src);
  }
  layerNorm(
    x: TensorView,
    weight: TensorView | null,
    bias: TensorView | null,
    eps: number,
    out: TensorView,
    mean: TensorView,
    rstd: TensorView,
  ): void {
    pick(this.cpu(), [x, weight, bias, out, mean, rstd]).layerNorm(x, weight, bias, eps, out, mean, rstd);
  }
  layerNormBackward(
    g: TensorView,
    x: TensorView,
    mean: TensorView,
    rstd: TensorView,
    weight: TensorView | null,
    gx: TensorView | null,
    gw: TensorView | null,
    gb: TensorView | null,
  ): void {
    pick(this.cpu(), [g, x, mean, rstd, weight, gx, gw, gb]).layerNormBackward(g, x, mean, rstd, weight, gx, gw, gb);
  }
  adamStep(
    p: TensorView,
    grad: TensorView,
    expAvg: TensorView,
    expAvgSq: TensorView,
    maxExpAvgSq: TensorView | null,
    h: AdamStepArgs,
  ): void {
    pick(this.cpu(), [p, grad, expAvg, expAvgSq, maxExpAvgSq]).adamStep(p, grad, expAvg, expAvgSq, maxExpAvgSq, h);
  }
  geluBackward(x: TensorView, g: TensorView, tanh: boolean, out: TensorView): boolean {
    const b = pick(this.cpu(), [x, g, out]);
    return b.geluBackward ? b.geluBackward(x, g, tanh, out) : false;
  }
  sgdStep(p: TensorView, grad: TensorView, buf: TensorView | null, h: SgdStepArgs): boolean {
    const b = pick(this.cpu(), [p, grad, buf]);
    return b.sgdStep ? b.sgdStep(p, grad, buf, h) : false;
  }
}
