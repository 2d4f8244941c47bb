#!/usr/bin/env bash
# Clock truth on 2 GPUs: measured runs of three families, SEND/RECV order violations counted.
#   OUT=/path bash bench/clock_truth.sh [extra args for bench/clock_truth.py]
set -euo pipefail
OUT="${OUT:?set OUT to a folder}"
mkdir -p "$OUT"
{
  date -u
  nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader || true
  python3 -c "import torch, sys; print('torch', torch.__version__, 'python', sys.version.split()[0])"
} | tee "$OUT/machine.txt"
python3 bench/clock_truth.py --device cuda --out "$OUT" "$@"
