#!/usr/bin/env bash
# A new user's flow through `pptl tune`, with the CLI only, on their own model file: the plan to measure,
# one run of it, the ranking from that run, the best plan checked and simulated, then run.
#   bash bench/tune_user_flow.sh [OUTDIR]            (2 GPUs; the model of fixtures/tune/user_h3072.yaml)
#   CFG=fixtures/tune/uneven.yaml RUN="--device cpu" bash bench/tune_user_flow.sh /tmp/flow   (CPU, seconds)
# Prints each command's output; the ranked step of the written plan and its measured median end the log.
set -euo pipefail
CFG=${CFG:-fixtures/tune/user_h3072.yaml}
OUT=${1:-out/user_flow}
RUN=${RUN:-}
STEPS=${STEPS:-7}
mkdir -p "$OUT"
# an editable install whose console script is not on PATH: the module
command -v pptl >/dev/null || pptl() { python3 -m pptl "$@"; }
say() { printf '\n$ %s\n' "$*"; "$@"; }
say pptl tune "$CFG" --calibration-plan "$OUT/cal.json"
# shellcheck disable=SC2086  # RUN holds several options
say pptl run "$OUT/cal.json" --steps "$STEPS" --warmup 2 $RUN -o "$OUT/cal.measured.json"
say pptl tune "$CFG" --costs-from "$OUT/cal.measured.json" --top 12 -o "$OUT/best.json"
say pptl check "$OUT/best.json"
say pptl plan "$OUT/best.json"
# shellcheck disable=SC2086
say pptl run "$OUT/best.json" --steps "$STEPS" --warmup 2 $RUN -o "$OUT/best.measured.json"
