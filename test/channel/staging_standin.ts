/**
 * The cuda_staging driver over ./gpu_standin.ts's memory: pinned blocks are
 * plain host memory (logged "cuMemHostAlloc n"), copies and fences logged.
 * With world.autoComplete false, copies are queued and happen, in order, at
 * world.completeAll() — so a sender that read a slot before its fence passed
 * would send stale bytes, and the test would see them. Also an in-memory
 * HostLane pair.
 */
import type { HostLane, StagingDriver } from "../../sdk/channel/cuda_staging/staging.js";
import type { GpuWorld, StandinDriver } from "./gpu_standin.js";

export class StagingStandin implements StagingDriver {
  private readonly queued: (() => void)[] = [];
  private fences = 0;
  constructor(
    readonly world: GpuWorld,
    readonly mem: StandinDriver,
  ) {
    const complete = world.completeAll.bind(world);
    world.completeAll = () => {
      for (const q of this.queued.splice(0)) q();
      complete();
    };
  }
  private note(s: string): void {
    this.world.log.push(`${this.mem.proc} ${s}`);
  }
  private run(f: () => void): void {
    if (this.world.autoComplete) f();
    else this.queued.push(f);
  }
  pinned(bytes: number): Uint8Array {
    this.note(`cuMemHostAlloc ${bytes}`);
    return new Uint8Array(bytes);
  }
  stream(device: number): bigint {
    return BigInt(20 + device);
  }
  dtoh(_device: number, ptr: bigint, offset: number, dst: Uint8Array, stream: bigint): void {
    this.note(`cuMemcpyDtoHAsync ${offset}+${dst.byteLength} s${stream}`);
    this.run(() => dst.set(this.mem.view(ptr + BigInt(offset), dst.byteLength)));
  }
  htod(_device: number, ptr: bigint, offset: number, src: Uint8Array, stream: bigint): void {
    this.note(`cuMemcpyHtoDAsync ${offset}+${src.byteLength} s${stream}`);
    const copy = src.slice(); // NB: the bytes as they are now; the slot may be refilled only after the fence
    this.run(() => this.mem.view(ptr + BigInt(offset), copy.byteLength).set(copy));
  }
  fence(_device: number, stream: bigint): () => boolean {
    const e = this.world.newEvent();
    this.note(`cuEventRecord fence${++this.fences} s${stream}`);
    e.recorded = true;
    e.done = this.world.autoComplete;
    return () => e.done;
  }
}

/** Two ends of an in-memory host lane (chunks copied on send, delivered in order). */
export function lanePair(): [HostLane, HostLane] {
  const queue: Uint8Array[] = [];
  const waiters: ((b: Uint8Array) => void)[] = [];
  const tx: HostLane = {
    send(bytes) {
      const c = bytes.slice();
      const w = waiters.shift();
      if (w) w(c);
      else queue.push(c);
      return Promise.resolve();
    },
    recv() {
      return Promise.reject(new Error("the sending end does not receive"));
    },
  };
  const rx: HostLane = {
    send() {
      return Promise.reject(new Error("the receiving end does not send"));
    },
    async recv(into) {
      const c = queue.shift() ?? (await new Promise<Uint8Array>((r) => waiters.push(r)));
      if (c.byteLength !== into.byteLength)
        throw new Error(`lane: chunk of ${c.byteLength}, slot of ${into.byteLength}`);
      into.set(c);
    },
  };
  return [tx, rx];
}
