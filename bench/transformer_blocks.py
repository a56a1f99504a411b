#!/usr/bin/env python3
"""Whole transformer blocks (issue 14): a GPT-style pre-norm block
(LayerNorm, Q/K/V linears with bias, causal attention, output projection,
residual, LayerNorm, GELU MLP, residual) and a Llama-style decoder block
(RMSNorm, Q/K/V linears with grouped-query heads, rotary embeddings,
causal attention, output projection, residual, RMSNorm, SwiGLU MLP,
residual), built through tensorjit's public Python API with every weight a
graph input, and run beside torch eager, torch.compile (default and, with
--max-autotune, mode="max-autotune") and, on the CPU with --ort,
onnxruntime (the torch module exported to ONNX), in one run, on the same
tensors:

    TJ_LIBRARY=build/libtensorjit.so python3 bench/transformer_blocks.py
    ... --target cuda --dtype bf16 --bt 1024 8192        # the H200
    ... --target x86 --dtype f32 --threads 2 --ort        # a CPU

Timing: wall time from Python of a whole call (our call with out= given;
CUDA: events around --iters calls, median of 5 means; CPU: the median of 5
means of --iters calls; --cpu-clock: the process's CPU time instead), so
host overhead counts. Ours is checked against
torch eager before timing (bf16: 5e-2, f32: 1e-3). After each shape it
prints our per-kernel breakdown (tj_executable_profile, the --top
largest). Ratios: the alternative's time over ours (above 1: ours faster).
Without torch only our times are printed (numpy inputs).
"""

import argparse
import math
import os
import statistics
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)),
                                "..", "python"))

import numpy as np  # noqa: E402

import tensorjit as tj  # noqa: E402
from torch_timing import cuda_time_ms  # noqa: E402

try:
    import torch  # type: ignore
    import torch.nn.functional as F  # type: ignore
except ImportError:
    torch = None


class Config:
    def __init__(self, kind, d, heads, kv_heads, ffn):
        self.kind, self.d, self.h, self.hkv, self.ffn = kind, d, heads, \
            kv_heads, ffn
        self.dh = d // heads


GPT = Config("gpt", 768, 12, 12, 3072)
LLAMA = Config("llama", 2048, 16, 4, 5632)


def weight_shapes(c):
    """(name, shape) of every weight, in the graph's input order after x."""
    kvd = c.hkv * c.dh
    if c.kind == "gpt":
        return [("ln1_w", [c.d]), ("ln1_b", [c.d]),
                ("wq", [c.d, c.d]), ("bq", [c.d]),
                ("wk", [c.d, c.d]), ("bk", [c.d]),
                ("wv", [c.d, c.d]), ("bv", [c.d]),
                ("wo", [c.d, c.d]), ("bo", [c.d]),
                ("ln2_w", [c.d]), ("ln2_b", [c.d]),
                ("w1", [c.d, c.ffn]), ("b1", [c.ffn]),
                ("w2", [c.ffn, c.d]), ("b2", [c.d])]
    return [("rms1_w", [c.d]), ("wq", [c.d, c.d]), ("wk", [c.d, kvd]),
            ("wv", [c.d, kvd]), ("wo", [c.d, c.d]), ("rms2_w", [c.d]),
            ("wg", [c.d, c.ffn]), ("wu", [c.d, c.ffn]), ("wd", [c.ffn, c.d]),
            ("cos", ["T", c.dh]), ("sin", ["T", c.dh])]


def rope_tables(t, dh):
    inv = 1.0 / (10000.0 ** (np.arange(0, dh, 2) / dh))
    ang = np.outer(np.arange(t), inv)
    ang = np.concatenate([ang, ang], axis=1)
    return np.cos(ang).astype(np.float32), np.sin(ang).astype(np.float32)


