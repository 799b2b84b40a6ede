/**
 * Where a round trip's time goes over shm, p2p beside rpcSync (issue #18): a diagnostic, not part of
 * `npm run bench`. `npm run build` then
 *
 *   node dist/bench/p2p_timeline.js [bytes=4000000] [count=400] [block=0]
 *
 * block 0: `count` p2p round trips, then `count` rpcSync ones (each kind in its own steady state; after
 * bench/rpc_common.ts's JIT warm-up and one untimed pass of both). block > 0: the two alternate in blocks
 * of `block` calls, as bench/collectives.ts does (block 1: call by call), and each figure is also split by
 * the call's place in its block (#1, #2, later), with `pause` ms of idle before each block. Both processes load ./p2p_tl_hook.ts, which stamps the
 * pipe's send, the land copy, a frame's arrival and its delivery; a round trip's segments are printed as
 * medians (a segment across processes, "wire", includes waiting for a core), with the garbage collections
 * that started inside each kind's round trips, per process, and their pauses per round trip.
 */
import * as sdk from "../sdk/index.js";
import { type Tensor, rpc } from "../sdk/index.js";
import { startLocalWorkers } from "../sdk/rpc/launcher.js";
import { EV, nowNs } from "./p2p_tl_hook.js";
import { identity, median, warmUp } from "./rpc_common.js";

declare const tprpc: typeof import("../sdk/index.js");
(globalThis as Record<string, unknown>).tprpc = sdk;

/** The worker's side: `count` times, receive from rank 0 and send it back. */
async function echoLoop(nbytes: number, count: number): Promise<void> {
  const t = tprpc.zeros([nbytes / 4]);
  for (let i = 0; i < count; i++) {
    await tprpc.distributed.recv(t, 0);
    await tprpc.distributed.send(t, 0);
  }
}

/** This process's log so far, emptied (shipped: the worker answers it too). */
function takeLog(): number[] {
  const log = (globalThis as unknown as { __tl: number[] }).__tl;
  return log.splice(0);
}

type Ev = [e: number, t: number];
const pairs = (l: number[]): Ev[] => Array.from({ length: l.length / 2 }, (_, i) => [l[2 * i]!, l[2 * i + 1]!]);
const first = (l: Ev[], e: number, after = -Infinity) => l.find(([x, t]) => x === e && t >= after)?.[1];

/** Segment name -> µs, for one round trip: rank 0's events `m` and the worker's `w` (matched by time). */
function segments(m: Ev[], w: Ev[][]): Record<string, number> | null {
  const at = (e: number, after?: number) => first(m, e, after);
  const [t0, sIn, lIn, lOut, sOut] = [at(EV.start), at(EV.sendIn), at(EV.landIn), at(EV.landOut), at(EV.sendOut)];
  if (t0 === undefined || sIn === undefined || lIn === undefined || lOut === undefined || sOut === undefined)
    return null;
  const fIn = at(EV.frameIn, sOut);
  const end = at(EV.end);
  if (fIn === undefined || end === undefined) return null;
  const d0 = at(EV.delivIn, fIn) ?? fIn;
  const d1 = at(EV.delivOut, d0) ?? d0;
  // the worker's frame of this round trip: the one that arrived between our send and the reply
  const W = w.find((g) => g[0]![1] > sIn && g[0]![1] < fIn);
  if (!W) return null;
  const wf = W[0]![1];
  const wd = first(W, EV.delivIn) ?? wf;
  const ws = first(W, EV.sendIn, wd);
  const wl = ws === undefined ? undefined : first(W, EV.landIn, ws);
  const wlo = wl === undefined ? undefined : first(W, EV.landOut, wl);
  const wso = wlo === undefined ? undefined : first(W, EV.sendOut, wlo);
  if (ws === undefined || wl === undefined || wlo === undefined || wso === undefined) return null;
  const us = (a: number, b: number) => (b - a) / 1e3;
  return {
    "rank 0: start -> pipe send": us(t0, sIn),
    "rank 0: land copy": us(lIn, lOut),
    "rank 0: pipe send, rest": us(sIn, sOut) - us(lIn, lOut),
    "wire: rank 0 -> worker frame": us(sOut, wf),
    "worker: frame -> delivery": us(wf, wd),
    "worker: delivery -> pipe send": us(wd, ws),
    "worker: land copy": us(wl, wlo),
    "worker: pipe send, rest": us(ws, wso) - us(wl, wlo),
    "wire: worker -> rank 0 frame": us(wso, fIn),
    "rank 0: frame -> delivery": us(fIn, d0),
    "rank 0: delivery -> end": us(d0, end),
    total: us(t0, end),
  };
}

