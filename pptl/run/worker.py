"""One process of a run (one rank): join the process group, run each plan of the job, hand rank 0
the records, and have rank 0 write the measured timeline (and check ``--verify``).

Started by :mod:`pptl.run.launcher` (one process per rank, ``--job FILE``) or by ``torchrun``
(``python -m pptl.run PLAN``; rank and world come from the environment). On an error the rank
writes what it measured and a one-line failure (naming itself and the op) to the run folder,
prints that line, and exits 1 without waiting for its peers; the launcher (or torchrun) stops
the others.
"""
from __future__ import annotations

import json
import os
import re
import sys
import time
from datetime import timedelta
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist

from pptl.errors import InputError, PptlError
from pptl.fileio import atomic_write
from pptl.run.executor import Fault, OpFailure
from pptl.run.options import CUDA_DEFAULT_CONNECTIONS, Job, PlanJob
from pptl.run.program import Program, build_program, refuse_invalid, workload_of
from pptl.run.results import build_timeline

__all__ = ["run_worker", "failure_path", "records_path"]

#: Launcher mode gives the launcher this long to diagnose a hang before a rank's own timeout fires.
_LAUNCHER_MARGIN = 15.0


def records_path(rundir: str, plan: int, rank: int) -> Path:
    return Path(rundir) / f"plan{plan}.rank{rank}.json"


def failure_path(rundir: str, rank: int) -> Path:
    return Path(rundir) / f"failure.rank{rank}.json"


def run_worker(job: Job, *, rank: int, world: int, local_rank: int, init_method: str = "env://") -> int:
    """Run every plan of ``job`` as ``rank``; return the process exit code."""
    cuda = job.device == "cuda"
    margin = _LAUNCHER_MARGIN if job.rundir else 0.0
    board = None
    if job.rundir:
        from pptl.run.progress import Board

        board = Board(Path(job.rundir) / "progress.bin", world)
        board.post(rank, -1, -1, -1)  # started: joining the group and setting up count as setup
    state: dict[str, Any] = {"plan": -1, "executor": None, "payload": None}
    _dump_on_sigterm(job, rank, state)
    try:
        if cuda:
            device = torch.device("cuda", local_rank)
            torch.cuda.set_device(device)
            dist.init_process_group("nccl", init_method=init_method, rank=rank, world_size=world,
                                    timeout=timedelta(seconds=job.timeout + margin), device_id=device)
        else:
            device = torch.device("cpu")
            if job.threads:
                torch.set_num_threads(job.threads)
            dist.init_process_group("gloo", init_method=init_method, rank=rank, world_size=world,
                                    timeout=timedelta(seconds=job.timeout + margin))
        channels: dict[Any, Any] = {}
        # Clock offsets travel over gloo: host stamps between host processes (NCCL would put a GPU
        # round trip on each), so a CUDA run opens a gloo group beside its NCCL ones.
        clock_group = dist.new_group(backend="gloo") if cuda and world > 1 else None
        fault = Fault.from_env()
        for k, pj in enumerate(job.plans):
            state["plan"] = k
            _release_cached(device)
            _run_plan(job, k, pj, rank, world, device, channels, board, fault, state, margin, clock_group)
        dist.barrier()
        dist.destroy_process_group()
        return 0
    except BaseException as e:  # report once, keep what was measured, do not wait for peers
        _fail(job, rank, e, state)
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(1)


def _release_cached(device: torch.device) -> None:
    """Before each plan: free what the previous plan left, so each plan of a launch starts from what a
    launch of that plan alone would start from (its ``start_mib``, ``base_mib`` and ``peak_mib``
    then mean the same).

    - Its executor is a reference cycle (its actions close over it): its weights stay allocated until
      the collector runs.
    - torch keeps a cuBLAS and a cuBLASLt workspace per (handle, CUDA stream) for the life of the
      process (32 MiB for cuBLAS on Hopper), allocated from the caching allocator, so they count in
      ``memory_allocated``. Every plan's executor draws new streams (from torch's pool of 32), and
      the first GEMM on a stream no earlier plan computed on allocates new workspaces: on 4x H200s
      (torch 2.11) each plan of a launch left 65 MiB more allocated on a rank, 1.3 GiB by the 22nd.
      Nothing runs now (synchronized), so they can go; the next GEMM allocates what it needs.
    - Its blocks sit in pools of streams no later plan uses: without ``empty_cache`` each plan maps
      new segments on top of the last one's, and ``max_memory_reserved`` reports the sum.
    """
    import gc

    gc.collect()
    if device.type != "cuda":
        return
    torch.cuda.synchronize(device)
    clear = getattr(torch._C, "_cuda_clearCublasWorkspaces", None)  # in every CUDA build of torch >= 2.0
    if clear is not None:
        clear()
    torch.cuda.empty_cache()


