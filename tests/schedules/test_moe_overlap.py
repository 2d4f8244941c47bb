"""moe-1f1b-overlap: the "VPP + 1 warmup", Megatron's issue order inside a paired layer, the
self-dependency without the +1, equal makespans with interleaved 1F1B, offloading, options."""
from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest
from typer.testing import CliRunner

from pptl.checks import run_checks
from pptl.cli import app
from pptl.config import Config, Costs
from pptl.errors import InputError
from pptl.ir import Op, Schedule, ScheduleBuilder
from pptl.planning import plan
from pptl.schedules import build_schedule, get_family, interleaved
from pptl.schedules.moe_overlap import parse_options, steps, warmup
from pptl.simulate import peak_memory, simulate

FIXTURES = Path(__file__).resolve().parents[2] / "fixtures"
NAME = "moe-1f1b-overlap"
SEED = dict(schedule=NAME, pp=4, vpp=2, microbatches=8)


def moe(**kw) -> Config:
    base = {**SEED, **{k: v for k, v in kw.items() if k != "options"}}
    return Config(**base, options=kw.get("options", {}))


def errors(schedule: Schedule) -> list:
    return [v for v in run_checks(schedule) if v.severity == "error"]


# ------------------------------------------------------------------------------------------------
# The phase table


@pytest.mark.parametrize("rank, expected", [(0, 11), (1, 9), (2, 7), (3, 5)], ids=[f"r{r}" for r in range(4)])
def test_warmup_is_interleaved_plus_one(rank: int, expected: int) -> None:
    cfg = moe()
    assert warmup(cfg, rank, parse_options(cfg)) == expected == interleaved.warmup_count(cfg, rank) + 1
    assert build_schedule(cfg).meta["warmup"][rank] == expected


def test_seed_grid_last_rank() -> None:
    """Rank 3 of the seed grid: F 1 2 3 4 of chunk 0 and F 1 of chunk 1, then pairs; the first pair
    overlaps F of mb 2 (chunk 1) with B of mb 1 (chunk 1), numbered 1-based like the figure."""
    cfg = moe()
    seq = steps(cfg, 3, parse_options(cfg))
    assert [f for f, _ in seq[:5]] == [(0, 0), (1, 0), (2, 0), (3, 0), (0, 1)]
    assert all(b is None for _, b in seq[:5])
    assert seq[5] == ((1, 1), (0, 1))
    assert sum(f is not None and b is not None for f, b in seq) == 16 - 5
    assert [b for f, b in seq[-5:]] == [(7, 1), (4, 0), (5, 0), (6, 0), (7, 0)]


@pytest.mark.parametrize("ov", [True, False], ids=["overlap", "no-overlap"])
def test_every_pass_appears_once_per_rank(ov: bool) -> None:
    cfg = moe(options={"overlap": ov})
    for r in range(4):
        seq = steps(cfg, r, parse_options(cfg))
        fw = [f for f, _ in seq if f is not None]
        bw = [b for _, b in seq if b is not None]
        assert sorted(fw) == sorted(bw) == sorted((mb, c) for mb in range(8) for c in range(2))
        assert not any(f and b for f, b in seq) if not ov else True


def test_pp1_is_megatrons_no_pipelining_schedule() -> None:
    """First forward alone, then pairs (F of mb k with B of mb k-1), then the last backward."""
    cfg = Config(schedule=NAME, pp=1, microbatches=4)
    assert steps(cfg, 0, parse_options(cfg)) == [((0, 0), None), ((1, 0), (0, 0)), ((2, 0), (1, 0)),
                                                  ((3, 0), (2, 0)), (None, (3, 0))]


# ------------------------------------------------------------------------------------------------
# One paired layer


