#!/usr/bin/env python3
"""mobilenet_v3_small (or --model M) on x86 by CPU time at 1 thread, for a
shared, loaded machine where wall times are mostly descheduling
(bench/RESULTS.md,
issue 15 dwpool): the process CPU time of our runs (median, min..max) at
batch 1 and 32, with --ort onnxruntime's beside it, and with --profile
each kernel's minimum over --profiles per-kernel profiles
(Executable.profile at num_threads=1), grouped: pad boxes (interior = the
largest box of a group, the rest edges), other pointwise, GEMMs,
row reductions, set-up. Run the profile with bench/cpu_clock_shim.c
preloaded, or its times are wall times.

  TJ_LIBRARY=build/libtensorjit.so python3 bench/mobilenet_cpu.py
      [--ort] [--profile] [--profiles N] [--top N] [--turns N]
      [--batches 1,32]

--turns N (x86e2e) times our kernels and onnxruntime's nodes in turns in
one process: N times one Executable.profile, then one run of an
onnxruntime session with enable_profiling, and prints the medians of
both, side by side where the two lists have as many entries (resnet18:
one kernel a node, in order). Profiled minutes apart, the two had met
different loads of the VM. Preload a shim that answers CLOCK_REALTIME
with the thread's CPU clock as well as CLOCK_MONOTONIC (onnxruntime's
profiler reads the system clock). With either shim preloaded, take the
end-to-end figures from a run without it (under it ours read 1494 ms at
batch 32 against a kernel sum of 784, once).
"""

import argparse
import os
import statistics
import sys
import time

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))


def cpu_times(fn, runs):
    for _ in range(2):
        fn()
    ts = []
    for _ in range(runs):
        t = time.process_time()
        fn()
        ts.append((time.process_time() - t) * 1e3)
    return "%.2f (%.2f..%.2f)" % (statistics.median(ts), min(ts), max(ts))


def profile(exe, x, n, top):
    best, kind = {}, {}
    for _ in range(n):
        for e in exe.profile(x, runs=1).entries:
            best[e.name] = min(best.get(e.name, 1e30), e.ms)
            kind[e.name] = e.detail or e.kind
    groups = {}
    for name, ms in best.items():
        if "_b" in name and name.rsplit("_b", 1)[1].isdigit():
            groups.setdefault(name.rsplit("_b", 1)[0], []).append(ms)
    interior = sum(max(v) for v in groups.values())
    boxes = sum(sum(v) for v in groups.values())
    parts = {}
    for name, ms in best.items():
        if not ("_b" in name and name.rsplit("_b", 1)[1].isdigit()):
            parts[kind[name]] = parts.get(kind[name], 0) + ms
    print("  sum of per-kernel minima over %d profiles: %.3f ms" % (
        n, sum(best.values())))
    print("  pad boxes: interior %.3f, edges %.3f ms" % (
        interior, boxes - interior))
    for k, ms in sorted(parts.items(), key=lambda kv: -kv[1]):
        print("  %-12s %.3f ms" % (k, ms))
    for name, ms in sorted(best.items(), key=lambda kv: -kv[1])[:top]:
        print("    %8.3f  %-24s %s" % (ms, name, kind[name]))


