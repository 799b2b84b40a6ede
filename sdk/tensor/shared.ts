/**
 * Shared memory for CPU storages, as torch's `share_memory_()` / `is_shared()`.
 *
 * The tensor layer loads no native code, so the package entry (sdk/index.ts) installs the
 * provider: the addon's memfd-backed buffers (native/src/channels/shared.cc) on Linux. A storage
 * in shared memory crosses the shm channel to a worker on the same host without a copy: its file
 * is frozen and sealed at the first send, and both sides map it copy-on-write, so RPC keeps value
 * semantics (neither side sees the other's later writes). Without a provider, shareMemory_()
 * throws a NotImplementedError saying what is missing.
 */
export interface SharedMemoryProvider {
  /** A zero-filled ArrayBuffer of `byteLength` bytes in shared memory. */
  alloc(byteLength: number): ArrayBuffer;
  /** Whether the view's bytes lie in shared memory of this provider. */
  isShared(view: ArrayBufferView): boolean;
  /** Why shared memory is unavailable, for the error; undefined when it is available. */
  readonly unavailable?: string;
}

let provider: SharedMemoryProvider | null = null;

/** Installs the provider (sdk/index.ts; tests may install a fake). */
export function setSharedMemoryProvider(p: SharedMemoryProvider | null): void {
  provider = p;
}

export function sharedMemoryProvider(): SharedMemoryProvider | null {
  return provider;
}
