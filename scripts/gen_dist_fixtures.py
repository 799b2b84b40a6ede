#!/usr/bin/env python3
"""Fixtures for tprpc's distributed autograd parity tests, from PyTorch itself.

Runs three training scenarios with torch.distributed.rpc, torch.distributed.autograd
and DistributedOptimizer (over SGD and over Adam) in a real 4-process RPC group
("master", "worker1", "worker2", "worker3", TensorPipe over 127.0.0.1), checks each
against the same model trained locally (no RPC), and writes initial weights,
inputs, per-step losses and final parameters as JSON for
test/e2e/dist_parity.test.ts:

  (a) the RPC paper's Block/Model example: Block = relu(fc(rx.to_here())), one
      Block on worker1 and one on worker2, chained through RRefs by the master;
      loss = ry.to_here().sum().
  (b) the CUDA-RPC recipe's two-shard model on the CPU: Linear(1000, 1000) on the
      master, Linear(1000, 1000) on worker1 (a RemoteModule), batch 1000,
      loss = y.sum(). Its tensors are too big to store, so they come from
      `gen()` (an integer hash that TypeScript reproduces bit for bit); the
      fixture stores the generator's arguments, checksums and per-row sums.
  (c) a parameter server: Net = fc2(tanh(fc1(x))) as a RemoteModule on worker1,
      trainers on worker2 and worker3, each with its own DistributedOptimizer;
      the master makes them take turns (t1 step s, t2 step s, ...) so the
      result is deterministic.

Usage: /usr/bin/python3 scripts/gen_dist_fixtures.py [--out PATH] [--bench-steps N] [--bench-only]
       npx prettier --write test/dist_autograd/fixtures   (CI checks the formatting of test/)
(needs torch >= 1.13 with torch.distributed.rpc; Debian's python3-torch works).
With --bench-steps, also prints the time per training step of (b), for `npm run bench:dist`
(bench/dist_step.ts).
"""
import argparse
import json
import os
import socket
import sys
import time

import torch
import torch.distributed.autograd as dist_autograd
import torch.distributed.rpc as rpc
import torch.multiprocessing as mp
import torch.nn as nn
import torch.nn.functional as F
from torch.distributed.nn import RemoteModule
from torch.distributed.optim import DistributedOptimizer

WORKERS = ["master", "worker1", "worker2", "worker3"]
OPTIMS = {"sgd": (torch.optim.SGD, {}), "adam": (torch.optim.Adam, {})}
LR = {"a": {"sgd": 0.005, "adam": 0.005}, "b": {"sgd": 1e-6, "adam": 1e-4}, "c": {"sgd": 0.1, "adam": 0.02}}
STEPS = {"a": 4, "b": 3, "c": 3}


def gen(seed, shape, scale):
    """Deterministic float32 data: element k is ((k*2654435761 + seed*97531) mod (2^31-1)) mod 20001, mapped to [-scale, scale]."""
    n = 1
    for s in shape:
        n *= s
    k = torch.arange(n, dtype=torch.int64)
    h = (k * 2654435761 + seed * 97531) % 2147483647
    v = ((h % 20001) - 10000).to(torch.float64) / 10000.0 * scale
    return v.to(torch.float32).reshape(shape)


def lst(t):
    return t.detach().tolist()


# ---------------------------------------------------------------- (a) Block / Model
class Block(nn.Module):
    def __init__(self, w, b):
        super().__init__()
        self.fc = nn.Linear(w.shape[1], w.shape[0])
        with torch.no_grad():
            self.fc.weight.copy_(w)
            self.fc.bias.copy_(b)

    def forward(self, rx):
        return F.relu(self.fc(rx.to_here()))


class Model(nn.Module):
    def __init__(self, w1, b1, w2, b2):
        super().__init__()
        self.rb1 = rpc.remote("worker1", Block, args=(w1, b1))
        self.rb2 = rpc.remote("worker2", Block, args=(w2, b2))

    def forward(self, ri):
        rx = self.rb1.remote().forward(ri)
        ry = self.rb2.remote().forward(rx)
        return ry


