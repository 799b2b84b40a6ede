"""PyTorch's side of `npm run gpu:check` (run on the device machine by run.sh).

Writes one JSON file (argv[1]) that scripts/gpu_check/main.mjs compares tprpc against:
1. parity: for each case of ops.mjs's table (same names), seeded float32 inputs, the
   output computed by PyTorch on cuda:0 and, where the case has one, the gradient of
   sum(out * w) (w: seeded weights) with respect to its first input;
2. bench: on cuda:0, device copy bandwidth (y.copy_(x), 2 x bytes per copy), elementwise
   a + b bandwidth (3 x bytes), fp32 matmul TFLOP/s (4096^3, TF32 off as torch's default);
3. gpt: one training step (forward, cross-entropy, backward, AdamW) of notebook 04's
   GPT (4 layers, width 128, 4 heads, context 64, vocabulary 80, batch 32): median ms.
Timings use CUDA events after warm-up; each section records its error instead of stopping.
"""
import json
import math
import sys
import time
import traceback

try:
    import torch
    import torch.nn as nn
    import torch.nn.functional as F
except Exception as e:  # noqa: BLE001
    json.dump({"error": f"PyTorch is not importable: {e}"}, open(sys.argv[1], "w"))
    sys.exit(0)

DEV = sys.argv[2] if len(sys.argv) > 2 else "cuda:0"  # "cpu": a dry check of the script here
G = torch.Generator().manual_seed(0)


def rnd(*shape):
    return torch.randn(*shape, generator=G, dtype=torch.float32)


# name -> (inputs on CPU, fn(*inputs on cuda) -> out, has_grad); mirrored by ops.mjs's OPS table.
def cases():
    idx = torch.randint(0, 10, (6,), generator=G)
    tgt = torch.randint(0, 7, (5,), generator=G)
    return {
        "add_broadcast": ([rnd(4, 5), rnd(5)], lambda a, b: a + b, True),
        "sub": ([rnd(3, 4), rnd(3, 4)], lambda a, b: a - b, True),
        "mul_broadcast": ([rnd(2, 3, 4), rnd(3, 1)], lambda a, b: a * b, True),
        "div": ([rnd(3, 4), rnd(3, 4)], lambda a, b: a / (b.abs() + 0.5), True),
        "exp": ([rnd(3, 4)], torch.exp, True),
        "log": ([rnd(3, 4)], lambda a: (a.abs() + 0.1).log(), True),
        "tanh": ([rnd(3, 4)], torch.tanh, True),
        "sigmoid": ([rnd(3, 4)], torch.sigmoid, True),
        "relu": ([rnd(3, 4)], torch.relu, True),
        "gelu": ([rnd(3, 4)], F.gelu, True),
        "sqrt": ([rnd(3, 4)], lambda a: (a.abs() + 0.1).sqrt(), True),
        "sum_dim": ([rnd(3, 4, 5)], lambda a: a.sum(1), True),
        "mean_dim": ([rnd(3, 4, 5)], lambda a: a.mean(0), True),
        "sum_all": ([rnd(7, 9)], lambda a: a.sum(), True),
        "amax": ([rnd(3, 6)], lambda a: a.amax(-1), False),
        "softmax": ([rnd(4, 7)], lambda a: a.softmax(-1), True),
        "log_softmax": ([rnd(4, 7)], lambda a: a.log_softmax(-1), True),
        "layer_norm": ([rnd(4, 8), rnd(8), rnd(8)], lambda x, w, b: F.layer_norm(x, [8], w, b), True),
        "embedding": ([rnd(10, 4), idx.float()], lambda w, i: F.embedding(i.long(), w), True),
        "cross_entropy": ([rnd(5, 7), tgt.float()], lambda x, t: F.cross_entropy(x, t.long()), True),
        "matmul": ([rnd(8, 16), rnd(16, 12)], lambda a, b: a @ b, True),
        "bmm": ([rnd(2, 3, 4), rnd(2, 4, 5)], lambda a, b: a @ b, True),
        "transpose_add": ([rnd(4, 3), rnd(3, 4)], lambda a, b: a.t() + b, True),
        "adamw_step": ([rnd(6, 5), rnd(6, 5)], None, False),
    }


def adamw_step(p, g):
    p = p.clone().requires_grad_(True)
    opt = torch.optim.AdamW([p], lr=1e-2, betas=(0.9, 0.99), weight_decay=0.01)
    p.grad = g.clone()
    opt.step()
    p.grad = g.clone() * 0.5
    opt.step()
    return p.detach()


def parity():
    out = {}
    for name, (inputs, fn, has_grad) in cases().items():
        try:
            xs = [x.to(DEV) for x in inputs]
            if fn is None:
                y = adamw_step(*xs)
                entry = {"inputs": [t.tolist() for t in inputs], "out": y.cpu().tolist()}
            else:
                if has_grad:
                    xs[0].requires_grad_(True)
                y = fn(*xs)
                entry = {"inputs": [t.tolist() for t in inputs], "out": y.detach().cpu().tolist()}
                if has_grad:
                    w = torch.randn(y.shape, generator=G, dtype=torch.float32)
                    (y * w.to(DEV)).sum().backward()
                    entry["w"] = w.tolist()
                    entry["grad"] = xs[0].grad.cpu().tolist()
            out[name] = entry
        except Exception as e:  # noqa: BLE001
            out[name] = {"error": f"{type(e).__name__}: {e}"}
    return out


