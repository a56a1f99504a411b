#!/usr/bin/env bash
# The README's main job: installs what is missing, builds, and runs the
# capstone demo (y = gelu(x @ w + b) with a symbolic batch B) on the CPU,
# printing its scoreboard.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/deps.sh
if [ ! -f build/build.ninja ]; then
  meson setup build -Dpython="$(command -v "${PYTHON:-python3}")"
fi
ninja -C build
exec build/examples/capstone "$@"