def param_rrefs(module_rref):
    return [rpc.RRef(p) for p in module_rref.local_value().parameters()]


def params_of(module_rref):
    return [lst(p) for p in module_rref.local_value().parameters()]


def scenario_a():
    w1, b1 = gen(11, [8, 6], 0.4), gen(12, [8], 0.1)
    w2, b2 = gen(13, [4, 8], 0.35), gen(14, [4], 0.1)
    inputs = [gen(100 + s, [5, 6], 1.0) for s in range(STEPS["a"])]
    out = {"init": {"w1": lst(w1), "b1": lst(b1), "w2": lst(w2), "b2": lst(b2)}, "inputs": [lst(x) for x in inputs]}
    for name, (cls, extra) in OPTIMS.items():
        lr = LR["a"][name]
        m = Model(w1, b1, w2, b2)
        params = rpc.rpc_sync("worker1", param_rrefs, (m.rb1,)) + rpc.rpc_sync("worker2", param_rrefs, (m.rb2,))
        opt = DistributedOptimizer(cls, params, lr=lr, **extra)
        losses = []
        for x in inputs:
            with dist_autograd.context() as ctx:
                loss = m(rpc.RRef(x)).to_here().sum()
                dist_autograd.backward(ctx, [loss])
                opt.step(ctx)
            losses.append(loss.item())
        final = rpc.rpc_sync("worker1", params_of, (m.rb1,)) + rpc.rpc_sync("worker2", params_of, (m.rb2,))
        # the same model, trained locally
        l1, l2 = nn.Linear(6, 8), nn.Linear(8, 4)
        with torch.no_grad():
            for p, v in zip([l1.weight, l1.bias, l2.weight, l2.bias], [w1, b1, w2, b2]):
                p.copy_(v)
        local_params = [l1.weight, l1.bias, l2.weight, l2.bias]
        lopt = cls(local_params, lr=lr, **extra)
        local_losses = []
        for x in inputs:
            lopt.zero_grad()
            loss = F.relu(l2(F.relu(l1(x)))).sum()
            loss.backward()
            lopt.step()
            local_losses.append(loss.item())
        check(losses, local_losses, final, local_params, f"(a) {name}")
        out[name] = {"lr": lr, "losses": losses, "params": final}
    return out


# ---------------------------------------------------------------- (b) two shards
B_GEN = {"x": [21, [1000, 1000], 1.0], "w1": [22, [1000, 1000], 0.0316], "b1": [23, [1000], 0.0316],
         "w2": [24, [1000, 1000], 0.0316], "b2": [25, [1000], 0.0316]}


class Shard(nn.Module):
    def __init__(self, w, b):
        super().__init__()
        self.linear = nn.Linear(w.shape[1], w.shape[0])
        with torch.no_grad():
            self.linear.weight.copy_(w)
            self.linear.bias.copy_(b)

    def forward(self, x):
        return self.linear(x)


def summary(params):
    """Per-row sums of each weight, each bias in full, and each parameter's total (float64)."""
    out = []
    for p in params:
        p = p.detach()
        out.append({"rowSums": lst(p.double().sum(1)) if p.dim() == 2 else lst(p.double()),
                    "total": p.double().sum().item(), "first": lst(p.reshape(-1)[:8])})
    return out


def remote_summary(module_rref):
    return summary(list(module_rref.local_value().parameters()))


