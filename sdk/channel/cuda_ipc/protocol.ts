/**
 * The cuda_ipc transfer protocol, apart from any pipe: a sender and a
 * receiver that talk through descriptors (sender to receiver, in the pipe's
 * control frames) and acks (receiver to sender, over the bootstrap).
 *
 * 1. Sender, per buffer: cuMemGetAddressRange gives the caching-allocator
 *    segment holding the tensor; cuIpcGetMemHandle on its base (handles name
 *    allocations, not interior pointers, so the offset travels beside it).
 *    It records an interprocess event (DISABLE_TIMING | INTERPROCESS, from a
 *    pool; cuIpcGetEventHandle once per pool event) on its stream after the
 *    producer's work. Descriptor: {seq, memHandle, offset, byteLength,
 *    eventSlot, eventHandle}.
 * 2. Receiver: cuIpcOpenMemHandle once per distinct memory handle, cached
 *    (NB: CUDA refuses to open the same allocation twice in one process, and
 *    opening costs a mapping); cuIpcOpenEventHandle once per sender event
 *    slot, cached. Its copy stream waits on its current stream (when they
 *    differ) and on the sender's event (cuStreamWaitEvent), copies device to
 *    device into its own allocation, records its own event.
 * 3. Receiver: when that event completes (cuEventSynchronize off the JS
 *    thread where the driver has eventWait, else eventQuery polled), `recv` resolves and an ack {seq}
 *    goes back. Sender: the ack resolves `done` and returns the event to the
 *    pool. Until then the pipe holds the storage, so the caching allocator
 *    cannot hand the block to anyone else (the recordStream-like hold).
 * 4. close(): the receiver closes every opened memory handle and destroys
 *    opened events; the sender destroys its events; pending work rejects.
 */
import { ProtocolError } from "../../errors/index.js";
import {
  CU_EVENT_DISABLE_TIMING,
  CU_EVENT_INTERPROCESS,
  CU_IPC_HANDLE_SIZE,
  CU_IPC_MEM_LAZY_ENABLE_PEER_ACCESS,
  type CudaIpcDriver,
} from "./driver.js";

/** What crosses from sender to receiver for one transfer. */
export interface IpcDescriptor {
  seq: number;
  device: number;
  memHandle: Uint8Array;
  offset: number;
  byteLength: number;
  eventSlot: number;
  eventHandle: Uint8Array;
}

const H = CU_IPC_HANDLE_SIZE;
/** seq u32, device u32, offset f64, byteLength f64, eventSlot u32, then the two handles. */
const DESCRIPTOR_BYTES = 4 + 4 + 8 + 8 + 4 + 2 * H;

export function encodeIpcDescriptor(d: IpcDescriptor): Uint8Array {
  const out = new Uint8Array(DESCRIPTOR_BYTES);
  const v = new DataView(out.buffer);
  v.setUint32(0, d.seq >>> 0, true);
  v.setUint32(4, d.device, true);
  v.setFloat64(8, d.offset, true);
  v.setFloat64(16, d.byteLength, true);
  v.setUint32(24, d.eventSlot, true);
  out.set(d.memHandle, 28);
  out.set(d.eventHandle, 28 + H);
  return out;
}

export function decodeIpcDescriptor(b: Uint8Array): IpcDescriptor {
  if (b.byteLength !== DESCRIPTOR_BYTES)
    throw new ProtocolError(`cuda_ipc: a descriptor has ${DESCRIPTOR_BYTES} bytes, got ${b.byteLength}`);
  const v = new DataView(b.buffer, b.byteOffset, b.byteLength);
  return {
    seq: v.getUint32(0, true),
    device: v.getUint32(4, true),
    offset: v.getFloat64(8, true),
    byteLength: v.getFloat64(16, true),
    eventSlot: v.getUint32(24, true),
    memHandle: b.slice(28, 28 + H),
    eventHandle: b.slice(28 + H, 28 + 2 * H),
  };
}

const key = (h: Uint8Array): string => Buffer.from(h).toString("hex");

interface PoolEvent {
  event: bigint;
  handle: Uint8Array;
  device: number;
}

/** The sending half: descriptors out, acks in. */
export class IpcSender {
  private seq = 0;
  private readonly events: PoolEvent[] = [];
  private readonly free: number[] = [];
  private readonly pending = new Map<number, { slot: number; resolve: () => void; reject: (e: Error) => void }>();
  private closedWith: Error | null = null;

  constructor(private readonly driver: CudaIpcDriver) {}

  /** Step 1 for the `byteLength` bytes at `ptr` on `device`; `done` settles on the ack. */
  send(device: number, ptr: bigint, byteLength: number): { descriptor: IpcDescriptor; done: Promise<void> } {
    if (this.closedWith) throw this.closedWith;
    const d = this.driver;
    const { base } = d.addressRange(device, ptr);
    const memHandle = d.ipcGetMemHandle(device, base);
    const slot = this.takeEvent(device);
    const ev = this.events[slot]!;
    d.eventRecord(device, ev.event, d.currentStream(device));
    const seq = this.seq++ >>> 0;
    const done = new Promise<void>((resolve, reject) => this.pending.set(seq, { slot, resolve, reject }));
    const descriptor = {
      seq,
      device,
      memHandle,
      offset: Number(ptr - base),
      byteLength,
      eventSlot: slot,
      eventHandle: ev.handle,
    };
    return { descriptor, done };
  }

  /** Step 3: the receiver's copy of `seq` is complete. */
  ack(seq: number): void {
    const p = this.pending.get(seq);
    if (!p) throw new ProtocolError(`cuda_ipc: an ack for transfer ${seq}, which is not pending`);
    this.pending.delete(seq);
    this.free.push(p.slot);
    p.resolve();
  }