def test_issue_order_of_a_paired_layer() -> None:
    """Megatron's schedule_layer_1f1b: F.attn, B.combine, F.dispatch, B.mlp, B.dispatch, F.mlp,
    F.combine, B.attn, then the delayed weight gradient."""
    s = build_schedule(Config(schedule=NAME, pp=1, microbatches=2, options={"layers_per_chunk": 1}))
    paired = [op for op in s.ops if op.lane in ("compute", "comm")
              and ((op.flow == "F" and op.mb == 1) or (op.flow == "B" and op.mb == 0))]
    assert [(op.label, op.flow) for op in paired] == [
        ("Attn", "F"), ("EP-C", "B"), ("EP-D", "F"), ("MLP", "B"), ("EP-D", "B"), ("MLP", "F"),
        ("EP-C", "F"), ("Attn", "B"), ("WGrad", "B")]
    assert [op.kind for op in s.lane_ops(0, "comm")][2:6] == ["A2A_COMBINE", "A2A_DISPATCH", "A2A_DISPATCH",
                                                                "A2A_COMBINE"]


def test_paired_step_hides_all_to_alls() -> None:
    """pp=1: only the lone first forward and the lone last backward leave all-to-alls exposed
    (2.5 of 32); without overlap all 32 are."""
    r = plan(Config(schedule=NAME, pp=1, microbatches=8))
    assert r.metrics["moe"]["ep_time"] == 32 and r.metrics["moe"]["exposed_ep"] == 2.5
    base = plan(Config(schedule=NAME, pp=1, microbatches=8, options={"overlap": False}))
    assert base.metrics["moe"]["exposed_ep"] == base.metrics["moe"]["ep_time"] == 32
    assert r.metrics["makespan"] == base.metrics["makespan"] - 32 + 2.5


def test_sub_ops_carry_the_contract_fields() -> None:
    s = build_schedule(moe(options={"offload": True}))
    lanes = {(op.kind, op.lane, op.label) for op in s.ops}
    assert {("ATTN", "compute", "Attn"), ("MLP", "compute", "MLP"), ("WGRAD", "compute", "WGrad"),
            ("A2A_DISPATCH", "comm", "EP-D"), ("A2A_COMBINE", "comm", "EP-C"), ("SEND", "send", "PP"),
            ("RECV", "recv", "PP"), ("OFFLOAD", "d2h", "Offload"), ("ONLOAD", "h2d", "Onload")} <= lanes
    for op in s.ops:
        if op.lane != "pass":
            assert op.flow in ("F", "B") and op.mb >= 0 and op.stage >= 0
            assert op.chunk == op.stage // 4
        if op.kind in ("ATTN", "MLP", "WGRAD", "A2A_DISPATCH", "A2A_COMBINE", "OFFLOAD", "ONLOAD"):
            assert 0 <= op.sub < 2


@pytest.mark.parametrize("ov", [True, False], ids=["overlap", "no-overlap"])
def test_pp_transfers_run_beside_the_all_to_alls(ov: bool) -> None:
    """PP and EP are different communicators (each on its own stream, in NCCL and in ``pptl run``):
    SEND and RECV take the send/recv lanes, so a slow transfer runs while its rank's all-to-alls go
    on, and a lone forward's attention does not wait for the previous forward's combine and SEND."""
    slow = Costs(comm_latency=3.0)
    s = build_schedule(Config(schedule=NAME, pp=2, vpp=2, microbatches=4, costs=slow, options={"overlap": ov}))
    assert {op.lane for op in s.ops if op.kind == "SEND"} == {"send"}
    assert {op.lane for op in s.ops if op.kind == "RECV"} == {"recv"}
    assert all(op.kind in ("A2A_DISPATCH", "A2A_COMBINE") for r in range(2) for op in s.lane_ops(r, "comm"))
    sim = simulate(s)
    at = {op.id: i for i, op in enumerate(s.ops)}
    beside = [(o.id, a.id) for i, o in enumerate(s.ops) if o.kind == "SEND"
              for j, a in enumerate(s.ops) if a.rank == o.rank and a.kind.startswith("A2A")
              and sim.start[j] < sim.end[i] and sim.start[i] < sim.end[j]]
    assert beside  # on one lane they could never overlap
    # stage 1's second forward starts when its input has come and its first forward's last MLP is
    # done, not after that forward's combine and 3-unit SEND to stage 2
    fa = at["r1/compute/ATTN_F Attn s1 mb1 #0"]
    ready = max(sim.end[at["r1/compute/MLP_F MLP s1 mb0 #1"]], sim.end[at["r1/recv/RECV_F PP s1 mb1 <-r0"]])
    assert sim.start[fa] == ready < sim.end[at["r1/send/SEND_F PP s1 mb0 ->r0"]]


