/**
 * Small-op speed (issue 23, items 1 and 3): the compute of the three end-to-end workloads, without
 * RPC, in one process, beside their PyTorch twin (bench/smallops_torch.py, one long-lived child
 * that runs the same workload on command), interleaved round by round so both see the same load.
 *
 *   npm run build && node dist/bench/smallops.js [--rounds 3] [--threads 1] [--profile] [--only fedavg,gpt,a3c]
 *
 * Workloads (the same on both sides; timings are per unit):
 *  - fedavg: notebook 03's client step: MLP 784-200-200-10, batch 50 drawn by indexSelect from 20,000
 *    examples through a randperm, crossEntropy, zeroGrad, backward, SGD(lr 0.05, momentum 0.9).
 *    Reported per step and per 400-step epoch.
 *  - gpt: one micro-batch of notebook 04's GPT (8 x 64 tokens; 4 layers, 128 wide, 4 heads): forward,
 *    crossEntropy, backward (accumulating into .grad), and every 4th micro-batch an AdamW step.
 *  - a3c: one actor update of bench/e2e_a3c.ts with a local server: up to 20 CartPole steps (a noGrad
 *    forward of Linear 4-128 + heads 2 and 1, softmax, multinomial each), the n-step loss, backward,
 *    an Adam step and the weights copied back. Reported as environment steps per second.
 *
 * --profile wraps the kernel backend and prints, per workload, where the time goes: each kernel
 * (native addon or TypeScript reference) by op, its calls and time, and the rest, the framework
 * (dispatch, allocation, autograd bookkeeping), plus GC pauses and bytes allocated. The profile
 * is a separate pass (its wrappers cost time), never mixed into the ratio rounds.
 *
 * NB: the ratio (ours / torch's time, < 1 is faster) is the figure to read; absolute times on a
 * shared machine are not.
 */
import { spawn } from "node:child_process";
import path from "node:path";
import { PerformanceObserver } from "node:perf_hooks";
import { createInterface } from "node:readline";
import { fileURLToPath } from "node:url";
import * as tp from "../sdk/index.js";
import type { Tensor } from "../sdk/index.js";
import { getBackend as currentRouter, registerBackend, setBackend } from "../sdk/tensor/backend/registry.js";
import type { Backend } from "../sdk/tensor/backend/interface.js";
import { Storage } from "../sdk/tensor/storage.js";
import { type DType, itemSize } from "../sdk/tensor/dtype.js";
import { poolStats } from "../sdk/tensor/pool.js";
import { GC_KINDS } from "./rpc_common.js";

const argv = process.argv;
const arg = (name: string, dflt: string): string => {
  const i = argv.indexOf(name);
  return i >= 0 ? argv[i + 1]! : dflt;
};
const ROUNDS = Number(arg("--rounds", "3"));
const THREADS = Number(arg("--threads", "1"));
const ONLY = arg("--only", "fedavg,gpt,a3c").split(",");
const PROFILE = argv.includes("--profile");
const TORCH = !argv.includes("--no-torch");

tp.setNumThreads(THREADS);

// ---------------------------------------------------------------- workloads

interface Workload {
  /** Runs `n` units; returns nothing (timed by the caller). */
  run(n: number): void;
  unit: string;
  /** Units per timed sample. */
  n: number;
}

function fedavg(): Workload {
  tp.manualSeed(1000);
  const N = 20_000;
  const x = tp.rand([N, 784]);
  const y = tp.randint(0, 10, [N]);
  const model = new tp.nn.Sequential(
    new tp.nn.Linear(784, 200),
    new tp.nn.ReLU(),
    new tp.nn.Linear(200, 200),
    new tp.nn.ReLU(),
    new tp.nn.Linear(200, 10),
  );
  const opt = new tp.optim.SGD(model.parameters(), { lr: 0.05, momentum: 0.9 });
  let perm = tp.randperm(N);
  let i = 0;
  return {
    unit: "step",
    n: 100,
    run(n) {
      for (let s = 0; s < n; s++) {
        if (i + 50 > N) {
          perm = tp.randperm(N);
          i = 0;
        }
        const idx = perm.narrow(0, i, 50);
        i += 50;
        const loss = tp.nn.functional.crossEntropy(model.forward(x.indexSelect(0, idx)), y.indexSelect(0, idx));
        opt.zeroGrad();
        loss.backward();
        opt.step();
      }
    },
  };
}

