"""Boundaries of the MoE overlap family and its neighbours that hand-written mutants
(``/work/wt/_mutants/wave3_moe.py``) showed no test held: each cost key's default and the sub-op
that takes it, the offload size exactly at its limit, the op limit exactly at 5,000,000, pp = 2
without interleaving, the memory formula when every forward is warmup, EP groups of 2 (the
all-to-all rendezvous), the exposure of an all-to-all whose members start apart, the offloaded
bytes and the report lines, the weight-update estimate's tree depth for ranks between powers of
two, the typed plan metadata at its limits (0, 80 characters, a list of exactly the limit, the view
cache's size), the MoE HTML figure's legend rows, phase lines, axis titles and section widths, the
render samples and the style names.

Every expected value is worked out by hand in the test's docstring or comments, from the semantics
the module docstrings state, not read off the code's output.
"""
from __future__ import annotations

from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from pptl.config import Config
from pptl.errors import InputError
from pptl.ir import Op, Schedule, ScheduleBuilder
from pptl.planning import load_timeline
from pptl.render.base import Category
from pptl.render.dualpipe_style import DualPipeStyle
from pptl.render.moe_figure import MoEFigure, moe_figure
from pptl.render.moe_html import _legend_rows, _section_domains, moe_figure_dict
from pptl.render.moe_style import MoEStyle
from pptl.render.samples import dualpipe_sample, moe_sample, scaled, weight_update_sample
from pptl.render.styles import resolve_style
from pptl.render.weight_update_style import WeightUpdateStyle
from pptl.schedules import build_schedule, get_family
from pptl.schedules._meta_fields import ViewCache, read_int, read_list
from pptl.schedules._moe_meta import MoEMeta
from pptl.schedules._moe_metrics import EP_KINDS, exposed_time, exposure, moe_metrics
from pptl.schedules._pipeline_meta import PipelineMeta
from pptl.schedules.moe_overlap import parse_options, runnable, steps, validate
from pptl.schedules.weight_update_estimate import estimate_grid
from pptl.simulate import simulate

NAME = "moe-1f1b-overlap"
FIXTURE = Path(__file__).resolve().parent.parent / "fixtures" / "moe_overlap.yaml"


def _moe(pp: int = 1, microbatches: int = 1, vpp: int = 1, **options: Any) -> Config:
    return Config(schedule=NAME, pp=pp, vpp=vpp, microbatches=microbatches, options=options)


def _durations(s: Schedule) -> dict[tuple[str, str, int], float]:
    """Simulated duration of each (kind, flow, layer) of a one-micro-batch, one-rank plan."""
    sim = simulate(s)
    out: dict[tuple[str, str, int], float] = {}
    for i, op in enumerate(s.ops):
        if op.lane in ("compute", "comm"):
            key = (op.kind, op.flow, op.sub)
            assert key not in out  # one micro-batch, one rank: each sub-op once
            out[key] = sim.end[i] - sim.start[i]
    return out


# ------------------------------------------------------------------------------------------------
# moe_overlap: each cost key's default, and the sub-op that takes each key


def test_backward_costs_default_to_their_forward_counterparts_and_wgrad_to_attn_plus_mlp() -> None:
    """Only attn = 1, mlp = 3, dispatch = 0.25, combine = 0.75 given, one layer: the documented
    defaults are attn_b = attn = 1, mlp_b = mlp = 3, wgrad = attn + mlp = 4, and the loss's combine
    (the last stage's last forward combine; here the only one) = combine = 0.75. The backward
    combine takes combine (0.75), the backward dispatch dispatch (0.25)."""
    s = build_schedule(_moe(layers_per_chunk=1, costs={"attn": 1, "mlp": 3, "dispatch": 0.25, "combine": 0.75}))
    assert _durations(s) == {
        ("ATTN", "F", 0): 1, ("A2A_DISPATCH", "F", 0): 0.25, ("MLP", "F", 0): 3, ("A2A_COMBINE", "F", 0): 0.75,
        ("A2A_COMBINE", "B", 0): 0.75, ("MLP", "B", 0): 3, ("A2A_DISPATCH", "B", 0): 0.25, ("ATTN", "B", 0): 1,
        ("WGRAD", "B", 0): 4,
    }


