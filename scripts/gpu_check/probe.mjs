// A diagnostic run for the device machine (not part of gpu:check's verdicts): where the GPT step's
// and a + b's time goes. node --expose-gc probe.mjs <tprpc root> <out dir> [gpt|add|recipe|prof] [size]
// (size: steps for gpt and prof, elements for add; small ones for a dry run on the emulated device)
//   gpt:  the GPT step of ops.mjs timed per phase (host time of forward, backward, optimizer, then
//         the wait in loss.item()), as is and with a full GC + one event-loop turn between steps;
//         the caching allocator's cuMemAlloc count (num_device_alloc) over the timed steps.
//   add:  a + b on 64 Mi floats, as is and with the output freed between calls.
//   recipe: the CUDA-RPC recipe's pass in phases (forward RPC, distributed backward, context
//         exit), and bare RPC round trips (empty, 4 MB on the CPU, 4 MB on cuda:0 via the device map).
//   ops:  the GPT step's op families at its shapes, median ms each (torch_ops.py times PyTorch's)
//   prof: 30 GPT steps with a GC between them, meant to run under node --cpu-prof.
import fs from "node:fs";
import path from "node:path";
import { pathToFileURL } from "node:url";
import { gptSetup } from "./ops.mjs";

const [root, outDir, what = "gpt", size] = process.argv.slice(2);
const tprpc = await import(pathToFileURL(path.join(root, "dist/sdk/index.js")).href);
const DEV = "cuda:0";
const stats = () => tprpc.cuda.memoryStats(DEV);
const turn = () => new Promise((r) => setImmediate(r));
const now = () => Number(process.hrtime.bigint()) / 1e6;
const median = (xs) => [...xs].sort((a, b) => a - b)[xs.length >> 1];
const out = {};
const STEPS = Number(size ?? 20); // NB: small for a dry run on the emulated device

const gptModel = () => gptSetup(tprpc, DEV);

function phased({ model, opt, x, y }) {
  const t0 = now();
  const { loss } = model.forward(x, y);
  const t1 = now();
  opt.zeroGrad();
  loss.backward();
  const t2 = now();
  opt.step();
  const t3 = now();
  loss.item();
  const t4 = now();
  return { fwd: t1 - t0, bwd: t2 - t1, opt: t3 - t2, wait: t4 - t3, total: t4 - t0 };
}

async function gptRun(mode, steps) {
  const m = gptModel();
  for (let i = 0; i < 3; i++) phased(m);
  const s0 = stats();
  const rows = [];
  let gcMs = 0;
  for (let i = 0; i < steps; i++) {
    if (mode === "gc") {
      const g0 = now();
      global.gc();
      await turn();
      gcMs += now() - g0;
    }
    rows.push(phased(m));
  }
  const s1 = stats();
  const med = {};
  for (const k of Object.keys(rows[0])) med[k] = +median(rows.map((r) => r[k])).toFixed(3);
  return {
    mode,
    median: med,
    totals: rows.map((r) => +r.total.toFixed(2)),
    gcMsPerStep: +(gcMs / steps).toFixed(2),
    deviceAllocs: s1.num_device_alloc - s0.num_device_alloc,
    allocatedMB: +(s1["allocated_bytes.all.current"] / 1e6).toFixed(1),
    reservedMB: +(s1["reserved_bytes.all.current"] / 1e6).toFixed(1),
    allocations: s1["allocation.all.allocated"] - s0["allocation.all.allocated"],
  };
}

