// tprpc's side of the op parity, benchmark and GPT-step sections of `npm run gpu:check`
// (scripts/gpu_check/main.mjs runs them on the device machine). Written against the public
// tprpc API on "cuda:0" only, so they run whatever backend serves CUDA tensor ops; an op without
// a CUDA kernel shows as "not available" with its error, not as a failure.
// The OPS table mirrors torch_ref.py's cases() by name: same inputs (from the reference file),
// same expression; a case with a gradient compares d sum(out * w) / d input 0 too.

// NB: every runner takes the device, default cuda:0; "cpu" checks the table itself (a dry run).

/** True for the errors that mean "no kernel for this op on CUDA yet" rather than a wrong answer. */
export function isMissingKernel(e) {
  return /on 'cuda:\d+'.*\.cpu\(\) first|not implemented|NotImplementedError|no CUDA kernel/i.test(
    `${e?.name}: ${e?.message}`,
  );
}

/** name -> fn(tprpc, ...inputs on cuda) -> out; mirrors torch_ref.py. */
const OPS = {
  add_broadcast: (t, a, b) => a.add(b),
  sub: (t, a, b) => a.sub(b),
  mul_broadcast: (t, a, b) => a.mul(b),
  div: (t, a, b) => a.div(b.abs().add(0.5)),
  exp: (t, a) => a.exp(),
  log: (t, a) => a.abs().add(0.1).log(),
  tanh: (t, a) => a.tanh(),
  sigmoid: (t, a) => a.sigmoid(),
  relu: (t, a) => a.relu(),
  gelu: (t, a) => a.gelu(),
  sqrt: (t, a) => a.abs().add(0.1).sqrt(),
  sum_dim: (t, a) => a.sum(1),
  mean_dim: (t, a) => a.mean(0),
  sum_all: (t, a) => a.sum(),
  amax: (t, a) => a.amax(-1),
  softmax: (t, a) => a.softmax(-1),
  log_softmax: (t, a) => a.logSoftmax(-1),
  layer_norm: (t, x, w, b) => t.nn.functional.layerNorm(x, [8], w, b),
  embedding: (t, w, i) => t.nn.functional.embedding(i.long(), w),
  cross_entropy: (t, x, y) => t.nn.functional.crossEntropy(x, y.long()),
  matmul: (t, a, b) => a.matmul(b),
  bmm: (t, a, b) => a.matmul(b),
  transpose_add: (t, a, b) => a.t().add(b),
  adamw_step: (t, p, g) => {
    const param = p.clone().detach().requiresGrad_(true);
    const opt = new t.optim.AdamW([param], { lr: 1e-2, betas: [0.9, 0.99], weightDecay: 0.01 });
    param.grad = g.clone();
    opt.step();
    param.grad = g.mul(0.5);
    opt.step();
    return param.detach();
  },
};

const flat = (v) => (Array.isArray(v) ? v.flat(Infinity) : [v]);

function maxRelErr(got, want) {
  const g = flat(got);
  const w = flat(want);
  if (g.length !== w.length) return Infinity;
  let worst = 0;
  for (let i = 0; i < w.length; i++) worst = Math.max(worst, Math.abs(g[i] - w[i]) / (1e-3 + Math.abs(w[i])));
  return worst;
}

/** One row per case: { name, status: "ok" | "failed" | "not available", detail }. */
export function runParity(tprpc, ref, tol = 2e-3, DEV = "cuda:0") {
  const rows = [];
  for (const [name, fn] of Object.entries(OPS)) {
    const r = ref[name];
    if (!r) {
      rows.push({ name, status: "not available", detail: "no PyTorch reference for this case" });
      continue;
    }
    if (r.error) {
      rows.push({ name, status: "not available", detail: `PyTorch failed: ${r.error}` });
      continue;
    }
    try {
      const xs = r.inputs.map((v) => tprpc.tensor(v, { dtype: "float32" }).to(DEV));
      if (r.grad) xs[0] = xs[0].detach().requiresGrad_(true);
      const out = fn(tprpc, ...xs);
      const errOut = maxRelErr(out.detach().cpu().tolist(), r.out);
      let errGrad = 0;
      if (r.grad) {
        out
          .mul(tprpc.tensor(r.w, { dtype: "float32" }).to(DEV))
          .sum()
          .backward();
        errGrad = maxRelErr(xs[0].grad.cpu().tolist(), r.grad);
      }
      const ok = errOut <= tol && errGrad <= tol;
      rows.push({
        name,
        status: ok ? "ok" : "failed",
        detail: `max rel. error ${errOut.toExponential(2)}${r.grad ? `, gradient ${errGrad.toExponential(2)}` : ""}`,
      });
    } catch (e) {
      rows.push({
        name,
        status: isMissingKernel(e) ? "not available" : "failed",
        detail: `${e.name}: ${e.message}`.slice(0, 300),
      });
    }
  }
  return rows;
}

/** Median seconds of f() over `iters` runs after 3 warm-ups, synchronizing the device around each. */
function timed(tprpc, f, iters) {
  for (let i = 0; i < 3; i++) f();
  tprpc.cuda.synchronize(0);
  const times = [];
  for (let i = 0; i < iters; i++) {
    const t0 = process.hrtime.bigint();
    f();
    tprpc.cuda.synchronize(0);
    times.push(Number(process.hrtime.bigint() - t0) / 1e9);
  }
  times.sort((a, b) => a - b);
  return times[times.length >> 1];
}

/**
 * Micro-benchmark beside PyTorch's numbers from the same run: device copy bandwidth (the
 * allocator's stream-ordered cuMemcpyDtoDAsync), a + b in GB/s against it (into an existing tensor,
 * as PyTorch's out=; the allocating form beside it), fp32 matmul TFLOP/s.
 * Each measurement is its own row, so a missing kernel leaves the others standing.
 */
