"""Issue 15's bandwidth-bound layers on the GPU (cudabw): depthwise 3x3
convs (MobileNet shapes, stride 1 and 2), max/avg pools (resnet's 3x3/2
stem pool, bench/conv_bench.c's list), the global average pool (a mean
over H, W), and the embedding gather (8192 token ids into a [50000, 768]
f32 or bf16 table), each beside a device-to-device copy of the same
compulsory bytes (what the layer must read and write: x and y; the
gather's rows read and written) and torch eager (and torch.compile with
--compile), in one run on the same tensors.

Timing: torch's ops and the copy are captured in a CUDA graph of --iters
calls (no launch gaps between calls) and replayed, 5 rounds between CUDA
events: the median ms per call (min-max beside). Ours: the kernel time
alone, tj_executable_profile (median of its --iters runs, as the
profile reports), and our Python call timed by CUDA events (launch gaps
included; at batch 1 that is mostly the call). "of copy" = copy ms /
our kernel ms: the fraction of copy bandwidth (issue 15's goal: >= 0.85
for depthwise and pools, >= 0.8 for the gather). Each output is checked
against torch's first (f32: 1e-5; the gather bit-exact).

    TJ_LIBRARY=build/libtensorjit.so python3 bench/cuda_window_torch.py
    ... --batch 1 --only dw --iters 50 --compile

--ours-only skips torch (a "before" run with another library, e.g.
TJ_LIBRARY=main's). --rows 1,2,4 adds rows of the window kernel with that
many output rows a thread (TJ_NVPTX_CONV=window-rowsN, each in a context
of its own) beside the default's choice. Prints a table; never a pass/fail. Needs torch with
CUDA (the GPU machine); torch_timing.py must sit beside it.
"""

import argparse
import os
import statistics
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)),
                                "..", "python"))

import torch  # noqa: E402
import torch.nn.functional as F  # noqa: E402

import tensorjit as tj  # noqa: E402
from torch_timing import cuda_time_ms  # noqa: E402

# name, kind, channels, size (h = w), kernel, stride, pad.
WINDOWS = [
    ("dw 3x3 144 @56", "dw", 144, 56, 3, 1, 1),
    ("dw 3x3/2 96 @112", "dw", 96, 112, 3, 2, 1),
    ("dw 3x3 576 @7", "dw", 576, 7, 3, 1, 1),
    ("dw 5x5/2 96 @28", "dw", 96, 28, 5, 2, 2),
    ("maxpool 3x3/2 64 @112", "max", 64, 112, 3, 2, 1),
    ("avgpool 3x3 256 @28", "avg", 256, 28, 3, 1, 1),
    ("globalpool 2048 @7", "mean", 2048, 7, 7, 1, 0),
]
GATHERS = [("gather 8192 of 50000x768 f32", "f32"),
           ("gather 8192 of 50000x768 bf16", "bf16")]


def graph_time_ms(fn, iters):
    """fn captured |iters| times in a CUDA graph, replayed: (median, min,
    max) ms per call over 5 rounds. Falls back to plain CUDA events
    (launch gaps included) where capture fails."""
    try:
        s = torch.cuda.Stream()
        s.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(s):
            for _ in range(3):
                fn()
        torch.cuda.current_stream().wait_stream(s)
        g = torch.cuda.CUDAGraph()
        with torch.cuda.graph(g):
            for _ in range(iters):
                fn()
        t = cuda_time_ms(g.replay, 1)
        return tuple(v / iters for v in t)
    except Exception:  # noqa: BLE001 - any capture failure: plain events
        return cuda_time_ms(fn, iters)


