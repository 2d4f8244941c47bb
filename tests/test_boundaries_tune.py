"""Boundaries of ``pptl tune`` that hand-written mutants showed no test held: the synthesised order
at its memory limit, at ties and under what a rank holds besides activations; the candidates at the
edges of their ranges; the spread pick at touching spreads and equal p95s; split remainders and rank
moves; the jitter of two steps; the duty fit of one residual and its clamp; the memory fit's ranks
and margin; and the config's bounds at their ends.

Every expected value is worked out by hand in the test's comments, from the semantics the module
docstrings state, not read off the code's output.
"""
from __future__ import annotations

import json
import math
from dataclasses import replace
from pathlib import Path

import pytest

from pptl.errors import InputError
from pptl.ir import Op, Schedule
from pptl.timeline import Event
from pptl.tune.candidates import Structure, structures
from pptl.tune.memory import MemoryFit, MemoryModel, fit_memory
from pptl.tune.model import LayerCost, ModelDesc, TuneConfig, Work, tune_config_from_mapping
from pptl.tune.rank import Result, TuneResult, _prefer_lower_p95
from pptl.tune.split import balanced_split, rank_balanced_split
from pptl.tune.spread import Jitter, Spread, fit_jitter, step_spread
from pptl.tune.synth import SynthInput, greedy_orders
from pptl.tune.synth_ilp import order_makespan

INF = math.inf


def _synth(pp: int, m: int, F: list[float], I: list[float], W: list[float],  # noqa: E741
           limit: list[float] | None = None) -> SynthInput:
    """Activation 1 a micro-batch on every stage, I frees half of it and W the rest, no message time."""
    return SynthInput(pp=pp, microbatches=m, F=F, I=I, W=W, activation=[1.0] * pp,
                      limit=limit if limit is not None else [INF] * pp, w_activation=0.5, message=0.0)


# ----------------------------------------------------------------------------------------------
# synth: the greedy order


def test_synth_starts_a_forward_whose_activation_reaches_the_limit_exactly() -> None:
    """One rank, F = I = W = 1, activation 1 and a limit of 2 (two micro-batches' activations).

    t 0: F0 (holds 1). t 1: I0 (its F ended at 1; frees half: 0.5). t 2: F1 (0.5 + 1 = 1.5). t 3: I1
    (1.0). t 4: F2 would hold 1.0 + 1 = 2.0, exactly the limit: it fits, so F2 runs before any W; then
    I2, then the three Ws in I's order. Refusing it at the limit puts W0 before F2.
    """
    orders = greedy_orders(_synth(1, 3, F=[1.0], I=[1.0], W=[1.0], limit=[2.0]))
    assert orders == {0: [("F", 0), ("I", 0), ("F", 1), ("I", 1), ("F", 2), ("I", 2),
                          ("W", 0), ("W", 1), ("W", 2)]}


def test_synth_runs_the_input_gradient_first_when_it_and_a_forward_become_ready_together() -> None:
    """pp 3, m 2, F = [3, 1, 1], I = W = 1, no message time, no limit.

    Rank 0: F0 [0, 3], F1 [3, 6]. Rank 1: F0 [3, 4]. Rank 2: F0 [4, 5], I0 [5, 6]. Rank 1 is free at 4
    and waits: its I0 is ready when rank 2's I0 ends (6), its F1 when rank 0's F1 ends (6). I goes first
    (it is on the critical path of the stages before), so rank 1 runs F0, I0, F1.
    """
    orders = greedy_orders(_synth(3, 2, F=[3.0, 1.0, 1.0], I=[1.0] * 3, W=[1.0] * 3))
    assert orders[1][:3] == [("F", 0), ("I", 0), ("F", 1)]


def test_synth_fills_a_gap_of_exactly_one_weight_gradient_with_it() -> None:
    """pp 2, m 2, F = 1 on both, I = [1.5, 1], W = [0.5, 1], no message time, no limit.

    Rank 0: F0 [0, 1], F1 [1, 2]. Rank 1: F0 [1, 2], I0 [2, 3], F1 [3, 4], I1 [4, 5]. Rank 0: I0
    [3, 4.5]; its I1 is ready at 5 (rank 1's I1 ends), a gap of 0.5, exactly its W: W0 [4.5, 5] ends as
    I1 can start, so it costs nothing. Then I1 [5, 6.5], W1 [6.5, 7]: a step of 7. Leaving the gap idle
    runs I1 [5, 6.5], W0 [6.5, 7], W1 [7, 7.5]: half a unit longer.
    """
    x = _synth(2, 2, F=[1.0, 1.0], I=[1.5, 1.0], W=[0.5, 1.0])
    orders = greedy_orders(x)
    assert orders[0] == [("F", 0), ("F", 1), ("I", 0), ("W", 0), ("I", 1), ("W", 1)]
    assert order_makespan(x, orders) == 7.0


