#!/usr/bin/env python3
"""The 8-bit GEMM on the GPU (issue 17, cudaq): ours (matmul_i32 compiled
for CUDA: s8 x s8 wgmma, jit/emit_nvptx_qgemm.c) beside torch's int8
`_int_mm` and fp8 `_scaled_mm`, and beside our and torch's bf16 GEMM, in
the same run, on the same shapes:
  i32     ours: y = a @ w^T in i32 (w [N, K] s8, the k-major B);
          torch: _int_mm(a, w.t())
  i32 nB  ours with the [K, N] (n-contiguous) B, transposed on the way
  deq     ours: bf16(f32(a @ w^T) * sa[M, 1] * sw[N]) in one kernel (the
          dequant in the epilogue); torch: _int_mm then the same scaling
          in eager ops
  bf16    ours: x @ w^T of bf16; torch: the same mm (cuBLAS)
  fp8     torch only: _scaled_mm of e4m3 with per-tensor scales into
          bf16 (ours has no fp8 GEMM yet)
Every int8 output of ours is checked bit for bit against torch's _int_mm
before it is timed, the dequantized one within bf16 rounding. Timing: CUDA
events, median of 5 means of --iters calls after a warm-up (ms per call,
with the spread (max - min) of the 5 means); our kernel time alone from
tj_executable_profile. TOP/s counts 2 M N K.

    TJ_LIBRARY=build/libtensorjit.so python3 bench/cuda_qgemm_torch.py
    ... --shapes 4096,4096,4096 16,4096,4096

Prints a table; never a pass/fail. Needs torch with CUDA (the GPU machine).
"""

import argparse
import os
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)),
                                "..", "python"))

import torch  # noqa: E402

import tensorjit as tj  # noqa: E402
from torch_timing import cuda_time_ms  # noqa: E402


T0 = time.time()


def step(what):
    """A progress line on stderr, so that a slow step shows where it is."""
    print(f"# {time.time() - T0:7.1f} s: {what}", file=sys.stderr, flush=True)


def time_ms(fn, iters):
    """(median ms a call over 5 rounds, max - min of the rounds)."""
    median, low, high = cuda_time_ms(fn, iters)
    return median, high - low


def compile_int8(m, n, k, kmajor, dequant):
    g = tj.Graph("qgemm")
    a = g.input("a", "i8", [m, k])
    if kmajor:
        w = g.transpose(g.input("w", "i8", [n, k]), [1, 0])
    else:
        w = g.input("w", "i8", [k, n])
    y = g.matmul_i32(a, w)
    if dequant:
        y = g.mul(g.mul(g.cast(y, "f32"), g.input("sa", "f32", [m, 1])),
                  g.input("sw", "f32", [n]))
        y = g.cast(y, "bf16")
    g.output(y, "y")
    return tj.compile(g, "cuda")


