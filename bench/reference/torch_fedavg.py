# PyTorch RPC twin of bench/e2e_fedavg.ts (notebook 03's FedAvg): three clients behind rpc.remote(), each holding
# 20,000 examples of 784 features (seeded uniform noise, labels 0-9, made on the client) and the MLP
# 784-200-200-10; a round sends the master's state_dict to all three with rpc_async, each runs one epoch of minibatch
# SGD (batch 50, lr 0.05, momentum 0.9) and returns its weights, and the master loads their example-weighted mean.
# One warm-up round, then the median over --rounds timed ones. Prints "fedavg: <s> s/round" (bench/e2e.ts parses it).
#   /usr/bin/python3 bench/reference/torch_fedavg.py [--rounds 5] [--threads 1] [--serve]
# The master (rank 0, TCPStore host) starts ranks 1-3 as children; run it in a process group of its own so a timeout
# can end them all (bench/spawn_group.ts spawnInGroup).
import argparse, statistics, sys, time

sys.dont_write_bytecode = True
from blas_threads import pin_blas_threads  # noqa: E402

pin_blas_threads()  # NB: before torch loads its BLAS
import torch  # noqa: E402
import torch.distributed.rpc as rpc  # noqa: E402
import torch.nn as nn  # noqa: E402
import torch.nn.functional as F  # noqa: E402
from rpc_group import run_rpc_group, serve_commands  # noqa: E402

CLIENTS, EXAMPLES = 3, 20_000


def mlp():
    return nn.Sequential(nn.Linear(784, 200), nn.ReLU(), nn.Linear(200, 200), nn.ReLU(), nn.Linear(200, 10))


class Client:
    def __init__(self, n, seed, threads):
        torch.set_num_threads(threads)
        torch.manual_seed(seed)
        self.x, self.y = torch.rand(n, 784), torch.randint(0, 10, (n,))
        self.model = mlp()

    def size(self):
        return self.y.shape[0]

    def train(self, weights, epochs, lr, batch):
        self.model.load_state_dict(weights)
        opt = torch.optim.SGD(self.model.parameters(), lr=lr, momentum=0.9)
        n = self.y.shape[0]
        for _ in range(epochs):
            perm = torch.randperm(n)
            for i in range(0, n - batch + 1, batch):
                idx = perm[i:i + batch]
                loss = F.cross_entropy(self.model(self.x[idx]), self.y[idx])
                opt.zero_grad()
                loss.backward()
                opt.step()
        return {k: v.clone() for k, v in self.model.state_dict().items()}, n


def run_master(args):
    torch.set_num_threads(args.threads)
    clients = [rpc.remote(f"worker{k + 1}", Client, args=(EXAMPLES, 1000 + k, args.threads)) for k in range(CLIENTS)]
    for c in clients:
        c.rpc_sync().size()
    torch.manual_seed(1)
    model = mlp()

    def fed_round():
        t0 = time.perf_counter()
        weights = model.state_dict()
        results = [f.wait() for f in [c.rpc_async().train(weights, 1, 0.05, 50) for c in clients]]
        total = sum(n for _, n in results)
        model.load_state_dict({k: sum(w[k] * (n / total) for w, n in results) for k in results[0][0]})
        return time.perf_counter() - t0

    if args.serve:
        serve(args, fed_round)
        return
    times = []
    for r in range(args.rounds + 1):
        t = fed_round()
        if r > 0:
            times.append(t)
    print(f"# torch {torch.__version__}, {args.threads} thread(s) per process, {CLIENTS} clients x {EXAMPLES} examples, "
          f"{args.rounds} timed rounds after 1", flush=True)
    print(f"fedavg: {statistics.median(times):.4f} s/round", flush=True)


def serve(args, fed_round):
    """--serve (bench/e2e.ts --fedavg-interleave): one warm-up round, then rounds on command, so the bench can
    alternate them with tprpc's in one time window. Reads "run" lines from stdin and answers each with
    "round <s>"; "quit" or the end of stdin ends it. Between rounds the bench stops the whole group (SIGSTOP), as
    TensorPipe's idle threads poll and would take CPU from tprpc's rounds."""
    fed_round()
    serve_commands(f"torch {torch.__version__}, {args.threads} thread(s) per process, {CLIENTS} clients x {EXAMPLES} "
                   f"examples, rounds on command after 1", lambda cmd: f"round {fed_round():.4f}")


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--rounds", type=int, default=5)
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--serve", action="store_true", help="rounds on command from stdin (see serve())")
    p.add_argument("--rank", type=int, default=0, help=argparse.SUPPRESS)
    p.add_argument("--port", type=int, default=0, help=argparse.SUPPRESS)
    args = p.parse_args()
    torch.set_num_threads(args.threads)
    run_rpc_group(__file__, args, CLIENTS + 1, run_master)


if __name__ == "__main__":
    main()
