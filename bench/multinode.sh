#!/usr/bin/env bash
# Two torchrun "nodes" of 2 GPUs each on one 4-GPU host (c10d rendezvous on localhost) run a pp 4 plan with
# `python -m pptl.run`; the same commands run on two machines with HEAD's address instead of 127.0.0.1.
# Writes OUT/multinode.log (both nodes' output and the check that every rank ran the plan's order).
#   bench/multinode.sh [OUT]          (OUT defaults to out/multinode; HIDDEN=32 TOKENS=8 for a CPU dry run)
set -u
# NVLink multicast stays off (it can take a shared host's GPUs down); keep these for every process.
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
OUT=${1:-${OUT:-out/multinode}}
cd "$(dirname "$0")/.."
mkdir -p "$OUT"
LOG="$OUT/multinode.log"
WORK=$(mktemp -d)
export PYTHONPATH=$PWD PYTHONUNBUFFERED=1
PORT=${PORT:-29531}
# NPROC=1: two "nodes" of one GPU each (pp 2) on a 2-GPU host
NPROC=${NPROC:-2}; PP=$((2 * NPROC))
{
  echo "# $(date -u +%FT%TZ) $(nvidia-smi --query-gpu=name --format=csv,noheader 2>/dev/null | sort | uniq -c | xargs)"
  python3 -m pptl plan --schedule 1f1b --pp $PP --microbatches 8 -o "$WORK/plan.json" --output json >/dev/null
  # the anchor's block at 4096 wide, 2048 tokens, bf16 (what bench/gpu_suite.py runs)
  python3 - "$WORK/plan.json" "${HIDDEN:-4096}" "${TOKENS:-2048}" <<'PY'
import json, sys
p = json.load(open(sys.argv[1]))
p["config"]["workload"] = {"hidden": int(sys.argv[2]), "tokens": int(sys.argv[3]), "layers_per_stage": 4,
                           "dtype": "bfloat16"}
json.dump(p, open(sys.argv[1], "w"))
PY
  for NODE in 0 1; do
    DEVS=$([ $NODE = 0 ] && seq -s, 0 $((NPROC - 1)) || seq -s, $NPROC $((2 * NPROC - 1)))
    echo "+ CUDA_VISIBLE_DEVICES=$DEVS torchrun --nnodes 2 --nproc-per-node $NPROC --node-rank $NODE --rdzv-backend c10d" \
         "--rdzv-endpoint 127.0.0.1:$PORT --rdzv-id pptl -m pptl.run plan.json --steps 5 -o measured.json"
    CUDA_VISIBLE_DEVICES=$DEVS timeout 240 python3 -m torch.distributed.run --nnodes 2 --nproc-per-node $NPROC \
      --node-rank $NODE --rdzv-backend c10d --rdzv-endpoint 127.0.0.1:$PORT --rdzv-id pptl \
      -m pptl.run "$WORK/plan.json" --steps 5 --warmup 2 -o "$WORK/measured.json" > "$WORK/node$NODE.log" 2>&1 &
    eval "PID$NODE=\$!"
  done
  wait $PID0; RC0=$?
  wait $PID1; RC1=$?
  for NODE in 0 1; do echo "--- node $NODE (exit $([ $NODE = 0 ] && echo $RC0 || echo $RC1))"; grep -v '^\s*$' "$WORK/node$NODE.log" | tail -30; done
  python3 - "$WORK/plan.json" "$WORK/measured.json" <<'PY'
import sys
from pptl.formats.loader import load_any
from pptl.run.report import summary_lines
s, tl = load_any(sys.argv[1]).schedule, load_any(sys.argv[2]).timeline
ex = tl.meta.extra["executed"]
bad = [(r, lane) for (r, lane), order in s.lanes.items() if ex[str(r)][lane] != [s.ops[i].id for i in order]]
print("\n".join(summary_lines(tl)))
print(f"executed order = plan on every rank and lane: {not bad}" + (f" (differs: {bad[:4]})" if bad else ""))
PY
} 2>&1 | tee "$LOG"