def _synth_under_limit(limit: float, mm: MemoryModel, head_activation: float = 0.0,
                       layer_activation: float = 1.0) -> Result:
    """pp 2, 4 micro-batches, one layer a stage (F 1, I 1, W 1), no message time: the synth candidate
    ordered under ``limit`` with the memory model ``mm``."""
    from pptl.tune import tune

    tc = _tc(microbatches=4, memory_limit=limit, families=["synth"],
             model={"layers": 2, "layer": {"F": 1, "B": 2, "I": 1, "W": 1, "activation": layer_activation},
                    "head": {"F": 0, "B": 0, "activation": head_activation}})
    res = tune(replace(tc, memory=mm))
    return next(r for r in res.results if r.label == "synth mem-limit m=4 split=balanced")


def test_synth_under_a_limit_leaves_room_for_the_last_ranks_targets() -> None:
    """Each input (rank 0) and target (rank 1) holds 1 for the step: 4 each. Rank 1's activation is
    0.1 (a layer) + 1.9 (the head) = 2 a micro-batch, so the limit 8 leaves it 4: two micro-batches.
    Rank 0 (F 1 a micro-batch, 0.1 each) sends forwards faster than rank 1 runs F and I (2 a
    micro-batch), so rank 1 runs F0 (holds 2), I0 (1), F1 (3), I1 (2), F2 (4), I2 (3); F3 would hold 5,
    over 4: W0 first (2), then F3 (4). Its peak is 4 + 4 = 8, at the limit: it fits."""
    r = _synth_under_limit(8.0, MemoryModel(data=1.0), head_activation=1.9, layer_activation=0.1)
    assert r.orders is not None
    assert list(r.orders[1][:8]) == [("F", 0), ("I", 0), ("F", 1), ("I", 1), ("F", 2), ("I", 2), ("W", 0), ("F", 3)]
    assert r.fits and r.peak[1] == pytest.approx(8.0)


def test_synth_under_a_limit_counts_each_ranks_messages_by_its_neighbours() -> None:
    """Each message buffer holds 0.25 to the step's end. Each rank of pp 2 has one neighbour: it sends
    4 and receives 4 messages, 8 x 0.25 = 2, so the limit 4 leaves 2 for activations of 1: rank 0
    starts F0 and F1 before I0 (counting two neighbours, 4 of messages, would leave it one micro-batch at
    a time, a step of 5 a micro-batch: 20). Rank 0 F0 [0, 1], F1 [1, 2]; rank 1 F0 [1, 2], I0 [2, 3],
    F1 [3, 4], I1 [4, 5], W0, W1 [5, 7], F2 [7, 8], I2, F3, I3, W2, W3 [8, 13]: a step of 13."""
    r = _synth_under_limit(4.0, MemoryModel(message=0.25))
    assert r.orders is not None
    assert list(r.orders[0][:3]) == [("F", 0), ("F", 1), ("I", 0)]
    assert r.fits and r.step == 13.0


# ----------------------------------------------------------------------------------------------
# candidates


def _tc(**over: object) -> TuneConfig:
    data: dict[str, object] = {"pp": 2, "microbatches": 4, "model": {"layers": 4, "layer": {"F": 1, "B": 2, "I": 1, "W": 1}}}
    data.update(over)
    return tune_config_from_mapping(data, source="t.yaml")


def _labels(tc: TuneConfig) -> list[str]:
    return [s.label for s in structures(tc)]


