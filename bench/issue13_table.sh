#!/bin/bash
# Issue 13's benchmarks table on the GPU machine, in one call: stage the
# build-dev binaries (cuda_bench, cuda_capstone, cuda_exec_test) and
# bench/torch_capstone.py beside this script, then run it there. Everything
# goes to one file, $OUT/table.txt (a device call returns at most 8 files).
cd "$(dirname "$0")"
export PATH=$PATH:/usr/local/cuda/bin
out=${OUT:-.}/table.txt
S="--shape=2048,1024,4096 --shape=8192,768,2304 --shape=8192,768,768"
S="$S --shape=8192,768,3072 --shape=8192,3072,768 --shape=4096,4096,4096"
t0=$(date +%s)
step() {
  local limit=$1
  shift
  echo "=== $* (at $(($(date +%s) - t0)) s)" >> "$out"
  timeout "$limit" "$@" >> "$out" 2>&1
  echo "=== rc $?" >> "$out"
}
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm \
  --format=csv,noheader >> "$out"
for i in 1 2 3; do
  step 40 ./cuda_bench --gemm --plain $S "--loop=pingpong 128x128 s4" \
    "--loop=ws 128x256 s4 p" "--loop=ws 128x128 s4 p" \
    "--loop=pingpong 64x256 s4" "--loop=ws 128x256 s3"
done
step 30 ./cuda_bench --batched
step 90 ./cuda_capstone --out ours.txt
step 60 ./cuda_bench --f32
step 60 ncu --metrics gpu__time_duration.sum,sm__cycles_elapsed.max,\
smsp__inst_executed.sum,\
sm__pipe_tensor_op_hmma_cycles_active.avg.pct_of_peak_sustained_elapsed,\
l1tex__data_bank_conflicts_pipe_lsu_mem_shared.sum \
  ./cuda_bench --gemm --plain --profile --shape=8192,768,3072 \
  --shape=4096,4096,4096 "--loop=pingpong 128x128 s4" "--loop=ws 128x256 s4 p"
step 120 python3 torch_capstone.py --ours ours.txt --iters 30
step 60 ./cuda_capstone --f32 --out ours_f32.txt
step 60 python3 torch_capstone.py --f32 --ours ours_f32.txt --iters 30
step 120 ./cuda_exec_test
