# PyTorch RPC twin of bench/e2e.ts's pipelined GPT (notebook 04's model and schedule), written the way PyTorch's
# "Distributed Pipeline Parallelism Using RPC" tutorial does it: each stage is an nn.Module owned by a worker
# (rpc.remote), the master splits a batch into micro-batches and, per micro-batch, chains
# stage1.remote().forward(x) -> stage2.rpc_async().forward(rref, y) without waiting; then
# dist_autograd.backward and a DistributedOptimizer(AdamW) step, inside one dist_autograd context.
#
#   /usr/bin/python3 bench/reference/torch_gpt_pipeline.py [--steps 30] [--micro 4] [--threads 1] [--warmup 60] [--serve]
#
# Model: bench/gpt_step_torch.py's GPT (vocab 70, 4 layers, 128 wide, 4 heads, block 64, untied), layers 0-1 plus the
# embeddings on worker1, layers 2-3 plus ln_f and the head on worker2, seeded alike (manual_seed(1234) before the
# full model is built, each stage keeping its part). Batches: 32 windows of 64 random tokens from a seeded generator
# (the step's speed does not depend on the tokens). AdamW lr 3e-3, betas (0.9, 0.99), weight decay 0.01.
# Prints one line "pipeline gpt: <median ms/step> ms/step, <tokens/s> tokens/s, loss <last>" (bench/e2e.ts parses it).
# The master (rank 0, also the TCPStore host) starts ranks 1 and 2 as children; run it in a process group of its own
# so a timeout can end all three (bench/spawn_group.ts spawnInGroup).
import argparse, os, statistics, sys, threading, time

sys.dont_write_bytecode = True
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
from blas_threads import pin_blas_threads  # noqa: E402

pin_blas_threads()  # NB: before torch loads its BLAS
import torch  # noqa: E402
import torch.distributed.autograd as dist_autograd  # noqa: E402
import torch.distributed.rpc as rpc  # noqa: E402
import torch.nn as nn  # noqa: E402
import torch.nn.functional as F  # noqa: E402
from torch.distributed.optim import DistributedOptimizer  # noqa: E402
from gpt_step_torch import GPT, B, L, T, V  # noqa: E402
from rpc_group import run_rpc_group, serve_commands  # noqa: E402

MODEL_SEED = 1234
COLD_STEPS = 20  # bench/e2e.ts's COLD_STEPS: the cold figure is the median of this many first warm-up steps


class Stage1(nn.Module):
    def __init__(self, threads):
        super().__init__()
        torch.set_num_threads(threads)
        torch.manual_seed(MODEL_SEED)
        full = GPT()
        self.wte, self.wpe = full.wte, full.wpe
        self.blocks = nn.ModuleList(list(full.blocks)[: L // 2])
        self.lock = threading.Lock()  # as the tutorial: one micro-batch at a time through a stage

    def forward(self, idx):
        with self.lock:
            x = self.wte(idx) + self.wpe(torch.arange(idx.shape[1]))
            for b in self.blocks:
                x = b(x)
            return x

    def parameter_rrefs(self):
        return [rpc.RRef(p) for p in self.parameters()]


class Stage2(nn.Module):
    def __init__(self, threads):
        super().__init__()
        torch.set_num_threads(threads)
        torch.manual_seed(MODEL_SEED)
        full = GPT()
        self.blocks = nn.ModuleList(list(full.blocks)[L // 2:])
        self.ln_f, self.head = full.ln_f, full.head
        self.lock = threading.Lock()

    def forward(self, h_rref, targets):
        x = h_rref.to_here()
        with self.lock:
            for b in self.blocks:
                x = b(x)
            return F.cross_entropy(self.head(self.ln_f(x)).view(-1, V), targets.view(-1))

    def parameter_rrefs(self):
        return [rpc.RRef(p) for p in self.parameters()]


def run_master(args):
    torch.set_num_threads(args.threads)
    stage1 = rpc.remote("worker1", Stage1, args=(args.threads,))
    stage2 = rpc.remote("worker2", Stage2, args=(args.threads,))
    params = stage1.rpc_sync().parameter_rrefs() + stage2.rpc_sync().parameter_rrefs()
    opt = DistributedOptimizer(torch.optim.AdamW, params, lr=3e-3, betas=(0.9, 0.99), weight_decay=0.01)
    gen = torch.Generator().manual_seed(0)

    def step():
        x, y = torch.randint(0, V, (B, T), generator=gen), torch.randint(0, V, (B, T), generator=gen)
        with dist_autograd.context() as ctx:
            futs = [stage2.rpc_async().forward(stage1.remote().forward(xm), ym)
                    for xm, ym in zip(x.chunk(args.micro), y.chunk(args.micro))]
            loss = torch.stack([f.wait() for f in futs]).sum() / args.micro
            dist_autograd.backward(ctx, [loss])
            opt.step(ctx)
        return loss.item()

    if args.serve:
        serve(args, step)
        return
    cold = []
    for i in range(args.warmup):
        t0 = time.perf_counter()
        step()
        if i < COLD_STEPS:
            cold.append(time.perf_counter() - t0)
    times, loss = [], 0.0
    for _ in range(args.steps):
        t0 = time.perf_counter()
        loss = step()
        times.append(time.perf_counter() - t0)
    med = statistics.median(times)
    print(f"# torch {torch.__version__}, {args.threads} thread(s) per process, micro-batches {args.micro}, "
          f"{args.steps} timed steps after {args.warmup}; cold (the first {len(cold)} warm-up steps): "
          f"{statistics.median(cold) * 1e3 if cold else float('nan'):.2f} ms/step", flush=True)
    print(f"pipeline gpt: {med * 1e3:.2f} ms/step, {B * T / med:.1f} tokens/s, loss {loss:.4f}", flush=True)


def serve(args, step):
    """--serve (bench/e2e.ts --gpt-interleave): the warm-up, then blocks of steps on command, so the bench can
    alternate them with tprpc's in one time window. Reads "run K" lines from stdin and answers each with
    "block <ms>,<ms>,... loss <last>"; "quit" or the end of stdin ends it. Between blocks the bench stops the
    whole group (SIGSTOP), as TensorPipe's idle threads poll and would take CPU from tprpc's blocks."""
    for _ in range(args.warmup):
        step()

    def block(cmd):
        times, loss = [], 0.0
        for _ in range(int(cmd[1])):
            t0 = time.perf_counter()
            loss = step()
            times.append(time.perf_counter() - t0)
        return "block " + ",".join(f"{t * 1e3:.3f}" for t in times) + f" loss {loss:.4f}"

    serve_commands(f"torch {torch.__version__}, {args.threads} thread(s) per process, micro-batches {args.micro}, "
                   f"blocks on command after {args.warmup} warm-up steps", block)

def main():
    p = argparse.ArgumentParser()
    p.add_argument("--steps", type=int, default=30)
    p.add_argument("--warmup", type=int, default=60)
    p.add_argument("--micro", type=int, default=4)
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--serve", action="store_true", help="blocks of steps on command from stdin (see serve())")
    p.add_argument("--rank", type=int, default=0, help=argparse.SUPPRESS)
    p.add_argument("--port", type=int, default=0, help=argparse.SUPPRESS)
    args = p.parse_args()
    torch.set_num_threads(args.threads)
    run_rpc_group(__file__, args, 3, run_master)


if __name__ == "__main__":
    main()
