#!/usr/bin/env bash
# Installs what libtensorjit needs to build and test, if it is missing:
# Debian packages (meson, ninja, LLVM 19 with FileCheck and lit, libffi,
# OpenBLAS for the benchmarks' baseline, clang-19 and its sanitizer
# runtimes for the ASan+UBSan build) and numpy and pytest for the
# Python tests.
set -euo pipefail

need_apt=()
have_pkg() { dpkg-query -W -f='${Status}' "$1" 2>/dev/null | grep -q "install ok installed"; }
for pkg in meson ninja-build pkg-config llvm-19-dev llvm-19-tools libffi-dev \
           libopenblas-dev libxxhash-dev gcc g++ python3 \
           clang-19 libclang-rt-19-dev; do
  have_pkg "$pkg" || need_apt+=("$pkg")
done
if [ ${#need_apt[@]} -gt 0 ]; then
  echo "deps: installing ${need_apt[*]}"
  SUDO=""
  [ "$(id -u)" -ne 0 ] && SUDO="sudo"
  $SUDO apt-get update -q
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -q "${need_apt[@]}"
fi

PYTHON=${PYTHON:-python3}
for mod in numpy pytest; do
  if ! "$PYTHON" -c "import $mod" 2>/dev/null; then
    echo "deps: installing $mod"
    "$PYTHON" -m pip install -q "$mod"
  fi
done