function gpt(): Workload {
  tp.manualSeed(0);
  const V = 70;
  const model = new tp.nn.GPT({ vocabSize: V, nLayer: 4, nEmbd: 128, nHead: 4, blockSize: 64, tieWeights: false });
  const opt = new tp.optim.AdamW(model.parameters(), { lr: 3e-3, weightDecay: 0.01 });
  let k = 0;
  return {
    unit: "micro-batch",
    n: 4,
    run(n) {
      for (let s = 0; s < n; s++) {
        if (k % 4 === 0) opt.zeroGrad();
        const x = tp.randint(0, V, [8, 64]);
        const y = tp.randint(0, V, [8, 64]);
        const { loss } = model.forward(x, y);
        loss!.div(4).backward();
        if (++k % 4 === 0) opt.step();
      }
    },
  };
}

class ActorCritic extends tp.nn.Module {
  fc = new tp.nn.Linear(4, 128);
  policy = new tp.nn.Linear(128, 2);
  value = new tp.nn.Linear(128, 1);
  forward(x: Tensor): [Tensor, Tensor] {
    const h = this.fc.forward(x).relu();
    return [this.policy.forward(h), this.value.forward(h)];
  }
}

function a3c(): Workload {
  tp.manualSeed(100);
  const server = new ActorCritic();
  const sopt = new tp.optim.Adam(server.parameters(), { lr: 2e-3 });
  const net = new ActorCritic();
  let lcg = 100;
  const rand = (): number => {
    lcg = (Math.imul(lcg, 1664525) + 1013904223) >>> 0;
    return lcg / 4294967296;
  };
  let state = [0, 0, 0, 0];
  let t = 0;
  const reset = (): number[] => {
    state = state.map(() => rand() * 0.1 - 0.05);
    t = 0;
    return [...state];
  };
  const envStep = (action: number): { obs: number[]; terminated: boolean; truncated: boolean } => {
    const [x, xDot, theta, thetaDot] = state as [number, number, number, number];
    const force = action === 1 ? 10 : -10;
    const cos = Math.cos(theta);
    const sin = Math.sin(theta);
    const temp = (force + 0.05 * thetaDot * thetaDot * sin) / 1.1;
    const thetaAcc = (9.8 * sin - cos * temp) / (0.5 * (4 / 3 - (0.1 * cos * cos) / 1.1));
    const xAcc = temp - (0.05 * thetaAcc * cos) / 1.1;
    state = [x + 0.02 * xDot, xDot + 0.02 * xAcc, theta + 0.02 * thetaDot, thetaDot + 0.02 * thetaAcc];
    t++;
    const terminated = Math.abs(state[0]!) > 2.4 || Math.abs(state[2]!) > (12 * 2 * Math.PI) / 360;
    return { obs: [...state], terminated, truncated: !terminated && t >= 500 };
  };
  let weights = server.parameters().map((p) => p.detach());
  let obs = reset();
  return {
    unit: "env step",
    n: 0, // set per run: the steps actually taken
    run(updates) {
      let steps = 0;
      for (let u = 0; u < updates; u++) {
        tp.noGrad(() => net.parameters().forEach((p, i) => p.copy_(weights[i]!)));
        const states: number[][] = [];
        const actions: number[] = [];
        const rewards: number[] = [];
        let terminated = false;
        let ended = false;
        let lastObs = obs;
        for (let k = 0; k < 20 && !ended; k++) {
          const probs = tp.noGrad(() => net.forward(tp.tensor([obs]))[0].softmax(-1));
          const action = tp.multinomial(probs, 1).item();
          const r = envStep(action);
          states.push(obs);
          actions.push(action);
          rewards.push(1);
          obs = lastObs = r.obs;
          if (r.terminated || r.truncated) {
            terminated = r.terminated;
            ended = true;
            obs = reset();
          }
        }
        let R = terminated ? 0 : tp.noGrad(() => net.forward(tp.tensor([lastObs]))[1].item());
        const returns = rewards.map(() => 0);
        for (let k = rewards.length - 1; k >= 0; k--) returns[k] = R = rewards[k]! + 0.99 * R;
        const [logits, values] = net.forward(tp.tensor(states));
        const logProbs = logits.logSoftmax(-1);
        const v = values.squeeze(-1);
        const ret = tp.tensor(returns);
        const advantage = ret.sub(v.detach());
        const taken = logProbs
          .gather(
            1,
            tp.tensor(
              actions.map((a) => [a]),
              { dtype: "int64" },
            ),
          )
          .squeeze(-1);
        const entropy = logProbs.exp().mul(logProbs).sum(-1).neg().mean();
        const loss = taken.mul(advantage).mean().neg().add(ret.sub(v).pow(2).mean().mul(0.5)).sub(entropy.mul(0.01));
        net.zeroGrad();
        loss.backward();
        // the server's push: gradients in, Adam step, weights out
        const grads = net.parameters().map((p) => p.grad!);
        server.parameters().forEach((p, i) => (p.grad = grads[i]!));
        sopt.step();
        sopt.zeroGrad();
        weights = server.parameters().map((p) => p.detach());
        steps += rewards.length;
      }
      this.n = steps;
    },
  };
}

