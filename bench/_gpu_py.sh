#!/usr/bin/env bash
# What the GPU launchers share (bench/gpu_issue8.sh, bench/gpu_offload.sh): the GPUs named in the log, a fresh work
# folder, and bench/SCRIPT.py run with --out OUT --work WORK and the caller's extra options, all teed to OUT/suite.log.
#   bench/_gpu_py.sh SCRIPT DEFAULT_OUT [OUT] [extra options]
set -u
# NVLink multicast stays off (it can take a shared host's GPUs down); keep these for every process.
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
SCRIPT=$1 DEFAULT_OUT=$2
shift 2
OUT=${1:-${OUT:-$DEFAULT_OUT}}
shift || true
cd "$(dirname "$0")/.."
mkdir -p "$OUT"
WORK=$(mktemp -d "/tmp/pptl-$SCRIPT.XXXXXX")
{
  nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader 2>/dev/null || echo "no nvidia-smi"
  PYTHONPATH=. PYTHONUNBUFFERED=1 python3 "bench/$SCRIPT.py" --out "$OUT" --work "$WORK" "$@"
} 2>&1 | tee "$OUT/suite.log"
