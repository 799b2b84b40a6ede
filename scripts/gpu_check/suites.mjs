// The CUDA test suites of `npm run gpu:check`, run on the device machine against the real driver
// by scripts/gpu_check/main.mjs: the caching allocator, pinned memory, copies and streams as CI
// checks them on a stand-in driver (test/native/cuda_allocator.test.ts, gpu_tensors.test.ts),
// plus what only a GPU shows (real out-of-memory, a busy stream). A tiny runner: each case is a
// function that throws on failure; no test framework travels to the device.

const MiB = 1 << 20;

function check(cond, what) {
  if (!cond) throw new Error(`expected ${what}`);
}
const eq = (a, b) => JSON.stringify(a) === JSON.stringify(b);

/** Pageable (staged) and pinned round trips through device memory `dev` of n bytes. */
function copies(gpu, dev, src, n) {
  gpu.copyHtoDAsync(0, dev, 0, src, 0n, true);
  const back = new Uint8Array(n);
  gpu.copyDtoHAsync(0, dev, 0, back, 0n, true);
  check(Buffer.compare(Buffer.from(src), Buffer.from(back)) === 0, "pageable round trip equal");
  const pinned = new Uint8Array(gpu.hostAlloc(n));
  pinned.set(src);
  gpu.copyHtoDAsync(0, dev, 0, pinned, 0n, false);
  const pinnedBack = new Uint8Array(gpu.hostAlloc(n));
  gpu.copyDtoHAsync(0, dev, 0, pinnedBack, 0n, true);
  check(Buffer.compare(Buffer.from(src), Buffer.from(pinnedBack)) === 0, "pinned round trip equal");
}

