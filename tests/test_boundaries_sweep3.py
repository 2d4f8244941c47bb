"""Boundaries of the Monte Carlo sampler, the tune config, the explorer's API, the weight-update rules,
whatif's measured inputs and torch's CSV reader (hand mutants 705 on; docs/testing.md lists them).

Every expected number here is worked out by hand in the test's docstring, not read back from the code.
"""
from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest
from hand_graphs import hand_graph as _graph
from hand_graphs import hand_op as _op

from pptl.config import Config, Costs
from pptl.errors import InputError, InvalidScheduleError
from pptl.ir import Schedule
from pptl.schedules import build_schedule
from pptl.timeline import Event, Timeline, TimelineMeta
from pptl.tune.model import tune_config_from_mapping
from pptl.whatif import Jitter, Spread, monte_carlo
from pptl.whatif.spread import Quantiles

# --- the Monte Carlo sampler ----------------------------------------------------------------------

def test_zero_samples_are_refused_as_input_not_a_numpy_error():
    """``samples=0`` is below the 1 the docstring promises: an InputError naming --samples, not an
    empty draw whose quantiles numpy refuses."""
    s = _graph([_op("a")], [])
    with pytest.raises(InputError, match=r"--samples: got 0, expected 1 or more"):
        monte_carlo(s, Costs(base={"a": 1.0}), Spread(), samples=0)
    assert monte_carlo(s, Costs(base={"a": 1.0}), Spread(), samples=1).makespan.tolist() == [1.0]


def test_a_wide_jitter_clips_each_op_at_zero_time():
    """Jitter of sd 3 draws factor 1 + 3z, below 0 whenever z < -1/3 (37% of draws). Clipped at 0, one
    op of 1.0 takes max(0, 1 + 3z): never negative, and 0 exactly in about Phi(-1/3) = 0.369 of the
    samples (2,000 samples: 0.369 +- 0.011 at one sd; 0.33..0.41 is over 3 sd)."""
    s = _graph([_op("a")], [])
    out = monte_carlo(s, Costs(base={"a": 1.0}), Spread(jitter=Jitter(3.0)), samples=2000, seed=5)
    assert out.makespan.min() == 0.0
    assert out.busy.min() == 0.0
    assert 0.33 < float(np.mean(out.makespan == 0.0)) < 0.41


def test_a_rank_idler_than_the_run_is_no_faster_than_the_runs_least_busy_rank():
    """Two ranks with no messages: rank 0 one op of 10, rank 1 one op of 1; the run measured both at duty
    0.5, alpha 1. Rank 0 is busy the whole step (duty 1): (1 / 0.5) ** 1 = 2, its op takes 20. Rank 1
    is busy 1/10, then 1/20 of the step: below the run's least busy rank (0.5), so it runs at
    max(u, 0.5) / 0.5 = 1 of its time, its op still 1 (not 0.1 / 0.5 = 0.2 of it, and less each pass)."""
    s = _graph([_op("a", rank=0), _op("b", rank=1)], [], pp=2)
    one = Quantiles.of([1.0])
    spread = Spread(stages={(0, "F"): one, (1, "F"): one}, source="m.json", pp=2, duty={0: 0.5, 1: 0.5},
                    duty_exponent=1.0)
    out = monte_carlo(s, Costs(base={"a": 10.0, "b": 1.0}), spread, samples=2)
    assert out.busy[0].tolist() == pytest.approx([20.0, 20.0])
    assert out.busy[1].tolist() == pytest.approx([1.0, 1.0])
    assert out.makespan.tolist() == pytest.approx([20.0, 20.0])


# --- the tune config ------------------------------------------------------------------------------

def _tune(model: dict, **top) -> dict:
    return {"pp": 2, "microbatches": 4, "model": {"layers": 2, **model}, **top}