const makers: Record<string, () => Workload> = { fedavg, gpt, a3c };
const runsPer: Record<string, number> = { fedavg: 100, gpt: 4, a3c: 30 };

// ---------------------------------------------------------------- torch twin

class Torch {
  private lines: string[] = [];
  private waiting: ((l: string) => void) | null = null;
  private proc;
  constructor() {
    const here = path.dirname(fileURLToPath(import.meta.url));
    const script = path.resolve(here, "../../bench/smallops_torch.py");
    const python = process.env.TPRPC_TORCH_PYTHON ?? "/usr/bin/python3";
    this.proc = spawn(python, [script, String(THREADS)], {
      stdio: ["pipe", "pipe", "inherit"],
      env: { ...process.env, OMP_NUM_THREADS: String(THREADS), OPENBLAS_NUM_THREADS: String(THREADS) },
    });
    createInterface({ input: this.proc.stdout! }).on("line", (l) => {
      if (this.waiting) {
        const w = this.waiting;
        this.waiting = null;
        w(l);
      } else this.lines.push(l);
    });
  }
  /** Sends one command; resolves with its reply line (bounded by 300 s). */
  ask(cmd: string): Promise<string> {
    this.proc.stdin!.write(cmd + "\n");
    const l = this.lines.shift();
    if (l !== undefined) return Promise.resolve(l);
    return new Promise((resolve, reject) => {
      const t = setTimeout(() => reject(new Error(`torch twin: no reply to "${cmd}" in 300 s`)), 300_000);
      this.waiting = (line) => {
        clearTimeout(t);
        resolve(line);
      };
    });
  }
  close(): void {
    this.proc.stdin!.end();
    this.proc.kill();
  }
}

// ---------------------------------------------------------------- profile

interface Acc {
  calls: number;
  ms: number;
  /** The fastest call (a floor that preemption on a loaded machine does not inflate). */
  min?: number;
}

/** A backend that forwards to `inner` and times each call by method and op. */
function profiled(inner: Backend, acc: Map<string, Acc>): Backend {
  const p = Object.create(null) as Record<string, unknown>;
  for (const key of ["copy", "fill", "unary", "binary", "where", "reduce", "argReduce", "matmul", "softmax"]
    .concat(["maskedSoftmax", "softmaxBackward", "indexSelect", "gather", "scatterAdd", "layerNorm"])
    .concat(["layerNormBackward", "adamStep", "sgdStep", "geluBackward"])) {
    const f = (inner as unknown as Record<string, ((...a: unknown[]) => unknown) | undefined>)[key];
    if (!f) continue; // optional kernels (sgdStep, geluBackward) the backend lacks
    const fn = f.bind(inner);
    p[key] = (...a: unknown[]) => {
      const t0 = performance.now();
      const r = fn(...a);
      const dt = performance.now() - t0;
      const out = (typeof a[a.length - 1] === "object" ? a[a.length - 1] : a[a.length - 2]) as { shape?: number[] };
      const opName = typeof a[0] === "string" ? `${key}:${a[0]}` : key;
      const k = `${opName} ${shapeOf(out)}`;
      const e = acc.get(k) ?? { calls: 0, ms: 0, min: Infinity };
      e.calls++;
      e.ms += dt;
      e.min = Math.min(e.min!, dt);
      acc.set(k, e);
      return r;
    };
  }
  p.name = "profiled";
  p.allocArray = inner.allocArray;
  return p as unknown as Backend;
}

