#!/usr/bin/env python3
"""torch.compile's per-kernel CUDA times for the blocks of
bench/transformer_blocks.py (issue 14), to set beside our breakdown (which
that bench prints from tj_executable_profile): torch.profiler over 10 calls
after 3 warm-up calls, the top kernels by device time a call.

    python3 bench/transformer_blocks_torch_profile.py --dtype bf16 --bt 8192
"""

import argparse
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import numpy as np  # noqa: E402
import torch  # noqa: E402
from torch.profiler import ProfilerActivity, profile  # noqa: E402

import transformer_blocks as tb  # noqa: E402


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--dtype", default="bf16", choices=("f32", "bf16"))
    ap.add_argument("--bt", type=int, default=8192)
    ap.add_argument("--t", type=int, default=512)
    ap.add_argument("--top", type=int, default=10)
    args = ap.parse_args()
    tdt = torch.bfloat16 if args.dtype == "bf16" else torch.float32
    calls = 10
    for c in (tb.GPT, tb.LLAMA):
        b, t = max(1, args.bt // args.t), min(args.t, args.bt)
        arrs = tb.inputs_for(c, b, t, np.random.default_rng(14))
        ins = [torch.from_numpy(a).to("cuda", tdt) for a in arrs]
        cf = torch.compile(tb.torch_block(c))
        with torch.no_grad():
            for _ in range(3):
                cf(*ins)
            torch.cuda.synchronize()
            with profile(activities=[ProfilerActivity.CUDA]) as p:
                for _ in range(calls):
                    cf(*ins)
                torch.cuda.synchronize()
        ev = [e for e in p.key_averages() if e.device_time_total > 0]
        ev.sort(key=lambda e: -e.device_time_total)
        total = sum(e.device_time_total for e in ev) / calls / 1e3
        print(f"## torch.compile {c.kind} {args.dtype} B,T {b},{t}: "
              f"kernels {total:.3f} ms a call")
        for e in ev[:args.top]:
            print(f"#   {e.device_time_total / calls / 1e3:8.3f} ms "
                  f"x{e.count // calls} {e.key[:90]}")


if __name__ == "__main__":
    main()
