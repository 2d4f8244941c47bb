"""Importing torch profiler traces the way real ones look: GPU time per action from the kernels it
launched on any thread, single-stage schedules rebuilt, OVERLAP_F_B and FSDP actions, notes."""
from __future__ import annotations

import copy
import json
from pathlib import Path

import pytest
from kineto_synth import AUTOGRAD, GPU0, rank_traces, write

from pptl.config import config_from_mapping
from pptl.errors import InputError
from pptl.formats.loader import load_any
from pptl.schedules import build_schedule
from pptl.simulate import simulate


def _plan(family: str, **kw):
    s = build_schedule(config_from_mapping({"schedule": family, "pp": 4, "microbatches": 8, **kw}))
    return s, simulate(s)


def _compute_ids(s) -> list[str]:
    return sorted(op.id for op in s.ops if op.lane == "compute")


@pytest.mark.parametrize("family,kw", [("interleaved-1f1b", {"vpp": 2}), ("zbv", {}), ("dualpipev", {})])
def test_multi_stage_actions_are_timed_by_their_kernels(tmp_path: Path, family: str, kw: dict) -> None:
    s, sim = _plan(family, **kw)
    loaded = load_any(write(tmp_path / "t", rank_traces(s, sim, fsdp=True)))
    tl = loaded.timeline
    # Every compute action, backwards included (their kernels come from autograd's thread and have
    # no GPU annotation), plus the UNSHARD/REDUCE_GRAD the runtime adds.
    got = sorted(e.op for e in tl.events if e.lane == "compute" and e.kind not in ("UNSHARD", "REDUCE_GRAD"))
    assert got == _compute_ids(s)
    assert not any("missing" in n for n in loaded.notes)
    by = {e.op: e for e in tl.events}
    first = 1000 * min(sim.start)
    for i, op in enumerate(s.ops):
        if op.lane == "compute":
            e = by[op.id]
            assert e.start == pytest.approx(1000 * sim.start[i] - first)
            assert e.end == pytest.approx(1000 * sim.end[i] - first)
    # The makespan is the GPU's (first kernel to last), not the host's; FSDP actions with no GPU
    # work sit at zero length where their stream stood.
    assert tl.makespan == pytest.approx(1000 * sim.makespan, rel=1e-3)
    assert any(n.endswith("(100.0%)") and n.startswith("makespan") for n in loaded.notes)
    fsdp = [e for e in tl.events if e.kind in ("UNSHARD", "REDUCE_GRAD")]
    assert len(fsdp) == 8 and all(e.duration == 0 for e in fsdp)
    assert all(0 <= e.start <= tl.makespan for e in fsdp)
    assert set(tl.meta.extra["launch"]) >= {op.id for op in s.ops if op.lane == "compute"}


def test_flows_alone_tie_launches_to_kernels(tmp_path: Path) -> None:
    s, sim = _plan("zbv")
    loaded = load_any(write(tmp_path / "t", rank_traces(s, sim, corr_in_args=False, gpu_annotations=False)))
    assert sorted(e.op for e in loaded.timeline.events if e.lane == "compute") == _compute_ids(s)
    assert all("from the kernels they launched" in n and "GPU annotation" not in n
               for n in loaded.notes if "actions:" in n)


def test_gpu_annotation_then_cpu_range_with_a_note(tmp_path: Path) -> None:
    s, sim = _plan("interleaved-1f1b", vpp=2)
    traces = rank_traces(s, sim)
    # Rank 0 loses every launch record: forwards fall back to their GPU annotation; backwards have
    # none (autograd's thread) and are timed by the stream position.
    traces[0]["traceEvents"] = [e for e in traces[0]["traceEvents"] if e.get("cat") != "cuda_runtime"]
    loaded = load_any(write(tmp_path / "t", traces))
    note = next(n for n in loaded.notes if n.startswith("rank0") and "actions:" in n)
    assert "from their GPU annotation" in note
    assert "timed by their CPU range" in note
    assert sorted(e.op for e in loaded.timeline.events if e.lane == "compute") == _compute_ids(s)


def test_single_stage_schedule_is_rebuilt(tmp_path: Path) -> None:
    s, sim = _plan("1f1b")
    loaded = load_any(write(tmp_path / "t", rank_traces(s, sim, single_stage=True)))
    # F and B from the runs of forward ops and autograd nodes; SEND/RECV from the c10d calls
    assert sorted(e.op for e in loaded.timeline.events) == sorted(op.id for op in s.ops)
    assert "program_order" not in loaded.schedule.meta  # grouped P2P: no one sequential issue order
    assert any("single-stage" in n and "8 forwards and 8 backwards" in n for n in loaded.notes)
    by = {e.op: e for e in loaded.timeline.events}
    i = next(k for k, op in enumerate(s.ops) if op.id == "r2/compute/B s2 mb3")
    assert by["r2/compute/B s2 mb3"].start == pytest.approx(1000 * sim.start[i])


