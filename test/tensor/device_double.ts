/**
 * A DeviceBackend test double: "device" memory lives in host buffers and every
 * call is recorded. It checks how the tensor and RPC layers route through the
 * DeviceBackend interface; it says nothing about a real CUDA backend.
 */
import { type Device, backend } from "../../sdk/index.js";

/** A DeviceBackend over host buffers that records every call (a test double, not a GPU). */
export class HostBackedDevices implements backend.DeviceBackend {
  readonly type = "cuda" as const;
  readonly name = "host-backed test double";
  readonly calls: string[] = [];
  constructor(private readonly count: number) {}
  deviceCount(): number {
    return this.count;
  }
  alloc(device: Device, byteLength: number, zero: boolean): backend.DeviceMemory {
    this.calls.push(`alloc ${device} ${byteLength}`);
    const bytes = new Uint8Array(byteLength);
    if (!zero) bytes.fill(0xab); // NB: undefined contents must never show through
    return { device, byteLength, handle: bytes };
  }
  copyFromHost(src: Uint8Array, dst: backend.DeviceMemory, dstOffset: number): void {
    this.calls.push(`h2d ${dst.device} ${src.byteLength}`);
    (dst.handle as Uint8Array).set(src, dstOffset);
  }
  copyToHost(src: backend.DeviceMemory, srcOffset: number, dst: Uint8Array): void {
    this.calls.push(`d2h ${src.device} ${dst.byteLength}`);
    dst.set((src.handle as Uint8Array).subarray(srcOffset, srcOffset + dst.byteLength));
  }
  copyDevice(
    src: backend.DeviceMemory,
    srcOffset: number,
    dst: backend.DeviceMemory,
    dstOffset: number,
    n: number,
  ): void {
    this.calls.push(`d2d ${src.device}->${dst.device} ${n}`);
    (dst.handle as Uint8Array).set((src.handle as Uint8Array).subarray(srcOffset, srcOffset + n), dstOffset);
  }
}
