# PyTorch RPC (TensorPipe) between two local processes: rpc_sync identity round trips (median per call, GB/s both ways)
# and rpc_async identity calls/s with 64 in flight. Run: /usr/bin/python3 bench/reference/torch_rpc.py
#   [--sizes 0,4000] [--async-sizes 0,4000] [--in-flight 1,64] [--transports uv --channels basic] [--quick]
#
# This process is rank 0 ("worker0", also the TCPStore host); it starts rank 1 ("worker1") as a child running this
# script. Payload: a small int for 0 B, else torch.ones(n // 4) float32; the callee returns it (identity). Timing: see
# timing.py (warm-up calls, then trials of a batch of calls; median per-call time over trials). rpc_async keeps at
# most N calls outstanding (a semaphore released by each future's callback), ASYNC_CALLS per trial, one untimed trial
# first, median calls/s. Both processes use one intra-op thread. bench/rpc_common.ts parses the "rpc_sync identity"
# and "rpc_async identity, 64 in flight" lines and the "# ..." header.
import argparse, os, subprocess, sys, threading, time

sys.dont_write_bytecode = True  # no __pycache__ in the source tree
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from timing import ASYNC_CALLS, ASYNC_SIZES, SIZES, async_line, async_trials, measure, plan, sync_line  # noqa: E402
from rpc_group import free_port  # noqa: E402

import torch  # noqa: E402
import torch.distributed.rpc as rpc  # noqa: E402


def identity(x):
    return x


def payload(nbytes):
    return 1 if nbytes == 0 else torch.ones(nbytes // 4, dtype=torch.float32)


def check_echo(x, nbytes):
    y = rpc.rpc_sync("worker1", identity, args=(x,))
    same = y == x if nbytes == 0 else (isinstance(y, torch.Tensor) and y.shape == x.shape and y.dtype == x.dtype)
    if not same:
        raise RuntimeError(f"identity returned {type(y).__name__} for a {nbytes} B payload")


def async_rate(x, in_flight):
    """calls/s for ASYNC_CALLS rpc_async calls with at most `in_flight` outstanding."""
    slots = threading.Semaphore(in_flight)
    futures = []
    t0 = time.perf_counter()
    for _ in range(ASYNC_CALLS):
        slots.acquire()
        fut = rpc.rpc_async("worker1", identity, args=(x,))
        fut.add_done_callback(lambda _: slots.release())
        futures.append(fut)
    torch.futures.wait_all(futures)
    return ASYNC_CALLS / (time.perf_counter() - t0)


def run_master(args):
    print(f"# torch {torch.__version__}, intra-op threads {torch.get_num_threads()}, "
          f"transports={args.transports or 'default'}, channels={args.channels or 'default'}"
          f"{', quick plan' if args.quick else ''}", flush=True)
    for nbytes in args.sizes:
        x = payload(nbytes)
        check_echo(x, nbytes)
        warm, trials, batch = plan(nbytes, args.quick)
        sync_line("rpc_sync identity", nbytes, *measure(lambda: rpc.rpc_sync("worker1", identity, args=(x,)),
                                                        warm - 1, trials, batch))
        del x
    for nbytes in args.async_sizes:
        x = payload(nbytes)
        for in_flight in args.in_flight:
            async_rate(x, in_flight)  # warm-up trial
            rates = [async_rate(x, in_flight) for _ in range(async_trials(args.quick))]
            async_line(f"rpc_async identity, {in_flight} in flight", nbytes, rates)


def ints(text):
    return [int(v) for v in text.split(",") if v]


def main():
    p = argparse.ArgumentParser(description="PyTorch RPC reference benchmark (see the comment at the top)")
    p.add_argument("--sizes", type=ints, default=list(SIZES), help="rpc_sync payload bytes, comma-separated")
    p.add_argument("--async-sizes", type=ints, default=list(ASYNC_SIZES), help="rpc_async payload bytes ('' = none)")
    p.add_argument("--in-flight", type=ints, default=[64], help="rpc_async calls outstanding, e.g. 1,64")
    p.add_argument("--transports", default="", help="TensorPipe transports, e.g. uv (empty: TensorPipe's default)")
    p.add_argument("--channels", default="", help="TensorPipe channels, e.g. basic (empty: TensorPipe's default)")
    p.add_argument("--quick", action="store_true", help="fewer warm-up calls and trials")
    p.add_argument("--rank", type=int, default=0, help=argparse.SUPPRESS)  # 1: the callee this script starts
    p.add_argument("--port", type=int, default=0, help=argparse.SUPPRESS)
    args = p.parse_args()
    os.environ.setdefault("TP_SOCKET_IFNAME", "lo")  # TensorPipe's uv transport on loopback
    torch.set_num_threads(1)

    callee = None
    if args.rank == 0:
        args.port = free_port()
        callee = subprocess.Popen([sys.executable, os.path.abspath(__file__), "--rank", "1", "--port", str(args.port),
                                   "--transports", args.transports, "--channels", args.channels])
    # NB: TensorPipe reads _transports/_channels only in the constructor; setting the attributes later does nothing.
    options = rpc.TensorPipeRpcBackendOptions(
        num_worker_threads=16, rpc_timeout=600, init_method=f"tcp://127.0.0.1:{args.port}",
        _transports=args.transports.split(",") if args.transports else None,
        _channels=args.channels.split(",") if args.channels else None)
    try:
        rpc.init_rpc(f"worker{args.rank}", rank=args.rank, world_size=2, rpc_backend_options=options)
        if args.rank == 0:
            run_master(args)
        rpc.shutdown()
    finally:
        if callee is not None:
            try:
                callee.wait(timeout=60)
            except subprocess.TimeoutExpired:
                callee.kill()  # the child started above, by its Popen handle


if __name__ == "__main__":
    main()
