"""Test helper: run several plans in one gloo launch and report, at the start of each plan, the tensor
storages of earlier plans that are still alive.

Every tensor an op of the run reads or writes is seen by a dispatch mode, which keeps a weak reference
to its storage tagged with the plan that was running. A weak storage reference expires only when the
last reference of any kind (Python or C++: autograd, a gloo work, a cache) is gone, so a storage still
alive at a later plan's start is one that something kept. (Caches inside CUDA libraries, such as
torch's per-stream cuBLAS workspaces, have no CPU counterpart: they show only in ``start_mib`` on CUDA.)
"""
from __future__ import annotations

import json
from pathlib import Path

import torch
import torch.multiprocessing as mp
from torch.multiprocessing.reductions import StorageWeakRef
from torch.utils._python_dispatch import TorchDispatchMode, _disable_current_modes
from torch.utils._pytree import tree_flatten


class _Storages(TorchDispatchMode):
    def __init__(self) -> None:
        super().__init__()
        self.plan = -1
        self.seen: dict[tuple[int, int], tuple[StorageWeakRef, int, int]] = {}
        self.counts: dict[int, int] = {}

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        for t in tree_flatten((args, kwargs, out))[0]:
            if isinstance(t, torch.Tensor) and t.device.type == "cpu":
                s = t.untyped_storage()
                key = (s.data_ptr(), s.nbytes())
                old = self.seen.get(key)
                if s.nbytes() and (old is None or old[0].expired()):  # a freed address may be reused
                    self.seen[key] = (StorageWeakRef(s), s.nbytes(), self.plan)
                    self.counts[self.plan] = self.counts.get(self.plan, 0) + 1
        return out

    def alive(self) -> dict[int, int]:
        """Earlier plan -> bytes of its storages still alive (no collection here: what the worker
        left is what the plan starts with)."""
        out: dict[int, int] = {}
        for key, (ref, nbytes, plan) in list(self.seen.items()):
            if ref.expired():
                del self.seen[key]
            else:
                out[plan] = out.get(plan, 0) + nbytes
        return out


class _Kept:
    """A deliberate leak (for the probe's own test): every executor stays referenced."""

    executors: list = []


def _rank(rank: int, world: int, job_path: str, init: str, out: str, leak: bool) -> None:
    from pptl.run import worker
    from pptl.run.options import read_job

    probe = _Storages()
    release = worker._release_cached
    log: list[dict[str, int]] = []

    def checked(device: torch.device) -> None:
        release(device)
        with _disable_current_modes():
            log.append({str(k): v for k, v in probe.alive().items()})
        probe.plan += 1

    worker._release_cached = checked
    if leak:
        from pptl.run.executor import Executor

        init_executor = Executor.__init__

        def kept(self, *a, **kw):
            init_executor(self, *a, **kw)
            _Kept.executors.append(self)

        Executor.__init__ = kept
    with probe:
        worker.run_worker(read_job(job_path), rank=rank, world=world, local_rank=rank, init_method=f"file://{init}")
    with _disable_current_modes():
        Path(out).write_text(json.dumps({"alive": log, "recorded": probe.counts}))


def leftovers(plans: list[dict], world: int, tmp: Path, *, leak: bool = False) -> list[dict]:
    """Run ``plans`` (config mappings) in one launch of ``world`` gloo processes. Per rank:
    ``alive`` (at each plan's start: earlier plan -> bytes still alive) and ``recorded`` (plan ->
    storages seen)."""
    from pptl.run.options import Job, PlanJob

    jobs = []
    for k, cfg in enumerate(plans):
        path = tmp / f"plan{k}.json"
        path.write_text(json.dumps(cfg))
        jobs.append(PlanJob(str(path), str(tmp / f"measured{k}.json"), str(path)))
    job = Job(plans=tuple(jobs), device="cpu", steps=1, warmup=1, threads=1, timeout=60)
    job_path = tmp / "job.json"
    job_path.write_text(job.to_json())
    ctx = mp.get_context("spawn")
    procs = [ctx.Process(target=_rank, args=(r, world, str(job_path), str(tmp / "init"), str(tmp / f"rank{r}.json"),
                                             leak)) for r in range(world)]
    for p in procs:
        p.start()
    for p in procs:
        p.join(120)
        if p.is_alive():
            p.kill()
    assert all(p.exitcode == 0 for p in procs), [p.exitcode for p in procs]
    return [json.loads((tmp / f"rank{r}.json").read_text()) for r in range(world)]
