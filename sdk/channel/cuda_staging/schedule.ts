/**
 * How cuda_staging cuts a transfer into chunks and overlaps their copies, as
 * pure functions (tested on their own in test/channel/cuda_staging.test.ts).
 *
 * A transfer of n bytes is ceil(n / chunkBytes) chunks; chunk i uses pinned
 * slot i % slots. With two slots (double buffering) the sender's
 * device-to-host copy of chunk i+1 runs while chunk i crosses the host
 * channel, and the receiver's host-to-device copy of chunk i runs while
 * chunk i+1 arrives. A slot is reused for chunk i + slots only after chunk
 * i's use of it finished (sender: its bytes were sent; receiver: its
 * host-to-device copy completed).
 */
import { ValueError } from "../../errors/index.js";

/** 4 MiB, the size of the caching allocator's staging buffers (native/src/gpu/cuda_memory.cc). */
export const STAGING_CHUNK_BYTES = 4 << 20;
/** Two pinned slots per direction: double buffering. */
export const STAGING_SLOTS = 2;

export interface StagingChunk {
  index: number;
  offset: number;
  length: number;
  slot: number;
  /** The chunk whose use of `slot` must finish before this one takes it (-1: the slot is fresh). */
  reuses: number;
}

export function stagingChunks(
  byteLength: number,
  chunkBytes = STAGING_CHUNK_BYTES,
  slots = STAGING_SLOTS,
): StagingChunk[] {
  if (!Number.isSafeInteger(byteLength) || byteLength < 0)
    throw new ValueError(`staging: bad byte length ${byteLength}`);
  if (!Number.isSafeInteger(chunkBytes) || chunkBytes <= 0)
    throw new ValueError(`staging: bad chunk size ${chunkBytes}`);
  if (!Number.isSafeInteger(slots) || slots < 1) throw new ValueError(`staging: needs at least one slot, got ${slots}`);
  const out: StagingChunk[] = [];
  for (let i = 0, off = 0; off < byteLength; i++, off += chunkBytes)
    out.push({
      index: i,
      offset: off,
      length: Math.min(chunkBytes, byteLength - off),
      slot: i % slots,
      reuses: i >= slots ? i - slots : -1,
    });
  return out;
}

/**
 * The sender's step order when every operation completes at once: the copy
 * of chunk i+1 is issued before chunk i is sent ("d2h i" = issue the
 * device-to-host copy, "send i" = chunk i crosses), and no slot is copied
 * into before its previous chunk was sent. The executor (./staging.ts) issues
 * its steps in this order; the test compares the two.
 */
export function senderSteps(chunks: readonly StagingChunk[], slots = STAGING_SLOTS): string[] {
  const steps: string[] = [];
  const ahead = Math.max(1, slots - 1);
  let issued = 0;
  for (let i = 0; i < chunks.length; i++) {
    while (issued < chunks.length && issued <= i + ahead) steps.push(`d2h ${issued++}`);
    steps.push(`send ${i}`);
  }
  return steps;
}
