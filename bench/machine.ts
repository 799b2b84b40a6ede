/**
 * What the benchmarks print about the machine they ran on (issue 23): the CPU model and its cores,
 * and how fast one thread copies memory. Ratios against PyTorch RPC are measured in one run and
 * travel between machines; absolute figures do not. A 400 MB round trip copies its bytes at least
 * once each way, so on a machine whose memcpy moves 5 GB/s it cannot come near what it does on one
 * that moves 11 (docs/architecture.md, "shm under load", has both).
 */
import os from "node:os";
import { median } from "./rpc_common.js";

/** Median milliseconds to copy `bytes` on this thread into memory already written (TypedArray.set: memmove). */
export function memcpyMs(bytes: number, reps = 5): number {
  const src = new Uint8Array(bytes).fill(1);
  const dst = new Uint8Array(bytes).fill(2); // NB: written once, so the copies below do not page-fault
  const times: number[] = [];
  for (let i = 0; i < reps; i++) {
    const t0 = process.hrtime.bigint();
    dst.set(src);
    times.push(Number(process.hrtime.bigint() - t0) / 1e6);
  }
  return median(times);
}

/** "Machine: <CPU model>, N logical cores, M GiB; memcpy of 400 MB on one thread X ms (Y GB/s)". */
export function machineLine(copyBytes = 400_000_000): string {
  const cpus = os.cpus();
  const model = cpus[0]?.model.trim() || "unknown CPU";
  const ms = memcpyMs(copyBytes);
  const gbs = copyBytes / (ms / 1e3) / 1e9;
  return (
    `Machine: ${model}, ${cpus.length} logical cores, ${(os.totalmem() / 2 ** 30).toFixed(0)} GiB; ` +
    `memcpy of ${copyBytes / 1e6} MB into warm memory on one thread ${ms.toFixed(1)} ms (${gbs.toFixed(1)} GB/s), ` +
    `measured before the runs`
  );
}
