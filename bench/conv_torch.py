"""torch CPU (oneDNN) beside bench/conv_bench.c, in the same invocation.

Reads the case list from `conv_bench --list`, times each case with torch
(f32, NCHW as ours; channels_last too for convs, oneDNN's preferred layout)
at 1 thread and at every CPU, then runs `conv_bench --csv` with the same
arguments and prints our figure beside torch's best and the ratio
(torch time / our time: >= 1 means we are faster; at 1 thread the ratio of
process CPU times, which other load on a shared machine hardly disturbs,
else of wall times). Medians of --reps runs
after a warm-up, min-max beside; for 1 thread also the median process CPU
time (time.process_time), less disturbed by other load.

    python3 bench/conv_torch.py --ours build/bench/conv_bench [--batch 1]
        [--reps 5] [--only SUBSTR] [--threads T]
"""

import argparse
import os
import statistics
import subprocess
import time

import torch
import torch.nn.functional as F


def timed(fn, reps):
    fn()
    wall, cpu = [], []
    for _ in range(reps):
        c0, t0 = time.process_time(), time.perf_counter()
        fn()
        wall.append((time.perf_counter() - t0) * 1e3)
        cpu.append((time.process_time() - c0) * 1e3)
    return statistics.median(wall), min(wall), max(wall), statistics.median(cpu)


def torch_case(case, n, channels_last, reps):
    name, kind, cn, c, h, w, o, k, stride, pad, groups = case
    g = torch.Generator().manual_seed(0)
    if kind == "gather":
        table = torch.rand(c, o, generator=g)
        ids = torch.randint(0, c, (cn,), generator=g)
        out = torch.empty(cn, o)
        return timed(lambda: torch.index_select(table, 0, ids, out=out), reps)
    x = torch.rand(n, c, h, w, generator=g)
    if channels_last:
        x = x.contiguous(memory_format=torch.channels_last)
    with torch.no_grad():
        if kind == "conv":
            wt = torch.rand(o, c // groups, k, k, generator=g)
            b = torch.rand(o, generator=g)
            if channels_last:
                wt = wt.contiguous(memory_format=torch.channels_last)
            return timed(lambda: F.conv2d(x, wt, b, stride, pad, 1, groups), reps)
        if kind == "maxpool":
            return timed(lambda: F.max_pool2d(x, k, stride, pad), reps)
        if kind == "avgpool":
            return timed(lambda: F.avg_pool2d(x, k, stride, pad), reps)
        return timed(lambda: F.adaptive_avg_pool2d(x, 1), reps)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--ours", default="build/bench/conv_bench")
    ap.add_argument("--reps", type=int, default=5)
    ap.add_argument("--batch", type=int, default=0)
    ap.add_argument("--only", default="")
    ap.add_argument("--threads", type=int, default=0)
    args = ap.parse_args()
    cases = []
    for line in subprocess.run([args.ours, "--list"], check=True,
                               capture_output=True, text=True).stdout.split("\n"):
        if not line:
            continue
        f = line.split(";")
        cases.append([f[0], f[1]] + [int(v) for v in f[2:]])
    every = os.cpu_count() or 1
    thread_counts = [1] if every == 1 else [1, every]
    if args.threads:
        thread_counts = [args.threads]
    theirs = {}
    print(f"torch {torch.__version__}, oneDNN {torch.backends.mkldnn.is_available()}")
    for t in thread_counts:
        torch.set_num_threads(t)
        for case in cases:
            if args.only and args.only not in case[0]:
                continue
            batches = [case[2]] if case[1] == "gather" else [1, 32]
            for n in batches:
                if case[1] != "gather" and args.batch and n != args.batch:
                    continue
                best = None
                for cl in ([False, True] if case[1] == "conv" else [False]):
                    r = torch_case(case, n, cl, args.reps)
                    if best is None or r[0] < best[0][0]:
                        best = (r, "NHWC" if cl else "NCHW")
                theirs[(case[0], n, t)] = best
    cmd = [args.ours, "--csv", "--reps", str(args.reps)]
    if args.batch:
        cmd += ["--batch", str(args.batch)]
    if args.only:
        cmd += ["--only", args.only]
    if args.threads:
        cmd += ["--threads", str(args.threads)]
    out = subprocess.run(cmd, check=True, capture_output=True, text=True).stdout
    copy = {}
    print(f"{'case':26} {'N':>4} {'T':>2} {'ours ms (min-max)':>26} {'cpu':>9} "
          f"{'torch ms (min-max)':>26} {'cpu':>9} layout  torch/ours  rate")
    for line in out.split("\n"):
        if not line.startswith("ours,"):
            continue
        _, name, n, t, med, lo, hi, cpu, rate = line.split(",")
        n, t = int(n), int(t)
        med, lo, hi, cpu, rate = map(float, (med, lo, hi, cpu, rate))
        if name.startswith("copy"):
            copy[t] = rate
        key = (name, n, t)
        extra = ""
        if key in theirs:
            (tm, tlo, thi, tcpu), layout = theirs[key]
            # At 1 thread the ratio of CPU times (see conv_bench.c).
            ratio = tcpu / cpu if t == 1 else tm / med
            extra = (f"{tm:9.3f} ({tlo:.3f}-{thi:.3f}) {tcpu:9.3f} {layout:6} "
                     f"{ratio:8.2f}x")
        else:
            extra = " " * 72
        unit = ""
        if name.startswith(("copy", "triad", "dw", "maxpool", "avgpool",
                            "globalpool", "gather")):
            unit = f"{rate:8.2f} GB/s"
            if t in copy and not name.startswith(("copy", "triad")):
                unit += f" = {rate / copy[t]:.2f} copy"
        else:
            unit = f"{rate:8.2f} GF/s"
        print(f"{name:26} {n:4} {t:2} {med:9.3f} ({lo:.3f}-{hi:.3f}) "
              f"{cpu:9.3f} {extra}  {unit}")


if __name__ == "__main__":
    main()
