/**
 * The FedAvg part of `npm run bench -- --e2e` (bench/e2e.ts): notebook 03's federated averaging, seconds
 * per round, tprpc beside bench/reference/torch_fedavg.py (PyTorch RPC, clients behind remote()).
 *
 * Three workers each hold a Client (remote() of a shipped class) with 20,000 examples of 784 features
 * (seeded uniform noise and labels 0–9, made on the worker: a round's cost does not depend on the
 * pixels) and notebook 03's MLP 784-200-200-10. A round: the master's stateDict goes to all three
 * (rpcAsync train), each runs one epoch of minibatch SGD (batch 50, lr 0.05, momentum 0.9: 400 steps)
 * and sends its weights back; the master loads their example-weighted mean. One warm-up round, then
 * the median over the timed rounds.
 */
import * as sdk from "../sdk/index.js";
import { manualSeed, rpc, type Tensor } from "../sdk/index.js";
import { startLocalWorkers } from "../sdk/rpc/launcher.js";
import { median, now } from "./rpc_common.js";

const tprpc = sdk; // the name shipped code sees on the callee

const CLIENTS = 3;
export const FEDAVG_EXAMPLES = 20_000;

/** Notebook 03's MLP 784-200-200-10, the master's copy (Client builds its own the same way: shipped code cannot use a module-local function). */
function mlp(): InstanceType<typeof tprpc.nn.Sequential> {
  return new tprpc.nn.Sequential(
    new tprpc.nn.Linear(784, 200),
    new tprpc.nn.ReLU(),
    new tprpc.nn.Linear(200, 200),
    new tprpc.nn.ReLU(),
    new tprpc.nn.Linear(200, 10),
  );
}

class Client {
  x: Tensor;
  y: Tensor;
  model: InstanceType<typeof tprpc.nn.Sequential>;
  constructor(n: number, seed: number, threads: number) {
    this.model = new tprpc.nn.Sequential(
      new tprpc.nn.Linear(784, 200),
      new tprpc.nn.ReLU(),
      new tprpc.nn.Linear(200, 200),
      new tprpc.nn.ReLU(),
      new tprpc.nn.Linear(200, 10),
    );
    tprpc.setNumThreads(threads);
    tprpc.manualSeed(seed);
    this.x = tprpc.rand([n, 784]);
    this.y = tprpc.randint(0, 10, [n]);
  }
  size(): number {
    return this.y.shape[0]!;
  }
  train(weights: Record<string, Tensor>, epochs: number, lr: number, batch: number) {
    this.model.loadStateDict(weights);
    const opt = new tprpc.optim.SGD(this.model.parameters(), { lr, momentum: 0.9 });
    const n = this.y.shape[0]!;
    for (let e = 0; e < epochs; e++) {
      const perm = tprpc.randperm(n);
      for (let i = 0; i + batch <= n; i += batch) {
        const idx = perm.narrow(0, i, batch);
        const loss = tprpc.nn.functional.crossEntropy(
          this.model.forward(this.x.indexSelect(0, idx)),
          this.y.indexSelect(0, idx),
        );
        opt.zeroGrad();
        loss.backward();
        opt.step();
      }
    }
    return { weights: this.model.stateDict(), n };
  }
}

/** A tprpc FedAvg group (the master in this process, three workers) that runs rounds on demand. */
export interface FedAvgSession {
  /** One round; its seconds. */
  round(): Promise<number>;
  close(): Promise<void>;
}

/** Starts the workers and their clients (built before any round is timed); the master's model seeded. */
export async function openFedAvg(threads: number): Promise<FedAvgSession> {
  const cluster = await startLocalWorkers({ workers: CLIENTS });
  const end = async (): Promise<void> => {
    await rpc.shutdown({ graceful: false, timeoutMs: 5_000 }).catch(() => undefined);
    await cluster.close();
  };
  let clients: sdk.rpc.RRef<Client>[];
  try {
    await rpc.initRpc("master", { ...cluster.initOptions, rpcTimeoutMs: 600_000, initTimeoutMs: 30_000 });
    sdk.setNumThreads(threads);
    clients = Array.from({ length: CLIENTS }, (_, k) =>
      rpc.remote<Client>(`worker${k + 1}`, Client, [FEDAVG_EXAMPLES, 1000 + k, threads]),
    );
    for (const c of clients) await c.rpcSync().size(); // built before the clock starts
  } catch (e) {
    await end();
    throw e;
  }
  manualSeed(1);
  const model = mlp();
  return {
    async round() {
      const t0 = now();
      const weights = model.stateDict();
      const results = await Promise.all(clients.map((c) => c.rpcAsync().train(weights, 1, 0.05, 50)));
      const total = results.reduce((s, p) => s + p.n, 0);
      const mean: Record<string, Tensor> = {};
      for (const name of Object.keys(results[0]!.weights))
        mean[name] = results.map((p) => p.weights[name]!.mul(p.n / total)).reduce((a, b) => a.add(b));
      model.loadStateDict(mean);
      return now() - t0;
    },
    async close() {
      try {
        await rpc.shutdown({ timeoutMs: 10_000 });
      } finally {
        await end();
      }
    },
  };
}

/** Median seconds per FedAvg round with tprpc: one warm-up round, then `rounds` timed ones. */
export async function tprpcFedAvg(rounds: number, threads: number): Promise<number> {
  const fed = await openFedAvg(threads);
  try {
    await fed.round();
    const times: number[] = [];
    for (let r = 0; r < rounds; r++) times.push(await fed.round());
    return median(times);
  } finally {
    await fed.close();
  }
}