# ------------------------------------------------------------------------------------------------
# The +1 warmup micro-batch


def test_without_plus_one_the_last_rank_pairs_a_step_with_itself() -> None:
    s = build_schedule(moe(options={"extra_warmup": 0}))
    found = errors(s)
    [self_dep] = [v for v in found if v.code == "PP043"]
    assert self_dep.message.startswith("rank 3: the paired step r3/pass/F s7 mb0 +B s7 mb0 overlaps F of stage 7 "
                                       "mb 0 with B of stage 7 mb 0, which needs that forward directly: "
                                       "the pair depends on itself")
    assert "'VPP + 1 warmup'" in self_dep.message
    assert all(op.startswith("r3/") for op in self_dep.ops)
    [cycle] = [v for v in found if v.code == "PP007"]
    assert cycle.message.startswith("deadlock across rank 3: ")
    assert errors(build_schedule(moe())) == []


@pytest.mark.parametrize("p, v, m, g", [(4, 2, 8, 4), (2, 2, 4, 2), (3, 2, 6, 3), (4, 3, 8, 4), (2, 3, 6, 3),
                                        (4, 2, 12, 4), (4, 2, 8, 8), (2, 2, 2, 2)],
                         ids=lambda x: str(x))
def test_makespan_equals_interleaved_1f1b_under_equal_costs(p: int, v: int, m: int, g: int) -> None:
    """All-to-alls and weight gradients free, F = 2(attn+mlp) and B = 2(attn_b+mlp_b) per chunk:
    the +1 warmup costs nothing, combined 1F1B finishes with interleaved 1F1B."""
    costs = {"attn": 1, "mlp": 1, "attn_b": 2, "mlp_b": 2, "wgrad": 0, "dispatch": 0, "combine": 0}
    sizes = dict(pp=p, vpp=v, microbatches=m, group_size=g)
    combined = simulate(build_schedule(Config(schedule=NAME, **sizes, options={"costs": costs}))).makespan
    plain = simulate(build_schedule(Config(schedule="interleaved-1f1b", **sizes,
                                           costs=Costs(base={"F": 4, "B": 8})))).makespan
    assert combined == plain


def test_inline_wgrad_without_overlap_equals_interleaved_with_whole_backward() -> None:
    costs = {"dispatch": 0, "combine": 0}  # wgrad = attn + mlp = 2: B = 2 * (1 + 1 + 2) = 8
    plain = simulate(build_schedule(Config(schedule="interleaved-1f1b", pp=4, vpp=2, microbatches=8,
                                           costs=Costs(base={"F": 4, "B": 8})))).makespan
    no_overlap = simulate(build_schedule(moe(options={"overlap": False, "costs": costs}))).makespan
    combined = simulate(build_schedule(moe(options={"costs": costs}))).makespan
    assert no_overlap == plain == 228
    assert combined == plain - 3 * 2  # each of p-1 stages sends its gradient before its last WGrad


@pytest.mark.parametrize("opts", [{}, {"costs": {"wgrad": 0.5, "attn_b": 3}}, {"overlap": False},
                                  {"overlap": False, "costs": {"dispatch": 0.3, "combine": 0.7, "mlp": 2}}],
                         ids=["combined", "combined-uneven", "interleaved", "interleaved-a2a"])
@pytest.mark.parametrize("p, v, m", [(4, 2, 8), (3, 3, 9), (2, 2, 4)], ids=["p4v2m8", "p3v3m9", "p2v2m4"])
def test_bubble_formula_matches_simulation(opts: dict, p: int, v: int, m: int) -> None:
    if opts.get("overlap", True):  # the formula assumes hidden all-to-alls
        opts = {**opts, "costs": {**opts.get("costs", {}), "dispatch": 0, "combine": 0}}
    cfg = Config(schedule=NAME, pp=p, vpp=v, microbatches=m, options=opts)
    sim = simulate(build_schedule(cfg))
    assert {r.idle for r in sim.ranks} == {get_family(NAME).bubble(cfg)}


