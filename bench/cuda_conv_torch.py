"""The CUDA conv kernel (issue 15, jit/emit_nvptx_conv.c) on ResNet-50's
layer shapes (bench/conv_bench.c's list, groups 1; batch 1 and 32) beside
cuDNN through torch, in the same run, on the same tensors: exact f32
(ours without allow_tf32 against torch with
torch.backends.cudnn.allow_tf32 = False) and TF32 (ours with allow_tf32
against cuDNN's default, TF32 on). NCHW f32 both; cuDNN with
torch.backends.cudnn.benchmark on, so it picks its fastest algorithm.
Timing: CUDA events, median of 5 means of --iters calls after a warm-up,
ms per call (min-max beside), and our kernel time alone
(tj_executable_profile). Each of our outputs is checked against torch's
exact f32 before it is timed. ratio = cuDNN time / ours (>= 1: we are
faster).

    TJ_LIBRARY=build/libtensorjit.so python3 bench/cuda_conv_torch.py
    ... --batch 1 --only 3x3 --iters 20
    ... --modes tf32 --kernels mma,wgmma,wgmma64

--kernels names the TF32 rows' kernels (TJ_NVPTX_CONV, each in a context
of its own): mma (mma.sync m16n8k8), wgmma and wgmma64 (sm_90a wgmma
m64nNk8, 128 x 128 and 128 x 64 tiles), wgmma64-plain (a constant weight
read as it is, not prepared); "" is the library's default.
--const-w makes the weight a constant of our graph, as a model's is (the
wgmma kernel then reads it prepared at upload: rounded to TF32 once,
tap-major); by default it is an input.

Prints a table; never a pass/fail. Needs torch with CUDA (the GPU machine).
torch_timing.py must sit beside it.
"""

import argparse
import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)),
                                "..", "python"))

import torch  # noqa: E402
import torch.nn.functional as F  # noqa: E402

import tensorjit as tj  # noqa: E402
from torch_timing import cuda_time_ms  # noqa: E402

# name, c, h (= w), o, k, stride, pad: bench/conv_bench.c's groups-1 convs.
CASES = [
    ("conv1 7x7/2 3-64 @224", 3, 224, 64, 7, 2, 3),
    ("3x3 64-64 @56", 64, 56, 64, 3, 1, 1),
    ("1x1 256-64 @56", 256, 56, 64, 1, 1, 0),
    ("1x1 64-256 @56", 64, 56, 256, 1, 1, 0),
    ("3x3/2 128-128 @56", 128, 56, 128, 3, 2, 1),
    ("3x3 128-128 @28", 128, 28, 128, 3, 1, 1),
    ("1x1 512-128 @28", 512, 28, 128, 1, 1, 0),
    ("1x1/2 512-1024 @28", 512, 28, 1024, 1, 2, 0),
    ("3x3 256-256 @14", 256, 14, 256, 3, 1, 1),
    ("1x1 1024-256 @14", 1024, 14, 256, 1, 1, 0),
    ("1x1 256-1024 @14", 256, 14, 1024, 1, 1, 0),
    ("3x3 512-512 @7", 512, 7, 512, 3, 1, 1),
    ("1x1 2048-512 @7", 2048, 7, 512, 1, 1, 0),
    ("1x1 512-2048 @7", 512, 7, 2048, 1, 1, 0),
]


def context_for(kernel):
    # Settings are read when a context is created.
    if kernel:
        os.environ["TJ_NVPTX_CONV"] = kernel
    try:
        return tj.Context()
    finally:
        os.environ.pop("TJ_NVPTX_CONV", None)


