#!/usr/bin/env bash
# The GPU part of issue 8 in one command (4 GPUs): the MoE overlap plan (pp=2 x ep=2, real all-to-alls), the same
# with activation offloading, interleaved 1F1B of the same layers, and the weight-update plan; each planned, run,
# calibrated (`pptl plan --costs-from`), compared, rerun from the calibrated plan, and drawn in the seed styles.
# OUT (default out/gpu8) gets at most 8 files: results.json, table.md, suite.log, four PNGs, work.tar.gz.
#   bench/gpu_issue8.sh [OUT] [extra bench/gpu_issue8.py options]
exec "$(dirname "$0")/_gpu_py.sh" gpu_issue8 out/gpu8 "$@"
