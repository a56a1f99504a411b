#!/usr/bin/env bash
# The benchmark rows of issues 14 and 15's goal tables on the GPU machine,
# by name, in one device call. Run from the repository root there, with a
# release stage of this tree (scripts/device_stage.sh) carried beside it:
#
#   BUDGET=575 bash bench/goal_rows.sh STAGE ROW...
#     carry ["build-pack", ".devdeps"]: unpacks build-pack/STAGE.tar.xz
#     first when STAGE is not there
#
# Each row's output goes to ROW.txt in a work folder (/tmp/goal-rows),
# headed by its command and closed by its exit status and seconds; after
# each row, $OUT/rows.txt (every row's text so far, one after another) and
# $OUT/rows.tar.gz (the folder, the suite's per-test logs among it) are
# written anew: the device call returns at most 8 files, and a call killed
# at its limit still returns the rows it finished. A row is
# skipped, saying so, when what is left of BUDGET seconds (default 575, a
# call's 600 less the unpacking) is below its own limit, so a call that
# names more rows than fit still returns what it ran.
#
# Rows (limit in seconds; the goal each one measures):
#   suite    300  the staged CUDA tests, six at a time, 240 s each (slow
#                 ones first); suite.txt a line a test (exit status, last
#                 line), each test's log as suite-NAME.txt
#   suitenext 300 the same suite under the defaults to come
#                 (TJ_NVPTX_ROWS=staged TJ_CUDA_COMPILE_THREADS=auto: the
#                 staged rows and the compile chunks, both off until the
#                 whole suite has passed with them); name it instead of
#                 suite, whose per-test logs it writes over
#   pycall    60  issue 14: a tiny graph's Python call, torch CUDA tensors
#                 and numpy on x86 (<= 5 us, <= 3 us)
#   ctime    150  issue 14: cold and warm compile of both blocks, bf16,
#                 tuning included (<= 0.5 s, <= 10 ms)
#   blocks16 150  issue 14: both blocks bf16, B*T 1024 and 8192, wall time
#                 from Python against torch.compile (<= 0.9x)
#   blocks32 150  issue 14: the same in f32, no TF32 (<= 1.0x)
#   attn     150  issue 14: fused attention forward, bf16, D 64/128,
#                 T 512/2048/8192, causal and not (>= 0.8x cuDNN, >= 1.5x
#                 flash)
#   attnbwd  150  issue 14: the same, backward
#   rows      90  issue 14: softmax, log_softmax, layer_norm, rms_norm rows
#                 of 4k-32k columns (>= 0.85 of copy bandwidth)
#   bhtt      90  issue 14: masked softmax over attention scores (>= 1.0x
#                 torch.compile's kernel)
#   x86blocks 240 issue 14: both blocks on the Xeon at 2 and 16 threads
#                 against torch eager (<= 0.8x) and onnxruntime
#   models   200  issue 15: resnet18, mobilenet_v3_small on the H200
#                 against torch.compile (<= 1.0x)
#   x86models 200 issue 15: the same on the Xeon against onnxruntime
#   conv     150  issue 15: ResNet-50's conv layers on the H200 against
#                 cuDNN (>= 0.8x)
#   x86conv  200  issue 15: the same on the Xeon against oneDNN (>= 0.8x)
#   window   180  issue 15: depthwise conv, pools and the embedding gather
#                 against copy bandwidth (>= 0.85, >= 0.8)
#   x86native 240 the x86 conv and window tests at the Xeon's AVX-512 tier
#                 (conv_native_test, window_native_test, dwpool_test)
#   onnxcuda 540  issue 15: the ONNX node suites (onnx 1.23's and 1.12's)
#                 and the real models on CUDA (tests/onnx, --target cuda):
#                 each suite in shards (a process a CPU), its outcomes
#                 written anew (--write) as onnxcuda/expectations-cuda*.txt
#                 in rows.tar.gz, the lines where they differ from the
#                 tree's list in the row's text; onnx_models_test meanwhile
#                 (its reference runs on the CPU). Run it alone in a call.
#                 Needs the stage's data pack, build-pack/STAGE-onnx.tar.xz
#                 (carry build-pack), else it writes onnx 1.23's suite there
#                 from the installed onnx
set -u
stage=${1:?usage: goal_rows.sh STAGE ROW...}
shift
start=$(date +%s)
budget=${BUDGET:-575}
if [ ! -d "$stage" ] && [ -f "build-pack/$(basename "$stage").tar.xz" ]; then
  tar xJf "build-pack/$(basename "$stage").tar.xz"