def test_as_many_layers_as_stages_is_a_model():
    """pp 2 needs a layer per stage: 2 layers (one each) are a model, 1 is refused naming pp."""
    assert tune_config_from_mapping(_tune({"layer": {"F": 1, "B": 2}}), source="t.yaml").model.layers == 2
    with pytest.raises(InputError, match=r"t.yaml: field 'model.layers': got 1, fewer than pp=2 stages"):
        tune_config_from_mapping({"pp": 2, "microbatches": 4, "model": {"layers": 1, "layer": {"F": 1, "B": 2}}},
                                 source="t.yaml")


def test_w_activation_of_exactly_two_is_taken():
    """The field says 0..2: 2.0 (I keeps twice what F kept) is a value, 2.01 is not."""
    cfg = tune_config_from_mapping(_tune({"layer": {"F": 1, "B": 2}, "w_activation": 2.0}), source="t.yaml")
    assert cfg.model.w_activation == 2.0
    with pytest.raises(InputError, match=r"t.yaml: field 'model.w_activation': got 2.01, expected 0..2 "):
        tune_config_from_mapping(_tune({"layer": {"F": 1, "B": 2}, "w_activation": 2.01}), source="t.yaml")


def test_an_embedding_b_with_a_layer_of_no_i_or_w_is_named_missing_not_divided_by_zero():
    """The embedding's I and W split its B in the layer's I:W ratio; a layer of I 0 and W 0 has no ratio
    (0 / 0), so the embedding's I and W are missing (the search names them), not a ZeroDivisionError.
    With I 1 and W 3 the embedding's B of 8 splits 8 * 1/4 = 2 and 8 * 3/4 = 6."""
    cfg = tune_config_from_mapping(_tune({"layer": {"F": 1, "I": 0, "W": 0}, "embedding": {"F": 1, "B": 8}}),
                                   source="t.yaml")
    assert cfg.model.missing(("I", "W")) == ["model.embedding.I", "model.embedding.W"]
    ok = tune_config_from_mapping(_tune({"layer": {"F": 1, "I": 1, "W": 3}, "embedding": {"F": 1, "B": 8}}),
                                  source="t.yaml").model
    assert (ok.part_cost(ok.embedding, "I"), ok.part_cost(ok.embedding, "W")) == (2.0, 6.0)


def test_an_empty_list_of_micro_batch_counts_is_refused():
    """``microbatches: []`` sweeps nothing: refused as 'a list of 1..64 integers', as 65 counts are."""
    for bad in ([], list(range(1, 66))):
        with pytest.raises(InputError, match=r"t.yaml: field 'microbatches': expected an integer or a list of "
                                             r"1..64 integers"):
            tune_config_from_mapping(_tune({"layer": {"F": 1, "B": 2}}, microbatches=bad), source="t.yaml")
    assert tune_config_from_mapping(_tune({"layer": {"F": 1, "B": 2}}, microbatches=[3]), source="t.yaml").microbatches == (3,)


def test_the_mlp_blocks_work_counts_each_kinds_gemms_and_bytes():
    """hidden 2, 3 tokens, 1-byte elements: a GEMM of 2 t h 4h = 96 FLOPs, th = 6 and hh = 4 bytes.
    F, I and W run two GEMMs (192), B four (384); bytes: F 11 th = 66, I 15 th = 90, W 5 th + 8 hh
    = 30 + 32 = 62 (the addmm_ reads the weight gradient it adds to), B 20 th + 24 hh = 120 + 96 = 216."""
    from pptl.tune.model import Work, mlp_block_work

    assert mlp_block_work(2, 3, 1) == {"F": Work(192.0, 66.0), "I": Work(192.0, 90.0), "W": Work(192.0, 62.0),
                                       "B": Work(384.0, 216.0)}


