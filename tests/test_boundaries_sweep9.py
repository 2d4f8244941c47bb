"""Boundaries of the host's lag ring, tune's table and op bounds, the peak and limit digits, the DualPipe
figure's micro-batch numbers and stacked halves, the MoE close-ups' labels, rows and legend, diagnose's
alignment limit and its refusal of a timeline with one dump, a run's full_backward name, and the check of
a measured run against its own plan (whatif's RunPlan and PlanOutcome, tune's MeasuredRun and own-plan
note): each against a number or a fact worked out by hand (the docstrings say how)."""
from __future__ import annotations

import copy
import json
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from pptl.config import Config, Costs
from pptl.schedules import build_schedule

ROOT = Path(__file__).resolve().parents[1]


def _cfg(name: str, pp: int, m: int, vpp: int = 1) -> Config:
    return Config(schedule=name, pp=pp, microbatches=m, vpp=vpp, costs=Costs(base={"F": 1.0, "B": 2.0}))


# --------------------------------------------------------------------------------------------
# pptl.run.hostlag: the ring of events


class _Event:
    def __init__(self, name: str, done: set[str], asked: list[str]) -> None:
        self.name, self.done, self.asked = name, done, asked

    def record(self) -> None:
        self.done.discard(self.name)

    def query(self) -> bool:
        self.asked.append(self.name)
        return self.name in self.done


def test_with_a_lag_of_two_the_third_op_waits_for_the_first_ops_event() -> None:
    """Lag 2: marked ops 0 and 1 record events e0 and e1; before op 2 the host waits for op 2 - 2 = 0,
    i.e. e0 (not e1, the op just before it). e0 has completed, e1 not: no wait."""
    from pptl.run.hostlag import HostLag

    done: set[str] = set()
    asked: list[str] = []
    names = iter(["e0", "e1"])
    hold = HostLag(2, lambda: _Event(next(names), done, asked), timeout=1.0, sleep=lambda s: None)
    hold.after()
    hold.after()
    done.add("e0")  # op 0 has run on the GPU, op 1 not yet
    hold.before()
    assert asked == ["e0"] and hold.waits == 0


# --------------------------------------------------------------------------------------------
# pptl.tune.report: the ranked table


def _result(label: str, step: float, m: int) -> Any:
    return SimpleNamespace(label=label, step=step, structure=SimpleNamespace(microbatches=m), spread=None,
                           bubble=0.25, peak=(1.0, 2.0), fits=True, rejected=None, skipped=None)


def test_the_table_shows_exactly_top_rows_numbered_from_one() -> None:
    """Three candidates, --top 2: rows #1 and #2 (the first two ranked), not #0, and not one row; the per
    micro-batch column of a step of 12 over m = 4 reads 3, of 10 over m = 2 reads 5."""
    from pptl.tune.report import table_rows

    res = SimpleNamespace(results=[_result("a", 12.0, 4), _result("b", 10.0, 2), _result("c", 30.0, 5)])
    rows = table_rows(res, 2)  # type: ignore[arg-type]
    assert [(r[0], r[1], r[2], r[4]) for r in rows] == [("1", "a", "12", "3"), ("2", "b", "10", "5")]


# --------------------------------------------------------------------------------------------
# pptl.tune.rank: one plan's op bound, and peak and limit told apart


def test_a_candidate_of_exactly_the_plan_op_bound_is_timed(monkeypatch: pytest.MonkeyPatch) -> None:
    """1F1B, pp 2, m 4: about 6 ops per micro-batch, rank and chunk, 6 x 2 x 1 x 4 = 48. A bound of 48
    times it (48 is not more than 48); a bound of 47 rejects it, naming both numbers."""
    import pptl.tune.rank
    from pptl.tune.model import tune_config_from_mapping
    from pptl.tune.rank import tune

    tc = tune_config_from_mapping({"pp": 2, "microbatches": [4], "families": ["1f1b"],
                                   "model": {"layers": 4, "layer": {"F": 1, "B": 2}}}, source="t.yaml")
    monkeypatch.setattr(pptl.tune.rank, "MAX_OPS", 48)
    res = tune(tc)
    assert [r.step is not None for r in res.results] == [True]
    monkeypatch.setattr(pptl.tune.rank, "MAX_OPS", 47)
    res = tune(tc)
    assert [r.rejected for r in res.results] == ["about 48 ops, more than the 47 pptl plans"]