def test_single_stage_forward_runs_need_autograd_nodes(tmp_path: Path) -> None:
    """Ops between P2P calls that made no autograd node (grad scaling at the end) are no forward."""
    s, sim = _plan("1f1b")
    traces = rank_traces(s, sim, single_stage=True)
    t = traces[0]
    t["traceEvents"].append({"ph": "X", "cat": "cpu_op", "name": "aten::div_", "pid": 0, "tid": 100,
                             "ts": 10_000.0, "dur": 3})
    loaded = load_any(write(tmp_path / "t", traces))
    assert sum(e.kind == "F" for e in loaded.timeline.events if e.rank == 0) == 8


def test_named_forward_backward_ranges(tmp_path: Path) -> None:
    """ScheduleGPipe names 'Forward i' / 'Backward i' ranges."""
    s, sim = _plan("gpipe")
    traces = rank_traces(s, sim)
    for t in traces:
        for e in t["traceEvents"]:
            name = e.get("name", "")
            if e.get("cat") == "user_annotation" and name.startswith("PP:"):
                kind = name[len(name.rstrip("0123456789")) - 1]
                mb = name[len(name.rstrip("0123456789")):]
                e["name"] = f"{'Forward' if kind == 'F' else 'Backward'} {mb}" if kind in "FB" else "c10d::send"
            elif e.get("cat") == "gpu_user_annotation":
                e["cat"] = "drop"
    loaded = load_any(write(tmp_path / "t", traces))
    assert sorted(e.op for e in loaded.timeline.events) == _compute_ids(s)


def test_missing_actions_are_named(tmp_path: Path) -> None:
    s, sim = _plan("zbv")
    traces = rank_traces(s, sim)
    traces[1]["traceEvents"] = [e for e in traces[1]["traceEvents"] if e.get("name") != "PP:1I5"]
    loaded = load_any(write(tmp_path / "t", traces))
    assert any(n.startswith("missing 1 action(s): 1I5: no PP:<action> range") for n in loaded.notes)


def test_dualpipev_overlap_f_b_from_a_cpu_trace(tmp_path: Path) -> None:
    """OVERLAP_F_B has stage -1 with its stages inside: it used to crash the chunk placement."""
    s, sim = _plan("dualpipev")
    loaded = load_any(write(tmp_path / "t", rank_traces(s, sim)))
    fb = [e for e in loaded.timeline.events if e.kind == "FB"]
    assert len(fb) == sum(op.kind == "FB" for op in s.ops) > 0
    assert all(e.pair is not None for e in fb)


def test_step_selection_and_bad_step(tmp_path: Path) -> None:
    s, sim = _plan("zbv")
    traces = rank_traces(s, sim)
    for t in traces:  # a second step, 10 s later on host and GPU
        later = copy.deepcopy(t["traceEvents"])
        for e in later:
            e["ts"] += 10_000_000
            if "args" in e:  # correlation ids are unique within a trace
                e["args"] = {"correlation": e["args"]["correlation"] + 1_000_000}
        t["traceEvents"] += later
    folder = write(tmp_path / "t", traces)
    loaded = load_any(folder)
    assert any("2 profiled steps, using step 1" in n for n in loaded.notes)
    assert loaded.timeline.makespan == pytest.approx(1000 * sim.makespan, rel=1e-3)
    with pytest.raises(InputError, match="step 5 is not in the trace's 2 profiled step"):
        load_any(folder, step=5)


def test_backward_kernels_come_from_autograd_thread_in_the_synthetic_traces() -> None:
    """The synthetic traces are what the tests above rely on: backward launches off the main thread."""
    s, sim = _plan("zbv")
    t = rank_traces(s, sim)[0]
    tids = {e["tid"] for e in t["traceEvents"] if e.get("cat") == "cuda_runtime"}
    assert AUTOGRAD in tids
    assert min(e["ts"] for e in t["traceEvents"] if e.get("cat") == "kernel") >= GPU0


@pytest.mark.parametrize("mutate,match", [
    (lambda t: t.update(baseTimeNanoseconds="x"), "baseTimeNanoseconds"),
    (lambda t: t["traceEvents"].append({"ph": "X", "cat": "user_annotation", "name": "PP:0Q0", "ts": 1,
                                        "dur": 1, "tid": 100}), "'PP:0Q0'"),
    (lambda t: t.update(traceEvents=[{"ph": "X", "cat": "kernel", "name": "k", "ts": 1, "dur": 1}]),
     "no 'PP:<action>' ranges and no CPU ops"),
])
def test_bad_traces_are_one_line(tmp_path: Path, mutate, match: str) -> None:
    s, sim = _plan("zbv")
    traces = rank_traces(s, sim)
    mutate(traces[0])
    folder = tmp_path / "t"
    folder.mkdir()
    for r, t in enumerate(traces):
        (folder / f"rank{r}.json").write_text(json.dumps(t))
    with pytest.raises(InputError, match=match):
        load_any(folder)
