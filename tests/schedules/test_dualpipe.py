"""DualPipe and DualPipeV: the seed figure's golden numbers, the phase counts of the issue, the
symmetry, the memory model, the constraints, and the bubble formula against the simulator.

"Bubble" here is ``RankMetrics.idle``: makespan minus the rank's busy compute time, on every rank.
"""
from __future__ import annotations

import itertools
from pathlib import Path

import pytest
from typer.testing import CliRunner

from pptl.checks import run_checks
from pptl.cli import app
from pptl.config import Config, Costs, load_config
from pptl.errors import InputError
from pptl.ir import Op
from pptl.planning import plan
from pptl.schedules import build_schedule, get_family
from pptl.schedules.dualpipe import steps
from pptl.simulate import simulate

FIXTURES = Path(__file__).resolve().parents[2] / "fixtures"
runner = CliRunner()


def _cfg(name: str, p: int, m: int, f: float = 1, i: float = 1, w: float = 1, fb: float | None = None) -> Config:
    base = {"F": f, "I": i, "W": w, "B": i + w}
    if fb is not None:
        base["FB"] = fb
    return Config(schedule=name, pp=p, microbatches=m, costs=Costs(base=base))


def _short(op: Op) -> str:
    return op.id.split("/", 2)[2]


@pytest.fixture(scope="module")
def seed():
    s = build_schedule(load_config(FIXTURES / "dualpipe_seed.yaml"))
    return s, simulate(s)


# --------------------------------------------------------------------------------------------
# The seed figure (8 ranks, 20 micro-batches, F=1, B=2, I=1, W=1, F&B=3, zero comm)


def test_seed_makespan_is_66(seed) -> None:
    s, sim = seed
    assert sim.makespan == 66
    assert [r.idle for r in sim.ranks] == [6.0] * 8  # (8/2-1)(3+2-3)
    assert s.microbatches == 10 and s.directions == 2 and s.num_stages == 8


def test_seed_rank0_order(seed) -> None:
    s, _ = seed
    order = [_short(op) for op in s.lane_ops(0, "compute")]
    assert order[:7] == [f"F s0 mb{k}" for k in range(7)]  # seven forwards of direction 0
    assert order[7] == "F s7 mb0 d1"  # one forward of direction 1 (stage 7 of its flow)
    assert order[8:17] == [x for k in range(3) for x in (f"I s7 mb{k} d1", f"W s7 mb{k} d1", f"F s7 mb{k + 1} d1")]
    first_fb = next(op for op in s.lane_ops(0, "compute") if op.kind == "FB")
    assert (first_fb.stage, first_fb.mb, first_fb.direction) == (0, 7, 0)
    assert first_fb.pair == (7, 3, 1)  # B1 of micro-batch 3
    assert order[17] == "FB s0 mb7 +B s7 mb3 d1"


def test_seed_peak_activation_is_pp_plus_one_on_every_rank(seed) -> None:
    _, sim = seed
    assert [r.peak_activation for r in sim.ranks] == [9.0] * 8
    assert get_family("dualpipe").memory(load_config(FIXTURES / "dualpipe_seed.yaml")) == 9.0


def test_seed_passes_check(seed) -> None:
    s, _ = seed
    assert run_checks(s) == []


def test_seed_memory_limit_names_rank_and_moment(seed) -> None:
    s, _ = seed
    found = [v for v in run_checks(s, memory_limit=8) if v.code == "PP009"]
    assert len(found) == 8  # every rank peaks at 9
    # rank 0 crosses the limit when its first F&B starts: FB allocates before it frees
    assert found[0].message == ("rank 0 holds 9 activation units at t=17 (when r0/compute/FB s0 mb7 +B s7 mb3 d1 "
                                "starts), over the limit 8; peak 9")
    assert run_checks(s, memory_limit=9) == []


def test_seed_metrics_report_parameter_copies() -> None:
    result = plan(load_config(FIXTURES / "dualpipe_seed.yaml"))
    assert result.metrics["makespan"] == 66
    assert result.metrics["parameter_copies"] == 2
    assert result.metrics["stages_per_rank"] == 2
    assert result.metrics["textbook_bubble"] == 6
    assert [r["peak_activation"] for r in result.metrics["ranks"]] == [9.0] * 8
    assert result.family.style == "dualpipe"


