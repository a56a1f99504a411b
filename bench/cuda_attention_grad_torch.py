#!/usr/bin/env python3
"""Attention's training step on the GPU (issue 14, fabwd): ours, the joint
graph of one attention op from Graph.grad (y, then dq, dk, dv through the
VJP's attention_lse, attention_dq and attention_dkv nodes, fused kernels on
CUDA for f16/bf16 at D 64 and 128 since fabwdcuda) compiled for CUDA, beside
torch's scaled_dot_product_attention forward + backward with its flash and
cuDNN backends, in the same run, on the same tensors. bf16, B*T = 16384
tokens, H*D = 2048 (the note's counting), D 64 and 128, T 512 and 2048 by
default, causal and not. Timing: CUDA events, median of 5 means of --iters
calls after a warm-up, ms per forward + backward. TFLOP/s counts 3.5 x 4 B
H T^2 D (2 forward and 5 backward matmuls), halved when causal. Our dq,
dk and dv are compared with torch's flash backend's (max err: the largest
difference over the largest magnitude).

--bwd (fabwdcuda) times the backward alone: ours, a graph of q, k, v, y and
dy holding what the VJP emits (attention_lse, delta = rowsum(dy y) in f32,
attention_dq, attention_dkv; outputs dq and [dk | dv]); torch's,
autograd.grad of one retained forward. TFLOP/s there count 2.5 x 4 B H T^2
D (the 5 backward matmuls), halved when causal; the lse pass (one more
q.k^T) is ours to pay and counted as work not done. --profile adds our
per-kernel times (tj_executable_profile) under each row, in both modes.

lsefwd: in the training step our forward kernel writes the row lse too,
so the step has no attention_lse kernel; TJ_ATTENTION_LSE=separate in the
environment keeps it (the step as before, for A/B runs; the header says
which). --bwd --lse-input times the backward as a partitioned one runs
it when the forward saved lse: lse an input (computed once beforehand by
our attention_lse), no lse pass.

    TJ_LIBRARY=build/libtensorjit.so python3 bench/cuda_attention_grad_torch.py

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
    return cuda_time_ms(fn, iters, warmup=2)


def torch_step(backend, q, k, v, dy, causal):
    def run():
        with sdpa_kernel(backend):
            y = F.scaled_dot_product_attention(q, k, v, is_causal=causal)
        return torch.autograd.grad(y, (q, k, v), dy)
    return run


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--tokens", type=int, default=16384)
    ap.add_argument("--hd", type=int, default=2048)
    ap.add_argument("--t", type=int, nargs="*", default=[512, 2048])
    ap.add_argument("--d", type=int, nargs="*", default=[64, 128])
    ap.add_argument("--iters", type=int, default=5)
    ap.add_argument("--bwd", action="store_true",
                    help="time the backward alone (see the docstring)")
    ap.add_argument("--profile", action="store_true",
                    help="our per-kernel times under each row")
    ap.add_argument("--lse-input", action="store_true",
                    help="with --bwd: lse an input, no lse pass (lsefwd)")
    args = ap.parse_args()
    if args.bwd:
        return main_bwd(args)
    if not torch.cuda.is_available():
        sys.exit("no GPU")
    tdt = torch.bfloat16
    print(f"# cuda_attention_grad_torch: {torch.cuda.get_device_name()}, "
          f"bf16, torch {torch.__version__}, cuDNN "
          f"{torch.backends.cudnn.version()}, tensorjit {tj.version()}, "
          f"TJ_ATTENTION_LSE={os.environ.get('TJ_ATTENTION_LSE', '')!r}")
    print(f"{'B,H,T,D,causal':>22s} {'ours ms':>15s} {'flash ms':>9s} "
          f"{'cudnn ms':>9s} {'ours TF':>8s} {'flash TF':>8s} "
          f"{'cudnn TF':>8s} {'/flash':>7s} {'/cudnn':>7s} {'max err':>8s}")
    for d in args.d:
        h = args.hd // d
        for t in args.t:
            b = max(1, args.tokens // t)
            for causal in (False, True):
                shape = (b, h, t, d)
                gen = torch.Generator(device="cuda").manual_seed(1)
                q, k, v, dy = (torch.randn(shape, device="cuda", dtype=tdt,
                                           generator=gen) for _ in range(4))
                for x in (q, k, v):
                    x.requires_grad_(True)
                g = tj.Graph("attention")
                gq = g.input("q", "bf16", list(shape))
                gk = g.input("k", "bf16", list(shape))
                gv = g.input("v", "bf16", list(shape))
                g.output(g.attention(gq, gk, gv, causal=causal), "y")
                exe = tj.compile(g.grad(), "cuda")
                outs = [torch.empty(shape, device="cuda", dtype=tdt)
                        for _ in range(4)]
                qd, kd, vd = (x.detach() for x in (q, k, v))
                exe(qd, kd, vd, dy, out=outs)
                want = torch_step(SDPBackend.FLASH_ATTENTION, q, k, v, dy,
                                  causal)()
                # The largest error relative to the largest magnitude, per
                # gradient (printed: a wrong result still shows its time).
                err = max(float((a.float() - w.float()).abs().max()
                                / w.float().abs().max().clamp(min=1e-6))
                          for a, w in zip(outs[1:], want))
                flops = 3.5 * 4.0 * b * h * t * t * d * (0.5 if causal
                                                         else 1.0)
                ours = time_ms(lambda: exe(qd, kd, vd, dy, out=outs),
                               args.iters)
                fl = time_ms(torch_step(SDPBackend.FLASH_ATTENTION, q, k, v,
                                        dy, causal), args.iters)
                try:
                    cd = time_ms(torch_step(SDPBackend.CUDNN_ATTENTION, q, k,
                                            v, dy, causal), args.iters)
                except RuntimeError:
                    cd = (float("nan"),) * 3
                tf = [flops / x[0] * 1e-9 for x in (ours, fl, cd)]
                print(f"{b:>4d},{h:>3d},{t:>5d},{d:>4d},"
                      f"{'yes' if causal else 'no':>4s} "
                      f"{ours[0]:8.3f}({ours[2] - ours[1]:5.3f}) "
                      f"{fl[0]:9.3f} {cd[0]:9.3f} {tf[0]:8.1f} {tf[1]:8.1f} "
                      f"{tf[2]:8.1f} {fl[0] / ours[0]:7.2f} "
                      f"{cd[0] / ours[0]:7.2f} {err:8.1e}", flush=True)
                if args.profile:
                    print_profile(exe, (qd, kd, vd, dy), outs, args.iters)
                del exe, outs
                torch.cuda.empty_cache()
    print("# ms per forward + backward (ours: median, (max-min) of the 5 "
          "means); /flash, /cudnn above 1: ours faster")


def print_profile(exe, ins, outs, runs):
    # Our kernels' shares (tj_executable_profile): where the time goes.
    try:
        prof = exe.profile(*ins, runs=runs, out=outs)
        for e in prof.entries:
            print(f"#   {e.name:>14s} {e.ms:8.3f} ms "
                  f"{100 * e.share:5.1f}% "
                  f"{e.gflops_per_s / 1e3:7.1f} TF/s  "
                  f"{e.detail}")
    except Exception as ex:  # the table still stands
        print(f"#   profile failed: {ex}")


def torch_bwd(backend, q, k, v, dy, causal):
    with sdpa_kernel(backend):
        y = F.scaled_dot_product_attention(q, k, v, is_causal=causal)

    def run():
        return torch.autograd.grad(y, (q, k, v), dy, retain_graph=True)
    return run


def main_bwd(args):
    tdt = torch.bfloat16
    print(f"# cuda_attention_grad_torch --bwd: {torch.cuda.get_device_name()}"
          f", bf16, torch {torch.__version__}, cuDNN "
          f"{torch.backends.cudnn.version()}, tensorjit {tj.version()}"
          f"{', lse an input' if args.lse_input else ''}")
    print(f"{'B,H,T,D,causal':>22s} {'ours ms':>15s} {'flash ms':>9s} "
          f"{'cudnn ms':>9s} {'ours TF':>8s} {'flash TF':>8s} "
          f"{'cudnn TF':>8s} {'/flash':>7s} {'/cudnn':>7s} {'max err':>8s}")
    for d in args.d:
        h = args.hd // d
        for t in args.t:
            b = max(1, args.tokens // t)
            for causal in (False, True):
                shape = (b, h, t, d)
                gen = torch.Generator(device="cuda").manual_seed(1)
                q, k, v, dy = (torch.randn(shape, device="cuda", dtype=tdt,
                                           generator=gen) for _ in range(4))
                for x in (q, k, v):
                    x.requires_grad_(True)
                with sdpa_kernel(SDPBackend.FLASH_ATTENTION):
                    y = F.scaled_dot_product_attention(q, k, v,
                                                       is_causal=causal)
                y = y.detach()
                g = tj.Graph("attention_bwd")
                gq, gk, gv, gy, gdy = (g.input(n, "bf16", list(shape))
                                       for n in ("q", "k", "v", "y", "dy"))
                qd, kd, vd = (x.detach() for x in (q, k, v))
                extra = ()
                if args.lse_input:
                    # What a partitioned backward reads from the forward.
                    lse = g.input("lse", "f32", [b, h, t])
                    gl = tj.Graph("attention_lse")
                    lq, lk = (gl.input(n, "bf16", list(shape))
                              for n in ("q", "k"))
                    gl.output(gl.attention_lse(lq, lk, causal=causal), "lse")
                    lse_t = torch.empty((b, h, t), device="cuda",
                                        dtype=torch.float32)
                    tj.compile(gl, "cuda")(qd, kd, out=[lse_t])
                    extra = (lse_t,)
                else:
                    lse = g.attention_lse(gq, gk, causal=causal)
                delta = g.sum(g.mul(g.cast(gdy, "f32"), g.cast(gy, "f32")),
                              -1)
                g.output(g.attention_dq(gq, gk, gv, None, gdy, lse, delta,
                                        causal=causal), "dq")
                g.output(g.attention_dkv(gq, gk, gv, None, gdy, lse, delta,
                                         causal=causal), "dkv")
                exe = tj.compile(g, "cuda")
                dq = torch.empty(shape, device="cuda", dtype=tdt)
                dkv = torch.empty((b, h, t, 2 * d), device="cuda", dtype=tdt)
                ins = (qd, kd, vd, y, dy) + extra
                exe(*ins, out=[dq, dkv])
                want = torch_bwd(SDPBackend.FLASH_ATTENTION, q, k, v, dy,
                                 causal)()
                got = (dq, dkv[..., :d], dkv[..., d:])
                err = max(float((a.float() - w.float()).abs().max()
                                / w.float().abs().max().clamp(min=1e-6))
                          for a, w in zip(got, want))
                flops = 2.5 * 4.0 * b * h * t * t * d * (0.5 if causal
                                                         else 1.0)
                ours = time_ms(lambda: exe(*ins, out=[dq, dkv]), args.iters)
                fl = time_ms(torch_bwd(SDPBackend.FLASH_ATTENTION, q, k, v,
                                       dy, causal), args.iters)
                try:
                    cd = time_ms(torch_bwd(SDPBackend.CUDNN_ATTENTION, q, k,
                                           v, dy, causal), args.iters)
                except RuntimeError:
                    cd = (float("nan"),) * 3
                tf = [flops / x[0] * 1e-9 for x in (ours, fl, cd)]
                print(f"{b:>4d},{h:>3d},{t:>5d},{d:>4d},"
                      f"{'yes' if causal else 'no':>4s} "
                      f"{ours[0]:8.3f}({ours[2] - ours[1]:5.3f}) "
                      f"{fl[0]:9.3f} {cd[0]:9.3f} {tf[0]:8.1f} {tf[1]:8.1f} "
                      f"{tf[2]:8.1f} {fl[0] / ours[0]:7.2f} "
                      f"{cd[0] / ours[0]:7.2f} {err:8.1e}", flush=True)
                if args.profile:
                    print_profile(exe, ins, [dq, dkv], args.iters)
                del exe, dq, dkv
                torch.cuda.empty_cache()
    print("# ms per backward (ours: median, (max-min) of the 5 means); "
          "/flash, /cudnn above 1: ours faster")


if __name__ == "__main__":
    main()
