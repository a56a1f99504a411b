#!/bin/bash
# Runs x86 test programs on an emulated CPU with less than this host has
# (issue 11: no test may assume the host's ISA). qemu-user's TCG reports
# the CPUID of the model it is given, so the library's dispatch and LLVM's
# host detection both see that machine:
#
#   avx2      qemu's `-cpu max`: AVX2, FMA and F16C, no AVX-512 (the
#             slowest CI machines are AVX2-only);
#   baseline  qemu64: x86-64's SSE2 baseline, no SSE4, no AVX;
#   any other name is passed to `-cpu` as it is (`qemu-x86_64 -cpu help`).
#
# Slow (TCG runs the JIT's code 10-30x slower, a large suite tens of
# minutes), so it is not part of scripts/test.sh; tests/RELIABILITY.md
# records the runs.
#
#   bash scripts/emulated_host.sh [-c avx2|baseline|MODEL] [BUILD_DIR] [TEST...]
#
# Needs qemu-user (apt-get install qemu-user). Exits non-zero if a test
# fails; prints one line per test.
set -u
model=avx2
if [ "${1:-}" = "-c" ]; then
  model=${2:?-c needs a CPU: avx2, baseline or a qemu model}
  shift 2
fi
case $model in
  avx2) cpu=max ;;
  baseline) cpu=qemu64 ;;
  *) cpu=$model ;;
esac
build=${1:-build}
shift || true
tests=("$@")
if [ ${#tests[@]} -eq 0 ]; then
  tests=(x86_autotune_test x86_jit_test vecmath_test x86_gemm_test
         x86_fusion_test x86_conformance_test x86_reduce_edge_test
         conv_native_test window_native_test attention_test layout_test)
fi
command -v qemu-x86_64 > /dev/null || {
  echo "qemu-x86_64 not found (apt-get install qemu-user)"; exit 77; }
unset QEMU_LOG  # an empty one makes qemu print its help and exit
logs=$(mktemp -d)
trap 'rm -rf "$logs"' EXIT
failed=0
for t in "${tests[@]}"; do
  exe=$build/tests/unit/$t
  [ -x "$exe" ] || { echo "$t: not built"; failed=1; continue; }
  start=$(date +%s)
  # TCG warns once per CPUID feature it cannot emulate; not the test's.
  qemu-x86_64 -cpu "$cpu" "$exe" 2>&1 |
    grep -v '^qemu-x86_64: warning: TCG doesn' > "$logs/$t.log"
  rc=${PIPESTATUS[0]}
  echo "$t ($model) rc=$rc $(( $(date +%s) - start ))s $(tail -1 "$logs/$t.log")"
  if [ $rc -ne 0 ] && [ $rc -ne 77 ]; then
    grep -E "^not ok" "$logs/$t.log" | head -5
    failed=1
  fi
done
exit $failed