def test_memory_formula_is_one_more_chunk_than_interleaved() -> None:
    cfg = moe()
    sim = simulate(build_schedule(cfg))
    assert max(r.peak_activation for r in sim.ranks) == get_family(NAME).memory(cfg) == 12
    assert get_family("interleaved-1f1b").memory(replace(cfg, schedule="interleaved-1f1b")) == 11


# ------------------------------------------------------------------------------------------------
# Offloading


def test_offloaded_bytes_are_off_the_gpu_between_offload_end_and_onload_end() -> None:
    """Core memory model: F allocates 1 at t=0; its OFFLOAD of 0.5 ends at 2; a second F allocates 1
    at 3 (1.5 held); the ONLOAD brings the 0.5 back when it ends."""
    b = ScheduleBuilder()
    b.add(Op(kind="F", rank=0, lane="compute", stage=0, mb=0))
    b.add(Op(kind="OFFLOAD", rank=0, lane="d2h", stage=0, mb=0, payload=0.5))
    b.add(Op(kind="F", rank=0, lane="compute", stage=0, mb=1))
    b.add(Op(kind="ONLOAD", rank=0, lane="h2d", stage=0, mb=0, payload=0.5))
    s = Schedule(family="t", pp=1, num_stages=1, microbatches=2, ops=b.ops, lanes=b.lanes)
    start, end = [0, 1, 3, 5], [1, 2, 4, 6]
    peak, when = peak_memory(s, start, end, 1.0, 0.0)
    assert peak == {0: 2.0} and when == {0: 6}
    peak, when = peak_memory(s, [0, 1, 3, 2.5], [1, 2, 4, 2.8], 1.0, 0.0)  # back before the second F
    assert peak == {0: 2.0} and when == {0: 3}
    peak, when = peak_memory(s, [0, 1, 3, 8], [1, 2, 4, 9], 1.0, 0.0)  # still on the host at the end
    assert peak == {0: 2.0} and when == {0: 9}


def test_offloading_lowers_peak_and_reports_copies() -> None:
    r = plan(Config(**SEED, options={"offload": True}))
    m = r.metrics["moe"]
    assert m["peak_activation"] < m["peak_activation_no_offload"] == 12
    assert m["peak_activation"] == max(x.peak_activation for x in r.simulation.ranks)
    assert 0 <= m["exposed_copy"] <= m["copy_time"] and m["offloaded"] > 0
    assert any(line.startswith("offload/onload:") for line in r.metrics["report"])
    s, sim = r.schedule, r.simulation
    for i, op in enumerate(s.ops):  # each onload ends before the backward MLP of its layer starts
        if op.kind == "ONLOAD":
            [j] = [j for j, o in enumerate(s.ops) if (o.kind, o.flow, o.rank, o.stage, o.mb, o.sub)
                   == ("MLP", "B", op.rank, op.stage, op.mb, op.sub)]
            assert sim.end[i] <= sim.start[j]


def test_last_layer_stays_when_its_backward_is_next() -> None:
    """Megatron does not offload the last layer of a chunk whose backward runs right after it."""
    s = build_schedule(Config(schedule=NAME, pp=1, microbatches=3, options={"offload": True}))
    off = {(op.mb, op.sub) for op in s.ops if op.kind == "OFFLOAD"}
    assert off == {(0, 0), (1, 0), (2, 0)}  # layer 1 of every chunk is used by the next backward


# ------------------------------------------------------------------------------------------------
# Expert parallelism as ranks


def test_ep_members_are_ranks_with_one_direction_each() -> None:
    s = build_schedule(moe(options={"ep": 2}))
    assert s.pp == 8 and s.directions == 2
    assert s.meta["ep_groups"] == [[0, 1], [2, 3], [4, 5], [6, 7]]
    assert {op.direction for op in s.ops if op.rank == 5} == {1}
    sim = simulate(s)
    assert sim.ranks[0].busy == sim.ranks[1].busy and errors(s) == []


def test_a2a_cost_from_bytes_and_bandwidth() -> None:
    s = build_schedule(moe(options={"costs": {"a2a_bytes": 4, "ep_bandwidth": 8, "ep_latency": 0.1}}))
    assert s.config.costs.lookup("dispatch") == s.config.costs.lookup("combine") == pytest.approx(0.6)