def _activation_step(ex: Any, k: int, device: torch.device, plan: int) -> dict[str, Any]:
    """One more step, untimed and unrecorded, with the allocator read after every op
    (:mod:`pptl.run.memory`): the rank's activation peak in MiB and the op it was reached in (none
    for a plan without ops on this rank)."""
    from pptl.run.memory import Probe, history

    ex.probe = Probe(device)
    with history(os.environ.get("PPTL_MEMORY_HISTORY"), f"plan{plan}.rank{dist.get_rank()}", ex.probe, ex.ids):
        try:
            ex.step(k, timed=False)
        finally:
            probe, ex.probe = ex.probe, None
        torch.cuda.synchronize(device)
    peak = probe.peak()
    if peak is None:
        return {}
    return {"activation_mib": peak.bytes / 2**20, "activation_op": ex.ids[peak.op]}


def _run_plan(job: Job, k: int, pj: PlanJob, rank: int, world: int, device: torch.device,
              channels: dict[Any, Any], board: Any, fault: Fault | None, state: dict[str, Any],
              margin: float, clock_group: Any = None) -> None:
    from pptl.formats.loader import load_any
    from pptl.run import runnable

    plan_path, out = pj.plan, pj.out
    # What this rank holds before the plan sets anything up: what earlier plans of the launch left
    # (nothing, unless something leaks), NCCL's own buffers aside (not the caching allocator's).
    start = torch.cuda.memory_allocated(device) if device.type == "cuda" else 0
    schedule = runnable(load_any(plan_path), plan_path)  # profiler traces too: a measured timeline
    if not job.rundir:  # under torchrun no launcher checked the plan before this rank started
        refuse_invalid(schedule, plan_path)
    program = build_program(schedule, source=plan_path)
    if program.world != world:
        raise InputError(f"{plan_path}: the plan has pp={program.world} ranks but the run has {world} processes")
    _open_channels(program, rank, device, channels)
    from pptl.run.families import executor_class

    ex_cls = executor_class(schedule)
    # A family with messages of its own runs them its way whatever the run asked for.
    messages = job.messages if job.messages in ex_cls.message_modes else "overlap"
    gates = _gates(job, k, program, rank, world, device) if messages != "inline" else None

    def post(step: int, op: int) -> None:
        if board is not None:
            board.post(rank, k, step, op)

    post(-1, -1)
    ex = ex_cls(program, rank, device, channels, timeout=job.timeout + margin, post=post, fault=fault,
                gates=gates, messages=messages)
    program = ex.program  # the executor may refine the issue order and the waits
    ex.prime()  # every first kernel load and allocation on an idle GPU, not inside a step
    if job.slow_rank == rank and job.slow_factor != 1.0:
        from pptl.run.slow import Stretch

        ex.stretch = Stretch(job.slow_factor)
    info = _info(device, world)
    info["gated_receives"] = gates is not None
    info["messages"] = ex.messages
    if device.type == "cuda":  # what `pptl diagnose` weighs against the streams a rank used
        info["cuda_connections"] = _connections()
    if device.type == "cuda" and ex.messages == "sync-send":  # what `pptl diagnose` needs to tell a held SEND
        info["sends_beside_compute"] = sorted(program.op_id(i) for i in program.unheld)
    payload: dict[str, Any] = {"rank": rank, "steps": [], "info": info}
    from pptl.run.clocksync import apply_offsets, host_id, measure_offset

    # Offsets to rank 0's clock at the plan's start and end (run/timebase.py fits them).
    payload["clock"] = {"host": host_id(), "apply": apply_offsets(),
                        "samples": [measure_offset(rank, world, clock_group)]}
    state["executor"], state["payload"] = ex, payload
    total = job.warmup + 2 * job.steps
    if device.type == "cuda":  # the peak from here on: weights, gradients, activations, buffers
        torch.cuda.synchronize(device)
        torch.cuda.reset_peak_memory_stats(device)
        base = torch.cuda.memory_allocated(device)
    sampler = None
    if device.type == "cuda":
        from pptl.run.gpuclock import open_sampler

        sampler = open_sampler(device)
        if sampler is not None:
            sampler.start()
    for step in range(total):
        # After the warmup, timed and untimed steps alternate, so drift hits both alike.
        timed = step < job.warmup or (step - job.warmup) % 2 == 0
        rec = ex.step(step, timed=timed)
        if step >= job.warmup:
            payload["steps"].append(rec)
        if job.rundir:
            _write_json(records_path(job.rundir, k, rank), payload)
    post(total, -1)
    if sampler is not None:
        sampler.stop()
        gpu = sampler.summary(payload["steps"])
        if gpu is not None:
            payload["gpu"] = gpu.to_dict()
    payload["clock"]["samples"].append(measure_offset(rank, world, clock_group))
    if device.type == "cuda":
        torch.cuda.synchronize(device)
        payload["memory"] = {"start_mib": start / 2**20, "base_mib": base / 2**20,
                             "peak_mib": torch.cuda.max_memory_allocated(device) / 2**20}
        if ex.measures_activations:
            payload["memory"].update(_activation_step(ex, total, device, k))
            post(total + 1, -1)
    if gates is not None:
        gates.close(rank)
    if job.verify:
        payload["grads"] = ex.grads()
    payload["report"] = ex.report()
    gathered: list[Any] | None = [None] * world if rank == 0 else None
    dist.gather_object(payload, gathered, dst=0)
    state["executor"] = state["payload"] = None  # nothing of a finished plan outlives it
    if rank != 0:
        return
    extra: dict[str, Any] = {"plan": pj.label or plan_path, "warmup": job.warmup, "workload": _workload_dict(schedule)}
    if ex_cls.full_backward and any(op.kind in ("B", "FB") for op in schedule.ops):
        extra["full_backward"] = ex_cls.full_backward
    if job.slow_rank is not None and job.slow_factor != 1.0:
        extra["slow"] = {"rank": job.slow_rank, "factor": job.slow_factor}
    if job.verify:
        check = getattr(ex_cls, "verify", None) or _verify
        extra["verify"] = check(program, gathered, device).to_dict()  # type: ignore[arg-type]
    memory = {str(p["rank"]): p.pop("memory") for p in gathered if p.get("memory")}  # type: ignore[union-attr]
    # Per rank, MiB: allocated at the plan's start, before its first step, the peak over its steps,
    # and the activations' peak on one more step (pptl.run.memory) with the op it was reached in.
    if memory:
        extra["memory"] = memory
    gpus = {str(p["rank"]): p.pop("gpu") for p in gathered if p.get("gpu")}  # type: ignore[union-attr]
    # Per rank: its SM clock and board power over the timed steps (pptl.run.gpuclock).
    if gpus:
        extra["gpu"] = gpus
    reports = {str(p["rank"]): p.pop("report") for p in gathered if p.get("report")}  # type: ignore[union-attr]
    if reports:
        extra["reports"] = reports
    for p in gathered:  # type: ignore[union-attr]
        p.pop("grads", None)
    timeline = build_timeline(schedule, gathered, extra=extra)  # type: ignore[arg-type]
    finish = getattr(ex_cls, "finish_timeline", None)
    if finish is not None:  # family metrics of the measured timeline (exposed all-to-all, GB/s, ...)
        timeline = finish(schedule, timeline)
    if out:
        from pptl.run.output import write_output

        write_output(out, json.dumps(timeline.to_dict(), separators=(",", ":"), allow_nan=False).encode("utf-8"))