def test_each_sub_op_takes_its_own_cost_key_and_only_the_last_layers_combine_takes_the_loss() -> None:
    """Every key distinct, two layers, one stage (so it is the last): B.mlp takes mlp_b (4), not mlp
    (2); B.attn attn_b (3), not attn (1); B.combine combine (0.75), not dispatch (0.25); the forward
    combine of layer 1 (the last layer of the last stage) takes combine_loss (1.5), layer 0's takes
    combine (0.75)."""
    costs = {"attn": 1, "mlp": 2, "attn_b": 3, "mlp_b": 4, "wgrad": 5, "dispatch": 0.25, "combine": 0.75,
             "combine_loss": 1.5}
    d = _durations(build_schedule(_moe(layers_per_chunk=2, costs=costs)))
    for layer in (0, 1):
        assert d[("ATTN", "F", layer)] == 1 and d[("MLP", "F", layer)] == 2
        assert d[("ATTN", "B", layer)] == 3 and d[("MLP", "B", layer)] == 4 and d[("WGRAD", "B", layer)] == 5
        assert d[("A2A_DISPATCH", "F", layer)] == d[("A2A_DISPATCH", "B", layer)] == 0.25
        assert d[("A2A_COMBINE", "B", layer)] == 0.75
    assert d[("A2A_COMBINE", "F", 0)] == 0.75
    assert d[("A2A_COMBINE", "F", 1)] == 1.5


def test_explicit_dispatch_beside_a2a_bytes_keeps_its_own_time() -> None:
    """a2a_bytes 4 over ep_bandwidth 8 gives 0.5 for whichever of dispatch/combine is not given;
    dispatch: 0.2 is given and stays 0.2. The loss's combine follows combine: 0.5."""
    c = parse_options(_moe(costs={"a2a_bytes": 4, "ep_bandwidth": 8, "dispatch": 0.2})).costs
    assert (c.dispatch, c.combine, c.combine_loss) == (0.2, 0.5, 0.5)


def test_onload_bandwidth_defaults_to_the_offload_bandwidth() -> None:
    """offload_bytes 0.25 at offload_bandwidth 2: the offload takes 0.125, and the onload, with no
    onload_bandwidth of its own, moves the same bytes at the same 2: 0.125 (not 0.25 at 1)."""
    c = parse_options(_moe(offload=True, costs={"offload_bytes": 0.25, "offload_bandwidth": 2})).costs
    assert (c.offload, c.onload) == (0.125, 0.125)


def test_offload_bytes_up_to_a_layers_whole_share_is_accepted() -> None:
    """The limit is activation / layers_per_chunk (a layer cannot offload more than it holds),
    inclusive: 0.5 with 2 layers of activation 1 is exactly a layer's share; 0.1 with 3 layers of
    activation 0.3 is too, though 0.1 * 3 is 0.30000000000000004 in floating point."""
    assert parse_options(_moe(offload=True, costs={"offload_bytes": 0.5})).costs.offload_bytes == 0.5
    cfg = replace(_moe(offload=True, layers_per_chunk=3, costs={"offload_bytes": 0.1}), activation=0.3)
    assert parse_options(cfg).costs.offload_bytes == 0.1
    build_schedule(cfg)
    with pytest.raises(InputError, match="expected at most activation / layers_per_chunk = 0.1 "):
        parse_options(replace(cfg, options={**cfg.options, "costs": {"offload_bytes": 0.11}}))


# ------------------------------------------------------------------------------------------------
# moe_overlap: the family's rules at their limits


def test_host_lag_0_is_the_unbounded_issue_window() -> None:
    """options.host_lag counts compute sub-ops the host may issue ahead, 0 meaning no bound: 0 is a
    valid value and the plan records it."""
    cfg = _moe(host_lag=0)
    assert parse_options(cfg).host_lag == 0
    assert build_schedule(cfg).meta["host_lag"] == 0


def test_pp_2_without_interleaving_is_refused() -> None:
    """pp > 1 needs vpp >= 2; pp = 2 is the smallest pipeline it applies to."""
    with pytest.raises(InputError, match="field 'vpp': got 1, expected at least 2 when pp > 1"):
        build_schedule(_moe(pp=2, microbatches=4))


