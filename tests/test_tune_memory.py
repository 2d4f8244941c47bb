"""pptl tune's memory model: per-rank peaks with the runtime's messages and data, and the fit of its
activation scale and working memory to a measured run (recovered from synthetic peaks)."""
from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest
import yaml

from pptl.errors import InputError
from pptl.ir import Op, Schedule
from pptl.schedules import get_family
from pptl.timeline import TimelineMeta
from pptl.tune.candidates import Structure
from pptl.tune.memory import MemoryModel, data_count, fit_memory, rank_peaks
from pptl.tune.model import tune_config_from_mapping
from pptl.tune.rank import _check, _timing, config_for
from pptl.tune.split import Split, stage_memory

FIX = Path(__file__).resolve().parent.parent / "fixtures" / "tune" / "uneven.yaml"


def _cfg(**over):
    data = yaml.safe_load(FIX.read_text())
    data.update(over)
    return tune_config_from_mapping(data, source="t.yaml")


def _timed(family: str, m: int, split=(8, 8, 8, 8), **over):
    tc = _cfg(microbatches=m, memory_limit=None, **over)
    vpp = 2 if family in ("zbv", "dualpipev") else 1
    st = Structure(family, m, vpp, None)
    sched = get_family(family).build(config_for(tc, st))
    ctx = _check(sched)
    assert not isinstance(ctx, str), ctx
    sp = Split("even", tuple(split))
    tm = _timing(tc, st, sched, ctx, sp)
    start, end = tm.start, tm.end
    act, weight = stage_memory(tc.model, sp.layers)
    return tc, sched, start, end, act, weight


def _peaks(tc, sched, start, end, act, weight, mm, i_working=0.0):
    return rank_peaks(sched, start, end, act, weight, pp=tc.pp, w_activation=tc.model.w_activation,
                      i_working=i_working, mm=mm)


def test_messages_are_held_to_the_step_end_and_data_counted_per_micro_batch():
    # One rank: F s0 mb0, SEND, then B: the message stays after B frees the activation.
    ops = [Op("F", 0, "compute", stage=0, mb=0), Op("SEND", 0, "send", stage=0, mb=0, peer=1, flow="F"),
           Op("B", 0, "compute", stage=0, mb=0)]
    sched = Schedule(family="t", pp=1, num_stages=1, microbatches=1, ops=ops,
                     lanes={(0, "compute"): [0, 2], (0, "send"): [1]}, deps=[(0, 1), (0, 2)])
    start, end = [0.0, 1.0, 2.0], [1.0, 1.5, 3.0]
    mm = MemoryModel(message=2.0, data=5.0, working=0.25)
    # weight 10 + data 5 (mb0 is stage 0's and the last stage's: input and target) + max(act 3 + msg 2)
    assert data_count(sched) == {0: 1}
    assert rank_peaks(sched, start, end, [3.0], [10.0], pp=1, w_activation=0.5, i_working=0.0,
                      mm=mm) == pytest.approx((10 + 5 + 5 + 0.25,))


@pytest.mark.parametrize("scale,working", [(0.9, 300.0), (1.3, 0.0), (0.5, 1000.0)])
def test_fit_recovers_a_known_scale_and_working_memory_of_a_1f1b_run(scale, working):
    tc, sched, start, end, act, weight = _timed("1f1b", 8)
    act = [a * 100 for a in act]  # the fixture's activation is tiny next to the working memory
    base = MemoryModel(message=16.0, data=16.0)
    truth = replace(base, full_scale=scale, working=working)
    measured = dict(enumerate(_peaks(tc, sched, start, end, act, weight, truth)))
    fit = fit_memory(sched, start, end, act, weight, measured, pp=tc.pp, w_activation=tc.model.w_activation,
                     i_working=0.0, base=base)
    assert fit is not None and fit.kind == "full" and fit.ranks == 4
    assert fit.model.full_scale == pytest.approx(scale, rel=1e-6)
    assert fit.model.working == pytest.approx(working, abs=1e-6)
    assert fit.residual == pytest.approx(0.0, abs=1e-6)
    # the backward the run did not use is never scaled below the model
    assert fit.model.split_scale == pytest.approx(max(1.0, scale))


def test_fit_of_a_split_backward_run_scales_the_split_kind_and_covers_every_rank():
    tc, sched, start, end, act, weight = _timed("zb-h1", 8)
    act = [a * 100 for a in act]
    truth = MemoryModel(split_scale=0.8, working=50.0, message=4.0)
    measured = dict(enumerate(_peaks(tc, sched, start, end, act, weight, truth, i_working=0.5)))
    measured[2] += 30.0  # one rank above the line: working covers it, and the same again
    fit = fit_memory(sched, start, end, act, weight, measured, pp=tc.pp, w_activation=tc.model.w_activation,
                     i_working=0.5, base=MemoryModel(message=4.0))
    assert fit is not None and fit.kind == "split" and fit.model.full_scale == 1.0
    got = _peaks(tc, sched, start, end, act, weight, fit.model, i_working=0.5)
    assert all(got[r] >= measured[r] - 1e-6 for r in range(4))
    assert max(got[r] - measured[r] for r in range(4)) <= 2 * 30.0 + 1e-6