const [bytesArg = "4000000", countArg = "400", blockArg = "0", pauseArg = "0"] = process.argv.slice(2);
const n = Number(bytesArg);
const count = Number(countArg);
const block = Number(blockArg);
const pause = Number(pauseArg);
const hook = new URL("./p2p_tl_hook.js", import.meta.url).href;
const cluster = await startLocalWorkers({ workers: 1, env: { TPRPC_CHANNELS: "shm" }, nodeArgs: ["--import", hook] });
try {
  await rpc.initRpc("master", {
    ...cluster.initOptions,
    rpcTimeoutMs: 300_000,
    initTimeoutMs: 30_000,
    channels: "shm",
  });
  await warmUp("worker1", false);
  const t = sdk.ones([n / 4]);
  const x = sdk.ones([n / 4]);
  const log = (globalThis as unknown as { __tl: number[] }).__tl;
  const p2p = async (y: Tensor) => {
    await sdk.distributed.send(y, 1);
    await sdk.distributed.recv(y, 1);
  };
  const order: string[] =
    block > 0
      ? Array.from({ length: 2 * count }, (_, i) => (Math.floor(i / block) % 2 === 0 ? "p2p" : "rpcSync"))
      : [...Array<string>(count).fill("p2p"), ...Array<string>(count).fill("rpcSync")];
  const p2pCount = order.filter((k) => k === "p2p").length;
  let main: Ev[] = [];
  let worker: Ev[] = [];
  // NB: pass 0 is untimed (the 4 MB paths' own JIT warm-up and landing blocks)
  for (let pass = 0; pass < 2; pass++) {
    await rpc.rpcSync("worker1", takeLog, []);
    log.length = 0;
    const echo = rpc.rpcAsync("worker1", echoLoop, [n, p2pCount]);
    for (const [i, k] of order.entries()) {
      // NB: as bench/collectives.ts, optionally an idle pause before each block (the GCs it schedules run there)
      if (block > 0 && i % block === 0 && pause > 0) await new Promise((r) => setTimeout(r, pause));
      log.push(EV.start, nowNs());
      if (k === "p2p") await p2p(t);
      else await rpc.rpcSync("worker1", identity, [x]);
      log.push(EV.end, nowNs());
    }
    await echo;
    main = pairs(takeLog());
    worker = pairs(await rpc.rpcSync<number[]>("worker1", takeLog, []));
  }
  if (process.env.TL_JSON)
    (await import("node:fs")).writeFileSync(process.env.TL_JSON, JSON.stringify({ main, worker, order }));
  // rank 0's events by round trip; the worker's by frame
  const rts: Ev[][] = [];
  for (const ev of main) {
    if (ev[0] === EV.start) rts.push([]);
    if (ev[0] !== EV.gcStart && ev[0] !== EV.gcEnd) rts[rts.length - 1]?.push(ev);
  }
  const frames: Ev[][] = [];
  for (const ev of worker) {
    if (ev[0] === EV.frameIn) frames.push([]);
    frames[frames.length - 1]?.push(ev);
  }
  const gcs = (evs: Ev[]) => {
    const s = evs.filter(([e]) => e === EV.gcStart).map(([, v]) => v);
    const e = evs.filter(([x]) => x === EV.gcEnd).map(([, v]) => v);
    return s.map((a, i) => [a, e[i]!] as const);
  };
  const gcMain = gcs(main);
  const gcWorker = gcs(worker);
  const groups = new Map<
    string,
    { segs: Record<string, number[]>; gc: [number, number, number, number]; trips: number }
  >();
  for (const [i, m] of rts.entries()) {
    const k = order[i]!;
    const place = block > 1 ? (i % block === 0 ? " #1" : i % block === 1 ? " #2" : " later") : "";
    const g = groups.get(k + place) ?? { segs: {}, gc: [0, 0, 0, 0], trips: 0 };
    groups.set(k + place, g);
    g.trips++;
    const t0 = m[0]![1];
    const t1 = m[m.length - 1]![1];
    for (const [j, list] of [gcMain, gcWorker].entries())
      for (const [a, b] of list)
        if (a >= t0 && a < t1) {
          g.gc[2 * j]! += 1;
          g.gc[2 * j + 1]! += (b - a) / 1e3;
        }
    const s = segments(m, frames);
    if (s) for (const [name, v] of Object.entries(s)) (g.segs[name] ??= []).push(v);
  }
  const names = [...groups.keys()].sort();
  console.log(
    `shm, ${n} B, ${block > 0 ? `blocks of ${block}` : "one kind at a time"}: medians in us` +
      " (a segment across processes includes waiting for a core)",
  );
  console.log("".padEnd(32) + names.map((k) => k.padStart(14)).join(""));
  for (const seg of Object.keys(groups.get(names[0]!)!.segs))
    console.log(
      seg.padEnd(32) +
        names
          .map((k) =>
            median(groups.get(k)!.segs[seg] ?? [0])
              .toFixed(0)
              .padStart(14),
          )
          .join(""),
    );
  console.log(
    "GCs started inside".padEnd(32) +
      names
        .map((k) => {
          const [mc, , wc] = groups.get(k)!.gc;
          return `${mc}+${wc}`.padStart(14);
        })
        .join("") +
      "   (rank 0 + worker, count)",
  );
  // NB: what those collections held the main threads for (PerformanceObserver's durations), per round trip
  console.log(
    "GC pauses per round trip, ms".padEnd(32) +
      names
        .map((k) => {
          const g = groups.get(k)!;
          return `${(g.gc[1] / 1e3 / g.trips).toFixed(1)}+${(g.gc[3] / 1e3 / g.trips).toFixed(1)}`.padStart(14);
        })
        .join("") +
      "   (rank 0 + worker)",
  );
  await rpc.shutdown({ timeoutMs: 10_000 });
} finally {
  await rpc.shutdown({ graceful: false, timeoutMs: 5_000 }).catch(() => undefined);
  await cluster.close();
}
