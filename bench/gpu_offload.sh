#!/usr/bin/env bash
# Issue 21 on 4 GPUs in one command: the issue-8 MoE workload with and without activation offloading (host held
# back to within options.host_lag compute sub-ops of the GPU), calibrated per cost key and context, and the
# issue's targets (memory saving vs the plan, step time, peak per rank, exposed all-to-all, makespan).
# OUT (default out/gpu21) gets table.md, results.json, suite.log and work.tar.gz (configs, plans, timelines: for
# bench/gpu_offload.py --evaluate-only). About 3-5 minutes on 4 H100/H200.
#   bench/gpu_offload.sh [OUT] [extra bench/gpu_offload.py options, e.g. --device cpu --hidden 64 --tokens 32]
exec "$(dirname "$0")/_gpu_py.sh" gpu_offload out/gpu21 "$@"
