#!/usr/bin/env bash
# What `pptl run`'s clock record costs a host-bound run (2 GPUs): NVML's per-call time, then one small
# interleaved plan run alternately with the record off, at 10 ms and 100 ms, and off beside an nvidia-smi
# sampling every 20 ms in another process. Prints each launch's median step.
#   bash bench/gpu_clock_cost.sh OUT
set -u
cd "$(dirname "$0")/.."
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1 PYTHONPATH=$PWD
OUT=${1:-out/clock_cost}; mkdir -p "$OUT"
PYTHONPATH=. python3 bench/gpu_clock_cost.py
python3 -m pptl plan --schedule interleaved-1f1b --pp 2 --vpp 2 --microbatches 16 -o "$OUT/plan.json" > /dev/null
run() {  # NAME ENV...
  local name=$1; shift
  env "$@" timeout 120 python3 -m pptl run "$OUT/plan.json" --hidden 1024 --tokens 1024 --steps 20 --warmup 3 \
    -o "$OUT/$name.json" --output json > "$OUT/$name.txt" 2>&1
  python3 -c "import json; d=json.load(open('$OUT/$name.json'))['meta']['extra']; print('$name', round(d['median_step_ms'], 3), 'gpu' in d)"
}
for i in 1 2; do
  run "off_$i" PPTL_RUN_GPU_CLOCK=0
  run "ms10_$i" PPTL_RUN_GPU_CLOCK=1 PPTL_RUN_GPU_CLOCK_MS=10
  run "ms100_$i" PPTL_RUN_GPU_CLOCK=1 PPTL_RUN_GPU_CLOCK_MS=100
  nvidia-smi --query-gpu=index,clocks.sm,power.draw --format=csv,noheader -lms 20 > "$OUT/smi_$i.csv" 2>&1 &
  SMI=$!
  run "smi_$i" PPTL_RUN_GPU_CLOCK=0
  kill $SMI
done