def scenario_b(bench_steps, bench_only=False):
    t = {k: gen(*v) for k, v in B_GEN.items()}
    out = {"gen": B_GEN, "checksums": {k: v.double().sum().item() for k, v in t.items()}}
    for name, (cls, extra) in ({} if bench_only else OPTIMS).items():
        lr = LR["b"][name]
        lm = Shard(t["w1"], t["b1"])
        rm = RemoteModule("worker1/cpu", Shard, args=(t["w2"], t["b2"]))
        params = [rpc.RRef(p) for p in lm.parameters()] + rm.remote_parameters()
        opt = DistributedOptimizer(cls, params, lr=lr, **extra)
        losses, times = [], []
        for _ in range(STEPS["b"]):
            tik = time.perf_counter()
            with dist_autograd.context() as ctx:
                y = rm(lm(t["x"]))
                loss = y.sum()
                dist_autograd.backward(ctx, [loss])
                opt.step(ctx)
            times.append(time.perf_counter() - tik)
            losses.append(loss.item())
        final = summary(lm.parameters()) + rpc.rpc_sync("worker1", remote_summary, (rm.module_rref,))
        l1, l2 = Shard(t["w1"], t["b1"]), Shard(t["w2"], t["b2"])
        local_params = list(l1.parameters()) + list(l2.parameters())
        lopt = cls(local_params, lr=lr, **extra)
        local_losses = []
        for _ in range(STEPS["b"]):
            lopt.zero_grad()
            loss = l2(l1(t["x"])).sum()
            loss.backward()
            lopt.step()
            local_losses.append(loss.item())
        for a, b in zip(losses, local_losses):
            assert abs(a - b) <= 1e-3 * abs(b) + 1e-2, f"(b) {name}: loss {a} vs local {b}"
        for a, b in zip(final, summary(local_params)):
            assert abs(a["total"] - b["total"]) <= 1e-3 * abs(b["total"]) + 1e-3, f"(b) {name}: params differ"
        out[name] = {"lr": lr, "losses": losses, "params": final}
        print(f"(b) {name}: torch RPC step times (s): {[round(x, 4) for x in times]}", flush=True)
    if bench_steps:
        lm = Shard(t["w1"], t["b1"])
        rm = RemoteModule("worker1/cpu", Shard, args=(t["w2"], t["b2"]))
        opt = DistributedOptimizer(torch.optim.SGD, [rpc.RRef(p) for p in lm.parameters()] + rm.remote_parameters(), lr=1e-3)
        times = []
        for _ in range(bench_steps + 1):
            tik = time.perf_counter()
            with dist_autograd.context() as ctx:
                loss = rm(lm(t["x"])).sum()
                dist_autograd.backward(ctx, [loss])
                opt.step(ctx)
            times.append(time.perf_counter() - tik)
        times = sorted(times[1:])
        print(f"BENCH two-shard torch RPC step: median {times[len(times) // 2] * 1e3:.1f} ms over {bench_steps} steps "
              f"(threads {torch.get_num_threads()})", flush=True)
    return out


# ---------------------------------------------------------------- (c) parameter server
class Net(nn.Module):
    def __init__(self, w1, b1, w2, b2):
        super().__init__()
        self.fc1 = nn.Linear(w1.shape[1], w1.shape[0])
        self.fc2 = nn.Linear(w2.shape[1], w2.shape[0])
        with torch.no_grad():
            for p, v in zip([self.fc1.weight, self.fc1.bias, self.fc2.weight, self.fc2.bias], [w1, b1, w2, b2]):
                p.copy_(v)

    def forward(self, x):
        return self.fc2(torch.tanh(self.fc1(x)))


TRAINER = {}


def trainer_setup(module_rref, opt_name, lr):
    cls, extra = OPTIMS[opt_name]
    rm = RemoteModule.init_from_module_rref("worker1/cpu", module_rref)
    TRAINER["rm"] = rm
    TRAINER["opt"] = DistributedOptimizer(cls, rm.remote_parameters(), lr=lr, **extra)


def trainer_step(x, y):
    with dist_autograd.context() as ctx:
        loss = F.mse_loss(TRAINER["rm"].forward(x), y)
        dist_autograd.backward(ctx, [loss])
        TRAINER["opt"].step(ctx)
    return loss.item()