if (what === "gpt") {
  out.asIs = await gptRun("as-is", STEPS);
  await turn();
  global.gc();
  await turn();
  tprpc.cuda.emptyCache?.(DEV);
  out.withGc = await gptRun("gc", STEPS);
  out.asIsAgain = await gptRun("as-is", STEPS);
} else if (what === "add") {
  const n = Number(size ?? 64 << 20);
  const a = tprpc.randn([n]).to(DEV);
  const b = tprpc.randn([n]).to(DEV);
  const time = async (freeBetween) => {
    const ts = [];
    const s0 = stats();
    for (let i = 0; i < 23; i++) {
      if (freeBetween) {
        global.gc();
        await turn();
      }
      tprpc.cuda.synchronize(0);
      const t0 = now();
      a.add(b);
      tprpc.cuda.synchronize(0);
      if (i >= 3) ts.push(now() - t0);
    }
    const s1 = stats();
    const ms = median(ts);
    return {
      ms: +ms.toFixed(4),
      GBs: +((3 * 4 * n) / (ms / 1e3) / 1e9).toFixed(1),
      deviceAllocs: s1.num_device_alloc - s0.num_device_alloc,
    };
  };
  out.addAsIs = await time(false);
  global.gc();
  await turn();
  out.addFreed = await time(true);
  const c = a.mul(1);
  tprpc.cuda.synchronize(0);
  const t0 = now();
  for (let i = 0; i < 20; i++) c.add_(b);
  tprpc.cuda.synchronize(0);
  const ms = (now() - t0) / 20;
  out.addInPlace = { ms: +ms.toFixed(4), GBs: +((3 * 4 * n) / (ms / 1e3) / 1e9).toFixed(1) };
} else if (what === "recipe") {
  // The CUDA-RPC recipe's pass (channels.mjs) cut in phases, and bare round trips beside it.
  const { rpc, distAutograd } = tprpc;
  globalThis.tprpc ??= tprpc;
  const cluster = await rpc.startLocalWorkers({ workers: 1 });
  const opts = new rpc.RpcBackendOptions({ ...cluster.initOptions, rpcTimeoutMs: 60_000 });
  opts.setDeviceMap("worker1", { 0: 0 });
  await rpc.initRpc("master", opts);
  const lap = async (name, f, n = 20) => {
    for (let i = 0; i < 3; i++) await f();
    const ts = [];
    for (let i = 0; i < n; i++) {
      const t0 = now();
      await f();
      ts.push(now() - t0);
    }
    out[name] = +median(ts).toFixed(3);
  };
  const small = tprpc.ones([4]);
  const g4 = tprpc.randn([1000, 1000]).to(DEV);
  const c4 = tprpc.randn([1000, 1000]);
  await lap("rttEmptyMs", () => rpc.rpcAsync("worker1", () => 1, []));
  await lap("rttSmallCpuMs", () => rpc.rpcAsync("worker1", (t) => t, [small]));
  await lap("rtt4MBCpuMs", () => rpc.rpcAsync("worker1", (t) => t, [c4]));
  await lap("rtt4MBCudaMs", () => rpc.rpcAsync("worker1", (t) => t, [g4]));
  await lap("rtt4MBCudaAddMs", () => rpc.rpcAsync("worker1", (t) => t.add(1), [g4]));
  const Shard = class MyModule extends tprpc.nn.Module {
    constructor(device) {
      super();
      this.linear = new tprpc.nn.Linear(1000, 1000).to(device);
    }
    forward(x) {
      return this.linear.forward(x);
    }
  };
  const lm = new Shard(DEV);
  const rm = rpc.remote("worker1", Shard, [DEV]);
  const phases = { fwd: [], bwd: [], exit: [], total: [] };
  for (let i = 0; i < 23; i++) {
    const t0 = now();
    let t1 = 0;
    let t2 = 0;
    await distAutograd.context(async (ctx) => {
      const y = await rm.rpcSync().forward(lm.forward(g4));
      t1 = now();
      await distAutograd.backward(ctx, [y.sum()]);
      t2 = now();
    });
    tprpc.cuda.synchronize(0);
    const t3 = now();
    if (i >= 3) {
      phases.fwd.push(t1 - t0);
      phases.bwd.push(t2 - t1);
      phases.exit.push(t3 - t2);
      phases.total.push(t3 - t0);
    }
  }
  for (const [k, v] of Object.entries(phases)) out[`recipe_${k}_ms`] = +median(v).toFixed(3);
  await rpc.shutdown();
  await cluster.close();
} else if (what === "ops") {
  // The GPT step's op families at its shapes (batch 32 x 64 tokens, 128 channels, 4 heads): median
  // ms over 50 calls, the device synchronized around each, beside scripts/gpu_check/torch_ops.py's
  // (the same list, by name) to find the kernels that make the step GPU-bound.
  const scale = Number(size ?? 1); // NB: a dry run on the emulated device takes 0.05 or so
  const B = Math.max(1, Math.round(32 * scale));
  const r = (shape) => tprpc.randn(shape).to(DEV);
  const x = r([B * 64, 128]);
  const w = r([128]);
  const bias = r([128]);
  const att = r([B, 4, 64, 64]);
  const heads = r([B, 64, 4, 32]);
  const wide = r([B * 64, 512]);
  const logits = r([B * 64, 80]);
  const target = tprpc.randint(0, 80, [B * 64]).to(DEV);
  const emb = r([80, 128]).requiresGrad_(true);
  const idx = tprpc.randint(0, 80, [B, 64]).to(DEV);
  const mask = tprpc.nn.functional.causalMask(64).to(DEV);
  const F = tprpc.nn.functional;
  const cases = {
    layer_norm: () => F.layerNorm(x, [128], w, bias),
    layer_norm_fwd_bwd: () => {
      const xi = x.detach().requiresGrad_(true);
      F.layerNorm(xi, [128], w, bias).sum().backward();
    },
    softmax_att: () => att.softmax(-1),
    masked_fill_softmax: () => att.maskedFill(mask, -Infinity).softmax(-1),
    transpose_contiguous: () => heads.transpose(1, 2).contiguous(),
    gelu_wide: () => wide.gelu(),
    bias_add_broadcast: () => x.add(bias),
    sum_rows_bias_grad: () => wide.sum(0),
    cross_entropy: () => F.crossEntropy(logits, target),
    embedding_fwd_bwd: () => F.embedding(idx, emb).sum().backward(),
    matmul_qkv: () => x.matmul(r([128, 384])),
    matmul_att: () => att.matmul(r([B, 4, 64, 32])),
  };
  for (const [name, f] of Object.entries(cases)) {
    try {
      for (let i = 0; i < 3; i++) f();
      const ts = [];
      for (let i = 0; i < 50; i++) {
        tprpc.cuda.synchronize(0);
        const t0 = now();
        f();
        tprpc.cuda.synchronize(0);
        ts.push(now() - t0);
      }
      out[name] = +median(ts).toFixed(4);
    } catch (e) {
      out[name] = `${e.name}: ${e.message}`.slice(0, 200);
    }
  }
} else if (what === "prof") {
  const m = gptModel();
  for (let i = 0; i < 3; i++) phased(m);
  for (let i = 0; i < STEPS + 10; i++) {
    global.gc();
    await turn();
    phased(m);
  }
  out.done = true;
}
fs.mkdirSync(outDir, { recursive: true });
fs.writeFileSync(path.join(outDir, `probe-${what}.json`), JSON.stringify(out, null, 1));
console.log(JSON.stringify(out));
