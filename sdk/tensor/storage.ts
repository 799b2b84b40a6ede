/**
 * A Storage is a flat typed array on one device plus a version counter that
 * every view of it shares (autograd uses it to detect in-place changes to
 * tensors saved for backward).
 */
import { type DType, type StorageArray, allocArray, allocArrayUninit } from "./dtype.js";
import { type Device, cpu } from "./device.js";
import { getBackend } from "./backend/registry.js";

/** Storages at least this many elements long may come from the backend's allocator. */
const LARGE = 1 << 14;

export class Storage {
  /** Bumped by every in-place write through any view of this storage. */
  version = 0;

  constructor(
    readonly data: StorageArray,
    readonly dtype: DType,
    readonly device: Device = cpu,
  ) {}

  /** Zeroed storage; large ones come from the current backend's allocator when it has one. */
  static alloc(dtype: DType, numel: number, device: Device = cpu): Storage {
    const fromBackend = numel >= LARGE ? getBackend().allocArray?.(dtype, numel) : null;
    return new Storage(fromBackend ?? allocArray(dtype, numel), dtype, device);
  }

  /** Storage whose contents are undefined, for kernel outputs that overwrite every element. */
  static allocUninit(dtype: DType, numel: number, device: Device = cpu): Storage {
    const fromBackend = numel >= LARGE ? getBackend().allocArray?.(dtype, numel) : null;
    return new Storage(fromBackend ?? allocArrayUninit(dtype, numel), dtype, device);
  }

  get length(): number {
    return this.data.length;
  }

  get byteLength(): number {
    return this.data.byteLength;
  }
}
