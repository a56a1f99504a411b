# lit configuration for libtensorjit's .tj tests. Loaded through the
# lit.site.cfg.py that meson writes into the build directory, which sets
# config.tj_tools_dirs, config.tj_llvm_bin_dir and config.tj_build_dir.
#
# Tests use the tools by plain name (tj-opt, tj-echo, FileCheck, not): their
# directories are put first on PATH.

import os

import lit.formats

config.name = "tensorjit"
config.test_format = lit.formats.ShTest(execute_external=False)
config.suffixes = [".tj"]
config.excludes = ["Inputs"]
config.test_source_root = os.path.dirname(os.path.abspath(__file__))
config.test_exec_root = os.path.join(config.tj_build_dir, "tests")

path = [*config.tj_tools_dirs, config.tj_llvm_bin_dir,
        config.environment.get("PATH", os.environ.get("PATH", ""))]
config.environment["PATH"] = os.pathsep.join(path)
# Sanitizer builds: leaks are errors, and the tools must not be quiet about
# them.
for var in ("ASAN_OPTIONS", "UBSAN_OPTIONS", "LSAN_OPTIONS"):
    if var in os.environ:
        config.environment[var] = os.environ[var]
