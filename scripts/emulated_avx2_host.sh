#!/bin/bash
# Runs x86 test programs on an emulated AVX2-only CPU: qemu-user's TCG
# implements AVX2 and FMA but no AVX-512, so under `-cpu max` CPUID reports
# an AVX2 host and both the library's dispatch and LLVM's host detection
# see one (issue 11: no test may assume the host's ISA). Slow (TCG runs
# the JIT's code 10-30x slower), so it is not part of scripts/test.sh.
#
#   bash scripts/emulated_avx2_host.sh [BUILD_DIR] [TEST...]
#
# Needs qemu-user (apt-get install qemu-user). Exits non-zero if a test
# fails; prints one line per test.
set -u
build=${1:-build}
shift || true
tests=("$@")
if [ ${#tests[@]} -eq 0 ]; then
  tests=(x86_autotune_test x86_jit_test vecmath_test x86_gemm_test
         x86_fusion_test)
fi
command -v qemu-x86_64 > /dev/null || {
  echo "qemu-x86_64 not found (apt-get install qemu-user)"; exit 77; }
cpu_check=$(mktemp -d)
trap 'rm -rf "$cpu_check"' EXIT
failed=0
for t in "${tests[@]}"; do
  exe=$build/tests/unit/$t
  [ -x "$exe" ] || { echo "$t: not built"; failed=1; continue; }
  start=$(date +%s)
  qemu-x86_64 -cpu max "$exe" > "$cpu_check/$t.log" 2>&1
  rc=$?
  echo "$t rc=$rc $(( $(date +%s) - start ))s $(tail -1 "$cpu_check/$t.log")"
  if [ $rc -ne 0 ]; then
    grep -E "^not ok" "$cpu_check/$t.log" | head -5
    failed=1
  fi
done
exit $failed
