#!/usr/bin/env python3
"""A sweep of torchvision models (and two transformer blocks) through the
ONNX importer on x86, against onnxruntime (CPU), one table row a model.

Each model is built with random weights (weights=None; BatchNorm statistics
and LayerNorm affines randomized as tests/onnx/models/export_models.py
does, so folded biases are not zero), exported with torch's TorchScript
exporter (torch.onnx.export, dynamo=False, opset --opset, constant folding
on) into --out (kept there: a later run reuses the file unless --reexport),
then, in a child process of its own (a crash is one row, not the sweep):

  imported   tj.onnx.load of the file
  compiled   tj.compile(graph, "x86", num_threads=--threads)
  breaks     the executable's graph breaks
  max err    max |ours - onnxruntime| / max |onnxruntime| over the outputs
  ours ms    median of --runs runs (after warm-up), with min..max
  ORT ms     the same for onnxruntime at the same thread count
  ratio      ours / ORT

or the stage that failed and its error message.

  python3 bench/onnx_zoo.py [--models a,b] [--threads 1] [--runs 5]
      [--batch 1] [--dynamic] [--opset 17] [--out DIR] [--reexport]
      [--timeout S]

--dynamic exports with a symbolic batch axis ("batch") and runs at
--batch; without it the batch is fixed at export. The library is the one
TJ_LIBRARY names (e.g. build/libtensorjit.so), or the package's default.
"""

import argparse
import json
import os
import statistics
import subprocess
import sys
import time

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.join(HERE, "..")

IMAGE_MODELS = [
    "resnet50", "mobilenet_v2", "mobilenet_v3_large", "efficientnet_b0",
    "regnet_y_400mf", "shufflenet_v2_x1_0", "squeezenet1_1", "densenet121",
    "googlenet", "mnasnet0_5", "convnext_tiny", "vit_b_16", "swin_t",
    "maxvit_t", "resnext50_32x4d", "wide_resnet50_2",
]
# Beyond the brief's list: other families and input kinds (3D video
# convs, segmentation heads with Resize, a detector with NMS).
MORE_MODELS = [
    "inception_v3", "alexnet", "efficientnet_v2_s", "swin_v2_t",
    "regnet_x_400mf", "deeplabv3_mobilenet_v3_large",
    "lraspp_mobilenet_v3_large", "r3d_18", "ssdlite320_mobilenet_v3_large",
]
OTHER_MODELS = ["transformer_encoder", "gpt2_small"]
ALL_MODELS = IMAGE_MODELS + OTHER_MODELS + MORE_MODELS


def randomize_norms(model, gen):
    import torch
    for m in model.modules():
        if isinstance(m, (torch.nn.BatchNorm2d, torch.nn.BatchNorm1d)):
            with torch.no_grad():
                m.running_mean.copy_(
                    torch.randn(m.num_features, generator=gen) * 0.1)
                m.running_var.copy_(
                    torch.rand(m.num_features, generator=gen) + 0.5)
                if m.weight is not None:
                    m.weight.copy_(torch.rand(m.num_features, generator=gen)
                                   + 0.5)
                    m.bias.copy_(torch.randn(m.num_features, generator=gen)
                                 * 0.1)
        if isinstance(m, torch.nn.LayerNorm) and m.weight is not None:
            with torch.no_grad():
                m.weight.copy_(torch.rand(m.normalized_shape, generator=gen)
                               + 0.5)
                if m.bias is not None:
                    m.bias.copy_(torch.randn(m.normalized_shape,
                                             generator=gen) * 0.1)


