"""looped-bfs and interleaved-zb against torch's own generator (torch 2.13 CPU, no processes):
``torch.distributed.pipelining._schedule_visualizer.get_schedule_ops`` builds each class's
pipeline_order, and pptl's plan, written as torch CSV cells, must be the same order rank by rank;
where torch refuses a size, pptl refuses it with torch's reason."""
from __future__ import annotations

import logging

import pytest

from pptl.config import config_from_mapping
from pptl.errors import InputError
from pptl.formats.torch_csv import to_rows
from pptl.schedules import build_schedule, get_family

pytest.importorskip("torch")
from torch.distributed.pipelining._schedule_visualizer import get_schedule_ops  # noqa: E402

TORCH = {"looped-bfs": "LoopedBFS", "interleaved-zb": "InterleavedZeroBubble"}
GRID = [(pp, m) for pp in (2, 4, 8) for m in (pp, 2 * pp, 3 * pp)]


def _plan(family: str, pp: int, m: int, vpp: int = 2):
    return build_schedule(config_from_mapping({"schedule": family, "pp": pp, "microbatches": m, "vpp": vpp}))


def _torch_rows(family: str, pp: int, m: int, vpp: int = 2) -> list[list[str]]:
    logging.disable(logging.WARNING)  # torch logs the bubbles it adds (interleaved ZB at m < pp)
    try:
        order = get_schedule_ops(TORCH[family], pp, m, vpp)
    finally:
        logging.disable(logging.NOTSET)
    return [[str(a) for a in row if a is not None] for row in order]


@pytest.mark.parametrize("family", list(TORCH))
@pytest.mark.parametrize("pp,m", GRID, ids=lambda v: str(v))
def test_order_equals_torch(family: str, pp: int, m: int) -> None:
    rows, _ = to_rows(_plan(family, pp, m))
    assert rows == _torch_rows(family, pp, m)


@pytest.mark.parametrize("family", list(TORCH))
@pytest.mark.parametrize("pp,m,vpp", [(1, 3, 2), (3, 2, 2), (3, 8, 3), (4, 5, 3), (4, 6, 4), (5, 10, 2), (8, 3, 2)],
                         ids=lambda v: str(v))
def test_order_equals_torch_off_the_grid(family: str, pp: int, m: int, vpp: int) -> None:
    """Odd pp, m < pp, m not a multiple of pp, V = 3 and 4 (every size torch accepts there)."""
    rows, _ = to_rows(_plan(family, pp, m, vpp))
    assert rows == _torch_rows(family, pp, m, vpp)


def test_two_ranks_by_hand() -> None:
    """Worked from torch's classes at pp=2, V=2, m=2 (stages 0, 2 on rank 0; 1, 3 on rank 1)."""
    bfs, _ = to_rows(_plan("looped-bfs", 2, 2))
    # every F of chunk 0, then of chunk 1; backwards from the last chunk, newest micro-batch first
    assert bfs[0] == ["0F0", "0F1", "2F0", "2F1", "2B1", "2B0", "0B1", "0B0"]
    assert bfs[1] == ["1F0", "1F1", "3F0", "3F1", "3B1", "3B0", "1B1", "1B0"]
    izb, _ = to_rows(_plan("interleaved-zb", 2, 2))
    # rank 0: warmup (V-1)R + p-1-r = 3 forwards, one steady F I, then I's; it holds back no W
    assert izb[0] == ["0F0", "0F1", "2F0", "2F1", "2I0", "2W0", "2I1", "2W1", "0I0", "0W0", "0I1", "0W1"]
    # rank 1: warmup 2; it holds back one W (the first I's) until the end
    assert izb[1] == ["1F0", "1F1", "3F0", "3I0", "3F1", "3I1", "3W0", "1I0", "3W1", "1I1", "1W0", "1W1"]


@pytest.mark.parametrize("pp,m", [(2, 5), (2, 7), (3, 7), (4, 9), (4, 11), (4, 14), (8, 17), (8, 26)],
                         ids=lambda v: str(v))
def test_interleaved_zb_refuses_what_torch_refuses_with_its_reason(pp: int, m: int) -> None:
    with pytest.raises(ValueError) as theirs:
        get_schedule_ops("InterleavedZeroBubble", pp, m, 2)
    with pytest.raises(InputError) as ours:
        _plan("interleaved-zb", pp, m)
    rounds = max(1, m // pp)
    assert str(theirs.value) in str(ours.value)
    assert str(ours.value).startswith(f"<flags>: field 'microbatches': got {m}, expected a multiple of the "
                                      f"{rounds} rounds (microbatches // pp) for schedule 'interleaved-zb'")
    fits = str(ours.value).split("sizes that fit: ")[1].split(" (")[0].split(" or ")
    for k in map(int, fits):  # the sizes offered are ones torch takes
        get_schedule_ops("InterleavedZeroBubble", pp, k, 2)
        _plan("interleaved-zb", pp, k)


def test_refusals_of_split_backward_and_one_chunk() -> None:
    with pytest.raises(InputError, match=r"field 'split_backward': got True, expected false \(torch's "
                                         r"ScheduleLoopedBFS runs full backwards"):
        build_schedule(config_from_mapping({"schedule": "looped-bfs", "pp": 2, "microbatches": 4, "vpp": 2,
                                            "split_backward": True}))
    with pytest.raises(InputError, match=r"field 'vpp': got 1, expected at least 2 chunks per rank, as torch's "
                                         r"multi-stage schedules \(one chunk is gpipe's order\)"):
        _plan("looped-bfs", 2, 4, vpp=1)
    with pytest.raises(InputError, match=r"field 'vpp': got 1, expected at least 2 chunks per rank"):
        _plan("interleaved-zb", 2, 4, vpp=1)


@pytest.mark.parametrize("pp,m", [(2, 4), (4, 8), (4, 12), (8, 16)], ids=lambda v: str(v))
def test_bubble_and_memory_formulas_hold(pp: int, m: int) -> None:
    """F=1, B=2 (I=1, W=1) per chunk: looped BFS idles (p-1)(F+B) = 3(p-1) and holds all mV chunk
    activations; interleaved ZB idles (p-1)(F+I-W) = p-1 and rank 0 holds (V-1)R + p."""
    from pptl.simulate import simulate

    costs = {"F": 1, "B": 2, "I": 1, "W": 1}
    for family, idle, peak in (("looped-bfs", 3 * (pp - 1), 2 * m), ("interleaved-zb", pp - 1, pp + pp)):
        cfg = config_from_mapping({"schedule": family, "pp": pp, "microbatches": m, "vpp": 2, "costs": costs})
        sim = simulate(build_schedule(cfg))
        fam = get_family(family)
        assert [r.idle for r in sim.ranks] == [idle] * pp
        assert fam.bubble(cfg) == idle
        assert max(r.peak_activation for r in sim.ranks) == peak == fam.memory(cfg)