def _gates(job: Job, k: int, program: Program, rank: int, world: int, device: torch.device) -> Any:
    """Receive gates (see :mod:`pptl.run.gates`) when every rank is a CUDA process on this node."""
    if device.type != "cuda" or world < 2 or os.environ.get("PPTL_RUN_GATE", "1") == "0":
        return None
    one_node = bool(job.rundir) or os.environ.get("LOCAL_WORLD_SIZE") == str(world)
    if not one_node:
        return None
    from pptl.run.gates import Gates, gates_path

    gates = Gates(program, rank, device, gates_path(job.rundir, k))
    if gates.enabled:
        return gates
    print(f"warning: rank {rank}: receives not gated ({gates.error})", file=sys.stderr)
    gates.close(rank)
    return None


def _open_channels(program: Program, rank: int, device: torch.device, channels: dict[Any, Any]) -> None:
    """One process group per channel, created in one global order on every rank. Each channel of the
    plan is then warmed with a message of the plan's size, in the same order, so that NCCL sets up
    every connection now: a setup blocks the host until the peer does the same, and in the middle
    of a step two ranks could wait on each other's setups. Channels are kept across plans."""
    options = None
    if device.type == "cuda":
        # NCCL's streams come from the high-priority pool: transfers are not starved by the compute
        # queued ahead of them, and they can never be one of the executor's own (default pool)
        # streams, which would serialize a spinning receive with compute.
        options = dist.ProcessGroupNCCL.Options(is_high_priority_stream=True)
    for ch in program.channels:
        if ch in channels:
            continue
        channels[ch] = dist.new_group([ch[0], ch[1]], pg_options=options)
    w = workload_of(program.schedule)
    from pptl.run.model import DTYPES

    for ch in program.channels:
        a, b = ch[0], ch[1]
        if rank in (a, b):
            t = torch.zeros(w.tokens, w.hidden, dtype=DTYPES[w.dtype], device=device)
            op = dist.isend if rank == a else dist.irecv
            for work in dist.batch_isend_irecv([dist.P2POp(op, t, b if rank == a else a, group=channels[ch])]):
                work.wait()
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def _verify(program: Program, gathered: list[dict[str, Any]], device: torch.device) -> Any:
    from pptl.run.verify import compare_gradients, reference_step

    s = program.schedule
    workload = workload_of(s)
    loss_ref, grads_ref = reference_step(workload, num_stages=s.num_stages, directions=s.directions,
                                         microbatches=s.microbatches, device=device)
    summed: list[list[torch.Tensor] | None] = [None] * s.num_stages
    for p in gathered:
        for key, grads in p["grads"].items():
            stage = int(key.split(",")[1])
            cur = summed[stage]
            summed[stage] = grads if cur is None else [a + b for a, b in zip(cur, grads)]
    missing = [i for i, g in enumerate(summed) if g is None]
    if missing:
        raise InputError(f"--verify: no rank holds stage {missing[0]}")
    last = min(p["steps"][-1]["step"] for p in gathered)
    loss = sum(float(st["loss"]) for p in gathered for st in p["steps"]
               if st["step"] == last and st.get("loss") is not None)
    from pptl.schedules import find_family
    from pptl.schedules._common import required_roles

    if required_roles(find_family(s.family)) == ("F",):  # forward only (inference): the loss is all it makes
        return compare_gradients(workload, loss, loss_ref, None, grads_ref)
    return compare_gradients(workload, loss, loss_ref, summed, grads_ref)  # type: ignore[arg-type]


