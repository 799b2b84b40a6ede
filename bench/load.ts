/**
 * `--load N` for the benchmarks (issue 23, item 6): N busy processes doing tensor work beside what
 * is measured, so round trips (ours and PyTorch RPC's, in the same run) are timed on loaded cores.
 *
 * Each load process is this file run by node with `--load-child`: one tprpc thread
 * (setNumThreads(1)) looping over a 256×256 float32 matmul followed by a softmax and an add, in
 * slices of ~20 ms between which it yields, so it notices its stdin closing (the parent's exit, even a
 * crash) and ends. stop() ends them by their pids (SIGKILL), bounded.
 */
import { type ChildProcess, spawn } from "node:child_process";
import { fileURLToPath } from "node:url";
import { manualSeed, randn, setNumThreads } from "../sdk/index.js";

export interface Load {
  readonly count: number;
  /** Matmuls per second over all load processes, as they last reported it (0 before a report). */
  rate(): number;
  stop(): Promise<void>;
}

/** Starts `n` load processes (none for n = 0); resolves once each has done its first matmul. */
export async function startLoad(n: number): Promise<Load> {
  const children: ChildProcess[] = [];
  const rates = new Array<number>(n).fill(0);
  const started: Promise<void>[] = [];
  for (let i = 0; i < n; i++) {
    const child = spawn(process.execPath, [fileURLToPath(import.meta.url), "--load-child"], {
      stdio: ["pipe", "pipe", "inherit"],
    });
    children.push(child);
    started.push(
      new Promise<void>((resolve, reject) => {
        const timer = setTimeout(() => reject(new Error(`load process ${i} did not start in 30 s`)), 30_000);
        child.once("exit", (code) => reject(new Error(`load process ${i} exited (${code})`)));
        let buf = "";
        child.stdout!.on("data", (d: Buffer) => {
          buf += d.toString();
          const lines = buf.split("\n");
          buf = lines.pop()!;
          for (const l of lines) {
            rates[i] = Number(l) || rates[i]!;
            clearTimeout(timer);
            resolve();
          }
        });
      }),
    );
  }
  try {
    await Promise.all(started);
  } catch (e) {
    for (const c of children) c.kill("SIGKILL");
    throw e;
  }
  return {
    count: n,
    rate: () => rates.reduce((a, b) => a + b, 0),
    stop: async () => {
      await Promise.all(
        children.map(
          (c) =>
            new Promise<void>((resolve) => {
              if (c.exitCode !== null || c.signalCode !== null) return resolve();
              const t = setTimeout(resolve, 5_000);
              c.once("exit", () => {
                clearTimeout(t);
                resolve();
              });
              c.kill("SIGKILL");
            }),
        ),
      );
    },
  };
}

function loadChild(): void {
  setNumThreads(1);
  manualSeed(1);
  const a = randn([256, 256]);
  const b = randn([256, 256]);
  process.stdin.on("end", () => process.exit(0));
  process.stdin.resume();
  let done = 0;
  let since = performance.now();
  let first = true;
  const slice = (): void => {
    const t0 = performance.now();
    while (performance.now() - t0 < 20) {
      a.matmul(b).softmax(1).add(a);
      done++;
    }
    const t = performance.now();
    if (first || t - since >= 1_000) {
      first = false;
      process.stdout.write(`${(done / ((t - since) / 1e3)).toFixed(1)}\n`);
      done = 0;
      since = t;
    }
    setImmediate(slice);
  };
  slice();
}

if (process.argv.includes("--load-child")) loadChild();
