// grpc-js unary echo of a byte buffer between two local Node processes: round trip (median per call, GB/s both ways).
// Run: node bench/reference/grpc_node.mjs [--sizes 0,4000] [--quick]  (needs @grpc/grpc-js: the repository's
// devDependency, or one on NODE_PATH)
//
// This process is the client; it forks itself as the server (--server), which answers /bench.Bench/Echo with the
// request's bytes, no serialization beyond the identity. Payload: a 4-byte buffer for 0 B, else n bytes. Timing as
// timing.py (same sizes and plan: warm-up calls, then trials of a batch of calls; median per-call time over trials),
// after a first warm-up of small calls so the JIT has settled before the first size. bench/rpc_common.ts parses the
// "grpc-js unary echo" lines and the "# ..." header.
import { fork } from "node:child_process";
import { createRequire } from "node:module";
import { fileURLToPath } from "node:url";

// NB: require, not import: it also honours NODE_PATH
const require = createRequire(import.meta.url);
const grpc = require("@grpc/grpc-js");
const grpcVersion = require("@grpc/grpc-js/package.json").version;

const SIZES = [0, 4_000, 4_000_000, 40_000_000, 400_000_000]; // as timing.py
const JIT_WARM_UP = 5_000;

/** (warm-up calls, timed trials, calls per trial) for a payload size, as timing.py's plan(). */
function plan(nbytes, quick) {
  if (nbytes <= 4_000) return quick ? [100, 7, 50] : [1000, 30, 200];
  if (nbytes <= 4_000_000) return quick ? [5, 5, 5] : [20, 20, 10];
  if (nbytes <= 40_000_000) return quick ? [2, 5, 1] : [5, 15, 1];
  return quick ? [1, 3, 1] : [2, 8, 1];
}

const same = (b) => b;
const SERVICE = {
  Echo: {
    path: "/bench.Bench/Echo",
    requestStream: false,
    responseStream: false,
    requestSerialize: same,
    requestDeserialize: same,
    responseSerialize: same,
    responseDeserialize: same,
  },
};
// no message size limits: the largest payload is 400 MB
const OPTIONS = { "grpc.max_receive_message_length": -1, "grpc.max_send_message_length": -1 };

const argv = process.argv.slice(2);
const option = (name, fallback) => (argv.includes(name) ? argv[argv.indexOf(name) + 1] : fallback);

function serve() {
  const server = new grpc.Server(OPTIONS);
  server.addService(SERVICE, { Echo: (call, done) => done(null, call.request) });
  server.bindAsync("127.0.0.1:0", grpc.ServerCredentials.createInsecure(), (err, port) => {
    if (err) throw err;
    process.send({ port });
  });
}

const seconds = () => Number(process.hrtime.bigint()) / 1e9;

function median(xs) {
  const s = [...xs].sort((a, b) => a - b);
  const m = s.length >> 1;
  return s.length % 2 ? s[m] : (s[m - 1] + s[m]) / 2;
}

const fmtTime = (s) =>
  s < 1e-3 ? `${(s * 1e6).toFixed(1)} us` : s < 1 ? `${(s * 1e3).toFixed(2)} ms` : `${s.toFixed(3)} s`;

/** As timing.py's sync_line(). */
function syncLine(label, nbytes, perCall) {
  const med = median(perCall);
  const lo = Math.min(...perCall);
  const hi = Math.max(...perCall);
  const gbs = (s) => ((2 * nbytes) / s / 1e9).toFixed(2);
  const rate = nbytes >= 4_000_000 ? `  ${gbs(med).padStart(6)} GB/s [${gbs(hi)}-${gbs(lo)}]` : "";
  const count = nbytes.toLocaleString("en-US").padStart(11);
  console.log(`${label.padEnd(40)} ${count} B  ${fmtTime(med).padStart(10)} [${fmtTime(lo)} - ${fmtTime(hi)}]${rate}`);
}

async function client() {
  const quick = argv.includes("--quick");
  const sizes = option("--sizes", SIZES.join(",")).split(",").filter(Boolean).map(Number);
  const server = fork(fileURLToPath(import.meta.url), ["--server"]);
  try {
    const port = await new Promise((resolve, reject) => {
      server.once("message", (m) => resolve(m.port));
      server.once("exit", (code) => reject(new Error(`the grpc server exited (${code}) before it listened`)));
    });
    const Client = grpc.makeGenericClientConstructor(SERVICE, "Bench");
    const stub = new Client(`127.0.0.1:${port}`, grpc.credentials.createInsecure(), OPTIONS);
    const echo = (buf) => new Promise((resolve, reject) => stub.Echo(buf, (e, r) => (e ? reject(e) : resolve(r))));
    console.log(
      `# node ${process.version}, @grpc/grpc-js ${grpcVersion}, default flow control${quick ? ", quick plan" : ""}`,
    );
    const tiny = Buffer.alloc(4, 1);
    for (let i = 0; i < (quick ? JIT_WARM_UP / 5 : JIT_WARM_UP); i++) await echo(tiny);
    for (const n of sizes) {
      const buf = n === 0 ? tiny : Buffer.alloc(n, 1);
      const back = await echo(buf);
      if (!buf.equals(back)) throw new Error(`the ${n} B echo came back different`);
      const [warm, trials, batch] = plan(n, quick);
      for (let i = 1; i < warm; i++) await echo(buf);
      const perCall = [];
      for (let t = 0; t < trials; t++) {
        const t0 = seconds();
        for (let i = 0; i < batch; i++) await echo(buf);
        perCall.push((seconds() - t0) / batch);
      }
      syncLine("grpc-js unary echo", n, perCall);
    }
    stub.close();
  } finally {
    server.kill(); // the server forked above, by its handle
  }
}

if (argv.includes("--server")) serve();
else
  client().catch((e) => {
    console.error(e);
    process.exitCode = 1;
  });
