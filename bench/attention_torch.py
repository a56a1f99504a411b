"""torch's scaled_dot_product_attention on the CPU, for bench/attention_bench.c.

The same shapes, dtypes and counting as attention_bench (B 1, H 8, T 512
and 2048, D 64 and 128, causal and not, f32 and bf16; median of --reps runs
after a warm-up, (min-max) ms, GFLOP/s counting 4 B H T^2 D, halved when
causal), with torch's own thread count unless --threads is given. Run it in
the same session as attention_bench, on the same machine, and print both.
Exits 2 when torch is not importable.

    python3 bench/attention_torch.py [--reps N] [--threads N] [--quick]
"""

import sys

from torch_timing import cpu_args, cpu_time_ms


def main():
    args = cpu_args("torch's scaled_dot_product_attention on the CPU")
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
                    med, lo, hi = cpu_time_ms(
                        lambda: F.scaled_dot_product_attention(
                            q, k, v, is_causal=causal), args.reps)
                    flops = 4.0 * 8 * t * t * d * (0.5 if causal else 1.0)
                    print("%-5s 1 8 8 %d %d %-5s  %8.2f (%.2f-%.2f) %6.1f"
                          % (str(dt).replace("torch.", ""), t, d,
                             "yes" if causal else "no", med, lo, hi,
                             flops / med * 1e-6))
    return 0


if __name__ == "__main__":
    sys.exit(main())