/** [name, fn(tprpc, gpu)]: gpu is the addon's gpu() namespace (NativeGpu). */
const CASES = [
  [
    "allocator: 512 B rounding, one 2 MiB segment, split and coalesce, stats",
    (t, gpu) => {
      t.cuda.emptyCache(0);
      const base = gpu.memoryStats(0)["allocated_bytes.all.current"];
      const a = gpu.cachingAlloc(0, 1000, 0n);
      const b = gpu.cachingAlloc(0, 512, 0n);
      check(b - a === 1024n, `b right after a's 1024 B block, got ${b - a}`);
      check(gpu.memoryStats(0)["allocated_bytes.all.current"] - base === 1536, "1536 B allocated");
      gpu.cachingFree(0, a);
      gpu.cachingFree(0, b);
      const c = gpu.cachingAlloc(0, 3000, 0n);
      check(c === a, "the coalesced block reused at the lowest address");
      gpu.cachingFree(0, c);
      check(gpu.memoryStats(0)["allocated_bytes.all.current"] === base, "allocated back to its start");
    },
  ],
  [
    "allocator: emptyCache returns segments to the driver (cuMemGetInfo sees it)",
    (t, gpu) => {
      t.cuda.emptyCache(0);
      const free0 = gpu.memInfo(0).free;
      const p = gpu.cachingAlloc(0, 256 * MiB, 0n);
      gpu.cachingFree(0, p);
      check(t.cuda.memoryReserved(0) >= 256 * MiB, "256 MiB still reserved (cached) after the free");
      const cached = free0 - gpu.memInfo(0).free;
      t.cuda.emptyCache(0);
      const back = gpu.memInfo(0).free - (free0 - cached);
      check(t.cuda.memoryReserved(0) === 0, "nothing reserved after emptyCache");
      check(back >= 250 * MiB, `the driver got ~256 MiB back, got ${back / MiB} MiB`);
    },
  ],
  [
    "allocator: real out-of-memory is NativeError EOOM after one retry, and allocation works after it",
    (t, gpu) => {
      const total = gpu.memInfo(0).total;
      const before = gpu.memoryStats(0);
      let err = null;
      try {
        gpu.cachingAlloc(0, total + 1024 * MiB, 0n);
      } catch (e) {
        err = e;
      }
      check(err?.code === "EOOM" && /CUDA out of memory\. Tried to allocate/.test(err.message), `EOOM, got ${err}`);
      const after = gpu.memoryStats(0);
      check(
        after.num_ooms === before.num_ooms + 1 && after.num_alloc_retries === before.num_alloc_retries + 1,
        "counted",
      );
      gpu.cachingFree(0, gpu.cachingAlloc(0, 4096, 0n));
    },
  ],
  [
    "allocator: a block recorded on a busy stream is not reused until the stream ran",
    (t, gpu) => {
      const s = new t.cuda.Stream(0);
      const held = [];
      let busy = false;
      try {
        const big = gpu.cachingAlloc(0, 256 * MiB, 0n);
        held.push(big);
        const big2 = gpu.cachingAlloc(0, 256 * MiB, 0n);
        held.push(big2);
        const d1 = gpu.cachingAlloc(0, 4096, 0n);
        gpu.recordStream(0, d1, s.handle);
        for (let i = 0; i < 40; i++) gpu.copyDtoDAsync(0, big, 0, big2, 0, 256 * MiB, s.handle, false); // 10 GB
        gpu.cachingFree(0, d1);
        busy = !s.query();
        const d2 = gpu.cachingAlloc(0, 4096, 0n);
        held.push(d2);
        if (busy) check(d2 !== d1, "no reuse while the recording stream is busy");
        s.synchronize();
        const d3 = gpu.cachingAlloc(0, 4096, 0n);
        held.push(d3);
        if (busy) check(d3 === d1, "reuse once the stream ran");
      } finally {
        for (const p of held) gpu.cachingFree(0, p);
        s.destroy();
      }
      if (!busy) return "stream already idle when queried: the no-reuse half was not observable";
    },
  ],
  [
    "copies: 64 MiB pageable (staged) and pinned round trips, non-blocking from pinned memory",
    (t, gpu) => {
      const n = 64 * MiB;
      const src = new Uint8Array(n);
      for (let i = 0; i < n; i += 4093) src[i] = (i >> 12) & 0xff;
      const dev = gpu.cachingAlloc(0, n, 0n);
      try {
        copies(gpu, dev, src, n);
      } finally {
        gpu.cachingFree(0, dev);
      }
    },
  ],
  [
    "tensors: to/cuda/cpu, strided, int64, zeros, pinMemory and non_blocking, streams, printing",
    (t) => {
      const x = t.tensor(
        [
          [1, 2, 3],
          [4, 5, 6],
        ],
        { dtype: "float32" },
      );
      check(eq(x.cuda().cpu().tolist(), x.tolist()), "round trip");
      check(eq(x.t().cuda().cpu().tolist(), x.t().tolist()), "strided round trip");
      check(eq(t.arange(0, 5, 1, { device: "cuda:0" }).tolist(), [0, 1, 2, 3, 4]), "int64 arange");
      check(eq(t.zeros([4], { device: "cuda:0" }).tolist(), [0, 0, 0, 0]), "zeros");
      const p = x.pinMemory();
      check(p.isPinned() && !x.isPinned(), "pinned copy");
      check(eq(p.cuda(0, { nonBlocking: true }).cpu().tolist(), x.tolist()), "non-blocking copy from pinned");
      const s = new t.cuda.Stream(0);
      const y = t.cuda.stream(s, () => x.cuda(0));
      y.recordStream(t.cuda.currentStream(0));
      s.synchronize();
      check(eq(y.cpu().tolist(), x.tolist()) && s.query(), "copy on a side stream");
      check(String(t.tensor([1.5], { device: 0 })) === "tensor([1.5000], device='cuda:0')", "printing");
      if (t.cuda.deviceCount() > 1) check(eq(x.cuda(1).to("cuda:0").cpu().tolist(), x.tolist()), "peer copy");
    },
  ],
  [
    "tensors: storages are handed back to the cache when collected",
    async (t) => {
      t.cuda.synchronize(0);
      const base = t.cuda.memoryAllocated(0);
      for (let i = 0; i < 100; i++) t.zeros([1024], { device: 0 });
      check(t.cuda.memoryAllocated(0) - base === 100 * 4096, "100 blocks of 4 KiB allocated");
      for (let k = 0; k < 200 && t.cuda.memoryAllocated(0) > base; k++) {
        // NB: storages from earlier cases may go too, hence <= below
        globalThis.gc?.();
        await new Promise((r) => setTimeout(r, 10));
      }
      check(t.cuda.memoryAllocated(0) <= base, "all of them back after garbage collection");
    },
  ],
];

/** Runs every case; rows { name, status: "ok" | "failed", detail }. */
export async function runSuites(tprpc, gpu) {
  const rows = [];
  for (const [name, fn] of CASES) {
    const t0 = Date.now();
    try {
      const note = await fn(tprpc, gpu);
      rows.push({ name, status: "ok", detail: `${Date.now() - t0} ms${note ? `; ${note}` : ""}` });
    } catch (e) {
      rows.push({ name, status: "failed", detail: `${e.name}: ${e.message}`.slice(0, 400) });
    }
  }
  return rows;
}
