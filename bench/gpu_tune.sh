#!/usr/bin/env bash
# Issue 19 on 4 GPUs: one 1F1B run calibrates `pptl tune`; every family and the top 5 are run and
# compared. Writes tune_gpu.md, tune_gpu.json and pareto.png to $OUT.
#   OUT=/path bash bench/gpu_tune.sh          (DEVICE=cpu: a tiny smoke run on gloo)
set -eu
OUT=${OUT:-out}; mkdir -p "$OUT"
export PYTHONPATH=$PWD NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
python3 bench/gpu_tune.py "$OUT" --device "${DEVICE:-cuda}" --steps "${STEPS:-3}" --warmup "${WARMUP:-1}"
