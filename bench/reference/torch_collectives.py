# The torch.distributed reference of `npm run bench -- --collectives` (bench/collectives.ts): the gloo backend
# between local processes on 127.0.0.1, measured the way bench/reference/timing.py measures (warm-up, then timed
# trials, the median per call).
#
# 1. send/recv round trip between 2 processes: rank 0 sends a float32 tensor of N bytes and receives it back
#    from rank 1 (which receives, then sends).
# 2. all_reduce (SUM) of a float32 tensor of N bytes in W processes; bus bandwidth = N / t * 2 (W - 1) / W.
#
# Result lines (parsed by bench/collectives.ts):
#   p2p round trip <bytes> B <seconds> s
#   all_reduce <world> procs <bytes> B <seconds> s
# Usage: python3 torch_collectives.py --p2p-sizes 4000,4000000 --sizes 4000,...,400000000 --worlds 3,4 [--quick]
import argparse, os, statistics, sys, time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from timing import plan  # noqa: E402
from rpc_group import free_port  # noqa: E402

import torch  # noqa: E402
import torch.distributed as dist  # noqa: E402
import torch.multiprocessing as mp  # noqa: E402


def median_time(call, warm, trials, batch, sync):
    for _ in range(warm):
        call()
    per = []
    for _ in range(trials):
        sync()
        t0 = time.perf_counter()
        for _ in range(batch):
            call()
        per.append((time.perf_counter() - t0) / batch)
    return statistics.median(per)


def worker(rank, world, port, sizes, p2p_sizes, quick, queue):
    os.environ["MASTER_ADDR"] = "127.0.0.1"
    os.environ["MASTER_PORT"] = str(port)
    torch.set_num_threads(1)
    dist.init_process_group("gloo", rank=rank, world_size=world)
    out = []
    if p2p_sizes:
        for n in p2p_sizes:
            t = torch.ones(n // 4, dtype=torch.float32)
            warm, trials, batch = plan(n, quick)

            def rt():
                if rank == 0:
                    dist.send(t, 1)
                    dist.recv(t, 1)
                else:
                    dist.recv(t, 0)
                    dist.send(t, 0)

            s = median_time(rt, warm, trials, batch, dist.barrier)
            out.append(f"p2p round trip {n:,} B {s:.9f} s")
    for n in sizes:
        t = torch.ones(n // 4, dtype=torch.float32)
        warm, trials, batch = plan(n, quick)
        s = median_time(lambda: dist.all_reduce(t), warm, trials, batch, dist.barrier)
        out.append(f"all_reduce {world} procs {n:,} B {s:.9f} s")
    dist.destroy_process_group()
    if rank == 0:
        queue.put(out)


def run(world, sizes, p2p_sizes, quick):
    ctx = mp.get_context("spawn")
    queue = ctx.Queue()
    port = free_port()
    procs = [ctx.Process(target=worker, args=(r, world, port, sizes, p2p_sizes, quick, queue)) for r in range(world)]
    for p in procs:
        p.start()
    lines = queue.get(timeout=1800)
    for p in procs:
        p.join(timeout=60)
    return lines


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--sizes", default="4000,4000000,40000000,400000000")
    ap.add_argument("--p2p-sizes", default="4000,4000000,40000000")
    ap.add_argument("--worlds", default="3,4")
    ap.add_argument("--quick", action="store_true")
    a = ap.parse_args()
    ints = lambda s: [int(x) for x in s.split(",") if x]
    print(f"# torch {torch.__version__}, gloo backend, {os.cpu_count()} CPUs, 1 intra-op thread per process", flush=True)
    for line in run(2, [], ints(a.p2p_sizes), a.quick):
        print(line, flush=True)
    for w in ints(a.worlds):
        for line in run(w, ints(a.sizes), [], a.quick):
            print(line, flush=True)


if __name__ == "__main__":
    main()
