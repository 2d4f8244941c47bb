"""The spread of a predicted step (pptl.tune.spread) and the pick that prefers the lower p95."""
from __future__ import annotations

import math
from pathlib import Path

import pytest

from pptl.errors import InputError
from pptl.timeline import Event
from pptl.tune.candidates import Structure
from pptl.tune.model import tune_config_from_mapping
from pptl.tune.rank import Result, _prefer_lower_p95
from pptl.tune.spread import Jitter, Spread, fit_jitter, step_spread

FIX = Path(__file__).resolve().parent.parent / "fixtures" / "tune"


def _ev(kind: str, stage: int, d: float, lane: str = "compute") -> Event:
    return Event(op=f"{kind}{stage}", rank=stage, lane=lane, start=0.0, end=d, kind=kind, stage=stage)


def test_fit_jitter_pools_deviation_from_each_stage_mean() -> None:
    # F of stage 0: 1.0 and 1.2 (mean 1.1, each 1/11 off; n/(n-1) = 2); F of stage 1: 2, 2, 2 (none off).
    ev = [_ev("F", 0, 1.0), _ev("F", 0, 1.2), _ev("F", 1, 2.0), _ev("F", 1, 2.0), _ev("F", 1, 2.0),
          _ev("B", 0, 3.0), _ev("SEND", 0, 9.0, lane="comm")]
    j = fit_jitter(ev, [100.0, 102.0, 98.0])
    assert j is not None
    assert j.cv["F"] == pytest.approx(math.sqrt(2 * 2 * (1 / 11) ** 2 / 5))
    assert "B" not in j.cv  # one B: no deviation to measure
    assert j.step_cv == pytest.approx(2 / 100)
    assert fit_jitter([_ev("F", 0, 1.0)], None) is None


def test_no_jitter_gives_the_longest_path_and_a_chain_adds_up() -> None:
    # a -> b, and c alone: the makespan is a + b = 5.
    order, pred = [0, 1, 2], {0: [], 1: [0], 2: []}
    s = step_spread(order, pred, [2.0, 3.0, 4.0], ["F", "B", "F"], [True, True, True], Jitter({}, 0.0))
    assert (s.p05, s.p50, s.p95) == (5.0, 5.0, 5.0)


def test_one_op_spreads_by_its_kind() -> None:
    # One F of 10 with a relative deviation of 0.05: p95 - p05 ~ 2 * 1.645 * 0.5; messages do not vary.
    s = step_spread([0, 1], {0: [], 1: [0]}, [10.0, 1.0], ["F", "SEND"], [True, False], Jitter({"F": 0.05}),
                    samples=4096)
    assert s.p50 == pytest.approx(11.0, abs=0.05)
    assert s.p95 - s.p05 == pytest.approx(2 * 1.645 * 0.5, rel=0.06)
    # I takes B's deviation when the run had full backwards only.
    t = step_spread([0], {0: []}, [10.0], ["I"], [True], Jitter({"B": 0.05}), samples=4096)
    assert t.p95 - t.p05 == pytest.approx(s.p95 - s.p05, rel=0.06)


def _res(label: str, m: int, step: float, p05: float, p95: float, fits: bool = True) -> Result:
    return Result(Structure(label, m), None, step=step, bubble=0.0, peak=(1.0,), fits=fits,
                  spread=Spread(p05, step, p95))


def test_pick_prefers_the_lower_p95_within_the_spread() -> None:
    a = _res("a", 8, 100.0, 98.0, 110.0)    # fastest median, wide
    b = _res("b", 8, 101.0, 100.0, 103.0)   # overlaps a, lower p95: picked
    c = _res("c", 16, 220.0, 219.0, 221.0)  # per micro-batch 13.69..13.81: overlaps a's 12.25..13.75, p95 higher
    d = _res("d", 8, 111.0, 110.5, 111.5)   # starts after a's p95: not within the spread
    e = _res("e", 8, 90.0, 80.0, 95.0, fits=False)
    res = [a, b, c, d, e]
    note = _prefer_lower_p95(res)
    assert [r.structure.family for r in res] == ["b", "a", "c", "d", "e"]
    assert note is not None and note.startswith("pick: b m=8 (p95 103) over a m=8 (p95 110)")
    # A candidate whose p95 is lower than the fastest one's always overlaps it; over the limit never counts.
    a2, e2 = _res("a", 8, 100.0, 98.0, 110.0), _res("e", 8, 99.0, 98.5, 99.5, fits=False)
    res2 = [a2, e2]
    assert _prefer_lower_p95(res2) is None and res2[0] is a2
    # No spread, or the fastest already has the lowest p95: the order stands.
    plain = [Result(Structure("x", 8), None, step=1.0, fits=True), _res("y", 8, 1.1, 1.0, 1.2)]
    assert _prefer_lower_p95(plain) is None and plain[0].structure.family == "x"


@pytest.mark.parametrize("jitter, msg", [
    ({"F": 2}, r"'device.jitter.F': got 2.0, expected 0..1"),
    ({"X": 0.1}, r"'device.jitter': expected a mapping .*keys: F, B, I, W, FB, step"),
    ({}, r"'device.jitter': expected a mapping"),
    ({"F": -0.1}, r"'device.jitter.F': got -0.1, expected a finite number >= 0"),
])
def test_bad_jitter_is_one_line(jitter: dict, msg: str) -> None:
    data = {"pp": 2, "microbatches": 4, "model": {"layers": 4, "layer": {"F": 1, "B": 2}},
            "device": {"jitter": jitter}}
    with pytest.raises(InputError, match=msg):
        tune_config_from_mapping(data, source="t.yaml")


def test_given_jitter_gives_every_candidate_a_spread() -> None:
    data = {"pp": 2, "microbatches": 4, "families": ["1f1b", "gpipe"],
            "model": {"layers": 4, "layer": {"F": 1, "B": 2}}, "device": {"jitter": {"F": 0.05, "step": 0.01}}}
    from pptl.tune import tune

    res = tune(tune_config_from_mapping(data, source="t.yaml"))
    timed = [r for r in res.results if r.step is not None]
    assert timed and all(r.spread is not None and r.spread.p05 < r.step < r.spread.p95 for r in timed)
