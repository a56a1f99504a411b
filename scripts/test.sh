#!/usr/bin/env bash
# The README's test command: installs what is missing, builds, runs every
# test suite (unit, lit, python, examples), then an ASan+UBSan build of the
# native tests with clang-19 and its libFuzzer targets (tests/fuzz, for a
# fixed time), and a ThreadSanitizer build of the threaded tests. Ends with
# "N passed, N failed".
set -uo pipefail
cd "$(dirname "$0")/.."
# Each phase's wall time, and the CPU time (user + system) its commands
# took, printed as a table before the count: CI has a time budget, and this
# says where it goes; the CPU time holds when other work shares the cores.
phase_names=() phase_secs=() phase_cpus=()
cpu_file=$(mktemp)
cpu_now=0
cpu_read() {  # sets cpu_now: CPU seconds of this shell's finished children
  times > "$cpu_file"  # "1m2.500s 0m3.250s" (user, system) on its 2nd line
  cpu_now=$(awk 'NR == 2 { split($1, u, /[ms]/); split($2, s, /[ms]/);
                           printf "%d", u[1] * 60 + u[2] + s[1] * 60 + s[2] }' \
            "$cpu_file")
}
phase_t0=$SECONDS
cpu_read
phase_c0=$cpu_now
phase() {  # name: ends the phase running since the last call
  cpu_read
  phase_names+=("$1")
  phase_secs+=($((SECONDS - phase_t0)))
  phase_cpus+=($((cpu_now - phase_c0)))
  phase_t0=$SECONDS
  phase_c0=$cpu_now
}
bash scripts/deps.sh || exit 1
# The linker of the three builds: lld where it is installed, else gold
# (binutils'), else the compiler's default, GNU ld. About 160 executables
# of the plain build and 110 of the sanitizer one each link the static
# library and LLVM: GNU ld took 0.66 CPU s a link there (about half the
# build's CPU time), gold 0.11 and lld 0.10. Meson reads CC_LD and CXX_LD
# when it sets a build dir up; what the links make is the same program.
if [ -z "${CC_LD:-}" ]; then
  if command -v ld.lld > /dev/null; then
    export CC_LD=lld CXX_LD=lld
  elif command -v ld.gold > /dev/null; then
    export CC_LD=gold CXX_LD=gold
  fi