def test_the_op_estimate_may_reach_exactly_five_million() -> None:
    """Each (stage, micro-batch) plans 11 ops a layer + 7 (9 sub-ops and 2 copies a layer, 3
    markers, 4 PP ops): with 3 layers that is 40, so 125,000 micro-batches on one rank is exactly
    5,000,000 = MAX_OPS (accepted) and 125,001 is 5,000,040 (refused)."""
    validate(_moe(microbatches=125_000, layers_per_chunk=3))
    with pytest.raises(InputError, match="got 125001, which would plan about 5,000,040 ops"):
        validate(_moe(microbatches=125_001, layers_per_chunk=3))


def test_memory_formula_caps_at_every_chunk_when_all_forwards_are_warmup() -> None:
    """pp=2, vpp=2, m=2: rank 0 runs all 4 of its (micro-batch, chunk) forwards before its first
    backward (interleaved warmup 2(p-1) + (V-1)G = 4 = mV), so its peak is 4 chunk activations, not
    warmup + 1 = 5; with pp=1, m=1 the one forward is the peak: 1."""
    fam = get_family(NAME)
    cfg = _moe(pp=2, vpp=2, microbatches=2)
    assert fam.memory(cfg) == 4
    assert simulate(build_schedule(cfg)).ranks[0].peak_activation == 4
    assert fam.memory(_moe()) == 1


def test_without_overlap_there_is_no_plus_one_warmup_and_the_plan_says_so() -> None:
    """pp=1 without overlap is plain 1F1B on one rank (interleaved warmup 0, no +1): each forward
    is followed by its own backward, and the plan records extra_warmup 0 and warmup [0]."""
    cfg = _moe(microbatches=2, overlap=False)
    assert steps(cfg, 0, parse_options(cfg)) == [((0, 0), None), (None, (0, 0)), ((1, 0), None), (None, (1, 0))]
    meta = build_schedule(cfg).meta
    assert meta["extra_warmup"] == 0 and meta["warmup"] == [0]


def test_a_plan_without_layers_per_chunk_is_not_runnable() -> None:
    """The executor needs both ep_groups and layers_per_chunk: a hand-written file missing either
    one is refused."""
    s = build_schedule(_moe())
    for key in ("layers_per_chunk", "ep_groups"):
        bare = replace(s, meta={k: v for k, v in s.meta.items() if k != key})
        with pytest.raises(InputError, match="needs meta.ep_groups and meta.layers_per_chunk"):
            runnable(bare, "p.json")
    runnable(s, "p.json")


# ------------------------------------------------------------------------------------------------
# _moe_layers: EP groups of two, the held spans


def test_ep_2_members_all_to_alls_wait_for_each_other() -> None:
    """pp=1, one micro-batch, one layer, ep=2: each member's copy of an all-to-all needs what the
    other member's copy needs: F.dispatch after the peer's F.attn, F.combine after its F.mlp,
    B.combine after its F.combine (the backward's first all-to-all needs its forward), B.dispatch
    after its B.mlp; both ways, 8 edges across the two ranks."""
    s = build_schedule(_moe(ep=2, layers_per_chunk=1))
    across = sorted((s.ops[u].rank, s.ops[u].kind, s.ops[u].flow, s.ops[v].kind, s.ops[v].flow)
                    for u, v in s.deps if s.ops[u].rank != s.ops[v].rank)
    one_way = [("ATTN", "F", "A2A_DISPATCH", "F"), ("MLP", "F", "A2A_COMBINE", "F"),
               ("A2A_COMBINE", "F", "A2A_COMBINE", "B"), ("MLP", "B", "A2A_DISPATCH", "B")]
    assert across == sorted((r, *e) for r in (0, 1) for e in one_way)


