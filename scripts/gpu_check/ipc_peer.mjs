// The far end of gpu:check's cuda_ipc measurement (scripts/gpu_check/channels.mjs): a second
// process on the same GPU, with tprpc's cuda_ipc channel to the parent. Bootstrap messages and the
// parent's commands travel as JSON lines over stdio (byte arrays as { $b: base64 }).
//   node ipc_peer.mjs <tprpc root>
// Lines in:  { t: "boot", m }          the parent's bootstrap message
//            { t: "alloc", n, k }     k device blocks of n bytes to receive into -> { t: "allocated" }
//            { t: "recv", d, i }      receive descriptor d into block i (errors -> { t: "error", message })
//            { t: "echo", d }         receive into block 0, send it back -> { t: "echoed", d }
//            { t: "check", i, n }     the first and last 64 bytes of block i -> { t: "checked", head, tail }
//            { t: "bye" }             close the channel and exit
// Lines out: { t: "boot", m }, and the replies above.
import path from "node:path";
import readline from "node:readline";
import { pathToFileURL } from "node:url";
import { dec, enc, lineBootstrap } from "./ipc_codec.mjs";

const root = process.argv[2];
const load = (p) => import(pathToFileURL(path.join(root, "dist/sdk", p)).href);
const { nativeGpu } = await load("native/gpu.js");
const { cudaIpcContext } = await load("channel/cuda_ipc/index.js");

const gpu = nativeGpu();
const out = (m) => process.stdout.write(JSON.stringify(enc(m)) + "\n");
const buf = (ptr, n) => ({ kind: "cuda", deviceIndex: 0, memory: { handle: ptr }, offset: 0, byteLength: n });
let blocks = [];
let size = 0;

const { bootstrap, deliver } = lineBootstrap("acceptor", "gpu-check", out);
const ch = cudaIpcContext.createChannel(bootstrap);

const fail = (e) => out({ t: "error", message: String(e?.message ?? e) });
ch.catch(() => undefined); // NB: reported by the first command that awaits it
readline.createInterface({ input: process.stdin }).on("line", async (text) => {
  const m = dec(JSON.parse(text));
  try {
    if (m.t === "boot") return deliver(m.m);
    const channel = await ch;
    if (m.t === "alloc") {
      for (const b of blocks) gpu.cachingFree(0, b);
      size = m.n;
      blocks = Array.from({ length: m.k }, () => gpu.cachingAlloc(0, m.n, 0n));
      out({ t: "allocated" });
    } else if (m.t === "recv") {
      await channel.recv(m.d, buf(blocks[m.i], size));
    } else if (m.t === "echo") {
      await channel.recv(m.d, buf(blocks[0], size));
      const s = channel.send(buf(blocks[0], size));
      out({ t: "echoed", d: s.descriptor });
      await s.done;
    } else if (m.t === "check") {
      const head = new Uint8Array(64);
      const tail = new Uint8Array(64);
      gpu.copyDtoH(0, blocks[m.i], 0, head);
      gpu.copyDtoH(0, blocks[m.i], m.n - 64, tail);
      out({ t: "checked", head: [...head], tail: [...tail] });
    } else if (m.t === "bye") {
      channel.close();
      process.exit(0);
    }
  } catch (e) {
    fail(e);
  }
});
