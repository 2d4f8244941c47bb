#!/usr/bin/env bash
# The GPU proof of `pptl whatif` (issue 36) in one command on 2 GPUs: a calibrating 1F1B run, 50 later
# steps of three families, the same with a straggler, and the predictions checked. Results in OUT
# (default out/whatif): results.json, table.md, whatif_gpu.png, work.tar.gz, suite.log.
#   bench/whatif_gpu.sh [OUT] [extra bench/whatif_gpu.py options]
exec "$(dirname "$0")/_gpu_py.sh" whatif_gpu out/whatif "$@"
