# torch CPU reference figures for `npm run bench`: f32 matmul GFLOP/s (2*n^3/t) and elementwise add / exp / softmax GB/s,
# at 1 and 2 threads, printed as one JSON object on stdout. Run: /usr/bin/python3 bench/torch_ref.py [--sizes 128,256]
#
# Method: one child process per thread count, so OMP_NUM_THREADS / OPENBLAS_NUM_THREADS take effect before torch is
# imported, plus torch.set_num_threads(n); warm-up calls, then trials of a batch of calls, per-call time = median over
# trials (as bench/reference/timing.py). run.ts times its own side the same way (see measure() there), so the two
# columns are comparable within one run.
import json, os, subprocess, sys

THREADS = (1, 2)
ELEMS = 1 << 22  # elementwise arrays: 4,194,304 f32 = 16.8 MB each


def arg(name, default):
    return sys.argv[sys.argv.index(name) + 1] if name in sys.argv else default


def parent():
    try:
        import torch  # noqa: F401  (only to say why the reference is missing)
    except Exception as e:  # noqa: BLE001
        print(json.dumps({"available": False, "reason": f"{sys.executable}: import torch failed: {e}"}))
        return
    import torch

    out = {"available": True, "torch": torch.__version__, "python": sys.executable,
           "default_threads": torch.get_num_threads(), "cpus": os.cpu_count(), "threads": {}}
    for th in THREADS:
        env = dict(os.environ, OMP_NUM_THREADS=str(th), OPENBLAS_NUM_THREADS=str(th), MKL_NUM_THREADS=str(th))
        r = subprocess.run([sys.executable, os.path.abspath(__file__), "--child", str(th), *sys.argv[1:]],
                           env=env, capture_output=True, text=True, timeout=900)
        if r.returncode != 0:
            out["threads"][str(th)] = {"error": r.stderr.strip()[-500:]}
        else:
            out["threads"][str(th)] = json.loads(r.stdout)
    print(json.dumps(out))


def blas_in_use():
    """Which libblas torch loaded (Debian picks it with update-alternatives): openblas, or the slow reference."""
    try:
        with open("/proc/self/maps") as f:
            libs = {line.split()[-1] for line in f if "blas" in line.lower() and "/" in line}
    except OSError:
        return "unknown"
    real = {os.path.realpath(p) for p in libs}
    if any("openblas" in p for p in real):
        return "openblas"
    if any("mkl" in p for p in real):
        return "mkl"
    return "reference (libblas3)" if real else "unknown"


def child(th):
    import statistics, time
    import torch

    torch.set_num_threads(th)
    torch.manual_seed(0)

    def measure(fn, budget_s=1.5):
        """Per-call seconds, median over trials; warm-up and batch sized from a first timed call."""
        t0 = time.perf_counter()
        fn()
        est = max(time.perf_counter() - t0, 1e-7)
        for _ in range(max(1, min(20, int(0.2 / est)))):
            fn()
        batch = max(1, int(0.02 / est))
        trials = max(5, min(15, int(budget_s / (est * batch))))
        per_call = []
        for _ in range(trials):
            t0 = time.perf_counter()
            for _ in range(batch):
                fn()
            per_call.append((time.perf_counter() - t0) / batch)
        return statistics.median(per_call)

    res = {"threads": torch.get_num_threads(), "blas": blas_in_use(), "matmul_gflops": {}, "elementwise_elems": ELEMS}
    for n in [int(s) for s in arg("--sizes", "128,256,512,1024").split(",")]:
        a, b = torch.randn(n, n), torch.randn(n, n)
        t = measure(lambda: torch.mm(a, b))  # allocating, as tprpc's a.matmul(b)
        res["matmul_gflops"][str(n)] = 2 * n ** 3 / t / 1e9

    x, y = torch.randn(ELEMS), torch.randn(ELEMS)
    out = torch.empty(ELEMS)
    nbytes = 4 * ELEMS
    # allocating forms (compared with tprpc's x.add(y) / x.exp(), which allocate their result) ...
    res["add_gbs"] = 3 * nbytes / measure(lambda: torch.add(x, y)) / 1e9
    res["exp_gbs"] = 2 * nbytes / measure(lambda: torch.exp(x)) / 1e9
    # ... and into a preallocated output (out=), the ceiling without fresh-page faults
    rows = x.view(ELEMS // 1024, 1024)
    res["softmax_gbs"] = 2 * nbytes / measure(lambda: torch.softmax(rows, 1)) / 1e9
    res["add_out_gbs"] = 3 * nbytes / measure(lambda: torch.add(x, y, out=out)) / 1e9
    res["exp_out_gbs"] = 2 * nbytes / measure(lambda: torch.exp(x, out=out)) / 1e9
    print(json.dumps(res))


if __name__ == "__main__":
    if "--child" in sys.argv:
        child(int(arg("--child", "1")))
    else:
        parent()