def _dump_on_sigterm(job: Job, rank: int, state: dict[str, Any]) -> None:
    """When the launcher stops this rank (SIGTERM), keep what it measured and exit.

    The main thread may sit inside a blocking gloo or CUDA call, where a Python signal handler
    would never run; the signal's wakeup byte reaches a helper thread instead, which writes the
    records (it gets the GIL, since the blocked call released it) and ends the process. First it
    writes every thread's Python stack to the rank's log: where the host stood when the run stopped
    (a host that waits for its whole GPU, in an allocation, shows there and nowhere else).
    """
    import faulthandler
    import signal
    import threading

    if threading.current_thread() is not threading.main_thread():
        return
    r, w = os.pipe()
    os.set_blocking(w, False)
    signal.signal(signal.SIGTERM, lambda *_: None)
    signal.set_wakeup_fd(w, warn_on_full_buffer=False)

    def watch() -> None:
        os.read(r, 1)
        print(f"rank {rank}: stopped by the launcher; every thread's stack:", file=sys.stderr, flush=True)
        faulthandler.dump_traceback(file=sys.stderr, all_threads=True)
        _fail(job, rank, _Stopped(f"rank {rank}: stopped by the launcher"), state, quiet=True)
        os._exit(143)

    threading.Thread(target=watch, name="pptl-sigterm", daemon=True).start()


class _Stopped(Exception):
    pass


def _dump_flight_recorder(rank: int) -> None:
    """Write torch's NCCL flight recorder to ``${TORCH_FR_DUMP_TEMP_FILE}<rank>`` (for ``pptl diagnose``).

    torch dumps by itself only when its own collective timeout fires, which comes after ours
    (``--timeout`` plus a margin), so a rank that fails or is stopped dumps here, when the
    recorder is on (``TORCH_NCCL_TRACE_BUFFER_SIZE``) and a file prefix is set. Best effort.
    """
    prefix = os.environ.get("TORCH_FR_DUMP_TEMP_FILE") or os.environ.get("TORCH_NCCL_DEBUG_INFO_TEMP_FILE")
    dump = getattr(torch._C._distributed_c10d, "_dump_nccl_trace", None)
    if not prefix or dump is None or not torch.cuda.is_available():
        return
    try:
        atomic_write(f"{prefix}{rank}", dump(includeCollectives=True, includeStackTraces=False, onlyActive=False))
    except Exception:
        pass