@pytest.mark.parametrize(("dtype", "size"), [("float32", 4), ("bfloat16", 2), ("float16", 2)])
def test_work_mlp_counts_bytes_at_the_workloads_element_size(dtype, size):
    """``work: mlp`` at hidden 8, 4 tokens: th = 32 and hh = 64 elements, so F moves 11 x 32 = 352
    elements and W 5 x 32 + 8 x 64 = 672: times 4 bytes in float32, 2 in bfloat16 and in float16."""
    cfg = tune_config_from_mapping(_tune({"layer": {"F": 1, "B": 2}, "work": "mlp"},
                                         workload={"hidden": 8, "tokens": 4, "dtype": dtype}), source="t.yaml")
    assert (cfg.model.work["F"].bytes, cfg.model.work["W"].bytes) == (352.0 * size, 672.0 * size)


# --- the explorer's API ---------------------------------------------------------------------------

def test_a_plan_over_the_bound_with_vpp_equal_to_pp_marks_pp():
    """interleaved-1f1b at pp 48 x vpp 48 x 48 micro-batches is over the 500,000 ops the explorer draws
    (2 x 48^3 = 221,184 compute ops alone, and a SEND and a RECV each way per stage boundary and
    micro-batch), and 48 micro-batches is already the fewest it takes at pp 48: the page marks pp, or
    vpp where it is the larger. At vpp = pp, pp; at vpp 49, vpp."""
    from pptl.serve import api

    def field(vpp: int) -> str:
        req = api.parse_request({"schedule": "interleaved-1f1b", "pp": "48", "vpp": str(vpp), "microbatches": "48"})
        with pytest.raises(InputError) as e:
            api.config_of(req.settings)
        assert "more than the 500,000 the explorer draws live" in str(e.value)
        return api.error_body(e.value)["field"]

    assert [field(v) for v in (47, 48, 49)] == ["pp", "pp", "vpp"]


def test_the_live_figure_draws_exactly_its_limit_of_blocks(monkeypatch):
    """1F1B at pp 2 with one micro-batch draws 2 ranks x (F + B) = 4 blocks (its messages take no
    time). With the live limit at 4 the figure is drawn; at 3 the page gets the note instead."""
    from pptl.serve import api

    req = api.parse_request({"schedule": "1f1b", "pp": "2", "microbatches": "1"})
    monkeypatch.setattr(api, "LIVE_MAX_BLOCKS", 4)
    fig = api.plan_view(req, cache=api.PlanCache())["figure"]
    assert fig["blocks"] == 4 and "data" in fig and "note" not in fig
    monkeypatch.setattr(api, "LIVE_MAX_BLOCKS", 3)
    fig = api.plan_view(req, cache=api.PlanCache())["figure"]
    assert fig["note"].startswith("4 blocks: too many to draw live (above 3)") and "data" not in fig


# --- whatif's measured run ------------------------------------------------------------------------

def _measured_run(path: Path, sends: tuple[float, ...] = ()) -> Path:
    """One rank, one stage: F of micro-batches 0, 1, 2 take 5, 1 and 1 ms (the first, the step's
    lead op, 5), then three B of 2 ms, then SENDs of the given times on the compute stream of a
    CUDA run (``messages: sync-send``)."""
    ev, t = [], 0.0
    for mb, d in enumerate((5.0, 1.0, 1.0)):
        ev.append(Event(op=f"r0/compute/F s0 mb{mb}", rank=0, lane="compute", start=t, end=t + d, kind="F",
                        stage=0, mb=mb))
        t += d
    for mb in range(3):
        ev.append(Event(op=f"r0/compute/B s0 mb{mb}", rank=0, lane="compute", start=t, end=t + 2.0, kind="B",
                        stage=0, mb=mb))
        t += 2.0
    for k, d in enumerate(sends):
        ev.append(Event(op=f"r0/compute/SEND {k}", rank=0, lane="compute", start=t, end=t + d, kind="SEND", peer=1))
        t += d
    meta = TimelineMeta(source="measured", units="ms", family="gpipe", pp=1, microbatches=3,
                        extra={"messages": "sync-send", "device": "cuda"})
    path.write_text(json.dumps(Timeline(ev, meta).to_dict()))
    return path