fi
echo "linker: ${CC_LD:-the compiler default}"
# The interpreter deps.sh provided for (it may be a venv under build/).
. scripts/python_env.sh
tj_pick_python || exit 1
status=0
run_suite() {  # build dir, meson setup args..., then meson test args after --
  local dir=$1; shift
  local setup=() test=()
  while [ $# -gt 0 ] && [ "$1" != "--" ]; do setup+=("$1"); shift; done
  [ $# -gt 0 ] && shift
  test=("$@")
  if [ ! -f "$dir/build.ninja" ]; then
    meson setup "$dir" "${setup[@]}" -Dpython="$PYTHON" || { status=1; return; }
  fi
  # A whole build, unless the caller names its targets: then meson test
  # builds what the selected suites need (and no more).
  if [ ${#build_targets[@]} -eq 0 ]; then
    ninja -C "$dir" || { status=1; phase "$dir: build"; return; }
  else
    ninja -C "$dir" "${build_targets[@]}" ||
      { status=1; phase "$dir: build"; return; }
  fi
  phase "$dir: build"
  meson test -C "$dir" --print-errorlogs --num-processes 2 "${test[@]}" || status=1
  phase "$dir: tests"
}
build_targets=()

# onnx 1.23's node suite, for onnx_node_test_1_23 (skipped without it).
. scripts/onnx_node_data.sh
tj_onnx_node_data
phase "setup: deps, onnx node data"
# TJ_TEST_SUBSET=ci: the graph-level PTX tests compile the GEMM
# candidates of the first graph of each family alone (tj_test_candidates
# in tests/unit/test.h says why that keeps what they check), and
# cuda_ptx_conformance_test each op of its op x dtype matrix for both
# archs at one dtype, for one arch at the others (its one_arch); `meson
# test` without it, by hand, is their long mode, every case as before.
TJ_TEST_SUBSET=ci run_suite build
# The sanitizer build runs the native suites; the Python suite loads the
# library into an uninstrumented interpreter, so it runs only in the plain
# build. One build, clang-19, ASan and UBSan together: gcc's UBSan misses
# pointer arithmetic on NULL (pointer-overflow, named explicitly), and
# -fno-sanitize-recover=all makes any report fail its test.
# -fno-sanitize=function: on a call through a function pointer that check
# reads the 8 bytes before the callee for a type signature, which
# LLVM-compiled (JIT) kernels do not carry; a kernel at the start of a page
# makes it fault. LLVM itself is not instrumented, and its allocations are
# freed at exit, so no ASan options or suppressions are needed for it (leak
# detection stays on, JIT included).
# -fsanitize=fuzzer-no-link: the same build carries libFuzzer's coverage
# instrumentation, so the fuzz targets (tests/fuzz, -Dfuzz=true) link
# against it with no build of their own; the native suites run as before.
san_args="-fsanitize=pointer-overflow -fno-sanitize=function -fno-sanitize-recover=all -fsanitize=fuzzer-no-link"
# A build dir set up otherwise (by gcc, or before the fuzz targets) is set
# up anew.
if [ -f build-asan/build.ninja ] &&
   ! grep -q -e '"-fsanitize=fuzzer-no-link"' \
     build-asan/meson-info/intro-buildoptions.json 2>/dev/null; then
  rm -rf build-asan
fi
# Only what the three suites and the fuzz targets need: the CUDA tests
# (which skip without a GPU, and whose suite does not run here) and the
# benchmarks are not built with the sanitizers.
fuzz_targets=(fuzz_parse fuzz_run_args fuzz_cache fuzz_builder fuzz_onnx)
build_targets=("${fuzz_targets[@]/#/tests/fuzz/}")
# TJ_TEST_TIERS=host: the slowest tests that compile whole graphs at every
# x86 tier (tj_test_tiers in tests/unit/test.h says which) compile at the
# host's alone. What the sanitizers watch is our C code, and the lower
# tiers mostly run it again on the same paths (the JIT's kernels are not
# instrumented); the emitters' tier-specific branches stay covered here by
# the kernel-level tests (x86_jit_test and the others on open_jits), which
# still run every tier, and the plain build's leg above runs every tier in
# every test.
# TJ_TEST_SUBSET=sanitizer: likewise, the tests whose variants differ
# only in an element type on one emitter path keep one of each family
# (tj_test_sanitizer_subset in tests/unit/test.h), and the PTX tests whose
# time is LLVM's NVPTX codegen of many similar kernels (the GEMM
# candidates, a schedule at several shapes) a covering subset: the line
# coverage of our code over this leg's tests is that of the whole cases
# (tj_test_ways, tj_test_candidates and the tests that read them).
TJ_TEST_TIERS=host TJ_TEST_SUBSET=sanitizer CC=clang-19 CXX=clang++-19 \
  run_suite build-asan \
  -Db_sanitize=address,undefined -Db_lundef=false -Dfuzz=true \
  -Dc_args="$san_args" -Dcpp_args="$san_args" \
  -- --suite unit --suite lit --suite examples

# The fuzz targets, each for TJ_FUZZ_SECONDS (tests/fuzz/README.md has the
# long mode), from its checked-in seeds; what it finds new goes to a
# working corpus under the build dir, a crash's reproducer to
# build-asan/fuzz/<target>/ (crash-*, leak-*, timeout-*). Each target
# counts as one test: its results are written in meson's test-log format
# for count_tests.py.
fuzz_seconds=${TJ_FUZZ_SECONDS:-20}
# A fixed seed (TJ_FUZZ_SEED to change it): every CI run replays the same
# sequence of mutations, so a failure here reproduces with the same seed on
# any machine (a slower one only stops earlier in the sequence), and a
# change is not failed for a defect that a different draw happened to reach;
# finding new inputs is the long mode's work (tests/fuzz/README.md).
fuzz_seed=${TJ_FUZZ_SEED:-1}
fuzz_log=build-asan/fuzz/meson-logs/testlog.json
mkdir -p build-asan/fuzz/meson-logs
rm -f build-asan/fuzz/reproducers.txt
: > "$fuzz_log"
# Two targets at a time (each libFuzzer run is one process), in the order
# listed; the log lines and the results come out in that order.
fuzz_one() {  # target: runs it, writes $out/result
  local target=$1 exe=build-asan/tests/fuzz/$1 out=build-asan/fuzz/$1
  mkdir -p "$out/corpus"
  rm -f "$out/result"
  if [ -x "$exe" ] &&
     "$exe" -seed="$fuzz_seed" -max_total_time="$fuzz_seconds" -timeout=60 \
       -rss_limit_mb=4096 \
       -max_len=8192 -print_final_stats=1 -artifact_prefix="$out/" \
       "$out/corpus" "tests/fuzz/corpus/$target" > "$out/log.txt" 2>&1; then
    echo OK > "$out/result"
  else
    echo FAIL > "$out/result"
  fi
}
running=0
for target in "${fuzz_targets[@]}"; do
  if [ $running -ge 2 ]; then
    wait -n
    running=$((running - 1))
  fi
  fuzz_one "$target" &
  running=$((running + 1))
done
wait
for target in "${fuzz_targets[@]}"; do
  out=build-asan/fuzz/$target
  result=$(cat "$out/result" 2>/dev/null || echo FAIL)
  if [ "$result" != OK ]; then
    status=1
    echo "$target failed: $out/log.txt; reproducer (if any):" $out/crash-* \
      $out/leak-* $out/timeout-* $out/oom-*
    tail -40 "$out/log.txt"
    # The reproducer's bytes, for the summary at the end (a CI log may keep
    # only its tail).
    for f in "$out"/crash-* "$out"/leak-* "$out"/timeout-* "$out"/oom-*; do
      [ -f "$f" ] && printf '%s %s: %s\n' "$target" "${f##*/}" \
        "$(base64 -w0 < "$f")" >> build-asan/fuzz/reproducers.txt
    done
  fi
  echo "{\"name\": \"$target\", \"result\": \"$result\"}" >> "$fuzz_log"
  grep -E '^stat::number_of_executed_units' "$out/log.txt" |
    sed "s/^/$target: /"
done
phase "build-asan: fuzz"
# ThreadSanitizer: a third build (TSan cannot share one with ASan), with
# clang-19, of the library and the threaded tests only, which keeps it to a
# fraction of a full build. LLVM (a shared library) is not instrumented:
# the races looked for are in our code; tests/tsan.supp holds the
# suppressions, each with its reason. Each test counts once in the total.
run_tsan() {
  local dir=build-tsan
  local tests=(threads_test x86_context_test thread_pool_test cache_race_test
    x86_autotune_background_test)
  if [ ! -f "$dir/build.ninja" ]; then
    CC=clang-19 CXX=clang++-19 meson setup "$dir" -Db_sanitize=thread \
      -Db_lundef=false -Dpython="$PYTHON" || { status=1; return; }
  fi
  # A build that fails leaves no test log, so count_tests.py counts it.
  rm -f "$dir/meson-logs/testlog.json"
  ninja -C "$dir" "${tests[@]/#/tests/unit/}" || { status=1; return; }
  phase "$dir: build"
  TSAN_OPTIONS="suppressions=$PWD/tests/tsan.supp second_deadlock_stack=1" \
    meson test -C "$dir" --no-rebuild --print-errorlogs --num-processes 2 \
    "${tests[@]}" || status=1
  phase "$dir: tests"
}
run_tsan

echo "phase times (s):   wall    cpu"
for i in "${!phase_names[@]}"; do
  printf '%-18s %6d %6d\n' "${phase_names[$i]}" "${phase_secs[$i]}" \
    "${phase_cpus[$i]}"
done
cpu_read
rm -f "$cpu_file"
printf '%-18s %6d %6d\n' total "$SECONDS" "$cpu_now"
if [ -s build-asan/fuzz/reproducers.txt ]; then
  echo "fuzz reproducers (base64; tests/fuzz/README.md, A crash):"
  cat build-asan/fuzz/reproducers.txt
fi

"$PYTHON" scripts/count_tests.py build build-asan build-asan/fuzz build-tsan
rc=$?
[ $status -ne 0 ] && rc=1
exit $rc