def test_interleaved_tries_the_vpp_that_leaves_one_layer_a_chunk_and_groups_from_pp_to_m() -> None:
    """pp 2, 4 layers: vpp 2 leaves each of the 4 virtual stages exactly one layer, so it is tried.
    m = 4 = 2pp: the group sizes pp (2), 2pp (4) and m (4, the same) all lie in pp..m, both ends
    included: G=2 and G=4."""
    tc = _tc(families=["interleaved-1f1b"])
    assert _labels(tc) == ["interleaved-1f1b vpp=2 G=2 m=4", "interleaved-1f1b vpp=2 G=4 m=4"]


def test_interleaved_tries_every_vpp_up_to_eight() -> None:
    """16 layers on pp 2: 8 a rank, so vpp 2..8 all leave a layer a chunk (8 is the largest tried).
    m = 2 = pp: the only group size in pp..m is 2."""
    tc = _tc(families=["interleaved-1f1b"], microbatches=2, model={"layers": 16, "layer": {"F": 1, "B": 2}})
    assert _labels(tc) == [f"interleaved-1f1b vpp={v} G=2 m=2" for v in range(2, 9)]


def test_synth_candidates_hold_zb_h1_and_zb_h2_memory_without_a_limit() -> None:
    """Without a memory limit synth holds pp micro-batches (ZB-H1's memory) or 2pp - 1 (ZB-H2's):
    2 and 3 at pp 2, and the exact order at ZB-H1's. With a limit, one more greedy order under it
    and the exact order under it instead."""
    assert _labels(_tc(families=["synth"])) == ["synth inflight=2 m=4", "synth inflight=3 m=4",
                                                "synth inflight=2 ilp m=4"]
    assert _labels(_tc(families=["synth"], memory_limit=10)) == [
        "synth mem-limit m=4", "synth inflight=2 m=4", "synth inflight=3 m=4", "synth mem-limit ilp m=4"]


# ----------------------------------------------------------------------------------------------
# ranking: the spread pick and the line for nothing built


def _spread(family: str, step: float, p05: float, p95: float, m: int = 8) -> Result:
    return Result(Structure(family, m), None, step=step, bubble=0.0, peak=(1.0,), fits=True,
                  spread=Spread(p05, step, p95))


def test_spreads_that_touch_overlap_and_the_lower_p95_is_picked() -> None:
    """a is fastest (step 100) but its spread is 101..110 (a plan with many near-critical paths: the
    longest of them under noise sits above the step); b (step 100.5) spreads 100..101. b's p95 is a's
    p05: the closed ranges share that point, so they overlap, and b slips less (p95 101 < 110)."""
    a, b = _spread("a", 100.0, 101.0, 110.0), _spread("b", 100.5, 100.0, 101.0)
    res = [a, b]
    note = _prefer_lower_p95(res)
    assert res == [b, a]
    assert note is not None and note.startswith("pick: b m=8 (p95 101) over a m=8 (p95 110)")


def test_equal_p95s_keep_the_faster_candidate() -> None:
    """a (step 100, 98..103) and b (step 101, 99..103) overlap with the same p95: nothing says b slips
    less, so the faster a stays first and no pick is noted. Of b and c below a with one p95 (103 < 110),
    the one ranked first (b) is picked."""
    a, b = _spread("a", 100.0, 98.0, 103.0), _spread("b", 101.0, 99.0, 103.0)
    res = [a, b]
    assert _prefer_lower_p95(res) is None and res == [a, b]
    a2, b2, c2 = _spread("a", 100.0, 98.0, 110.0), _spread("b", 101.0, 100.0, 103.0), _spread("c", 101.5, 100.5, 103.0)
    res2 = [a2, b2, c2]
    _prefer_lower_p95(res2)
    assert res2 == [b2, a2, c2]


def _rejected(family: str, why: str) -> Result:
    return Result(Structure(family, 4), None, rejected=why)


def test_nothing_built_names_up_to_three_candidates_and_counts_the_others() -> None:
    """Three candidates of one reason are all named, with no "and 0 more"; a fourth of that reason is
    "and 1 more"; one candidate of another reason is "1 other candidate" (no plural)."""
    three = TuneResult([_rejected(f, "why") for f in ("a", "b", "c")], None, [])
    assert three.unbuilt("t.yaml") == "t.yaml: no candidate could be built: a m=4, b m=4, c m=4: why"
    four = TuneResult([_rejected(f, "why") for f in ("a", "b", "c", "d")] + [_rejected("e", "other")], None, [])
    assert four.unbuilt("t.yaml") == ("t.yaml: no candidate could be built: a m=4, b m=4, c m=4 and 1 more: why "
                                      "(1 other candidate for other reasons)")


