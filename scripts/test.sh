#!/usr/bin/env bash
# The README's test command: installs what is missing, builds, runs every
# test suite (unit, lit, python, examples), then an ASan+UBSan build of the
# native tests. Ends with "N passed, N failed".
set -uo pipefail
cd "$(dirname "$0")/.."
bash scripts/deps.sh || exit 1
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
  ninja -C "$dir" || { status=1; return; }
  meson test -C "$dir" --print-errorlogs --num-processes 2 "${test[@]}" || status=1
}

run_suite build
# The sanitizer build runs the native suites; the Python suite loads the
# library into an uninstrumented interpreter, so it runs only in the plain
# build.
run_suite build-asan -Db_sanitize=address,undefined -Db_lundef=false \
  -- --suite unit --suite lit --suite examples

"$PYTHON" scripts/count_tests.py build build-asan
rc=$?
[ $status -ne 0 ] && rc=1
exit $rc
