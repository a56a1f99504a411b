#!/usr/bin/env bash
# Installs what libtensorjit needs to build and test, if it is missing:
# Debian packages (meson, ninja, LLVM 19 with FileCheck and lit, libffi,
# OpenBLAS for the benchmarks' baseline, clang-19 and its sanitizer
# runtimes for the ASan+UBSan build, protobuf-c with ONNX's onnx.proto for
# the ONNX importer and ONNX's backend node tests for its suite) and numpy
# and pytest for the Python tests. Run from the repository root.
set -euo pipefail

need_apt=()
have_pkg() { dpkg-query -W -f='${Status}' "$1" 2>/dev/null | grep -q "install ok installed"; }
for pkg in meson ninja-build pkg-config llvm-19-dev llvm-19-tools libffi-dev \
           libopenblas-dev libxxhash-dev gcc g++ python3 \
           clang-19 libclang-rt-19-dev \
           libprotobuf-c-dev protobuf-c-compiler libonnx-dev libonnx-testdata; do
  have_pkg "$pkg" || need_apt+=("$pkg")
done
if [ ${#need_apt[@]} -gt 0 ]; then
  echo "deps: installing ${need_apt[*]}"
  SUDO=""
  [ "$(id -u)" -ne 0 ] && SUDO="sudo"
  $SUDO apt-get update -q
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -q "${need_apt[@]}"
fi

# numpy and pytest for the interpreter the tests use (scripts/python_env.sh).
. scripts/python_env.sh
tj_pick_python
