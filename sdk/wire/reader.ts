/**
 * FrameReader: cuts a byte stream (TCP chunks of any size) into frames.
 *
 * Per frame, in order:
 * 1. the fixed header (24 B), checked at once: magic, version, type, payload and buffer-count limits;
 * 2. the buffer table (16 B per buffer), each length checked against maxBufferBytes;
 * 3. the payload, copied into its own array;
 * 4. each buffer, landing in an array of exactly the announced size from `allocate`
 *    (default: fresh memory; pass a pool's allocator to receive into pre-faulted memory).
 * A complete frame goes to `onFrame`; it is not decoded here (see decodeFrame).
 * The first violation throws a ProtocolError from push(); the reader then refuses all
 * further input (the caller closes the connection).
 */
import { ProtocolError, ValueError } from "../errors/index.js";
import type { Frame } from "./codec.js";
import {
  BUFFER_DESC_BYTES,
  type BufferDescriptor,
  type FrameHeader,
  type FrameLimits,
  HEADER_BYTES,
  parseBufferTable,
  parseHeader,
  resolveLimits,
} from "./header.js";

export interface FrameReaderOptions extends FrameLimits {
  /** Memory for one incoming buffer of `byteLength` bytes (at least that long; the first byteLength bytes are used). */
  allocate?: (byteLength: number, descriptor: BufferDescriptor) => Uint8Array;
}

const enum Stage {
  Header,
  Table,
  Payload,
  Buffers,
}

function defaultAllocate(n: number): Uint8Array {
  // NB: every byte is overwritten by the stream, so large buffers skip zeroing; a fresh
  // ArrayBuffer starts at offset 0, so the tensor decoder can view it without copying.
  if (n < 1 << 16) return new Uint8Array(n);
  const b = Buffer.allocUnsafeSlow(n);
  return new Uint8Array(b.buffer, b.byteOffset, n);
}

export class FrameReader {
  private readonly limits: Required<FrameLimits>;
  private readonly allocate: (n: number, d: BufferDescriptor) => Uint8Array;
  private stage = Stage.Header;
  private target: Uint8Array = new Uint8Array(HEADER_BYTES);
  private filled = 0;
  private header: FrameHeader | null = null;
  private descriptors: BufferDescriptor[] = [];
  private payload: Uint8Array | null = null;
  private buffers: Uint8Array[] = [];
  private error: ProtocolError | null = null;

  constructor(
    private readonly onFrame: (frame: Frame) => void,
    opts: FrameReaderOptions = {},
  ) {
    this.limits = resolveLimits(opts);
    this.allocate = opts.allocate ?? defaultAllocate;
  }

  /** The error that stopped this reader, or null while it is healthy. */
  get failed(): ProtocolError | null {
    return this.error;
  }

  /** True between frames (nothing partial buffered). */
  get idle(): boolean {
    return this.stage === Stage.Header && this.filled === 0;
  }

  /** Feeds bytes; emits every frame they complete. Throws ProtocolError on garbage (and forever after). */
  push(chunk: Uint8Array): void {
    if (this.error) throw new ProtocolError(`FrameReader refuses input after an earlier error: ${this.error.message}`);
    let pos = 0;
    try {
      while (pos < chunk.byteLength || (this.filled === this.target.byteLength && this.stage !== Stage.Header)) {
        const want = this.target.byteLength - this.filled;
        const take = Math.min(want, chunk.byteLength - pos);
        if (take > 0) {
          this.target.set(chunk.subarray(pos, pos + take), this.filled);
          this.filled += take;
          pos += take;
        }
        if (this.filled === this.target.byteLength) this.advance();
      }
    } catch (e) {
      if (e instanceof ProtocolError || e instanceof ValueError) {
        this.error = e instanceof ProtocolError ? e : new ProtocolError(e.message);
        throw this.error;
      }
      throw e;
    }
  }

  /** The stream ended: a ProtocolError if it ended inside a frame. */
  end(): void {
    if (this.error) return;
    if (!this.idle) {
      this.error = new ProtocolError("bad frame: the stream ended in the middle of a frame");
      throw this.error;
    }
  }

  /** The current target is full: move to the next part of the frame. */
  private advance(): void {
    switch (this.stage) {
      case Stage.Header: {
        this.header = parseHeader(this.target, this.limits);
        this.expect(Stage.Table, new Uint8Array(this.header.bufferCount * BUFFER_DESC_BYTES));
        return;
      }
      case Stage.Table:
        this.descriptors = parseBufferTable(this.target, this.header!.bufferCount, this.limits);
        this.expect(Stage.Payload, new Uint8Array(this.header!.payloadBytes));
        return;
      case Stage.Payload:
        this.payload = this.target;
        this.buffers = [];
        this.nextBuffer();
        return;
      case Stage.Buffers:
        this.buffers.push(this.target);
        this.nextBuffer();
        return;
    }
  }

  private nextBuffer(): void {
    const i = this.buffers.length;
    if (i === this.descriptors.length) {
      const frame: Frame = {
        header: this.header!,
        descriptors: this.descriptors,
        payload: this.payload!,
        buffers: this.buffers,
      };
      this.header = null;
      this.payload = null;
      this.descriptors = [];
      this.buffers = [];
      this.expect(Stage.Header, new Uint8Array(HEADER_BYTES));
      this.onFrame(frame);
      return;
    }
    const d = this.descriptors[i]!;
    let mem: Uint8Array;
    try {
      mem = this.allocate(d.byteLength, d);
    } catch (e) {
      throw new ProtocolError(
        `cannot allocate ${d.byteLength} bytes for buffer ${i}: ${e instanceof Error ? e.message : String(e)}`,
      );
    }
    if (mem.byteLength < d.byteLength)
      throw new ValueError(`FrameReader allocate(${d.byteLength}) returned only ${mem.byteLength} bytes`);
    this.expect(Stage.Buffers, mem.byteLength === d.byteLength ? mem : mem.subarray(0, d.byteLength));
  }

  private expect(stage: Stage, target: Uint8Array): void {
    this.stage = stage;
    this.target = target;
    this.filled = 0;
  }
}
