"""The schedule's actions in one rank's profiler trace, each timed on the GPU where possible.

Multi-stage schedules (torch's ``_PipelineScheduleRuntime``: Interleaved1F1B, InterleavedZeroBubble,
ZBVZeroBubble, DualPipeV...) open a CPU range ``PP:<action>`` around every action on the main
thread. An action's GPU time is the span of the kernels *launched* while that range was open, on
any thread of the rank: backward kernels are launched from autograd's own thread, so the GPU
projection of the range (``gpu_user_annotation``) misses them. Then, in order of preference: the
GPU annotation; for an action that launched nothing on a GPU trace (UNSHARD without FSDP), a
zero-length event where its stream stood; the CPU range (only on CPU traces, or with a note).

Single-stage schedules (Schedule1F1B, ScheduleGPipe) open no ``PP:`` range. ScheduleGPipe names
``Forward i`` / ``Backward i`` ranges; otherwise the step is cut at the P2P calls into runs of
forward ops (the main thread's ops that made autograd nodes: ``fwdbwd`` flow sources) and runs of
backward nodes (``autograd::engine::evaluate_function``), numbered in order (both schedules run
micro-batches first in, first out); each ``c10d::send`` / ``c10d::recv_`` becomes a SEND / RECV
timed by the NCCL kernels it launched (``nccl:coalesced`` groups them).
"""
from __future__ import annotations

import re
from collections import Counter, defaultdict
from dataclasses import dataclass
from typing import Iterable

from pptl.config import MAX_OPS
from pptl.errors import InputError
from pptl.formats._quote import counted, quoted
from pptl.formats.kineto import PP_PREFIX, Kernel, RankTrace, Span, is_comm_name
from pptl.formats.torch_csv import Action, parse_action

__all__ = ["Measured", "RankActions", "rank_actions"]

_COMM_ACTIONS = frozenset({"SEND_F", "RECV_F", "SEND_B", "RECV_B"})
_NAMED = re.compile(r"(Forward|Backward) (\d+)")
_BACKWARD_NODE = "autograd::engine::evaluate_function"


@dataclass(frozen=True, slots=True)
class Measured:
    """One action and when it ran (microseconds, the trace's clock)."""

    action: Action
    start: float
    end: float
    launch: float | None = None
    """CPU time its first kernel was launched (None: not known)."""
    source: str = "kernels"
    """kernels, gpu-annotation, stream (no GPU work: zero length where the stream stood) or cpu."""
    cpu: float = 0.0
    """When the rank's thread issued it (its CPU range's start): the rank's program order."""


@dataclass(frozen=True)
class RankActions:
    rows: list[Measured]
    notes: list[str]
    gpu_window: tuple[float, float] | None
    """First kernel start and last kernel end of the step (None on a CPU trace)."""
    multi_stage: bool


def rank_actions(rt: RankTrace, where: str, *, rank: int, step: int | None) -> RankActions:
    """The actions of one profiled step of one rank.

    Raises:
        InputError: no action can be found, a ``PP:`` name is not an action, or ``step`` is absent.
    """
    pp = [s for s in rt.cpu if s.cat == "user_annotation" and s.name.startswith(PP_PREFIX)]
    if not pp:
        pp = [s for s in rt.gpu_annotations if s.name.startswith(PP_PREFIX)]  # only the GPU side was kept
    if pp:
        if len(pp) > MAX_OPS:
            raise InputError(f"{where}: more than the {MAX_OPS:,} 'PP:<action>' ranges pptl accepts")
        named = [(s.name[len(PP_PREFIX):], s) for s in pp]
        return _from_ranges(rt, where, named, step, parse=lambda n: _parse(n, where), multi=True)
    named = [(s.name, s) for s in rt.cpu if s.cat == "user_annotation" and _NAMED.fullmatch(s.name)]
    if named:
        def parse(n: str) -> Action:
            m = _NAMED.fullmatch(n)
            return Action(rank, "F" if m.group(1) == "Forward" else "B", int(m.group(2)))

        return _from_ranges(rt, where, named, step, parse=parse, multi=False)
    return _segmented(rt, where, rank, step)


