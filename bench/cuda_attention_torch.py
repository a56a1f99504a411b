#!/usr/bin/env python3
"""The fused attention forward on the GPU (issue 14): ours (the attention
op compiled for CUDA: one flash-attention kernel, jit/emit_nvptx_attention.c)
beside torch's scaled_dot_product_attention with its flash backend and its
cuDNN backend, in the same run, on the same tensors, and with --decomposed
beside our decomposed path (the same attention written out, q @ k^T in f32
* scale, iota causal where, softmax, @ v, compiled without attention_match
and without GEMM autotuning: two batched GEMMs around a fused masked
softmax, what CUDA ran before; T <= 2048 only). bf16 by default, B*T =
16384 tokens, H*D = 2048 (the note's counting), D 64 and 128, T 512, 2048
and 8192, causal and not. Timing: CUDA events, median of 5 means of --iters
calls after a warm-up, ms per call, and our kernel time alone
(tj_executable_profile). TFLOP/s counts 4 B H T^2 D, halved when causal.
Each of our outputs is checked against torch's before it is timed.

--dtype f32 (jit/emit_nvptx_attention_f32.c, exact FFMA): torch's flash
and cuDNN backends take no f32, so the two torch columns are its
memory-efficient backend and its math backend (TF32 off for both, as for
ours); the outputs are checked to 1e-4.

    TJ_LIBRARY=build/libtensorjit.so python3 bench/cuda_attention_torch.py
    ... --t 512 2048 --d 128 --dtype f16
    ... --dtype f32 --tokens 8192 --hd 768 --t 512 2048 --d 64 128

Prints a table; never a pass/fail. Needs torch with CUDA (the GPU machine).
"""

import argparse
import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)),
                                "..", "python"))

import torch  # noqa: E402
import torch.nn.functional as F  # noqa: E402
from torch.nn.attention import SDPBackend, sdpa_kernel  # noqa: E402

import tensorjit as tj  # noqa: E402
from torch_timing import cuda_time_ms  # noqa: E402


def time_ms(fn, iters):
    return cuda_time_ms(fn, iters, warmup=3)


def sdpa(backend, q, k, v, causal):
    def run():
        with sdpa_kernel(backend):
            return F.scaled_dot_product_attention(q, k, v, is_causal=causal)
    return run