/** Counts storages allocated (and their bytes) until stop(), by wrapping Storage's allocators. */
function countAllocations(): { count: number; bytes: number; big: number; bigBytes: number; stop(): void } {
  const S = Storage as unknown as Record<string, (d: DType, n: number, dev?: unknown) => Storage>;
  const orig = { alloc: S.alloc!, allocUninit: S.allocUninit! };
  const r = {
    count: 0,
    bytes: 0,
    big: 0,
    bigBytes: 0,
    stop() {
      Object.assign(S, orig);
    },
  };
  for (const key of ["alloc", "allocUninit"] as const) {
    const f = orig[key];
    S[key] = (d, n, dev) => {
      const b = n * itemSize(d);
      r.count++;
      r.bytes += b;
      if (b >= 1 << 16) {
        r.big++;
        r.bigBytes += b;
      }
      return f.call(Storage, d, n, dev);
    };
  }
  return r;
}

function shapeOf(t: { shape?: readonly number[] } | null | undefined): string {
  return t?.shape ? `[${t.shape.join(",")}]` : "";
}

function profile(name: string): void {
  const w = makers[name]!();
  w.run(runsPer[name]!); // warm-up
  const acc = new Map<string, Acc>();
  const inner = (currentRouter() as unknown as { cpu: () => Backend }).cpu();
  registerBackend(profiled(inner, acc));
  setBackend("profiled");
  let gcMs = 0;
  let gcs = 0;
  const kinds = new Map<string, Acc>();
  const obs = new PerformanceObserver((l) => {
    for (const e of l.getEntries()) {
      gcMs += e.duration;
      gcs++;
      const kind =
        GC_KINDS[((e as unknown as { detail?: unknown }).detail as { kind?: number } | undefined)?.kind ?? 0] ??
        "other";
      const a = kinds.get(kind) ?? { calls: 0, ms: 0 };
      a.calls++;
      a.ms += e.duration;
      kinds.set(kind, a);
    }
  });
  obs.observe({ entryTypes: ["gc"] });
  const heap0 = process.memoryUsage();
  const allocs = countAllocations();
  const pool0 = poolStats();
  const c0 = process.cpuUsage();
  const t0 = performance.now();
  const units = runsPer[name]!;
  w.run(units);
  const total = performance.now() - t0;
  const cpu = process.cpuUsage(c0);
  allocs.stop();
  const pool1 = poolStats();
  const heap1 = process.memoryUsage();
  setBackend(inner.name);
  return void setTimeout(() => {
    obs.disconnect();
    const n = name === "a3c" ? w.n : units;
    const kernels = [...acc.values()].reduce((s, e) => s + e.ms, 0);
    const calls = [...acc.values()].reduce((s, e) => s + e.calls, 0);
    const rows = [...acc.entries()].sort((a, b) => b[1].ms - a[1].ms);
    const lines = [
      `profile ${name}: ${(total / n).toFixed(3)} ms per ${w.unit} (${n} ${w.unit}s, profiled: wrappers add ~0.3 µs a call)`,
      `  kernels ${((100 * kernels) / total).toFixed(0)}% (${(kernels / n).toFixed(3)} ms, ${(calls / n).toFixed(1)} calls per ${w.unit}); ` +
        `framework (dispatch, allocation, autograd) ${((100 * (total - kernels)) / total).toFixed(0)}% (${((total - kernels) / n).toFixed(3)} ms)`,
      `  process CPU ${((cpu.user + cpu.system) / 1000 / n).toFixed(3)} ms per ${w.unit}; ` +
        `GC: ${gcs} pauses, ${gcMs.toFixed(1)} ms (${((100 * gcMs) / total).toFixed(0)}% of wall): ` +
        [...kinds.entries()].map(([k, a]) => `${a.calls} ${k} ${a.ms.toFixed(1)} ms`).join(", "),
      `  storages allocated: ${(allocs.count / n).toFixed(1)} per ${w.unit}, ${(allocs.bytes / n / 1e3).toFixed(1)} kB per ${w.unit} ` +
        `(${(allocs.bigBytes / n / 1e3).toFixed(1)} kB in ${(allocs.big / n).toFixed(1)} of >= 64 kB); ` +
        `heap ${((heap1.heapUsed - heap0.heapUsed) / 1e6).toFixed(1)} MB net; ` +
        `recycled by the engine (sdk/tensor/pool.ts): ${((pool1.releases - pool0.releases) / n).toFixed(1)} given back, ` +
        `${((pool1.reuses - pool0.reuses) / n).toFixed(1)} reused per ${w.unit}`,
    ];
    lines.push(
      `    ${"kernel, output shape".padEnd(40)} calls/${w.unit}  ms/${w.unit}  share  fastest call x calls (ms)`,
    );
    for (const [k, e] of rows.slice(0, 20))
      lines.push(
        `    ${k.padEnd(40)} ${(e.calls / n).toFixed(1).padStart(7)} ${(e.ms / n).toFixed(4).padStart(9)} ${((100 * e.ms) / total).toFixed(1).padStart(5)}%  ${((e.min! * e.calls) / n).toFixed(4)}`,
      );
    process.stdout.write(lines.join("\n") + "\n");
  }, 0);
}

