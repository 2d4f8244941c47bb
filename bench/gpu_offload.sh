#!/usr/bin/env bash
# Issue 21 on 4 GPUs in one command: the issue-8 MoE workload with and without activation offloading (host held
# back to within options.host_lag compute sub-ops of the GPU), calibrated per cost key and context, and the
# issue's targets (memory saving vs the plan, step time, peak per rank, exposed all-to-all, makespan).
# OUT (default out/gpu21) gets 3 files: table.md, results.json, suite.log. About 3-5 minutes on 4 H100/H200.
#   bench/gpu_offload.sh [OUT] [extra bench/gpu_offload.py options, e.g. --device cpu --hidden 64 --tokens 32]
set -u
# NVLink multicast stays off (it can take a shared host's GPUs down); keep these for every process.
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
OUT=${1:-${OUT:-out/gpu21}}
shift || true
cd "$(dirname "$0")/.."
mkdir -p "$OUT"
WORK=$(mktemp -d /tmp/pptl-issue21.XXXXXX)
{
  nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader 2>/dev/null || echo "no nvidia-smi"
  PYTHONPATH=. PYTHONUNBUFFERED=1 python3 bench/gpu_offload.py --out "$OUT" --work "$WORK" "$@"
} 2>&1 | tee "$OUT/suite.log"
