"""Installs libtensorjit into a temporary DESTDIR and builds programs
against the installed copy, the way a user outside this tree would:

1. ``meson install --destdir`` (no root needed; the build is not changed);
2. checks the layout: headers, the shared library with its SONAME symlink,
   the static library, tensorjit.pc, tensorjitConfig.cmake and its version
   file;
3. hello.c with ``pkg-config --cflags --libs tensorjit`` (shared), and again
   against libtensorjit.a with ``pkg-config --static`` (the program must
   not need libtensorjit.so);
4. hello.cpp with CMake: ``find_package(tensorjit 0.1)`` and the
   ``tensorjit::tensorjit`` / ``tensorjit::tensorjit_static`` targets; and
   ``find_package(tensorjit 0.2)`` must be refused (0.x minor versions are
   incompatible);
5. runs every program.

pkg-config is pointed at the staged copy with --define-variable=prefix
(the .pc file names the real prefix); the CMake config is relocatable.

    check_install.py --build-dir B --prefix P --libdir L --includedir I
                     --source-dir examples/ [--cc "cc"] [--cxx "c++"]
                     [--sanitize none]
"""

from __future__ import annotations

import argparse
import os
import shlex
import shutil
import subprocess
import sys
import tempfile
from typing import Dict, List, Optional

failures: List[str] = []


def run(cmd: List[str], env: Optional[Dict[str, str]] = None,
        cwd: Optional[str] = None, expect_fail: bool = False) -> str:
    print("+ " + " ".join(shlex.quote(c) for c in cmd), flush=True)
    proc = subprocess.run(cmd, env=env, cwd=cwd, capture_output=True,
                          text=True, timeout=600)
    out = proc.stdout + proc.stderr
    if (proc.returncode != 0) != expect_fail:
        print(out)
        status = "succeeded" if expect_fail else f"exit {proc.returncode}"
        raise SystemExit(f"check_install: FAILED ({status}): {cmd[0]}")
    return proc.stdout


def check(cond: bool, what: str) -> None:
    print(f"  {'ok  ' if cond else 'FAIL'} {what}")
    if not cond:
        failures.append(what)


def soname(path: str) -> str:
    out = run(["readelf", "-d", path])
    for line in out.splitlines():
        if "(SONAME)" in line:
            return line.split("[", 1)[1].split("]", 1)[0]
    return ""


def needed(path: str) -> List[str]:
    out = run(["readelf", "-d", path])
    return [line.split("[", 1)[1].split("]", 1)[0]
            for line in out.splitlines() if "(NEEDED)" in line]