def test_seed_cli_plan_and_memory_limit() -> None:
    result = runner.invoke(app, ["plan", str(FIXTURES / "dualpipe_seed.yaml")])
    assert result.exit_code == 0, result.output
    assert result.stdout.splitlines()[0] == "dualpipe: pp=8 microbatches=20 makespan=66 bubble=9.1%"
    assert "parameters: 2 copies of the model, 2 stage(s) per rank" in result.stdout
    result = runner.invoke(app, ["check", str(FIXTURES / "dualpipe_seed.yaml"), "--memory-limit", "8"])
    assert result.exit_code == 1, result.output
    assert (f"{FIXTURES / 'dualpipe_seed.yaml'}: PP009 error: rank 0 holds 9 activation units at t=17 "
            "(when r0/compute/FB s0 mb7 +B s7 mb3 d1 starts), over the limit 8; peak 9") in result.stdout


# --------------------------------------------------------------------------------------------
# Phase counts and symmetry


@pytest.mark.parametrize("n, c", [(2, 4), (4, 8), (4, 14), (8, 20), (8, 32), (10, 20)],
                         ids=lambda v: str(v))
def test_dualpipe_phase_counts_per_rank(n: int, c: int) -> None:
    """Counts of the issue's table: with h = min(r, N-1-r), H = N/2, every rank runs
    C-2N+H+h+1 F&B ops (one fewer on the middle ranks, whose first main step is not overlapped),
    2H-h-1 I and as many W, and C/2 forwards of each direction."""
    s = build_schedule(_cfg("dualpipe", n, c))
    big_h = n // 2
    for r in range(n):
        h = min(r, n - 1 - r)
        ops = s.lane_ops(r, "compute")
        kinds = [op.kind for op in ops]
        middle = int(h == big_h - 1)
        assert kinds.count("FB") == c - 2 * n + big_h + h + 1 - middle, r
        assert kinds.count("I") == kinds.count("W") == 2 * big_h - h - 1, r
        for d in (0, 1):
            fwd = [op.mb for op in ops if op.kind in ("F", "FB") and op.direction == d]
            assert fwd == list(range(c // 2)), (r, d)  # each direction's forwards in order


def test_dualpipe_middle_ranks_do_not_overlap_first_main_step() -> None:
    s = build_schedule(_cfg("dualpipe", 8, 20))
    for r in (3, 4):
        ops = s.lane_ops(r, "compute")
        k = next(i for i, op in enumerate(ops) if op.kind == "B")
        assert (ops[k - 1].kind, ops[k].kind, ops[k + 1].kind) == ("F", "B", "FB")
        assert ops[k - 1].direction != ops[k].direction


@pytest.mark.parametrize("n, c", [(4, 8), (8, 20), (6, 18)], ids=lambda v: str(v))
def test_dualpipe_is_symmetric_by_direction(n: int, c: int) -> None:
    """Rank N-1-r runs rank r's order with the directions swapped (stage numbers count along each
    direction's own flow, so they stay the same)."""
    s = build_schedule(_cfg("dualpipe", n, c))

    def flipped(op: Op) -> tuple:
        pair = None if op.pair is None else (op.pair[0], op.pair[1], 1 - op.pair[2])
        return (op.kind, op.stage, op.mb, 1 - op.direction, pair)

    for r in range(n):
        mine = [flipped(op) for op in s.lane_ops(r, "compute")]
        mirror = [(op.kind, op.stage, op.mb, op.direction, op.pair) for op in s.lane_ops(n - 1 - r, "compute")]
        assert mine == mirror, r


def test_steps_table_matches_dualpipe_step_names() -> None:
    """Rank 0 of 8 (h=0, H=4), C=20: Step 1..8 of DualPipe.step()."""
    table = "".join(f"{st.kind}{st.phase if st.kind != 'FB' else f'{st.phase}{st.b_phase}'}" if st.kind != "W" else "W"
                    for st in steps(0, 4, 20 // 2 - 8 + 0 + 1))
    expected = ("F0" * 6 + "F0F1" + "I1WF1" * 3 + "FB01FB10" * 3 + "B1FB10" * 3 + "B1I0" + "WI0" * 3 + "W")
    assert table == expected


# --------------------------------------------------------------------------------------------
# DualPipeV


def test_dualpipev_fixture() -> None:
    cfg = load_config(FIXTURES / "dualpipev.yaml")
    s = build_schedule(cfg)
    sim = simulate(s)
    assert run_checks(s) == []
    assert s.num_stages == 8 and s.microbatches == 10 and s.directions == 1
    assert sim.makespan == 66
    assert [r.idle for r in sim.ranks] == [6.0] * 4  # (PP/2-1)(F&B+B-3W), PP = 8 stages
    assert [r.peak_activation for r in sim.ranks] == [9.0] * 4  # PP+1, PP = 8 stages
    for r in range(4):  # the V: rank r holds stages r and 7-r
        assert {op.stage for op in s.lane_ops(r, "compute")} == {r, 7 - r}
    assert get_family("dualpipev").style == "dualpipe"
    assert plan(cfg).metrics["parameter_copies"] == 1


def test_dualpipev_last_rank_runs_first_main_step_without_overlap() -> None:
    s = build_schedule(_cfg("dualpipev", 4, 10))
    kinds = [op.kind for op in s.lane_ops(3, "compute")]
    k = kinds.index("B")
    assert kinds[k - 1:k + 2] == ["F", "B", "FB"]
    for r in range(3):  # the other ranks overlap from their first main step on
        kinds = [op.kind for op in s.lane_ops(r, "compute")]
        assert kinds.index("FB") < kinds.index("B"), r


# --------------------------------------------------------------------------------------------
# Constraints


@pytest.mark.parametrize("name, p, m, match", [
    ("dualpipe", 5, 20, "field 'pp': got 5, expected an even number of ranks >= 2 for schedule 'dualpipe'"),
    ("dualpipe", 4, 9, r"field 'microbatches': got 9, expected an even total \(half enter at rank 0"),
    ("dualpipe", 4, 6, "field 'microbatches': got 6, expected at least 2\\*pp = 8 for schedule 'dualpipe'"),
    ("dualpipev", 4, 7, "field 'microbatches': got 7, expected at least 2\\*pp = 8"),
], ids=["dualpipe-odd-pp", "dualpipe-odd-m", "dualpipe-small-m", "dualpipev-small-m"])
def test_constraints(name: str, p: int, m: int, match: str) -> None:
    with pytest.raises(InputError, match=match):
        build_schedule(Config(schedule=name, pp=p, microbatches=m))


def test_dualpipe_rejects_vpp() -> None:
    with pytest.raises(InputError, match="field 'vpp': got 2, expected 1"):
        build_schedule(Config(schedule="dualpipe", pp=4, microbatches=8, vpp=2))


# --------------------------------------------------------------------------------------------
# The bubble formula against the simulator


def _dp_grid() -> list[tuple]:
    out = []
    for name, p in itertools.chain(itertools.product(["dualpipe"], [2, 4, 6, 8]),
                                   itertools.product(["dualpipev"], [1, 2, 3, 4, 6])):
        for m in (2 * p, 2 * p + 2, 3 * p + (3 * p) % 2):
            for f, w in ((1, 1), (1, 0.5), (2, 1), (2, 2), (3, 1)):
                out.append((name, p, m, f, w))
    return out


@pytest.mark.parametrize("name, p, m, f, w", _dp_grid(), ids=lambda v: str(v))
def test_bubble_formula_exact_when_i_equals_f(name: str, p: int, m: int, f: float, w: float) -> None:
    """(p/2-1)(F&B+B-3W) (DualPipeV: PP = 2p stages) is every rank's idle time when I = F >= W,
    F&B = F+B, zero comm; and the checker raises no PP022 warning then."""
    cfg = _cfg(name, p, m, f=f, i=f, w=w)
    s = build_schedule(cfg)
    formula = get_family(name).bubble(cfg)
    assert [r.idle for r in simulate(s).ranks] == pytest.approx([formula] * p)
    assert run_checks(s) == []


@pytest.mark.parametrize("name, p", [("dualpipe", 4), ("dualpipe", 8), ("dualpipev", 3), ("dualpipev", 4)],
                         ids=lambda v: str(v))
@pytest.mark.parametrize("f, i, w", [(1, 0.5, 0.5), (2, 1, 0.5), (1, 0.5, 2), (1, 2, 1), (2, 3, 1), (1, 3, 0.5),
                                     (1, 1, 2), (2, 2, 3), (1, 2, 3)], ids=lambda v: str(v))
def test_bubble_formula_deviation_when_i_differs_from_f(name: str, p: int, f: float, i: float, w: float) -> None:
    """The issue's "I >= F" is not enough: measured, every rank idles

    - I < F: formula + (H-1)((F-I) + max(0, W-I))
    - I > F: formula - min((H-1)(I-F), F) + (H-1)max(0, W-I)   (the formula over-estimates)
    - I = F < W: formula + (H-1)(W-I)

    with H = p/2 (DualPipe) or p (DualPipeV); and PP022 warns."""
    cfg = _cfg(name, p, 3 * p + p % 2, f=f, i=i, w=w)
    s = build_schedule(cfg)
    formula = get_family(name).bubble(cfg)
    k = (p // 2 if name == "dualpipe" else p) - 1
    if i <= f:
        expected = formula + k * ((f - i) + max(0.0, w - i))
    else:
        expected = formula - min(k * (i - f), f) + k * max(0.0, w - i)
    assert [r.idle for r in simulate(s).ranks] == pytest.approx([expected] * p)
    warnings = [v for v in run_checks(s) if v.code == "PP022"]
    assert warnings and all(v.severity == "warning" for v in warnings)
    assert all(v.message.startswith(f"{name}: the textbook bubble ") for v in warnings)


@pytest.mark.parametrize("fb", [2.0, 2.5, 3.5], ids=lambda v: f"FB={v}")
def test_bubble_formula_holds_on_middle_ranks_when_fb_is_not_f_plus_b(fb: float) -> None:
    """With F&B != F+B the ranks run different numbers of F&B ops (more towards the middle), so
    their idle times differ; the formula is the idle of the ranks with h >= H-2."""
    cfg = _cfg("dualpipe", 8, 20, fb=fb)
    sim = simulate(build_schedule(cfg))
    formula = get_family("dualpipe").bubble(cfg)
    idle = [r.idle for r in sim.ranks]
    assert idle[2:6] == [formula] * 4
    assert idle[0] != formula
    [warning] = [v for v in run_checks(sim.schedule) if v.code == "PP022"]
    assert f"F&B={fb:g} is not F+B=3" in warning.message


def test_formula_warning_for_communication_cost() -> None:
    cfg = Config(schedule="dualpipe", pp=4, microbatches=8,
                 costs=Costs(base={"F": 1, "B": 2, "I": 1, "W": 1}, comm_latency=0.5))
    [warning] = [v for v in run_checks(build_schedule(cfg)) if v.code == "PP022"]
    assert "communication takes 0.5 per message (the formula assumes zero)" in warning.message


@pytest.mark.parametrize("h, step6", [(0, "B1I0"), (1, "B1B0I1I0"), (2, "B1B0B1I0I1I0"), (3, "B1B0B1B0I1I0I1I0")],
                         ids=lambda v: str(v))
def test_step6_splits_its_second_half(h: int, step6: str) -> None:
    """Step 6 (nB1B0) switches to I (W deferred to the FIFO) from i = (h+1)//2 on: before B1
    when h is odd, between B1 and B0 when h is even (DualPipe.step())."""
    big_h = h + 1  # the middle rank, so steps 3, 5 and 7 are empty
    table = steps(h, big_h, 1)
    # the main step is F0, B1 (not overlapped on the middle rank), then F1&B0
    main_end = next(k for k, st in enumerate(table) if st.kind == "FB") + 1
    tail = [f"{st.kind}{st.phase}" for st in table[main_end:] if st.kind != "W"]
    assert "".join(tail) == step6
    assert [st.kind for st in table[-(h + 1):]] == ["W"] * (h + 1)  # Step 8: nW


@pytest.mark.parametrize("name, p, c", [("dualpipe", 2, 4), ("dualpipe", 4, 12), ("dualpipe", 6, 12), ("dualpipe", 8, 24),
                                        ("dualpipev", 1, 2), ("dualpipev", 3, 9), ("dualpipev", 4, 10)],
                         ids=lambda v: str(v))
@pytest.mark.parametrize("f, i, w, fb", [(1, 1, 1, 3), (2, 0.5, 2, 3), (1, 3, 0.5, 4)], ids=lambda v: str(v))
def test_peak_activation_is_pp_plus_one_on_every_rank(name: str, p: int, c: int, f: float, i: float, w: float,
                                                      fb: float) -> None:
    """PP+1 stage activations per rank whatever the costs (PP = p ranks for DualPipe, 2p stages for
    DualPipeV), counting an F&B as allocating its F before its B frees."""
    cfg = _cfg(name, p, c, f=f, i=i, w=w, fb=fb)
    expected = p + 1 if name == "dualpipe" else 2 * p + 1
    assert [r.peak_activation for r in simulate(build_schedule(cfg)).ranks] == [expected] * p
    assert get_family(name).memory(cfg) == expected