def copy_time_ms(nbytes, iters):
    """A device-to-device copy moving |nbytes| in all (half read, half
    written)."""
    n = max(1, int(nbytes // 2 // 4))
    src = torch.empty(n, dtype=torch.float32, device="cuda").uniform_()
    dst = torch.empty_like(src)
    return graph_time_ms(lambda: dst.copy_(src), iters)


def context_for(rows):
    # Settings are read when a context is created.
    if rows:
        os.environ["TJ_NVPTX_CONV"] = f"window-rows{rows}"
    try:
        return tj.Context()
    finally:
        os.environ.pop("TJ_NVPTX_CONV", None)


def build_window(kind, n, c, h, k, s, p, ctx=None):
    g = tj.Graph("window", context=ctx)
    x = g.input("x", "f32", [n, c, h, h])
    if kind == "dw":
        w = g.input("w", "f32", [c, 1, k, k])
        b = g.input("b", "f32", [c])
        y = g.conv(x, w, b, strides=[s, s], pads=[p, p, p, p], groups=c)
    elif kind == "max":
        y = g.max_pool(x, [k, k], strides=[s, s], pads=[p, p, p, p])
    elif kind == "avg":
        y = g.avg_pool(x, [k, k], strides=[s, s], pads=[p, p, p, p],
                       count_include_pad=False)
    else:
        y = g.mean(x, [2, 3], keepdims=True)
    g.output(y, "y")
    return tj.compile(g, "cuda")


def torch_window(kind, c, k, s, p):
    if kind == "dw":
        return lambda x, w, b: F.conv2d(x, w, b, s, p, 1, c)
    if kind == "max":
        return lambda x: F.max_pool2d(x, k, s, p)
    if kind == "avg":
        return lambda x: F.avg_pool2d(x, k, s, p, count_include_pad=False)
    return lambda x: x.mean(dim=(2, 3), keepdim=True)


def row(name, n, ours_call, kern, copy, eager, comp, nbytes):
    frac = copy[0] / kern if kern > 0 else float("nan")
    gbs = nbytes / kern / 1e6 if kern > 0 else float("nan")
    e = f"{eager[0]:8.4f}" if eager else "       -"
    cm = f"{comp[0]:8.4f}" if comp else "       -"
    print(f"{name:30s} {n:3d} {kern:8.4f} {ours_call[0]:8.4f} "
          f"{copy[0]:8.4f} ({copy[1]:.4f}-{copy[2]:.4f}) {gbs:7.0f} "
          f"{frac:6.2f} {e} {cm}")
    sys.stdout.flush()


def kernel_ms(exe, args, out, iters):
    # The profile's kernel time per run, median of 3 profiles.
    ks = [exe.profile(*args, runs=iters, out=out).kernel_ms
          for _ in range(3)]
    return statistics.median(ks)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--batch", type=int, nargs="*", default=[1, 32])
    ap.add_argument("--only", default="")
    ap.add_argument("--iters", type=int, default=20)
    ap.add_argument("--compile", action="store_true",
                    help="torch.compile beside eager (slow to compile)")
    ap.add_argument("--ours-only", action="store_true")
    ap.add_argument("--rows", default="",
                    help="window kernel rows a thread to add, e.g. 1,2,4")
    args = ap.parse_args()
    rows = [int(r) for r in args.rows.split(",") if r]
    contexts = {r: context_for(r) for r in rows}
    if not torch.cuda.is_available():
        sys.exit("no GPU")
    # Exact f32 on both sides: cuDNN's depthwise conv would take TF32.
    torch.backends.cudnn.allow_tf32 = False
    torch.backends.cuda.matmul.allow_tf32 = False
    print(f"# cuda_window_torch: {torch.cuda.get_device_name()}, torch "
          f"{torch.__version__}, tensorjit {tj.version()} "
          f"({os.environ.get('TJ_LIBRARY', 'default library')})")
    print(f"{'case':30s} {'N':>3s} {'kern ms':>8s} {'call ms':>8s} "
          f"{'copy ms (min-max)':>26s} {'GB/s':>7s} {'ofcopy':>6s} "
          f"{'eager':>8s} {'compile':>8s}")
    gen = torch.Generator(device="cuda").manual_seed(1)
    for name, kind, c, h, k, s, p in WINDOWS:
        if args.only and args.only not in name:
            continue
        for n in args.batch:
            x = torch.randn(n, c, h, h, device="cuda", generator=gen)
            w = torch.randn(c, 1, k, k, device="cuda", generator=gen) / k
            b = torch.randn(c, device="cuda", generator=gen)
            targs = (x, w, b) if kind == "dw" else (x,)
            tfn = torch_window(kind, c, k, s, p)
            want = tfn(*targs)
            exe = build_window(kind, n, c, h, k, s, p)
            out = torch.empty_like(want)
            exe(*targs, out=out)
            try:
                torch.testing.assert_close(out, want, rtol=1e-5, atol=1e-5)
            except AssertionError as e:
                print(f"{name:30s} {n:3d} WRONG: {str(e).splitlines()[1:3]}")
                continue
            nbytes = (x.numel() + want.numel()) * 4
            call = cuda_time_ms(lambda: exe(*targs, out=out), args.iters)
            kern = kernel_ms(exe, targs, out, args.iters)
            copy = copy_time_ms(nbytes, args.iters)
            eager = comp = None
            if not args.ours_only:
                eager = graph_time_ms(lambda: tfn(*targs), args.iters)
                if args.compile:
                    cfn = torch.compile(tfn)
                    cfn(*targs)
                    comp = graph_time_ms(lambda: cfn(*targs), args.iters)
            row(name, n, call, kern, copy, eager, comp, nbytes)
            for r in rows if kind != "mean" else []:
                exe_r = build_window(kind, n, c, h, k, s, p, contexts[r])
                exe_r(*targs, out=out)
                if not torch.allclose(out, want, rtol=1e-5, atol=1e-5):
                    print(f"{name + ' rows' + str(r):30s} {n:3d} WRONG")
                    continue
                kern_r = kernel_ms(exe_r, targs, out, args.iters)
                row(f"{name} rows{r}", n,
                    cuda_time_ms(lambda: exe_r(*targs, out=out), args.iters),
                    kern_r, copy, None, None, nbytes)
    for name, dt in GATHERS:
        if args.only and args.only not in name:
            continue
        tdt = torch.float32 if dt == "f32" else torch.bfloat16
        table = torch.randn(50000, 768, device="cuda", generator=gen).to(tdt)
        ids = torch.randint(0, 50000, (8192,), device="cuda", generator=gen)
        g = tj.Graph("gather")
        tv = g.input("table", dt, [50000, 768])
        iv = g.input("ids", "i64", [8192])
        g.output(g.gather(tv, iv, 0), "y")
        exe = tj.compile(g, "cuda")
        want = F.embedding(ids, table)
        out = torch.empty_like(want)
        exe(table, ids, out=out)
        if not torch.equal(out, want):
            print(f"{name:30s} WRONG")
            continue
        nbytes = 2 * want.numel() * want.element_size() + ids.numel() * 8
        call = cuda_time_ms(lambda: exe(table, ids, out=out), args.iters)
        kern = kernel_ms(exe, (table, ids), out, args.iters)
        copy = copy_time_ms(nbytes, args.iters)
        eager = comp = None
        if not args.ours_only:
            eager = graph_time_ms(lambda: F.embedding(ids, table), args.iters)
            if args.compile:
                cfn = torch.compile(lambda i, t: F.embedding(i, t))
                cfn(ids, table)
                comp = graph_time_ms(lambda: cfn(ids, table), args.iters)
        row(name, 8192, call, kern, copy, eager, comp, nbytes)
    return 0


if __name__ == "__main__":
    sys.exit(main())