def main() -> int:
    p = argparse.ArgumentParser()
    p.add_argument("--build-dir", required=True)
    p.add_argument("--prefix", required=True)
    p.add_argument("--libdir", required=True)
    p.add_argument("--includedir", required=True)
    p.add_argument("--source-dir", required=True, help="examples/")
    p.add_argument("--cc", default="cc")
    p.add_argument("--cxx", default=None,
                   help="the C++ compiler for CMake (its default if unset); "
                   "a sanitized library needs the one that built it")
    p.add_argument("--sanitize", default="none")
    p.add_argument("--keep", action="store_true",
                   help="keep the temporary directory")
    a = p.parse_args()
    for tool in ("meson", "pkg-config", "readelf"):
        if shutil.which(tool) is None:
            print(f"check_install: {tool} not found")
            return 1
    san = [] if a.sanitize in ("", "none") else [f"-fsanitize={a.sanitize}"]
    tmp = tempfile.mkdtemp(prefix="tj-install-")
    try:
        stage = os.path.join(tmp, "stage")
        run(["meson", "install", "-C", a.build_dir, "--destdir", stage,
             "--no-rebuild", "--quiet"])
        prefix = stage + os.path.abspath(a.prefix)
        libdir = a.libdir if os.path.isabs(a.libdir) else os.path.join(
            a.prefix, a.libdir)
        libdir = stage + os.path.abspath(libdir)
        incdir = a.includedir if os.path.isabs(a.includedir) else \
            os.path.join(a.prefix, a.includedir)
        incdir = stage + os.path.abspath(incdir)

        print("layout:")
        check(os.path.isfile(os.path.join(incdir, "tensorjit.h")),
              "include/tensorjit.h")
        # Every public header of the source tree, so that a header added
        # to include/tensorjit/ but not to the install list is caught.
        src_inc = os.path.join(a.source_dir, os.pardir, "include",
                               "tensorjit")
        for h in sorted(f for f in os.listdir(src_inc) if f.endswith(".h")):
            check(os.path.isfile(os.path.join(incdir, "tensorjit", h)),
                  f"include/tensorjit/{h}")
        so = os.path.join(libdir, "libtensorjit.so")
        check(os.path.islink(so) and os.path.exists(so),
              "libtensorjit.so -> the versioned library")
        check(os.path.islink(os.path.join(libdir, "libtensorjit.so.0")),
              "libtensorjit.so.0 (the SONAME link)")
        check(soname(os.path.realpath(so)) == "libtensorjit.so.0",
              "SONAME is libtensorjit.so.0")
        check(os.path.isfile(os.path.join(libdir, "libtensorjit.a")),
              "libtensorjit.a")
        pc_dir = os.path.join(libdir, "pkgconfig")
        check(os.path.isfile(os.path.join(pc_dir, "tensorjit.pc")),
              "pkgconfig/tensorjit.pc")
        cmake_dir = os.path.join(libdir, "cmake", "tensorjit")
        for f in ("tensorjitConfig.cmake", "tensorjitConfigVersion.cmake"):
            check(os.path.isfile(os.path.join(cmake_dir, f)), f"cmake/{f}")

        print("pkg-config, shared:")
        env = dict(os.environ, PKG_CONFIG_PATH=pc_dir)
        pc = ["pkg-config", f"--define-variable=prefix={prefix}"]
        cflags = shlex.split(run(pc + ["--cflags", "tensorjit"], env=env))
        libs = shlex.split(run(pc + ["--libs", "tensorjit"], env=env))
        cc = shlex.split(a.cc)
        hello_c = os.path.join(a.source_dir, "install", "hello.c")
        exe = os.path.join(tmp, "hello")
        run(cc + san + [hello_c, "-o", exe] + cflags + libs +
            [f"-Wl,-rpath,{libdir}", "-lm"])
        check("libtensorjit.so.0" in needed(exe),
              "hello needs libtensorjit.so.0")
        out = run([exe])
        print("  " + out.strip())
        check("hello:" in out and out.strip().endswith("ok"), "hello runs")

        print("pkg-config, static:")
        static_libs = shlex.split(run(pc + ["--static", "--libs", "tensorjit"],
                                      env=env))
        static_libs = [f for f in static_libs if f != "-ltensorjit"]
        exe_s = os.path.join(tmp, "hello_static")
        run(cc + san + [hello_c, "-o", exe_s] + cflags +
            [os.path.join(libdir, "libtensorjit.a")] + static_libs + ["-lm"])
        check(not any(n.startswith("libtensorjit") for n in needed(exe_s)),
              "hello_static does not need libtensorjit.so")
        out = run([exe_s])
        print("  " + out.strip())
        check(out.strip().endswith("ok"), "hello_static runs")

        cmake = shutil.which("cmake")
        if cmake is None:
            check(False, "cmake is installed (needed for the C++ check)")
        else:
            print("CMake, C++:")
            src = os.path.join(a.source_dir, "install")
            bld = os.path.join(tmp, "cmake-build")
            flags = " ".join(san)
            base = [cmake, "-S", src, f"-DCMAKE_PREFIX_PATH={prefix}",
                    f"-DTJ_WRAPPER_DIR={os.path.join(a.source_dir, 'cpp')}",
                    f"-DCMAKE_C_FLAGS={flags}", f"-DCMAKE_CXX_FLAGS={flags}",
                    "-DCMAKE_BUILD_TYPE=Release"]
            if a.cxx:  # the last word: the compiler behind a ccache
                base += [f"-DCMAKE_C_COMPILER={a.cc.split()[-1]}",
                         f"-DCMAKE_CXX_COMPILER={a.cxx.split()[-1]}"]
            run(base + ["-B", bld])
            run([cmake, "--build", bld, "-j", "2"])
            for name in ("hello_cpp", "hello_cpp_static"):
                path = os.path.join(bld, name)
                check(os.path.isfile(path), f"CMake built {name}")
                if os.path.isfile(path):
                    out = run([path])
                    print("  " + out.strip())
                    check(out.strip().endswith("ok"), f"{name} runs")
            shared_exe = os.path.join(bld, "hello_cpp")
            check("libtensorjit.so.0" in needed(shared_exe),
                  "hello_cpp links the shared library")
            # Semantic versions: 0.2 must not accept a 0.1 install.
            run(base + ["-B", os.path.join(tmp, "cmake-0.2"),
                        "-DTJ_FIND_VERSION=0.2"], expect_fail=True)
            check(True, "find_package(tensorjit 0.2) refused")
    finally:
        if a.keep:
            print(f"kept {tmp}")
        else:
            shutil.rmtree(tmp, ignore_errors=True)
    if failures:
        print(f"check_install: {len(failures)} checks failed")
        return 1
    print("check_install: every check passed")
    return 0


if __name__ == "__main__":
    sys.exit(main())