def test_a_peak_one_ulp_over_its_limit_is_told_apart_at_17_digits() -> None:
    """1 + 2**-52 (the next double after 1) and 1: alike at 16 significant digits, and 17 digits tell
    any two doubles apart: '1.0000000000000002' against '1'."""
    from pptl.tune.rank import peak_and_limit

    assert peak_and_limit(1.0 + 2**-52, 1.0) == ("1.0000000000000002", "1")


# --------------------------------------------------------------------------------------------
# pptl.render.dualpipe_style: micro-batch numbers


def test_micro_batch_zero_of_the_forward_direction_is_numbered() -> None:
    """The DualPipe README numbers every block of the forward direction from micro-batch 0; only the
    reverse direction's (direction 1) numbers are left out, and an op of no micro-batch (-1) has none."""
    from pptl.render.dualpipe_style import DualPipeStyle

    st = DualPipeStyle()
    assert st._ids(0, 0) == ("0",)
    assert st._ids(1, 0) == () and st._ids(0, -1) == ()


def test_the_stacked_overlap_draws_forward_on_the_top_half_and_backward_on_the_bottom() -> None:
    """split="stack": an F&B block is two halves of one row, F from 0 to 0.5 (the top) and B from 0.5 to
    1 (the bottom), each across the op's whole time; the halves do not overlap."""
    from pptl.render.dualpipe_style import DualPipeStyle

    e = SimpleNamespace(kind="FB", direction=0, mb=3, pair=(1, 2, 0), label="")
    f, b = DualPipeStyle(split="stack").parts(e)  # type: ignore[arg-type]
    assert (f.lo, f.hi, f.x0, f.x1) == (0.0, 0.5, 0.0, 1.0)
    assert (b.lo, b.hi, b.x0, b.x1) == (0.5, 1.0, 0.0, 1.0)
    assert (f.texts, b.texts) == (("3",), ("2",))


# --------------------------------------------------------------------------------------------
# pptl.render.moe_mpl: a label one point smaller


def test_a_label_at_exactly_the_least_printed_size_is_drawn() -> None:
    """MIN_PRINT_PT (6 pt) is the least size printed: a label one point smaller that comes to exactly
    6 pt, with a block of 100 x 100 pt (room for one letter either way), is drawn once, at 6 pt; at
    5.9 pt it is not drawn."""
    from pptl.render.moe_mpl import _label_smaller
    from pptl.render.options import MIN_PRINT_PT

    calls: list[dict[str, Any]] = []
    ax = SimpleNamespace(text=lambda *a, **kw: calls.append(kw))
    b = SimpleNamespace(label="F", start=0.0)
    _label_smaller(ax, b, 0.0, 1.0, 1.0, 100.0, 100.0, MIN_PRINT_PT, "black", None)
    assert [kw["fontsize"] for kw in calls] == [6.0]
    _label_smaller(ax, b, 0.0, 1.0, 1.0, 100.0, 100.0, MIN_PRINT_PT - 0.1, "black", None)
    assert len(calls) == 1


# --------------------------------------------------------------------------------------------
# pptl.whatif.study: the plan a measured run ran


def _tl(events: list[Any], steps: list[float], family: str = "1f1b", pp: int = 2, m: int = 1) -> Any:
    meta = SimpleNamespace(extra={"step_ms": steps}, family=family, pp=pp, microbatches=m)
    return SimpleNamespace(meta=meta, events=events)


def _ev(rank: int, stage: int, kind: str, mb: int, lane: str = "compute") -> Any:
    return SimpleNamespace(rank=rank, stage=stage, kind=kind, mb=mb, chunk=0 if kind != "SEND" else -1, lane=lane)


def _run_of(schedule: Any, drop: int = 0, extra: list[Any] = ()) -> Any:  # type: ignore[assignment]
    ops = [op for op in schedule.ops if op.lane == "compute"]
    events = [SimpleNamespace(rank=o.rank, stage=o.stage, kind=o.kind, mb=o.mb, chunk=o.chunk, lane=o.lane)
              for o in ops[drop:]]
    return _tl(events + list(extra), [10.0], m=schedule.microbatches)


def test_a_run_of_one_compute_op_fewer_or_more_did_not_run_the_plan() -> None:
    """1F1B, pp 2, m 1: four compute ops (F and B on each rank). A run of the same family, ranks and
    micro-batches that recorded three of them, or those four and a fifth (a W the plan has not), did
    not run this plan; one that recorded the four did."""
    from pptl.whatif.study import _run_plan

    plan = build_schedule(_cfg("1f1b", 2, 1))
    assert len([op for op in plan.ops if op.lane == "compute"]) == 4
    full, short = _run_plan(_run_of(plan)), _run_plan(_run_of(plan, drop=1))
    more = _run_plan(_run_of(plan, extra=[_ev(0, 0, "W", 0)]))
    assert full is not None and full.ran(plan)
    assert short is not None and not short.ran(plan)
    assert more is not None and len(more.compute) == 5 and not more.ran(plan)


