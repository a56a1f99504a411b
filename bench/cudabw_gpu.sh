#!/usr/bin/env bash
# cudabw (issue 15): the H200 run this branch could not make (no GPU in
# session 21). Run from the repository root on the GPU machine, with a
# release stage of this tree in STAGE (scripts/device_stage.sh) and, for
# the "before" rows, main's library of the branch point in BEFORE (a
# directory holding libtensorjit.so*; optional). About 100 s.
#
#   bash bench/cudabw_gpu.sh [STAGE [BEFORE]]     # build-run, none
#
# What it should show (bench/RESULTS.md, "cudabw"): cuda_window_test with
# 0 failed; in cuda_window_torch.py's table the "ofcopy" column (copy ms
# over our kernel ms; issue 15's goals >= 0.85 for depthwise and pools,
# >= 0.8 for the gather), the default's row beside rows1/rows4 (the
# window kernel's rows a thread forced), eager torch beside; the before
# run's kernel ms (decompose's pointwise kernels per pad box) against
# ours.
set -u
stage=${1:-build-run}
before=${2:-}
export PYTHONUNBUFFERED=1 PYTHONPATH=python
export LD_LIBRARY_PATH="$stage/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
export TJ_LIBRARY="$stage/lib/libtensorjit.so"
nvidia-smi --query-gpu=name,clocks.max.sm,clocks.max.mem --format=csv,noheader
echo "== cuda_window_test (windows at every row block, gathers; vs the reference)"
timeout 60 "$stage/tests/cuda_window_test" 2>&1 | tail -40
echo "== cuda_conv_test (the dense convs, unchanged)"
timeout 120 "$stage/tests/cuda_conv_test" 2>&1 | tail -5
echo "== bench: ours, copy, torch eager; rows1/rows4 forced"
timeout 90 python3 bench/cuda_window_torch.py --iters 20 --rows 1,4 2>&1
if [ -n "$before" ]; then
  echo "== bench: the library in $before (before)"
  TJ_LIBRARY="$before/libtensorjit.so" LD_LIBRARY_PATH="$before:$LD_LIBRARY_PATH" \
    timeout 60 python3 bench/cuda_window_torch.py --iters 20 --ours-only 2>&1
fi
echo "== torch.compile (batch 32)"
timeout 180 python3 bench/cuda_window_torch.py --iters 20 --batch 32 --compile 2>&1
echo "== ncu: DRAM throughput of our window and gather kernels (batch 32)"
timeout 120 ncu -k regex:tj_kernel --metrics \
  dram__throughput.avg.pct_of_peak_sustained_elapsed,gpu__time_duration.sum \
  python3 bench/cuda_window_torch.py --iters 1 --batch 32 --ours-only 2>&1 |
  grep -E "tj_kernel|dram__|gpu__time" | head -80
echo "== x86 gather (this machine's Xeon)"
timeout 30 "$stage/bench/conv_bench" --batch 1 --reps 9 --threads 1 --only gather 2>&1 | tail -3
