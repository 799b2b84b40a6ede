#!/usr/bin/env node
/**
 * Kernel timings straight on the addon (no tensor layer): GB/s for add (read 2, write 1), exp,
 * gelu and softmax (rows of 1024; read 1, write 1) and row sums on 4,194,304 float32 elements,
 * and sgemm GFLOP/s (2 n^3 / t) for n = 1024 and 2048, at 1 and 2 threads. The same figures
 * as `npm run bench`, with outputs preallocated ("into out") and freshly allocated per call
 * ("alloc", as a tensor op does: includes V8's zeroing and the first-touch page faults).
 *
 *   node native/src/kernels/tools/bench.mjs [path/to/tprpc.node]
 */
import { createRequire } from "node:module";
import path from "node:path";
import { fileURLToPath } from "node:url";

const here = path.dirname(fileURLToPath(import.meta.url));
const file = process.argv[2] ?? path.join(here, "../../../build/Release/tprpc.node");
const n = createRequire(import.meta.url)(file);

const ELEMS = 4 * 1024 * 1024;
const bytes = 4 * ELEMS;
const v = (data, shape) => ({
  data,
  offset: 0,
  shape,
  strides: shape.map((_, i) => shape.slice(i + 1).reduce((a, b) => a * b, 1)),
});

/** Median seconds per call over ~1 s. */
function measure(fn) {
  let t0 = process.hrtime.bigint();
  fn();
  const est = Math.max(Number(process.hrtime.bigint() - t0) / 1e9, 1e-7);
  for (let i = 0; i < Math.min(20, 0.2 / est); i++) fn();
  const batch = Math.max(1, Math.floor(0.02 / est));
  const trials = Math.max(5, Math.min(15, Math.floor(1 / (est * batch))));
  const per = [];
  for (let t = 0; t < trials; t++) {
    t0 = process.hrtime.bigint();
    for (let i = 0; i < batch; i++) fn();
    per.push(Number(process.hrtime.bigint() - t0) / 1e9 / batch);
  }
  per.sort((a, b) => a - b);
  return per[per.length >> 1];
}

const rand = (len) => {
  const a = new Float32Array(len);
  let s = 12345;
  for (let i = 0; i < len; i++) {
    s = (Math.imul(s, 1103515245) + 12345) >>> 0;
    a[i] = (s / 4294967296) * 8 - 4;
  }
  return a;
};

const x = rand(ELEMS);
const y = rand(ELEMS);
const out = new Float32Array(ELEMS);
const sums = new Float32Array(ELEMS / 1024);
const gbs = (moved, fn) => (moved / measure(fn) / 1e9).toFixed(1);

console.log(`tprpc kernels on ${n.simdIsa()}, ${file}`);
for (const threads of [1, 2]) {
  n.setNumThreads(threads);
  const rows = [
    ["add f32 4M (r2+w1)", 3 * bytes, (o) => n.binary("add", v(x, [ELEMS]), v(y, [ELEMS]), v(o, [ELEMS]))],
    ["exp f32 4M (r1+w1)", 2 * bytes, (o) => n.unary("exp", v(x, [ELEMS]), v(o, [ELEMS]))],
    ["gelu f32 4M (r1+w1)", 2 * bytes, (o) => n.unary("gelu", v(x, [ELEMS]), v(o, [ELEMS]))],
    [
      "softmax f32 4Kx1K (r1+w1)",
      2 * bytes,
      (o) => n.softmax(v(x, [ELEMS / 1024, 1024]), 1, false, v(o, [ELEMS / 1024, 1024])),
    ],
  ];
  for (const [name, moved, run] of rows) {
    const into = gbs(moved, () => run(out));
    const alloc = gbs(moved, () => run(new Float32Array(ELEMS)));
    console.log(
      `${threads} thread(s)  ${name.padEnd(26)} into out ${into.padStart(6)} GB/s   alloc ${alloc.padStart(6)} GB/s`,
    );
  }
  const rs = gbs(bytes, () => n.reduce("sum", v(x, [ELEMS / 1024, 1024]), [1], v(sums, [ELEMS / 1024, 1])));
  console.log(`${threads} thread(s)  ${"row sum f32 4Kx1K (r1)".padEnd(26)} into out ${rs.padStart(6)} GB/s`);
  for (const size of [1024, 2048]) {
    const a = rand(size * size);
    const b = rand(size * size);
    const c = new Float32Array(size * size);
    const t = measure(() => n.matmul(v(a, [1, size, size]), v(b, [1, size, size]), v(c, [1, size, size])));
    console.log(
      `${threads} thread(s)  sgemm ${size}^2${" ".repeat(15)} ${((2 * size ** 3) / t / 1e9).toFixed(1).padStart(6)} GFLOP/s`,
    );
  }
}