def test_sends_a_run_made_on_its_compute_lane_are_not_compute_ops_of_the_plan() -> None:
    """A sync-send run records each SEND on the compute lane: 1F1B pp 2 m 1 sends one activation and one
    gradient. Those two SENDs are messages, not the plan's compute ops: the run still ran the plan."""
    from pptl.whatif.study import _run_plan

    plan = build_schedule(_cfg("1f1b", 2, 1))
    run = _run_plan(_run_of(plan, extra=[_ev(0, 0, "SEND", 0), _ev(1, 1, "SEND", 0)]))
    assert run is not None and len(run.compute) == 4 and run.ran(plan)


def test_a_run_median_step_of_zero_gives_no_self_error() -> None:
    """A run_p50 of 0 holds nothing to divide by: no self error (None), not a division by zero."""
    from pptl.whatif.study import PlanOutcome

    samples = SimpleNamespace(quantiles=lambda qs: (5.0,))
    o = PlanOutcome("p", None, "ms", samples, [], None, run_p50=0.0)  # type: ignore[arg-type]
    assert o.self_error is None
    assert PlanOutcome("p", None, "ms", samples, [], None, run_p50=4.0).self_error == 0.25  # type: ignore[arg-type]


# --------------------------------------------------------------------------------------------
# pptl.tune.calibrate: MeasuredRun and the own-plan note


def test_an_own_plan_note_against_a_median_step_of_zero_is_none() -> None:
    """A measured median step of 0 (no step to hold the ranking to): no note, not a division by zero."""
    from dataclasses import replace

    from pptl.tune.calibrate import own_plan_note
    from pptl.tune.model import MeasuredRun, tune_config_from_mapping

    tc = tune_config_from_mapping({"pp": 2, "microbatches": [6], "model": {"layers": 4, "layer": {"F": 1, "B": 2}}},
                                  source="t")
    tc = replace(tc, measured_run=MeasuredRun(family="1f1b", microbatches=6, vpp=1, split=(2, 2), step_p50=0.0))
    r = SimpleNamespace(structure=SimpleNamespace(family="1f1b", microbatches=6, vpp=1),
                        split=SimpleNamespace(layers=(2, 2)), step=50.0, label="1f1b m=6")
    assert own_plan_note(tc, [r], "ms") is None


def test_the_run_median_of_an_even_count_of_steps_is_the_mean_of_the_middle_two(tmp_path: Path) -> None:
    """Steps of 10, 40, 20 and 30 ms: sorted 10 20 30 40, the median is (20 + 30) / 2 = 25 (not the low
    middle 20 nor the high 30)."""
    from pptl.tune.calibrate import calibrate_tune
    from pptl.tune.model import tune_config_from_mapping

    saved = json.loads((ROOT / "tests" / "data" / "tune_crossval" / "h2816-t1280-l13-m6.json").read_text())
    run = copy.deepcopy(saved["base"])
    run["meta"]["extra"]["step_ms"] = [10.0, 40.0, 20.0, 30.0]
    p = tmp_path / "run.json"
    p.write_text(json.dumps(run))
    cfg = dict(saved["config"], families=["1f1b"])
    tc, _, _ = calibrate_tune(tune_config_from_mapping(cfg, source="cfg"), p)
    assert tc.measured_run is not None and tc.measured_run.step_p50 == 25.0



# --------------------------------------------------------------------------------------------
# pptl.diagnose.counts: the alignment's limit


def _nccl(rank: int, index: int, kind: str, *, peer: int = -1, seq: int = 0, n: int = 8,
          state: str = "completed") -> Any:
    from pptl.diagnose.ops import NcclOp

    return NcclOp(rank, index, "0", kind, peer, seq, index if peer >= 0 else 0, ((n,),), state)