def _parse(name: str, where: str) -> Action | None:
    try:
        return parse_action(name)
    except ValueError as e:
        raise InputError(f"{where}: range {quoted(PP_PREFIX + name)}: {e}") from None


def _runs(spans: Iterable[tuple[str, Span]]) -> dict[str, list[list[float]]]:
    """Per name, its occurrences: overlapping ranges of one name (one per thread or stream) merge."""
    by_name: dict[str, list[list[float]]] = defaultdict(list)
    for name, sp in sorted(spans, key=lambda t: t[1].start):
        runs = by_name[name]
        if runs and sp.start <= runs[-1][1]:
            runs[-1][1] = max(runs[-1][1], sp.end)
        else:
            runs.append([sp.start, sp.end])
    return by_name


def _from_ranges(rt: RankTrace, where: str, named: list[tuple[str, Span]], step: int | None, *, parse,
                 multi: bool) -> RankActions:
    by_name = _runs(named)
    steps = max(len(v) for v in by_name.values())
    pick = steps - 1 if step is None else step
    if not 0 <= pick < steps:
        raise InputError(f"{where}: step {step} is not in the trace's {steps} profiled step(s)")
    gpu_runs = _runs((s.name[len(PP_PREFIX):] if multi else s.name, s) for s in rt.gpu_annotations
                     if (s.name.startswith(PP_PREFIX) if multi else _NAMED.fullmatch(s.name)))
    notes: list[str] = []
    partial = sorted(n for n, runs in by_name.items() if len(runs) != steps)
    if partial:
        notes.append(f"{where}: left out {len(partial)} action(s) recorded in fewer than the trace's {steps} steps "
                     f"(cut by the profiling window): {', '.join(partial[:6])}{' ...' if len(partial) > 6 else ''}")
    chosen = [(name, runs[pick]) for name, runs in by_name.items() if len(runs) == steps]
    chosen.sort(key=lambda t: (t[1][0], t[1][1]))  # at one start, the shorter (a posted RECV) first
    rows: list[Measured] = []
    sources: Counter[str] = Counter()
    window: list[float] = []
    step_end = max((e for _, (_, e) in chosen), default=0.0)
    if chosen:
        step_ks = rt.kernels_launched(chosen[0][1][0], step_end)
        if step_ks:
            window = [min(k.start for k in step_ks), max(k.end for k in step_ks)]
    for name, (s, e) in chosen:
        action = parse(name)
        if action is None:
            continue
        comm = action.kind in _COMM_ACTIONS
        m = _timed(rt, action, s, e, comm, gpu_runs.get(name), pick, steps, step_end)
        sources[m.source] += 1
        rows.append(m)
    if steps > 1:
        notes.append(f"{where}: {steps} profiled steps, using step {pick}")
    notes.extend(_source_note(where, sources, rt))
    return RankActions(rows, notes, tuple(window) if window else None, multi)


def _timed(rt: RankTrace, action: Action, s: float, e: float, comm: bool, gpu: list[list[float]] | None,
           pick: int, steps: int, step_end: float, kernels: list[Kernel] | None = None) -> Measured:
    ks = _pick(rt.kernels_launched(s, e) if kernels is None else kernels, comm)
    if ks:
        first = min(ks, key=lambda k: k.start)
        return Measured(action, first.start, max(k.end for k in ks), first.launch, "kernels", s)
    if gpu is not None and len(gpu) == steps:
        gs, ge = gpu[pick]
        return Measured(action, gs, ge, None, "gpu-annotation", s)
    if rt.has_gpu:
        # Where the action sits in its stream: at the next kernel the step launched after it (the
        # stream may have been idle since work launched before the step), else after earlier work.
        later = [k for k in rt.kernels_launched(s, step_end) if not k.comm]
        t = min((k.start for k in later), default=None)
        if t is None:
            t = rt.stream_time_at(s)
        if t is not None:
            return Measured(action, t, t, None, "stream", s)
        return Measured(action, s, e, None, "cpu", s)
    # A CPU (gloo) trace: a RECV's range only posts the receive, and the compute that needs the data
    # blocks inside its own range until the wait on it returns; timed by their ranges, RECVs would end
    # before their SENDs began. The gloo:recv range ends when that wait returned: the data was there.
    if action.kind in ("RECV_F", "RECV_B"):
        done = rt.recv_posted(s, e)
        return Measured(action, s, e if done is None else max(e, done), None, "cpu", s)
    waited = None if comm else rt.recv_waited(s, e)
    return Measured(action, s if waited is None else waited, e, None, "cpu", s)