# ----------------------------------------------------------------------------------------------
# splits


def _model(layers: int, F: float = 1.0, B: float = 1.0, head: float = 0.0) -> ModelDesc:
    """A layer of F + B; a head of ``head`` F and twice that B (no embedding)."""
    return ModelDesc(layers=layers, layer=LayerCost(F=F, B=B), head=LayerCost(F=head, B=2 * head))


def test_balanced_split_of_a_layer_cost_that_is_no_exact_binary_fraction_keeps_every_layer() -> None:
    """7 layers of F 0.1 + B 0.2 = 0.3 each, a head of 0.5 + 1.0 = 1.5 (five layers' worth), 2 stages:
    6 layers (1.8) against 1 layer and the head (0.3 + 1.5 = 1.8) is exactly balanced. In binary,
    0.1 + 0.2 is a hair over 0.3, so 1.8 / (0.1 + 0.2) is a hair under 6: that must still be 6 layers,
    and the split must hold all 7."""
    split = balanced_split(_model(7, F=0.1, B=0.2, head=0.5), 2)
    assert split == (6, 1) and sum(split) == 7


def test_rank_balance_keeps_ranks_one_layer_apart() -> None:
    """V placement (rank 0 holds stages 0 and 3): (1, 1, 1, 2) gives rank 0 three layers, rank 1 two.
    Moving one layer would only make rank 1 the heavier by one: the split stays."""
    assert rank_balanced_split(_model(5), (1, 1, 1, 2), [0, 1, 1, 0]) == (1, 1, 1, 2)


def test_rank_balance_leaves_every_stage_a_layer() -> None:
    """V placement, a head worth two layers on stage 3: rank 0 holds 1 + 1 layers and the head (four
    layers' time), rank 1 two. Each of rank 0's stages holds one layer: none can give one away
    without leaving a stage empty, so the split stays (1, 1, 1, 1)."""
    assert rank_balanced_split(_model(4, head=1.0), (1, 1, 1, 1), [0, 1, 1, 0]) == (1, 1, 1, 1)


def test_rank_balance_gives_the_layer_to_the_lighter_stage_of_the_lightest_rank() -> None:
    """V placement, (1, 1, 2, 4): rank 0 holds 1 + 4 = 5 layers, rank 1 holds 1 + 2 = 3. One layer moves
    from rank 0's heavier stage (3: 4 -> 3) to rank 1's lighter stage (1: 1 -> 2): (1, 2, 2, 3), 4 and 4."""
    assert rank_balanced_split(_model(8), (1, 1, 2, 4), [0, 1, 1, 0]) == (1, 2, 2, 3)


# ----------------------------------------------------------------------------------------------
# spread


def _ev(kind: str, stage: int, start: float, end: float) -> Event:
    return Event(op=f"{kind}{stage}@{start}", rank=stage, lane="compute", start=start, end=end, kind=kind, stage=stage)


def test_two_timed_steps_measure_the_step_to_step_variation() -> None:
    """Steps of 9 and 11: mean 10, sample deviation sqrt(((9-10)^2 + (11-10)^2) / (2 - 1)) = sqrt(2),
    relative 0.1414. (F of stage 0 at 1.0 and 1.2 gives the per-op part.)"""
    j = fit_jitter([_ev("F", 0, 0.0, 1.0), _ev("F", 0, 2.0, 3.2)], [9.0, 11.0])
    assert j is not None
    assert j.step_cv == pytest.approx(math.sqrt(2) / 10)


def test_ops_of_no_duration_carry_no_variation() -> None:
    """Two W of stage 1 recorded with no duration (start = end) say nothing of how an op varies: they
    are left out, not divided by their mean of 0. F of stage 0 (1.0 and 1.2, mean 1.1, each 1/11 off,
    n/(n-1) = 2) gives F's deviation sqrt(2 * (1/11)^2 * 2 / 2) = sqrt(2)/11."""
    ev = [_ev("F", 0, 0.0, 1.0), _ev("F", 0, 2.0, 3.2), _ev("W", 1, 5.0, 5.0), _ev("W", 1, 6.0, 6.0)]
    j = fit_jitter(ev, None)
    assert j is not None and set(j.cv) == {"F"}
    assert j.cv["F"] == pytest.approx(math.sqrt(2) / 11)


