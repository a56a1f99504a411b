#!/usr/bin/env python3
"""The transformer blocks' attention alone (issue 14, llama2): the shapes of
bench/transformer_blocks.py at B,T = 16,512 (Llama: 16 query heads over 4
k/v heads, D 128; GPT: 12 heads, D 64; causal, bf16), ours under each
TJ_NVPTX_ATTENTION kernel (a context a kernel, the setting read when it is
created) beside torch's cuDNN and flash backends (k and v repeated over the
group for them, as torch.compile's Llama does), in one run on the same
tensors:

    TJ_LIBRARY=build/libtensorjit.so python3 bench/block_attention.py

Timing: CUDA events, median of 5 means of --iters calls, ms a call; our
kernel alone (tj_executable_profile) beside it. Our outputs are checked
against torch's flash backend (2e-2) before timing. Prints a table; never a
pass/fail. Needs torch with CUDA.
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

SHAPES = {"llama": (16, 16, 4, 512, 128), "gpt": (16, 12, 12, 512, 64)}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--blocks", nargs="*", default=["llama", "gpt"])
    ap.add_argument("--kernels", nargs="*",
                    default=["", "wgmma-wide", "wgmma-pingpong", "mma"])
    ap.add_argument("--iters", type=int, default=20)
    args = ap.parse_args()
    print(f"# block_attention: {torch.cuda.get_device_name()}, bf16, torch "
          f"{torch.__version__}, cuDNN {torch.backends.cudnn.version()}")
    print(f"{'block':>6s} {'kernel':>15s} {'ms':>7s} {'spread':>7s} "
          f"{'kern ms':>8s} {'TFLOP/s':>8s}")
    for name in args.blocks:
        b, h, hkv, t, d = SHAPES[name]
        gen = torch.Generator(device="cuda").manual_seed(1)
        q = torch.randn((b, h, t, d), device="cuda", dtype=torch.bfloat16,
                        generator=gen)
        k, v = (torch.randn((b, hkv, t, d), device="cuda",
                            dtype=torch.bfloat16, generator=gen)
                for _ in range(2))
        kr, vr = (x.repeat_interleave(h // hkv, dim=1) for x in (k, v))
        flops = 4.0 * b * h * t * t * d * 0.5
        with sdpa_kernel(SDPBackend.FLASH_ATTENTION):
            want = F.scaled_dot_product_attention(q, kr, vr, is_causal=True)
        for kern in args.kernels:
            os.environ["TJ_NVPTX_ATTENTION"] = kern
            ctx = tj.Context()
            g = tj.Graph("attention", ctx)
            gq = g.input("q", "bf16", [b, h, t, d])
            gk = g.input("k", "bf16", [b, hkv, t, d])
            gv = g.input("v", "bf16", [b, hkv, t, d])
            g.output(g.attention(gq, gk, gv, causal=True), "y")
            exe = tj.compile(g, "cuda")
            out = torch.empty_like(q)
            exe(q, k, v, out=out)
            torch.testing.assert_close(out.float(), want.float(), rtol=2e-2,
                                       atol=2e-2)
            ms = cuda_time_ms(lambda: exe(q, k, v, out=out), args.iters,
                              warmup=3)
            km = exe.profile(q, k, v, runs=args.iters, out=out).kernel_ms
            print(f"{name:>6s} {kern or 'default':>15s} {ms[0]:7.4f} "
                  f"{ms[2] - ms[1]:7.4f} {km:8.4f} "
                  f"{flops / ms[0] * 1e-9:8.1f}", flush=True)
            del exe, g
            ctx.close()
        os.environ.pop("TJ_NVPTX_ATTENTION", None)
        for bname, be in (("cudnn", SDPBackend.CUDNN_ATTENTION),
                          ("flash", SDPBackend.FLASH_ATTENTION)):
            def run(be=be):
                with sdpa_kernel(be):
                    return F.scaled_dot_product_attention(q, kr, vr,
                                                          is_causal=True)
            ms = cuda_time_ms(run, args.iters, warmup=3)
            print(f"{name:>6s} {'torch ' + bname:>15s} {ms[0]:7.4f} "
                  f"{ms[2] - ms[1]:7.4f} {'':>8s} "
                  f"{flops / ms[0] * 1e-9:8.1f}", flush=True)
    print("# ms a call (median of 5 means; spread: max - min); kern ms: our "
          "kernel alone")


if __name__ == "__main__":
    main()
