# Imported by the PyTorch twins before torch itself: torch.set_num_threads(n) sizes torch's own intra-op pool,
# not the BLAS's. Debian's torch calls OpenBLAS's pthreads build, which sizes its pool once, as it loads, from
# OPENBLAS_NUM_THREADS or OMP_NUM_THREADS, else from the core count. With set_num_threads(1) alone,
# bench/gpt_step_torch.py ran its matmuls on two threads on the 2-core VM (374 ms of CPU time per 187 ms step;
# 219 ms of each with OPENBLAS_NUM_THREADS=1). So every twin fixes its BLAS's thread count to its --threads
# before torch loads. Ranks the script starts inherit the environment.
import os, sys


def pin_blas_threads(default=1):
    """Sets the BLAS thread variables to this script's --threads (or `default`); returns the count."""
    n = default
    if "--threads" in sys.argv[:-1]:
        n = int(sys.argv[sys.argv.index("--threads") + 1])
    for var in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
        os.environ[var] = str(n)
    return n
