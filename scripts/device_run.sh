#!/usr/bin/env bash
# Runs a stage made by scripts/device_stage.sh on the GPU machine, from the
# repository root there (the device tool's working directory):
#
#   bash scripts/device_run.sh build-run [tests] [python] [bench] [NAME...]
#
#   tests   every staged test binary, each under a time limit
#   python  the Python suite on the machine's torch and numpy
#   bench   the CUDA and CPU benchmarks of bench/RESULTS.md's GPU sections
#   NAME    one staged test binary only (its name, without a path)
#
# Logs go to $OUT/logs (or ./device-logs), and a summary table, one line a
# program with its exit status and its last line, to stdout and
# $OUT/summary.txt.
set -uo pipefail
stage=${1:?usage: device_run.sh STAGE [tests|python|bench|NAME]...}
shift
[ $# -eq 0 ] && set -- tests python
here=$PWD
if [ -f .devdeps/env.sh ]; then . .devdeps/env.sh; fi
export LD_LIBRARY_PATH="$here/$stage/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
export TJ_LIBRARY="$here/$stage/lib/libtensorjit.so"
export NCCL_NVLS_ENABLE=0
out=${OUT:-$here/device-logs}
mkdir -p "$out/logs"
summary="$out/summary.txt"
: > "$summary"

record() {  # name, status, log
  local last
  last=$(grep -v '^\s*$' "$3" | tail -n 1 | cut -c1-150)
  printf '%-28s rc=%-3s %s\n' "$1" "$2" "$last" | tee -a "$summary"
}

run_test() {  # path to a staged test binary
  local name log rc
  name=$(basename "$1")
  log="$out/logs/$name.log"
  if [ "$name" = cuda_fault_test ]; then
    LD_LIBRARY_PATH="$here/$stage/tests/fault:$LD_LIBRARY_PATH" \
      timeout 300 "$1" > "$log" 2>&1
  else
    timeout 300 "$1" > "$log" 2>&1
  fi
  rc=$?
  record "$name" "$rc" "$log"
}

for what in "$@"; do
  case "$what" in
    tests)
      for t in "$stage"/tests/*_test; do run_test "$t"; done ;;
    python)
      log="$out/logs/python.log"
      # The pytest files (test_reference.py, test_fusion_repros.py and
      # test_layout.py are scripts that meson runs with arguments).
      (cd tests/python && TJ_TOOLS_DIR="$here/$stage/tools" timeout 600 \
         python3 -m pytest -q -p no:cacheprovider test_package.py \
         test_hotpath.py test_row_reduce.py test_quant.py \
         test_int_dtypes.py test_custom_op.py test_diag.py \
         test_onnx.py) > "$log" 2>&1
      record python "$?" "$log" ;;
    bench)
      for b in cuda_bench cuda_capstone; do
        log="$out/logs/$b.log"
        [ -x "$stage/bench/$b" ] || continue
        timeout 240 "$stage/bench/$b" > "$log" 2>&1
        record "$b" "$?" "$log"
      done
      log="$out/logs/python_overhead.log"
      timeout 120 python3 bench/python_overhead.py --target cuda \
        > "$log" 2>&1
      record python_overhead "$?" "$log" ;;
    *)
      if [ -x "$stage/tests/$what" ]; then run_test "$stage/tests/$what"
      else echo "device_run: no staged test $what" | tee -a "$summary"; fi ;;
  esac
done
