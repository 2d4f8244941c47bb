#!/usr/bin/env bash
# The clock probe of bench/clock_probe.py on 2 GPUs: each probed plan of the named stored shapes run alone
# (`pptl run`, 15 timed steps), nvidia-smi sampling SM clock, power and utilization every 20 ms meanwhile.
#   bash bench/clock_probe.sh OUT SHAPE [SHAPE ...]
#   python3 bench/clock_probe.py analyze OUT
set -u
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
OUT=$1
shift
cd "$(dirname "$0")/.."
mkdir -p "$OUT/plans"
PYTHONPATH=. python3 bench/clock_probe.py write "$OUT/plans" "$@" || exit 2
FIELDS=timestamp,index,clocks.sm,power.draw.instant,utilization.gpu
nvidia-smi --query-gpu=$FIELDS --format=csv,noheader,nounits -c 1 >/dev/null 2>&1 ||
  FIELDS=timestamp,index,clocks.sm,power.draw,utilization.gpu
nvidia-smi --query-gpu=name,driver_version,power.limit --format=csv,noheader > "$OUT/gpus.txt"
nvidia-smi --query-gpu=$FIELDS --format=csv,noheader,nounits -lms 20 > "$OUT/smi.csv" &
SMI=$!
: > "$OUT/windows.txt"
for p in "$OUT"/plans/*.json; do
  n=$(basename "$p" .json)
  t0=$(date '+%Y/%m/%d %H:%M:%S.%6N')
  PYTHONPATH=. timeout "${RUN_TIMEOUT:-150}" python3 -m pptl run "$p" --steps 15 --warmup 3 -o "$OUT/$n.measured.json" > "$OUT/$n.log" 2>&1
  echo "$n|$t0|$(date '+%Y/%m/%d %H:%M:%S.%6N')" >> "$OUT/windows.txt"
  tail -1 "$OUT/$n.log"
done
kill "$SMI"
