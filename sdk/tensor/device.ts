/**
 * Devices: `cpu` and `cuda:N`, parsed as torch.device parses them ("cpu",
 * "cuda", "cuda:1", a bare index 1 for cuda:1, or a Device). Parsing never
 * needs a GPU; *using* a cuda device asks the device-backend registry
 * (./backend/registry.ts) and gives a DeviceError that says why it cannot be
 * used here and what to do instead.
 *
 *   tprpc.cuda.isAvailable();          // false on a machine without a viable CUDA backend
 *   x.to("cuda:0"); x.cuda(); x.cpu(); // through the backend's allocation and copies
 */
import { DeviceError } from "../errors/index.js";
import { deviceBackendFor, deviceUnavailableReason } from "./backend/devices.js";

export type DeviceType = "cpu" | "cuda";

/** What Device.parse accepts: "cpu", "cuda", "cuda:N", N (cuda:N, as torch.device(N)) or a Device. */
export type DeviceLike = string | number | Device;

export class Device {
  // NB: CPU is declared below the class; parse() only reads it at call time.
  constructor(
    readonly type: DeviceType,
    readonly index: number,
  ) {}

  static parse(spec: DeviceLike | undefined): Device {
    if (spec === undefined) return CPU;
    if (spec instanceof Device) return spec;
    if (typeof spec === "number") {
      if (!Number.isInteger(spec) || spec < 0)
        throw new DeviceError(`Device index must be a non-negative integer (cuda:N), got ${spec}`);
      return new Device("cuda", spec);
    }
    if (spec === "cpu") return CPU;
    const m = typeof spec === "string" ? /^cuda(?::(\d+))?$/.exec(spec) : null;
    if (m) return new Device("cuda", m[1] === undefined ? 0 : Number(m[1]));
    throw new DeviceError(
      `Expected one of cpu, cuda device type at start of device string: ${String(spec)} (e.g. "cpu", "cuda:0", or 0)`,
    );
  }

  /** True for strings, numbers and Devices that Device.parse accepts. */
  static isDeviceLike(v: unknown): v is DeviceLike {
    if (v instanceof Device) return true;
    if (typeof v === "number") return Number.isInteger(v) && v >= 0;
    return typeof v === "string" && (v === "cpu" || /^cuda(?::\d+)?$/.test(v));
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

/**
 * Throws a DeviceError unless `device` can hold tensors in this process: cpu
 * always can; cuda:N needs a registered, viable CUDA backend with more than N
 * devices.
 */
export function assertDeviceUsable(device: Device): void {
  if (device.type === "cpu") return;
  const backend = deviceBackendFor(device.type);
  if (!backend) {
    const why = deviceUnavailableReason(device.type);
    throw new DeviceError(
      `device '${device}' is not available: ${why ?? "this process has no CUDA backend"}. ` +
        "Use device 'cpu' here; to use a GPU, run on a machine with an NVIDIA driver (libcuda.so.1) and a tprpc " +
        "build whose CUDA backend is viable there (check tprpc.cuda.isAvailable()).",
    );
  }
  const n = backend.deviceCount();
  if (device.index >= n)
    throw new DeviceError(
      `CUDA error: invalid device ordinal: '${device}' was requested but this machine has ${n} CUDA device(s) ` +
        `(cuda:0${n > 1 ? `..cuda:${n - 1}` : ""}); check CUDA_VISIBLE_DEVICES or pick a lower index.`,
    );
}

/** torch.cuda's availability queries. */
export const cuda = {
  /** True when a CUDA backend is registered and viable in this process, as torch.cuda.is_available(). */
  isAvailable(): boolean {
    return deviceBackendFor("cuda") !== undefined;
  },
  /** Number of usable CUDA devices (0 when none), as torch.cuda.device_count(). */
  deviceCount(): number {
    return deviceBackendFor("cuda")?.deviceCount() ?? 0;
  },
  /** [free, total] bytes of a CUDA device (default cuda:0), as torch.cuda.mem_get_info. */
  memGetInfo(device: DeviceLike = 0): [number, number] {
    const d = Device.parse(device);
    if (d.type !== "cuda") throw new DeviceError(`memGetInfo() expects a CUDA device, got '${d}'`);
    assertDeviceUsable(d);
    const info = deviceBackendFor("cuda")!.memoryInfo?.(d);
    if (!info) throw new DeviceError("this CUDA backend does not report memory use");
    return [info.free, info.total];
  },
  /** Why CUDA is not available here (null when it is), for diagnostics. */
  unavailableReason(): string | null {
    return deviceBackendFor("cuda") ? null : (deviceUnavailableReason("cuda") ?? "no CUDA backend is registered");
  },
};
