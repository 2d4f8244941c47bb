"""DualPipe: bidirectional pipeline with overlapped forward & backward (DeepSeek-V3).

Source: deepseek-ai/DualPipe ``dualpipe/dualpipe.py`` ``DualPipe.step()`` ("Step 1: nF0" ...
"Step 8: nW") and the DeepSeek-V3 technical report (arXiv 2412.19437).

Placement: N ranks (N even). Micro-batches come in two directions, half each: direction 0 enters
at rank 0 and runs stages 0..N-1 on ranks 0..N-1; direction 1 enters at rank N-1, and its stage
s (counted along its own flow) sits on rank N-1-s. So rank r holds stage r of direction 0 and
stage N-1-r of direction 1: two parameter copies per rank.

The phase table (:func:`steps`) is written per rank in DualPipe's own terms: *phase* 0 is the
direction that enters on this half of the pipeline (direction 0 on ranks < N/2, direction 1 on
the others), phase 1 the other one. With h = min(r, N-1-r), H = N/2, C micro-batches in all:

    Step 1  F0                 x 2(H-h-1)
    Step 2  F0 F1              x (h+1)
    Step 3  I1 W F1            x (H-h-1)        zero bubble: W pops the FIFO at once
    Step 4  F0&B1 F1&B0        x (C/2-N+h+1)    main step
    Step 5  B1 F1&B0           x (H-h-1)
    Step 6  B1 B0              x (h+1)          the second half split into I (W deferred)
    Step 7  W I0               x (H-h-1)
    Step 8  W                  x (h+1)

DualPipeV (:mod:`pptl.schedules.dualpipev`) runs the same table with h = r, H = N and
C-2N+r+1 main steps; only the placement differs.

Assumptions: micro-batches of one phase run F and B in index order; weight-gradient work of a
rank is one FIFO (DualPipe's ``WeightGradStore``), so W ops pop in the order their I ran. The
overlapped F&B is one op (kind ``FB``, cost key ``FB``, default F+B).

NOTE (from DualPipe): on the middle ranks (h = H-1) the first main step does *not* overlap F0
with B1 ("to further reduce bubble size"); it runs F0, then a full B1.
"""
from __future__ import annotations

from collections import deque
from dataclasses import dataclass
from typing import Callable

from pptl.config import Config
from pptl.ir import Schedule
from pptl.schedules._common import Family, Order, assemble, overlap_metrics, require, uniform_cost_assumptions
from pptl.schedules._pipeline_meta import PipelineMeta

__all__ = ["FAMILY", "NAME", "build", "validate", "steps", "Step", "realize", "bubble", "memory", "assumptions"]

NAME = "dualpipe"


@dataclass(frozen=True, slots=True)
class Step:
    """One entry of the phase table: ``kind`` F, B, I, W or FB on ``phase`` (0 or 1).

    For FB, ``phase`` is the F half and ``b_phase`` the full-B half; W takes no phase (it pops
    the rank's FIFO).
    """

    kind: str
    phase: int = -1
    b_phase: int = -1


_F0, _F1 = Step("F", 0), Step("F", 1)
_B0, _B1 = Step("B", 0), Step("B", 1)
_I0, _I1 = Step("I", 0), Step("I", 1)
_W = Step("W")
_F0B1, _F1B0 = Step("FB", 0, 1), Step("FB", 1, 0)


