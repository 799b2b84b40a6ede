"""PyTorch's own CUDA-RPC recipe on the device machine, for gpu:check's channels section.

Run by run.sh after torch_ref.py: `python3 torch_rpc_ref.py <torch_ref.json>` adds one key to that
file, "cuda_rpc": {cpu_s, cuda_s, speedup, device, torch} or {error}. The recipe as PyTorch's
tutorial has it (two Linear(1000, 1000) shards, the second on worker1 behind rpc.remote, 10 forward
+ backward passes in distributed autograd contexts, "cpu" mode staging outputs through host memory
against "cuda" mode with a device map), with what tprpc's run (channels.mjs) does the same way:
one GPU, so the map is {0: 0} and both shards live on cuda:0 in two processes; one warm-up pass per
mode before the timed ten; torch.cuda.synchronize around the timing.
"""
import json
import os
import socket
import sys
import time


def merge(path, value):
    try:
        with open(path) as f:
            data = json.load(f)
    except Exception:  # noqa: BLE001 - no reference yet: start one
        data = {}
    data["cuda_rpc"] = value
    with open(path, "w") as f:
        json.dump(data, f, indent=1)


try:
    import torch
    import torch.distributed.autograd as autograd
    import torch.distributed.rpc as rpc
    import torch.multiprocessing as mp
    import torch.nn as nn
except Exception as e:  # noqa: BLE001
    merge(sys.argv[1], {"error": f"PyTorch is not importable: {e}"})
    sys.exit(0)


class MyModule(nn.Module):
    def __init__(self, device, comm_mode):
        super().__init__()
        self.device = device
        self.linear = nn.Linear(1000, 1000).to(device)
        self.comm_mode = comm_mode

    def forward(self, x):
        y = self.linear(x.to(self.device))  # a no-op when x is already there
        return y.cpu() if self.comm_mode == "cpu" else y


def measure(comm_mode):
    lm = MyModule("cuda:0", comm_mode)
    rm = rpc.remote("worker1", MyModule, args=("cuda:0", comm_mode))
    x = torch.randn(1000, 1000).cuda(0)

    def one_pass():
        with autograd.context() as ctx:
            y = rm.rpc_sync().forward(lm(x))
            autograd.backward(ctx, [y.sum()])

    one_pass()  # warm-up
    torch.cuda.synchronize(0)
    tik = time.time()
    for _ in range(10):
        one_pass()
    torch.cuda.synchronize(0)
    return time.time() - tik


def run_worker(rank, port, out):
    os.environ["MASTER_ADDR"] = "127.0.0.1"
    os.environ["MASTER_PORT"] = str(port)
    options = rpc.TensorPipeRpcBackendOptions(num_worker_threads=128, rpc_timeout=120)
    if rank == 0:
        options.set_device_map("worker1", {0: 0})
    rpc.init_rpc(f"worker{rank}", rank=rank, world_size=2, rpc_backend_options=options)
    if rank == 0:
        try:
            cpu = measure("cpu")
            cuda = measure("cuda")
            merge(out, {"cpu_s": cpu, "cuda_s": cuda, "speedup": cpu / cuda,
                        "device": torch.cuda.get_device_name(0), "torch": torch.__version__})
        except Exception as e:  # noqa: BLE001
            merge(out, {"error": f"{type(e).__name__}: {e}"})
    rpc.shutdown()


def main():
    out = sys.argv[1]
    if not torch.cuda.is_available():
        merge(out, {"error": "PyTorch sees no CUDA device"})
        return
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    try:
        mp.spawn(run_worker, args=(port, out), nprocs=2, join=True)
    except Exception as e:  # noqa: BLE001
        merge(out, {"error": f"the recipe's processes failed: {type(e).__name__}: {e}"})
    try:
        with open(out) as f:
            done = "cuda_rpc" in json.load(f)
    except Exception:  # noqa: BLE001
        done = False
    if not done:
        merge(out, {"error": "the recipe ended without a result"})


if __name__ == "__main__":
    main()