def test_held_saved_inputs_skip_only_the_first_stages_layer_0_input() -> None:
    """hidden_bytes 1, two layers, one stage: a layer holds x and u_a (3 tensors) from its Attn to
    its WGrad; the first stage's layer-0 input x is made outside the step, so layer 0 holds 2 and
    layer 1 (whose x is layer 0's output) holds 3."""
    s = build_schedule(_moe(layers_per_chunk=2, costs={"hidden_bytes": 1}))
    saved = {s.ops[a].sub: n for a, ea, b, eb, n in s.meta["held"]
             if (s.ops[a].kind, s.ops[a].flow, ea, s.ops[b].kind, eb) == ("ATTN", "F", 0, "WGRAD", 1)}
    assert saved == {0: 2, 1: 3}


# ------------------------------------------------------------------------------------------------
# _moe_meta: the plan file's values at their limits


def test_moe_meta_reads_host_lag_0_and_refuses_layers_or_ep_of_0() -> None:
    """host_lag 0 means unbounded (a valid plan); a chunk of 0 layers or an EP group of 0 members is
    no plan."""
    assert MoEMeta.from_meta({"host_lag": 0}).host_lag == 0
    with pytest.raises(InputError, match="field 'meta.layers_per_chunk': got 0, expected an integer in 1.."):
        MoEMeta.from_meta({"layers_per_chunk": 0})
    with pytest.raises(InputError, match="field 'meta.ep': got 0, expected an integer in 1.."):
        MoEMeta.from_meta({"ep": 0})


def test_held_spans_may_start_at_op_0_and_hold_0() -> None:
    """An op index is >= 0 (op 0 included) and an amount >= 0 (an onload of 0 bytes holds 0)."""
    assert MoEMeta.from_meta({"held": [[0, 0, 1, 1, 0]]}).held == ((0, 0, 1, 1, 0),)
    s = build_schedule(_moe(microbatches=2, offload=True, costs={"offload_bytes": 0, "hidden_bytes": 1}))
    assert any(span[4] == 0 for span in s.meta["held"])
    assert MoEMeta.from_meta(s.meta).held == tuple(tuple(x) for x in s.meta["held"])


# ------------------------------------------------------------------------------------------------
# _moe_metrics: exposure of an all-to-all whose members start apart


def _a2a_schedule(subs: tuple[int, ...]) -> Schedule:
    """One EP group of ranks 0 and 1: one forward dispatch per layer in ``subs`` on each rank."""
    b = ScheduleBuilder()
    for sub in subs:
        for rank in (0, 1):
            b.add(Op(kind="A2A_DISPATCH", rank=rank, lane="comm", stage=0, mb=0, direction=rank, flow="F", sub=sub))
    return Schedule(family=NAME, pp=2, num_stages=1, microbatches=1, ops=b.ops, lanes=b.lanes,
                    meta={"ep_groups": [[0, 1]]})


def test_an_all_to_all_counts_from_its_last_members_start() -> None:
    """Rank 0's copy runs 0-2, rank 1's 1-2, no compute: the all-to-all cannot move data before
    rank 1 joins at 1, so each rank has 1 of EP time, all of it exposed (not 2 on rank 0)."""
    got = exposure(_a2a_schedule((0,)), [0.0, 1.0], [2.0, 2.0])
    assert got["per_rank"]["ep_time"] == [1.0, 1.0] and got["per_rank"]["exposed_ep"] == [1.0, 1.0]
    assert got["ep_time"] == got["exposed_ep"] == 1.0


def test_all_to_alls_of_different_layers_are_timed_apart() -> None:
    """Layer 0's copies run 0-1 on both ranks and layer 1's 5-6: two all-to-alls of 1 each, 2 per
    rank; layer 1's later start does not shorten layer 0's."""
    got = exposure(_a2a_schedule((0, 1)), [0.0, 0.0, 5.0, 5.0], [1.0, 1.0, 6.0, 6.0])
    assert got["per_rank"]["ep_time"] == [2.0, 2.0]


def test_a_pp_transfer_beside_an_all_to_all_does_not_hide_it() -> None:
    """Only the compute lane hides communication: an all-to-all 0-2 beside a SEND 0-2 on the send
    lane is exposed for 2; beside an Attn 1-2 on the compute lane, for 1."""
    ivs = [(0, "comm", "A2A_DISPATCH", 0.0, 2.0), (0, "send", "SEND", 0.0, 2.0)]
    assert exposed_time(ivs, EP_KINDS) == ({0: 2.0}, {0: 2.0})
    assert exposed_time([*ivs, (0, "compute", "ATTN", 1.0, 2.0)], EP_KINDS) == ({0: 2.0}, {0: 1.0})