def _pick(ks: list[Kernel], comm: bool) -> list[Kernel]:
    """A P2P action's time is its NCCL kernels; a compute action's, the rest (an action can post
    communication too, as the last forward of a stage posting its send)."""
    mine = [k for k in ks if k.comm == comm]
    return mine or ks


def _source_note(where: str, sources: Counter[str], rt: RankTrace) -> list[str]:
    bad = [f"{where}: {rt.skipped} malformed event(s) left out"] if rt.skipped else []
    if not rt.has_gpu:
        return bad + [f"{where}: no GPU kernels in the trace; actions timed by their CPU ranges"]
    parts = [f"{sources['kernels']} from the kernels they launched"]
    if sources["gpu-annotation"]:
        parts.append(f"{sources['gpu-annotation']} from their GPU annotation (no launch tied to a kernel)")
    if sources["stream"]:
        parts.append(f"{sources['stream']} launched no GPU work (zero length where the stream stood)")
    if sources["cpu"]:
        parts.append(f"{sources['cpu']} timed by their CPU range (nothing on the GPU to time them by)")
    return bad + [f"{where}: actions: " + ", ".join(parts)]


# ----------------------------------------------------------------------------------------------
# Single-stage schedules with no named ranges


def _top_level(spans: list[Span]) -> list[Span]:
    """Per thread, the ranges not inside another (input sorted by start, longest first)."""
    out: list[Span] = []
    open_end: dict[object, float] = {}
    for sp in spans:
        if sp.name.startswith(("ProfilerStep#", "## ")):
            continue  # containers of a whole step or a phase
        end = open_end.get(sp.tid)
        if end is not None and sp.start < end:
            continue
        open_end[sp.tid] = sp.end
        out.append(sp)
    return out


