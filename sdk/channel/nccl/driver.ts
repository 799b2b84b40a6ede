/**
 * The libnccl (and the few CUDA) calls the nccl channel makes, as one
 * interface so its bootstrap runs against a stand-in in tests. Pointers,
 * streams and communicators are bigints; the unique id is its 128 bytes.
 *
 * NB: NCCL needs one GPU per rank. The machines lent to this project have one
 * GPU, so a two-rank communicator cannot be built there: this path has never
 * run on a device. The native binding is ./native_driver.ts (libnccl.so.2
 * through dynlib's dlopen table).
 */
import { ChannelNotViableError } from "../../errors/index.js";

/** Bytes in an ncclUniqueId. */
export const NCCL_UNIQUE_ID_BYTES = 128;

/** ncclResult_t names, for messages. */
export const NCCL_RESULT: Readonly<Record<number, string>> = {
  0: "ncclSuccess",
  1: "ncclUnhandledCudaError",
  2: "ncclSystemError",
  3: "ncclInternalError",
  4: "ncclInvalidArgument",
  5: "ncclInvalidUsage",
  6: "ncclRemoteError",
  7: "ncclInProgress",
};

/** An NCCL call failed; `result` is its ncclResult_t. The pair falls back to cuda_staging. */
export class NcclError extends ChannelNotViableError {
  constructor(
    readonly call: string,
    readonly result: number,
    detail = "",
  ) {
    super(`${call} failed: ${NCCL_RESULT[result] ?? `ncclResult ${result}`}${detail ? ` (${detail})` : ""}`);
  }
}

export interface NcclDriver {
  /** ncclGetUniqueId (rank 0 only). */
  getUniqueId(): Uint8Array;
  /** ncclCommInitRank in `device`'s context, off the JS thread (it blocks until every rank joined). Rejects with NcclError. */
  commInitRank(device: number, nranks: number, id: Uint8Array, rank: number): Promise<bigint>;
  /** ncclCommAbort (pending work or a failed peer). */
  commAbort(comm: bigint): void;
  /** ncclCommDestroy. */
  commDestroy(comm: bigint): void;
  /** cuStreamCreate: the channel's dedicated stream. */
  streamCreate(device: number): bigint;
  /** ncclSend of `bytes` bytes (as ncclUint8) at `ptr` to `peer` on `stream`; throws NcclError. */
  send(comm: bigint, ptr: bigint, bytes: number, peer: number, stream: bigint): void;
  /** ncclRecv, as send. */
  recv(comm: bigint, ptr: bigint, bytes: number, peer: number, stream: bigint): void;
  /** cuEventRecord on `stream` now; the query is true once it passed. */
  fence(device: number, stream: bigint): () => boolean;
}
