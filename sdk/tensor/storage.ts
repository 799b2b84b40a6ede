/**
 * A Storage is a flat array of one dtype on one device plus a version counter
 * that every view of it shares (autograd uses it to detect in-place changes to
 * tensors saved for backward).
 *
 * A CPU storage holds a typed array (`data`). A storage on another device
 * holds the DeviceMemory its device backend allocated (`memory`); its `data`
 * throws a DeviceError, since host code cannot read device memory: copy it
 * with `.cpu()` first (sdk/tensor/device_copy.ts moves bytes between devices).
 */
import { AutogradError, DeviceError, NotImplementedError } from "../errors/index.js";
import {
  type DType,
  type StorageArray,
  alignedArrayOver,
  alignedBuffer,
  allocArray,
  allocArrayUninit,
  arrayOver,
  itemSize,
} from "./dtype.js";
import { sharedMemoryProvider } from "./shared.js";
import { type Device, assertDeviceUsable, cpu } from "./device.js";
import { getBackend } from "./backend/registry.js";
import { deviceBackendFor } from "./backend/devices.js";
import type { DeviceMemory } from "./backend/interface.js";
import { POOL_MIN_BYTES, giveBuffer, outputBuffer, takeBuffer } from "./pool.js";

/** Storages at least this many elements long may come from the backend's allocator. */
const LARGE = 1 << 14;

let serials = 0;

/** The serial the next storage will get: storages made after this call have serial >= it. */
export function nextStorageSerial(): number {
  return serials;
}

export class Storage {
  /** Bumped by every in-place write through any view of this storage. */
  version = 0;
  /** Creation order (the autograd engine tells gradients made during a backward pass by it). */
  readonly serial = serials++;
  /** Whether the whole buffer is this storage's own, sized by ./pool.ts (so release() may recycle it). */
  poolable = false;
  /**
   * The scope of autograd intermediates (sdk/autograd/intermediates.ts) that will release this storage
   * once backward is done with it; null when none will.
   */
  dropScope: object | null = null;
  /** NB: replaced only by shareMemory_ (same values, new memory). */
  private host: StorageArray | null;
  /** The device memory behind a non-CPU storage; null on the CPU. */
  readonly memory: DeviceMemory | null;
  private readonly numel: number;

  /** A CPU storage over `data` (the device argument must be the CPU; see Storage.onDevice). */
  constructor(
    data: StorageArray,
    readonly dtype: DType,
    readonly device: Device = cpu,
  ) {
    if (device.type !== "cpu")
      throw new DeviceError(
        `a host array cannot back a storage on '${device}': allocate it with Storage.alloc(dtype, numel, device)`,
      );
    this.host = data;
    this.memory = null;
    this.numel = data.length;
  }

  /** A storage over device memory (from a DeviceBackend); `numel` elements of `dtype`. */
  static onDevice(memory: DeviceMemory, dtype: DType, numel: number): Storage {
    if (numel * itemSize(dtype) > memory.byteLength)
      throw new DeviceError(`${numel} ${dtype} elements do not fit in ${memory.byteLength} bytes of device memory`);
    const s = Object.create(Storage.prototype) as Storage;
    // NB: the constructor only builds CPU storages; device storages set the same fields here.
    Object.assign(s, {
      version: 0,
      serial: serials++,
      poolable: false,
      dropScope: null,
      released: false,
      host: null,
      memory,
      numel,
      dtype,
      device: memory.device,
    });
    return s;
  }

  /** Zeroed storage; large CPU ones come from the current backend's allocator when it has one. */
  static alloc(dtype: DType, numel: number, device: Device = cpu): Storage {
    if (device.type !== "cpu") return deviceAlloc(dtype, numel, device, true);
    const fromBackend = numel >= LARGE ? getBackend().allocArray?.(dtype, numel) : null;
    if (fromBackend) return new Storage(fromBackend, dtype, device);
    const bytes = numel * itemSize(dtype);
    if (bytes < POOL_MIN_BYTES) return new Storage(allocArray(dtype, numel), dtype, device);
    // NB: a large zeroed storage is its buffer's sole owner too (poolable): a recycled buffer, zeroed
    // here, or a new one (zeroed by the allocator)
    const reused = takeBuffer(bytes);
    if (reused) new Uint8Array(reused).fill(0);
    const s = new Storage(alignedArrayOver(dtype, reused ?? alignedBuffer(bytes), numel), dtype, device);
    s.poolable = true;
    return s;
  }