def test_offloaded_bytes_count_offloads_only_and_no_copy_line_without_copies() -> None:
    """pp=1, m=2, two layers, offloading at the default offload_bytes = activation / (2 x 2) = 0.25:
    each chunk's last layer stays (its backward is the next one), so the two layer-0 offloads move
    0.5; their onloads bring the same bytes back and are not counted again. Without offloading the
    report has the EP line only."""
    s = build_schedule(_moe(microbatches=2, offload=True))
    m = moe_metrics(s, simulate(s))
    assert m["moe"]["offloaded"] == 0.5 and m["moe"]["per_rank"]["offloaded"] == [0.5]
    plain = build_schedule(_moe(microbatches=2))
    report = moe_metrics(plain, simulate(plain))["report"]
    assert len(report) == 1 and report[0].startswith("EP all-to-all: ")


# ------------------------------------------------------------------------------------------------
# weight_update_estimate: the broadcast tree's depth


def test_estimate_prices_ranks_between_powers_of_two_at_the_next_tree_level() -> None:
    """A broadcast over p ranks costs 0.05 ms x ceil(log2 p): 12 ranks need 4 levels (0.2 ms), as
    16 do, not the 3 of 8; 8 ranks need exactly 3 (0.15 ms)."""
    def at(p: int, **latency: float) -> float:
        return estimate_grid((p,), (10e9,), **latency)[0][0]

    assert at(12) == pytest.approx(at(12, bcast_latency=0.2))
    assert at(12) != pytest.approx(at(12, bcast_latency=0.15))
    assert at(8) == pytest.approx(at(8, bcast_latency=0.15))


# ------------------------------------------------------------------------------------------------
# _pipeline_meta and _meta_fields at their limits


def test_source_format_may_be_80_characters_and_parameter_copies_not_0() -> None:
    name = "x" * 80
    assert PipelineMeta.from_meta({"source_format": name}).source_format == name
    with pytest.raises(InputError, match="field 'meta.source_format'"):
        PipelineMeta.from_meta({"source_format": name + "x"})
    assert PipelineMeta.from_meta({"parameter_copies": 1}).copies == 1
    with pytest.raises(InputError, match="field 'meta.parameter_copies': got 0, expected an integer in 1..1024"):
        PipelineMeta.from_meta({"parameter_copies": 0})


def test_read_list_takes_exactly_its_limit_and_read_int_only_integral_floats() -> None:
    assert read_list([1, 2, 3], "f", "", 3) == [1, 2, 3]
    with pytest.raises(InputError, match="at most 3 items"):
        read_list([1, 2, 3, 4], "f", "", 3)
    assert read_int(8.0e9, "f", "") == 8_000_000_000
    assert read_int(5, "f", "", 0, 5) == 5 and read_int(0, "f", "", 0, 5) == 0
    with pytest.raises(InputError, match="expected an integer in 0..5"):
        read_int(6, "f", "", 0, 5)
    with pytest.raises(InputError, match="field 'meta.f': got 2.5, expected an integer"):
        read_int(2.5, "f", "")


def test_view_cache_keeps_its_size_newest_entries() -> None:
    """Size 2, three sets of values read in turn: the oldest (a) goes, so a is read again while c
    (the newest) is still held."""
    cache: ViewCache[str] = ViewCache(size=2)
    a, b, c = ("a",), ("b",), ("c",)
    reads: list[str] = []

    def get(v: tuple[str]) -> str:
        def read() -> str:
            reads.append(v[0])
            return v[0]

        return cache.get(v, read)

    for v in (a, b, c):
        get(v)
    get(c)
    get(a)
    assert reads == ["a", "b", "c", "a"]


# ------------------------------------------------------------------------------------------------
# moe_html: legend rows, phase lines, axis titles, section widths


@pytest.fixture(scope="module")
def figure() -> MoEFigure:
    f = moe_figure(load_timeline(FIXTURE))
    assert f is not None
    return f


