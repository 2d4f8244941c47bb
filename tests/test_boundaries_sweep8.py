"""Boundaries of 1F1B's and GPipe's memory formulas, a plan's given issue order, the DAG's order, the families' refusal
of unknown options and cost keys, inference's note on the last group, the slow rank, and the hang
figure's rows, names, background and arrows: each against a number or a fact worked out by hand (the
docstrings say how)."""
from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import pytest

from pptl.config import Config, Costs
from pptl.errors import InputError
from pptl.ir import Schedule
from pptl.issue_order import given_program
from pptl.schedules import build_schedule, get_family


def _cfg(name: str, pp: int, m: int, vpp: int = 1, **kw: Any) -> Config:
    costs = Costs(base={"F": 1.0, "B": 2.0, "I": 1.0, "W": 1.0})
    return Config(schedule=name, pp=pp, microbatches=m, vpp=vpp, costs=costs, **kw)


# --------------------------------------------------------------------------------------------
# 1F1B's and GPipe's memory formulas


def test_1f1b_with_fewer_micro_batches_than_stages_holds_all_of_them() -> None:
    """1F1B, p = 4, m = 2: rank 0's warm-up is capped at m = 2 forwards, so it holds min(p, m) = 2
    activations at its peak, not p = 4 (there are only two micro-batches to hold)."""
    cfg = _cfg("1f1b", 4, 2)
    assert get_family("1f1b").memory(cfg) == 2 * cfg.activation


def test_gpipe_holds_every_micro_batch_even_past_p() -> None:
    """GPipe, p = 2, m = 4: every forward runs before the first backward, so rank 0 holds all
    m = 4 activations (not min(p, m) = 2 as 1F1B would)."""
    cfg = _cfg("gpipe", 2, 4)
    assert get_family("gpipe").memory(cfg) == 4 * cfg.activation


# --------------------------------------------------------------------------------------------
# A plan's given issue order (meta program_order)


def _with_letters(letters: list[str]) -> Schedule:
    # 1F1B p = 2, m = 1: rank 0 issues F, SEND_F, RECV_B, B ("csrc"); rank 1 RECV_F, F, B, SEND_B ("rccs").
    s = build_schedule(_cfg("1f1b", 2, 1))
    s.meta["program_order"] = letters
    return s


def test_a_given_issue_order_with_a_string_more_than_ranks_is_not_used() -> None:
    """program_order holds one string per rank: three strings for two ranks (the third empty) do not
    describe this plan, so it has no given order (the derived one is used)."""
    assert given_program(_with_letters(["csrc", "rccs", ""])) is None
    assert given_program(_with_letters(["csrc", "rccs"])) is not None


# --------------------------------------------------------------------------------------------
# What a family refuses: the first unknown option or cost key in sorted order


def test_an_unknown_option_named_is_the_first_in_sorted_order() -> None:
    """Two options on GPipe, which takes none: "alpha" sorts before "zeta", so the one line names
    options.alpha whichever order they were written in."""
    with pytest.raises(InputError, match=r"field 'options\.alpha' is unknown"):
        build_schedule(_cfg("gpipe", 2, 2, options={"zeta": 1, "alpha": 2}))


def test_an_unknown_cost_key_named_is_the_first_in_sorted_order() -> None:
    """Two cost keys that are no op kinds, Fwd and Bwd: "Bwd" sorts before "Fwd", so that is the
    key the error names."""
    costs = Costs(base={"F": 1.0, "B": 2.0, "Fwd": 1.0, "Bwd": 2.0})
    with pytest.raises(InputError, match="unknown cost key 'Bwd'"):
        build_schedule(Config(schedule="1f1b", pp=2, microbatches=2, costs=costs))


# --------------------------------------------------------------------------------------------
# Inference


def test_inference_with_one_chunk_has_no_last_group_note() -> None:
    """Inference p = 2, m = 3 with vpp = 1: a rank runs its forwards in micro-batch order, with no
    chunk to come back to, so m not a multiple of p costs no round trip and gets no note; with
    vpp = 2 the last group (one micro-batch) does wait for its round trip, and is noted."""
    fam = get_family("inference")
    assert not any("not a multiple of pp" in a for a in fam.assumptions(_cfg("inference", 2, 3)))
    assert any("not a multiple of pp" in a for a in fam.assumptions(_cfg("inference", 2, 3, vpp=2)))


# --------------------------------------------------------------------------------------------
# The run's progress board and slow rank


def test_a_slow_factor_of_one_spins_for_nothing(monkeypatch) -> None:
    """--slow-factor 1 means the rank is as fast as it is: the extra hold is (1 - 1) x 300 ms = 0,
    so the spin reads the clock once to set its end and once to see it passed (on a clock that moves
    1 ms a reading; a hold of the op's whole 300 ms would read it about 300 times)."""
    import pptl.run.slow as slow

    now = [0.0]

    def clock() -> float:
        now[0] += 1e-3
        return now[0]

    monkeypatch.setattr(slow.time, "perf_counter", clock)
    slow.Stretch(1.0).cpu(300.0)
    assert now[0] == pytest.approx(2e-3)


