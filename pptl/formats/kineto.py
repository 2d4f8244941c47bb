"""One rank's torch profiler (Kineto) chrome trace, reduced to what pptl reads from it.

The trace is a JSON object whose ``traceEvents`` hold (see ``torch/csrc/profiler`` and Kineto's
``ChromeTraceLogger``):

- ``"ph": "X"`` complete events: ``cat`` ``user_annotation`` (``record_function`` ranges on a CPU
  thread, ``PP:<action>`` in torch.distributed.pipelining), ``gpu_user_annotation`` (the same range
  projected onto a GPU stream, only for kernels launched from the thread that opened it),
  ``kernel`` / ``gpu_memcpy`` / ``gpu_memset`` (GPU work; ``tid`` is the stream), ``cuda_runtime`` /
  ``cuda_driver`` (the CPU call that launched it), ``cpu_op`` (aten ops, ``autograd::engine::
  evaluate_function: ...`` for backward nodes, ``c10d::send`` / ``record_param_comms`` for P2P).
  Kernels and their launches share ``args.correlation``.
- ``"ph": "s"`` / ``"f"`` flows: ``cat`` ``ac2g`` (launch -> kernel, ``id`` = correlation) and
  ``fwdbwd`` (a forward op -> the backward node it created).

Everything else is ignored. The input is hostile: malformed events are skipped and counted,
numbers are bounded, nothing is executed.
"""
from __future__ import annotations

import bisect
from dataclasses import dataclass, field
from typing import Any, Mapping

from pptl.errors import InputError
from pptl.formats._quote import quoted
from pptl.timeline import MAX_TIME

__all__ = ["Span", "Kernel", "RankTrace", "parse_trace", "is_comm_name", "PP_PREFIX"]

PP_PREFIX = "PP:"
_GPU_CATS = frozenset({"kernel", "gpu_memcpy", "gpu_memset"})
_LAUNCH_CATS = frozenset({"cuda_runtime", "cuda_driver"})
_CPU_CATS = frozenset({"user_annotation", "cpu_op"})
_COMM_PREFIXES = ("nccl:", "gloo:", "c10d::send", "c10d::recv", "c10d::batch_isend_irecv", "record_param_comms")
_COMM_KERNELS = ("nccl", "ncclDevKernel", "ncclKernel")
#: gloo's range around one receive's work: from its post to the ``wait()`` that returned it.
_GLOO_RECV = "gloo:recv"


def is_comm_name(name: str) -> bool:
    """A CPU range that posts point-to-point or collective communication."""
    return name.startswith(_COMM_PREFIXES)


@dataclass(frozen=True, slots=True)
class Span:
    """A range on one thread (CPU) or stream (GPU annotation), in microseconds."""

    name: str
    tid: Any
    start: float
    end: float
    cat: str = ""


@dataclass(frozen=True, slots=True)
class Kernel:
    """GPU work (kernel, memcpy, memset) and, when the trace ties it to one, its launch."""

    start: float
    end: float
    stream: Any
    comm: bool
    """An NCCL kernel (its duration mixes waiting for the peer and the transfer)."""
    launch: float | None = None
    """CPU time of the launch call (``cudaLaunchKernel`` start)."""
    launch_tid: Any = None


