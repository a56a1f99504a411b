"""Tests tests/check_layering.py on a small tree with every forbidden arrow
planted once: each must be reported with its file, line and arrow, and a
clean tree must pass.

Usage: check_layering_test.py [CC...]   (the C compiler command builds the
objects of the symbol check; without one that part is skipped)
"""
import pathlib
import shutil
import subprocess
import sys
import tempfile

HERE = pathlib.Path(__file__).resolve().parent
CHECK = HERE / "check_layering.py"

CLEAN = {
    "include/tensorjit/tj_api.h":
        "#define TJ_API\nTJ_API int tj_public(void);\n",
    "lib/base.h": "int tj_lib_fn(void);\n",
    "lib/base.c": '#include "lib/base.h"\nint tj_lib_fn(void) { return 1; }\n',
    "lib/passes/fold.c": '#include "lib/base.h"\n#include "tensorjit/tj_api.h"\n'
                         "int tj_fold(void) { return tj_lib_fn(); }\n",
    "kir/kernel_ir.h": '#include "lib/base.h"\n',
    "kir/kernel_ir.c": '#include "kir/kernel_ir.h"\n'
                       "int tj_kir_fn(void) { return tj_lib_fn(); }\n",
    "jit/emit.h": '#include <llvm-c/Core.h>\n#include "kir/kernel_ir.h"\n',
    "jit/plain.h": '#include "lib/base.h"\nint tj_jit_fn(void);\n',
    "jit/emit.c": '#include "jit/emit.h"\n#include "jit/plain.h"\n'
                  "int tj_jit_fn(void) { return 2; }\n",
    "backends/reference/reference.c": '#include "lib/base.h"\n'
                                      "int tj_ref_fn(void) { return 3; }\n",
    "backends/cuda/cuda_abi.h": "typedef int tj_cu_result_t;\n",
    "backends/cuda/cuda_run.c": '#include "backends/cuda/cuda_abi.h"\n'
                                '#include "jit/plain.h"\n'
                                "int tj_cuda_fn(void) { return 4; }\n",
    "backends/x86/run.c": '#include "jit/plain.h"\n'
                          "int tj_x86_fn(void) { return tj_jit_fn(); }\n",
    "backends/compile.c": '#include "backends/x86/x.h"\n',
    "backends/x86/x.h": "",
    "fake/llvm-c/Core.h": "", "fake/cuda.h": "", "fake/ffi.h": "",
    "python/tensorjit/_lib.py":
        'OPS = ("public",)\n_SIGNATURES = {"tj_public": None}\n'
        "for _n in OPS:\n    _SIGNATURES[\"tj_\" + _n] = None\n",
}

# (file, text appended, a line the check must print)
PLANTED = [
    ("lib/passes/fold.c", '#include "kir/kernel_ir.h"\n',
     'lib/passes/fold.c:4: lib -> kir: #include "kir/kernel_ir.h"'),
    ("lib/base.h", '#include "backends/x86/x.h"\n',
     'lib/base.h:2: lib -> x86: #include "backends/x86/x.h"'),
    ("kir/kernel_ir.c", '#include "jit/plain.h"\n',
     'kir/kernel_ir.c:3: kir -> jit: #include "jit/plain.h"'),
    ("kir/kernel_ir.c", "#include <ffi.h>\n",
     "kir/kernel_ir.c:4: kir -> libffi: #include <ffi.h>"),
    ("backends/reference/reference.c", '#include "jit/plain.h"\n',
     'backends/reference/reference.c:3: reference -> jit: '
     '#include "jit/plain.h"'),
    ("backends/x86/run.c", '#include "backends/cuda/cuda_abi.h"\n',
     'backends/x86/run.c:3: x86 -> cuda: '
     '#include "backends/cuda/cuda_abi.h"'),
    ("backends/x86/run.c", "#include <cuda.h>\n",
     "backends/x86/run.c:4: x86 -> CUDA types: #include cuda.h"),
    ("backends/cuda/cuda_run.c", '#include "jit/emit.h"\n',
     "backends/cuda/cuda_run.c:4: cuda -> llvm-c: "
     "#include jit/emit.h -> llvm-c/Core.h"),
    ("kir/kernel_ir.c", "typedef int tj_cu_result_t;\n",
     "kir/kernel_ir.c:5: kir -> CUDA types: uses tj_cu_result_t"),
    ("jit/emit.c", 'void f(void) { printf("x"); }\n',
     "jit/emit.c:4: library code must not exit or print to stdout"),
    ("backends/compile.c", '#include "backends/cuda/cuda_abi.h"\n',
     "backends/compile.c:2: driver -> CUDA types: "
     "#include backends/cuda/cuda_abi.h"),
    ("python/tensorjit/_lib.py", 'x = lib().tj_internal_fn\n',
     "python/tensorjit/_lib.py:5: python -> internal: tj_internal_fn is "
     "not a TJ_API function of include/"),
    ("python/tensorjit/_lib.py", 'OPS2 = ("hidden",)\n'
     'for _n in OPS2:\n    _SIGNATURES["tj_" + _n] = None\n',
     "python/tensorjit/_lib.py:8: python -> internal: tj_hidden is not"),
]
# Symbol arrows: calls no include shows (declared by hand).
PLANTED_SYMBOLS = [
    ("lib/passes/fold.c", "int tj_ref_fn(void);\n"
     "int tj_fold2(void) { return tj_ref_fn(); }\n",
     "lib/passes/fold.c:5: lib -> reference: calls or uses tj_ref_fn "
     "(defined in the reference library)"),
    ("backends/cuda/cuda_run.c", "int tj_x86_fn(void);\n"
     "int tj_c2(void) { return tj_x86_fn(); }\n",
     "backends/cuda/cuda_run.c:5: cuda -> x86: calls or uses tj_x86_fn"),
    ("backends/x86/run.c", "void LLVMShutdown(void);\n"
     "void tj_x2(void) { LLVMShutdown(); }\n",
     "backends/x86/run.c:5: x86 -> llvm-c: calls LLVMShutdown"),
]
LAYERS = {"lib": ["lib/base.c", "lib/passes/fold.c"],
          "kir": ["kir/kernel_ir.c"], "jit": ["jit/emit.c"],
          "reference": ["backends/reference/reference.c"],
          "x86": ["backends/x86/run.c"], "cuda": ["backends/cuda/cuda_run.c"]}