def _segmented(rt: RankTrace, where: str, rank: int, step: int | None) -> RankActions:
    steps = [s for s in rt.cpu if s.name.startswith("ProfilerStep#")]
    spans = rt.cpu
    if len(steps) > 1:
        steps.sort(key=lambda s: s.start)
        pick = len(steps) - 1 if step is None else step
        if not 0 <= pick < len(steps):
            raise InputError(f"{where}: step {step} is not in the trace's {len(steps)} profiled step(s)")
        lo, hi = steps[pick].start, steps[pick].end
        spans = [s for s in spans if lo <= s.start and s.end <= hi]
    elif step not in (None, 0):
        raise InputError(f"{where}: step {step} is not in the trace's 1 profiled step")
    units = _top_level(spans)
    if not units:
        raise InputError(f"{where}: no 'PP:<action>' ranges and no CPU ops to rebuild the step from; record the run "
                         "with torch.profiler around schedule.step()")
    with_flows = bool(rt.flow_sources)
    # Runs of forward ops (F), of backward nodes (B), and the P2P calls between them (C).
    segments: list[list] = []  # [kind, start, end, made autograd nodes, comm units]
    for u in units:
        kind = "C" if is_comm_name(u.name) else ("B" if u.name.startswith(_BACKWARD_NODE) else "F")
        made = kind == "F" and rt.has_flow_source(u.tid, u.start, u.end)
        if segments and segments[-1][0] == kind:
            seg = segments[-1]
            seg[2] = max(seg[2], u.end)
            seg[3] = seg[3] or made
            seg[4].append(u)
        else:
            segments.append([kind, u.start, u.end, made, [u]])
    # Forward ops that made no autograd node (grad scaling, bookkeeping) are not a forward.
    work = [seg for seg in segments if seg[0] == "B" or (seg[0] == "F" and (seg[3] or not with_flows))]
    fwd = [seg for seg in work if seg[0] == "F"]
    bwd = [seg for seg in work if seg[0] == "B"]
    if not fwd or not bwd:
        raise InputError(f"{where}: no 'PP:<action>' ranges, and no forward and backward ops to rebuild a "
                         "single-stage step from; record the run with torch.profiler around schedule.step()")
    if len(fwd) + len(bwd) > MAX_OPS:
        raise InputError(f"{where}: more than the {MAX_OPS:,} actions pptl accepts")
    step_end = units[-1].end
    rows: list[Measured] = []
    sources: Counter[str] = Counter()
    for kind, segs in (("F", fwd), ("B", bwd)):
        for mb, seg in enumerate(segs):
            m = _timed(rt, Action(rank, kind, mb), seg[1], seg[2], False, None, 0, 1, step_end)
            sources[m.source] += 1
            rows.append(m)
    notes = [f"{where}: no 'PP:' ranges (a single-stage schedule): {counted(len(fwd), 'forward')} and {counted(len(bwd), 'backward')} "
             "rebuilt from forward ops and autograd nodes between the P2P calls, numbered in order"
             + ("" if with_flows else " (no fwdbwd flows in the trace: every run of forward ops counts)")]
    if len(fwd) != len(bwd):
        notes.append(f"{where}: {counted(len(fwd), 'forward')} but {counted(len(bwd), 'backward')}; the step may be cut short")
    comm, why = _p2p(rt, rank, segments, work, len(fwd), step_end)
    rows.extend(comm)
    if why:
        notes.append(f"{where}: P2P left out: {why}")
    notes.extend(_source_note(where, sources, rt))
    window = None
    if rows and rt.has_gpu:
        # The step's GPU time: kernels launched from its first action to its last, so a barrier
        # or set-up before the first action (outside schedule.step()) is not counted.
        hi = max([seg[2] for seg in work] + [u.end for seg in segments if seg[0] == "C" for u in seg[4]])
        ks = rt.kernels_launched(min(m.cpu for m in rows), hi)
        if ks:
            window = (min(k.start for k in ks), max(k.end for k in ks))
    return RankActions(rows, notes, window, False)


def _p2p(rt: RankTrace, rank: int, segments: list[list], work: list[list], m: int, step_end: float
         ) -> tuple[list[Measured], str]:
    """SEND/RECV of a single-stage step from its P2P calls (``c10d::send`` / ``c10d::recv_``, each
    timed by the NCCL kernels launched until the next call: ``nccl:coalesced`` batches them).

    A send carries what the compute before it made (F: activations, B: gradients); a receive feeds
    the compute after it. Both schedules keep micro-batches in order, so the k-th SEND_F is mb k.
    """
    is_work = {id(seg) for seg in work}
    comm: list[Measured] = []
    counts: Counter[str] = Counter()
    for k, seg in enumerate(segments):
        if seg[0] != "C":
            continue
        before = next((s[0] for s in reversed(segments[:k]) if id(s) in is_work), None)
        after = next((s[0] for s in segments[k + 1:] if id(s) in is_work), None)
        calls = [u for u in seg[4] if u.name.startswith(("c10d::send", "c10d::recv"))]
        for j, u in enumerate(calls):
            send = u.name.startswith("c10d::send")
            flow = before if send else after
            if flow is None:
                return [], f"a {'send' if send else 'receive'} with no {'compute before' if send else 'compute after'} it"
            kind = f"{'SEND' if send else 'RECV'}_{flow}"
            stop = calls[j + 1].start if j + 1 < len(calls) else seg[2]
            ks = [x for x in rt.kernels_launched(u.start, stop) if x.comm]
            comm.append(_timed(rt, Action(rank, kind, counts[kind]), u.start, stop, True, None, 0, 1, step_end,
                               kernels=ks))
            counts[kind] += 1
    if any(n != m for n in counts.values()):
        return [], ", ".join(f"{n} {k}" for k, n in sorted(counts.items())) + f" for {counted(m, 'micro-batch', 'micro-batches')}"
    return comm, ""
