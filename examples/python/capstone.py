"""The capstone block of seed 001 from Python: y = gelu(x @ w + b), tanh
form, f32, with a symbolic batch B.

Builds the block with the tensorjit package, prints its IR and the
scoreboard, compiles it once for x86 and runs that one executable for
several B, each result checked against the reference interpreter and
against numpy, timed beside numpy's eager evaluation. Then the same with
torch CPU tensors through DLPack (zero-copy in and out) when torch is
importable; skipped with a message otherwise. Exits non-zero on any
mismatch.

    python3 examples/python/capstone.py [--k 1024] [--n 4096]
        [--batches 1,7,256] [--reps 5]

The library comes from $TJ_LIBRARY, the installed package or the system;
from a source checkout, run it with PYTHONPATH=python.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from typing import Callable, List

import numpy as np

try:
    import tensorjit as tj
except ImportError:  # a source checkout: use python/ beside examples/
    sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(
        __file__)), os.pardir, os.pardir, "python"))
    import tensorjit as tj

SQRT_2_OVER_PI = np.float32(0.7978845608028654)


def numpy_block(x: np.ndarray, w: np.ndarray, b: np.ndarray) -> np.ndarray:
    """The block in eager numpy (each op makes a temporary)."""
    h = x @ w + b
    return 0.5 * h * (1.0 + np.tanh(SQRT_2_OVER_PI *
                                    (h + np.float32(0.044715) * h * h * h)))


def build_block(k: int, n: int) -> tj.Graph:
    g = tj.Graph("block")
    x = g.input("x", "f32", ["B", k])
    w = g.input("w", "f32", [k, n])
    b = g.input("b", "f32", [n])
    g.output(g.gelu(x @ w + b, approximate=True), "y")
    return g.finalize()


def median_ms(fn: Callable[[], object], reps: int) -> float:
    fn()  # warm-up
    times = []
    for _ in range(reps):
        start = time.perf_counter()
        fn()
        times.append((time.perf_counter() - start) * 1e3)
    times.sort()
    return times[len(times) // 2]


def run_numpy(args: argparse.Namespace, g: tj.Graph,
              exe: tj.Executable) -> bool:
    rng = np.random.default_rng(0)
    w = (rng.standard_normal((args.k, args.n), dtype=np.float32) *
         np.float32(0.03))
    b = rng.standard_normal(args.n, dtype=np.float32)
    print(f"\n== One executable, every B (numpy in, numpy out) ==")
    print(f"  {'B':>6} {'tensorjit ms':>13} {'numpy ms':>10} {'speedup':>8} "
          f"{'max err vs reference':>21} {'vs numpy':>10}")
    ok = True
    for batch in args.batches:
        x = rng.standard_normal((batch, args.k), dtype=np.float32)
        y = exe(x, w, b)
        ref = g.run_reference(x, w, b)
        err_ref = float(np.max(np.abs(y - ref))) if y.size else 0.0
        err_np = float(np.max(np.abs(y - numpy_block(x, w, b)))) \
            if y.size else 0.0
        out = np.empty_like(y)  # steady state: write into caller memory
        ours = median_ms(lambda: exe(x, w, b, out=out), args.reps)
        theirs = median_ms(lambda: numpy_block(x, w, b), args.reps)
        good = err_ref <= 1e-4 and err_np <= 1e-3
        ok &= good
        print(f"  {batch:>6} {ours:>13.3f} {theirs:>10.3f} "
              f"{theirs / ours if ours > 0 else float('nan'):>7.2f}x "
              f"{err_ref:>21.3g} {err_np:>10.3g}"
              f"{'' if good else '  MISMATCH'}")
    st = exe.stats
    print(f"  kernels {st.num_kernels}, graph breaks {st.num_graph_breaks}, "
          f"compile {st.compile_ms:.1f} ms, recompiles {st.recompiles}, "
          f"runs {st.runs}")
    if st.recompiles != 0:
        print("capstone.py: a B change recompiled the generic kernel")
        ok = False
    return ok


def run_torch(args: argparse.Namespace, exe: tj.Executable) -> bool:
    try:
        import torch  # type: ignore
    except ImportError:
        print("\n== torch through DLPack: skipped (torch is not "
              "importable) ==")
        return True
    dev = "cuda" if args.target == "cuda" else "cpu"
    print(f"\n== torch {dev.upper()} tensors through DLPack (zero-copy) ==")
    torch.manual_seed(0)
    w = (torch.randn(args.k, args.n) * 0.03).to(dev)
    b = torch.randn(args.n).to(dev)
    ok = True
    for batch in args.batches:
        x = torch.randn(batch, args.k).to(dev)
        want = torch.nn.functional.gelu(x @ w + b, approximate="tanh")
        out = torch.empty(batch, args.n, device=dev)
        exe(x, w, b, out=out)               # straight into a torch tensor
        err_out = float((out - want).abs().max()) if batch else 0.0
        y = exe(x, w, b)                    # torch in, torch out
        err = float((y - want).abs().max()) if batch else 0.0
        shared = isinstance(y, torch.Tensor) and y.device == want.device
        # cuda: torch's own matmul may use TF32, hence the wider bound.
        bound = 1e-3 if dev == "cpu" else 2e-2
        good = err <= bound and err_out <= bound and shared
        ok &= good
        print(f"  B={batch:<6} max err vs torch {err:.3g} (out= {err_out:.3g})"
              f", torch out: {shared}{'' if good else '  MISMATCH'}")
    return ok


def parse_args(argv: List[str]) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--k", type=int, default=1024)
    p.add_argument("--n", type=int, default=4096)
    p.add_argument("--batches", default="1,7,256",
                   help="comma-separated batch sizes")
    p.add_argument("--reps", type=int, default=5)
    p.add_argument("--target", choices=("x86", "cuda"), default="x86",
                   help="cuda also runs torch CUDA tensors through DLPack")
    args = p.parse_args(argv)
    try:
        args.batches = [int(s) for s in args.batches.split(",") if s]
    except ValueError:
        p.error("--batches takes comma-separated integers")
    if args.k < 1 or args.n < 1 or args.reps < 1 or not args.batches or \
            min(args.batches) < 0:
        p.error("sizes and reps must be positive")
    return args


def main(argv: List[str]) -> int:
    args = parse_args(argv)
    print(f"tensorjit {tj.version()} ({tj.library_path()}): capstone "
          f"y = gelu(x @ w + b), tanh form, f32")
    g = build_block(args.k, args.n)
    text = g.text()
    same = tj.Graph.parse(text).text() == text
    print(f"\n== Typed SSA IR (printed, parsed back: "
          f"{'identical' if same else 'DIFFERENT'}) ==\n{text}")
    big = max(args.batches) or 1
    print(f"== Scoreboard at B = {big} ==\n{g.scoreboard(B=big)}")
    exe = tj.compile(g, target=args.target)
    ok = same
    try:
        ok &= run_numpy(args, g, exe)
        ok &= run_torch(args, exe)
    except tj.TensorJitError as e:
        print(f"capstone.py: {e}", file=sys.stderr)
        return 1
    print("\nall results match" if ok else "\nFAILED")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
