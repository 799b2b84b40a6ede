/**
 * Moving tensors between devices (the data part of `x.to(device)`, `.cuda()`,
 * `.cpu()`; autograd wraps it in sdk/autograd/methods.ts). Every byte moves
 * through the DeviceBackend interface (./backend/interface.ts), so this file
 * knows no CUDA.
 *
 * 1. Same device: the tensor itself (as torch's `to` returns self).
 * 2. CPU -> device: a contiguous host copy (the view itself when already
 *    contiguous), fresh device memory, one host-to-device copy.
 * 3. Device -> CPU: the span of the storage that the view covers comes to the
 *    host in one copy; a non-contiguous view is then compacted on the host.
 * 4. Device -> device: contiguous views go device to device in one copy;
 *    others are staged through the host (NB: strided device copies need a
 *    device kernel, which the CUDA backend may add; the result is the same).
 * The result is always contiguous and never shares storage with the input.
 */
import { DeviceError } from "../errors/index.js";
import { itemSize } from "./dtype.js";
import { type Device, assertDeviceUsable, cpu } from "./device.js";
import { deviceBackendFor } from "./backend/devices.js";
import { setDeviceStager } from "./backend/router.js";
import type { DeviceBackend } from "./backend/interface.js";
import { contiguousStrides, numelOf } from "./shape.js";
import { Storage } from "./storage.js";
import { Tensor, setHostCopy } from "./tensor.js";
import * as raw from "./raw.js";

function backendOf(device: Device): DeviceBackend {
  assertDeviceUsable(device);
  return deviceBackendFor(device.type)!;
}

/** The bytes of a contiguous CPU tensor (a view, no copy). */
function hostBytes(t: Tensor): Uint8Array {
  const a = t.storage.data;
  const isz = itemSize(t.dtype);
  return new Uint8Array(a.buffer, a.byteOffset + t.offset * isz, t.numel() * isz);
}

/** Element range [lo, hi] of the storage that the view reads (numel > 0). */
function span(t: Tensor): { lo: number; hi: number } {
  let lo = t.offset;
  let hi = t.offset;
  for (let d = 0; d < t.ndim; d++) {
    const step = t.strides[d]! * (t.shape[d]! - 1);
    if (step < 0) lo += step;
    else hi += step;
  }
  return { lo, hi };
}

/**
 * A contiguous copy of `x` on `device` (x itself when it is already there). `nonBlocking` lets a
 * host-to-device copy return before it ran (the backend orders it on the device's stream).
 */
export function toDevice(x: Tensor, device: Device, nonBlocking = false): Tensor {
  if (x.device.equals(device)) return x;
  const n = x.numel();
  if (x.device.type === "cpu") {
    const dst = backendOf(device);
    const src = x.isContiguous() ? x : raw.copyAs(x);
    const mem = dst.alloc(device, n * itemSize(x.dtype), false);
    if (n > 0) dst.copyFromHost(hostBytes(src), mem, 0, nonBlocking);
    return new Tensor(Storage.onDevice(mem, x.dtype, n), [...x.shape], contiguousStrides(x.shape), 0);
  }
  const memory = x.storage.memory;
  if (!memory) throw new DeviceError(`tensor on '${x.device}' has no device memory`);
  const srcBackend = backendOf(x.device);
  if (device.type !== "cpu" && x.isContiguous()) {
    const dst = backendOf(device);
    if (dst !== srcBackend)
      throw new DeviceError(`cannot copy from '${x.device}' to '${device}' directly: go through .cpu()`);
    const bytes = n * itemSize(x.dtype);
    const mem = dst.alloc(device, bytes, false);
    if (n > 0) dst.copyDevice(memory, x.offset * itemSize(x.dtype), mem, 0, bytes);
    return new Tensor(Storage.onDevice(mem, x.dtype, n), [...x.shape], contiguousStrides(x.shape), 0);
  }
  // device -> host: bring the covered span over, then compact on the host when needed
  let host: Tensor;
  if (n === 0) host = Tensor.empty(x.shape, x.dtype);
  else {
    const { lo, hi } = span(x);
    const onHost = Tensor.empty([hi - lo + 1], x.dtype);
    srcBackend.copyToHost(memory, lo * itemSize(x.dtype), hostBytes(onHost));
    const view = new Tensor(onHost.storage, [...x.shape], [...x.strides], x.offset - lo);
    host = view.isContiguous() && numelOf(x.shape) === hi - lo + 1 ? view : raw.copyAs(view);
  }
  return device.type === "cpu" ? host : toDevice(host, device);
}

setHostCopy((t) => toDevice(t, cpu));

// x.copy_(y) with y on another device: the router stages y onto x's device first.
setDeviceStager((v, to) => toDevice(new Tensor(v.storage, [...v.shape], [...v.strides], v.offset), to));
