"""torch's scaled_dot_product_attention forward + backward on the CPU, for
bench/attention_grad_bench.c.

The same shapes and counting as attention_grad_bench (B 1, H 8, T 512 and
1024, D 64, causal and not, f32; median of --reps runs after a warm-up,
(min-max) ms, GFLOP/s counting 3.5 x 4 B H T^2 D, halved when causal):
y = sdpa(q, k, v) and y.backward(dy), with torch's own thread count unless
--threads is given. Exits 2 when torch is not importable.

    python3 bench/attention_grad_torch.py [--reps N] [--threads N] [--quick]
"""

import sys

from torch_timing import cpu_args, cpu_time_ms


def main():
    args = cpu_args("torch's attention forward + backward on the CPU")
    try:
        import torch
        import torch.nn.functional as F
    except ImportError:
        print("attention_grad_torch: torch is not importable", file=sys.stderr)
        return 2
    if args.threads:
        torch.set_num_threads(args.threads)
    print("torch %s, %d threads, forward + backward, median of %d (min-max) "
          "ms; GFLOP/s" % (torch.__version__, torch.get_num_threads(),
                           args.reps))
    for t in [512] if args.quick else [512, 1024]:
        for causal in (False, True):
            g = torch.Generator().manual_seed(1)
            q, k, v, dy = (torch.rand(1, 8, t, 64, generator=g).sub(0.5)
                           for _ in range(4))
            for x in (q, k, v):
                x.requires_grad_(True)

            def step(q=q, k=k, v=v, dy=dy, causal=causal):
                y = F.scaled_dot_product_attention(q, k, v, is_causal=causal)
                y.backward(dy)

            def clear(q=q, k=k, v=v):
                for x in (q, k, v):
                    x.grad = None

            med, lo, hi = cpu_time_ms(step, args.reps, after=clear)
            flops = 3.5 * 4.0 * 8 * t * t * 64 * (0.5 if causal else 1.0)
            print("1 8 %d 64 %-5s  %8.2f (%.2f-%.2f) %6.1f"
                  % (t, "yes" if causal else "no", med, lo, hi,
                     flops / med * 1e-6))
    return 0


if __name__ == "__main__":
    sys.exit(main())