def _one_op(kind: str, jitter: Jitter) -> Spread:
    return step_spread([0], {0: []}, [10.0], [kind], [True], jitter)


def test_a_full_backward_takes_the_larger_of_the_runs_i_and_w_variation() -> None:
    """A run of split backwards (I 2%, W 5%) timing a plan of full backwards: B varies as the more
    variable of its parts, 5%; drawn from the same seed, B's spread is exactly that of a B measured at 5%."""
    assert _one_op("B", Jitter({"I": 0.02, "W": 0.05})) == _one_op("B", Jitter({"B": 0.05}))


def test_an_overlapped_fb_takes_the_larger_of_f_and_b_variation() -> None:
    """FB not measured: it varies as the more variable of F (1%) and B (4%), 4%."""
    assert _one_op("FB", Jitter({"F": 0.01, "B": 0.04})) == _one_op("FB", Jitter({"FB": 0.04}))


# ----------------------------------------------------------------------------------------------
# calibration


def test_two_stages_of_two_kinds_fit_the_duty_exponent_without_an_error_test() -> None:
    """Stages busy 1.0 and 0.5 of the step (2 apart, over the least spread 1.4), one layer each. F takes
    1 and 0.5^0.1, B 1 and 0.5^0.5: per kind a slope of 0.1 and 0.5 in logs, pooled 0.3. Four points,
    two kind means and alpha leave one residual: too few to estimate an error from (the residuals,
    0.2 * ln(2)/2 each, would put alpha within 3 standard errors of 0 and drop it), so 0.3 stands."""
    from pptl.tune.calibrate import fit_duty_exponent

    times = [[1.0, 0.5 ** 0.1], [1.0, 0.5 ** 0.5]]
    assert fit_duty_exponent([1.0, 1.0], times, [1.0, 0.5]) == pytest.approx(0.3)


def test_a_run_whose_memory_bound_work_took_no_time_still_splits_its_backward() -> None:
    """Work per kind (GEMM flops, memory-bound bytes): F (2, 1), B (4, 3), I and W (2, 1.5). A run of
    F 2 and B 4 is GEMMs alone: 2 = 2x + 1y and 4 = 4x + 3y give x = 1 per flop, y = 0 per byte, a
    rate of 0, not a negative one. I = 2 * 1 = 2 and W = 2 of B's 4: shares 0.5 and 0.5."""
    from pptl.tune.calibrate import split_shares

    work = {"F": Work(2.0, 1.0), "B": Work(4.0, 3.0), "I": Work(2.0, 1.5), "W": Work(2.0, 1.5)}
    model = ModelDesc(layers=2, layer=LayerCost(F=1.0, B=2.0), work=work)
    assert split_shares(model, 2.0, 4.0) == pytest.approx((0.5, 0.5))


def _duty_run(path: Path, alpha: float, extra: dict[str, object] | None = None) -> Path:
    """A measured 1F1B-like run of 4 ranks, 16 micro-batches, stage work 10, 8, 8 and 10 layers (8 layers
    each, the embedding and the head 2 layers' worth), full-duty F 1 and B 2 a layer, each rank's compute
    at duty ** alpha of that, in a step of 550. A rank busy u of the step: u * 550 = 48 * work * u ** alpha."""
    from pptl.timeline import Timeline, TimelineMeta

    events = []
    for r, w in enumerate((10, 8, 8, 10)):
        u = (48 * w / 550) ** (1 / (1 - alpha))
        ops = [("F", mb, w * u ** alpha) for mb in range(16)] + [("B", mb, 2 * w * u ** alpha) for mb in range(16)]
        t = 550 - sum(d for *_, d in ops[1:])  # the first op at 0, the rest back to back up to 550
        for k, (kind, mb, d) in enumerate(ops):
            start = 0.0 if k == 0 else t
            events.append(Event(op=f"r{r}/compute/{kind} s{r} mb{mb}", rank=r, lane="compute", start=start,
                                end=start + d, kind=kind, stage=r, mb=mb))
            t = t + d if k else t
    tl = Timeline(events, TimelineMeta(source="measured", units="ms", family="1f1b", pp=4, microbatches=16,
                                       extra=extra or {}))
    path.write_text(json.dumps(tl.to_dict()))
    return path