fi
if [ -f .devdeps/env.sh ]; then . .devdeps/env.sh; fi
here=$PWD
export PATH=$PATH:/usr/local/cuda/bin
export PYTHONUNBUFFERED=1 PYTHONPATH=$here/python
export LD_LIBRARY_PATH="$here/$stage/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
export TJ_LIBRARY="$here/$stage/lib/libtensorjit.so"
dest=${OUT:-$here/goal-rows}
out=/tmp/goal-rows
rm -rf "$out"
mkdir -p "$out" "$dest"
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm,clocks.max.mem \
  --format=csv,noheader > "$out/machine.txt" 2>&1
lscpu | grep -E "Model name|^CPU\(s\)|Flags" | cut -c1-200 >> "$out/machine.txt"
python3 -c "import torch; print('torch', torch.__version__,
  'cudnn', torch.backends.cudnn.version())" >> "$out/machine.txt" 2>&1

row() {  # name, limit, then the command
  local name=$1 limit=$2 left t0 rc
  shift 2
  left=$((budget - ($(date +%s) - start)))
  if [ "$left" -lt "$limit" ]; then
    echo "skipped: $left s left of the budget, the row's limit is $limit" \
      > "$out/$name.txt"
    return
  fi
  t0=$(date +%s)
  echo "\$ $*" > "$out/$name.txt"
  timeout "$limit" "$@" >> "$out/$name.txt" 2>&1
  rc=$?
  echo "=== rc $rc, $(($(date +%s) - t0)) s" >> "$out/$name.txt"
  for f in "$out"/*.txt; do
    case "$f" in */suite-*) continue ;; esac
    echo "##### $(basename "$f")"
    cat "$f"
  done > "$dest/rows.txt"
  tar czf "$dest/rows.tar.gz" -C /tmp goal-rows
}

suite() {  # the staged tests, six at a time; cuda_fault_test alone
  local t name
  for t in nvptx_gpu_test cuda_attention_test cuda_conv_test \
           cuda_random_graph_test cuda_conformance_test cuda_wqgemm_test \
           $(cd "$stage/tests" && ls *_test); do
    [ "$t" = cuda_fault_test ] && continue
    [ -x "$stage/tests/$t" ] || continue
    echo "$t"
  done | awk '!seen[$0]++' | xargs -P 6 -I{} sh -c \
    'timeout 240 "$0/tests/{}" > "$1/suite-{}.txt" 2>&1;
     echo "{} rc=$? $(grep -v "^\s*$" "$1/suite-{}.txt" | tail -n 1 | cut -c1-150)"' \
    "$stage" "$out"
  LD_LIBRARY_PATH="$here/$stage/tests/fault:$LD_LIBRARY_PATH" timeout 240 \
    "$stage/tests/cuda_fault_test" > "$out/suite-cuda_fault_test.txt" 2>&1
  echo "cuda_fault_test rc=$?"
}

onnx_suite() {  # data dir, the tree's list, the new list's name, limit (s)
  local data=$1 list=$2 new=$out/onnxcuda/$3 limit=$4 shards k rc=0 pids=
  shards=$(($(nproc) - 2))  # two CPUs for the models' reference runs
  [ "$shards" -ge 1 ] || shards=1
  if [ ! -d "$data" ]; then
    echo "$data: no node data; skipped"
    return 0
  fi
  mkdir -p "$out/onnxcuda"
  for k in $(seq 0 $((shards - 1))); do
    timeout "$limit" "$stage/onnx/onnx_node_test" "$new.$k" "$data" \
      --target cuda --write --shard "$k/$shards" > "$new.$k.log" 2>&1 &
    pids="$pids $!"
  done
  for k in $pids; do wait "$k" || rc=1; done
  # The tree's header (its data path, not this machine's), then every
  # part's lines in name order.
  { grep '^#' "$list" | grep -v '^# Target'
    echo "# Target cuda."
    for k in $(seq 0 $((shards - 1))); do cat "$new.$k"; done |
      grep -v '^#' | LC_ALL=C sort; } > "$new" 2>/dev/null
  for k in $(seq 0 $((shards - 1))); do
    if ! grep -q "^onnx node suite" "$new.$k.log"; then
      echo "shard $k/$shards did not finish (its lines so far are kept):" \
        "$(tail -n 3 "$new.$k.log")"
      rc=1
    fi
  done
  awk '/^onnx node suite/ { for (i = 2; $i != "of"; ++i) {}
                            p += $(i - 1); n += $(i + 1); q += $(i + 4)
                            g += $(NF - 4) }
       END { printf "%s: %d of %d pass on CUDA (%d of them pinned; %d " \
             "with graph breaks)\n", "'"$data"'", p, n, q, g }' "$new".*.log
  grep -h "graph breaks (groups on the host)" "$new".*.log | LC_ALL=C sort
  diff <(grep -v '^#' "$list") <(grep -v '^#' "$new") > "$new.diff"
  echo "$(grep -c '^[<>]' "$new.diff") lines differ from $list" \
    "($list first, then this run's):"
  grep '^[<>]' "$new.diff" | head -n 300 | cut -c1-400
  [ -s "$new.diff" ] && rc=1
  return $rc
}