def test_a_middle_of_exactly_the_alignment_limit_is_aligned(monkeypatch: pytest.MonkeyPatch) -> None:
    """Rank 0 issued all_reduces of 1, 5, 3, 6 and 2 elements, rank 1 of 1, 3 and 2. The common head
    (1) and tail (2) leave rank 1's [3] against rank 0's [5, 3, 6]: three calls, aligned when the limit
    is 3 (3 is not more than 3): rank 0's calls #2 and #4 (5 and 6 elements) are the extra ones. With a
    limit of 2 nothing is aligned and no extra call is named."""
    import pptl.diagnose.counts as counts

    a = tuple(_nccl(0, k, "all_reduce", seq=k + 1, n=n) for k, n in enumerate((1, 5, 3, 6, 2)))
    b = tuple(_nccl(1, k, "all_reduce", seq=k + 1, n=n) for k, n in enumerate((1, 3, 2)))
    monkeypatch.setattr(counts, "_ALIGN_LIMIT", 3)
    (e,) = counts.count_calls({0: a, 1: b}, {"0": (0, 1)}).extra
    assert (e.rank, e.other, [o.numels for o in e.extra]) == (0, 1, [(5,), (6,)])
    monkeypatch.setattr(counts, "_ALIGN_LIMIT", 2)
    assert counts.count_calls({0: a, 1: b}, {"0": (0, 1)}).extra == ()


# --------------------------------------------------------------------------------------------
# pptl.render.moe_mpl: a section row's height


def test_a_section_row_of_one_track_is_its_base_height_and_each_more_adds_seven_tenths() -> None:
    """Computation 0.30 in, Communication 0.34, Offload 0.26 for one track each; three tracks of
    Computation are 0.30 x (1 + 0.7 x 2) = 0.72 in."""
    from pptl.render.moe_mpl import _section_heights

    assert _section_heights([(1, 1, 1)]) == pytest.approx([0.30, 0.34, 0.26])
    assert _section_heights([(3, 1, 1), (2, 1, 1)])[0] == pytest.approx(0.72)


def test_a_legend_of_four_entries_in_three_columns_keeps_its_fourth() -> None:
    """Four legend entries in 3 columns take ceil(4 / 3) = 2 rows, the second holding one entry: all
    four are drawn, not the three of one full row."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from pptl.render.base import Category
    from pptl.render.moe_mpl import MoEDraw, _legend

    cats = [Category(f"k{i}", f"entry {i}", ("forward",), "") for i in range(4)]
    fig = plt.figure(figsize=(7, 3))
    try:
        _legend(fig, cats, 3, 7.0, MoEDraw(), 3.0, 0.3)
        assert sorted(t.get_text() for t in fig.legends[0].get_texts()) == [f"entry {i}" for i in range(4)]
    finally:
        plt.close(fig)


# --------------------------------------------------------------------------------------------
# pptl.diagnose_inputs: dumps and a timeline together


def test_a_timeline_with_a_single_dump_is_refused_as_a_mix(tmp_path: Path) -> None:
    """One flight-recorder dump is as much a dump as two: a pptl timeline given with it is a mix of the
    two records, refused as such (not read as the timeline alone)."""
    import pickle

    from pptl.diagnose_inputs import diagnose_paths
    from pptl.errors import InputError
    from pptl.formats.flight_recorder import DEFAULT_PREFIX

    run = tmp_path / "run.json"
    run.write_bytes((ROOT / "tests" / "data" / "whatif_gpu" / "call2" / "measured_calibrate.json").read_bytes())
    entry = {"record_id": 0, "process_group": ["0", "default_pg"], "collective_seq_id": 1,
             "profiling_name": "nccl:all_reduce", "state": "completed", "input_sizes": [[4]],
             "output_sizes": [[4]], "input_dtypes": ["Float"], "output_dtypes": ["Float"]}
    dump = tmp_path / f"{DEFAULT_PREFIX}0"
    dump.write_bytes(pickle.dumps({"version": "2.10", "pg_config": {}, "entries": [entry]}))
    with pytest.raises(InputError, match="give flight-recorder dumps or one pptl timeline, not both"):
        diagnose_paths([run, dump])


# --------------------------------------------------------------------------------------------
# pptl.whatif.study: how the run's B ran, as its record names it


@pytest.mark.parametrize(("length", "kept"), [(40, True), (41, False)])
def test_a_full_backward_name_of_40_characters_is_kept_and_41_is_not(tmp_path: Path, length: int,
                                                                     kept: bool) -> None:
    """meta.extra.full_backward is a short name ("i-then-w"); a name of up to 40 characters is taken as
    given, one of 41 is file data too long to be one and is dropped (None)."""
    from pptl.whatif.study import load_measured

    d = json.loads((ROOT / "tests" / "data" / "whatif_gpu" / "call31_h2432" / "measured_calibrate.json").read_text())
    name = "i" * length
    d["meta"]["extra"]["full_backward"] = name
    p = tmp_path / "run.json"
    p.write_text(json.dumps(d))
    assert load_measured(p).full_backward == (name if kept else None)