def steps(h: int, H: int, main: int) -> list[Step]:
    """The eight-step order of one rank (DualPipe ``step()``), in phases 0/1.

    Args:
        h: the rank's distance from its end of the pipeline (DualPipe: min(r, N-1-r); V: r).
        H: ranks per half (DualPipe: N/2; V: N).
        main: count of the main step (DualPipe: C/2-N+h+1; V: C-2N+r+1).
    """
    out: list[Step] = []
    out += [_F0] * (2 * (H - h - 1))  # Step 1: nF0
    out += [_F0, _F1] * (h + 1)  # Step 2: nF0F1
    out += [_I1, _W, _F1] * (H - h - 1)  # Step 3: nB1W1F1 (zero bubble)
    for i in range(main):  # Step 4 (main): nF0B1F1B0
        if i == 0 and h == H - 1:
            out += [_F0, _B1]  # NOTE: not overlapped on the middle ranks
        else:
            out.append(_F0B1)
        out.append(_F1B0)
    out += [_B1, _F1B0] * (H - h - 1)  # Step 5: nB1F1B0
    zb = False
    for i in range(h + 1):  # Step 6: nB1B0, the second half with zero bubble
        if i == (h + 1) // 2 and h % 2 == 1:
            zb = True
        out.append(_I1 if zb else _B1)
        if i == (h + 1) // 2 and h % 2 == 0:
            zb = True
        out.append(_I0 if zb else _B0)
    out += [_W, _I0] * (H - h - 1)  # Step 7: nWB0 (zero bubble)
    out += [_W] * (h + 1)  # Step 8: nW
    return out


Place = Callable[[int], tuple[int, int, int]]
"""phase -> (stage, direction, chunk) on one rank."""


def realize(rank: int, table: list[Step], place: Place) -> Order:
    """Turn a phase table into the rank's compute ops, as columns (:meth:`Order.ops` makes them
    ``Op`` objects): micro-batch numbers count per phase (F and B separately, in order); W pops
    the rank's FIFO of earlier I ops."""
    f_next = [0, 0]
    b_next = [0, 0]
    fifo: deque[tuple[int, int, int, int]] = deque()
    out: list[tuple[str, int, int, int, int, tuple[int, int, int] | None]] = []

    def fwd(phase: int) -> tuple[int, int, int, int]:
        stage, d, chunk = place(phase)
        mb = f_next[phase]
        f_next[phase] += 1
        return stage, mb, d, chunk

    def bwd(phase: int) -> tuple[int, int, int, int]:
        stage, d, chunk = place(phase)
        mb = b_next[phase]
        b_next[phase] += 1
        return stage, mb, d, chunk

    for st in table:
        if st.kind == "F":
            s, mb, d, c = fwd(st.phase)
            out.append(("F", s, mb, d, c, None))
        elif st.kind in ("B", "I"):
            s, mb, d, c = bwd(st.phase)
            out.append((st.kind, s, mb, d, c, None))
            if st.kind == "I":
                fifo.append((s, mb, d, c))
        elif st.kind == "W":
            s, mb, d, c = fifo.popleft()
            out.append(("W", s, mb, d, c, None))
        else:  # FB: F of one phase overlapped with the full B of the other
            s, mb, d, c = fwd(st.phase)
            bs, bmb, bd, _ = bwd(st.b_phase)
            out.append(("FB", s, mb, d, c, (bs, bmb, bd)))
    if fifo:  # the table always drains; a leftover means the table above is wrong
        raise AssertionError(f"rank {rank}: {len(fifo)} weight gradients never popped")
    return Order.of_rows(out)


def validate(cfg: Config) -> None:
    n, c = cfg.pp, cfg.microbatches
    require(cfg.vpp == 1, cfg, "vpp", cfg.vpp, "expected 1 (DualPipe holds one stage per direction per rank)")
    require(n >= 2 and n % 2 == 0, cfg, "pp", n, "expected an even number of ranks >= 2")
    require(c % 2 == 0, cfg, "microbatches", c,
            "expected an even total (half enter at rank 0, half at the last rank)")
    require(c >= 2 * n, cfg, "microbatches", c, f"expected at least 2*pp = {2 * n}")


