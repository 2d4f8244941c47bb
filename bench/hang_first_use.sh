#!/usr/bin/env bash
# The plan that hung `pptl run` alone (docs/benchmarks.md "The same plan alone still hung"): interleaved 1F1B,
# pp 2, vpp 2, 13 micro-batches in one group, h2816 t5632 bf16, run once in each message mode with
# --timeout HANG_S. A run that hangs is stopped by pptl, which keeps the partial timeline with every host's
# last op (meta.extra.hosts) for `pptl diagnose`, and each rank's log holds every thread's Python stack as
# it stopped (where its host stood); the main thread's innermost pptl frames are printed.
#   OUT=/path bash bench/hang_first_use.sh [MODE ...]     (default: sync-send overlap inline)
#   DEVICE=cpu HIDDEN=64 TOKENS=16 bash bench/hang_first_use.sh    (the script end to end on gloo)
# Writes $OUT/first_use.tar.gz: per mode its report, partial or full timeline, and the ranks' logs.
set -u
OUT=${OUT:-out}; W=$(mktemp -d); mkdir -p "$OUT"
HANG_S=${HANG_S:-60}; DEVICE=${DEVICE:-cuda}; HIDDEN=${HIDDEN:-2816}; TOKENS=${TOKENS:-5632}
export PYTHONPATH=$PWD NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
MODES=${*:-sync-send overlap inline}
printf 'schedule: interleaved-1f1b\npp: 2\nvpp: 2\nmicrobatches: 13\ngroup_size: 13\nworkload: {hidden: %s, tokens: %s, dtype: bfloat16, stage_layers: [4, 3, 3, 6]}\n' \
    "$HIDDEN" "$TOKENS" > "$W/plan.yaml"
python3 -m pptl plan "$W/plan.yaml" -o "$W/plan.json" > /dev/null 2>&1 || exit 2
for mode in $MODES; do
  mkdir -p "$W/$mode"
  timeout $((HANG_S + 120)) python3 -m pptl run "$W/plan.json" --device "$DEVICE" --messages "$mode" --steps 5 \
      --warmup 2 --timeout "$HANG_S" -o "$W/$mode/measured.json" > "$W/$mode/run.txt" 2>&1
  echo "exit $?" >> "$W/$mode/run.txt"
  logs=$(grep -o '/tmp/pptl-run-[A-Za-z0-9_]*' "$W/$mode/run.txt" | head -1)
  [ -n "$logs" ] && cp "$logs"/rank*.log "$W/$mode/" 2>/dev/null
  if [ -f "$W/$mode/measured.json" ] && grep -q '"partial"' "$W/$mode/measured.json"; then
    python3 -m pptl diagnose "$W/$mode/measured.json" --plan "$W/plan.json" > "$W/$mode/diagnose.txt" 2>&1
  fi
  echo "== $mode"; grep -v '^\s*$' "$W/$mode/run.txt" | grep -i "error\|^step \|sync-send:\|allocator:\|exit" | cut -c1-300
  head -1 "$W/$mode/diagnose.txt" 2>/dev/null | cut -c1-600
  [ -f "$W/$mode/measured.json" ] && python3 -c 'import json, sys; x = json.load(open(sys.argv[1]))["meta"]["extra"]
print("  cuda connections", x.get("cuda_connections"), "steps mapping", x.get("steps_mapping"))' "$W/$mode/measured.json"
  for f in "$W/$mode"/rank*.log; do  # the main thread's innermost pptl frames, as the rank stopped
    [ -f "$f" ] && awk '/^(Current thread|Thread) /{b=""} {b=b $0 "\n"} /in run_worker/{printf "%s", b; exit}' "$f" \
        | grep -m3 'pptl/' | sed "s|^|  $(basename "$f"): |"
  done
done
tar -czf "$OUT/first_use.tar.gz" -C "$W" . 2>/dev/null
