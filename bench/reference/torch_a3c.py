# PyTorch RPC twin of bench/e2e_a3c.ts (notebook 02's A3C on CartPole): the master owns the global actor-critic
# (Linear 4-128, heads 2 and 1, Adam lr 2e-3) behind an RRef; three actors, started on three workers with rpc_async,
# each loop: copy the global weights, play up to 20 CartPole-v1 steps (the same equations and seeded LCG resets),
# compute the n-step A3C loss (gamma 0.99, entropy 0.01), backward, and push the gradients with
# server_rref.rpc_sync().push(), which steps Adam (under a lock: RPC serves calls on a thread pool) and returns the new
# weights. Every actor stops after --pushes pushes, after --warmup (default 5) warm-up pushes each. Prints
# "a3c: <steps/s> env steps/s" for the timed pushes, and the warm-up pushes' rate in its "# " header line.
#   /usr/bin/python3 bench/reference/torch_a3c.py [--pushes 200] [--threads 1]
# The master (rank 0, TCPStore host) starts ranks 1-3 as children; run it in a process group of its own.
import argparse, math, sys, threading, time

sys.dont_write_bytecode = True
from blas_threads import pin_blas_threads  # noqa: E402

pin_blas_threads()  # NB: before torch loads its BLAS
import torch  # noqa: E402
import torch.distributed.rpc as rpc  # noqa: E402
import torch.nn as nn  # noqa: E402
from rpc_group import run_rpc_group  # noqa: E402

ACTORS = 3


class ActorCritic(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc, self.policy, self.value = nn.Linear(4, 128), nn.Linear(128, 2), nn.Linear(128, 1)

    def forward(self, x):
        h = self.fc(x).relu()
        return self.policy(h), self.value(h)


class GlobalServer:
    def __init__(self):
        self.net = ActorCritic()
        self.opt = torch.optim.Adam(self.net.parameters(), lr=2e-3)
        self.lock = threading.Lock()
        self.env_steps = 0

    def weights(self):
        with self.lock:
            return [p.detach().clone() for p in self.net.parameters()]

    def push(self, grads, steps):
        with self.lock:
            for p, g in zip(self.net.parameters(), grads):
                p.grad = g
            self.opt.step()
            self.opt.zero_grad()
            self.env_steps += steps
            return [p.detach().clone() for p in self.net.parameters()]


class CartPole:
    def __init__(self, seed):
        self.seed, self.state, self.t = seed & 0xFFFFFFFF, [0.0] * 4, 0

    def rand(self):
        self.seed = (self.seed * 1664525 + 1013904223) & 0xFFFFFFFF
        return self.seed / 4294967296

    def reset(self):
        self.state, self.t = [self.rand() * 0.1 - 0.05 for _ in self.state], 0
        return list(self.state)

    def step(self, action):
        x, x_dot, theta, theta_dot = self.state
        force = 10.0 if action == 1 else -10.0
        cos, sin = math.cos(theta), math.sin(theta)
        temp = (force + 0.05 * theta_dot * theta_dot * sin) / 1.1
        theta_acc = (9.8 * sin - cos * temp) / (0.5 * (4 / 3 - 0.1 * cos * cos / 1.1))
        x_acc = temp - 0.05 * theta_acc * cos / 1.1
        self.state = [x + 0.02 * x_dot, x_dot + 0.02 * x_acc, theta + 0.02 * theta_dot, theta_dot + 0.02 * theta_acc]
        self.t += 1
        terminated = abs(self.state[0]) > 2.4 or abs(self.state[2]) > 12 * 2 * math.pi / 360
        return list(self.state), terminated, not terminated and self.t >= 500


def actor(server, seed, pushes, threads):
    torch.set_num_threads(threads)
    torch.manual_seed(seed)
    env, net = CartPole(seed), ActorCritic()
    weights = server.rpc_sync().weights()
    obs, steps = env.reset(), 0
    for _ in range(pushes):
        with torch.no_grad():
            for p, w in zip(net.parameters(), weights):
                p.copy_(w)
        states, actions, rewards = [], [], []
        terminated = ended = False
        last_obs = obs
        for _ in range(20):
            if ended:
                break
            with torch.no_grad():
                probs = net(torch.tensor([obs]))[0].softmax(-1)
            action = torch.multinomial(probs, 1).item()
            nobs, term, trunc = env.step(action)
            states.append(obs), actions.append(action), rewards.append(1.0)
            obs = last_obs = nobs
            if term or trunc:
                terminated, ended = term, True
                obs = env.reset()
        with torch.no_grad():
            R = 0.0 if terminated else net(torch.tensor([last_obs]))[1].item()
        returns = [0.0] * len(rewards)
        for k in range(len(rewards) - 1, -1, -1):
            R = rewards[k] + 0.99 * R
            returns[k] = R
        logits, values = net(torch.tensor(states))
        log_probs = logits.log_softmax(-1)
        v = values.squeeze(-1)
        ret = torch.tensor(returns)
        advantage = ret - v.detach()
        taken = log_probs.gather(1, torch.tensor([[a] for a in actions])).squeeze(-1)
        entropy = -(log_probs.exp() * log_probs).sum(-1).mean()
        loss = -(taken * advantage).mean() + 0.5 * (ret - v).pow(2).mean() - 0.01 * entropy
        net.zero_grad()
        loss.backward()
        weights = server.rpc_sync().push([p.grad for p in net.parameters()], len(rewards))
        steps += len(rewards)
    return steps


def run_master(args):
    torch.set_num_threads(args.threads)
    torch.manual_seed(0)
    server = rpc.RRef(GlobalServer())

    def run(n):
        futs = [rpc.rpc_async(f"worker{i + 1}", actor, args=(server, 100 + i, n, args.threads), timeout=0)
                for i in range(ACTORS)]
        return sum(f.wait() for f in futs)

    t0 = time.perf_counter()
    cold = run(args.warmup) / (time.perf_counter() - t0)
    t0 = time.perf_counter()
    steps = run(args.pushes)
    rate = steps / (time.perf_counter() - t0)
    print(f"# torch {torch.__version__}, {args.threads} thread(s) per process, {ACTORS} actors x {args.pushes} pushes "
          f"after {args.warmup} warm-up pushes; cold (the warm-up pushes): {cold:.1f} env steps/s", flush=True)
    print(f"a3c: {rate:.1f} env steps/s", flush=True)


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--pushes", type=int, default=200)
    p.add_argument("--warmup", type=int, default=5)
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--rank", type=int, default=0, help=argparse.SUPPRESS)
    p.add_argument("--port", type=int, default=0, help=argparse.SUPPRESS)
    args = p.parse_args()
    torch.set_num_threads(args.threads)
    run_rpc_group(__file__, args, ACTORS + 1, run_master)


if __name__ == "__main__":
    main()
