#!/usr/bin/env bash
# The hang corpus of docs/diagnose.md on 2 GPUs in one command: every kind of bench/hang_corpus.py at once (each
# under its own `timeout`, the NCCL watchdog dumping on a short process-group timeout), then torchfrtrace and
# pptl diagnose on each kind's folder. A kind's folder holds its dumps, the ranks' logs and plan.json, as a
# user's dump folder would.
#   OUT=/path bash bench/hang_corpus.sh          # -> $OUT/log.txt, $OUT/corpus.tar.gz
#   DEVICE=cpu OUT=/tmp/c bash bench/hang_corpus.sh   # gloo, tiny messages: checks that every kind starts and hangs
set -u
cd "$(dirname "$0")/.."
export PYTHONPATH=$PWD PYTHONUNBUFFERED=1 NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
export TORCH_NCCL_ENABLE_TIMING=1 TORCH_NCCL_WAIT_TIMEOUT_DUMP_MILSEC=${DUMP_WAIT_MS:-8000}
OUT=${OUT:-out}; DEVICE=${DEVICE:-cuda}; PG_TIMEOUT=${PG_TIMEOUT:-12}; KIND_LIMIT=${KIND_LIMIT:-90}
mkdir -p "$OUT"; OUT=$(cd "$OUT" && pwd)
W=$(mktemp -d); C="$W/corpus"; mkdir -p "$C"
exec > >(tee -a "$OUT/log.txt") 2>&1
SIZE=(); [ "$DEVICE" = cpu ] && SIZE=(--tokens 64 --hidden 32)
echo "# $(date -u '+%F %T') UTC"
nvidia-smi --query-gpu=index,name,memory.total,driver_version --format=csv 2>/dev/null || echo "no nvidia-smi"
python3 -c "import torch, sys; print('python', sys.version.split()[0], 'torch', torch.__version__, 'cuda', torch.version.cuda, 'nccl', torch.cuda.nccl.version() if torch.cuda.is_available() else None)"
KINDS=${ONLY:-$(python3 bench/hang_corpus.py --list | sed "s/ rank .*//" | uniq)}
T0=$SECONDS; PORT=29400; PIDS=()
for k in $KINDS; do  # all kinds at once: each is 2 processes, mostly idle once hung
  PORT=$((PORT + 11))
  ( timeout -k 5 "$KIND_LIMIT" python3 bench/_spawn.py -n 2 --port "$PORT" --timeout "$((KIND_LIMIT - 10))" \
      --log-dir "$C/$k" -- python3 bench/hang_corpus.py "$k" --device "$DEVICE" --dump-dir "$C/$k" \
      --pg-timeout "$PG_TIMEOUT" "${SIZE[@]}" > "$C/$k.spawn.txt" 2>&1; echo "exit $?" >> "$C/$k.spawn.txt" ) &
  PIDS+=($!)
done
wait "${PIDS[@]}"  # not a bare wait: that would wait for the tee of the log too
PIDS=()
echo "=== all kinds done after $((SECONDS - T0)) s"
FR=(python3 -m torch.distributed.flight_recorder.fr_trace); command -v torchfrtrace >/dev/null && FR=(torchfrtrace)
echo "torchfrtrace: ${FR[*]}"
for k in $KINDS; do
  d="$C/$k"
  echo; echo "=================== $k"; cat "$d.spawn.txt"
  for f in "$d"/rank*.log; do echo "-- $(basename "$f")"; grep -v -i warn "$f" | grep -v '^\s*$' | tail -n 8 | cut -c1-300; done
  ls -l "$d" | tail -n +2 | awk '{print "   ", $5, $9}'
  ls "$d"/nccl_trace_rank_* >/dev/null 2>&1 || { echo "no dumps"; continue; }
  { for mode in "" "-j" "--allow-incomplete-ranks"; do
      echo "\$ ${FR[*]} $k --prefix nccl_trace_rank_ $mode"
      timeout -k 3 30 "${FR[@]}" "$d" --prefix nccl_trace_rank_ $mode 2>&1 | grep -v -i 'tabulate' | head -n 150
      echo "exit ${PIPESTATUS[0]}"
    done; } > "$C/$k.fr_trace.txt" 2>&1 &
  PIDS+=($!)
  { echo "\$ pptl diagnose $k"; timeout 60 python3 -m pptl diagnose "$d" 2>&1 | head -n 60; echo "exit ${PIPESTATUS[0]}"; } \
    > "$C/$k.pptl.txt" 2>&1 &
  PIDS+=($!)
done
[ ${#PIDS[@]} -gt 0 ] && wait "${PIDS[@]}"
for k in $KINDS; do echo; echo "=================== $k: torchfrtrace"; head -n 60 "$C/$k.fr_trace.txt"; done
tar -czf "$OUT/corpus.tar.gz" -C "$W" corpus
echo "=== done after $((SECONDS - T0)) s; $(du -h "$OUT/corpus.tar.gz" | cut -f1) corpus.tar.gz"
