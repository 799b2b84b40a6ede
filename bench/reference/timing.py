# Timing helpers shared by bench/reference/*.py (imported, not run): the payload sizes, the warm-up/trials/batch plan per
# size, the median-of-trials measurement, and the result lines that bench/rpc_common.ts parses. grpc_node.mjs repeats
# SIZES and plan() in JavaScript; keep the two in step.
import statistics, time

# Payload bytes, decimal (4 KB, 4 MB, 40 MB, 400 MB); 0 means a small int argument instead of a tensor.
SIZES = (0, 4_000, 4_000_000, 40_000_000, 400_000_000)
# rpc_async: payload sizes, calls per trial, trials after one warm-up trial.
ASYNC_SIZES = (0, 4_000)
ASYNC_CALLS = 4_000


def plan(nbytes, quick=False):
    """(warm-up calls, timed trials, calls per trial) for a payload size; small payloads are timed in batches."""
    if nbytes <= 4_000:
        return (100, 7, 50) if quick else (1000, 30, 200)
    if nbytes <= 4_000_000:
        return (5, 5, 5) if quick else (20, 20, 10)
    if nbytes <= 40_000_000:
        return (2, 5, 1) if quick else (5, 15, 1)
    return (1, 3, 1) if quick else (2, 8, 1)


def async_trials(quick=False):
    return 3 if quick else 7


def measure(call, warmup, trials, batch):
    """Seconds per call (median, min, max over trials): `warmup` untimed calls, then `trials` timed batches."""
    for _ in range(warmup):
        call()
    per_call = []
    for _ in range(trials):
        t0 = time.perf_counter()
        for _ in range(batch):
            call()
        per_call.append((time.perf_counter() - t0) / batch)
    return statistics.median(per_call), min(per_call), max(per_call)


def fmt_time(s):
    if s < 1e-3:
        return f"{s * 1e6:.1f} us"
    return f"{s * 1e3:.2f} ms" if s < 1 else f"{s:.3f} s"


def sync_line(label, nbytes, med, lo, hi):
    """`label  N B  median [min - max]`, plus GB/s (bytes both ways / time) from 4 MB up; printed and flushed."""
    rate = ""
    if nbytes >= 4_000_000:
        rate = f"  {2 * nbytes / med / 1e9:6.2f} GB/s [{2 * nbytes / hi / 1e9:.2f}-{2 * nbytes / lo / 1e9:.2f}]"
    print(f"{label:<40} {nbytes:>11,d} B  {fmt_time(med):>10} [{fmt_time(lo)} - {fmt_time(hi)}]{rate}", flush=True)


def async_line(label, nbytes, rates):
    """`label  N B  median calls/s [min - max]` from a list of calls/s; printed and flushed."""
    med, lo, hi = statistics.median(rates), min(rates), max(rates)
    print(f"{label:<40} {nbytes:>11,d} B  {med:10.0f} calls/s [{lo:.0f} - {hi:.0f}]  (= {fmt_time(1 / med)}/call)",
          flush=True)
