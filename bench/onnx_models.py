#!/usr/bin/env python3
"""End to end: the real models of issue 15 (goal 4) through the ONNX
importer, against onnxruntime (CPU) and, with --cuda, torch eager and
torch.compile of the same torch model.

Models: resnet18 and mobilenet_v3_small at batch 1 and 32 (224x224), and a
BERT-base encoder layer at B=8, T=128; the graph skeletons of
tests/onnx/models refilled with seeded weights (skeleton.py). Each figure
is the median of --runs timed runs (after warm-up) with the spread
(min..max); onnxruntime and our x86 run use the same thread count in the
same process. With --cuda our CUDA executable is timed with CUDA events
around each call on torch CUDA tensors, torch eager and torch.compile
likewise, and our output is checked against onnxruntime's.

torch runs its convs through cuDNN in TF32 by default
(torch.backends.cudnn.allow_tf32, printed); --tf32 compiles ours with
allow_tf32 too, so that the two are compared on equal terms, and
--conv-kernels mma,wgmma times ours once per TF32 conv kernel
(TJ_NVPTX_CONV, each in its own context) in the same run.

  python3 bench/onnx_models.py [--threads N] [--runs N] [--cuda] [--tf32]
      [--conv-kernels K1,K2] [--no-x86] [--no-torch] [--batches 1,32]
      [--models resnet18,mobilenet_v3_small,bert_layer] [--skeletons DIR]

--no-torch leaves torch eager and torch.compile out (a short GPU call);
--batches keeps only the batches named (resnet18 and mobilenet_v3_small).
"""

import argparse
import os
import statistics
import sys
import time

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))


def med(ts):
    ts = sorted(ts)
    return statistics.median(ts), ts[0], ts[-1]


def fmt(name, ts):
    m, lo, hi = med(ts)
    return "%-22s %9.3f ms  (%.3f..%.3f)" % (name, m, lo, hi)


def time_cpu(fn, runs, warm=3):
    for _ in range(warm):
        fn()
    ts = []
    for _ in range(runs):
        t0 = time.perf_counter()
        fn()
        ts.append((time.perf_counter() - t0) * 1e3)
    return ts


def time_cuda(torch, fn, runs, warm=5):
    for _ in range(warm):
        fn()
    torch.cuda.synchronize()
    ts = []
    for _ in range(runs):
        a = torch.cuda.Event(enable_timing=True)
        b = torch.cuda.Event(enable_timing=True)
        a.record()
        fn()
        b.record()
        b.synchronize()
        ts.append(a.elapsed_time(b))
    return ts


def torch_model(name):
    import torch
    import torchvision
    sys.path.insert(0, ARGS.skeletons)
    from export_models import BertLayer
    if name == "resnet18":
        return torchvision.models.resnet18(weights=None).eval()
    if name == "mobilenet_v3_small":
        return torchvision.models.mobilenet_v3_small(weights=None).eval()
    return BertLayer().eval()


