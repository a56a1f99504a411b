#!/usr/bin/env python3
"""Host overhead of a call from Python: a tiny 2-input pointwise graph
(y = a * b + a, f32 [4, 4]) through tensorjit.Executable, beside the same
run through a bare ctypes call of tj_executable_run (tensors marshalled
once, outside the loop) and torch eager's cost of one op (torch.add), in
the same run ("kept": the caller keeps the last 8 outputs, so that their
memory cannot be recycled and each call allocates):

    TJ_LIBRARY=build/libtensorjit.so python3 bench/python_overhead.py
    ... --target cuda          # torch CUDA tensors (the GPU machine)
    ... --compare OLD/python   # also another tree's package, same process

--compare loads each named package directory's tensorjit under a name of
its own, on the same library, and adds its tensorjit rows (prefixed with
the directory) to the same interleaved rounds: a before/after in one
process, where the machine's load and clocks hit both alike.

Each case is timed in rounds of N calls, the rounds of all cases
interleaved so that load on the host hits them alike; prints the minimum
and the median over the rounds of the wall time, and the minimum of this
thread's CPU time (less disturbed on a shared host), in microseconds per
call.
"""

import argparse
import collections
import ctypes
import importlib.util
import os
import statistics
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)),
                                "..", "python"))
import numpy as np  # noqa: E402

import tensorjit as tj  # noqa: E402
from tensorjit import _lib  # noqa: E402


def load_package(directory: str, index: int):
    """The tensorjit package under |directory| as module tensorjit_<index>
    (its imports are relative, so it keeps to its own modules)."""
    init = os.path.join(directory, "tensorjit", "__init__.py")
    name = f"tensorjit_{index}"
    spec = importlib.util.spec_from_file_location(
        name, init, submodule_search_locations=[os.path.dirname(init)])
    if spec is None or spec.loader is None:
        sys.exit(f"--compare: no tensorjit package in {directory}")
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


