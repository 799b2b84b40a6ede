/**
 * Devices. `cpu` is the only viable device in this build; `cuda:N` parses and
 * is reserved for the GPU backend, so using it gives a DeviceError that says so.
 */
import { DeviceError } from "../errors/index.js";

export type DeviceType = "cpu" | "cuda";

export class Device {
  // NB: CPU is declared below the class; parse() only reads it at call time.
  constructor(
    readonly type: DeviceType,
    readonly index: number,
  ) {}

  static parse(spec: string | Device | undefined): Device {
    if (spec === undefined) return CPU;
    if (spec instanceof Device) return spec;
    if (spec === "cpu") return CPU;
    const m = /^cuda(?::(\d+))?$/.exec(spec);
    if (m) return new Device("cuda", m[1] === undefined ? 0 : Number(m[1]));
    throw new DeviceError(`Expected one of cpu, cuda device type at start of device string: ${spec}`);
  }

  toString(): string {
    return this.type === "cpu" ? "cpu" : `cuda:${this.index}`;
  }

  equals(other: Device): boolean {
    return this.type === other.type && this.index === other.index;
  }
}

const CPU = new Device("cpu", 0);

export const cpu: Device = CPU;

/** Throws unless `device` can hold tensors in this build. */
export function assertDeviceUsable(device: Device): void {
  if (device.type === "cuda")
    throw new DeviceError(
      `device '${device}' is not available: this tprpc build has no CUDA backend on this machine. ` +
        "Use device 'cpu' (tensors can still be sent to GPU workers once the CUDA backend is viable there).",
    );
}
