#!/usr/bin/env bash
# Real artifacts from 4 GPUs, in one command (< 9 minutes; every part has its own time limit):
#   1. torch.profiler Chrome traces of torch.distributed.pipelining schedules on the anchor workload
#      (bench/record_traces.py)                                          -> traces/<ClassName>/rank<k>.json.gz
#   2. NCCL flight-recorder dumps of two hangs: a torch CSV schedule whose P2P order NCCL cannot satisfy
#      (bench/hang_csv.py) and EP all-to-alls issued in different orders (bench/hang_a2a.py), with fr_trace's
#      analysis beside them                                               -> hangs/<name>/
#   3. `pptl run` of 1f1b and zbv (pp 4, 8 micro-batches, anchor workload) -> runs/
# OUT ends up with at most 6 files: log.txt (everything printed), artifacts.tar.gz (hangs, runs, plans, logs),
# traces.tar.gz (split into traces.tar.gz.part<N> of 15 MiB if larger than that).
#   bash bench/gpu_artifacts.sh OUT            # DEVICE=cpu: gloo and a tiny workload, to test the script
set -u
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
export PYTHONPATH=. PYTHONUNBUFFERED=1
OUT=${1:?usage: bench/gpu_artifacts.sh OUT}
DEVICE=${DEVICE:-cuda}
BUDGET=${BUDGET:-520}   # seconds for all parts; the device allows 600 per command
cd "$(dirname "$0")/.."
mkdir -p "$OUT"
OUT=$(cd "$OUT" && pwd)
W=$(mktemp -d)          # the work folder: only the tarballs and the log go to OUT
exec > >(tee -a "$OUT/log.txt") 2>&1
TEE_PID=$!
T0=$SECONDS
if [ "$DEVICE" = cpu ]; then
  TRACE_SIZE=(--hidden 64 --tokens 32); HANG_CSV_SIZE=(--hidden 64 --tokens 4096); A2A_SIZE=(--mib 1)
  WL='"hidden":64,"tokens":16,"dtype":"float32"'
else
  TRACE_SIZE=(); HANG_CSV_SIZE=(); A2A_SIZE=(); WL='"hidden":4096,"tokens":2048,"dtype":"bfloat16"'
fi

# limit SECONDS: the part's own limit, cut to what is left of BUDGET (at least 5 s)
limit() { local left=$((BUDGET - (SECONDS - T0))); [ "$left" -lt "$1" ] && echo $((left > 5 ? left : 5)) || echo "$1"; }
part() { echo; echo "=== [$((SECONDS - T0)) s] $*"; }
summary() { echo "--- files under $1:"; (cd "$1" && find . -type f -printf '%p %s\n' | sort | head -80); }

part "machine"
date -u; git log -1 --oneline 2>/dev/null
nvidia-smi --query-gpu=index,name,memory.total,driver_version --format=csv 2>/dev/null || echo "no nvidia-smi"
python3 -c "import torch, sys; print('python', sys.version.split()[0], 'torch', torch.__version__, 'cuda', torch.version.cuda, 'nccl', torch.cuda.nccl.version() if torch.cuda.is_available() else None, 'gpus', torch.cuda.device_count())"

part "1. profiler traces (bench/record_traces.py)"
timeout -k 5 "$(limit 150)" python3 -m torch.distributed.run --nproc-per-node 4 bench/record_traces.py \
  --device "$DEVICE" --mb 8 --out "$W" "${TRACE_SIZE[@]}"
echo "record_traces exit $?"
summary "$W/traces" 2>/dev/null