def test_the_leading_op_is_left_out_of_its_stage_and_kinds_cost(tmp_path):
    """Stage 0's F ran 5, 1 and 1 ms; the 5 is the step's first op, whose extra the spread adds
    itself: F costs the mean of the other two, 1 ms, not (5 + 1 + 1) / 3 = 2.33. B (2, 2, 2) is 2."""
    from pptl.whatif.study import load_measured

    m = load_measured(_measured_run(tmp_path / "m.json"))
    assert (m.costs.lookup("F", 0), m.costs.lookup("B", 0)) == (1.0, 2.0)


def test_the_send_hold_is_the_median_send(tmp_path):
    """SENDs of 0.1, 0.3, 0.2, 5.0 and 0.4 ms on the compute stream: sorted 0.1 0.2 0.3 0.4 5.0, the
    median is 0.3 ms (one slow send of 5 ms is not what a send holds the stream for)."""
    from pptl.whatif.study import load_measured

    m = load_measured(_measured_run(tmp_path / "m.json", sends=(0.1, 0.3, 0.2, 5.0, 0.4)))
    assert m.sends_on_compute
    assert m.send_hold == pytest.approx(0.3)


# --- torch's CSV reader ---------------------------------------------------------------------------

def test_a_loop_file_whose_last_round_is_short_counts_the_whole_round():
    """pp 2, stages 0, 1 and 2 in loop order (stage s on rank s % 2): stage 2 starts the second round
    of two stages, so the file holds 2 // 2 + 1 = 2 stages per rank, 4 stages, not (2 + 1) // 2 = 1 per
    rank, 2 stages, which leaves stage 2 outside the plan."""
    from pptl.formats.torch_csv import load_csv_text

    s, notes, _, _ = load_csv_text("0F0,2F0,2B0,0B0\n1F0,1B0\n")
    assert notes[1] == "placement: loop (stage s on rank s % 2, 2 per rank), 4 stages (inferred)"
    assert (s.pp, s.num_stages) == (2, 4)


# --- the run's program ----------------------------------------------------------------------------

def _plan(microbatches: int = 1) -> Schedule:
    return build_schedule(Config(schedule="1f1b", pp=2, microbatches=microbatches))


def _with(s: Schedule, i: int, **kw) -> Schedule:
    ops = list(s.ops)
    ops[i] = replace(ops[i], **kw)
    return replace(s, ops=ops)


def _without(s: Schedule, drop: set[int]) -> Schedule:
    keep = [i for i in range(len(s.ops)) if i not in drop]
    new = {i: k for k, i in enumerate(keep)}
    return Schedule(family=s.family, pp=s.pp, num_stages=s.num_stages, microbatches=s.microbatches,
                    ops=[s.ops[i] for i in keep],
                    lanes={k: [new[i] for i in v if i in new] for k, v in s.lanes.items()},
                    deps=[(new[u], new[v]) for u, v in s.deps if u in new and v in new], config=s.config)


def test_build_program_refuses_an_op_on_rank_pp():
    """1F1B at pp 2 has ranks 0 and 1: an op moved to rank 2 (= pp) is outside 0..1, an
    InvalidScheduleError, not a KeyError; on rank 1 it is inside."""
    from pptl.run.program import build_program

    s = _plan()
    with pytest.raises(InvalidScheduleError, match=r"^plan: op r2/compute/F s0 mb0 is on rank 2, outside 0\.\.1$"):
        build_program(_with(s, 0, rank=2))


def test_build_program_refuses_a_stage_or_direction_equal_to_their_counts():
    """1F1B at pp 2 has stages 0 and 1 and one direction (0): stage 2 and direction 1 are each one
    past the end, and refused naming both counts."""
    from pptl.run.program import build_program

    s = _plan()
    assert s.ops[0].id == "r0/compute/F s0 mb0"
    with pytest.raises(InvalidScheduleError, match=r"names stage 2 direction 0, outside the plan's 2 stages and "
                                                   r"1 directions"):
        build_program(_with(s, 0, stage=2))
    with pytest.raises(InvalidScheduleError, match=r"names stage 0 direction 1, outside the plan's 2 stages and "
                                                   r"1 directions"):
        build_program(_with(s, 0, direction=1))


