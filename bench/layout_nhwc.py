#!/usr/bin/env python3
"""Channels-last blocks on x86 (issue 15's layout pass), the convs built
with the builder's channels_last (each a transpose -> conv -> transpose),
constant weights; ours beside torch (conv2d on channels_last tensors:
oneDNN) in the same run, at one thread. --block picks:
  resnet  x [N, H, W, C] through two ResNet basic blocks: conv3x3+bias,
          relu, conv3x3+bias, the residual add and relu;
  se      two squeeze-excite residual blocks written in NHWC (as a Keras
          model is): conv3x3+bias, relu, the global pool over H and W, two
          dense layers (C -> C/4 -> C, relu, sigmoid) scaling the channels,
          conv3x3+bias, the residual add and relu; then a classifier head:
          the global pool, a dense layer to 10 and a softmax;
  se_onnx one such squeeze-excite and head as an ONNX file exported from
          an NHWC framework has them, with no convs (memory-bound): x to
          NCHW by a transpose, the pool over axes 2 and 3, the dense
          layers, the scale, back to NHWC (an output), and the head's pool
          and softmax of the scaled NCHW value;
  softmax relu and a softmax over the channels of x read as NCHW (a
          transpose each way), no convs;
  heads   a transformer's head split as HWxC's [N, T, H * D] (HW tokens,
          C / 64 heads of 64) to [N, H, T, D], a layer norm over D and a
          rotate-half (slices, concat) times 0.5 added, heads merged back.

The layout pass (lib/passes/layout.c) sinks the transposes through the
ops between them (bias, relu, residual adds, global pools and scales,
softmax, layer norm, slices, concat) to their inverses; to compare with
it off, run twice, alternating:

    TJ_LIBRARY=build-dev/libtensorjit.so python3 bench/layout_nhwc.py
    TJ_LAYOUT=off TJ_LIBRARY=build-dev/libtensorjit.so python3 bench/layout_nhwc.py

Times are process CPU time per call (time.process_time), the median of
--reps blocks of --calls calls after a warm-up, with the blocks' spread.
HWxC is [N, HW, HW, C] (heads: [N, HW, C]). Checks ours against torch
(1e-3) before timing. Prints a table; never a
pass/fail.
"""

import argparse
import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)),
                                "..", "python"))

import numpy as np  # noqa: E402

import tensorjit as tj  # noqa: E402
from x86_rows import cpu_ms  # noqa: E402  (bench/ is the script's folder)

try:
    import torch  # noqa: E402
    torch.set_num_threads(1)
except ImportError:
    torch = None


def weights(rng, c, blocks):
    return [(rng.standard_normal((c, c, 3, 3), dtype=np.float32) * 0.05,
             rng.standard_normal(c, dtype=np.float32) * 0.1)
            for _ in range(2 * blocks)]