def ours(n, c, h, o, k, s, p, tf32, ctx=None, w_const=None):
    g = tj.Graph("conv", context=ctx)
    x = g.input("x", "f32", [n, c, h, h])
    w = g.input("w", "f32", [o, c, k, k]) if w_const is None else \
        g.constant(w_const)
    b = g.input("b", "f32", [o])
    g.output(g.conv(x, w, b, strides=[s, s], pads=[p, p, p, p]), "y")
    return tj.compile(g, "cuda", allow_tf32=tf32)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--batch", type=int, nargs="*", default=[1, 32])
    ap.add_argument("--only", default="")
    ap.add_argument("--iters", type=int, default=20)
    ap.add_argument("--modes", default="f32,tf32")
    ap.add_argument("--kernels", default="",
                    help="TF32 kernels, comma-separated: mma, wgmma, wgmma64")
    ap.add_argument("--const-w", action="store_true",
                    help="the weight a constant of our graph")
    args = ap.parse_args()
    kernels = args.kernels.split(",") if args.kernels else [""]
    contexts = {variant: context_for(variant) for variant in kernels}
    rows = []
    if "f32" in args.modes.split(","):
        rows.append((False, ""))
    if "tf32" in args.modes.split(","):
        rows += [(True, variant) for variant in kernels]
    if not torch.cuda.is_available():
        sys.exit("no GPU")
    torch.backends.cudnn.benchmark = True
    print(f"# cuda_conv_torch: {torch.cuda.get_device_name()}, f32 NCHW, "
          f"torch {torch.__version__}, cuDNN {torch.backends.cudnn.version()}"
          f", tensorjit {tj.version()}")
    print(f"{'case':24s} {'N':>3s} {'mode':13s} {'ours ms (min-max)':>24s} "
          f"{'kern ms':>8s} {'cudnn ms (min-max)':>24s} {'TF/s':>6s} "
          f"{'cudnn/ours':>10s}")
    for name, c, h, o, k, s, p in CASES:
        if args.only and args.only not in name:
            continue
        for n in args.batch:
            gen = torch.Generator(device="cuda").manual_seed(1)
            x = torch.randn(n, c, h, h, device="cuda", generator=gen)
            w = torch.randn(o, c, k, k, device="cuda", generator=gen) / (
                c * k * k) ** 0.5
            b = torch.randn(o, device="cuda", generator=gen)
            torch.backends.cudnn.allow_tf32 = False
            want = F.conv2d(x, w, b, s, p)
            oh = want.shape[2]
            flops = 2.0 * n * o * oh * oh * c * k * k
            wc = w.cpu().numpy() if args.const_w else None
            for tf32, variant in rows:
                exe = ours(n, c, h, o, k, s, p, tf32, contexts[variant], wc)
                args_ = (x, b) if args.const_w else (x, w, b)
                out = torch.empty_like(want)
                exe(*args_, out=out)
                tol = 2e-2 if tf32 else 1e-4
                try:
                    torch.testing.assert_close(out, want, rtol=tol, atol=tol)
                except AssertionError as e:
                    # A wrong kernel is reported, not timed; the other
                    # rows still run.
                    print(f"{name:24s} {n:3d} WRONG "
                          f"{'tf32/' + variant if tf32 else 'f32'}: "
                          f"{str(e).splitlines()[1:3]}")
                    continue
                t = cuda_time_ms(lambda: exe(*args_, out=out), args.iters)
                kern = exe.profile(*args_, runs=args.iters,
                                   out=out).kernel_ms
                torch.backends.cudnn.allow_tf32 = tf32
                ref = cuda_time_ms(lambda: F.conv2d(x, w, b, s, p), args.iters)
                mode = ("tf32" + ("/" + variant if variant else "")) if tf32 \
                    else "f32"
                print(f"{name:24s} {n:3d} {mode:13s} "
                      f"{t[0]:9.4f} ({t[1]:.4f}-{t[2]:.4f}) {kern:8.4f} "
                      f"{ref[0]:9.4f} ({ref[1]:.4f}-{ref[2]:.4f}) "
                      f"{flops / t[0] / 1e9:6.1f} {ref[0] / t[0]:10.2f}x")
                sys.stdout.flush()
    return 0


if __name__ == "__main__":
    sys.exit(main())