def scenario_c():
    w1, b1 = gen(31, [5, 6], 0.4), gen(32, [5], 0.2)
    w2, b2 = gen(33, [2, 5], 0.45), gen(34, [2], 0.2)
    trainers = ["worker2", "worker3"]
    xs = [[gen(200 + 10 * k + s, [4, 6], 1.0) for s in range(STEPS["c"])] for k in range(2)]
    ys = [[gen(300 + 10 * k + s, [4, 2], 1.0) for s in range(STEPS["c"])] for k in range(2)]
    out = {"init": {"w1": lst(w1), "b1": lst(b1), "w2": lst(w2), "b2": lst(b2)},
           "inputs": [[lst(x) for x in row] for row in xs], "targets": [[lst(y) for y in row] for row in ys]}
    for name, (cls, extra) in OPTIMS.items():
        lr = LR["c"][name]
        ps = RemoteModule("worker1/cpu", Net, args=(w1, b1, w2, b2))
        for tr in trainers:
            rpc.rpc_sync(tr, trainer_setup, (ps.module_rref, name, lr))
        losses = [[], []]
        for s in range(STEPS["c"]):
            for k, tr in enumerate(trainers):
                losses[k].append(rpc.rpc_sync(tr, trainer_step, (xs[k][s], ys[k][s])))
        final = rpc.rpc_sync("worker1", params_of, (ps.module_rref,))
        net = Net(w1, b1, w2, b2)
        opts = [cls(net.parameters(), lr=lr, **extra) for _ in trainers]
        local = [[], []]
        for s in range(STEPS["c"]):
            for k in range(2):
                opts[k].zero_grad()
                loss = F.mse_loss(net(xs[k][s]), ys[k][s])
                loss.backward()
                opts[k].step()
                local[k].append(loss.item())
        check(losses[0] + losses[1], local[0] + local[1], final, list(net.parameters()), f"(c) {name}")
        out[name] = {"lr": lr, "losses": losses, "params": final}
    return out


def check(losses, local_losses, final, local_params, what):
    for a, b in zip(losses, local_losses):
        assert abs(a - b) <= 1e-4 * abs(b) + 1e-5, f"{what}: loss {a} vs local {b}"
    for a, p in zip(final, local_params):
        d = (torch.tensor(a) - p.detach()).abs().max().item()
        assert d <= 1e-5, f"{what}: parameters differ from the local run by {d}"


def run(rank, port, out_path, bench_steps, bench_only):
    os.environ["MASTER_ADDR"] = "127.0.0.1"
    os.environ["MASTER_PORT"] = str(port)
    opts = rpc.TensorPipeRpcBackendOptions(num_worker_threads=16, rpc_timeout=300)
    rpc.init_rpc(WORKERS[rank], rank=rank, world_size=len(WORKERS), rpc_backend_options=opts)
    if rank == 0 and bench_only:
        scenario_b(bench_steps, bench_only=True)
    elif rank == 0:
        fixtures = {"torch": torch.__version__, "steps": STEPS, "a": scenario_a(), "b": scenario_b(bench_steps),
                    "c": scenario_c()}
        with open(out_path, "w") as f:
            json.dump(fixtures, f)
        print(f"wrote {out_path}", flush=True)
    rpc.shutdown()


def main():
    ap = argparse.ArgumentParser()
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    ap.add_argument("--out", default=os.path.join(root, "test/dist_autograd/fixtures/dist_parity.json"))
    ap.add_argument("--bench-steps", type=int, default=0)
    ap.add_argument("--bench-only", action="store_true", help="only time (b)'s training step; write nothing")
    a = ap.parse_args()
    os.makedirs(os.path.dirname(a.out), exist_ok=True)
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    mp.spawn(run, args=(port, a.out, a.bench_steps, a.bench_only), nprocs=len(WORKERS), join=True)


if __name__ == "__main__":
    sys.exit(main())
