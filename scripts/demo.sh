#!/usr/bin/env bash
# The README's main job: installs what is missing, builds, and runs the
# capstone demo (y = gelu(x @ w + b) with a symbolic batch B) on the CPU,
# printing its scoreboard.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/deps.sh
# The interpreter for the numpy column (exported as $PYTHON).
. scripts/python_env.sh
tj_pick_python
if [ ! -f build/build.ninja ]; then
  meson setup build -Dpython="$PYTHON"
fi
ninja -C build
exec build/examples/capstone "$@"