def _four_stages() -> TuneConfig:
    return _tc(pp=4, microbatches=16, measured_split=[8, 8, 8, 8],
               model={"layers": 32, "layer": {"F": 1, "B": 2}, "embedding": {"F": 2, "B": 4}, "head": {"F": 2, "B": 4}})


def test_a_fitted_duty_exponent_over_its_largest_is_clamped_to_it(tmp_path: Path) -> None:
    """Ranks busy 0.64 and 0.30 of the step (over 2 apart) whose times follow duty ** 0.7 exactly: the
    least squares give 0.7, past the largest a power cap allows (0.5: clock ~ power ** (1/2)), so 0.5
    is used and the note says both."""
    from pptl.tune.calibrate import calibrate_tune

    got, _, notes = calibrate_tune(_four_stages(), _duty_run(tmp_path / "run.json", 0.7))
    assert got.duty_exponent == 0.5
    assert any(n.startswith("duty exponent 0.500 fitted (least squares 0.700, clamped to 0..0.5)") for n in notes), notes


def test_inputs_and_targets_cover_the_rank_that_held_the_most_before_the_first_step(tmp_path: Path) -> None:
    """The model's weights are 0, so what a rank held before its first step is its inputs (rank 0: one
    per micro-batch, 16) or targets (rank 3: 16); ranks 1 and 2 hold neither. Rank 0 held 32 MiB (2 a
    micro-batch), rank 3 64 (4 a micro-batch): the model takes 4, so neither rank is under-counted."""
    from pptl.tune.calibrate import calibrate_tune

    memory = {str(r): {"peak_mib": 100.0, "base_mib": base} for r, base in enumerate((32.0, 0.0, 0.0, 64.0))}
    got, _, _ = calibrate_tune(_four_stages(), _duty_run(tmp_path / "run.json", 0.3, {"memory": memory}))
    assert got.memory.data == 4.0


def test_a_ranks_busy_share_is_at_most_the_whole_step() -> None:
    """Rank 0's compute ops overlap (0-2 and 1-3, as a recorder can show an overlapped pair): 4 of busy
    time in a step of 3. It was busy the whole step, 1.0, not 1.33 (a duty over 1 would speed its ops
    up past full duty when the costs are normalised)."""
    from pptl.timeline import Timeline, TimelineMeta
    from pptl.tune.calibrate import rank_duty

    tl = Timeline([_ev("F", 0, 0.0, 2.0), _ev("B", 0, 1.0, 3.0), _ev("F", 1, 0.0, 1.5)], TimelineMeta(source="measured"))
    duty, rank_of = rank_duty(tl)
    assert duty == {0: 1.0, 1: 0.5} and rank_of == {0: 0, 1: 1}


# ----------------------------------------------------------------------------------------------
# memory


def _one_mb(pp: int) -> Schedule:
    """Each rank runs one stage's F of micro-batch 0 at 0-1 and its B at 1-2 (ops 2r and 2r + 1)."""
    ops = [Op(k, r, "compute", stage=r, mb=0) for r in range(pp) for k in ("F", "B")]
    return Schedule(family="t", pp=pp, num_stages=pp, microbatches=1, ops=ops,
                    lanes={(r, "compute"): [2 * r, 2 * r + 1] for r in range(pp)},
                    deps=[(2 * r, 2 * r + 1) for r in range(pp)])


def _fit(pp: int, measured: dict[int, float]) -> MemoryFit | None:
    return fit_memory(_one_mb(pp), [0.0, 1.0] * pp, [1.0, 2.0] * pp, [3.0] * pp, [10.0] * pp, measured, pp=pp,
                      w_activation=0.5, i_working=0.0, base=MemoryModel())


def test_memory_fit_leaves_out_a_rank_the_plan_has_not() -> None:
    """One rank (weight 10, activation 3 from F's start to B's end), measured at 20, and a record for
    rank 1, which a 1-rank plan has not: it is left out. One rank leaves the scale at 1; the working
    memory covers its gap 20 - 10 - 3 = 7, with no margin (one rank scatters around nothing): 7."""
    fit = _fit(1, {0: 20.0, 1: 99.0})
    assert fit is not None and fit.ranks == 1
    assert fit.model.full_scale == 1.0 and fit.model.working == pytest.approx(7.0)


