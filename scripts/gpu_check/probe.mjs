// A diagnostic run for the device machine (not part of gpu:check's verdicts): where the GPT step's
// and a + b's time goes. node --expose-gc probe.mjs <tprpc root> <out dir> [gpt|add|prof]
//   gpt:  the GPT step of ops.mjs timed per phase (host time of forward, backward, optimizer, then
//         the wait in loss.item()), as is and with a full GC + one event-loop turn between steps;
//         the caching allocator's cuMemAlloc count (num_device_alloc) over the timed steps.
//   add:  a + b on 64 Mi floats, as is and with the output freed between calls.
//   prof: 30 GPT steps with a GC between them, meant to run under node --cpu-prof.
import fs from "node:fs";
import path from "node:path";
import { pathToFileURL } from "node:url";

const [root, outDir, what = "gpt"] = process.argv.slice(2);
const tprpc = await import(pathToFileURL(path.join(root, "dist/sdk/index.js")).href);
const DEV = "cuda:0";
const stats = () => tprpc.cuda.memoryStats(DEV);
const turn = () => new Promise((r) => setImmediate(r));
const now = () => Number(process.hrtime.bigint()) / 1e6;
const median = (xs) => [...xs].sort((a, b) => a - b)[xs.length >> 1];
const out = {};
const STEPS = Number(process.env.PROBE_STEPS ?? 20); // NB: small for a dry run on the emulated device

function gptModel() {
  tprpc.manualSeed(0);
  const config = { vocabSize: 80, nLayer: 4, nEmbd: 128, nHead: 4, blockSize: 64, tieWeights: false };
  const model = new tprpc.nn.GPT(config);
  model.to(DEV);
  const opt = new tprpc.optim.AdamW(model.parameters(), { lr: 6e-3, betas: [0.9, 0.99], weightDecay: 0.01 });
  const x = tprpc.randint(0, 80, [32, 64]).to(DEV);
  const y = tprpc.randint(0, 80, [32, 64]).to(DEV);
  return { model, opt, x, y };
}

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
  const n = Number(process.env.PROBE_ADD_N ?? 64 << 20);
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