def test_holds_that_measured_no_time_keep_the_cycles_per_ms_known() -> None:
    """After a step whose holds timed 0 ms in all (nothing to divide by), the cycles per ms learnt
    before stand (5.0) rather than a division by zero."""
    from pptl.run.slow import Stretch

    ev = SimpleNamespace(elapsed_time=lambda other: 0.0)
    st = Stretch(1.5)
    st.cycles_per_ms = 5.0
    st.holds = {0: (100, ev, ev)}
    st.measured({}, None)
    assert st.cycles_per_ms == 5.0


# --------------------------------------------------------------------------------------------
# The hang figure


def _diag(ranks: list[int], **kw: Any) -> Any:
    ops = {r: (SimpleNamespace(label=f"r{r}/send/SEND_F s{r} mb0 ->r{r + 1}", index=0, done=True),) for r in ranks}
    base = dict(ops=ops, cycle_ops=(), cycle=(), cycle_ranks=(), hung=False, no_completion=False,
                cause=SimpleNamespace(kind="", ranks=()))
    base.update(kw)
    return SimpleNamespace(**base)


def test_the_hang_figure_lists_two_digit_ranks_in_number_order() -> None:
    """Eleven ranks, 0..10: the rows read rank 0, 1, ..., 9, 10 top to bottom; as text "10" would
    sort between "1" and "2"."""
    from pptl.render.diagnose_figure import diagnose_figure

    ranks = list(range(11))
    fig = diagnose_figure(_diag(ranks[::-1]))
    assert [t.get_text() for t in fig.axes[0].get_yticklabels()] == [f"rank {r}" for r in ranks]


def test_an_unnamed_collective_of_rank_10_is_shortened() -> None:
    """The label of a collective with no name, "r10 all_to_all #2 (group ep_dispatch)", is drawn as
    "all_to_all ep_dispatch #2" on rank 10 as on rank 1: the rank's digits are not the name."""
    from pptl.render.diagnose_figure import _short

    assert _short("r1 all_to_all #2 (group ep_dispatch)") == "all_to_all ep_dispatch #2"
    assert _short("r10 all_to_all #2 (group ep_dispatch)") == "all_to_all ep_dispatch #2"


def test_a_compute_op_of_no_time_gets_no_background_bar() -> None:
    """On the planned timeline an F of 0-1 and a W of no time (W = 0) at 1: only the F has a width
    to draw as the plan's grey background; a bar of width 0 would still draw its edge, a stray
    vertical line at 1."""
    from pptl.render.diagnose_figure import _places
    from pptl.timeline import Event, Timeline, TimelineMeta

    ev = [Event(op="r0/compute/F s0 mb0", rank=0, lane="compute", start=0.0, end=1.0, kind="F", stage=0, mb=0),
          Event(op="r0/compute/W s0 mb0", rank=0, lane="compute", start=1.0, end=1.0, kind="W", stage=0, mb=0)]
    _, other, _ = _places(SimpleNamespace(ops={}), Timeline(ev, TimelineMeta()))
    assert other == [(0, 0.0, 1.0)]


def test_a_wait_for_cycle_of_two_nodes_draws_both_arrows() -> None:
    """Two ranks each waiting on the other: node 0 holds up node 1 and node 1 holds up node 0, so
    the cycle closes with two arrows (the last node's arrow points back to the first)."""
    from pptl.render.diagnose_figure import diagnose_figure

    a, b = "r0/send/SEND_F s0 mb3 ->r1", "r0/recv/RECV_B s0 mb2 <-r1"
    c, d = "r1/send/SEND_B s1 mb2 ->r0", "r1/recv/RECV_F s1 mb3 <-r0"

    def op(label: str, index: int) -> SimpleNamespace:
        return SimpleNamespace(label=label, index=index, done=False)
    diag = _diag([0, 1], ops={0: (op(a, 0), op(b, 1)), 1: (op(c, 0), op(d, 1))}, cycle_ops=((a, d), (c, b)),
                 cycle=(("x", "waits on rank 0"), ("y", "waits on rank 1")), cycle_ranks=(0, 1), hung=True)
    arrows = [t for t in diagnose_figure(diag).axes[0].texts if not t.get_text()]
    assert len(arrows) == 2


# --------------------------------------------------------------------------------------------
# The DAG's order


def test_kahn_visits_a_nodes_successors_in_the_order_their_edges_were_given() -> None:
    """Node 0 has 40 successors, its edges given as 0->1..0->20, then 20 edges of node 61
    (61->62..61->81), then 0->21..0->40; nodes 41..60 have no edge. Generation by generation, as
    networkx's topological sort: first every node without a predecessor in index order (0, 41..61),
    then 0's successors in edge order (1..40), then 61's (62..81)."""
    import numpy as np

    from pptl.dag import graph_of, kahn_order

    u = np.array([0] * 20 + [61] * 20 + [0] * 20)
    v = np.array(list(range(1, 21)) + list(range(62, 82)) + list(range(21, 41)))
    expect = [0, *range(41, 62), *range(1, 41), *range(62, 82)]
    assert kahn_order(graph_of(82, u, v)) == expect