def test_memory_fit_covers_the_worst_rank_twice_its_distance_above_the_fit() -> None:
    """Two ranks holding the same (weight 10, activation 3: the scale cannot be told, it stays 1),
    measured at 20 and 24: gaps of 7 and 11 over weights and activation, mean 9. The working memory
    covers the worst rank (11) plus its distance above the mean again (2): 13."""
    fit = _fit(2, {0: 20.0, 1: 24.0})
    assert fit is not None
    assert fit.model.working == pytest.approx(13.0) and fit.residual == pytest.approx(2.0)


def test_a_rank_that_runs_a_full_backward_keeps_the_full_backwards_working_memory() -> None:
    """Working memory 5 for B's temporaries, 2 for a rank of split backwards only. Rank 0 runs F [0, 1]
    and B [1, 2] (weight 10, activation 3): 10 + 3 + 5 = 18. A rank of F, I and W holds the same
    activation (I frees half at 2, W the rest at 3) with the smaller working memory: 10 + 3 + 2 = 15."""
    from pptl.tune.memory import rank_peaks

    mm = MemoryModel(working=5.0, split_working=2.0)
    full = rank_peaks(_one_mb(1), [0.0, 1.0], [1.0, 2.0], [3.0], [10.0], pp=1, w_activation=0.5, i_working=0.0, mm=mm)
    assert full == (18.0,)
    ops = [Op(k, 0, "compute", stage=0, mb=0) for k in ("F", "I", "W")]
    split = Schedule(family="t", pp=1, num_stages=1, microbatches=1, ops=ops, lanes={(0, "compute"): [0, 1, 2]},
                     deps=[(0, 1), (1, 2)])
    got = rank_peaks(split, [0.0, 1.0, 2.0], [1.0, 2.0, 3.0], [3.0], [10.0], pp=1, w_activation=0.5, i_working=0.0,
                     mm=mm)
    assert got == (15.0,)

# ----------------------------------------------------------------------------------------------
# the config's bounds at their ends


def test_a_sweep_of_64_micro_batch_counts_is_read_and_65_is_refused() -> None:
    """The field says "a list of 1..64 integers": 64 counts are a sweep, 65 are not."""
    assert _tc(microbatches=list(range(1, 65))).microbatches == tuple(range(1, 65))
    with pytest.raises(InputError, match=r"field 'microbatches': expected an integer or a list of 1\.\.64 integers"):
        _tc(microbatches=list(range(1, 66)))


def test_a_duty_exponent_of_exactly_2_is_read() -> None:
    """device.duty_exponent ranges over 0..2, both ends included; 2.5 is past it."""
    assert _tc(device={"duty_exponent": 2}).alpha == 2.0
    with pytest.raises(InputError, match=r"'device.duty_exponent': got 2.5, expected 0\.\.2"):
        _tc(device={"duty_exponent": 2.5})


def test_a_jitter_of_exactly_1_is_read() -> None:
    """device.jitter values are relative deviations in 0..1, 1 included."""
    tc = _tc(device={"jitter": {"F": 1, "step": 1}})
    assert tc.jitter == Jitter({"F": 1.0}, 1.0)


# ----------------------------------------------------------------------------------------------
# the report


def test_summary_counts_skipped_candidates_only_when_there_are_some() -> None:
    """One candidate that fits: "1 candidate: 1 fit, 0 over the memory limit, 0 rejected", with no
    ", 0 skipped". An exact order that was not tried adds ", 1 skipped" and makes it 2 candidates."""
    from pptl.tune.report import summary_lines
    from pptl.tune.split import Split

    fit = Result(Structure("1f1b", 4), Split("even", (2, 2)), step=10.0, bubble=0.25, peak=(3.0, 2.0), fits=True)
    assert summary_lines(TuneResult([fit], None, []), "ms")[0] == \
        "1 candidate: 1 fit, 0 over the memory limit, 0 rejected (times in ms)"
    skipped = Result(Structure("synth", 4, inflight=2, method="ilp"), Split("balanced", (2, 2)), skipped="no solver")
    assert summary_lines(TuneResult([fit, skipped], None, []), "ms")[0] == \
        "2 candidates: 1 fit, 0 over the memory limit, 0 rejected, 1 skipped (times in ms)"
