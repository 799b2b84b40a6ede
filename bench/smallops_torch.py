# The PyTorch side of bench/smallops.ts: the same three workloads (FedAvg client steps, GPT
# micro-batches, A3C actor updates with a local server), run on command so the two sides interleave.
# Protocol on stdin/stdout, one line each: "setup NAME WARMUP" -> "ok"; "run NAME N" -> {"ms": wall, "cpu": process CPU, "n": units}.
# Run: /usr/bin/python3 bench/smallops_torch.py THREADS
import json, math, os, random, sys, time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "reference"))
from blas_threads import pin_blas_threads  # noqa: E402

THREADS = int(sys.argv[1]) if len(sys.argv) > 1 else 1
pin_blas_threads(THREADS)  # NB: before torch loads its BLAS
import torch  # noqa: E402
import torch.nn as nn  # noqa: E402
import torch.nn.functional as F  # noqa: E402

torch.set_num_threads(THREADS)


def fedavg():
    torch.manual_seed(1000)
    N = 20000
    x, y = torch.rand(N, 784), torch.randint(0, 10, (N,))
    model = nn.Sequential(nn.Linear(784, 200), nn.ReLU(), nn.Linear(200, 200), nn.ReLU(), nn.Linear(200, 10))
    opt = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
    st = {"perm": torch.randperm(N), "i": 0}

    def run(n):
        for _ in range(n):
            if st["i"] + 50 > N:
                st["perm"], st["i"] = torch.randperm(N), 0
            idx = st["perm"].narrow(0, st["i"], 50)
            st["i"] += 50
            loss = F.cross_entropy(model(x.index_select(0, idx)), y.index_select(0, idx))
            opt.zero_grad()
            loss.backward()
            opt.step()
        return n

    return run


V, T, C, H, L = 70, 64, 128, 4, 4


class Attn(nn.Module):
    def __init__(self):
        super().__init__()
        self.c_attn, self.c_proj = nn.Linear(C, 3 * C), nn.Linear(C, C)
        self.register_buffer("mask", torch.tril(torch.ones(T, T, dtype=torch.bool)))

    def forward(self, x):
        b, t, c = x.shape
        q, k, v = self.c_attn(x).split(C, dim=2)
        q, k, v = (z.view(b, t, H, c // H).transpose(1, 2) for z in (q, k, v))
        att = (q @ k.transpose(-2, -1)) / math.sqrt(c // H)
        att = att.masked_fill(~self.mask[:t, :t], float("-inf")).softmax(-1)
        return self.c_proj((att @ v).transpose(1, 2).contiguous().view(b, t, c))


class Block(nn.Module):
    def __init__(self):
        super().__init__()
        self.ln1, self.attn, self.ln2 = nn.LayerNorm(C), Attn(), nn.LayerNorm(C)
        self.fc, self.proj = nn.Linear(C, 4 * C), nn.Linear(4 * C, C)

    def forward(self, x):
        x = x + self.attn(self.ln1(x))
        return x + self.proj(F.gelu(self.fc(self.ln2(x))))


class GPT(nn.Module):
    def __init__(self):
        super().__init__()
        self.wte, self.wpe = nn.Embedding(V, C), nn.Embedding(T, C)
        self.blocks = nn.ModuleList(Block() for _ in range(L))
        self.ln_f, self.head = nn.LayerNorm(C), nn.Linear(C, V, bias=False)

    def forward(self, idx, targets):
        x = self.wte(idx) + self.wpe(torch.arange(idx.shape[1]))
        for b in self.blocks:
            x = b(x)
        return F.cross_entropy(self.head(self.ln_f(x)).view(-1, V), targets.view(-1))


def gpt():
    torch.manual_seed(0)
    model = GPT()
    opt = torch.optim.AdamW(model.parameters(), lr=3e-3, weight_decay=0.01)
    st = {"k": 0}

    def run(n):
        for _ in range(n):
            if st["k"] % 4 == 0:
                opt.zero_grad()
            x, y = torch.randint(0, V, (8, T)), torch.randint(0, V, (8, T))
            (model(x, y) / 4).backward()
            st["k"] += 1
            if st["k"] % 4 == 0:
                opt.step()
        return n

    return run


class ActorCritic(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc, self.policy, self.value = nn.Linear(4, 128), nn.Linear(128, 2), nn.Linear(128, 1)

    def forward(self, x):
        h = F.relu(self.fc(x))
        return self.policy(h), self.value(h)


def a3c():
    torch.manual_seed(100)
    server, net = ActorCritic(), ActorCritic()
    sopt = torch.optim.Adam(server.parameters(), lr=2e-3)
    rng = random.Random(100)
    env = {"s": [0.0] * 4, "t": 0}

    def reset():
        env["s"] = [rng.random() * 0.1 - 0.05 for _ in range(4)]
        env["t"] = 0
        return list(env["s"])

    def step(action):
        x, x_dot, th, th_dot = env["s"]
        force = 10.0 if action == 1 else -10.0
        cos, sin = math.cos(th), math.sin(th)
        temp = (force + 0.05 * th_dot * th_dot * sin) / 1.1
        th_acc = (9.8 * sin - cos * temp) / (0.5 * (4 / 3 - 0.1 * cos * cos / 1.1))
        x_acc = temp - 0.05 * th_acc * cos / 1.1
        env["s"] = [x + 0.02 * x_dot, x_dot + 0.02 * x_acc, th + 0.02 * th_dot, th_dot + 0.02 * th_acc]
        env["t"] += 1
        s = env["s"]
        terminated = abs(s[0]) > 2.4 or abs(s[2]) > 12 * 2 * math.pi / 360
        return list(s), terminated, (not terminated and env["t"] >= 500)

    st = {"w": [p.detach() for p in server.parameters()], "obs": reset()}

    def run(updates):
        steps = 0
        for _ in range(updates):
            with torch.no_grad():
                for p, w in zip(net.parameters(), st["w"]):
                    p.copy_(w)
            states, actions, rewards = [], [], []
            terminated = ended = False
            obs = last = st["obs"]
            for _ in range(20):
                with torch.no_grad():
                    probs = net(torch.tensor([obs]))[0].softmax(-1)
                action = torch.multinomial(probs, 1).item()
                o2, term, trunc = step(action)
                states.append(obs)
                actions.append(action)
                rewards.append(1.0)
                obs = last = o2
                if term or trunc:
                    terminated, ended = term, True
                    obs = reset()
                    break
            st["obs"] = obs
            with torch.no_grad():
                R = 0.0 if terminated else net(torch.tensor([last]))[1].item()
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
            for p, q in zip(server.parameters(), net.parameters()):
                p.grad = q.grad
            sopt.step()
            sopt.zero_grad()
            st["w"] = [p.detach() for p in server.parameters()]
            steps += len(rewards)
        return steps

    return run


def main():
    work = {}
    for line in sys.stdin:
        cmd = line.split()
        if not cmd:
            continue
        if cmd[0] == "setup":
            work[cmd[1]] = {"fedavg": fedavg, "gpt": gpt, "a3c": a3c}[cmd[1]]()
            work[cmd[1]](int(cmd[2]) if len(cmd) > 2 else 1)  # warm-up
            print("ok", flush=True)
        elif cmd[0] == "run":
            t0, c0 = time.perf_counter(), time.process_time()
            n = work[cmd[1]](int(cmd[2]))
            ms, cpu = (time.perf_counter() - t0) * 1000, (time.process_time() - c0) * 1000
            print(json.dumps({"ms": ms, "cpu": cpu, "n": n}), flush=True)


if __name__ == "__main__":
    main()
