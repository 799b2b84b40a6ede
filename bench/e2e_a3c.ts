/**
 * The A3C part of `npm run bench -- --e2e` (bench/e2e.ts): notebook 02's asynchronous actors on
 * CartPole, environment steps per second, tprpc beside bench/reference/torch_a3c.py (PyTorch RPC, the
 * global server behind an RRef owned by the master, actors started with rpc_async).
 *
 * The master owns the global actor-critic (Linear 4-128, heads 2 and 1, Adam lr 2e-3) behind an RRef;
 * three actors (one per worker) each loop: copy the global weights, play up to 20 CartPole steps
 * (Gym's CartPole-v1 equations, a seeded LCG for resets), compute the n-step A3C loss (gamma 0.99,
 * entropy 0.01), backward, and push the gradients with rpcSync().push(), which steps Adam and
 * returns the new weights. Unlike the notebook, every actor stops after a fixed number of pushes
 * (--pushes, per actor, after --a3c-warmup warm-up pushes), so both sides do the same work; env steps/s =
 * all actors' steps / wall time, for the timed pushes (steady state) and for the warm-up ones (cold).
 */
import * as sdk from "../sdk/index.js";
import { manualSeed, nn, optim, rpc, type Tensor } from "../sdk/index.js";
import { startLocalWorkers } from "../sdk/rpc/launcher.js";
import { now } from "./rpc_common.js";

const tprpc = sdk; // the name shipped code sees on the callee
const ACTORS = 3;

class ActorCritic extends nn.Module {
  fc = new nn.Linear(4, 128);
  policy = new nn.Linear(128, 2);
  value = new nn.Linear(128, 1);
  forward(x: Tensor): [Tensor, Tensor] {
    const h = this.fc.forward(x).relu();
    return [this.policy.forward(h), this.value.forward(h)];
  }
}

class GlobalServer {
  net = new ActorCritic();
  opt = new optim.Adam(this.net.parameters(), { lr: 2e-3 });
  envSteps = 0;
  weights(): Tensor[] {
    return this.net.parameters().map((p) => p.detach());
  }
  push(grads: Tensor[], steps: number): Tensor[] {
    this.net.parameters().forEach((p, i) => (p.grad = grads[i]!));
    this.opt.step();
    this.opt.zeroGrad();
    this.envSteps += steps;
    return this.weights();
  }
}

