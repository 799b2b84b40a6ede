/**
 * A Storage is a flat typed array on one device plus a version counter that
 * every view of it shares (autograd uses it to detect in-place changes to
 * tensors saved for backward).
 */
import { type DType, type StorageArray, allocArray } from "./dtype.js";
import { type Device, cpu } from "./device.js";

export class Storage {
  /** Bumped by every in-place write through any view of this storage. */
  version = 0;

  constructor(
    readonly data: StorageArray,
    readonly dtype: DType,
    readonly device: Device = cpu,
  ) {}

  static alloc(dtype: DType, numel: number, device: Device = cpu): Storage {
    return new Storage(allocArray(dtype, numel), dtype, device);
  }

  get length(): number {
    return this.data.length;
  }

  get byteLength(): number {
    return this.data.byteLength;
  }
}