def build(c, dtype, b, t, constants=None, context=None):
    """Our block for x [b, t, d] (constant sizes: one compile a shape).
    |constants| (name -> array, as inputs_for gives them): the weights are
    graph constants of |dtype| instead of inputs (bench/quant_accuracy.py
    quantizes them). |context|: the tj.Context (None: the default one)."""
    g = tj.Graph(f"{c.kind}_block", context)
    x = g.input("x", dtype, [b, t, c.d])
    w = {}
    for name, shape in weight_shapes(c):
        if constants is not None:
            w[name] = g.constant(constants[name], dtype)
            continue
        w[name] = g.input(name, dtype, [t if s == "T" else s for s in shape])

    def heads(v, n):  # [b, t, n*dh] -> [b, n, t, dh]
        return v.reshape(b, t, n, c.dh).transpose(0, 2, 1, 3)

    def merge(v):  # [b, h, t, dh] -> [b, t, h*dh]
        return v.transpose(0, 2, 1, 3).reshape(b, t, c.d)

    if c.kind == "gpt":
        h = g.layer_norm(x, w["ln1_w"], w["ln1_b"], 1e-5)
        q = heads(g.linear(h, w["wq"], w["bq"]), c.h)
        k = heads(g.linear(h, w["wk"], w["bk"]), c.h)
        v = heads(g.linear(h, w["wv"], w["bv"]), c.h)
        a = merge(g.attention(q, k, v, causal=True))
        x = x + g.linear(a, w["wo"], w["bo"])
        h = g.layer_norm(x, w["ln2_w"], w["ln2_b"], 1e-5)
        m = g.linear(g.gelu(g.linear(h, w["w1"], w["b1"])), w["w2"], w["b2"])
        g.output(x + m, "y")
        return g
    half = c.dh // 2

    def rope(v, n):  # v [b, n, t, dh]: v * cos + rotate_half(v) * sin
        lo = g.slice(v, [0, 0, 0, 0], [b, n, t, half])
        hi = g.slice(v, [0, 0, 0, half], [b, n, t, c.dh])
        rot = g.concat([-hi, lo], axis=3)
        return v * w["cos"] + rot * w["sin"]

    h = g.rms_norm(x, w["rms1_w"], 1e-6)
    q = rope(heads(h @ w["wq"], c.h), c.h)
    k = rope(heads(h @ w["wk"], c.hkv), c.hkv)
    v = heads(h @ w["wv"], c.hkv)
    x = x + merge(g.attention(q, k, v, causal=True)) @ w["wo"]
    h = g.rms_norm(x, w["rms2_w"], 1e-6)
    m = (g.silu(h @ w["wg"]) * (h @ w["wu"])) @ w["wd"]
    g.output(x + m, "y")
    return g