# ------------------------------------------------------------------------------------------------
# Options


@pytest.mark.parametrize("kw, message", [
    (dict(options={"layers": 2}), "field 'options.layers' is unknown for schedule 'moe-1f1b-overlap'; known: "
                                  "layers_per_chunk, ep, overlap, offload, extra_warmup, order, costs"),
    (dict(options={"layers_per_chunk": 0}), "field 'options.layers_per_chunk': got 0, expected an integer in 1..1024"),
    (dict(options={"ep": "two"}), "field 'options.ep': got 'two', expected an integer in 1..1024"),
    (dict(options={"overlap": "yes"}), "field 'options.overlap': got 'yes', expected true or false"),
    (dict(options={"extra_warmup": 2}), "field 'options.extra_warmup': got 2, expected an integer in 0..1"),
    (dict(options={"costs": [1, 2]}), "field 'options.costs': got list, expected a mapping"),
    (dict(options={"costs": {"attn": -1}}), "field 'options.costs.attn': got -1, expected a finite number >= 0"),
    (dict(options={"costs": {"offload_bandwidth": 0}}),
     "field 'options.costs.offload_bandwidth': got 0, expected a finite number > 0"),
    (dict(options={"costs": {"ffn": 1}}), "field 'options.costs.ffn' is unknown"),
    (dict(options={"costs": {"a2a_bytes": 4}}), "field 'options.costs.ep_bandwidth' is required with a2a_bytes"),
    (dict(options={"costs": {"offload_bytes": 0.8}}),
     "field 'options.costs.offload_bytes': got 0.8, expected at most activation / layers_per_chunk = 0.5"),
    (dict(vpp=1), "field 'vpp': got 1, expected at least 2 when pp > 1 "
                  "\\(Megatron overlaps EP communication across micro-batches only under interleaving"),
    (dict(pp=1, vpp=2), "field 'vpp': got 2, expected 1 when pp = 1"),
    (dict(group_size=2), "field 'group_size': got 2, expected at least pp=4"),
    (dict(pp=8, vpp=4, microbatches=4096, options={"layers_per_chunk": 4}),
     "field 'microbatches': got 4096, which would plan about 6,684,672 ops, more than the 5,000,000 pptl accepts"),
], ids=["unknown", "layers", "ep", "overlap", "extra-warmup", "costs-type", "negative-cost", "zero-bandwidth",
        "unknown-cost", "bytes-without-bandwidth", "offload-too-big", "pp-without-vpp", "vpp-without-pp", "group",
        "too-big"])
def test_bad_options_are_one_line_errors(kw: dict, message: str) -> None:
    cfg = replace(moe(**kw), source="m.yaml")
    with pytest.raises(InputError, match="^m.yaml: " + message):
        build_schedule(cfg)


# ------------------------------------------------------------------------------------------------
# Command line


runner = CliRunner()


def test_plan_fixture_prints_overlap_report() -> None:
    result = runner.invoke(app, ["plan", str(FIXTURES / "moe_overlap.yaml")])
    assert result.exit_code == 0, result.output
    assert result.output.startswith("moe-1f1b-overlap: pp=4 vpp=2 microbatches=8 makespan=249.5 ")
    assert "EP all-to-all: 64 per rank, 30.5 exposed (compute idle) on the worst rank" in result.output
    assert "offload/onload: 15.5 per rank, 3 exposed; peak activation 7 with offloading, 12 without" in result.output


def test_check_without_plus_one_exits_1_naming_the_pair() -> None:
    result = runner.invoke(app, ["check", str(FIXTURES / "invalid" / "moe_no_extra_warmup.yaml")])
    assert result.exit_code == 1, result.output
    assert "PP043 error: rank 3: the paired step r3/pass/F s7 mb0 +B s7 mb0 overlaps" in result.output


def test_plan_from_flags_without_vpp_exits_2() -> None:
    result = runner.invoke(app, ["plan", "--schedule", NAME, "--pp", "4", "--microbatches", "8"])
    assert result.exit_code == 2
    assert "error: --vpp: got 1, expected at least 2 when pp > 1" in result.output