def se_weights(rng, c, blocks):
    ws = weights(rng, c, blocks)
    fcs = [(rng.standard_normal((c, c // 4), dtype=np.float32) * 0.2,
            rng.standard_normal((c // 4, c), dtype=np.float32) * 0.2)
           for _ in range(blocks)]
    head = rng.standard_normal((c, 10), dtype=np.float32) * 0.2
    return ws, fcs, head


def se_graph(n, hw, c, sw):
    ws, fcs, head = sw
    g = tj.Graph("layout_nhwc_se")
    x = g.input("x", "f32", [n, hw, hw, c])
    h = x
    for b in range(len(ws) // 2):
        skip = h
        w, bias = ws[2 * b]
        h = g.relu(g.conv(h, g.constant(w), g.constant(bias),
                          pads=[1, 1, 1, 1], channels_last=True))
        f1, f2 = fcs[b]
        s = g.reshape(g.mean(h, [1, 2]), [n, c])
        s = g.relu(g.matmul(s, g.constant(f1)))
        s = g.sigmoid(g.matmul(s, g.constant(f2)))
        h = g.mul(h, g.reshape(s, [n, 1, 1, c]))
        w, bias = ws[2 * b + 1]
        h = g.conv(h, g.constant(w), g.constant(bias), pads=[1, 1, 1, 1],
                   channels_last=True)
        h = g.relu(g.add(h, skip))
    logits = g.matmul(g.mean(h, [1, 2]), g.constant(head))
    g.output(g.softmax(logits, 1), "y")
    return g


def se_torch_fn(sw):
    ws, fcs, head = sw
    tw = [(torch.from_numpy(w).contiguous(memory_format=torch.channels_last),
           torch.from_numpy(b)) for w, b in ws]
    tf = [(torch.from_numpy(a), torch.from_numpy(b)) for a, b in fcs]
    th = torch.from_numpy(head)

    def run(x):
        h = x
        for b in range(len(tw) // 2):
            skip = h
            w, bias = tw[2 * b]
            h = torch.relu(torch.nn.functional.conv2d(h, w, bias, padding=1))
            f1, f2 = tf[b]
            s = torch.sigmoid(torch.relu(h.mean((2, 3)) @ f1) @ f2)
            h = h * s[:, :, None, None]
            w, bias = tw[2 * b + 1]
            h = torch.nn.functional.conv2d(h, w, bias, padding=1)
            h = torch.relu(h + skip)
        return torch.softmax(h.mean((2, 3)) @ th, 1)
    return run


def se_onnx_graph(n, hw, c, sw):
    _, fcs, head = sw
    g = tj.Graph("layout_nhwc_se_onnx")
    x = g.input("x", "f32", [n, hw, hw, c])
    t = g.transpose(x, [0, 3, 1, 2])
    f1, f2 = fcs[0]
    s = g.reshape(g.mean(t, [2, 3], keepdims=True), [n, c])
    s = g.relu(g.matmul(s, g.constant(f1)))
    s = g.sigmoid(g.matmul(s, g.constant(f2)))
    y = g.mul(t, g.reshape(s, [n, c, 1, 1]))
    g.output(g.transpose(y, [0, 2, 3, 1]), "y")
    logits = g.matmul(g.mean(y, [2, 3]), g.constant(head))
    g.output(g.softmax(logits, 1), "p")
    return g


def se_onnx_torch_fn(sw):
    _, fcs, head = sw
    f1, f2 = (torch.from_numpy(a) for a in fcs[0])
    th = torch.from_numpy(head)

    def run(x):
        s = torch.sigmoid(torch.relu(x.mean((2, 3)) @ f1) @ f2)
        y = x * s[:, :, None, None]
        return y, torch.softmax(y.mean((2, 3)) @ th, 1)
    return run


def softmax_graph(n, hw, c, _):
    g = tj.Graph("layout_nhwc_softmax")
    x = g.input("x", "f32", [n, hw, hw, c])
    t = g.transpose(x, [0, 3, 1, 2])
    g.output(g.transpose(g.softmax(g.relu(t), 1), [0, 2, 3, 1]), "y")
    return g


def softmax_torch_fn(_):
    return lambda x: torch.softmax(torch.relu(x), 1)


def heads_graph(n, hw, c, _):
    t_, h, d = hw, c // 64, 64
    g = tj.Graph("layout_nhwc_heads")
    x = g.input("x", "f32", [n, t_, c])
    t = g.transpose(g.reshape(x, [n, t_, h, d]), [0, 2, 1, 3])
    nrm = g.layer_norm(t, g.constant(np.ones(d, np.float32)),
                       g.constant(np.zeros(d, np.float32)), 1e-5)
    lo = g.slice(nrm, [0, 0, 0, 0], [n, h, t_, d // 2])
    hi = g.slice(nrm, [0, 0, 0, d // 2], [n, h, t_, d])
    rot = g.concat([g.neg(hi), lo], 3)
    y = g.add(nrm, g.mul(rot, g.constant(np.full(d, 0.5, np.float32))))
    g.output(g.reshape(g.transpose(y, [0, 2, 1, 3]), [n, t_, c]), "y")
    return g


def heads_torch_fn(_):
    def run(x):
        n, t_, c = x.shape
        t = x.reshape(n, t_, c // 64, 64).transpose(1, 2)
        nrm = torch.nn.functional.layer_norm(t, (64,), eps=1e-5)
        rot = torch.cat([-nrm[..., 32:], nrm[..., :32]], -1)
        return (nrm + rot * 0.5).transpose(1, 2).reshape(n, t_, c)
    return run


def graph(n, hw, c, ws):
    g = tj.Graph("layout_nhwc")
    x = g.input("x", "f32", [n, hw, hw, c])
    h = x
    for b in range(len(ws) // 2):
        skip = h
        for k in range(2):
            w, bias = ws[2 * b + k]
            h = g.conv(h, g.constant(w), g.constant(bias), pads=[1, 1, 1, 1],
                       channels_last=True)
            if k == 0:
                h = g.relu(h)
        h = g.relu(g.add(h, skip))
    g.output(h, "y")
    return g


def torch_fn(ws):
    tw = [(torch.from_numpy(w).contiguous(memory_format=torch.channels_last),
           torch.from_numpy(b)) for w, b in ws]

    def run(x):
        h = x
        for b in range(len(tw) // 2):
            skip = h
            for k in range(2):
                w, bias = tw[2 * b + k]
                h = torch.nn.functional.conv2d(h, w, bias, padding=1)
                if k == 0:
                    h = torch.relu(h)
            h = torch.relu(h + skip)
        return h
    return run


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--batch", type=int, nargs="*", default=[1, 8])
    ap.add_argument("--shapes", nargs="*", default=["56x64", "14x256"],
                    help="HWxC of the blocks (resnet's layer1 and layer3)")
    ap.add_argument("--block", default="resnet",
                    choices=["resnet", "se", "se_onnx", "softmax", "heads"])
    ap.add_argument("--calls", type=int, default=5)
    ap.add_argument("--reps", type=int, default=5)
    args = ap.parse_args()
    layout = "off" if os.environ.get("TJ_LAYOUT") == "off" else "on"
    print(f"# layout_nhwc --block {args.block}: tensorjit {tj.version()} "
          f"({os.environ.get('TJ_LIBRARY', 'default library')}, layout pass "
          f"{layout}), torch {torch.__version__ if torch else 'absent'}; 1 "
          f"thread, CPU ms a call, median of {args.reps} blocks of "
          f"{args.calls} calls (spread)")
    print(f"{'N,HW,C':>12s} {'kernels':>7s} {'ours':>16s} {'torch':>16s} "
          f"{'ours/torch':>10s}")
    rng = np.random.default_rng(0)
    for shape in args.shapes:
        hw, c = (int(v) for v in shape.split("x"))
        se = args.block in ("se", "se_onnx")
        ws = se_weights(rng, c, 2) if se else weights(rng, c, 2)
        build = {"resnet": graph, "se": se_graph, "se_onnx": se_onnx_graph,
                 "softmax": softmax_graph, "heads": heads_graph}[args.block]
        for n in args.batch:
            x = rng.standard_normal(
                (n, hw, c) if args.block == "heads" else (n, hw, hw, c),
                dtype=np.float32)
            exe = tj.compile(build(n, hw, c, ws), num_threads=1)
            outs = [np.empty(x.shape, np.float32)] * (args.block != "se") + \
                [np.empty((n, 10), np.float32)] * se
            exe.run([x], out=outs)
            kernels = exe.stats.num_kernels
            tor = (float("nan"), 0.0)
            if torch is not None:
                tx = torch.from_numpy(x) if x.ndim == 3 else \
                    torch.from_numpy(x.transpose(0, 3, 1, 2)).contiguous(
                        memory_format=torch.channels_last)
                tf = {"resnet": torch_fn, "se": se_torch_fn,
                      "se_onnx": se_onnx_torch_fn, "softmax": softmax_torch_fn,
                      "heads": heads_torch_fn}[args.block](ws)
                with torch.no_grad():
                    want = tf(tx)
                    want = want if isinstance(want, tuple) else (want,)
                    want = [w.permute(0, 2, 3, 1) if w.dim() == 4 else w
                            for w in want]
                    for o, w in zip(outs, want):
                        np.testing.assert_allclose(o, w.numpy(), rtol=1e-3,
                                                   atol=1e-3)
                    tor = cpu_ms(lambda: tf(tx), args.calls, args.reps)
            # The call form (exe.run's list form costs ~0.3 ms more a call,
            # bench/RESULTS.md lastbreak).
            o = outs[0] if len(outs) == 1 else outs
            ours = cpu_ms(lambda: exe(x, out=o), args.calls, args.reps)
            print(f"{f'{n},{hw},{c}':>12s} {kernels:7d} "
                  f"{ours[0]:8.3f} ({ours[1]:5.3f}) "
                  f"{tor[0]:8.3f} ({tor[1]:5.3f}) {ours[0] / tor[0]:10.2f}")
            exe.close()


if __name__ == "__main__":
    main()
