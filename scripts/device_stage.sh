#!/usr/bin/env bash
# Stages what the GPU machine runs (../shared/device/README.md): that
# machine has no LLVM 19 headers and cannot build, so a release build made
# here is copied, lean, into a git-ignored directory that the device tool
# carries beside the working tree, together with .devdeps:
#
#   bash scripts/device_stage.sh [BUILD_DIR [STAGE_DIR]]   # build-dev, build-run
#   run: bash scripts/device_run.sh build-run [tests|python|bench]...
#        carry ["build-run", ".devdeps"]
#
# The stage is also packed, xz-compressed, as build-pack/STAGE_DIR.tar.xz
# (the test binaries share most of their bytes: 34 MB packs to 3 MB). When
# the stage and .devdeps together pass the carry limit, carry ["build-pack",
# ".devdeps"] instead and unpack it there first: tar xJf build-pack/*.tar.xz
# The ONNX node suites' data is only packed (build-pack/STAGE_DIR-onnx.tar.xz;
# see below): carry build-pack for bench/goal_rows.sh's onnxcuda row.
#
# BUILD_DIR is set up here if missing (release, stripped, LLVM 19 named in
# a native file, Debian's python3: the GPU machine's own interpreter runs
# the Python tests). The stage keeps the build tree's layout for the test
# binaries, so that the fault driver and the library are found as meson
# sets them up; the carried total must stay under the tool's 64 MiB.
set -euo pipefail
cd "$(dirname "$0")/.."
build=${1:-build-dev}
stage=${2:-build-run}

if [ ! -f "$build/build.ninja" ]; then
  [ -f llvm19.ini ] ||
    printf "[binaries]\nllvm-config = 'llvm-config-19'\n" > llvm19.ini
  meson setup "$build" --native-file llvm19.ini -Ddebug=false -Dstrip=true \
    -Dpython=/usr/bin/python3
fi
ninja -C "$build"

rm -rf "$stage"
mkdir -p "$stage/lib" "$stage/tests" "$stage/bench" "$stage/tools"
for f in "$build"/libtensorjit.so*; do
  [ -d "$f" ] || cp -P "$f" "$stage/lib/"  # not meson's object dirs
done
# The GPU machine's Ubuntu lacks protobuf-c (the ONNX importer's).
cp -P /usr/lib/x86_64-linux-gnu/libprotobuf-c.so.1* "$stage/lib/"

# Every test that needs the GPU, or that runs the x86 kernels on the GPU
# machine's Xeon: the CUDA suite, and the unit tests that have a CUDA leg.
for t in "$build"/tests/cuda/*_test; do
  case "$(basename "$t")" in
    nvptx_ptxas_test | cuda_abi_test) ;;  # offline; run in CI here
    *) cp "$t" "$stage/tests/" ;;
  esac
done
mkdir -p "$stage/tests/fault"
cp -P "$build"/tests/cuda/fault/*.so* "$stage/tests/fault/" 2>/dev/null || true
# conv_native_test, window_native_test and dwpool_test: the x86 conv and
# window kernels at the Xeon's AVX-512 tier (16 lanes), which an AVX2-only
# dev VM cannot run.
for t in attention_test shard_test shard_nccl_test conv_native_test \
         window_native_test dwpool_test; do
  [ -x "$build/tests/unit/$t" ] && cp "$build/tests/unit/$t" "$stage/tests/"
done
for b in cuda_bench cuda_capstone cuda_warm_start; do
  [ -x "$build/tests/cuda/$b" ] && cp "$build/tests/cuda/$b" "$stage/bench/"
done
for b in "$build"/bench/*; do
  [ -f "$b" ] && [ -x "$b" ] && cp "$b" "$stage/bench/"
done
for t in tj-run tj-reduce; do
  [ -x "$build/tools/$t" ] && cp "$build/tools/$t" "$stage/tools/"
done
# The ONNX node suites and the real models on CUDA (bench/goal_rows.sh's
# onnxcuda row): the two tests in onnx/, not tests/ (which the suite row
# and device_run.sh run bare); the expectations and the models' skeletons
# are tracked files of the tree.
mkdir -p "$stage/onnx"
cp "$build/tests/onnx/onnx_node_test" "$build/tests/onnx/onnx_models_test" \
  "$stage/onnx/"
# Extra binaries (a unit test for a long run, say) may be copied into the
# stage before packing again with: tar cJf build-pack/STAGE.tar.xz STAGE
mkdir -p build-pack
tar cJf "build-pack/$(basename "$stage").tar.xz" "$stage"
# The node suites' data, packed apart as build-pack/STAGE-onnx.tar.xz
# (3.4 MB; 83 MB as files, so never carried unpacked): onnx 1.23's
# (scripts/onnx_node_data.sh, into BUILD_DIR) as STAGE/onnx/node-1.23 and
# onnx 1.12's (Debian's libonnx-testdata) as STAGE/onnx/node-1.12 where
# they are found; goal_rows.sh unpacks it into the stage.
. scripts/onnx_node_data.sh
tj_onnx_node_data "$build"
links=$(mktemp -d)
mkdir -p "$links/$stage/onnx"
[ -d "$build/onnx-node-1.23/node" ] &&
  ln -s "$(realpath "$build/onnx-node-1.23/node")" \
    "$links/$stage/onnx/node-1.23"
[ -d /usr/share/libonnx-testdata/data/node ] &&
  ln -s /usr/share/libonnx-testdata/data/node "$links/$stage/onnx/node-1.12"
tar cJhf "build-pack/$(basename "$stage")-onnx.tar.xz" -C "$links" "$stage"
rm -rf "$links"
du -sh "$stage" build-pack .devdeps 2>/dev/null
