/**
 * An in-memory stand-in for the libnccl calls of sdk/channel/nccl/driver.ts,
 * for two ranks in one process over ./gpu_standin.ts's memory: ranks that
 * call commInitRank with the same unique id meet (the call resolves only once
 * both joined, as NCCL's blocks), sends and recvs match in order per
 * direction and copy when both are posted. `failInit` makes a rank's
 * ncclCommInitRank fail with ncclSystemError (2). Every call is logged.
 */
import { NcclError, type NcclDriver } from "../../sdk/channel/nccl/driver.js";
import type { GpuWorld, StandinDriver } from "./gpu_standin.js";

interface Op {
  ptr: bigint;
  bytes: number;
  mem: StandinDriver;
  fence: { done: boolean };
}

export class NcclWorld {
  failInit = new Set<number>();
  private readonly joins = new Map<string, { ranks: Map<number, () => void> }>();
  private readonly sends = new Map<string, Op[]>();
  private readonly recvs = new Map<string, Op[]>();
  nextComm = 1n;
  constructor(readonly world: GpuWorld) {}

  join(id: Uint8Array, rank: number): Promise<void> {
    const k = Buffer.from(id).toString("hex");
    const j = this.joins.get(k) ?? { ranks: new Map() };
    this.joins.set(k, j);
    return new Promise<void>((resolve) => {
      j.ranks.set(rank, resolve);
      if (j.ranks.size === 2) for (const r of j.ranks.values()) r();
    });
  }
  post(kind: "send" | "recv", dir: string, op: Op): void {
    (kind === "send" ? this.sends : this.recvs).set(dir, [
      ...((kind === "send" ? this.sends : this.recvs).get(dir) ?? []),
      op,
    ]);
    const s = this.sends.get(dir) ?? [];
    const r = this.recvs.get(dir) ?? [];
    while (s.length > 0 && r.length > 0) {
      const a = s.shift()!;
      const b = r.shift()!;
      if (a.bytes !== b.bytes) throw new Error(`stand-in nccl: send of ${a.bytes} matched a recv of ${b.bytes}`);
      b.mem.view(b.ptr, b.bytes).set(a.mem.view(a.ptr, a.bytes));
      a.fence.done = b.fence.done = true;
    }
  }
}

export class NcclStandin implements NcclDriver {
  private rank = -1;
  private last: { done: boolean } = { done: true };
  constructor(
    readonly nw: NcclWorld,
    readonly mem: StandinDriver,
  ) {}
  private note(s: string): void {
    this.nw.world.log.push(`${this.mem.proc} ${s}`);
  }
  getUniqueId(): Uint8Array {
    this.note("ncclGetUniqueId");
    const id = new Uint8Array(128);
    id[0] = 42;
    return id;
  }
  async commInitRank(device: number, nranks: number, id: Uint8Array, rank: number): Promise<bigint> {
    this.note(`ncclCommInitRank nranks=${nranks} rank=${rank} device=${device} id[0]=${id[0]}`);
    if (this.nw.failInit.has(rank)) throw new NcclError("ncclCommInitRank", 2, "stand-in: no GPU for this rank");
    this.rank = rank;
    await this.nw.join(id, rank);
    return this.nw.nextComm++;
  }
  commAbort(comm: bigint): void {
    this.note(`ncclCommAbort comm${comm}`);
  }
  commDestroy(comm: bigint): void {
    this.note(`ncclCommDestroy comm${comm}`);
  }
  streamCreate(device: number): bigint {
    this.note(`cuStreamCreate device=${device}`);
    return 30n + BigInt(this.rank);
  }
  send(comm: bigint, ptr: bigint, bytes: number, peer: number, stream: bigint): void {
    this.note(`ncclSend ${bytes} peer=${peer} s${stream}`);
    this.last = { done: false };
    this.nw.post("send", `${this.rank}->${peer}`, { ptr, bytes, mem: this.mem, fence: this.last });
  }
  recv(comm: bigint, ptr: bigint, bytes: number, peer: number, stream: bigint): void {
    this.note(`ncclRecv ${bytes} peer=${peer} s${stream}`);
    this.last = { done: false };
    this.nw.post("recv", `${peer}->${this.rank}`, { ptr, bytes, mem: this.mem, fence: this.last });
  }
  fence(): () => boolean {
    const f = this.last;
    return () => f.done;
  }
}
