#!/usr/bin/env python3
"""Models exported with dynamic axes, through tensorjit.onnx.load, against
onnxruntime (issue 15): torch's TorchScript exporter writes their lengths
as arithmetic on Shape's output (Range(past, past + T) for positions, a
causal mask sliced by the KV length, expand(B, -1, T) as Where(Equal(shape,
-1), ones, shape), triu(P + 1)), which the importer folds over symbolic
dims (onnx/onnx_dims.c). Each model is exported once (small random
weights), imported and compiled once for x86, then run at several (B, T,
P) from that one executable beside onnxruntime; prints the largest
absolute difference per output, the kernels and graph breaks, and the
recompiles (0: one executable for every shape).

    TJ_LIBRARY=build/libtensorjit.so PYTHONPATH=python \\
        python3 bench/onnx_dynamic_axes.py [--dir DIR]

Needs torch, onnx and onnxruntime."""

import argparse
import math
import os
import sys
import tempfile

import numpy as np
import onnxruntime as ort
import torch
import torch.nn as nn

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "python"))
import tensorjit as tj  # noqa: E402


class Gpt2Block(nn.Module):
    """GPT-2's block as HF writes it: positions Range(P, P + T), a causal
    buffer sliced by the KV length, a KV cache concatenated."""

    def __init__(self, d=32, h=4, vocab=50, maxpos=64):
        super().__init__()
        self.h, self.d = h, d
        self.register_buffer("bias", torch.tril(torch.ones(
            maxpos, maxpos, dtype=torch.bool)).view(1, 1, maxpos, maxpos))
        self.wte, self.wpe = nn.Embedding(vocab, d), nn.Embedding(maxpos, d)
        self.ln1, self.ln2 = nn.LayerNorm(d), nn.LayerNorm(d)
        self.c_attn, self.c_proj = nn.Linear(d, 3 * d), nn.Linear(d, d)
        self.fc, self.proj = nn.Linear(d, 4 * d), nn.Linear(4 * d, d)

    def forward(self, ids, past_k, past_v):
        B, T = ids.shape
        P = past_k.shape[2]
        pos = torch.arange(P, P + T, dtype=torch.long, device=ids.device)
        x = self.wte(ids) + self.wpe(pos)[None]
        q, k, v = self.c_attn(self.ln1(x)).split(self.d, dim=2)
        hd = self.d // self.h
        sp = lambda t: t.view(B, T, self.h, hd).transpose(1, 2)  # noqa: E731
        q, k, v = sp(q), sp(k), sp(v)
        k, v = torch.cat([past_k, k], -2), torch.cat([past_v, v], -2)
        w = q @ k.transpose(-1, -2) / math.sqrt(hd)
        ql, kl = q.size(-2), k.size(-2)
        mask = self.bias[:, :, kl - ql:kl, :kl]
        w = torch.where(mask, w, torch.tensor(torch.finfo(w.dtype).min))
        a = (torch.softmax(w, -1) @ v).transpose(1, 2).reshape(B, T, self.d)
        x = x + self.c_proj(a)
        y = self.proj(nn.functional.gelu(self.fc(self.ln2(x)),
                                          approximate="tanh"))
        return x + y, k, v


class LlamaBlock(nn.Module):
    """RMSNorm, rotary tables sliced [P : P + T], a KV cache, a causal mask
    triu(P + 1) over [T, P + T], SwiGLU."""

    def __init__(self, d=32, h=4, maxpos=64):
        super().__init__()
        self.h, self.d = h, d
        hd = d // h
        inv = 1.0 / (10000 ** (torch.arange(0, hd, 2).float() / hd))
        f = torch.outer(torch.arange(maxpos).float(), inv)
        emb = torch.cat([f, f], -1)
        self.register_buffer("cos", emb.cos())
        self.register_buffer("sin", emb.sin())
        self.q, self.k, self.v, self.o = (nn.Linear(d, d, bias=False)
                                          for _ in range(4))
        self.g, self.u = nn.Linear(d, 3 * d, bias=False), nn.Linear(
            d, 3 * d, bias=False)
        self.dn = nn.Linear(3 * d, d, bias=False)

    @staticmethod
    def rms(x):
        return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + 1e-6)

    @staticmethod
    def rot(x):
        n = x.shape[-1] // 2
        return torch.cat((-x[..., n:], x[..., :n]), dim=-1)

    def forward(self, x, past_k, past_v):
        B, T, _ = x.shape
        P, hd = past_k.shape[2], self.d // self.h
        y = self.rms(x)
        sp = lambda t: t.view(B, T, self.h, hd).transpose(1, 2)  # noqa: E731
        q, k, v = sp(self.q(y)), sp(self.k(y)), sp(self.v(y))
        cos, sin = self.cos[P:P + T], self.sin[P:P + T]
        q, k = q * cos + self.rot(q) * sin, k * cos + self.rot(k) * sin
        k, v = torch.cat([past_k, k], 2), torch.cat([past_v, v], 2)
        mask = torch.full((T, P + T), float("-inf")).triu(P + 1)
        w = q @ k.transpose(-1, -2) / math.sqrt(hd) + mask
        a = (torch.softmax(w, -1) @ v).transpose(1, 2).reshape(B, T, self.d)
        x = x + self.o(a)
        y = self.rms(x)
        return x + self.dn(nn.functional.silu(self.g(y)) * self.u(y)), k, v