def decomposed(dtype, shape, causal):
    """The written-out attention, compiled without attention_match."""
    b, h, t, d = shape
    g = tj.Graph("attention_written_out")
    q = g.input("q", dtype, list(shape))
    k = g.input("k", dtype, list(shape))
    v = g.input("v", dtype, list(shape))
    sc = g.mul(g.cast(g.matmul(q, g.transpose(k, [0, 1, 3, 2])), "f32"),
               1.0 / d ** 0.5)
    if causal:
        keep = g.ge(g.iota("i64", [t, t], 0), g.iota("i64", [t, t], 1))
        sc = g.where(keep, sc, float("-inf"))
    g.output(g.matmul(g.cast(g.softmax(sc, -1), dtype), v), "y")
    return tj.compile(g, "cuda", autotune="off",
                      pipeline="canonicalize,cse,dce,decompose,"
                      "canonicalize,cse,dce,fuse,memplan")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--tokens", type=int, default=16384)
    ap.add_argument("--hd", type=int, default=2048)
    ap.add_argument("--t", type=int, nargs="*", default=[512, 2048, 8192])
    ap.add_argument("--d", type=int, nargs="*", default=[64, 128])
    ap.add_argument("--dtype", default="bf16", choices=("bf16", "f16", "f32"))
    ap.add_argument("--iters", type=int, default=20)
    ap.add_argument("--decomposed", action="store_true")
    args = ap.parse_args()
    if not torch.cuda.is_available():
        sys.exit("no GPU")
    tdt = {"bf16": torch.bfloat16, "f16": torch.float16,
           "f32": torch.float32}[args.dtype]
    # The two torch backends beside ours: the fastest that take the dtype.
    if args.dtype == "f32":
        torch.backends.cuda.matmul.allow_tf32 = False
        torch.backends.cudnn.allow_tf32 = False
        b1, b2 = (("effic", SDPBackend.EFFICIENT_ATTENTION),
                  ("math", SDPBackend.MATH))
        tol = 1e-4
    else:
        b1, b2 = (("flash", SDPBackend.FLASH_ATTENTION),
                  ("cudnn", SDPBackend.CUDNN_ATTENTION))
        tol = 2e-2
    print(f"# cuda_attention_torch: {torch.cuda.get_device_name()}, "
          f"{args.dtype}, torch {torch.__version__}, cuDNN "
          f"{torch.backends.cudnn.version()}, tensorjit {tj.version()}")
    n1, n2 = b1[0], b2[0]
    print(f"{'B,H,T,D,causal':>22s} {'ours ms':>14s} {'kern ms':>8s} "
          f"{n1 + ' ms':>8s} {n2 + ' ms':>8s} {'decomp':>8s} {'ours TF':>8s} "
          f"{n1 + ' TF':>8s} {n2 + ' TF':>8s} {'/' + n1:>7s} {'/' + n2:>7s}")
    for d in args.d:
        h = args.hd // d
        for t in args.t:
            b = max(1, args.tokens // t)
            for causal in (False, True):
                shape = (b, h, t, d)
                gen = torch.Generator(device="cuda").manual_seed(1)
                q, k, v = (torch.randn(shape, device="cuda", dtype=tdt,
                                       generator=gen) for _ in range(3))
                g = tj.Graph("attention")
                gq = g.input("q", args.dtype, list(shape))
                gk = g.input("k", args.dtype, list(shape))
                gv = g.input("v", args.dtype, list(shape))
                g.output(g.attention(gq, gk, gv, causal=causal), "y")
                exe = tj.compile(g, "cuda")
                out = torch.empty_like(q)
                exe(q, k, v, out=out)
                want = sdpa(b1[1], q, k, v, causal)()
                torch.testing.assert_close(out.float(), want.float(),
                                           rtol=tol, atol=tol)
                flops = 4.0 * b * h * t * t * d * (0.5 if causal else 1.0)
                ours = time_ms(lambda: exe(q, k, v, out=out), args.iters)
                kern = exe.profile(q, k, v, runs=args.iters,
                                   out=out).kernel_ms
                fl = time_ms(sdpa(b1[1], q, k, v, causal), args.iters)
                try:
                    cd = time_ms(sdpa(b2[1], q, k, v, causal), args.iters)
                except (RuntimeError, torch.OutOfMemoryError):
                    cd = (float("nan"),) * 3
                dc = float("nan")
                if args.decomposed and t <= 2048:
                    dexe = decomposed(args.dtype, shape, causal)
                    dout = torch.empty_like(q)
                    dexe(q, k, v, out=dout)
                    torch.testing.assert_close(dout.float(), want.float(),
                                               rtol=tol, atol=tol)
                    dc = time_ms(lambda: dexe(q, k, v, out=dout),
                                 args.iters)[0]
                    del dexe, dout
                tf = [flops / x[0] * 1e-9 for x in (ours, fl, cd)]
                print(f"{b:>4d},{h:>3d},{t:>5d},{d:>4d},{'yes' if causal else 'no':>4s} "
                      f"{ours[0]:7.3f}({ours[2] - ours[1]:5.3f}) {kern:8.3f} "
                      f"{fl[0]:8.3f} {cd[0]:8.3f} {dc:8.3f} {tf[0]:8.1f} {tf[1]:8.1f} "
                      f"{tf[2]:8.1f} {fl[0] / ours[0]:7.2f} "
                      f"{cd[0] / ours[0]:7.2f}", flush=True)
    print(f"# ms per call (ours: median, (max-min) of the 5 means); kern: our "
          f"kernel alone; decomp: ours decomposed; /{n1}, /{n2} above 1: ours "
          f"faster")


if __name__ == "__main__":
    main()
