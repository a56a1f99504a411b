#!/usr/bin/env python3
"""Channels-last ResNet basic blocks on x86 (issue 15's layout pass):
x [N, H, W, C] through two blocks of conv3x3+bias, relu, conv3x3+bias, the
residual add and relu, built with the builder's channels_last (each conv a
transpose -> conv -> transpose), constant weights; ours beside torch's
conv2d on channels_last tensors (oneDNN) in the same run, at one thread.

The layout pass (lib/passes/layout.c) sinks the transposes through the
bias, relu and residual adds to their inverses; to compare with it off,
run twice, alternating:

    TJ_LIBRARY=build-dev/libtensorjit.so python3 bench/layout_nhwc.py
    TJ_LAYOUT=off TJ_LIBRARY=build-dev/libtensorjit.so python3 bench/layout_nhwc.py

Times are process CPU time per call (time.process_time), the median of
--reps blocks of --calls calls after a warm-up, with the blocks' spread.
Checks ours against torch (1e-3) before timing. Prints a table; never a
pass/fail.
"""

import argparse
import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)),
                                "..", "python"))

import numpy as np  # noqa: E402

import tensorjit as tj  # noqa: E402
from x86_rows import cpu_ms  # noqa: E402  (bench/ is the script's folder)

try:
    import torch  # noqa: E402
    torch.set_num_threads(1)
except ImportError:
    torch = None


def weights(rng, c, blocks):
    return [(rng.standard_normal((c, c, 3, 3), dtype=np.float32) * 0.05,
             rng.standard_normal(c, dtype=np.float32) * 0.1)
            for _ in range(2 * blocks)]


def graph(n, hw, c, ws):
    g = tj.Graph("layout_nhwc")
    x = g.input("x", "f32", [n, hw, hw, c])
    h = x
    for b in range(len(ws) // 2):
        skip = h
        for k in range(2):
            w, bias = ws[2 * b + k]
            h = g.conv(h, g.constant(w), g.constant(bias), pads=[1, 1, 1, 1],
                       channels_last=True)
            if k == 0:
                h = g.relu(h)
        h = g.relu(g.add(h, skip))
    g.output(h, "y")
    return g


def torch_fn(ws):
    tw = [(torch.from_numpy(w).contiguous(memory_format=torch.channels_last),
           torch.from_numpy(b)) for w, b in ws]

    def run(x):
        h = x
        for b in range(len(tw) // 2):
            skip = h
            for k in range(2):
                w, bias = tw[2 * b + k]
                h = torch.nn.functional.conv2d(h, w, bias, padding=1)
                if k == 0:
                    h = torch.relu(h)
            h = torch.relu(h + skip)
        return h
    return run


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--batch", type=int, nargs="*", default=[1, 8])
    ap.add_argument("--shapes", nargs="*", default=["56x64", "14x256"],
                    help="HWxC of the blocks (resnet's layer1 and layer3)")
    ap.add_argument("--calls", type=int, default=5)
    ap.add_argument("--reps", type=int, default=5)
    args = ap.parse_args()
    layout = "off" if os.environ.get("TJ_LAYOUT") == "off" else "on"
    print(f"# layout_nhwc: tensorjit {tj.version()} "
          f"({os.environ.get('TJ_LIBRARY', 'default library')}, layout pass "
          f"{layout}), torch {torch.__version__ if torch else 'absent'}; 1 "
          f"thread, CPU ms a call, median of {args.reps} blocks of "
          f"{args.calls} calls (spread)")
    print(f"{'N,HW,C':>12s} {'kernels':>7s} {'ours':>16s} {'torch':>16s} "
          f"{'ours/torch':>10s}")
    rng = np.random.default_rng(0)
    for shape in args.shapes:
        hw, c = (int(v) for v in shape.split("x"))
        ws = weights(rng, c, 2)
        for n in args.batch:
            x = rng.standard_normal((n, hw, hw, c), dtype=np.float32)
            exe = tj.compile(graph(n, hw, c, ws), num_threads=1)
            out = np.empty_like(x)
            exe(x, out=out)
            kernels = exe.stats.num_kernels
            tor = (float("nan"), 0.0)
            if torch is not None:
                tx = torch.from_numpy(x.transpose(0, 3, 1, 2)).contiguous(
                    memory_format=torch.channels_last)
                tf = torch_fn(ws)
                with torch.no_grad():
                    want = tf(tx).permute(0, 2, 3, 1).numpy()
                    np.testing.assert_allclose(out, want, rtol=1e-3,
                                               atol=1e-3)
                    tor = cpu_ms(lambda: tf(tx), args.calls, args.reps)
            ours = cpu_ms(lambda: exe(x, out=out), args.calls, args.reps)
            print(f"{f'{n},{hw},{c}':>12s} {kernels:7d} "
                  f"{ours[0]:8.3f} ({ours[1]:5.3f}) "
                  f"{tor[0]:8.3f} ({tor[1]:5.3f}) {ours[0] / tor[0]:10.2f}")
            exe.close()


if __name__ == "__main__":
    main()
