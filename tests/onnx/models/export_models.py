#!/usr/bin/env python3
"""Exports the real models of issue 15 (goal 4) to ONNX graph skeletons.

torchvision's resnet18 and mobilenet_v3_small (weights=None), a BERT-style
encoder layer (BERT-base's sizes: 768 wide, 12 heads, 3072 FFN, post-norm,
GELU) and torch.nn.TransformerEncoderLayer (encoder_layer) are exported with torch's TorchScript exporter (opset 17, eval mode,
constant folding on, so BatchNorm folds into the convolutions) with a
symbolic batch dim ("batch"; bert_layer's sequence length "seq" too).
BatchNorm's statistics and affine parameters are randomized before export,
so that the folded convolution biases are not all zero.

Then every float initializer of more than 8 elements loses its data: its
dims and dtype stay, and its doc_string says how to fill it again,
"tj-fill mean std min max" (the statistics of the values torch exported).
tests/onnx/onnx_models_test.c refills each with seeded normal values of
that mean and std, clamped to [min, max], so the checked-in files are
graph skeletons of a few tens of KB: the graphs exactly as torch writes
them, without their megabytes of weights. Integer initializers (shapes,
axes) and small float constants are kept as exported.

Run where torch and torchvision are installed:
  python3 tests/onnx/models/export_models.py tests/onnx/models
It writes resnet18.onnx, mobilenet_v3_small.onnx, bert_layer.onnx and
encoder_layer.onnx there (--models NAME,...: only those)
and, with --full, the models with their weights too (NAME.full.onnx, for
bench/onnx_models.py's use; not checked in).
"""

import argparse
import math
import os
import sys

import numpy as np
import onnx
import torch
from onnx import numpy_helper


class BertLayer(torch.nn.Module):
    """One post-norm BERT encoder layer, written as BERT's reference code."""

    def __init__(self, hidden=768, heads=12, ffn=3072, eps=1e-12):
        super().__init__()
        self.heads = heads
        self.head_dim = hidden // heads
        self.query = torch.nn.Linear(hidden, hidden)
        self.key = torch.nn.Linear(hidden, hidden)
        self.value = torch.nn.Linear(hidden, hidden)
        self.attn_out = torch.nn.Linear(hidden, hidden)
        self.ln1 = torch.nn.LayerNorm(hidden, eps=eps)
        self.inter = torch.nn.Linear(hidden, ffn)
        self.out = torch.nn.Linear(ffn, hidden)
        self.ln2 = torch.nn.LayerNorm(hidden, eps=eps)

    def split(self, x):
        b, t, _ = x.shape
        return x.view(b, t, self.heads, self.head_dim).transpose(1, 2)

    def forward(self, x):
        b, t, h = x.shape
        q = self.split(self.query(x))
        k = self.split(self.key(x))
        v = self.split(self.value(x))
        scores = torch.matmul(q, k.transpose(-1, -2)) / math.sqrt(self.head_dim)
        probs = torch.softmax(scores, dim=-1)
        ctx = torch.matmul(probs, v).transpose(1, 2).reshape(b, t, h)
        x = self.ln1(x + self.attn_out(ctx))
        y = self.out(torch.nn.functional.gelu(self.inter(x)))
        return self.ln2(x + y)


class EncoderLayer(torch.nn.Module):
    """torch.nn.TransformerEncoderLayer (256 wide, 4 heads, 1024 FFN,
    post-norm, ReLU), called with is_causal=False spelled out: called bare,
    torch 2.15's tracer passes is_causal to scaled_dot_product_attention as
    a tensor and the export fails. Exported outside no_grad, where the
    layer's fused fast path (no ONNX export) is off. Its attention is
    nn.MultiheadAttention's as torch writes it: the scale computed from
    q's shape, which holds the symbolic batch."""

    def __init__(self):
        super().__init__()
        self.layer = torch.nn.TransformerEncoderLayer(
            d_model=256, nhead=4, dim_feedforward=1024, dropout=0.0,
            batch_first=True)

    def forward(self, x):
        return self.layer(x, src_mask=None, is_causal=False)


def randomize_norms(model, gen):
    for m in model.modules():
        if isinstance(m, torch.nn.BatchNorm2d):
            with torch.no_grad():
                m.running_mean.copy_(torch.randn(m.num_features, generator=gen) * 0.1)
                m.running_var.copy_(torch.rand(m.num_features, generator=gen) + 0.5)
                m.weight.copy_(torch.rand(m.num_features, generator=gen) + 0.5)
                m.bias.copy_(torch.randn(m.num_features, generator=gen) * 0.1)
        if isinstance(m, torch.nn.LayerNorm):
            with torch.no_grad():
                m.weight.copy_(torch.rand(m.normalized_shape, generator=gen) + 0.5)
                m.bias.copy_(torch.randn(m.normalized_shape, generator=gen) * 0.1)


def models():
    import torchvision

    gen = torch.Generator().manual_seed(15)
    torch.manual_seed(15)
    r = torchvision.models.resnet18(weights=None)
    m = torchvision.models.mobilenet_v3_small(weights=None)
    b = BertLayer()
    e = EncoderLayer()
    for net in (r, m, b, e):
        randomize_norms(net, gen)
        net.eval()
    image = {0: "batch"}
    return [
        ("resnet18", r, torch.randn(1, 3, 224, 224), image),
        ("mobilenet_v3_small", m, torch.randn(1, 3, 224, 224), image),
        ("bert_layer", b, torch.randn(2, 128, 768), {0: "batch", 1: "seq"}),
        ("encoder_layer", e, torch.randn(2, 64, 256), {0: "batch"}),
    ]


def export(name, net, example, dims, path):
    kwargs = dict(
        input_names=["input"],
        output_names=["output"],
        dynamic_axes={"input": dims, "output": {0: dims[0]}},
        opset_version=17,
        do_constant_folding=True,
    )
    try:
        torch.onnx.export(net, (example,), path, dynamo=False, **kwargs)
    except TypeError:  # a torch without the dynamo argument
        torch.onnx.export(net, (example,), path, **kwargs)


def skeleton(model):
    for init in model.graph.initializer:
        a = numpy_helper.to_array(init)
        if a.dtype.kind != "f" or a.size <= 8:
            continue
        a = a.astype(np.float64)
        init.doc_string = "tj-fill %.9g %.9g %.9g %.9g" % (
            a.mean(), a.std(), a.min(), a.max())
        dims = list(init.dims)
        dtype = init.data_type
        init.ClearField("raw_data")
        init.ClearField("float_data")
        init.ClearField("double_data")
        del init.dims[:]
        init.dims.extend(dims)
        init.data_type = dtype
    model.producer_name = "tests/onnx/models/export_models.py"
    return model


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("out_dir")
    ap.add_argument("--full", action="store_true",
                    help="also write NAME.full.onnx with the weights")
    ap.add_argument("--models", default="",
                    help="comma-separated names to write (default: all)")
    args = ap.parse_args()
    os.makedirs(args.out_dir, exist_ok=True)
    only = [m for m in args.models.split(",") if m]
    for name, net, example, dims in models():
        if only and name not in only:
            continue
        full = os.path.join(args.out_dir, name + ".full.onnx")
        export(name, net, example, dims, full)
        model = onnx.load(full)
        onnx.checker.check_model(model)
        if not args.full:
            os.remove(full)
        path = os.path.join(args.out_dir, name + ".onnx")
        onnx.save(skeleton(model), path)
        ops = sorted({n.op_type for n in model.graph.node})
        print("%s: %d nodes, %d bytes; ops %s" % (
            path, len(model.graph.node), os.path.getsize(path), " ".join(ops)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