def main():
    global ARGS
    ap = argparse.ArgumentParser()
    ap.add_argument("--threads", type=int, default=os.cpu_count())
    ap.add_argument("--runs", type=int, default=10)
    ap.add_argument("--cuda", action="store_true")
    ap.add_argument("--no-x86", action="store_true")
    ap.add_argument("--no-torch", action="store_true",
                    help="with --cuda: leave torch eager and torch.compile "
                         "out")
    ap.add_argument("--batches", default="1,32",
                    help="the image models' batches")
    ap.add_argument("--tf32", action="store_true",
                    help="compile ours for CUDA with allow_tf32")
    ap.add_argument("--conv-kernels", default="",
                    help="TJ_NVPTX_CONV values to time ours with, "
                         "e.g. mma,wgmma,default (default: the library's)")
    ap.add_argument("--models", default="resnet18,mobilenet_v3_small,bert_layer")
    ap.add_argument("--skeletons",
                    default=os.path.join(HERE, "..", "tests", "onnx", "models"))
    ARGS = ap.parse_args()
    sys.path.insert(0, ARGS.skeletons)
    # The package beside the bench (a checkout), unless one is importable.
    sys.path.append(os.path.join(HERE, "..", "python"))
    import onnxruntime as ort
    import skeleton
    import tensorjit as tj

    so = ort.SessionOptions()
    so.intra_op_num_threads = ARGS.threads
    so.inter_op_num_threads = 1
    print("threads %d, runs %d, onnxruntime %s" % (
        ARGS.threads, ARGS.runs, ort.__version__))
    kernels = [k for k in ARGS.conv_kernels.split(",") if k] or [None]
    if ARGS.cuda:
        import torch
        print("cuda: ours allow_tf32=%s; torch cudnn.allow_tf32=%s, "
              "matmul.allow_tf32=%s" % (
                  ARGS.tf32, torch.backends.cudnn.allow_tf32,
                  torch.backends.cuda.matmul.allow_tf32))
    for name in ARGS.models.split(","):
        model = skeleton.filled(name).SerializeToString()
        sess = ort.InferenceSession(model, so,
                                    providers=["CPUExecutionProvider"])
        batches = [(8, 128)] if name == "bert_layer" else [
            (int(b), None) for b in ARGS.batches.split(",") if b]
        graph = tj.onnx.load(model)
        exes = {}
        if not ARGS.no_x86:
            t0 = time.perf_counter()
            exes["x86"] = tj.compile(graph, "x86", num_threads=ARGS.threads)
            s = exes["x86"].stats
            print("%s: x86 compile %.1f s, %d kernels, %d graph breaks" % (
                name, time.perf_counter() - t0, s.num_kernels,
                s.num_graph_breaks))
        cuda_names = []
        if ARGS.cuda:
            import torch
            for kern in kernels:
                label = "cuda" if kern is None else "cuda " + kern
                g = graph
                if kern is not None:
                    # Settings are read when a context is created;
                    # "default": a context of its own without the setting.
                    os.environ.pop("TJ_NVPTX_CONV", None)
                    if kern != "default":
                        os.environ["TJ_NVPTX_CONV"] = kern
                    g = tj.onnx.load(model, context=tj.Context())
                    os.environ.pop("TJ_NVPTX_CONV", None)
                t0 = time.perf_counter()
                exes[label] = tj.compile(g, "cuda", allow_tf32=ARGS.tf32)
                cuda_names.append(label)
                s = exes[label].stats
                print("%s: %s compile %.1f s, %d kernels, %d graph breaks" % (
                    name, label, time.perf_counter() - t0, s.num_kernels,
                    s.num_graph_breaks))
            if not ARGS.no_torch:
                tm = torch_model(name).cuda()
                tc = torch.compile(tm)
        for b, t in batches:
            shape = skeleton.input_shape(name, b, t or 128)
            x = np.random.default_rng(0).standard_normal(shape,
                                                         dtype=np.float32)
            want = sess.run(None, {"input": x})[0]
            scale = float(np.abs(want).max())
            print("== %s %s" % (name, "x".join(map(str, shape))))
            print(fmt("onnxruntime cpu", time_cpu(
                lambda: sess.run(None, {"input": x}), ARGS.runs)))
            if "x86" in exes:
                exe = exes["x86"]
                out = np.empty_like(want)
                got = np.asarray(exe(x))
                print("  x86 max |err| vs onnxruntime %.3g of %.3g" % (
                    float(np.abs(got - want).max()), scale))
                print(fmt("tensorjit x86", time_cpu(
                    lambda: exe(x, out=out), ARGS.runs)))
            if ARGS.cuda:
                print("  (our runs start %s)" % time.strftime("%H:%M:%S"))
                xd = torch.from_numpy(x).cuda()
                for label in cuda_names:
                    exe = exes[label]
                    got = exe(xd).cpu().numpy()
                    print("  %s max |err| vs onnxruntime %.3g of %.3g" % (
                        label, float(np.abs(got - want).max()), scale))
                    print(fmt("tensorjit " + label + (
                        " tf32" if ARGS.tf32 else ""), time_cuda(
                            torch, lambda: exe(xd), ARGS.runs)))
                    sys.stdout.flush()
                # tensorjit's profile (BENCH_PROFILE=1, or the labels to
                # profile, e.g. BENCH_PROFILE="cuda default"): where the
                # time goes, largest first, before torch's compile.
                prof = os.environ.get("BENCH_PROFILE")
                for label in cuda_names if prof else []:
                    if prof == "1" or label in prof.split(","):
                        print(exes[label].profile(xd, runs=5).text)
                sys.stdout.flush()
                with torch.no_grad():
                    if not ARGS.no_torch and ARGS.tf32:
                        # torch's own TF32 error, on its (other, random)
                        # weights: eager with TF32 against eager without,
                        # beside ours against onnxruntime above.
                        flags = (torch.backends.cudnn.allow_tf32,
                                 torch.backends.cuda.matmul.allow_tf32)
                        torch.backends.cudnn.allow_tf32 = False
                        torch.backends.cuda.matmul.allow_tf32 = False
                        ref = tm(xd).float().cpu().numpy()
                        torch.backends.cudnn.allow_tf32 = True
                        torch.backends.cuda.matmul.allow_tf32 = True
                        got = tm(xd).float().cpu().numpy()
                        (torch.backends.cudnn.allow_tf32,
                         torch.backends.cuda.matmul.allow_tf32) = flags
                        print("  torch eager tf32 max |err| vs its f32 "
                              "%.3g of %.3g" % (float(np.abs(got - ref).max()),
                                                float(np.abs(ref).max())))
                    if not ARGS.no_torch:
                        print(fmt("torch eager", time_cuda(
                            torch, lambda: tm(xd), ARGS.runs)))
                        print(fmt("torch.compile", time_cuda(
                            torch, lambda: tc(xd), ARGS.runs, warm=3)))
            if "x86" in exes and os.environ.get("BENCH_PROFILE"):
                print(exes["x86"].profile(x, runs=3).text)
            sys.stdout.flush()
    return 0


if __name__ == "__main__":
    sys.exit(main())
