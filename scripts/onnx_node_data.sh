# Sourced by scripts/test.sh: makes the node suite of onnx 1.23 for
# onnx_node_test_1_23 (tests/onnx/meson.build), under build/onnx-node-1.23;
# and by scripts/device_stage.sh, under its build directory
# (tj_onnx_node_data BUILD_DIR; build when not given).
#
# The onnx wheel ships its node tests as Python cases, so a virtual
# environment under build/venv-onnx gets onnx (the version the
# expectations were written for) and scripts/gen_onnx_node_data.py writes
# the data (about 56 MB, once). Best effort: where the package cannot be
# installed (no network, no venv module), the suite is skipped with a
# note, and onnx 1.12's suite (Debian's libonnx-testdata) still runs.

TJ_ONNX_VERSION=1.23.2

tj_onnx_node_data() {
  local build=${1:-build}
  case $build in /*) ;; *) build=$PWD/$build ;; esac
  local out="$build/onnx-node-1.23"
  local venv="$build/venv-onnx"
  local stamp="$out/onnx-$TJ_ONNX_VERSION"
  [ -f "$stamp" ] && return 0
  echo "onnx: writing onnx $TJ_ONNX_VERSION's node suite into $out"
  mkdir -p "$build"
  if ! { [ -x "$venv/bin/python" ] ||
         "${PYTHON:-python3}" -m venv "$venv"; } ||
     ! "$venv/bin/python" -m pip install -q "onnx==$TJ_ONNX_VERSION"; then
    echo "onnx: could not install onnx $TJ_ONNX_VERSION into $venv;" \
      "onnx_node_test_1_23 will be skipped"
    return 0
  fi
  rm -rf "$out"
  if "$venv/bin/python" scripts/gen_onnx_node_data.py "$out"; then
    touch "$stamp"
  else
    echo "onnx: writing the node suite failed; onnx_node_test_1_23 will be" \
      "skipped"
    rm -rf "$out"
  fi
}
