/**
 * Stand-ins for the GPU channel tests (cuda_ipc, cuda_staging, nccl), in
 * memory: two "processes" A and B whose device memory is host memory, with an
 * IPC handle registry they share, and one call log for both, in call order
 * (each line "<proc> <call> <args>"; the tests print it on failure).
 * - Segments come from alloc(); handles name a segment and its generation, so
 *   a segment freed and allocated again gets a new handle, as in CUDA.
 * - Opening a handle twice in one process throws (CUDA refuses it too).
 * - Events complete when the world's `autoComplete` is true at record time,
 *   or when the test calls completeAll(); copies happen at once.
 * Also a bootstrap pair: two ChannelBootstraps joined in memory.
 */
import type { Capabilities, ChannelBootstrap, SetupValue } from "../../sdk/channel/interface.js";
import type { CudaIpcDriver } from "../../sdk/channel/cuda_ipc/driver.js";

interface Seg {
  id: number;
  bytes: Uint8Array;
}
interface Ev {
  id: number;
  recorded: boolean;
  done: boolean;
}

export class GpuWorld {
  readonly log: string[] = [];
  autoComplete = true;
  private nextId = 1;
  private readonly handles = new Map<string, Seg | Ev>();
  private readonly events: Ev[] = [];

  id(): number {
    return this.nextId++;
  }
  handleOf(x: Seg | Ev, kind: "mem" | "ev"): Uint8Array {
    const h = new Uint8Array(64);
    new TextEncoder().encodeInto(`${kind}:${x.id}`, h);
    this.handles.set(Buffer.from(h).toString("hex"), x);
    return h;
  }
  resolve<T extends Seg | Ev>(h: Uint8Array): T {
    const x = this.handles.get(Buffer.from(h).toString("hex"));
    if (!x) throw new Error("CUDA_ERROR_INVALID_HANDLE");
    return x as T;
  }
  newEvent(): Ev {
    const e = { id: this.id(), recorded: false, done: false };
    this.events.push(e);
    return e;
  }
  completeAll(): void {
    for (const e of this.events) if (e.recorded) e.done = true;
  }
}

/** One process's driver over the world. Pointers are 1<<32 * mapping + offset. */
export class StandinDriver implements CudaIpcDriver {
  private readonly maps = new Map<bigint, Seg>();
  private readonly opened = new Set<number>();
  private readonly evs = new Map<bigint, Ev>();
  private nextMap = 1n;

  constructor(
    readonly world: GpuWorld,
    readonly proc: string,
  ) {}

  private note(s: string): void {
    this.world.log.push(`${this.proc} ${s}`);
  }
  private seg(p: bigint): { seg: Seg; base: bigint } {
    const base = (p >> 32n) << 32n;
    const seg = this.maps.get(base);
    if (!seg || p - base >= BigInt(seg.bytes.byteLength))
      throw new Error(`CUDA_ERROR_INVALID_VALUE: 0x${p.toString(16)}`);
    return { seg, base };
  }
  private ev(e: bigint): Ev {
    const x = this.evs.get(e);
    if (!x) throw new Error("CUDA_ERROR_INVALID_HANDLE: event");
    return x;
  }

  /** A caching-allocator segment of `size` bytes (the test's allocation); its base. */
  alloc(size: number): bigint {
    const base = this.nextMap++ << 32n;
    this.maps.set(base, { id: this.world.id(), bytes: new Uint8Array(size) });
    return base;
  }
  free(base: bigint): void {
    this.note(`free seg${this.maps.get(base)!.id}`);
    this.maps.delete(base);
  }
  view(p: bigint, n: number): Uint8Array {
    const { seg, base } = this.seg(p);
    const o = Number(p - base);
    return seg.bytes.subarray(o, o + n);
  }