// ---------------------------------------------------------------- ratio rounds

async function main(): Promise<void> {
  if (PROFILE) {
    for (const name of ONLY) {
      profile(name);
      await new Promise((r) => setTimeout(r, 10));
    }
    return;
  }
  const torch = TORCH ? new Torch() : null;
  try {
    const ours: Record<string, Workload> = {};
    for (const name of ONLY) {
      ours[name] = makers[name]!();
      ours[name].run(2 * runsPer[name]!); // warm-up: JIT tiers and heap sizes settle over the first hundreds of ops
      if (torch) await torch.ask(`setup ${name} ${2 * runsPer[name]!}`);
    }
    const results: Record<string, { ours: number[]; torch: number[]; oursCpu: number[]; torchCpu: number[] }> = {};
    for (let r = 0; r < ROUNDS; r++) {
      for (const name of ONLY) {
        const w = ours[name]!;
        const units = runsPer[name]!;
        const c0 = process.cpuUsage();
        const t0 = performance.now();
        w.run(units);
        const n = name === "a3c" ? w.n : units;
        const ms = (performance.now() - t0) / n;
        const c = process.cpuUsage(c0);
        const res = (results[name] ??= { ours: [], torch: [], oursCpu: [], torchCpu: [] });
        res.ours.push(ms);
        res.oursCpu.push((c.user + c.system) / 1000 / n);
        if (torch) {
          const reply = JSON.parse(await torch.ask(`run ${name} ${units}`)) as { ms: number; cpu: number; n: number };
          res.torch.push(reply.ms / reply.n);
          res.torchCpu.push(reply.cpu / reply.n);
        }
      }
    }
    const fmt = (xs: number[]) => xs.map((x) => x.toFixed(3)).join(" ");
    const med = (xs: number[]) => [...xs].sort((a, b) => a - b)[Math.floor(xs.length / 2)]!;
    for (const name of ONLY) {
      const { ours: o, torch: t, oursCpu: oc, torchCpu: tc } = results[name]!;
      const unit = name === "fedavg" ? "step" : name === "gpt" ? "micro-batch" : "env step";
      let line = `${name} (${THREADS} thread${THREADS === 1 ? "" : "s"}): tprpc ms per ${unit} [${fmt(o)}]`;
      if (t.length) {
        const ratios = o.map((x, i) => t[i]! / x);
        line += `, torch [${fmt(t)}]; speed vs torch per round [${ratios.map((x) => x.toFixed(2)).join(" ")}]x, median ${(med(t) / med(o)).toFixed(2)}x`;
        line += `; by process CPU time: tprpc [${fmt(oc)}] torch [${fmt(tc)}] ms, ${(med(tc) / med(oc)).toFixed(2)}x`;
      }
      if (name === "fedavg")
        line += `; epoch (400 steps) ${(400 * med(o)).toFixed(0)} ms vs ${t.length ? (400 * med(t)).toFixed(0) : "-"} ms`;
      if (name === "a3c")
        line += `; ${(1000 / med(o)).toFixed(0)} env steps/s vs ${t.length ? (1000 / med(t)).toFixed(0) : "-"}`;
      process.stdout.write(line + "\n");
    }
    process.stdout.write(
      "  NB: ratios from interleaved rounds in one run; on a loaded machine only the ratio means anything\n",
    );
  } finally {
    torch?.close();
  }
}

await main();
