#!/usr/bin/env bash
# rope14 (issue 14): the rotary embeddings' concat as one select kernel
# against the boxes (TJ_CONCAT_SELECT=off), A/B in one run, alternating.
#
#   bash bench/rope_select.sh [x86|cuda] [B] [ROUNDS]     (defaults: x86 2 5)
#
# Each round runs tj-run --run (median of 20 runs, wall time) on
# bench/rope_select.tj once per form; prints the per-round medians and the
# median over rounds. TJ_RUN (default build/tools/tj-run; on the GPU
# machine's stage, stage/tools/tj-run) names the tool.
#
# On the H200 (next session; not measured in session 21, no GPU):
#   TJ_RUN=stage/tools/tj-run bash bench/rope_select.sh cuda 16 5
#   python3 bench/transformer_blocks.py --target cuda --dtype bf16 \
#     --bt 8192 --blocks llama --iters 10 --top 16
#   TJ_CONCAT_SELECT=off python3 bench/transformer_blocks.py ... --no-compile
# should show one g2_pointwise and one g4_pointwise kernel (q's and k's
# rope) where the boxes had g2_pointwise_b0/_b1 and g4_pointwise_b0/_b1
# (0.054 ms together in session 19's profile, torch.compile's two 0.022).
set -euo pipefail
cd "$(dirname "$0")/.."
target=${1:-x86}
b=${2:-2}
rounds=${3:-5}
run=${TJ_RUN:-build/tools/tj-run}
median() { sort -g | awk '{a[NR]=$1} END {print a[int((NR+1)/2)]}'; }
one() {
  "$run" --run --reps=20 --target="$target" bench/rope_select.tj --sym B="$b" \
    2>&1 | sed -n 's/^time: median \([0-9.]*\) ms.*/\1/p'
}
sel=() box=()
for ((r = 0; r < rounds; ++r)); do
  sel+=("$(one)")
  box+=("$(TJ_CONCAT_SELECT=off one)")
  echo "round $r: select ${sel[r]} ms, boxes ${box[r]} ms"
done
echo "median over $rounds rounds ($target, B=$b): select" \
  "$(printf '%s\n' "${sel[@]}" | median) ms, boxes" \
  "$(printf '%s\n' "${box[@]}" | median) ms"
