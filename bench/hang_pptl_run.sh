#!/usr/bin/env bash
# Hang (2) of docs/diagnose.md on 4 GPUs: `pptl run` with two sends swapped on rank 1, NCCL flight
# recorder on; keeps the dumps, pptl's partial timeline, and torchfrtrace's and pptl diagnose's reports.
#   OUT=/path bash bench/hang_pptl_run.sh     (writes $OUT/hang2_pptl_run.tar.gz)
set -u
OUT=${OUT:-out}; W=$(mktemp -d); mkdir -p "$OUT" "$W/fr"
export PYTHONPATH=$PWD NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
export TORCH_NCCL_TRACE_BUFFER_SIZE=2000 TORCH_NCCL_DUMP_ON_TIMEOUT=1 TORCH_NCCL_ENABLE_TIMING=1
export TORCH_FR_DUMP_TEMP_FILE="$W/fr/nccl_trace_rank_" TORCH_NCCL_DEBUG_INFO_TEMP_FILE="$W/fr/nccl_trace_rank_"
FAULT=$(python3 bench/hang_pptl_run.py "$W" --messages inline)
{ echo "# $(date -u +%F) torch $(python3 -c 'import torch;print(torch.__version__)') fault: $FAULT"
  echo "$ pptl check issued.json --p2p nccl"; python3 -m pptl check "$W/issued.json" --p2p nccl
  echo "$ PPTL_RUN_FAULT=... pptl run plan.json --gpus 4 --messages inline --steps 1 --warmup 1 --timeout 20"
  PPTL_RUN_FAULT="$FAULT" timeout 300 python3 -m pptl run "$W/plan.json" --gpus 4 --messages inline --steps 1 \
      --warmup 1 --timeout 20 -o "$W/measured.json"; echo "exit $?"
  echo "$ torchfrtrace fr/ --prefix nccl_trace_rank_ -j"; timeout 120 torchfrtrace "$W/fr" --prefix nccl_trace_rank_ -j 2>&1 | tail -60
  echo "$ torchfrtrace fr/ --prefix nccl_trace_rank_"; timeout 120 torchfrtrace "$W/fr" --prefix nccl_trace_rank_ 2>&1 | tail -60
  echo "$ pptl diagnose fr/ --plan issued.json -o diagnose.png"
  python3 -m pptl diagnose "$W/fr" --plan "$W/issued.json" -o "$W/diagnose.png"; echo "exit $?"
  echo "$ pptl diagnose measured.json --plan issued.json"
  python3 -m pptl diagnose "$W/measured.json" --plan "$W/issued.json"; echo "exit $?"
} > "$W/report.txt" 2>&1
cp "$W/report.txt" "$OUT/report.txt"; cp "$W/diagnose.png" "$OUT/" 2>/dev/null
tar -czf "$OUT/hang2_pptl_run.tar.gz" -C "$W" fr plan.json issued.json measured.json report.txt 2>/dev/null
tail -40 "$OUT/report.txt"