def timed(f, iters):
    for _ in range(3):
        f()
    torch.cuda.synchronize()
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    for _ in range(iters):
        f()
    end.record()
    torch.cuda.synchronize()
    return start.elapsed_time(end) / 1e3 / iters  # seconds per call


def bench():
    n = 64 << 20  # float32 elements: 256 MiB per tensor
    a, b, c = (torch.randn(n, device=DEV) for _ in range(3))
    copy_s = timed(lambda: c.copy_(a), 20)
    add_s = timed(lambda: torch.add(a, b, out=c), 20)
    del a, b, c
    m = 4096
    torch.backends.cuda.matmul.allow_tf32 = False
    x, y = torch.randn(m, m, device=DEV), torch.randn(m, m, device=DEV)
    mm_s = timed(lambda: x @ y, 10)
    return {
        "elements": n,
        "copyGBs": 2 * 4 * n / copy_s / 1e9,
        "addGBs": 3 * 4 * n / add_s / 1e9,
        "matmulN": m,
        "matmulTFLOPs": 2 * m**3 / mm_s / 1e12,
    }


class Block(nn.Module):
    def __init__(self, c, heads):
        super().__init__()
        self.ln1, self.ln2 = nn.LayerNorm(c), nn.LayerNorm(c)
        self.c_attn, self.c_proj = nn.Linear(c, 3 * c), nn.Linear(c, c)
        self.fc, self.proj = nn.Linear(c, 4 * c), nn.Linear(4 * c, c)
        self.heads = heads

    def forward(self, x):
        B, T, C = x.shape
        q, k, v = self.c_attn(self.ln1(x)).split(C, dim=2)
        q, k, v = (t.view(B, T, self.heads, C // self.heads).transpose(1, 2) for t in (q, k, v))
        att = (q @ k.transpose(-2, -1)) / math.sqrt(C // self.heads)
        mask = torch.ones(T, T, device=x.device, dtype=torch.bool).triu(1)
        y = att.masked_fill(mask, float("-inf")).softmax(-1) @ v
        x = x + self.c_proj(y.transpose(1, 2).reshape(B, T, C))
        return x + self.proj(F.gelu(self.fc(self.ln2(x))))


class GPT(nn.Module):
    def __init__(self, vocab=80, layers=4, c=128, heads=4, block=64):
        super().__init__()
        self.wte, self.wpe = nn.Embedding(vocab, c), nn.Embedding(block, c)
        self.blocks = nn.ModuleList(Block(c, heads) for _ in range(layers))
        self.ln_f, self.head = nn.LayerNorm(c), nn.Linear(c, vocab)

    def forward(self, idx, targets):
        x = self.wte(idx) + self.wpe(torch.arange(idx.shape[1], device=idx.device))
        for b in self.blocks:
            x = b(x)
        logits = self.head(self.ln_f(x))
        return F.cross_entropy(logits.view(-1, logits.shape[-1]), targets.view(-1))


def gpt_step():
    torch.manual_seed(0)
    model = GPT().to(DEV)
    opt = torch.optim.AdamW(model.parameters(), lr=6e-3, betas=(0.9, 0.99), weight_decay=0.01)
    x = torch.randint(0, 80, (32, 64), device=DEV)
    y = torch.randint(0, 80, (32, 64), device=DEV)

    def step():
        loss = model(x, y)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        return loss.item()  # NB: waits for the step, as the tprpc side's loss.item() does

    first = step()
    for _ in range(3):
        step()
    times = []
    for _ in range(20):
        t0 = time.perf_counter()
        step()
        times.append((time.perf_counter() - t0) * 1e3)
    times.sort()
    return {"firstLoss": first, "medianMs": times[len(times) // 2], "batch": 32, "block": 64}


def main():
    result = {"torch": torch.__version__, "cuda": torch.cuda.is_available()}
    if DEV != "cpu" and not torch.cuda.is_available():
        result["error"] = "PyTorch sees no CUDA device"
    else:
        result["device"] = torch.cuda.get_device_name(0) if DEV != "cpu" else "cpu"
        sections = (("parity", parity), ("gpt", gpt_step)) + ((("bench", bench),) if DEV != "cpu" else ())
        for name, f in sections:
            try:
                result[name] = f()
            except Exception as e:  # noqa: BLE001
                result[name] = {"error": f"{type(e).__name__}: {e}", "trace": traceback.format_exc()[-2000:]}
            if DEV != "cpu":
                torch.cuda.empty_cache()
    json.dump(result, open(sys.argv[1], "w"))


if __name__ == "__main__":
    main()