class BertMask(nn.Module):
    """BERT's extended attention mask: expand(B, 1, T, T) of a [B, T] mask."""

    def forward(self, x, mask):
        B, T, D = x.shape
        m = mask[:, None, None, :].expand(B, 1, T, T).to(x.dtype)
        h = x.view(B, T, 2, D // 2).transpose(1, 2)
        w = h @ h.transpose(-1, -2) + (1.0 - m) * -10000.0
        y = (torch.softmax(w, -1) @ h).transpose(1, 2).reshape(B, T, D)
        return y


def cases():
    rng = np.random.default_rng(0)
    kv = {"past_k": {0: "B", 2: "P"}, "past_v": {0: "B", 2: "P"}}
    shapes = ((2, 5, 3), (1, 7, 0), (3, 1, 20), (1, 1, 63))

    def gpt2(B, T, P):
        return {"ids": rng.integers(0, 50, (B, T)).astype(np.int64),
                "past_k": rng.standard_normal((B, 4, P, 8), np.float32),
                "past_v": rng.standard_normal((B, 4, P, 8), np.float32)}

    def llama(B, T, P):
        return {"x": rng.standard_normal((B, T, 32), np.float32),
                "past_k": rng.standard_normal((B, 4, P, 8), np.float32),
                "past_v": rng.standard_normal((B, 4, P, 8), np.float32)}

    def bert(B, T, P):
        return {"x": rng.standard_normal((B, T, 8), np.float32),
                "mask": (rng.random((B, T)) > 0.3).astype(np.int64)}

    yield ("gpt2_block", Gpt2Block(), gpt2, ["ids", "past_k", "past_v"],
           dict(kv, ids={0: "B", 1: "T"}), shapes)
    yield ("llama_block", LlamaBlock(), llama, ["x", "past_k", "past_v"],
           dict(kv, x={0: "B", 1: "T"}), shapes)
    yield ("bert_mask", BertMask(), bert, ["x", "mask"],
           {"x": {0: "B", 1: "T"}, "mask": {0: "B", 1: "T"}}, shapes[:3])


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--dir", default=None, help="where to write the exports")
    args = ap.parse_args()
    out_dir = args.dir or tempfile.mkdtemp(prefix="tj_dynamic_")
    torch.manual_seed(0)
    print(f"# torch {torch.__version__}, onnxruntime {ort.__version__}")
    print("model        B  T  P  max |ours - onnxruntime| per output")
    for name, model, make, names, axes, shapes in cases():
        path = os.path.join(out_dir, name + ".onnx")
        example = make(*shapes[0])
        torch.onnx.export(model.eval(), tuple(torch.from_numpy(example[n])
                                              for n in names), path,
                          dynamo=False, input_names=names,
                          dynamic_axes=axes, opset_version=17)
        exe = tj.compile(tj.onnx.load(path))
        sess = ort.InferenceSession(path)
        for B, T, P in shapes:
            feed = make(B, T, P)
            want = sess.run(None, feed)
            got = exe(*[feed[n] for n in names])
            got = got if isinstance(got, tuple) else (got,)
            errs = ", ".join(f"{float(np.abs(np.asarray(g) - w).max()):.2g}"
                             for g, w in zip(got, want))
            print(f"{name:12s} {B:2d} {T:2d} {P:2d}  {errs}")
        st = exe.stats
        print(f"{name:12s} {st.num_kernels} kernels, {st.num_graph_breaks} "
              f"graph breaks, {st.recompiles} recompiles")


if __name__ == "__main__":
    main()