export function runBench(tprpc, gpu, torchBench, DEV = "cuda:0") {
  const rows = [];
  const n = torchBench?.elements ?? 64 << 20;
  const bytes = 4 * n;
  const row = (name, f) => {
    try {
      rows.push({ name, status: "ok", ...f() });
    } catch (e) {
      rows.push({ name, status: isMissingKernel(e) ? "not available" : "failed", detail: `${e.name}: ${e.message}` });
    }
  };
  let copyGBs = null;
  row("device copy", () => {
    const src = gpu.cachingAlloc(0, bytes, 0n);
    const dst = gpu.cachingAlloc(0, bytes, 0n);
    const s = timed(tprpc, () => gpu.copyDtoDAsync(0, src, 0, dst, 0, bytes, 0n, false), 20);
    gpu.cachingFree(0, src);
    gpu.cachingFree(0, dst);
    copyGBs = (2 * bytes) / s / 1e9;
    return { GBs: copyGBs, torchGBs: torchBench?.copyGBs ?? null };
  });
  row("host to device, pageable (staged) and pinned", () => {
    const host = new Uint8Array(bytes);
    const pinned = new Uint8Array(gpu.hostAlloc(bytes));
    const dst = gpu.cachingAlloc(0, bytes, 0n);
    const pageableS = timed(tprpc, () => gpu.copyHtoDAsync(0, dst, 0, host, 0n, true), 5);
    const pinnedS = timed(tprpc, () => gpu.copyHtoDAsync(0, dst, 0, pinned, 0n, true), 5);
    gpu.cachingFree(0, dst);
    return { pageableGBs: bytes / pageableS / 1e9, pinnedGBs: bytes / pinnedS / 1e9 };
  });
  // NB: torch_ref.py times torch.add(a, b, out=c), which allocates nothing; tprpc has no out=, and
  // c.add_(b) moves the same bytes (read two tensors, write one) with the same kernel. The allocating
  // a.add(b) is reported beside it: each call there also takes a fresh 256 MiB block until the
  // reclaim budget (sdk/tensor/backend/cuda/index.ts) hands garbage back.
  row("elementwise a + b", () => {
    const a = tprpc.randn([n]).to(DEV);
    const b = tprpc.randn([n]).to(DEV);
    const c = a.clone();
    const s = timed(tprpc, () => c.add_(b), 20);
    const allocS = timed(tprpc, () => a.add(b), 20);
    const GBs = (3 * bytes) / s / 1e9;
    return {
      GBs,
      torchGBs: torchBench?.addGBs ?? null,
      ofCopy: copyGBs ? GBs / copyGBs : null,
      allocatingGBs: (3 * bytes) / allocS / 1e9,
      goal: "at least 0.70 of the copy bandwidth",
    };
  });
  row("matmul fp32", () => {
    const m = torchBench?.matmulN ?? 4096;
    const x = tprpc.randn([m, m]).to(DEV);
    const y = tprpc.randn([m, m]).to(DEV);
    const s = timed(tprpc, () => x.matmul(y), 10);
    const TFLOPs = (2 * m ** 3) / s / 1e12;
    const torch = torchBench?.matmulTFLOPs ?? null;
    return { TFLOPs, torchTFLOPs: torch, vsTorch: torch ? TFLOPs / torch : null, goal: "at least 0.8x PyTorch" };
  });
  return rows;
}

/** Notebook 04's GPT on `DEV` with its AdamW and a batch (sizes as torch_ref.py's), seeded. */
export function gptSetup(tprpc, DEV = "cuda:0") {
  tprpc.manualSeed(0);
  const config = { vocabSize: 80, nLayer: 4, nEmbd: 128, nHead: 4, blockSize: 64, tieWeights: false };
  const model = new tprpc.nn.GPT(config);
  model.to(DEV);
  const opt = new tprpc.optim.AdamW(model.parameters(), { lr: 6e-3, betas: [0.9, 0.99], weightDecay: 0.01 });
  const x = tprpc.randint(0, 80, [32, 64]).to(DEV);
  const y = tprpc.randint(0, 80, [32, 64]).to(DEV);
  return { model, opt, x, y };
}

/** One training step of notebook 04's GPT on cuda:0 (model, AdamW and sizes as torch_ref.py's). */
export function runGptStep(tprpc, torchGpt, DEV = "cuda:0") {
  const { model, opt, x, y } = gptSetup(tprpc, DEV);
  const step = () => {
    const { loss } = model.forward(x, y);
    opt.zeroGrad();
    loss.backward();
    opt.step();
    return loss.item(); // NB: waits for the step, as torch_ref.py's loss.item()
  };
  const firstLoss = step();
  for (let i = 0; i < 3; i++) step();
  const times = [];
  for (let i = 0; i < 20; i++) {
    const t0 = process.hrtime.bigint();
    step();
    times.push(Number(process.hrtime.bigint() - t0) / 1e6);
  }
  times.sort((a, b) => a - b);
  const medianMs = times[times.length >> 1];
  const torchMs = torchGpt?.medianMs ?? null;
  return {
    firstLoss,
    torchFirstLoss: torchGpt?.firstLoss ?? null,
    medianMs,
    torchMs,
    speedVsTorch: torchMs ? torchMs / medianMs : null,
    goal: "at least 0.5x PyTorch's speed",
    memory:
      DEV === "cpu"
        ? null
        : { maxAllocated: tprpc.cuda.maxMemoryAllocated(DEV), reserved: tprpc.cuda.memoryReserved(DEV) },
  };
}