def write_tree(root, files):
    for rel, text in files.items():
        path = root / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    (root / "tests").mkdir(exist_ok=True)


def archives(root, cc):
    """One static library per layer, objects named as meson names them."""
    args = []
    for layer, sources in LAYERS.items():
        objs = []
        for rel in sources:
            obj = root / "build" / (rel.replace("/", "_") + ".o")
            obj.parent.mkdir(exist_ok=True)
            subprocess.run(cc + ["-c", "-I", str(root), "-I",
                            str(root / "include"), "-I",
                            str(root / "fake"), "-include", "stdio.h", "-w", str(root / rel),
                            "-o", str(obj)], check=True)
            objs.append(str(obj))
        lib = root / "build" / f"libtj_{layer}.a"
        subprocess.run(["ar", "rcs", str(lib)] + objs, check=True)
        args += ["--archive", layer, str(lib)]
    return args


def check(script, root, extra=()):
    run = subprocess.run([sys.executable, str(script), str(root)] +
                         list(extra), capture_output=True, text=True)
    return run.returncode, run.stdout


def main():
    cc = sys.argv[1:] or None
    # A compiler launcher recorded at configure time (ccache) may be absent
    # where the build tree is run (another machine): use the compiler.
    while cc and len(cc) > 1 and shutil.which(cc[0]) is None:
        cc = cc[1:]
    failures = []
    tmp = pathlib.Path(tempfile.mkdtemp(prefix="tj-layering-"))
    try:
        # The real tree's allowlist does not apply to this one.
        script = tmp / "check_layering.py"
        text = CHECK.read_text()
        start = text.index("ALLOWLIST = ")
        if text.startswith("ALLOWLIST = {", start):
            end = text.index("\n}\n", start) + 3
        else:
            end = text.index("\n", start) + 1
        script.write_text(text[:start] + "ALLOWLIST = set()\n" + text[end:])

        clean = tmp / "clean"
        write_tree(clean, CLEAN)
        rc, out = check(script, clean, archives(clean, cc) if cc else ())
        if rc != 0:
            failures.append(f"the clean tree fails:\n{out}")

        planted = tmp / "planted"
        files = dict(CLEAN)
        for rel, add, _ in PLANTED + (PLANTED_SYMBOLS if cc else []):
            files[rel] = files[rel] + add
        write_tree(planted, files)
        rc, out = check(script, planted, archives(planted, cc) if cc else ())
        if rc == 0:
            failures.append("the planted tree passes")
        for _, _, want in PLANTED + (PLANTED_SYMBOLS if cc else []):
            if not any(line.startswith(want) for line in out.splitlines()):
                failures.append(f"not reported: {want}")
    finally:
        shutil.rmtree(tmp)
    for f in failures:
        print(f)
    if failures:
        print(f"check_layering output was:\n{out}")
    print(f"check_layering_test: {len(failures)} failures")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
