/**
 * The wire's floor for `npm run bench`: the same round trips as the RPC section with no RPC at all —
 * N bytes echoed between this process and a child over loopback TCP (TCP_NODELAY), each side reading
 * straight into a buffer allocated once (Node's `onread`, as tprpc's lanes do), so what is left is the
 * kernel's copies and wake-ups. tprpc's TCP figures can only approach these.
 *
 * Per size, two sockets, each dialed by its reader (only sockets we dial can have `onread`):
 * 1. The child listens, sends its port over IPC; the parent dials it: the parent's receive socket.
 * 2. The parent listens and sends its port and N; the child dials it: the child's receive socket.
 * 3. A round trip: the parent writes N bytes on (2); once the child has them all it writes them back
 *    on (1); timed as rpc_common's medianRoundTrip does (warm-up, trials of a batch).
 */
import { fork } from "node:child_process";
import net from "node:net";
import { fileURLToPath } from "node:url";
import { type Plan, medianRoundTrip } from "./rpc_common.js";

/** Dials port with a socket that reads into `dest`, calling `full` each time dest is filled. */
function dialInto(port: number, dest: Buffer, full: () => void): Promise<net.Socket> {
  let filled = 0;
  const sock = net.connect({
    port,
    host: "127.0.0.1",
    onread: {
      buffer: () => dest.subarray(filled),
      callback: (k: number) => {
        filled += k;
        if (filled === dest.length) {
          filled = 0;
          full();
        }
        return true;
      },
    },
  });
  sock.setNoDelay(true);
  return new Promise((resolve, reject) => {
    sock.once("connect", () => resolve(sock));
    sock.once("error", reject);
  });
}

/** Listens once on 127.0.0.1; `port` is known at once, `accepted` resolves with the first socket. */
async function listenOnce(): Promise<{ port: number; accepted: Promise<net.Socket> }> {
  let onSock!: (s: net.Socket) => void;
  const accepted = new Promise<net.Socket>((r) => (onSock = r));
  const srv = net.createServer((s) => {
    s.setNoDelay(true);
    srv.close();
    onSock(s);
  });
  await new Promise<void>((r) => srv.listen(0, "127.0.0.1", r));
  return { port: (srv.address() as net.AddressInfo).port, accepted };
}

function echo(): void {
  void (async () => {
    const { port, accepted } = await listenOnce();
    process.send!({ port });
    const out = await accepted;
    process.once("message", (m: { port: number; n: number }) => {
      const buf = Buffer.allocUnsafe(m.n);
      void dialInto(m.port, buf, () => out.write(buf)).then(() => process.send!({ ready: true }));
    });
  })();
}

function next<T>(child: ReturnType<typeof fork>): Promise<T> {
  return new Promise((resolve, reject) => {
    const onExit = (c: number | null) => reject(new Error(`the echo process exited (${c})`));
    child.once("exit", onExit);
    child.once("message", (m) => {
      child.off("exit", onExit);
      resolve(m as T);
    });
  });
}

/** Median round trip (s) of an N-byte echo per size (0 means 1 byte), with the plan each size gets. */
export async function tcpFloor(sizes: readonly number[], plan: (n: number) => Plan): Promise<Map<number, number>> {
  const out = new Map<number, number>();
  for (const n0 of sizes) {
    const n = Math.max(1, n0);
    const child = fork(fileURLToPath(import.meta.url), ["--echo"], { stdio: ["ignore", "inherit", "inherit", "ipc"] });
    try {
      const { port } = await next<{ port: number }>(child);
      const dest = Buffer.allocUnsafe(n);
      let done: () => void = () => undefined;
      const back = await dialInto(port, dest, () => done());
      const mine = await listenOnce();
      child.send({ port: mine.port, n });
      const [toChild] = await Promise.all([mine.accepted, next<{ ready: boolean }>(child)]);
      const src = Buffer.alloc(n, 7);
      const roundTrip = (): Promise<void> =>
        new Promise<void>((resolve) => {
          done = resolve;
          toChild.write(src);
        });
      out.set(n0, await medianRoundTrip(roundTrip, plan(n0)));
      back.destroy();
      toChild.destroy();
    } finally {
      child.kill();
    }
  }
  return out;
}

if (process.argv.includes("--echo")) echo();
