"""The diagnostics from Python (issue 18): compile's unfused= and bisect=,
tensorjit.verify, ladder, profile and diagnose, and the inputs file
tj-reduce writes read back by numpy and by tj-run --inputs.

    TJ_LIBRARY=build/libtensorjit.so TJ_TOOLS_DIR=build/tools \\
        python3 -m pytest tests/python/test_diag.py
"""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile

import numpy as np
import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(
    os.path.abspath(__file__))))
sys.path.insert(0, os.path.join(ROOT, "python"))

import tensorjit as tj  # noqa: E402

BLOCK = """
func @block[B](%x: f32[B,32], %w: f32[32,32], %g: f32[32], %b: f32[32]) {
  %n = layer_norm %x, %g, %b {eps=1e-05} : f32[B,32]
  %h = matmul %n, %w : f32[B,32]
  %a = gelu %h : f32[B,32]
  %s = softmax %a {axis=1} : f32[B,32]
  %y = add %s, %x : f32[B,32]
  return %y as "y"
}
"""

# A big value dying beside a small live one, then two of half its size
# (the arena a third above what is live at once); an argsort of rows of
# 300 (no kernel template: argtopk's native host kernel, and a graph break
# on the reference interpreter under TJ_NATIVE_TOPK=off).
FRAG = """
func @frag[B](%x: f32[B,64], %wa: f32[64,1024], %wb: f32[1024,64],
              %wc: f32[64,512], %wd: f32[64,512], %n: i32[4,300]) {
  %a = matmul %x, %wa : f32[B,1024]
  %b = matmul %a, %wb : f32[B,64]
  %c = matmul %b, %wc : f32[B,512]
  %d = matmul %b, %wd : f32[B,512]
  %e = add %c, %d : f32[B,512]
  %s = sum %e {axes=[1]} : f32[B]
  %m = argtopk %n {axis=1} : i64[4,300]
  return %s as "y", %m as "m"
}
"""


TINY = """
func @tiny[B](%x: f32[B,4]) {
  %a = exp %x : f32[B,4]
  %b = mul %a, %x : f32[B,4]
  %c = tanh %b : f32[B,4]
  return %c as "y"
}
"""


def block_inputs(b: int) -> list:
    rng = np.random.default_rng(7)
    return [rng.standard_normal((b, 32)).astype(np.float32),
            (rng.standard_normal((32, 32)) / 8).astype(np.float32),
            np.ones(32, np.float32), np.zeros(32, np.float32)]


def test_compile_unfused_and_bisect() -> None:
    g = tj.Graph.parse(BLOCK)
    fused = tj.compile(g, cache_dir="")
    unfused = tj.compile(g, cache_dir="", unfused=True)
    assert unfused.stats.num_kernels > fused.stats.num_kernels
    xs = block_inputs(4)
    want = fused(*xs)
    np.testing.assert_allclose(unfused(*xs), want, rtol=1e-5, atol=1e-5)
    # No rewrites at all still computes the same values (composites left
    # whole run on the reference semantics).
    none = tj.compile(g, cache_dir="", bisect="0")
    np.testing.assert_allclose(none(*xs), want, rtol=1e-5, atol=1e-5)
    tj.compile(g, cache_dir="", bisect="canonicalize:3")
    with pytest.raises(tj.InvalidArgumentError, match="bisect"):
        tj.compile(g, cache_dir="", bisect="canon:3")
    with pytest.raises(tj.ArgumentTypeError, match="bisect"):
        tj.compile(g, bisect=3)  # type: ignore[arg-type]


def test_verify_ladder_profile_functions() -> None:
    r = tj.verify(BLOCK, symbols={"B": 3}, edge_values=False)
    assert r.ok and r.boundaries, r.text
    assert len(r.values) > 1
    exe = tj.compile(BLOCK, cache_dir="")
    assert tj.verify(exe, *block_inputs(2)).ok
    lad = tj.ladder(BLOCK, symbols={"B": 3}, edge_values=False)
    assert lad.first_diverging is None, lad.text
    assert [r.level for r in lad.rungs] == ["decomposed", "unfused", "fused",
                                            "full", "specialized"]
    # Large enough that the kernels, not the microseconds of host overhead
    # around a run (which no entry owns), make up the run's time.
    xs = block_inputs(4096)
    p = exe.profile(*xs, runs=10)
    assert p.entries and abs(sum(e.share for e in p.entries) - 1) < 0.1