def _place(rank: int, n: int) -> Place:
    second_half = int(rank >= n // 2)

    def place(phase: int) -> tuple[int, int, int]:
        d = phase ^ second_half
        return (rank if d == 0 else n - 1 - rank), d, d

    return place


def build(cfg: Config) -> Schedule:
    validate(cfg)
    n, c = cfg.pp, cfg.microbatches
    big_h = n // 2
    orders: dict[int, Order] = {}
    for r in range(n):
        h = min(r, n - 1 - r)
        orders[r] = realize(r, steps(h, big_h, c // 2 - n + h + 1), _place(r, n))
    meta = PipelineMeta(parameter_copies=2, weight_grad_store="rank").to_meta()
    return assemble(cfg, NAME, orders, num_stages=n, microbatches=c // 2, directions=2, meta=meta)


def bubble(cfg: Config) -> float:
    """(PP/2-1)(F&B+B-3W), PP = ranks (DualPipe README)."""
    c = cfg.costs
    return (cfg.pp // 2 - 1) * (c.lookup("FB") + c.lookup("B") - 3 * c.lookup("W"))


def memory(cfg: Config) -> float:
    return float(cfg.pp + 1) * cfg.activation


def assumptions(cfg: Config, half: int | None = None) -> list[str]:
    """Why the bubble formula is not exact for ``cfg`` (empty when it is).

    Measured with the simulator over p, m, F, I, W (tests/schedules/test_dualpipe.py): with zero
    communication and F&B = F+B, every rank idles exactly (H-1)(F&B+B-3W) when I = F and W <= F
    (H = p/2; DualPipeV: H = p). Otherwise, per rank:

    - I < F: (H-1)((F-I) + max(0, W-I)) more than the formula;
    - I > F: min((H-1)(I-F), F) less, plus (H-1)max(0, W-I);
    - W > I = F: (H-1)(W-I) more;
    - F&B != F+B: ranks run different numbers of F&B ops, so their idle times differ; the formula
      holds on the ranks that run the most (h >= H-2: the middle ranks; DualPipeV: the last two).

    So the issue's "I >= F" is not enough: the formula is exact only at I = F, and an upper bound
    for I > F.
    """
    c = cfg.costs
    big_h = cfg.pp // 2 if half is None else half
    out = uniform_cost_assumptions(cfg, ("F", "B", "I", "W", "FB"))
    f, b, i, w, fb = (c.lookup(k) for k in ("F", "B", "I", "W", "FB"))
    if None in (f, b, i, w, fb):
        return out
    k = big_h - 1
    if k == 0:  # two ranks (DualPipeV: one): the formula is 0 and so is every simulated bubble
        return out
    if i < f:
        out.append(f"I={i:g} < F={f:g}: each rank idles (H-1)((F-I)+max(0,W-I)) = {k * ((f - i) + max(0.0, w - i)):g} "
                   "more than the formula")
    elif i > f:
        out.append(f"I={i:g} > F={f:g}: the formula over-estimates by min((H-1)(I-F), F) = {min(k * (i - f), f):g} "
                   "(exact only when I = F)")
    if w > i >= f:
        out.append(f"W={w:g} > I={i:g}: each rank idles (H-1)(W-I) = {k * (w - i):g} more than the formula")
    if abs(fb - (f + b)) > 1e-9:
        out.append(f"F&B={fb:g} is not F+B={f + b:g}: ranks run different numbers of F&B ops, so the formula "
                   "holds only on those that run the most (the middle ranks)")
    return out


FAMILY = Family(
    name=NAME,
    summary="DualPipe: two directions at once, overlapped F&B in the steady state, split I/W at the ends",
    constraints="vpp = 1; pp even; microbatches (both directions together) even and >= 2*pp",
    validate=validate,
    build=build,
    bubble=bubble,
    bubble_formula="(p/2-1)(F&B+B-3W) on every rank when I = F >= W and F&B = F+B",
    memory=memory,
    memory_formula="p+1 activations per rank (FB allocates before it frees); 2 parameter copies",
    source="deepseek-ai/DualPipe dualpipe.py step(); DeepSeek-V3 report (arXiv 2412.19437)",
    style="dualpipe",
    assumptions=assumptions,
    extra_metrics=overlap_metrics,
    aliases=("dual-pipe",),
)