@dataclass(frozen=True)
class RankTrace:
    """What one rank's trace holds, sorted by start time."""

    cpu: list[Span]
    """``user_annotation`` and ``cpu_op`` ranges."""
    gpu_annotations: list[Span]
    kernels: list[Kernel]
    """Sorted by launch time (kernels with no known launch last, by start)."""
    flow_sources: dict[Any, list[float]] = field(default_factory=dict)
    """``fwdbwd`` flow starts: tid -> sorted times (a forward op that made an autograd node)."""
    skipped: int = 0
    """Malformed events left out."""
    unlinked: int = 0
    """Kernels the trace does not tie to a launch."""

    @property
    def has_gpu(self) -> bool:
        return bool(self.kernels)

    def kernels_launched(self, start: float, end: float) -> list[Kernel]:
        """Kernels whose launch call began within [start, end] on any thread of the rank."""
        lo = bisect.bisect_left(self._launch_times, start)
        hi = bisect.bisect_right(self._launch_times, end)
        return self.kernels[lo:hi]

    def kernels_before(self, t: float) -> list[Kernel]:
        """Kernels launched before CPU time ``t``."""
        return self.kernels[:bisect.bisect_left(self._launch_times, t)]

    @property
    def _launch_times(self) -> list[float]:
        cached = self.__dict__.get("_lt")
        if cached is None:
            cached = [k.launch for k in self.kernels if k.launch is not None]
            self.__dict__["_lt"] = cached
        return cached

    def stream_time_at(self, t: float) -> float | None:
        """Where the rank's non-communication GPU work stood at CPU time ``t``: the latest end of
        the kernels launched before ``t`` (None when none was)."""
        ends = self.__dict__.get("_pe")
        if ends is None:
            ends, best = [], None
            for k in self.kernels:
                if k.launch is None:
                    break
                if not k.comm:
                    best = k.end if best is None else max(best, k.end)
                ends.append(best)
            self.__dict__["_pe"] = ends
        i = bisect.bisect_left(self._launch_times, t)
        return ends[i - 1] if i > 0 else None

    def recv_posted(self, start: float, end: float) -> float | None:
        """The end of the last gloo receive posted within [start, end] (None: none was): when the
        ``wait()`` on it returned, so when the data was there at the latest."""
        starts, ends, _ = self._gloo_recvs
        i = bisect.bisect_right(starts, end)
        return ends[i - 1] if i > 0 and starts[i - 1] >= start else None

    def recv_waited(self, start: float, end: float) -> float | None:
        """The latest end of a gloo receive within [start, end] (None: none ended there): where a range
        that waited on it stopped waiting."""
        _, _, ends = self._gloo_recvs
        i = bisect.bisect_right(ends, end)
        return ends[i - 1] if i > 0 and ends[i - 1] >= start else None

    @property
    def _gloo_recvs(self) -> tuple[list[float], list[float], list[float]]:
        """``gloo:recv`` ranges (post to ``wait()``): starts, ends in the same order, ends sorted. On a
        trace without GPU work they are the only record of when received data was there."""
        cached = self.__dict__.get("_gr")
        if cached is None:
            spans = [sp for sp in self.cpu if sp.name == _GLOO_RECV]  # self.cpu is sorted by start
            cached = ([sp.start for sp in spans], [sp.end for sp in spans], sorted(sp.end for sp in spans))
            self.__dict__["_gr"] = cached
        return cached

    def has_flow_source(self, tid: Any, start: float, end: float) -> bool:
        times = self.flow_sources.get(tid)
        if not times:
            return False
        i = bisect.bisect_left(times, start)
        return i < len(times) and times[i] <= end


def _num(v: Any) -> float | None:
    if isinstance(v, bool) or not isinstance(v, (int, float)):
        return None
    v = float(v)
    return v if -MAX_TIME <= v <= MAX_TIME else None


def _key(v: Any) -> Any:
    """pid/tid/ids as hashable keys (strings or numbers; anything else is one bucket)."""
    return v if isinstance(v, (int, str)) and not isinstance(v, bool) else None


