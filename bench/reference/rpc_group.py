# Shared by bench/reference/torch_*.py (imported, not run): a free loopback port, and the one-script RPC group the
# workload references use. Rank 0 (the master, also the TCPStore host) starts ranks 1 .. world_size - 1 as children
# running the same script; every rank joins over TensorPipe; the master runs the workload; all shut down; a child
# still running 60 s after the master's shutdown is killed.
import os, socket, subprocess, sys

import torch.distributed.rpc as rpc


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def run_rpc_group(script, args, world_size, run_master):
    """Runs `script`'s group as rank `args.rank`; args has rank, port and threads (handed on to the children)."""
    children = []
    if args.rank == 0:
        args.port = free_port()
        children = [subprocess.Popen([sys.executable, os.path.abspath(script), "--rank", str(r), "--port",
                                      str(args.port), "--threads", str(args.threads)]) for r in range(1, world_size)]
    options = rpc.TensorPipeRpcBackendOptions(num_worker_threads=16, rpc_timeout=600,
                                              init_method=f"tcp://127.0.0.1:{args.port}")
    try:
        rpc.init_rpc(f"worker{args.rank}" if args.rank else "master", rank=args.rank, world_size=world_size,
                     rpc_backend_options=options)
        if args.rank == 0:
            run_master(args)
        rpc.shutdown()
    finally:
        for c in children:
            try:
                c.wait(timeout=60)
            except subprocess.TimeoutExpired:
                c.kill()


def serve_commands(header, answer):
    """The --serve loop of the workload references (bench/e2e.ts's interleaved runs), after their warm-up:
    prints "# <header>" and "ready", then answers each command line from stdin with answer(words) on one
    line; "quit" or the end of stdin ends it."""
    print(f"# {header}", flush=True)
    print("ready", flush=True)
    for line in sys.stdin:
        cmd = line.split()
        if not cmd or cmd[0] == "quit":
            break
        print(answer(cmd), flush=True)
