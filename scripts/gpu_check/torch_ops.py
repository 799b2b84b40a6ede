"""PyTorch's side of probe.mjs's "ops" mode: the GPT step's op families at its shapes, median ms over
50 calls with the device synchronized around each, by the same names. Writes JSON to argv[1] (stdout
without it). Run on the device machine: python3 scripts/gpu_check/torch_ops.py $OUT/torch_ops.json
"""

import json
import statistics
import sys
import time

import torch
import torch.nn.functional as F

torch.manual_seed(0)
DEV = "cuda:0" if torch.cuda.is_available() else "cpu"
B = 32


def r(*shape):
    return torch.randn(*shape, device=DEV)


x, w, bias = r(B * 64, 128), r(128), r(128)
att, heads, wide, logits = r(B, 4, 64, 64), r(B, 64, 4, 32), r(B * 64, 512), r(B * 64, 80)
target = torch.randint(0, 80, (B * 64,), device=DEV)
emb = r(80, 128).requires_grad_(True)
idx = torch.randint(0, 80, (B, 64), device=DEV)
mask = torch.ones(64, 64, device=DEV, dtype=torch.bool).triu(1)


def ln_fwd_bwd():
    xi = x.detach().requires_grad_(True)
    F.layer_norm(xi, [128], w, bias).sum().backward()


CASES = {
    "layer_norm": lambda: F.layer_norm(x, [128], w, bias),
    "layer_norm_fwd_bwd": ln_fwd_bwd,
    "softmax_att": lambda: att.softmax(-1),
    "masked_fill_softmax": lambda: att.masked_fill(mask, float("-inf")).softmax(-1),
    "transpose_contiguous": lambda: heads.transpose(1, 2).contiguous(),
    "gelu_wide": lambda: F.gelu(wide),
    "bias_add_broadcast": lambda: x + bias,
    "sum_rows_bias_grad": lambda: wide.sum(0),
    "cross_entropy": lambda: F.cross_entropy(logits, target),
    "embedding_fwd_bwd": lambda: F.embedding(idx, emb).sum().backward(),
    "matmul_qkv": lambda: x @ r(128, 384),
    "matmul_att": lambda: att @ r(B, 4, 64, 32),
}


def sync():
    if DEV != "cpu":
        torch.cuda.synchronize()


out = {"device": torch.cuda.get_device_name(0) if DEV != "cpu" else "cpu", "torch": torch.__version__}
for name, f in CASES.items():
    for _ in range(3):
        f()
    ts = []
    for _ in range(50):
        sync()
        t0 = time.perf_counter()
        f()
        sync()
        ts.append((time.perf_counter() - t0) * 1e3)
    out[name] = round(statistics.median(ts), 4)
text = json.dumps(out, indent=1)
if len(sys.argv) > 1:
    with open(sys.argv[1], "w") as fh:
        fh.write(text)
print(text)
