# The PyTorch side of bench/gpt_step.ts: the same small character GPT (nanoGPT-style, pre-LayerNorm,
# exact GELU, untied head), batch 32 x 64, forward + cross entropy + backward + AdamW, one thread.
# Prints ms/step (median over the timed steps), tokens/s and process CPU time per step. Run: /usr/bin/python3 bench/gpt_step_torch.py
import math, os, statistics, sys, time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "reference"))
from blas_threads import pin_blas_threads  # noqa: E402

pin_blas_threads()  # NB: before torch loads its BLAS (this script runs on one thread)
import torch  # noqa: E402
import torch.nn as nn  # noqa: E402
import torch.nn.functional as F  # noqa: E402


def arg(name, default):
    return int(sys.argv[sys.argv.index(name) + 1]) if name in sys.argv else default


V, B, T, C, H, L = 70, 32, 64, 128, 4, 4


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


def main():
    torch.set_num_threads(1)
    torch.manual_seed(0)
    steps, micro = arg("--steps", 10), arg("--micro", 1)
    model = GPT()
    opt = torch.optim.AdamW(model.parameters(), lr=3e-3, weight_decay=0.01)

    def step():
        x, y = torch.randint(0, V, (B, T)), torch.randint(0, V, (B, T))
        opt.zero_grad()
        for xm, ym in zip(x.chunk(micro), y.chunk(micro)):
            (model(xm, ym) / micro).backward()
        opt.step()

    for _ in range(2):
        step()
    times, cpu = [], []
    for _ in range(steps):
        t0, c0 = time.perf_counter(), time.process_time()
        step()
        times.append((time.perf_counter() - t0) * 1000)
        cpu.append((time.process_time() - c0) * 1000)
    med = statistics.median(times)
    print(f"torch {torch.__version__} gpt step (micro={micro}, 1 thread): {med:.1f} ms/step median "
          f"(min {min(times):.1f}), {round(B * T / (med / 1000))} tokens/s; "
          f"CPU time {statistics.median(cpu):.1f} ms/step median (min {min(cpu):.1f})")


if __name__ == "__main__":
    main()