def tensorjit_cases(tjm, target, shape, x, y, out, torch, prefix=""):
    """The calls through package |tjm|'s Executable: numpy in and out,
    out=, reuse_outputs (x86), torch in and out, the outputs kept, out=.
    Returns (cases, the executable)."""
    g = tjm.Graph("tiny")
    a = g.input("a", "f32", list(shape))
    b = g.input("b", "f32", list(shape))
    g.output(a * b + a, "y")
    exe = tjm.compile(g, target, num_threads=1)
    cases = {}
    if target == "x86":
        cases[prefix + "tensorjit, numpy in/out"] = lambda: exe(x, y)
        cases[prefix + "tensorjit, numpy, out="] = lambda: exe(x, y,
                                                               out=out)
        reuse = tjm.compile(g, target, num_threads=1, reuse_outputs=True)
        cases[prefix + "tensorjit, numpy, reuse_outputs"] = lambda: reuse(
            x, y)
    if torch is not None:
        dev = "cuda" if target == "cuda" else "cpu"
        tx, ty = torch.from_numpy(x).to(dev), torch.from_numpy(y).to(dev)
        tout = torch.empty(shape, device=dev)
        cases[prefix + f"tensorjit, torch {dev} in/out"] = lambda: exe(tx,
                                                                      ty)
        # The outputs kept (the last 8), so that none can be recycled.
        kept = collections.deque(maxlen=8)
        cases[prefix + f"tensorjit, torch {dev} in/out, kept"] = \
            lambda: kept.append(exe(tx, ty))
        cases[prefix + f"tensorjit, torch {dev}, out="] = lambda: exe(
            tx, ty, out=tout)
    return cases, g, exe


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--target", default="x86", choices=("x86", "cuda"))
    ap.add_argument("--calls", type=int, default=5000, help="per round")
    ap.add_argument("--rounds", type=int, default=15)
    ap.add_argument("--shape", default="4,4")
    ap.add_argument("--compare", nargs="*", default=[], metavar="DIR",
                    help="other trees' python/ directories to time too")
    args = ap.parse_args()
    shape = tuple(int(d) for d in args.shape.split(","))
    try:
        import torch  # type: ignore
    except ImportError:
        torch = None
    if args.target == "cuda" and (torch is None or
                                  not torch.cuda.is_available()):
        sys.exit("--target cuda needs torch with a CUDA device")

    x = np.random.default_rng(1).standard_normal(shape).astype(np.float32)
    y = np.random.default_rng(2).standard_normal(shape).astype(np.float32)
    out = np.empty(shape, np.float32)

    cases, g, exe = tensorjit_cases(tj, args.target, shape, x, y, out,
                                    torch)
    for i, directory in enumerate(args.compare):
        label = os.path.basename(os.path.dirname(os.path.abspath(
            directory)))
        more, _, _ = tensorjit_cases(load_package(directory, i),
                                     args.target, shape, x, y, out, torch,
                                     f"[{label}] ")
        cases.update(more)
    # The C call alone through ctypes, marshalled once.
    exe(x, y)
    plan = exe._plan
    L = _lib.lib()
    run, handle = L.tj_executable_run, exe.handle
    if args.target == "x86":
        cases["C call via ctypes (argtypes)"] = lambda: run(
            handle, plan.in_arr, 2, plan.out_arr, 1)
        raw = _lib.raw_function("tj_executable_run")
        h, pi, po = ctypes.c_void_p(handle), ctypes.byref(plan.in_arr), \
            ctypes.byref(plan.out_arr)
        cases["C call via ctypes (no conversion)"] = lambda: raw(
            h, pi, 2, po, 1)
    if torch is not None:
        dev = "cuda" if args.target == "cuda" else "cpu"
        tx, ty = torch.from_numpy(x).to(dev), torch.from_numpy(y).to(dev)
        tout = torch.empty(shape, device=dev)
        cases[f"torch eager, one op ({dev})"] = lambda: torch.add(tx, ty)
        cases[f"torch eager, a*b+a ({dev})"] = lambda: tx * ty + tx
        if args.target == "cuda":
            # Where a torch call's time goes: the C run alone (the plan's
            # tensors, out= so that its output pointer stays valid), and
            # the pieces the Python side adds to it.
            exe(tx, ty, out=tout)
            tplan = exe._plan
            traw = _lib.raw_function("tj_executable_run")
            th, tpi, tpo = ctypes.c_void_p(handle), \
                ctypes.byref(tplan.in_arr), ctypes.byref(tplan.out_arr)
            cases["  part: C run via ctypes (cuda)"] = lambda: traw(
                th, tpi, 2, tpo, 1)
            cases["  part: torch.empty (cuda)"] = lambda: torch.empty(
                shape, device=dev)
            # A recycled output (_fast.py): its new tensor and the counts
            # that allow it; empty_like, the allocation when they do not.
            cases["  part: torch.empty_like (cuda)"] = \
                lambda: torch.empty_like(tout)
            cases["  part: t.data"] = lambda: tout.data
            suc = getattr(torch._C, "_storage_Use_Count", None)
            if suc is not None:
                st = [tout.untyped_storage()]
                cd = st[0]._cdata
                cases["  part: storage use count + refcount"] = \
                    lambda: (suc(cd), sys.getrefcount(st[0]))
            raw_stream = getattr(torch._C, "_cuda_getCurrentRawStream",
                                 None)
            if raw_stream is not None:
                cases["  part: current raw stream"] = lambda: raw_stream(0)
            nograph = tj.compile(g, args.target, cuda_graphs=False)
            cases["tensorjit, torch cuda, out=, no CUDA graph"] = \
                lambda: nograph(tx, ty, out=tout)
            cases["  part: data_ptr x2"] = lambda: (tx.data_ptr(),
                                                    ty.data_ptr())
        if args.target == "cuda":
            torch.cuda.synchronize()

    times = {name: [] for name in cases}
    cpu = {name: [] for name in cases}
    for name, fn in cases.items():  # warm-up (plans, caches)
        for _ in range(200):
            fn()
    for _ in range(args.rounds):
        for name, fn in cases.items():
            c = time.thread_time()
            t = time.perf_counter()
            for _ in range(args.calls):
                fn()
            if args.target == "cuda":
                torch.cuda.synchronize()
            times[name].append((time.perf_counter() - t) / args.calls * 1e6)
            cpu[name].append((time.thread_time() - c) / args.calls * 1e6)
    print(f"# python_overhead: {args.target}, f32 {list(shape)}, "
          f"{args.rounds} rounds of {args.calls} calls; python "
          f"{sys.version.split()[0]}, numpy {np.__version__}"
          + (f", torch {torch.__version__}" if torch is not None else
             ", no torch"))
    width = max(40, max(len(name) for name in times))
    print(f"{'case':{width}s} {'min us':>8s} {'median us':>10s} "
          f"{'cpu min us':>11s}")
    for name, ts in times.items():
        print(f"{name:{width}s} {min(ts):8.2f} {statistics.median(ts):10.2f} "
              f"{min(cpu[name]):11.2f}")


if __name__ == "__main__":
    main()