  /** Storage whose contents are undefined, for kernel outputs that overwrite every element. */
  static allocUninit(dtype: DType, numel: number, device: Device = cpu): Storage {
    if (device.type !== "cpu") return deviceAlloc(dtype, numel, device, false);
    const fromBackend = numel >= LARGE ? getBackend().allocArray?.(dtype, numel) : null;
    if (fromBackend) return new Storage(fromBackend, dtype, device);
    const bytes = numel * itemSize(dtype);
    if (bytes < POOL_MIN_BYTES || typeof Buffer === "undefined")
      return new Storage(allocArrayUninit(dtype, numel), dtype, device);
    const s = new Storage(alignedArrayOver(dtype, outputBuffer(bytes), numel), dtype, device);
    s.poolable = true;
    return s;
  }

  /**
   * Gives a poolable storage's buffer back to ./pool.ts for the next output of its size. Only for
   * an owner that knows nothing can read it any more (the autograd engine, for gradients it made and
   * consumed); the storage is unusable afterwards. A no-op for other storages.
   */
  release(): void {
    if (!this.poolable || this.host === null) return;
    const buf = this.host.buffer as ArrayBuffer;
    this.host = null;
    this.poolable = false;
    this.released = true;
    giveBuffer(buf);
  }

  private released = false;

  /** The elements, for CPU storages; a DeviceError for storages on other devices. */
  get data(): StorageArray {
    if (this.host === null && this.released)
      throw new AutogradError("internal error: a storage the autograd engine recycled was read afterwards");
    if (this.host === null)
      throw new DeviceError(
        `this tensor's data is on '${this.device}', which host code cannot read: call .cpu() first`,
      );
    return this.host;
  }

  get length(): number {
    return this.numel;
  }

  /** Whether the elements live in shared memory (shareMemory_, or received over shm from a shared storage). */
  get isShared(): boolean {
    return this.host !== null && this.host.byteLength > 0 && (sharedMemoryProvider()?.isShared(this.host) ?? false);
  }

  /**
   * Moves the elements into shared memory (one copy), keeping their values; every view of this
   * storage sees the new memory. A no-op for storages already there and for device storages (as
   * torch's share_memory_ is for CUDA tensors). See ./shared.ts.
   */
  shareMemory_(): void {
    if (this.host === null || this.isShared) return;
    const p = sharedMemoryProvider();
    if (!p || p.unavailable !== undefined)
      throw new NotImplementedError(
        `shareMemory_: no shared memory here (${p?.unavailable ?? "the native addon is not loaded; run npm run build:native on Linux"})`,
      );
    const arr = arrayOver(this.dtype, p.alloc(this.byteLength), this.numel);
    (arr as { set(a: ArrayLike<unknown>): void }).set(this.host);
    this.host = arr;
    this.poolable = false;
  }

  /**
   * @internal Makes `arr` (same dtype and length, owned by nobody else) this storage's memory, in place of
   * a copy into it: tprpc.distributed's receive of a whole-storage tensor adopts the received buffer.
   * Every view of this storage sees it, as after shareMemory_.
   */
  adoptHost_(arr: StorageArray): void {
    if (this.host === null || arr.length !== this.numel || arr.constructor !== this.host.constructor)
      throw new DeviceError(`adoptHost_: a ${arr.constructor.name} of ${arr.length} elements cannot back this storage`);
    this.host = arr;
    // NB: the received memory is not a buffer ./pool.ts sized for this storage alone
    this.poolable = false;
    this.version++;
  }

  get byteLength(): number {
    return this.numel * itemSize(this.dtype);
  }
}

function deviceAlloc(dtype: DType, numel: number, device: Device, zero: boolean): Storage {
  assertDeviceUsable(device);
  const mem = deviceBackendFor(device.type)!.alloc(device, numel * itemSize(dtype), zero);
  return Storage.onDevice(mem, dtype, numel);
}
