"""What a run is asked to do, shared by the launcher and every worker (plain data, no torch).

The launcher writes a :class:`Job` as JSON for the workers it spawns; under ``torchrun`` each
worker builds the same :class:`Job` from its own command line.
"""
from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from pptl.errors import InputError

#: How much slower ``--slow-rank`` may run (the CLI's option type uses it too).
SLOW_FACTOR_RANGE = (1, 100)

__all__ = ["PlanJob", "Job", "job_from_dict", "read_job", "DEFAULT_TIMEOUT", "MAX_TIMEOUT",
           "MESSAGE_MODES", "DEFAULT_MESSAGES"]

#: ``pptl run --messages`` (what each does: :mod:`pptl.run.executor`).
MESSAGE_MODES = ("sync-send", "overlap", "inline")
#: Fastest or within noise of it for every training family on 4 H200s (docs/benchmarks.md).
DEFAULT_MESSAGES = "sync-send"

#: Seconds a rank may wait without progress before the run is stopped (minutes, not hours).
DEFAULT_TIMEOUT = 300.0
#: The longest ``--timeout`` (about 11.6 days): torch's process-group timeout is a timedelta, which 1e30 s
#: overflows inside every rank ("OverflowError: Python int too large to convert to C int").
MAX_TIMEOUT = 1e6

#: CUDA_DEVICE_MAX_CONNECTIONS for the ranks when the user has not set it: the hardware queues CUDA spreads a
#: process's streams over (its default, 8). A rank runs a stream per lane and per channel, and NCCL one more per
#: communicator: past the queues, streams share one, where a receive or send spinning for its peer holds whatever
#: another stream queued behind it. Interleaved 1F1B, pp 2, G = 13 with ``--messages overlap`` (9 streams a rank)
#: stopped in its second step in both launches at 8, and ran at 32 (2 H200s, torch 2.11). 32 is CUDA's largest.
CUDA_CONNECTIONS = 32
#: What CUDA takes where CUDA_DEVICE_MAX_CONNECTIONS is unset.
CUDA_DEFAULT_CONNECTIONS = 8


@dataclass(frozen=True)
class PlanJob:
    plan: str
    """A plan file (JSON) every rank reads."""
    out: str | None = None
    """Where rank 0 writes the measured timeline (None: nowhere)."""
    label: str | None = None
    """The user's name for the plan (the launcher hands ranks a copy in its run folder)."""


@dataclass(frozen=True, kw_only=True)
class Job:
    plans: tuple[PlanJob, ...]
    """Plans run one after the other by the same processes (start-up is paid once)."""
    device: str = "cpu"
    """"cuda" (NCCL) or "cpu" (gloo)."""
    steps: int = 3
    """Timed steps; as many untimed steps run interleaved to measure the instrumentation overhead."""
    warmup: int = 1
    """Steps run first and discarded."""
    verify: bool = False
    timeout: float = DEFAULT_TIMEOUT
    rundir: str | None = None
    """Launcher mode: a folder where each rank keeps its records and its failure, if any."""
    threads: int | None = None
    """CPU threads per rank (gloo runs); None keeps torch's default."""
    messages: str = DEFAULT_MESSAGES
    """How CUDA ranks run SEND/RECV: sync-send, overlap or inline (see :mod:`pptl.run.executor`)."""
    slow_rank: int | None = None
    """A rank made slower on purpose (``--slow-rank``): its compute lane held ``slow_factor`` times
    each op's time (:mod:`pptl.run.slow`); None: every rank at its own speed."""
    slow_factor: float = 1.0
    extra: dict[str, Any] = field(default_factory=dict)

    def to_json(self) -> str:
        d = asdict(self)
        d["plans"] = [asdict(p) for p in self.plans]
        return json.dumps(d)

    def validate(self) -> "Job":
        if self.device not in ("cuda", "cpu"):
            raise InputError(f"--device: got '{self.device}', expected cuda or cpu")
        if self.steps < 1:
            raise InputError(f"--steps: got {self.steps}, expected at least 1")
        if self.warmup < 0:
            raise InputError(f"--warmup: got {self.warmup}, expected 0 or more")
        if not self.timeout > 0:
            raise InputError(f"--timeout: got {self.timeout}, expected a number of seconds > 0")
        if self.timeout > MAX_TIMEOUT:
            raise InputError(f"--timeout: got {self.timeout:g}, expected at most {MAX_TIMEOUT:g} seconds (about 11 days)")
        if self.messages not in MESSAGE_MODES:
            raise InputError(f"--messages: got '{self.messages}', expected {', '.join(MESSAGE_MODES)}")
        if not self.plans:
            raise InputError("give a plan to run")
        if self.slow_rank is not None and self.slow_rank < 0:
            raise InputError(f"--slow-rank: got {self.slow_rank}, expected a rank 0 or more")
        if not (SLOW_FACTOR_RANGE[0] <= self.slow_factor <= SLOW_FACTOR_RANGE[1]):
            raise InputError(f"--slow-factor: got {self.slow_factor}, expected {SLOW_FACTOR_RANGE[0]:g} to "
                             f"{SLOW_FACTOR_RANGE[1]:g} (a rank can only be slowed)")
        return self


def job_from_dict(d: dict[str, Any]) -> Job:
    plans = tuple(PlanJob(**p) for p in d.pop("plans"))
    return Job(plans=plans, **d).validate()


def read_job(path: str | Path) -> Job:
    return job_from_dict(json.loads(Path(path).read_text()))