def test_build_program_refuses_more_stage_layers_than_stages():
    """1F1B at pp 2 has 2 stages: workload.stage_layers of 3 entries names a stage the plan does not
    have (the config alone cannot know the stage count), refused with 3 and 2; 2 entries are taken."""
    from pptl.config import config_from_mapping
    from pptl.run.program import build_program

    def plan(layers: list[int]) -> Schedule:
        return build_schedule(config_from_mapping({"schedule": "1f1b", "pp": 2, "microbatches": 2,
                                                   "workload": {"stage_layers": layers}}))

    with pytest.raises(InputError, match=r"^plan: field 'workload.stage_layers': got 3 entries, expected one per "
                                         r"stage \(2 for 1f1b with these sizes\)$"):
        build_program(plan([1, 1, 1]))
    assert len(build_program(plan([1, 2])).ranks) == 2


def test_build_program_names_the_first_send_without_its_receive():
    """1F1B at pp 2 with 3 micro-batches; rank 1 keeps only its RECV_F of micro-batch 0. Rank 0's
    SENDs of micro-batches 0, 1, 2 pair in order with that one RECV: micro-batch 0 matches, and the
    first left over is micro-batch 1's SEND (not the last, micro-batch 2's)."""
    from pptl.run.program import build_program

    s = _plan(3)
    drop = {i for i, op in enumerate(s.ops) if op.kind == "RECV" and op.flow == "F" and op.mb > 0}
    assert len(drop) == 2
    with pytest.raises(InvalidScheduleError, match=r"^plan: r0/send/SEND_F s0 mb1 ->r1 has no matching RECV "):
        build_program(_without(s, drop))


# --- the matplotlib figure ------------------------------------------------------------------------

def test_a_png_of_zero_length_ops_spans_one_unit():
    """Both ops zero-length at t = 3: no span, so the time axis runs 3 to 3 + 1, plus the 0.5% the
    last block's edge keeps inside the axes: 4.005 (not a division by a span of 0)."""
    from pptl.render.layout import build_layout
    from pptl.render.mpl import figure_from_layout

    ev = [Event(op=f"r{r}/compute/F s{r} mb0", rank=r, lane="compute", start=3.0, end=3.0, kind="F", stage=r, mb=0)
          for r in (0, 1)]
    fig = figure_from_layout(build_layout(Timeline(ev, TimelineMeta(pp=2, microbatches=1))))
    assert tuple(float(x) for x in fig.axes[0].get_xlim()) == pytest.approx((3.0, 4.005))


def test_a_png_of_exactly_rasterize_above_blocks_stays_vector():
    """Two blocks of 0.001 on a span of 1000 (far under the 4 px an outline needs): with
    rasterize_above 2 the figure holds exactly the limit, "more than" it is painted as an image, so
    these stay one collection of polygons, not rasterized; with rasterize_above 1 they are one image."""
    from pptl.render.layout import build_layout
    from pptl.render.mpl import FigureOptions, figure_from_layout

    ev = [Event(op="r0/compute/F s0 mb0", rank=0, lane="compute", start=0.0, end=0.001, kind="F", stage=0, mb=0),
          Event(op="r1/compute/F s1 mb0", rank=1, lane="compute", start=999.999, end=1000.0, kind="F", stage=1, mb=0)]
    lay = build_layout(Timeline(ev, TimelineMeta(pp=2, microbatches=1)))
    at = figure_from_layout(lay, FigureOptions(rasterize_above=2)).axes[0]
    assert (len(at.images), [c.get_rasterized() for c in at.collections]) == (0, [False])
    over = figure_from_layout(lay, FigureOptions(rasterize_above=1)).axes[0]
    assert (len(over.images), len(over.collections)) == (1, 0)