/** One actor, shipped to a worker: everything it uses is defined inside (shipped code cannot use module-local names). */
async function actor(
  server: sdk.rpc.RRef<GlobalServer>,
  seed: number,
  pushes: number,
  threads: number,
): Promise<number> {
  tprpc.setNumThreads(threads);
  const N_STEP = 20;
  const GAMMA = 0.99;
  const ENTROPY_BETA = 0.01;
  class Net extends tprpc.nn.Module {
    fc = new tprpc.nn.Linear(4, 128);
    policy = new tprpc.nn.Linear(128, 2);
    value = new tprpc.nn.Linear(128, 1);
    forward(x: Tensor): [Tensor, Tensor] {
      const h = this.fc.forward(x).relu();
      return [this.policy.forward(h), this.value.forward(h)];
    }
  }
  let lcg = seed >>> 0;
  const rand = (): number => {
    lcg = (Math.imul(lcg, 1664525) + 1013904223) >>> 0;
    return lcg / 4294967296;
  };
  let state = [0, 0, 0, 0];
  let t = 0;
  const reset = (): number[] => {
    state = state.map(() => rand() * 0.1 - 0.05);
    t = 0;
    return [...state];
  };
  const step = (action: number): { obs: number[]; terminated: boolean; truncated: boolean } => {
    const [x, xDot, theta, thetaDot] = state as [number, number, number, number];
    const force = action === 1 ? 10 : -10;
    const cos = Math.cos(theta);
    const sin = Math.sin(theta);
    const temp = (force + 0.05 * thetaDot * thetaDot * sin) / 1.1;
    const thetaAcc = (9.8 * sin - cos * temp) / (0.5 * (4 / 3 - (0.1 * cos * cos) / 1.1));
    const xAcc = temp - (0.05 * thetaAcc * cos) / 1.1;
    state = [x + 0.02 * xDot, xDot + 0.02 * xAcc, theta + 0.02 * thetaDot, thetaDot + 0.02 * thetaAcc];
    t++;
    const terminated = Math.abs(state[0]!) > 2.4 || Math.abs(state[2]!) > (12 * 2 * Math.PI) / 360;
    return { obs: [...state], terminated, truncated: !terminated && t >= 500 };
  };
  tprpc.manualSeed(seed);
  const net = new Net();
  let weights = await server.rpcSync().weights();
  let obs = reset();
  let steps = 0;
  for (let u = 0; u < pushes; u++) {
    tprpc.noGrad(() => net.parameters().forEach((p, i) => p.copy_(weights[i]!)));
    const states: number[][] = [];
    const actions: number[] = [];
    const rewards: number[] = [];
    let terminated = false;
    let ended = false;
    let lastObs = obs;
    for (let k = 0; k < N_STEP && !ended; k++) {
      const probs = tprpc.noGrad(() => net.forward(tprpc.tensor([obs]))[0].softmax(-1));
      const action = tprpc.multinomial(probs, 1).item() as number;
      const r = step(action);
      states.push(obs);
      actions.push(action);
      rewards.push(1);
      obs = lastObs = r.obs;
      if (r.terminated || r.truncated) {
        terminated = r.terminated;
        ended = true;
        obs = reset();
      }
    }
    let R = terminated ? 0 : tprpc.noGrad(() => net.forward(tprpc.tensor([lastObs]))[1].item() as number);
    const returns = rewards.map(() => 0);
    for (let k = rewards.length - 1; k >= 0; k--) returns[k] = R = rewards[k]! + GAMMA * R;
    const [logits, values] = net.forward(tprpc.tensor(states));
    const logProbs = logits.logSoftmax(-1);
    const v = values.squeeze(-1);
    const ret = tprpc.tensor(returns);
    const advantage = ret.sub(v.detach());
    const taken = logProbs
      .gather(
        1,
        tprpc.tensor(
          actions.map((a) => [a]),
          { dtype: "int64" },
        ),
      )
      .squeeze(-1);
    const entropy = logProbs.exp().mul(logProbs).sum(-1).neg().mean();
    const loss = taken
      .mul(advantage)
      .mean()
      .neg()
      .add(ret.sub(v).pow(2).mean().mul(0.5))
      .sub(entropy.mul(ENTROPY_BETA));
    net.zeroGrad();
    loss.backward();
    weights = await server.rpcSync().push(
      net.parameters().map((p) => p.grad!),
      rewards.length,
    );
    steps += rewards.length;
  }
  return steps;
}

/**
 * Environment steps per second of the A3C actors with tprpc: `rate` over `pushes` per actor after `warmup`
 * warm-up pushes each (steady state), and `coldRate` over the warm-up pushes themselves (code shipping and
 * V8's JIT warming up: at 5 warm-up pushes the timed rate was half the steady one).
 */
export async function tprpcA3c(
  pushes: number,
  threads: number,
  warmup: number,
): Promise<{ rate: number; coldRate: number }> {
  const cluster = await startLocalWorkers({ workers: ACTORS });
  try {
    await rpc.initRpc("master", { ...cluster.initOptions, rpcTimeoutMs: 600_000, initTimeoutMs: 30_000 });
    sdk.setNumThreads(threads);
    manualSeed(0);
    const server = new GlobalServer();
    const ref = new rpc.RRef(server);
    const run = (n: number): Promise<number[]> =>
      Promise.all(
        Array.from({ length: ACTORS }, (_, i) =>
          rpc.rpcAsync<number>(`worker${i + 1}`, actor, [ref, 100 + i, n, threads], { timeoutMs: 0 }),
        ),
      );
    const rateOf = async (n: number): Promise<number> => {
      const t0 = now();
      const steps = (await run(n)).reduce((a, b) => a + b, 0);
      return steps / (now() - t0);
    };
    const coldRate = await rateOf(warmup);
    const rate = await rateOf(pushes);
    await rpc.shutdown({ timeoutMs: 10_000 });
    return { rate, coldRate };
  } finally {
    await rpc.shutdown({ graceful: false, timeoutMs: 5_000 }).catch(() => undefined);
    await cluster.close();
  }
}