def compile_bf16(m, n, k):
    g = tj.Graph("gemm_bf16")
    x = g.input("x", "bf16", [m, k])
    w = g.transpose(g.input("w", "bf16", [n, k]), [1, 0])
    g.output(g.matmul(x, w), "y")
    return tj.compile(g, "cuda")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--shapes", nargs="*",
                    default=["2048,4096,1024", "16,4096,4096",
                             "4096,4096,4096", "8192,8192,8192"])
    ap.add_argument("--iters", type=int, default=20)
    args = ap.parse_args()
    if not torch.cuda.is_available():
        sys.exit("no GPU")
    print(f"# cuda_qgemm_torch: {torch.cuda.get_device_name()}, torch "
          f"{torch.__version__}, tensorjit {tj.version()}")
    print(f"{'M,N,K':>16s} {'case':>7s} {'ours ms':>15s} {'kern ms':>8s} "
          f"{'torch ms':>15s} {'ours TOP/s':>10s} {'torch TOP/s':>11s} "
          f"{'/torch':>7s}", flush=True)
    gen = torch.Generator(device="cuda").manual_seed(1)
    for shape in args.shapes:
        m, n, k = (int(v) for v in shape.split(","))
        a = torch.randint(-128, 128, (m, k), device="cuda", dtype=torch.int8,
                          generator=gen)
        w = torch.randint(-128, 128, (n, k), device="cuda", dtype=torch.int8,
                          generator=gen)
        wt = w.t().contiguous()
        sa = torch.rand((m, 1), device="cuda", generator=gen) * 1e-3
        sw = torch.rand((n,), device="cuda", generator=gen) * 1e-3
        flops = 2.0 * m * n * k
        rows = []
        # torch's _int_mm wants M > 16 on some builds: pad M up to 32 then.
        mt = max(m, 32)
        at = a if mt == m else torch.cat(
            [a, torch.zeros((mt - m, k), device="cuda", dtype=torch.int8)])
        want = torch._int_mm(at, w.t())[:m]
        out = torch.empty((m, n), device="cuda", dtype=torch.int32)
        tint = time_ms(lambda: torch._int_mm(at, w.t()), args.iters)
        for name, kmajor, wb in (("i32", True, w), ("i32 nB", False, wt)):
            step(f"{shape} {name}: compile")
            exe = compile_int8(m, n, k, kmajor, False)
            step(f"{shape} {name}: first run")
            exe(a, wb, out=out)
            step(f"{shape} {name}: timing")
            assert torch.equal(out, want), name
            ours = time_ms(lambda: exe(a, wb, out=out), args.iters)
            kern = exe.profile(a, wb, runs=args.iters, out=out).kernel_ms
            rows.append((name, ours, kern, tint))
            del exe
        step(f"{shape} deq")
        exe = compile_int8(m, n, k, True, True)
        dq = torch.empty((m, n), device="cuda", dtype=torch.bfloat16)
        exe(a, w, sa, sw, out=dq)
        ref = (want.float() * sa * sw).bfloat16()
        torch.testing.assert_close(dq.float(), ref.float(), rtol=1e-2,
                                   atol=1e-6)
        ours = time_ms(lambda: exe(a, w, sa, sw, out=dq), args.iters)
        kern = exe.profile(a, w, sa, sw, runs=args.iters, out=dq).kernel_ms
        tdq = time_ms(
            lambda: (torch._int_mm(at, w.t())[:m].float() * sa * sw)
            .bfloat16(), args.iters)
        rows.append(("deq", ours, kern, tdq))
        del exe
        xb = torch.randn((m, k), device="cuda", dtype=torch.bfloat16,
                         generator=gen)
        wbf = torch.randn((n, k), device="cuda", dtype=torch.bfloat16,
                          generator=gen)
        step(f"{shape} bf16")
        exe = compile_bf16(m, n, k)
        yb = torch.empty((m, n), device="cuda", dtype=torch.bfloat16)
        exe(xb, wbf, out=yb)
        ours = time_ms(lambda: exe(xb, wbf, out=yb), args.iters)
        kern = exe.profile(xb, wbf, runs=args.iters, out=yb).kernel_ms
        tbf = time_ms(lambda: torch.mm(xb, wbf.t()), args.iters)
        rows.append(("bf16", ours, kern, tbf))
        del exe
        step(f"{shape} fp8")
        try:
            x8 = xb.to(torch.float8_e4m3fn)
            w8 = wbf.to(torch.float8_e4m3fn)
            one = torch.ones((), device="cuda")
            x8p = x8 if m % 16 == 0 else torch.cat(
                [x8, torch.zeros((16 - m % 16, k), device="cuda",
                                 dtype=torch.float8_e4m3fn)])
            tf8 = time_ms(lambda: torch._scaled_mm(
                x8p, w8.t(), scale_a=one, scale_b=one,
                out_dtype=torch.bfloat16), args.iters)
            rows.append(("fp8", None, None, tf8))
        except (RuntimeError, AttributeError) as e:
            print(f"# fp8 _scaled_mm unavailable: {e}")
        for name, ours, kern, tt in rows:
            top_t = flops / tt[0] * 1e-9
            if ours is None:
                print(f"{shape:>16s} {name:>7s} {'-':>15s} {'-':>8s} "
                      f"{tt[0]:8.4f}({tt[1]:5.3f}) {'-':>10s} {top_t:11.1f} "
                      f"{'-':>7s}", flush=True)
                continue
            top = flops / ours[0] * 1e-9
            print(f"{shape:>16s} {name:>7s} {ours[0]:8.4f}({ours[1]:5.3f}) "
                  f"{kern:8.4f} {tt[0]:8.4f}({tt[1]:5.3f}) {top:10.1f} "
                  f"{top_t:11.1f} {tt[0] / ours[0]:7.2f}", flush=True)
    print("# ms per call: median (max-min) of 5 means; kern: our kernel "
          "alone; /torch above 1: ours faster; torch column: _int_mm (i32 "
          "rows), _int_mm + eager scaling (deq), mm (bf16), _scaled_mm e4m3 "
          "(fp8)")


if __name__ == "__main__":
    main()