def turns(exe, model, x, n, input_name):
    import json
    import re
    import onnxruntime as ort
    so = ort.SessionOptions()
    so.intra_op_num_threads = 1
    so.inter_op_num_threads = 1
    so.enable_profiling = True
    sess = ort.InferenceSession(model, so, providers=["CPUExecutionProvider"])
    sess.run(None, {input_name: x})
    ours = {}
    for _ in range(n):
        for e in exe.profile(x, runs=1).entries:
            ours.setdefault(e.name, []).append(e.ms)
        sess.run(None, {input_name: x})
    path = sess.end_profiling()
    with open(path) as f:
        events = json.load(f)
    os.remove(path)
    theirs = {}
    for e in events:
        name = e.get("name", "")
        if e.get("cat") == "Node" and name.endswith("_kernel_time"):
            theirs.setdefault(name[:-len("_kernel_time")], []).append(
                e["dur"] / 1e3)
    # The session's first run (before the turns) is left out; so are the
    # layout reorders and the flatten, which have no kernel of ours.
    theirs = {k: v[1:] for k, v in theirs.items()
              if not k.startswith("Reorder") and "Flatten" not in k}
    med = statistics.median

    def key(name):
        digits = re.findall(r"\d+", name)
        return int(digits[0]) if digits else -1
    mine = sorted((k for k in ours if k.startswith("g")), key=key)
    other = sum(med(v) for k, v in ours.items() if not k.startswith("g"))
    paired = len(mine) == len(theirs)
    names = list(theirs)
    for i in range(max(len(mine), len(theirs))):
        a = "%-14s %8.3f" % (mine[i], med(ours[mine[i]])) \
            if i < len(mine) else " " * 23
        b = "%8.3f  %s" % (med(theirs[names[i]]), names[i][-48:]) \
            if i < len(names) else ""
        r = " %5.2f" % (med(ours[mine[i]]) / med(theirs[names[i]])) \
            if paired and med(theirs[names[i]]) > 0 else ""
        print("  %s %s%s" % (a, b, r))
    s_ours = sum(med(ours[k]) for k in mine) + other
    s_theirs = sum(med(v) for v in theirs.values())
    print("  medians of %d turns: ours %.3f ms (set-up and copies %.3f), "
          "onnxruntime's nodes %.3f ms, ratio %.3f" % (
              n, s_ours, other, s_theirs, s_ours / s_theirs))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--ort", action="store_true")
    ap.add_argument("--profile", action="store_true")
    ap.add_argument("--profiles", type=int, default=3)
    ap.add_argument("--top", type=int, default=10)
    ap.add_argument("--turns", type=int, default=0,
                    help="time our kernels and onnxruntime's nodes in N "
                    "turns (see the docstring)")
    ap.add_argument("--batches", default="1,32",
                    help="the batch sizes to run, comma-separated (1 alone "
                    "halves an A/B round of --turns)")
    ap.add_argument("--model", default="mobilenet_v3_small",
                    help="a skeleton of tests/onnx/models (resnet18: "
                    "bench/RESULTS.md, convfuse)")
    ap.add_argument("--onnx", default=None,
                    help="an .onnx file (bench/onnx_zoo.py's --out, image "
                    "models of input [B, 3, 224, 224]) instead of --model; "
                    "the batch as exported, or any with a symbolic batch")
    args = ap.parse_args()
    sys.path.insert(0, os.path.join(HERE, "..", "tests", "onnx", "models"))
    sys.path.append(os.path.join(HERE, "..", "python"))
    import skeleton
    import tensorjit as tj
    if args.onnx:
        with open(args.onnx, "rb") as f:
            model = f.read()
    else:
        model = skeleton.filled(args.model).SerializeToString()
    exe = tj.compile(tj.onnx.load(model), "x86", num_threads=1)
    sess = None
    name = "input"
    if args.ort or args.turns:
        import onnx
        name = onnx.load_from_string(model).graph.input[0].name
    if args.ort:
        import onnxruntime as ort
        so = ort.SessionOptions()
        so.intra_op_num_threads = 1
        so.inter_op_num_threads = 1
        sess = ort.InferenceSession(model, so,
                                    providers=["CPUExecutionProvider"])
    for b in (int(v) for v in args.batches.split(",")):
        runs = 15 if b < 8 else 7
        x = np.random.default_rng(0).standard_normal((b, 3, 224, 224),
                                                     dtype=np.float32)
        out = np.asarray(exe(x)).copy()
        print("batch %d, CPU ms at 1 thread: ours %s" % (
            b, cpu_times(lambda: exe(x, out=out), runs)))
        if sess:
            print("  onnxruntime %s" % cpu_times(
                lambda: sess.run(None, {name: x}), runs))
        if args.profile:
            profile(exe, x, args.profiles, args.top)
        if args.turns:
            turns(exe, model, x, args.turns, name)
        sys.stdout.flush()
    return 0


if __name__ == "__main__":
    sys.exit(main())