def gpt2_class():
    import torch

    class Block(torch.nn.Module):
        """A GPT-2 decoder block as GPT-2's reference code writes it:
        pre-norm, fused qkv projection, causal mask by masked_fill, tanh
        GELU."""

        def __init__(self, d, heads):
            super().__init__()
            self.heads = heads
            self.ln1 = torch.nn.LayerNorm(d)
            self.qkv = torch.nn.Linear(d, 3 * d)
            self.proj = torch.nn.Linear(d, d)
            self.ln2 = torch.nn.LayerNorm(d)
            self.fc = torch.nn.Linear(d, 4 * d)
            self.out = torch.nn.Linear(4 * d, d)

        def forward(self, x):
            b, t, d = x.shape
            h = self.heads
            q, k, v = self.qkv(self.ln1(x)).split(d, dim=2)
            q = q.view(b, t, h, d // h).transpose(1, 2)
            k = k.view(b, t, h, d // h).transpose(1, 2)
            v = v.view(b, t, h, d // h).transpose(1, 2)
            att = (q @ k.transpose(-2, -1)) * (1.0 / (d // h) ** 0.5)
            mask = torch.tril(torch.ones(t, t, dtype=torch.bool,
                                         device=x.device))
            att = att.masked_fill(~mask, float("-inf")).softmax(dim=-1)
            y = (att @ v).transpose(1, 2).contiguous().view(b, t, d)
            x = x + self.proj(y)
            g = torch.nn.functional.gelu(self.fc(self.ln2(x)),
                                         approximate="tanh")
            return x + self.out(g)

    class GPT2(torch.nn.Module):
        def __init__(self, vocab=8192, ctx=256, d=256, heads=4, layers=4):
            super().__init__()
            self.wte = torch.nn.Embedding(vocab, d)
            self.wpe = torch.nn.Embedding(ctx, d)
            self.blocks = torch.nn.ModuleList(
                [Block(d, heads) for _ in range(layers)])
            self.ln_f = torch.nn.LayerNorm(d)
            self.head = torch.nn.Linear(d, vocab, bias=False)

        def forward(self, ids):
            t = ids.shape[1]
            pos = torch.arange(t, device=ids.device).unsqueeze(0)
            x = self.wte(ids) + self.wpe(pos)
            for blk in self.blocks:
                x = blk(x)
            return self.head(self.ln_f(x))

    return GPT2


def EncoderLayer(layer):
    """|layer| called with is_causal=False spelled out: called bare, torch
    2.15's tracer passes is_causal to scaled_dot_product_attention as a
    tensor and the export fails."""
    import torch

    class Wrap(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.layer = layer

        def forward(self, x):
            return self.layer(x, src_mask=None, is_causal=False)

    return Wrap()


def FirstOutput(net, key="out", image=False):
    """A segmentation model's output dict, or a detector's list of dicts,
    reduced to one tensor: |key| (of the first image)."""
    import torch

    class Wrap(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.net = net

        def forward(self, x):
            if image:
                return self.net([x])[0][key]
            return self.net(x)[key]

    return Wrap()


def build(name, batch):
    """(torch module, example input, dynamic-axes spec for the input)."""
    import torch
    import torchvision
    torch.manual_seed(15)
    gen = torch.Generator().manual_seed(15)
    if name == "transformer_encoder":
        net = EncoderLayer(torch.nn.TransformerEncoderLayer(
            d_model=256, nhead=4, dim_feedforward=1024, dropout=0.0,
            batch_first=True))
        x = torch.randn(batch, 128, 256)
        dims = {0: "batch"}
    elif name == "gpt2_small":
        net = gpt2_class()()
        x = torch.randint(0, 8192, (batch, 128), dtype=torch.int64)
        dims = {0: "batch"}
    elif name.startswith(("deeplabv3", "lraspp")):
        net = FirstOutput(getattr(torchvision.models.segmentation, name)(
            weights=None, weights_backbone=None))
        x = torch.randn(batch, 3, 224, 224)
        dims = {0: "batch"}
    elif name == "r3d_18":
        net = torchvision.models.video.r3d_18(weights=None)
        x = torch.randn(batch, 3, 8, 112, 112)
        dims = {0: "batch"}
    elif name.startswith("ssdlite"):
        # One image [3, H, W] in, the boxes of the first image out.
        net = FirstOutput(getattr(torchvision.models.detection, name)(
            weights=None, weights_backbone=None), "boxes", image=True)
        x = torch.rand(3, 320, 320)
        dims = {}
    else:
        kw = {"aux_logits": False, "init_weights": True} if (
            name == "inception_v3") else {}
        net = getattr(torchvision.models, name)(weights=None, **kw)
        size = 299 if name == "inception_v3" else 224
        x = torch.randn(batch, 3, size, size)
        dims = {0: "batch"}
    randomize_norms(net, gen)
    # Zero-initialized weights (vit_b_16's and swin_t's heads) would make
    # the output the bias alone; give them the scale of the others.
    with torch.no_grad():
        for p in net.parameters():
            if p.dim() >= 2 and not p.abs().max():
                p.normal_(0.0, 0.02, generator=gen)
    return net.eval(), x, dims


def export(name, path, args):
    import torch
    net, x, dims = build(name, args.batch)
    kwargs = dict(input_names=["input"], output_names=["output"],
                  opset_version=args.opset, do_constant_folding=True)
    if args.dynamic:
        kwargs["dynamic_axes"] = {"input": dims, "output": {0: "batch"}}
    # Not under no_grad: there nn.TransformerEncoderLayer takes its fused
    # fast path (aten::_transformer_encoder_layer_fwd), which has no ONNX
    # export.
    torch.onnx.export(net, (x,), path, dynamo=False, **kwargs)
    np.save(path + ".input.npy", x.numpy())


def med(ts):
    ts = sorted(ts)
    return statistics.median(ts), ts[0], ts[-1]


def time_fn(fn, runs, warm=2):
    for _ in range(warm):
        fn()
    ts = []
    for _ in range(runs):
        t0 = time.perf_counter()
        fn()
        ts.append((time.perf_counter() - t0) * 1e3)
    return med(ts)


def one(name, args):
    """The child: runs the stages for |name|, prints a JSON row last."""
    row = {"model": name}
    path = os.path.join(args.out, name + args.suffix + ".onnx")

    def emit():
        print("ROW " + json.dumps(row))
        sys.stdout.flush()

    sys.path.append(os.path.join(ROOT, "python"))
    import onnxruntime as ort
    import tensorjit as tj
    x = np.load(path + ".input.npy")
    so = ort.SessionOptions()
    so.intra_op_num_threads = args.threads
    so.inter_op_num_threads = 1
    sess = ort.InferenceSession(path, so, providers=["CPUExecutionProvider"])
    want = sess.run(None, {"input": x})
    row["ort_ms"] = time_fn(lambda: sess.run(None, {"input": x}), args.runs)
    row["stage"] = "import"
    emit()
    t0 = time.perf_counter()
    graph = tj.onnx.load(path)
    row["import_s"] = time.perf_counter() - t0
    row["stage"] = "compile"
    emit()
    t0 = time.perf_counter()
    exe = tj.compile(graph, "x86", num_threads=args.threads, cache_dir="")
    row["compile_s"] = time.perf_counter() - t0
    row["breaks"] = exe.stats.num_graph_breaks
    row["kernels"] = exe.stats.num_kernels
    row["stage"] = "run"
    emit()
    got = exe.run([x])
    err = 0.0
    for g, w in zip(got, want):
        g = np.asarray(g)
        if g.shape != w.shape:
            raise RuntimeError("output shape %s, onnxruntime's %s" % (
                g.shape, w.shape))
        scale = float(np.abs(w).max()) or 1.0
        e = float(np.abs(g.astype(np.float64) - w).max()) / scale
        err = max(err, e if np.isfinite(e) else float("inf"))
    row["err"] = err
    row["stage"] = "time"
    emit()
    row["ours_ms"] = time_fn(lambda: exe.run([x]), args.runs)
    row["stage"] = "done"
    emit()


def fmt_ms(m):
    return "%.1f (%.1f..%.1f)" % tuple(m) if m else "-"


def parent(args):
    import onnxruntime as ort
    import torch
    print("# torch %s, onnxruntime %s, opset %d, batch %d%s, threads %d, "
          "runs %d" % (torch.__version__, ort.__version__, args.opset,
                       args.batch, " (symbolic)" if args.dynamic else "",
                       args.threads, args.runs))
    os.makedirs(args.out, exist_ok=True)
    print("| model | imported | compiled | breaks | max err | ours ms | "
          "ORT ms | ratio |")
    print("| --- | --- | --- | --- | --- | --- | --- | --- |")
    sys.stdout.flush()
    for name in args.models.split(","):
        path = os.path.join(args.out, name + args.suffix + ".onnx")
        if args.reexport or not os.path.exists(path + ".input.npy"):
            try:
                export(name, path, args)
            except Exception as e:  # the exporter's failure is a row
                msg = str(e).strip().splitlines()
                print("| %s | export failed: %s | | | | | | |" % (
                    name, (msg[0] if msg else type(e).__name__)[:160]))
                sys.stdout.flush()
                continue
        cmd = [sys.executable, os.path.abspath(__file__), "--child", name,
               "--threads", str(args.threads), "--runs", str(args.runs),
               "--out", args.out, "--suffix", args.suffix]
        try:
            p = subprocess.run(cmd, capture_output=True, text=True,
                               timeout=args.timeout)
            out, rc, errtext = p.stdout, p.returncode, p.stderr
        except subprocess.TimeoutExpired as e:
            out = e.stdout.decode() if isinstance(e.stdout, bytes) else (
                e.stdout or "")
            rc, errtext = None, "timed out after %d s" % args.timeout
        rows = [json.loads(ln[4:]) for ln in out.splitlines()
                if ln.startswith("ROW ")]
        row = rows[-1] if rows else {"stage": "start"}
        if row.get("stage") != "done":
            lines = [ln for ln in errtext.strip().splitlines() if ln.strip()]
            why = lines[-1] if lines else "exit status %s" % rc
            if rc is not None and rc < 0:
                why = "crashed (signal %d)" % -rc
            row["why"] = "%s failed: %s" % (row.get("stage"), why[:300])
        st = row.get("stage")
        imported = "yes" if st not in ("start", "import") else "no"
        compiled = "yes" if st in ("run", "time", "done") else (
            "no" if imported == "yes" else "")
        err = "%.2g" % row["err"] if "err" in row else ""
        ratio = ""
        if "ours_ms" in row:
            ratio = "%.2f" % (row["ours_ms"][0] / row["ort_ms"][0])
        cells = [name, imported, compiled, str(row.get("breaks", "")), err,
                 fmt_ms(row.get("ours_ms")), fmt_ms(row.get("ort_ms")), ratio]
        print("| " + " | ".join(cells) + " |" + (
            "\n|  | " + row["why"].replace("|", "/") + " | | | | | | |"
            if "why" in row else ""))
        sys.stdout.flush()


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--models", default=",".join(ALL_MODELS))
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--runs", type=int, default=5)
    ap.add_argument("--batch", type=int, default=1)
    ap.add_argument("--dynamic", action="store_true",
                    help="export with a symbolic batch axis")
    ap.add_argument("--opset", type=int, default=17)
    ap.add_argument("--out", default="/tmp/onnx_zoo")
    ap.add_argument("--reexport", action="store_true")
    ap.add_argument("--timeout", type=int, default=900,
                    help="seconds a model's stages may take")
    ap.add_argument("--child", help=argparse.SUPPRESS)
    ap.add_argument("--suffix", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.suffix is None:
        args.suffix = "_o%d_b%d%s" % (args.opset, args.batch,
                                      "_dyn" if args.dynamic else "")
    if args.child:
        one(args.child, args)
        return 0
    parent(args)
    return 0


if __name__ == "__main__":
    sys.exit(main())