onnxcuda() {  # the node suites, then the models (begun meanwhile)
  local pack rc=0 models_pid
  pack=build-pack/$(basename "$stage")-onnx.tar.xz
  [ -d "$stage/onnx/node-1.23" ] || [ ! -f "$pack" ] || tar xJf "$pack"
  if [ ! -d "$stage/onnx/node-1.23" ]; then
    python3 -c "import onnx; print('no data pack: writing onnx',
      onnx.__version__, 'node suite')"
    rm -rf /tmp/onnx-node-gen
    python3 scripts/gen_onnx_node_data.py /tmp/onnx-node-gen > /dev/null 2>&1 &&
      ln -s /tmp/onnx-node-gen/node "$stage/onnx/node-1.23"
  fi
  mkdir -p "$out/onnxcuda"
  timeout 450 "$stage/onnx/onnx_models_test" tests/onnx/models --target cuda \
    > "$out/onnxcuda/models.log" 2>&1 &
  models_pid=$!
  onnx_suite "$stage/onnx/node-1.23" tests/onnx/expectations-cuda-1.23.txt \
    expectations-cuda-1.23.txt 330 || rc=1
  onnx_suite "$stage/onnx/node-1.12" tests/onnx/expectations-cuda.txt \
    expectations-cuda.txt 150 || rc=1
  wait "$models_pid" || rc=1
  echo "onnx_models_test --target cuda:"
  grep -v '^\s*$' "$out/onnxcuda/models.log" | tail -n 30
  return $rc
}

for r in "$@"; do
  case "$r" in
    suite)
      export -f suite
      export stage out here
      row suite 300 bash -c suite ;;
    suitenext)
      export -f suite
      export stage out here
      row suitenext 300 env TJ_NVPTX_ROWS=staged \
        TJ_CUDA_COMPILE_THREADS=auto bash -c suite ;;
    pycall)
      row pycall 60 bash -c "python3 bench/python_overhead.py --target cuda;
        python3 bench/python_overhead.py --target x86" ;;
    ctime)
      row ctime 150 python3 bench/block_compile_time.py --target cuda \
        --dtype bf16 --bt 8192 ;;
    blocks16)
      row blocks16 150 python3 bench/transformer_blocks.py --target cuda \
        --dtype bf16 --bt 1024 8192 --iters 20 ;;
    blocks32)
      row blocks32 150 python3 bench/transformer_blocks.py --target cuda \
        --dtype f32 --bt 1024 8192 --iters 20 ;;
    attn)
      row attn 150 python3 bench/cuda_attention_torch.py --iters 10 ;;
    attnbwd)
      row attnbwd 150 python3 bench/cuda_attention_grad_torch.py --bwd \
        --d 64 128 --t 512 2048 8192 --iters 5 ;;
    rows)
      row rows 90 python3 bench/softmax_rows.py ;;
    bhtt)
      row bhtt 90 python3 bench/softmax_bhtt.py ;;
    x86blocks)
      row x86blocks 240 bash -c "python3 bench/transformer_blocks.py \
        --target x86 --threads 2 --ort --iters 5 &&
        python3 bench/transformer_blocks.py --target x86 --threads 16 \
        --ort --iters 5" ;;
    models)  # torch's convs run TF32 by default (cudnn.allow_tf32)
      row models 200 bash -c "python3 bench/onnx_models.py --cuda --no-x86 \
        --runs 5 --tf32 && python3 bench/onnx_models.py --cuda --no-x86 \
        --runs 5 --models resnet18,mobilenet_v3_small" ;;
    x86models)
      row x86models 200 python3 bench/onnx_models.py --threads 16 --runs 7 ;;
    conv)
      row conv 150 python3 bench/cuda_conv_torch.py ;;
    x86conv)
      row x86conv 200 python3 bench/conv_torch.py \
        --ours "$stage/bench/conv_bench" --reps 5 ;;
    window)
      row window 180 python3 bench/cuda_window_torch.py --iters 20 \
        --compile ;;
    x86native)
      row x86native 240 bash -c "set -o pipefail; for t in conv_native_test \
        window_native_test dwpool_test; do \"\$0/tests/\$t\" 2>&1 |
        tail -n 3; echo \"\$t rc=\$?\"; done" "$stage" ;;
    onnxcuda)
      export -f onnxcuda onnx_suite
      export stage out here
      row onnxcuda 540 bash -c onnxcuda ;;
    *) echo "goal_rows: no row $r" > "$out/$r.txt" ;;
  esac
done