#: How torch says an allocation failed: on CPU "DefaultCPUAllocator: can't allocate memory: you tried to
#: allocate 34359738368 bytes", on CUDA "CUDA out of memory. Tried to allocate 2.00 GiB".
_ALLOC_BYTES = re.compile(r"can't allocate memory: you tried to allocate (\d+) bytes")
_ALLOC_CUDA = re.compile(r"out of memory\. Tried to allocate ([\d.]+ [KMGT]?i?B)")


def _failure_line(rank: int, e: BaseException) -> str:
    """What a rank's unexpected exception says in one line: its type and first line, or for an
    allocation that failed what was asked and what to change (not torch's "[enforce fail at
    alloc_cpu.cpp:127] err == 0. DefaultCPUAllocator: ...")."""
    text = str(e).strip()
    cpu, cuda = _ALLOC_BYTES.search(text), _ALLOC_CUDA.search(text)
    if cpu or cuda or isinstance(e, MemoryError) or type(e).__name__ == "OutOfMemoryError":
        asked = f"{int(cpu.group(1)) / 2**30:.3g} GiB" if cpu else cuda.group(1) if cuda else None
        return (f"rank {rank} ran out of memory{f' allocating {asked}' if asked else ''}; lower --hidden or --tokens "
                "(the synthetic model's width and micro-batch rows)")
    first = text.splitlines()
    return f"rank {rank} failed: {type(e).__name__}: {first[0][:300] if first else ''}"


def _fail(job: Job, rank: int, e: BaseException, state: dict[str, Any], *, quiet: bool = False) -> None:
    _dump_flight_recorder(rank)
    if isinstance(e, OpFailure):
        line = str(e)
    elif isinstance(e, PptlError):
        line = f"rank {rank}: {e}"
    elif isinstance(e, KeyboardInterrupt):
        line = f"rank {rank}: interrupted"
    else:
        line = _failure_line(rank, e)
    ex, payload = state.get("executor"), state.get("payload")
    if ex is not None and payload is not None:
        payload = dict(payload)
        payload["partial"] = {"step": getattr(ex, "_step_index", -1), "events": ex.partial_events()}
        anchor = ex.partial_anchor() if hasattr(ex, "partial_anchor") else None
        if anchor is not None:
            payload["partial"]["anchor_ms"], payload["partial"]["anchor_err_ms"] = anchor
        plan = job.plans[state["plan"]] if 0 <= state["plan"] < len(job.plans) else None
        # Under torchrun there is no run folder: each failing rank keeps its records beside -o.
        path = (records_path(job.rundir, state["plan"], rank) if job.rundir
                else Path(f"{plan.out}.rank{rank}.json") if plan is not None and plan.out else None)
        if path is not None:
            try:
                _write_json(path, payload)
            except Exception:
                pass
    if job.rundir and not quiet:
        _write_json(failure_path(job.rundir, rank), {
            "rank": rank, "plan": state["plan"], "message": line, "time": time.time(),
            "exit_code": e.exit_code if isinstance(e, PptlError) else 1,
            "op": e.op_id if isinstance(e, OpFailure) else None})
    if not quiet:
        print(f"error: {line}", file=sys.stderr)


def _write_json(path: Path, data: Any) -> None:
    atomic_write(path, json.dumps(data, separators=(",", ":")))


def _connections() -> int | None:
    """CUDA_DEVICE_MAX_CONNECTIONS as this rank's CUDA read it (CUDA's default where unset; None where unreadable)."""
    raw = os.environ.get("CUDA_DEVICE_MAX_CONNECTIONS", str(CUDA_DEFAULT_CONNECTIONS)).strip()
    return int(raw) if raw.isdecimal() else None


def _info(device: torch.device, world: int) -> dict[str, Any]:
    name = torch.cuda.get_device_name(device) if device.type == "cuda" else "cpu"
    return {"device": name, "backend": "nccl" if device.type == "cuda" else "gloo", "world": world,
            "torch": torch.__version__}


def _workload_dict(schedule: Any) -> dict[str, Any]:
    w = workload_of(schedule)
    out = {"hidden": w.hidden, "tokens": w.tokens, "layers_per_stage": w.layers_per_stage, "dtype": w.dtype}
    if w.stage_layers is not None:
        out["stage_layers"] = list(w.stage_layers)
    return out
