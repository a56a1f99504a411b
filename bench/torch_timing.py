"""Timing shared by the torch scripts of bench/: the CPU comparisons
(attention_torch.py, attention_grad_torch.py) and the GPU ones with CUDA
events (cuda_attention_torch.py, cuda_attention_grad_torch.py,
cuda_qgemm_torch.py, cuda_wqgemm_torch.py, cuda_fp8_torch.py,
softmax_bhtt.py, softmax_rows.py, transformer_blocks.py). They import it
from their own folder, so a copy of one of them run elsewhere needs this
file beside it.
"""

import argparse
import statistics
import time


def cpu_args(description):
    """The CPU scripts' options: --reps, --threads (0: torch's own count)
    and --quick (the smallest shapes only)."""
    ap = argparse.ArgumentParser(description=description)
    ap.add_argument("--reps", type=int, default=5)
    ap.add_argument("--threads", type=int, default=0)
    ap.add_argument("--quick", action="store_true")
    return ap.parse_args()


def cpu_time_ms(fn, reps, after=None):
    """fn() once to warm up, then |reps| timed calls (wall clock), with
    after() (if given) untimed after each: the (median, min, max) ms."""
    times = []
    for r in range(reps + 1):
        t0 = time.perf_counter()
        fn()
        if r:
            times.append((time.perf_counter() - t0) * 1e3)
        if after:
            after()
    return statistics.median(times), min(times), max(times)


def cuda_time_ms(fn, iters, warmup=3):
    """fn() |warmup| times, then 5 rounds of |iters| calls between two CUDA
    events: the (median, min, max) over the rounds of ms per call."""
    import torch  # only here: the CPU scripts exit 2 without torch
    for _ in range(warmup):
        fn()
    torch.cuda.synchronize()
    means = []
    for _ in range(5):
        start = torch.cuda.Event(enable_timing=True)
        end = torch.cuda.Event(enable_timing=True)
        start.record()
        for _ in range(iters):
            fn()
        end.record()
        end.synchronize()
        means.append(start.elapsed_time(end) / iters)
    return statistics.median(means), min(means), max(means)
