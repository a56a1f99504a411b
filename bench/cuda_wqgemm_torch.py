#!/usr/bin/env python3
"""Weight-only quantized GEMM on the GPU for decode (issue 17, qfold on
CUDA, jit/emit_nvptx_wqmma.c): y = x @ W with W [K, N] a constant, at M =
1, 4, 16, in the same run:
  int4    ours: W quantized as tensorjit.quantize_weights("int4", group
          --group (128)) does it (signed, per group along K; the same
          dequantize -> matmul graph, built here from torch's quantization
          of each copy), x --x-dtype (f32; bf16: the scales bf16 too); the
          GEMM reads the packed weight (half a byte an element)
  int8    ours: the same as "int8" (per output channel)
  bf16    ours: x bf16 @ W bf16 (W an input [K, N], the layout our
          tensor-core GEMM reads)
  torch   torch.matmul(x bf16, W^T bf16) (cuBLAS)
The quantized outputs are checked against x @ W in f32 (cosine >= 0.99)
before they are timed.

Where the weights come from (--modes, each row labelled; issue 17's
wqdecode2):
  call    one GEMM an executable call, the same weight every call: the
          weight stays in the L2 between calls, and each call pays the
          Python call (~7 us on the GPU machine); the figures of the
          earlier sessions.
  warm    R GEMMs an executable call (R outputs, each GEMM its own x),
          all R over the same weight: L2-warm, the call's cost shared by
          R kernels.
  dram    the same R GEMMs over R distinct copies of the weight (W rolled
          along n by 0 .. R - 1 columns, so no two constants are equal),
          R the fewest copies whose int4 bytes pass twice the L2: each
          GEMM reads its weight from DRAM, as a decoder running every
          layer once per token does (a 7B model's weights are 3.5-14 GB).
          The honest measure of "the bytes fall 4x".
warm and dram differ only in where the weight comes from. torch runs the
same R matmuls (R weights for dram) replayed as one CUDA graph, so that
its per-call Python cost is not timed either. ms is per GEMM: a call's
time / R.

One executable per format, shape and mode with M symbolic (the same one
runs M = 1, 4, 16; the bf16 GEMM tunes each M's power-of-two bucket on
its first run, the quantized ones have no candidates). Timing: CUDA
events, median of 5 means of --iters GEMMs (whole calls) after a warm-up
(ms per GEMM, spread max - min of the 5 means); kern: our kernels alone
(tj_executable_profile), per GEMM. Progress and each compile's cost
(wall, then tj_executable_stats' passes / lowering / LLVM / ptxas) and
first run go to stderr.

    TJ_LIBRARY=build/libtensorjit.so python3 bench/cuda_wqgemm_torch.py
    TJ_CUDA_WQGEMM=fma ...   # the CUDA-core kernel instead of tensor cores
    ... --variants cluster   # rows int4:cluster, int8:cluster beside them

Prints a table; never a pass/fail. Needs torch with CUDA (the GPU machine).
"""

import argparse
import os
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)),
                                "..", "python"))

import numpy as np  # noqa: E402
import torch  # noqa: E402

import tensorjit as tj  # noqa: E402
from torch_timing import cuda_time_ms  # noqa: E402

T0 = time.time()


def step(what):
    """A progress line on stderr, so that a slow step shows where it is."""
    print(f"# {time.time() - T0:7.1f} s: {what}", file=sys.stderr, flush=True)