def parse_trace(data: Mapping, source: str) -> RankTrace:
    """Reduce a trace to spans, kernels and their launches.

    Raises:
        InputError: ``baseTimeNanoseconds`` is not a bounded number.
    """
    base = data.get("baseTimeNanoseconds", 0)
    ok = isinstance(base, (int, float)) and not isinstance(base, bool) and abs(base) <= MAX_TIME * 1000
    if not ok:
        raise InputError(f"{source}: field 'baseTimeNanoseconds': got {quoted(base)}, expected a finite number within "
                         f"+-{MAX_TIME * 1000:g}")
    base_us = base / 1000.0
    cpu: list[Span] = []
    gpu_ann: list[Span] = []
    raw_kernels: list[tuple[float, float, Any, bool, Any]] = []
    launches: dict[Any, tuple[float, Any]] = {}
    flow_s: dict[Any, tuple[float, Any]] = {}
    flow_f: dict[tuple[Any, float], list[Any]] = {}
    fwdbwd: dict[Any, list[float]] = {}
    skipped = 0
    for e in data["traceEvents"]:
        if not isinstance(e, Mapping):
            skipped += 1
            continue
        ph = e.get("ph")
        cat = e.get("cat")
        if cat is not None and not isinstance(cat, str):
            skipped += 1
            continue
        if ph == "X":
            ts, dur = _num(e.get("ts")), _num(e.get("dur", 0))
            name = e.get("name")
            if ts is None or dur is None or dur < 0 or not isinstance(name, str):
                if isinstance(name, str) and name.startswith(PP_PREFIX):
                    # An action's own range: dropping it would lose the action; say which one is broken.
                    raise InputError(f"{source}: range {quoted(name)} at ts {quoted(e.get('ts'))} has dur {quoted(e.get('dur', 0))}; "
                                     f"expected a ts within +-{MAX_TIME:g} and a dur in 0..{MAX_TIME:g} microseconds")
                skipped += 1
                continue
            ts += base_us
            tid = _key(e.get("tid"))
            if cat in _CPU_CATS or cat is None:  # a range with no category: a CPU range, as record_function's
                cpu.append(Span(name, tid, ts, ts + dur, cat or "user_annotation"))
            elif cat == "gpu_user_annotation":
                gpu_ann.append(Span(name, tid, ts, ts + dur, cat))
            elif cat in _GPU_CATS:
                args = e.get("args")
                corr = _key(args.get("correlation")) if isinstance(args, Mapping) else None
                comm = cat == "kernel" and name.startswith(_COMM_KERNELS)
                raw_kernels.append((ts, ts + dur, tid, comm, corr))
            elif cat in _LAUNCH_CATS:
                args = e.get("args")
                corr = _key(args.get("correlation")) if isinstance(args, Mapping) else None
                if corr is not None:
                    launches[corr] = (ts, tid)
        elif ph in ("s", "f") and cat in ("ac2g", "fwdbwd"):
            ts = _num(e.get("ts"))
            fid = _key(e.get("id"))
            if ts is None or fid is None:
                skipped += 1
                continue
            ts += base_us
            tid = _key(e.get("tid"))
            if cat == "fwdbwd":
                if ph == "s":
                    fwdbwd.setdefault(tid, []).append(ts)
            elif ph == "s":
                flow_s[fid] = (ts, tid)
            else:
                flow_f.setdefault((tid, ts), []).append(fid)
    kernels: list[Kernel] = []
    unlinked = 0
    for s, e_, stream, comm, corr in raw_kernels:
        hit = launches.get(corr) if corr is not None else None
        if hit is None:
            # No correlation in args: the ac2g flow that ends on this kernel names it.
            ids = flow_f.get((stream, s))
            hit = flow_s.get(ids.pop(0)) if ids else None  # two kernels can start at one time (zero length)
        if hit is None:
            unlinked += 1
            kernels.append(Kernel(s, e_, stream, comm))
        else:
            kernels.append(Kernel(s, e_, stream, comm, hit[0], hit[1]))
    kernels.sort(key=lambda k: (k.launch is None, k.launch if k.launch is not None else k.start, k.start))
    cpu.sort(key=lambda sp: (sp.start, -sp.end))
    gpu_ann.sort(key=lambda sp: (sp.start, -sp.end))
    for times in fwdbwd.values():
        times.sort()
    return RankTrace(cpu, gpu_ann, kernels, fwdbwd, skipped, unlinked)