def test_ranks_holding_the_same_keep_the_scale_and_fit_only_working_memory():
    # GPipe holds every micro-batch on every rank, and split 7/9/9/7 gives every stage the same
    # activation (the embedding and head keep two layers' worth): the scale cannot be told.
    tc, sched, start, end, act, weight = _timed("gpipe", 4, split=(7, 9, 9, 7))
    assert max(act) - min(act) < 1e-12
    measured = dict(enumerate(_peaks(tc, sched, start, end, act, weight, MemoryModel(working=7.0))))
    fit = fit_memory(sched, start, end, act, weight, measured, pp=tc.pp, w_activation=tc.model.w_activation,
                     i_working=0.0, base=MemoryModel())
    assert fit.model.full_scale == 1.0 and fit.model.working == pytest.approx(7.0)
    assert fit_memory(sched, start, end, act, weight, {}, pp=tc.pp, w_activation=0.5, i_working=0.0,
                      base=MemoryModel()) is None


def test_calibration_fits_memory_and_tune_predicts_an_upper_bound_of_the_run():
    from pptl.tune.calibrate import _fit_memory
    from pptl.tune.rank import _time

    tc = _cfg(families=["1f1b"], microbatches=8, memory_limit=None)
    tc = replace(tc, model=replace(tc.model, message_bytes=2 ** 20))  # 1 MiB a message
    meta = TimelineMeta(source="measured", units="ms", family="1f1b", pp=4, microbatches=8)
    split = (8, 8, 8, 8)
    _, sched, start, end, act, weight = _timed("1f1b", 8)
    truth = MemoryModel(full_scale=0.7, working=0.5, message=1.0, data=0.25)
    peaks = _peaks(tc, sched, start, end, act, weight, truth)
    memory = {str(r): {"peak_mib": peaks[r], "base_mib": weight[r] + (0.25 * 8 if r in (0, 3) else 0.0)}
              for r in range(4)}
    memory["x"] = {"peak_mib": "hostile"}  # ignored, not trusted
    fitted, note = _fit_memory(tc, meta, split, memory)
    assert fitted.memory.full_scale == pytest.approx(0.7) and fitted.memory.data == pytest.approx(0.25)
    assert fitted.memory.working == pytest.approx(0.5) and fitted.memory.message == 1.0
    assert "activation x0.700 for micro-batches with a full backward" in note
    st = Structure("1f1b", 8, 1, None)
    sch = get_family("1f1b").build(config_for(fitted, st))
    r = _time(fitted, st, sch, _check(sch), Split("even", split))
    assert r.peak == pytest.approx(peaks)


@pytest.mark.parametrize(("w", "peak"), [
    (10 / 9, 10 + 9 * 10 / 9),   # pptl run's block: F keeps 9h, I's end holds 10h until W
    (1.0, 10 + 9),               # I frees nothing: the peak is F's
    (0.5, 10 + 9),               # I frees half: still F's
], ids=["I-makes-more", "I-keeps-all", "I-frees-half"])
def test_what_i_makes_beyond_the_forward_raises_the_peak(w: float, peak: float):
    """One rank, one micro-batch: F (activation 9), I, W, weights 10. With w_activation above 1 the
    peak is at I's end (9 * 10/9 = 10 held until W), not at F's."""
    ops = [Op("F", 0, "compute", stage=0, mb=0), Op("I", 0, "compute", stage=0, mb=0),
           Op("W", 0, "compute", stage=0, mb=0)]
    sched = Schedule(family="t", pp=1, num_stages=1, microbatches=1, ops=ops,
                     lanes={(0, "compute"): [0, 1, 2]}, deps=[(0, 1), (1, 2)])
    start, end = [0.0, 1.0, 2.0], [1.0, 2.0, 3.0]
    got = rank_peaks(sched, start, end, [9.0], [10.0], pp=1, w_activation=w, i_working=0.0, mm=MemoryModel())
    assert got == pytest.approx((peak,))


@pytest.mark.parametrize(("w", "ok"), [(10 / 9, True), (2.0, True), (2.01, False)], ids=["10/9", "2", "over-2"])
def test_w_activation_above_1_is_accepted_up_to_2(w: float, ok: bool):
    if ok:
        assert _cfg(model={**yaml.safe_load(FIX.read_text())["model"], "w_activation": w}).model.w_activation == w
    else:
        with pytest.raises(InputError, match=r"field 'model.w_activation': got 2.01, expected 0..2 \(what I leaves "
                                             r"held until W, as a share of F's activation\)"):
            _cfg(model={**yaml.safe_load(FIX.read_text())["model"], "w_activation": w})


def test_the_written_plan_keeps_its_own_memory_count_at_most_1():
    """The plan's w_activation (pptl check's memory rule) is at most 1; the ranking's peaks hold the rest."""
    tc = _cfg(model={**yaml.safe_load(FIX.read_text())["model"], "w_activation": 10 / 9})
    assert config_for(tc, Structure("zb-h1", 8, 1, None)).w_activation == 1.0
    tc = _cfg(model={**yaml.safe_load(FIX.read_text())["model"], "w_activation": 0.75})
    assert config_for(tc, Structure("zb-h1", 8, 1, None)).w_activation == 0.75
