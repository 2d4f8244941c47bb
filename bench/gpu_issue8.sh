#!/usr/bin/env bash
# The GPU part of issue 8 in one command (4 GPUs): the MoE overlap plan (pp=2 x ep=2, real all-to-alls), the same
# with activation offloading, interleaved 1F1B of the same layers, and the weight-update plan; each planned, run,
# calibrated (`pptl plan --costs-from`), compared, rerun from the calibrated plan, and drawn in the seed styles.
# OUT (default out/gpu8) gets at most 8 files: results.json, table.md, suite.log, four PNGs, work.tar.gz.
#   bench/gpu_issue8.sh [OUT] [extra bench/gpu_issue8.py options]
set -u
# NVLink multicast stays off (it can take a shared host's GPUs down); keep these for every process.
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
OUT=${1:-${OUT:-out/gpu8}}
shift || true
cd "$(dirname "$0")/.."
mkdir -p "$OUT"
WORK=$(mktemp -d /tmp/pptl-issue8.XXXXXX)
{
  nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader 2>/dev/null || echo "no nvidia-smi"
  PYTHONPATH=. PYTHONUNBUFFERED=1 python3 bench/gpu_issue8.py --out "$OUT" --work "$WORK" "$@"
} 2>&1 | tee "$OUT/suite.log"