  addressRange(_device: number, ptr: bigint): { base: bigint; size: number } {
    const { seg, base } = this.seg(ptr);
    this.note(`cuMemGetAddressRange seg${seg.id}+${ptr - base}`);
    return { base, size: seg.bytes.byteLength };
  }
  ipcGetMemHandle(_device: number, base: bigint): Uint8Array {
    const { seg } = this.seg(base);
    this.note(`cuIpcGetMemHandle seg${seg.id}`);
    return this.world.handleOf(seg, "mem");
  }
  ipcOpenMemHandle(_device: number, handle: Uint8Array, flags: number): bigint {
    const seg = this.world.resolve<Seg>(handle);
    this.note(`cuIpcOpenMemHandle seg${seg.id} flags=${flags}`);
    if (this.opened.has(seg.id)) throw new Error("CUDA_ERROR_ALREADY_MAPPED");
    this.opened.add(seg.id);
    const base = this.nextMap++ << 32n;
    this.maps.set(base, seg);
    return base;
  }
  ipcCloseMemHandle(_device: number, base: bigint): void {
    const { seg } = this.seg(base);
    this.note(`cuIpcCloseMemHandle seg${seg.id}`);
    this.opened.delete(seg.id);
    this.maps.delete(base);
  }
  eventCreate(_device: number, flags: number): bigint {
    const e = this.world.newEvent();
    this.note(`cuEventCreate ev${e.id} flags=${flags}`);
    this.evs.set(BigInt(e.id), e);
    return BigInt(e.id);
  }
  ipcGetEventHandle(_device: number, event: bigint): Uint8Array {
    this.note(`cuIpcGetEventHandle ev${event}`);
    return this.world.handleOf(this.ev(event), "ev");
  }
  ipcOpenEventHandle(_device: number, handle: Uint8Array): bigint {
    const e = this.world.resolve<Ev>(handle);
    this.note(`cuIpcOpenEventHandle ev${e.id}`);
    const local = BigInt(1000 + e.id);
    this.evs.set(local, e);
    return local;
  }
  eventRecord(_device: number, event: bigint, stream: bigint): void {
    const e = this.ev(event);
    this.note(`cuEventRecord ev${e.id} s${stream}`);
    e.recorded = true;
    e.done = this.world.autoComplete;
  }
  eventQuery(_device: number, event: bigint): boolean {
    return this.ev(event).done;
  }
  eventDestroy(_device: number, event: bigint): void {
    this.note(`cuEventDestroy ev${this.ev(event).id}`);
    this.evs.delete(event);
  }
  streamWaitEvent(_device: number, stream: bigint, event: bigint): void {
    const e = this.ev(event);
    this.note(`cuStreamWaitEvent s${stream} ev${e.id}${e.recorded ? "" : " (never recorded)"}`);
  }
  copyDtoDAsync(_device: number, dst: bigint, src: bigint, bytes: number, stream: bigint): void {
    this.note(`cuMemcpyDtoDAsync ${bytes} s${stream}`);
    this.view(dst, bytes).set(this.view(src, bytes));
  }
  currentStream(device: number): bigint {
    return BigInt(7 + device);
  }
  /** The current stream unless the test gave a dedicated one (`copyStreams`). */
  copyStream(device: number): bigint {
    return this.copyStreams.get(device) ?? this.currentStream(device);
  }
  readonly copyStreams = new Map<number, bigint>();
}

const caps = (name: string): Capabilities => ({
  version: 1,
  name,
  host: { hostname: "h", bootId: "b", namespaces: {}, pid: 1, uid: 0 },
  devices: { cpu: 1, cuda: 1 },
  channels: [],
});

/** Two bootstraps joined in memory (messages delivered in order, on a later microtask). */
export function bootstrapPair(channel: string): [ChannelBootstrap, ChannelBootstrap, () => void] {
  const inbox: [SetupValue[], SetupValue[]] = [[], []];
  const listeners: [((m: SetupValue) => void) | null, ((m: SetupValue) => void) | null] = [null, null];
  const closers: ((e: Error | null) => void)[] = [];
  let open = true;
  const make = (me: 0 | 1): ChannelBootstrap => {
    const peer = (1 - me) as 0 | 1;
    return {
      role: me === 0 ? "connector" : "acceptor",
      peerName: me === 0 ? "B" : "A",
      local: caps(me === 0 ? "A" : "B"),
      remote: caps(me === 0 ? "B" : "A"),
      remoteAdvert: { name: channel, priorities: {}, domain: "d" },
      pairs: ["cuda-cuda"],
      secret: "s",
      host: "127.0.0.1",
      timeoutMs: 5000,
      send(msg) {
        if (!open) return Promise.reject(new Error("pipe closed"));
        // NB: as the pipe does, the message is serialized (here: cloned) before send returns
        const copy = structuredClone(msg);
        queueMicrotask(() => (listeners[peer] ? listeners[peer]!(copy) : inbox[peer].push(copy)));
        return Promise.resolve();
      },
      onMessage(cb) {
        listeners[me] = cb;
        for (const m of inbox[me].splice(0)) cb(m);
      },
      onClose(cb) {
        closers.push(cb);
      },
    };
  };
  const close = (): void => {
    open = false;
    for (const c of closers) c(null);
  };
  return [make(0), make(1), close];
}
