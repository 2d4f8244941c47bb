"""Synthetic torch profiler (Kineto) traces of a planned schedule, shaped like real ones: CPU
``PP:<action>`` ranges on the main thread, backward kernels launched from autograd's thread, GPU
annotations only for kernels the main thread launched, launches tied to kernels by correlation
ids (or only by ``ac2g`` flows), NCCL kernels for SEND/RECV. The host runs ahead of the GPU."""
from __future__ import annotations

import gzip
import json
from pathlib import Path

from pptl.formats.torch_csv import action_of
from pptl.issue_order import program

MAIN, AUTOGRAD = 100, 101
COMPUTE_STREAM, COMM_STREAM, ANN_STREAM = 7, 20, 7
GPU0 = 1_000_000.0  # us: the GPU runs this far behind the host
BASE_NS = 1_790_000_000_000_000_000


def rank_traces(schedule, sim, *, scale: float = 1000.0, corr_in_args: bool = True, gpu_annotations: bool = True,
                fsdp: bool = False, single_stage: bool = False) -> list[dict]:
    """One trace dict per rank; op i runs on the GPU at sim times x ``scale`` us (+ GPU0)."""
    out = []
    corr = 1
    for rank, seq in sorted(program(schedule).items()):
        ev: list[dict] = []
        cpu_t = 0.0

        def cpu_range(name: str, start: float, end: float, cat: str = "user_annotation", tid: int = MAIN) -> None:
            ev.append({"ph": "X", "cat": cat, "name": name, "pid": rank, "tid": tid, "ts": start, "dur": end - start})

        if fsdp and not single_stage:
            cpu_range(f"PP:{rank}UNSHARD", cpu_t, cpu_t + 5)
            cpu_t += 10
        if single_stage:  # torch's single-stage schedules post a RECV right before its consumer
            user = {u: sim.start[v] for u, v in schedule.deps if schedule.ops[u].kind == "RECV"}
            seq = sorted(seq, key=lambda i: (user.get(i, sim.start[i]), schedule.ops[i].lane == "compute"))
        for i in seq:
            op = schedule.ops[i]
            name = str(action_of(op))
            gs, ge = GPU0 + scale * sim.start[i], GPU0 + scale * sim.end[i]
            s0 = cpu_t
            comm = op.kind in ("SEND", "RECV")
            if single_stage and comm:
                cpu_range("c10d::send" if op.kind == "SEND" else "c10d::recv_", s0, s0 + 8, "cpu_op")
            elif single_stage:
                if op.kind == "F":
                    cpu_range("aten::linear", s0, s0 + 8, "cpu_op")
                    ev.append({"ph": "s", "cat": "fwdbwd", "name": "fwdbwd", "id": corr, "pid": rank, "tid": MAIN,
                               "ts": s0})
                else:
                    cpu_range("autograd::engine::evaluate_function: AddmmBackward0", s0, s0 + 8, "cpu_op",
                              AUTOGRAD)
            else:
                cpu_range(f"PP:{name}", s0, s0 + 8)
            tid = AUTOGRAD if op.kind in ("B", "I", "W") else MAIN
            if comm:
                parts = [(gs, max(ge, gs + 1.0), COMM_STREAM, "ncclDevKernel_SendRecv")]
            else:
                mid = (gs + ge) / 2
                parts = [(gs, mid, COMPUTE_STREAM, "sm90_gemm"), (mid, ge, COMPUTE_STREAM, "elementwise")]
            for k, (ks, ke, stream, kname) in enumerate(parts):
                launch = s0 + 1 + k
                kernel = {"ph": "X", "cat": "kernel", "name": kname, "pid": 0, "tid": stream, "ts": ks,
                          "dur": ke - ks}
                runtime = {"ph": "X", "cat": "cuda_runtime", "name": "cudaLaunchKernel", "pid": rank, "tid": tid,
                           "ts": launch, "dur": 0.5}
                if corr_in_args:
                    kernel["args"] = {"correlation": corr}
                    runtime["args"] = {"correlation": corr}
                else:
                    ev.append({"ph": "s", "cat": "ac2g", "name": "ac2g", "id": corr, "pid": rank, "tid": tid,
                               "ts": launch})
                    ev.append({"ph": "f", "cat": "ac2g", "name": "ac2g", "id": corr, "pid": 0, "tid": stream,
                               "ts": ks, "bp": "e"})
                ev += [kernel, runtime]
                corr += 1
            if gpu_annotations and tid == MAIN and not single_stage:
                ev.append({"ph": "X", "cat": "gpu_user_annotation", "name": f"PP:{name}", "pid": 0,
                           "tid": ANN_STREAM, "ts": gs, "dur": ge - gs})
            cpu_t += 10
        if fsdp and not single_stage:
            cpu_range(f"PP:{rank}REDUCE_GRAD", cpu_t, cpu_t + 5)
        out.append({"schemaVersion": 1, "baseTimeNanoseconds": BASE_NS, "distributedInfo": {"rank": rank},
                    "traceEvents": ev})
    return out


def write(folder: Path, traces: list[dict], *, gz: bool = True) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    for r, t in enumerate(traces):
        raw = json.dumps(t).encode()
        if gz:
            (folder / f"rank{r}.json.gz").write_bytes(gzip.compress(raw))
        else:
            (folder / f"rank{r}.json").write_bytes(raw)
    return folder