def test_ladder_bisect() -> None:
    # The budget reaches every rung: the report says so, and a budget of 0
    # rewrites (composites left whole, on the reference semantics) still
    # climbs clean.
    for spec in ("0", "canonicalize:2"):
        lad = tj.ladder(BLOCK, symbols={"B": 3}, edge_values=False,
                        bisect=spec)
        assert lad.first_diverging is None, lad.text
        assert all(r.ran for r in lad.rungs), lad.text
        assert (f"every rung under the rewrite budget TJ_BISECT={spec}\n"
                in lad.text), lad.text
    none = tj.ladder(BLOCK, symbols={"B": 3}, edge_values=False, bisect="")
    assert "rewrite budget" not in none.text
    with pytest.raises(tj.InvalidArgumentError, match="options.bisect"):
        tj.ladder(BLOCK, symbols={"B": 3}, bisect="canon:3")
    with pytest.raises(tj.ArgumentTypeError, match="bisect"):
        tj.ladder(BLOCK, symbols={"B": 3}, bisect=3)  # type: ignore


def test_dumps_name_the_profiled_kernels() -> None:
    # Context(dump_dir=) from Python: per kernel the profile names, its
    # kernel IR, LLVM IR before and after optimization, assembly and
    # tuning decisions; llc takes the LLVM IR where it is installed.
    with tempfile.TemporaryDirectory() as d:
        ctx = tj.Context(dump_dir=d)
        try:
            g = tj.Graph.parse(BLOCK, context=ctx)
            exe = tj.compile(g, cache_dir="")
            p = exe.profile(*block_inputs(8), runs=1)
            kernels = [e.name for e in p.entries if e.kind == "kernel"]
            assert kernels, p.text
            for k in kernels:
                for ext in (".kir", ".ll", ".opt.ll", ".s", ".tune.txt"):
                    path = os.path.join(d, f"block.{k}{ext}")
                    assert os.path.getsize(path) > 0, path
                with open(os.path.join(d, f"block.{k}.kir")) as f:
                    assert f.read().startswith(f"kernel @{k} ")
            llc = next((os.path.join(b, n) for n in ("llc-19", "llc")
                        for b in os.environ.get("PATH", "").split(":")
                        if os.access(os.path.join(b, n), os.X_OK)), None)
            if llc:
                subprocess.run([llc, "-filetype=null",
                                os.path.join(d, f"block.{kernels[0]}.opt.ll")],
                               check=True)
            exe.close()
        finally:
            ctx.close()


