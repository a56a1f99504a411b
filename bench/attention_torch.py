"""torch's scaled_dot_product_attention on the CPU, for bench/attention_bench.c.

The same shapes, dtypes and counting as attention_bench (B 1, H 8, T 512
and 2048, D 64 and 128, causal and not, f32 and bf16; median of --reps runs
after a warm-up, (min-max) ms, GFLOP/s counting 4 B H T^2 D, halved when
causal), with torch's own thread count unless --threads is given. Run it in
the same session as attention_bench, on the same machine, and print both.
Exits 2 when torch is not importable.

    python3 bench/attention_torch.py [--reps N] [--threads N] [--quick]
"""

import argparse
import statistics
import sys
import time


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--reps", type=int, default=5)
    ap.add_argument("--threads", type=int, default=0)
    ap.add_argument("--quick", action="store_true")
    args = ap.parse_args()
    try:
        import torch
        import torch.nn.functional as F
    except ImportError:
        print("attention_torch: torch is not importable", file=sys.stderr)
        return 2
    if args.threads:
        torch.set_num_threads(args.threads)
    print("torch %s, %d threads, median of %d (min-max) ms; GFLOP/s"
          % (torch.__version__, torch.get_num_threads(), args.reps))
    ts = [512] if args.quick else [512, 2048]
    for dt in (torch.float32, torch.bfloat16):
        for t in ts:
            for d in (64, 128):
                for causal in (False, True):
                    g = torch.Generator().manual_seed(1)
                    q, k, v = (torch.rand(1, 8, t, d, generator=g).sub(0.5)
                               .to(dt) for _ in range(3))
                    times = []
                    for r in range(args.reps + 1):
                        t0 = time.perf_counter()
                        F.scaled_dot_product_attention(q, k, v,
                                                       is_causal=causal)
                        if r:
                            times.append((time.perf_counter() - t0) * 1e3)
                    flops = 4.0 * 8 * t * t * d * (0.5 if causal else 1.0)
                    med = statistics.median(times)
                    print("%-5s 1 8 8 %d %d %-5s  %8.2f (%.2f-%.2f) %6.1f"
                          % (str(dt).replace("torch.", ""), t, d,
                             "yes" if causal else "no", med, min(times),
                             max(times), flops / med * 1e-6))
    return 0


if __name__ == "__main__":
    sys.exit(main())