hang() {  # name script args...
  local name=$1 script=$2; shift 2
  local d="$W/hangs/$name"
  mkdir -p "$d"
  timeout -k 5 "$(limit 80)" python3 bench/_spawn.py -n 4 --timeout "$(($(limit 80) - 5))" --log-dir "$d/logs" -- \
    python3 "$script" --device "$DEVICE" --dump-dir "$d/dumps" "$@"
  echo "$name exit $?"
  for f in "$d"/logs/rank*.log; do echo "-- $f (last lines)"; grep -v Warning "$f" | tail -n 6 | cut -c1-400; done
  for sub in dumps dumps_manual; do
    [ -d "$d/$sub" ] && ls "$d/$sub"/nccl_trace_rank_* >/dev/null 2>&1 || { echo "no dumps in $sub"; continue; }
    for mode in "" "-j"; do
      local o="$d/fr_trace_${sub}${mode:+_entries}.txt"
      timeout -k 5 "$(limit 25)" python3 -m torch.distributed.flight_recorder.fr_trace $mode "$d/$sub" > "$o" 2>&1
      echo "fr_trace $mode $sub exit $? -> $(basename "$o") ($(wc -l < "$o") lines)"; head -n 30 "$o" | cut -c1-300
    done
  done
  summary "$d"
}

part "2a. hang: torch CSV schedule with an NCCL-unsafe P2P order (bench/hang_csv.py)"
mkdir -p "$W/hangs/csv_nccl_order"
cp fixtures/csv/invalid/hang_nccl_order.csv "$W/hangs/csv_nccl_order/"
python3 -m pptl check fixtures/csv/invalid/hang_nccl_order.csv --p2p nccl 2>&1 | tee "$W/hangs/csv_nccl_order/pptl_check_nccl.txt"
echo "pptl check --p2p nccl exit ${PIPESTATUS[0]} (1 expected)"
python3 -m pptl check fixtures/csv/invalid/hang_nccl_order.csv --p2p nccl --output json > "$W/hangs/csv_nccl_order/pptl_check_nccl.json" 2>/dev/null
hang csv_nccl_order bench/hang_csv.py "${HANG_CSV_SIZE[@]}"

part "2b. hang: EP all-to-alls in different orders on two groups (bench/hang_a2a.py)"
hang a2a_order bench/hang_a2a.py "${A2A_SIZE[@]}"

part "3. pptl run: 1f1b and zbv, pp 4, 8 micro-batches, anchor workload"
mkdir -p "$W/runs"
for s in "1f1b 1 4" "zbv 2 2"; do
  set -- $s
  echo "{\"schedule\":\"$1\",\"pp\":4,\"microbatches\":8,\"vpp\":$2,\"workload\":{$WL,\"layers_per_stage\":$3}}" > "$W/runs/cfg_$1.json"
  python3 -m pptl plan "$W/runs/cfg_$1.json" -o "$W/runs/plan_$1.json" | tail -n 3
  python3 -m pptl export "$W/runs/plan_$1.json" --to torch-csv --comms -o "$W/runs/plan_$1.csv" 2>&1 | tail -n 1
  timeout -k 5 "$(limit 70)" python3 -m pptl run "$W/runs/plan_$1.json" --gpus 4 --device "$DEVICE" --steps 3 \
    --warmup 1 --timeout 50 -o "$W/runs/measured_$1.json"
  echo "pptl run $1 exit $?"
done
summary "$W/runs"

part "pack"
tar -cf - -C "$W" hangs runs | gzip -9 > "$OUT/artifacts.tar.gz"
[ -d "$W/traces" ] && tar -cf - -C "$W" traces | gzip -9 > "$OUT/traces.tar.gz"
if [ -f "$OUT/traces.tar.gz" ] && [ "$(stat -c %s "$OUT/traces.tar.gz")" -gt $((15 * 1024 * 1024)) ]; then
  split -b 15m -d -a 1 "$OUT/traces.tar.gz" "$OUT/traces.tar.gz.part" && rm "$OUT/traces.tar.gz"
  echo "traces split: cat traces.tar.gz.part* > traces.tar.gz"
fi
rm -rf "$W"
ls -l "$OUT"
echo "done in $((SECONDS - T0)) s"
exec >&- 2>&-
wait "$TEE_PID"  # log.txt complete before the command returns
