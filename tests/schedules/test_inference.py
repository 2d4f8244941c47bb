"""inference: forwards only, on any pp and vpp; the checks ask a forward-only family for its F alone
(through the family's declared kinds), and still ask a training family for its backward."""
from __future__ import annotations

from dataclasses import replace

import pytest

from pptl.checks import run_checks
from pptl.config import config_from_mapping
from pptl.errors import InputError
from pptl.schedules import build_schedule, find_family, get_family
from pptl.schedules._common import required_roles
from pptl.simulate import simulate


def _plan(p: int, m: int, vpp: int = 1, **kw):
    return build_schedule(config_from_mapping({"schedule": "inference", "pp": p, "microbatches": m, "vpp": vpp,
                                               **kw}))


def _order(s, r: int) -> list[str]:
    return [f"{op.stage}:{op.mb}" for op in s.lane_ops(r, "compute")]


def test_order_by_hand() -> None:
    """pp=2, V=2, m=5: groups of pp=2 micro-batches through chunk 0 (stage r), then chunk 1 (stage
    2+r); the last group holds the fifth alone."""
    s = _plan(2, 5, vpp=2)
    assert _order(s, 0) == ["0:0", "0:1", "2:0", "2:1", "0:2", "0:3", "2:2", "2:3", "0:4", "2:4"]
    assert _order(s, 1) == ["1:0", "1:1", "3:0", "3:1", "1:2", "1:3", "3:2", "3:3", "1:4", "3:4"]
    assert {op.kind for op in s.ops} == {"F", "SEND", "RECV"}


@pytest.mark.parametrize("p,m,vpp", [(1, 1, 1), (1, 3, 2), (2, 1, 1), (2, 4, 2), (3, 7, 3), (4, 8, 2), (8, 3, 1),
                                     (10, 20, 2)], ids=lambda v: str(v))
def test_valid_at_any_size(p: int, m: int, vpp: int) -> None:
    s = _plan(p, m, vpp)
    assert [v.code for v in run_checks(s) if v.severity == "error"] == []
    assert sum(op.kind == "F" for op in s.ops) == p * vpp * m


@pytest.mark.parametrize("p,vpp", [(2, 1), (4, 1), (4, 2), (8, 3)])
def test_bubble_and_memory(p: int, vpp: int) -> None:
    """m = 2p, F = 1: each rank idles (p-1)F (fill and drain); a forward's output is held from its
    start to its SEND's end, so with instant messages a rank holds 1 (the formula's bound is 2)."""
    cfg = config_from_mapping({"schedule": "inference", "pp": p, "microbatches": 2 * p, "vpp": vpp,
                               "costs": {"F": 1}})
    sim = simulate(build_schedule(cfg))
    fam = get_family("inference")
    assert [r.idle for r in sim.ranks] == [p - 1] * p == [fam.bubble(cfg)] * p
    assert [r.peak_activation for r in sim.ranks] == [1.0] * p
    assert fam.memory(cfg) == 2.0


def test_slow_messages_hold_two_outputs() -> None:
    """A SEND as long as a forward: the next forward starts while the last output is still going out."""
    cfg = config_from_mapping({"schedule": "inference", "pp": 2, "microbatches": 4, "costs": {"F": 1},
                               "comm": {"latency": 1}})
    sim = simulate(build_schedule(cfg))
    assert sim.ranks[0].peak_activation == 2.0


def test_missing_work_asks_a_forward_only_plan_for_its_forwards() -> None:
    s = _plan(2, 2)
    assert required_roles(find_family("inference")) == ("F",)
    assert required_roles(find_family("1f1b")) == required_roles(None) == ("F", "G", "W")
    lanes = {k: [s.ops[i] for i in v] for k, v in s.lanes.items()}
    assert lanes[(1, "compute")].pop().id == "r1/compute/F s1 mb1"
    dropped = s.with_lanes(lanes)
    # its memory spans name ops by index, which the edit moved: the rules here read none of them
    dropped = replace(dropped, meta={k: v for k, v in dropped.meta.items() if k not in ("held", "held_saved")})
    codes = [f"{v.code} {v.message}" for v in run_checks(dropped) if v.code == "PP003"]
    assert codes == ["PP003 missing F for stage 1 mb 1"]  # the F alone, no B asked for
    # The same forwards under a training family's name: PP003 asks for every backward.
    training = replace(s, family="gpipe")
    missing = [v.message for v in run_checks(training) if v.code == "PP003"]
    assert missing[0] == "missing B for stage 0 mb 0" and len(missing) == 4


def test_refuses_a_split_backward() -> None:
    with pytest.raises(InputError, match=r"field 'split_backward': got True, expected false \(inference runs no "
                                         r"backward\) for schedule 'inference'"):
        _plan(2, 2, split_backward=True)