def test_diagnose(monkeypatch: pytest.MonkeyPatch) -> None:
    # argtopk's native host kernel is not a graph break, and the ladder
    # says what it is.
    native = tj.diagnose(FRAG, symbols={"B": 64}, runs=1)
    assert not native.answer("breaking graphs").yes
    assert native.graph_breaks == 0
    assert ("1 native host kernels (argtopk)"
            in native.answer("breaking graphs").measured)
    # TJ_NATIVE_TOPK=off, read when a context is created: a graph break.
    monkeypatch.setenv("TJ_NATIVE_TOPK", "off")
    off = tj.Context()
    monkeypatch.delenv("TJ_NATIVE_TOPK")
    frag = tj.Graph.parse(FRAG, context=off)
    r = tj.diagnose(frag, symbols={"B": 64}, runs=2, specialize="always")
    assert r.target == "x86" and r.runs == 2
    assert len(r.answers) == 8
    assert r.answer("fragmenting").yes, r.text
    assert r.arena_bytes > r.live_peak_bytes
    assert r.answer("breaking graphs").yes and r.graph_breaks == 1
    assert "(argtopk)" in r.answer("breaking graphs").measured
    assert r.answer("recompiling").yes and r.recompiles >= 1
    assert not r.answer("collective").yes
    assert r.answer("compiling pay").question == "Does compiling pay?"
    assert "Am I fragmenting?" in r.text
    # Launch bound: a graph of a few microseconds barely moves when B
    # doubles, its host time beating its kernels'.
    tiny = tj.diagnose(TINY, symbols={"B": 2}, runs=40)
    assert tiny.answer("launch bound").yes, tiny.text
    assert not tiny.answer("fragmenting").yes, tiny.text
    # Not launch bound: 4M elements a run, whose time doubles with B.
    wide = tj.diagnose(TINY.replace("4]", "16384]"), symbols={"B": 256},
                       runs=10)
    assert not wide.answer("launch bound").yes, wide.text
    plain = tj.diagnose(BLOCK, symbols={"B": 4}, runs=2)
    assert not plain.answer("recompiling").yes
    assert not plain.answer("breaking").yes
    assert plain.eager_kernels > plain.kernels
    with pytest.raises(tj.InvalidArgumentError, match="runs is 0"):
        tj.diagnose(BLOCK, symbols={"B": 4}, runs=0)
    with pytest.raises(tj.InvalidArgumentError, match="B"):
        tj.diagnose(BLOCK)


def tool(name: str) -> str:
    d = os.environ.get("TJ_TOOLS_DIR")
    if not d or not os.path.exists(os.path.join(d, name)):
        pytest.skip("TJ_TOOLS_DIR does not hold " + name)
    return os.path.join(d, name)


def test_reduce_inputs_file_reads_back() -> None:
    reduce, run = tool("tj-reduce"), tool("tj-run")
    with tempfile.TemporaryDirectory() as d:
        src = os.path.join(d, "block.tj")
        with open(src, "w") as f:
            f.write(BLOCK)
        out = os.path.join(d, "small.tj")
        # The "bug": any gelu.
        p = subprocess.run([reduce, "--command=! grep -q gelu", "-o", out,
                            src, "--sym", "B=4"], capture_output=True,
                           text=True, check=True)
        npz = os.path.join(d, "small.inputs.npz")
        assert "wrote " + out + " and " + npz in p.stdout
        g = tj.Graph.parse(open(out).read())
        z = np.load(npz)
        assert sorted(z.files) == sorted(n for n, _ in g.inputs)
        for name, _ in g.inputs:
            assert z[name].dtype == np.float32
        # tj-run runs the reduced graph on them.
        r = subprocess.run([run, "--run", "--inputs", npz, out],
                           capture_output=True, text=True, check=True)
        assert "given inputs" in r.stdout
        # And numpy's own np.savez file (zip64 members) reads the same.
        mine = os.path.join(d, "mine.npz")
        np.savez(mine, **{n: z[n] for n in z.files})
        r2 = subprocess.run([run, "--run", "--inputs", mine, out],
                            capture_output=True, text=True, check=True)
        assert r2.stdout.split("time:")[0] == r.stdout.split("time:")[0]


CAPSTONE = """
func @block[B](%x: f32[B,1024], %w: f32[1024,4096], %b: f32[4096]) {
  %3 = linear %x, %w, %b : f32[B,4096]
  %4 = gelu %3 {approximate} : f32[B,4096]
  return %4 as "y"
}
"""


def test_edge_values_budget_scales_with_the_terms() -> None:
    # Edge values (large magnitudes among the inputs) make the capstone's
    # K = 1024 sums cancel; the budget scales with the terms (the
    # condition), so it is clean on every rung and the report says the rule.
    for seed in (1, 2):
        r = tj.verify(CAPSTONE, symbols={"B": 3}, seed=seed)
        assert r.verdict == "clean", r.text
        assert "atol + rtol x condition" in r.text
        assert all(v.first_bad_condition == 0 for v in r.values)
        lad = tj.ladder(CAPSTONE, symbols={"B": 3}, seed=seed)
        assert lad.first_diverging is None, lad.text