def torch_block(c, export=False):
    """The same block in torch (weights passed in the graph's order).
    With |export|, RMSNorm is written out (the ONNX exporter has no
    aten::rms_norm before opset 23) and grouped-query attention repeats k
    and v (nor enable_gqa)."""
    def rms_norm(x, w, eps):
        if not export:
            return F.rms_norm(x, (x.shape[-1],), w, eps)
        return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps) * w

    def gpt(x, ln1_w, ln1_b, wq, bq, wk, bk, wv, bv, wo, bo, ln2_w, ln2_b,
            w1, b1, w2, b2):
        bsz, t, d = x.shape
        h = F.layer_norm(x, (d,), ln1_w, ln1_b, 1e-5)

        def heads(v):
            return v.view(bsz, t, c.h, c.dh).transpose(1, 2)
        q, k, v = heads(h @ wq + bq), heads(h @ wk + bk), heads(h @ wv + bv)
        a = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        x = x + a.transpose(1, 2).reshape(bsz, t, d) @ wo + bo
        h = F.layer_norm(x, (d,), ln2_w, ln2_b, 1e-5)
        return x + F.gelu(h @ w1 + b1) @ w2 + b2

    def llama(x, rms1_w, wq, wk, wv, wo, rms2_w, wg, wu, wd, cos, sin):
        bsz, t, d = x.shape

        def heads(v, n):
            return v.view(bsz, t, n, c.dh).transpose(1, 2)

        def rope(v):
            lo, hi = v[..., :c.dh // 2], v[..., c.dh // 2:]
            return v * cos + torch.cat([-hi, lo], dim=-1) * sin
        h = rms_norm(x, rms1_w, 1e-6)
        q = rope(heads(h @ wq, c.h))
        k = rope(heads(h @ wk, c.hkv))
        v = heads(h @ wv, c.hkv)
        if export:  # the exporter has no enable_gqa: repeat k and v
            k = k.repeat_interleave(c.h // c.hkv, dim=1)
            v = v.repeat_interleave(c.h // c.hkv, dim=1)
            a = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        else:
            a = F.scaled_dot_product_attention(q, k, v, is_causal=True,
                                               enable_gqa=True)
        x = x + a.transpose(1, 2).reshape(bsz, t, d) @ wo
        h = rms_norm(x, rms2_w, 1e-6)
        return x + (F.silu(h @ wg) * (h @ wu)) @ wd

    return gpt if c.kind == "gpt" else llama


def inputs_for(c, b, t, rng):
    """x and the weights as f32 numpy arrays (weights scaled 1/sqrt(fan-in),
    norms' weights near 1)."""
    arrs = [rng.standard_normal((b, t, c.d)).astype(np.float32)]
    cos, sin = rope_tables(t, c.dh)
    for name, shape in weight_shapes(c):
        if name == "cos":
            arrs.append(cos)
        elif name == "sin":
            arrs.append(sin)
        elif len(shape) == 1:
            base = 1.0 if name.endswith("_w") else 0.0
            arrs.append((base + 0.02 * rng.standard_normal(shape))
                        .astype(np.float32))
        else:
            arrs.append((rng.standard_normal(shape) / math.sqrt(shape[0]))
                        .astype(np.float32))
    return arrs


CLOCK = time.perf_counter


def time_cpu(fn, iters):
    fn()
    means = []
    for _ in range(5):
        t0 = CLOCK()
        for _ in range(iters):
            fn()
        means.append((CLOCK() - t0) / iters * 1e3)
    return statistics.median(means)


def time_cuda(fn, iters):
    return cuda_time_ms(fn, iters)[0]  # the median


def ort_session(fn, targs, path, threads):
    """onnxruntime on |fn| exported with |targs| (None when onnxruntime or
    the exporter is missing), on |threads| threads (0: its default)."""
    try:
        import onnxruntime as ort  # type: ignore
    except ImportError:
        return None

    class M(torch.nn.Module):
        def forward(self, *a):
            return fn(*a)
    names = [f"i{k}" for k in range(len(targs))]
    try:
        torch.onnx.export(M(), tuple(targs), path, input_names=names,
                          output_names=["y"], opset_version=18,
                          dynamo=False, verbose=False)
    except Exception as e:  # the exporter or the onnx package missing
        print(f"# onnxruntime skipped: export failed: {e}"[:200])
        return None
    so = ort.SessionOptions()
    if threads > 0:
        so.intra_op_num_threads = threads
        so.inter_op_num_threads = 1
    sess = ort.InferenceSession(path, so, providers=["CPUExecutionProvider"])
    feed = {n: a.detach().numpy() for n, a in zip(names, targs)}
    return lambda: sess.run(None, feed)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--target", default="x86", choices=("x86", "cuda"))
    ap.add_argument("--blocks", nargs="*", default=["gpt", "llama"])
    ap.add_argument("--dtype", default="f32", choices=("f32", "bf16"))
    ap.add_argument("--bt", type=int, nargs="*", default=[1024],
                    help="tokens a call (B*T)")
    ap.add_argument("--t", type=int, default=512, help="sequence length")
    ap.add_argument("--iters", type=int, default=10)
    ap.add_argument("--threads", type=int, default=0,
                    help="x86: our threads and torch's (0: all)")
    ap.add_argument("--no-compile", action="store_true")
    ap.add_argument("--max-autotune", action="store_true")
    ap.add_argument("--ort", action="store_true",
                    help="x86: onnxruntime (on --threads threads)")
    ap.add_argument("--top", type=int, default=8)
    ap.add_argument("--cpu-clock", action="store_true",
                    help="x86: time the process's CPU time (all threads), "
                    "not wall time: on a host shared with other work, time "
                    "spent descheduled does not count (use with --threads "
                    "1: spinning pools count their waits)")
    args = ap.parse_args()
    if args.cpu_clock:
        global CLOCK
        CLOCK = time.process_time
    cuda = args.target == "cuda"
    if cuda and (torch is None or not torch.cuda.is_available()):
        sys.exit("--target cuda needs torch with a CUDA device")
    if torch is not None and args.threads > 0 and not cuda:
        torch.set_num_threads(args.threads)
    dev = "cuda" if cuda else "cpu"
    rng = np.random.default_rng(14)
    print(f"# transformer_blocks: {args.target}, {args.dtype}, T {args.t}, "
          f"tensorjit {tj.version()}"
          + (f", torch {torch.__version__}" if torch is not None else
             ", no torch"))
    print(f"{'block':>6s} {'B,T':>9s} {'ours ms':>9s} {'kernel':>8s} "
          f"{'eager':>8s} {'compile':>8s} {'autotune':>8s} {'ort':>8s} "
          f"{'eager/ours':>10s} {'comp/ours':>9s}")
    for kind in args.blocks:
        c = GPT if kind == "gpt" else LLAMA
        for bt in args.bt:
            b, t = max(1, bt // args.t), min(args.t, bt)
            g = build(c, args.dtype, b, t)
            exe = tj.compile(g, args.target, num_threads=args.threads)
            arrs = inputs_for(c, b, t, rng)
            if torch is not None:
                tdt = torch.bfloat16 if args.dtype == "bf16" else \
                    torch.float32
                ours_in = [torch.from_numpy(a).to(dev, tdt) for a in arrs]
                out = torch.empty(b, t, c.d, device=dev, dtype=tdt)
            else:
                if args.dtype == "bf16":
                    arrs = [tj.f32_to_bf16(a) for a in arrs]
                ours_in = arrs
                out = np.empty_like(arrs[0])
            exe(*ours_in, out=out)
            timer = time_cuda if cuda else time_cpu
            ours = timer(lambda: exe(*ours_in, out=out), args.iters)
            prof = exe.profile(*ours_in, runs=args.iters, out=out)
            eager = comp = tune = ort_ms = float("nan")
            if torch is not None:
                fn = torch_block(c)
                with torch.no_grad():
                    want = fn(*ours_in)
                    tol = 5e-2 if args.dtype == "bf16" else 1e-3
                    torch.testing.assert_close(out.float(), want.float(),
                                               rtol=tol, atol=tol)
                    eager = timer(lambda: fn(*ours_in), args.iters)
                    if not args.no_compile:
                        cf = torch.compile(fn)
                        cf(*ours_in)
                        comp = timer(lambda: cf(*ours_in), args.iters)
                    if args.max_autotune:
                        af = torch.compile(fn, mode="max-autotune")
                        af(*ours_in)
                        tune = timer(lambda: af(*ours_in), args.iters)
                if args.ort and not cuda and args.dtype == "f32":
                    run = ort_session(torch_block(c, export=True), ours_in,
                                      f"/tmp/tj_{kind}.onnx", args.threads)
                    if run is not None:
                        ort_ms = timer(run, args.iters)
            print(f"{kind:>6s} {f'{b},{t}':>9s} {ours:9.3f} "
                  f"{prof.kernel_ms:8.3f} {eager:8.3f} {comp:8.3f} "
                  f"{tune:8.3f} {ort_ms:8.3f} {eager / ours:10.2f} "
                  f"{comp / ours:9.2f}")
            for e in prof.entries[:args.top]:
                print(f"#   {e.kind:6s} {e.ms:8.3f} ms {100 * e.share:5.1f}% "
                      f"{e.name[:60]}")
            exe.close()
    print("# ms a call (wall time from Python); kernel: ours, kernels alone; "
          "eager/ours and comp/ours above 1: ours faster")


if __name__ == "__main__":
    main()