def quantize(w, fmt, group, sdt):
    """|w| (torch f32 [K, N] on the GPU) quantized as
    tensorjit.quantize_weights does it: symmetric, int4 per |group| rows
    along K (max |w| / 7; two values a byte along N, low nibble first),
    int8 per output channel (max |w| / 127), the scale of dtype |sdt|
    (torch) used as stored. (q, scale) as host arrays, bf16 as its bits."""
    k, n = w.shape
    if fmt == "int4":
        wg = w.reshape(k // group, group, n)
        s = (wg.abs().amax(1) / 7).clamp_min(1e-30).to(sdt)
        q = torch.round(wg / s.float()[:, None, :]).clamp(-8, 7)
        q = q.to(torch.int32).reshape(k, n) & 15
        q = (q[:, 0::2] | (q[:, 1::2] << 4)).to(torch.uint8)
    else:
        s = (w.abs().amax(0) / 127).clamp_min(1e-30).to(sdt)
        q = torch.round(w / s.float()).clamp(-127, 127).to(torch.int8)
    s = s.contiguous()
    host_s = (s.view(torch.int16).cpu().numpy().view(np.uint16)
              if sdt == torch.bfloat16 else s.cpu().numpy())
    return q.contiguous().cpu().numpy(), host_s


def compile_quant(qs, r, fmt, x_dtype, group, ctx=None):
    """R GEMMs y_i = x_i @ dequantize(qs[i % len(qs)]) (the graph
    tensorjit.quantize_weights makes of a constant weight), in |ctx|."""
    k = qs[0][0].shape[0]
    g = tj.Graph(f"wq_{fmt}_{r}x{len(qs)}", context=ctx)
    ws = []
    for q, s in qs:
        sc = g.constant(s, dtype=x_dtype)
        ws.append(g.dequantize(g.constant(q), sc, axis=0, block_size=group,
                               int4="int4") if fmt == "int4" else
                  g.dequantize(g.constant(q), sc, axis=1))
    for i in range(r):
        x = g.input(f"x{i}", x_dtype, ["M", k])
        g.output(g.matmul(x, ws[i % len(ws)]), f"y{i}")
    return tj.compile(g, "cuda")


def compile_bf16(n, k, r):
    # W [K, N]: our tensor-core GEMM reads B contiguous along n (x @ W^T of
    # an [N, K] W is a graph break to the host on CUDA, see RESULTS.md).
    # Inputs x0, w0, x1, w1, ...
    g = tj.Graph(f"gemm_bf16_{r}")
    for i in range(r):
        x = g.input(f"x{i}", "bf16", ["M", k])
        g.output(g.matmul(x, g.input(f"w{i}", "bf16", [k, n])), f"y{i}")
    return tj.compile(g, "cuda")


def copies_for(nbytes, l2, least):
    """The fewest copies of |nbytes| that pass twice the L2 (>= least)."""
    return max(least, int(2 * l2 // nbytes) + 1)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--shapes", nargs="*", default=["4096,4096", "11008,4096"],
                    help="N,K")
    ap.add_argument("--ms", default="1,4,16")
    ap.add_argument("--iters", type=int, default=50,
                    help="GEMMs a timed round (rounded up to whole calls)")
    ap.add_argument("--x-dtype", default="f32", choices=("f32", "bf16"),
                    help="x (and the quantized weight's scale) of the "
                    "quantized GEMMs")
    ap.add_argument("--group", type=int, default=128,
                    help="int4's group along K (32, 64, 128)")
    ap.add_argument("--modes", default="warm,dram",
                    help="call, warm, dram (see the docstring)")
    ap.add_argument("--fmts", default="int4,int8,bf16,torch")
    ap.add_argument("--copies", type=int, default=0,
                    help="R (0: the fewest whose int4 bytes pass 2x the L2)")
    ap.add_argument("--variants", nargs="*", default=[],
                    help="TJ_CUDA_WQGEMM settings timed beside the default "
                    "(rows int4:SETTING), each in a context of its own")
    args = ap.parse_args()
    if not torch.cuda.is_available():
        sys.exit("no GPU")
    props = torch.cuda.get_device_properties(0)
    l2 = getattr(props, "L2_cache_size", 50 << 20) or (50 << 20)
    modes = args.modes.split(",")
    fmts = args.fmts.split(",")
    # The quantized formats under each setting: "int4" (the process's
    # TJ_CUDA_WQGEMM), "int4:cluster", ...
    ctxs = {"": None}
    for v in args.variants:
        old = os.environ.get("TJ_CUDA_WQGEMM")
        os.environ["TJ_CUDA_WQGEMM"] = v
        ctxs[v] = tj.Context()  # reads the variable
        if old is None:
            del os.environ["TJ_CUDA_WQGEMM"]
        else:
            os.environ["TJ_CUDA_WQGEMM"] = old
    quants = [f + (":" + v if v else "") for f in ("int4", "int8")
              if f in fmts for v in ctxs]
    cases = quants + [f for f in ("bf16", "torch") if f in fmts]
    print(f"# cuda_wqgemm_torch: {torch.cuda.get_device_name()}, torch "
          f"{torch.__version__}, tensorjit {tj.version()}, x {args.x_dtype}, "
          f"int4 group {args.group}, L2 {l2 / 2**20:.0f} MiB, modes "
          f"{args.modes}, TJ_CUDA_WQGEMM="
          f"{os.environ.get('TJ_CUDA_WQGEMM', '')}")
    print(f"{'N,K':>11s} {'M':>3s} {'mode':>5s} {'R':>3s} {'case':>12s} "
          f"{'ms/GEMM':>16s} {'kern ms':>8s} {'GB/s':>7s} {'/our bf16':>9s} "
          f"{'/torch':>7s}", flush=True)
    rng = np.random.default_rng(1)
    ms = [int(v) for v in args.ms.split(",")]
    qdt = torch.bfloat16 if args.x_dtype == "bf16" else torch.float32
    for shape in args.shapes:
        n, k = (int(v) for v in shape.split(","))
        wbytes = {"int4": k * n / 2 + (k // args.group) * n * 2,
                  "int8": k * n + n * 2, "bf16": k * n * 2,
                  "torch": k * n * 2}
        for q in quants:
            wbytes[q] = wbytes[q.split(":")[0]]
        rmax = args.copies or copies_for(wbytes["int4"], l2, 2)
        w = (rng.standard_normal((k, n), dtype=np.float32) * 0.05)
        wt = torch.from_numpy(w).cuda()  # f32 [K, N]
        for mode in modes:
            r = 1 if mode == "call" else rmax
            nw = r if mode == "dram" else 1
            # Copy i: W rolled by 2 i columns (a distinct constant each).
            wq = [torch.roll(wt, 2 * i, dims=1) if i else wt
                  for i in range(nw)]
            exes = {}
            host = {}
            for fmt in [c for c in cases if c != "torch"]:
                t = time.time()
                try:
                    if fmt == "bf16":
                        exes[fmt] = compile_bf16(n, k, r)
                    else:
                        f, _, v = fmt.partition(":")
                        if f not in host:
                            host[f] = [quantize(c, f, args.group, qdt)
                                       for c in wq]
                        exes[fmt] = compile_quant(host[f], r, f,
                                                  args.x_dtype, args.group,
                                                  ctxs[v])
                except Exception as e:  # noqa: BLE001
                    step(f"{shape} {mode} {fmt}: compile failed: {e!r}")
                    continue
                st = exes[fmt].stats
                step(f"{shape} {mode} R {r} {fmt}: compiled in "
                     f"{(time.time() - t) * 1e3:.0f} ms (passes "
                     f"{st.passes_ms:.0f}, lowering {st.lowering_ms:.0f}, "
                     f"LLVM {st.llvm_ms:.0f}, ptxas {st.ptxas_ms:.0f} ms)")
            wkn = [v.bfloat16() for v in wq]  # [K, N], ours
            wnk = [v.t().contiguous().bfloat16() for v in wq]  # [N, K]
            nan = ((float("nan"), float("nan")), float("nan"))
            for m in ms:
                xs = [torch.randn((m, k), device="cuda") for _ in range(r)]
                xbs = [x.bfloat16() for x in xs]
                wants = {i: xs[i] @ wq[i % nw] for i in (0, r - 1)}
                rows = {name: nan for name in wbytes}
                iters = max(2, -(-args.iters // r))  # whole calls
                for fmt in [c for c in cases if c != "torch"]:
                    if fmt not in exes:
                        continue
                    # A case that fails is reported and skipped: the
                    # other rows still print.
                    try:
                        if fmt == "bf16":
                            fa = []
                            for i in range(r):
                                fa += [xbs[i], wkn[i % nw]]
                            odt = torch.bfloat16
                        else:
                            fa = [x.to(qdt) for x in xs]
                            odt = qdt
                        ys = [torch.empty((m, n), device="cuda", dtype=odt)
                              for _ in range(r)]
                        exe = exes[fmt]
                        t = time.time()
                        exe(*fa, out=ys)  # bf16: tunes M's bucket
                        torch.cuda.synchronize()
                        step(f"{shape} M {m} {mode} {fmt}: first run "
                             f"{(time.time() - t) * 1e3:.0f} ms")
                        for i, want in wants.items():
                            cos = torch.nn.functional.cosine_similarity(
                                ys[i].float().flatten(), want.flatten(),
                                dim=0).item()
                            assert cos >= 0.99, (fmt, m, i, cos)
                        med, lo, hi = cuda_time_ms(
                            lambda: exe(*fa, out=ys), iters)
                        prof = exe.profile(*fa, runs=iters, out=ys)
                        launches = sum(e.launches for e in prof.entries
                                       if e.kind == "kernel")
                        if launches < r:
                            step(f"{shape} M {m} {mode} {fmt}: "
                                 f"{launches:g} kernels a call for {r} "
                                 f"GEMMs (fused?)")
                        rows[fmt] = ((med / r, (hi - lo) / r),
                                     prof.kernel_ms / r)
                    except Exception as e:  # noqa: BLE001
                        step(f"{shape} M {m} {mode} {fmt} failed: {e!r}")
                if "torch" in fmts:
                    ys = [torch.empty((m, n), device="cuda",
                                      dtype=torch.bfloat16) for _ in range(r)]

                    def tcall():
                        for i in range(r):
                            torch.matmul(xbs[i], wnk[i % nw].t(), out=ys[i])
                    try:
                        s = torch.cuda.Stream()
                        s.wait_stream(torch.cuda.current_stream())
                        with torch.cuda.stream(s):
                            tcall()  # cuBLAS's workspace, outside capture
                        torch.cuda.current_stream().wait_stream(s)
                        graph = torch.cuda.CUDAGraph()
                        with torch.cuda.graph(graph):
                            tcall()
                        fn = graph.replay
                    except Exception as e:  # noqa: BLE001
                        step(f"torch CUDA graph failed ({e!r}): plain calls")
                        fn = tcall
                    med, lo, hi = cuda_time_ms(fn, iters)
                    rows["torch"] = ((med / r, (hi - lo) / r), None)
                for name in cases:
                    (t, spread), kern = rows[name]
                    gbs = wbytes[name] / (t * 1e-3) * 1e-9
                    print(f"{shape:>11s} {m:3d} {mode:>5s} {r:3d} "
                          f"{name:>12s} {t:8.4f}({spread:6.4f}) "
                          f"{kern if kern is not None else float('nan'):8.4f}"
                          f" {gbs:7.0f} {rows['bf16'][0][0] / t:9.2f} "
                          f"{rows['torch'][0][0] / t:7.2f}", flush=True)
            del exes, wq, wkn, wnk, host
            torch.cuda.empty_cache()
    print("# ms per GEMM: median (max-min) of 5 means of whole calls / R; "
          "kern: our kernels alone, per GEMM; GB/s: weight bytes / ms; "
          "/our bf16 and /torch above 1: faster than our bf16 GEMM / "
          "torch.matmul bf16 (same mode); warm: R GEMMs over one weight "
          "(L2-warm); dram: over R copies (> 2x the L2: from DRAM); call: "
          "one GEMM a Python call")


if __name__ == "__main__":
    main()
