#!/usr/bin/env bash
# The GPU part of issue 7 in one command (4 GPUs): every family through `pptl run`, calibration error,
# and torch.distributed.pipelining on the anchor workload. Results land in OUT (default out/gpu):
# results.json, table.md, suite.log, work.tar.gz (configs, plans, measured and calibrated timelines).
#   bench/gpu_suite.sh [OUT] [extra bench/gpu_suite.py options]
set -u
# NVLink multicast stays off (it can take a shared host's GPUs down); keep these for every process.
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
OUT=${1:-${OUT:-out/gpu}}
shift || true
cd "$(dirname "$0")/.."
mkdir -p "$OUT"
{ nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader 2>/dev/null || echo "no nvidia-smi"; } \
  | tee "$OUT/gpus.txt"
PYTHONPATH=. PYTHONUNBUFFERED=1 python3 bench/gpu_suite.py --out "$OUT" "$@" 2>&1 | tee "$OUT/suite.log"