  /** The receiver could not take transfer `seq`. */
  fail(seq: number, error: Error): void {
    const p = this.pending.get(seq);
    if (!p) return;
    this.pending.delete(seq);
    // NB: the event slot is not reused: the peer's stream may still wait on it.
    p.reject(error);
  }

  /** Transfers not acked yet. */
  get inFlight(): number {
    return this.pending.size;
  }

  close(error: Error): void {
    if (this.closedWith) return;
    this.closedWith = error;
    for (const p of this.pending.values()) p.reject(error);
    this.pending.clear();
    for (const e of this.events) this.driver.eventDestroy(e.device, e.event);
    this.events.length = 0;
  }

  private takeEvent(device: number): number {
    const i = this.free.findIndex((s) => this.events[s]!.device === device);
    if (i >= 0) return this.free.splice(i, 1)[0]!;
    const event = this.driver.eventCreate(device, CU_EVENT_DISABLE_TIMING | CU_EVENT_INTERPROCESS);
    this.events.push({ event, handle: this.driver.ipcGetEventHandle(device, event), device });
    return this.events.length - 1;
  }
}

/** The receiving half: descriptors in, copies on its stream, completion out. */
export class IpcReceiver {
  /** Opened memory handles: handle bytes -> mapped base. */
  private readonly mems = new Map<string, { device: number; base: bigint }>();
  /** Opened sender events: slot -> (handle, event). */
  private readonly events = new Map<number, { device: number; handle: string; event: bigint }>();
  private readonly own: { device: number; event: bigint }[] = [];
  private closedWith: Error | null = null;
  private readonly waiting = new Set<(e: Error) => void>();

  constructor(
    private readonly driver: CudaIpcDriver,
    /** How often to poll the receiver's event (ms); the first poll is immediate. */
    private readonly pollMs = 1,
  ) {}

  /** Step 2 and 3 into `into` (a pointer on `device`); resolves once the copy completed. */
  async recv(desc: IpcDescriptor, device: number, into: bigint): Promise<void> {
    if (this.closedWith) throw this.closedWith;
    const d = this.driver;
    const base = this.openMem(device, desc.memHandle);
    const peerEvent = this.openEvent(device, desc.eventSlot, desc.eventHandle);
    const stream = d.copyStream(device);
    const current = d.currentStream(device);
    const take = (): { device: number; event: bigint } =>
      this.own.pop() ?? { device, event: d.eventCreate(device, CU_EVENT_DISABLE_TIMING) };
    if (stream !== current) {
      // NB: the copy stream also waits for work already queued on the current stream for `into`
      // (its zero fill); a wait captures the event's state when queued, so the event goes back at once.
      const ready = take();
      d.eventRecord(device, ready.event, current);
      d.streamWaitEvent(device, stream, ready.event);
      this.own.push(ready);
    }
    d.streamWaitEvent(device, stream, peerEvent);
    d.copyDtoDAsync(device, into, base + BigInt(desc.offset), desc.byteLength, stream);
    const mine = take();
    d.eventRecord(device, mine.event, stream);
    try {
      if (d.eventWait) await this.guard(d.eventWait(device, mine.event));
      else await this.until(() => d.eventQuery(device, mine.event));
    } finally {
      if (!this.closedWith) this.own.push(mine);
      else d.eventDestroy(mine.device, mine.event);
    }
  }

  /** Distinct memory handles opened so far. */
  get openedHandles(): number {
    return this.mems.size;
  }

  close(error: Error): void {
    if (this.closedWith) return;
    this.closedWith = error;
    for (const fail of this.waiting) fail(error);
    this.waiting.clear();
    for (const m of this.mems.values()) this.driver.ipcCloseMemHandle(m.device, m.base);
    this.mems.clear();
    for (const e of this.events.values()) this.driver.eventDestroy(e.device, e.event);
    this.events.clear();
    for (const e of this.own) this.driver.eventDestroy(e.device, e.event);
    this.own.length = 0;
  }

  private openMem(device: number, handle: Uint8Array): bigint {
    const k = key(handle);
    const hit = this.mems.get(k);
    if (hit) return hit.base;
    const base = this.driver.ipcOpenMemHandle(device, handle, CU_IPC_MEM_LAZY_ENABLE_PEER_ACCESS);
    this.mems.set(k, { device, base });
    return base;
  }

  private openEvent(device: number, slot: number, handle: Uint8Array): bigint {
    const k = key(handle);
    const hit = this.events.get(slot);
    if (hit && hit.handle === k) return hit.event;
    if (hit) throw new ProtocolError(`cuda_ipc: the peer's event slot ${slot} changed its handle`);
    const event = this.driver.ipcOpenEventHandle(device, handle);
    this.events.set(slot, { device, handle: k, event });
    return event;
  }

  /** `p`, or close()'s error first. */
  private guard(p: Promise<void>): Promise<void> {
    return new Promise<void>((resolve, reject) => {
      const fail = (e: Error): void => reject(e);
      this.waiting.add(fail);
      p.then(
        () => (this.waiting.delete(fail), resolve()),
        (e: unknown) => (this.waiting.delete(fail), reject(e as Error)),
      );
    });
  }

  private until(ready: () => boolean): Promise<void> {
    return new Promise<void>((resolve, reject) => {
      const fail = (e: Error): void => reject(e);
      this.waiting.add(fail);
      const poll = (): void => {
        if (this.closedWith) return;
        let ok: boolean;
        try {
          ok = ready();
        } catch (e) {
          this.waiting.delete(fail);
          reject(e as Error);
          return;
        }
        if (ok) {
          this.waiting.delete(fail);
          resolve();
        } else setTimeout(poll, this.pollMs);
      };
      poll();
    });
  }
}