def test_a_legend_that_exactly_fits_one_row_takes_one() -> None:
    """An entry is 40 px of swatch and gaps plus 12 px x 0.62 per character: a 25-character label
    is 40 + 186 = 226 px, two are 452 px: one row at 452 px, two at 451."""
    cats = tuple(Category(key=k, label=k * 25, colours=("edge",)) for k in "ab")
    assert _legend_rows(cats, 452) == 1
    assert _legend_rows(cats, 451) == 2


def test_phase_lines_stand_between_phases_only(figure: MoEFigure) -> None:
    """Warmup, steady and cooldown: two boundaries, so two dashed lines, at the ends of the first
    two phases; none at the figure's right edge."""
    assert [p[0] for p in figure.phases] == ["warmup", "steady", "cooldown"]
    shapes = moe_figure_dict(figure)["layout"]["shapes"]
    assert [s["x0"] for s in shapes] == [figure.phases[0][2], figure.phases[1][2]]


def test_only_the_first_close_up_names_its_rows(figure: MoEFigure) -> None:
    layout = moe_figure_dict(figure)["layout"]
    assert layout["yaxis"]["ticktext"] == ["Computation", "Communication", "Offload"]
    for ax in range(2, len(figure.sections) + 1):
        assert layout[f"yaxis{ax}"]["ticktext"] == ["", "", ""]


@pytest.mark.parametrize("units, title", [("", "time"), ("unit", "time"), ("ms", "time (ms)")])
def test_close_up_axis_title_names_real_units_only(figure: MoEFigure, units: str, title: str) -> None:
    layout = moe_figure_dict(replace(figure, units=units))["layout"]
    assert layout["xaxis"]["title"]["text"] == title


def test_section_widths_are_compute_blocks_plus_one(figure: MoEFigure) -> None:
    """Two sections of 1 and 3 compute blocks weigh 2 and 4; with a 0.03 gap the 0.97 left splits
    0.97 x 2/6 and 0.97 x 4/6."""
    sec = figure.sections[0]
    compute = [blk for blk in sec.blocks if blk.row == "Computation"]
    one, three = replace(sec, blocks=tuple(compute[:1])), replace(sec, blocks=tuple(compute[:3]))
    doms = _section_domains(replace(figure, sections=(one, three)))
    assert doms[0] == pytest.approx((0.0, 0.97 / 3))
    assert doms[1] == pytest.approx((0.97 / 3 + 0.03, 1.0))


# ------------------------------------------------------------------------------------------------
# samples and style names


def test_weight_update_sample_broadcasts_each_bucket_from_its_owner() -> None:
    """Bucket g is owned by rank g % 4: bucket 1's broadcast source is rank 1, bucket 0's rank 0."""
    tl = weight_update_sample(4, 4)
    src = {e.bucket: e.rank for e in tl.events if e.kind == "BCAST" and e.label == "Broadcast (src)"}
    assert src == {0: 0, 1: 1, 2: 2, 3: 3}


def test_scaled_sample_is_1f1b_with_p_minus_1_minus_r_warmup() -> None:
    """64 ops on 4 ranks: m = 64 // 8 = 8 micro-batches, 16 ops a rank, 64 in all; rank r runs
    3 - r forwards before the steady F/B pairs, so its first B is op 4, 3, 2, 1."""
    tl = scaled(64, ranks=4)
    assert len(tl.events) == 64
    first_b = []
    for r in range(4):
        kinds = [e.kind for e in sorted((e for e in tl.events if e.rank == r), key=lambda e: e.start)]
        assert len(kinds) == 16
        first_b.append(kinds.index("B"))
    assert first_b == [4, 3, 2, 1]


def test_sample_ids_name_stage_0() -> None:
    tl = dualpipe_sample()
    assert tl.events[0].op == "r0/compute/F s0 mb0"
    assert moe_sample().events[0].op == "r0/compute/ATTN_F Attn s0 mb0"


@pytest.mark.parametrize("name, style", [("MoE", MoEStyle), (" Weight-Update ", WeightUpdateStyle),
                                         ("DUALPIPE", DualPipeStyle)])
def test_style_names_are_case_and_space_blind(name: str, style: type) -> None:
    assert type(resolve_style(name, moe_sample())) is style
