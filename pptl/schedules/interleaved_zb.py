"""Interleaved zero bubble (ZB1P over looped chunks), as torch 2.13's ``ScheduleInterleavedZeroBubble``.

Source: Qi et al., "Zero Bubble Pipeline Parallelism" (arXiv 2401.10241), and the order of torch's
``ScheduleInterleavedZeroBubble`` (``_get_1f1b_rank_ops`` with zero bubble on). Looped placement:
stage s on rank s % pp, chunk s // pp. Micro-batches go in rounds of R = m // max(1, m // pp); the
k-th forward of a rank runs chunk (k // R) % V, the k-th input gradient runs chunk
V-1-((k-w) // R) % V, each stage in micro-batch order. Phase table of rank r, w = min((V-1)R +
pp-1-r, mV):

    warmup    F_k                       k < w
    steady    F_{w+k} I_k [W]           k < mV - w
    cooldown  I_k [W]                   the rest
    tail      W ...                     the weight gradients still owed

[W] is the oldest weight gradient not yet run (a FIFO over the rank's I order), from the
(r+1)-th I on: rank r holds r weight gradients back to fill the cooldown's idle time.

torch refuses m that is not a multiple of its rounds (m // pp); pptl refuses the same sizes with
torch's reason. Assumptions: B is always split into I and W; the textbook bubble is (p-1)(F+I-W) per chunk
when m >= pp, and the simulated idle per rank is that (the stagger of the ranks included).
"""
from __future__ import annotations

from pptl.config import Config
from pptl.errors import InputError
from pptl.ir import Schedule
from pptl.schedules._common import Family, Order, assemble, require
from pptl.schedules._pipeline_meta import PipelineMeta

__all__ = ["FAMILY", "NAME", "build", "validate", "phase_order", "rounds"]

NAME = "interleaved-zb"


def rounds(pp: int, m: int) -> tuple[int, int]:
    """(rounds, micro-batches per round) as torch counts them: max(1, m // pp) rounds of m // rounds."""
    n = max(1, m // pp)
    return n, m // n


def phase_order(rank: int, p: int, v: int, m: int) -> Order:
    """The compute order of ``rank`` as columns."""
    _, per = rounds(p, m)
    total = m * v
    w = min((v - 1) * per + p - 1 - rank, total)
    nxt = {(k, c): 0 for k in "FIW" for c in range(v)}
    owed: list[int] = []  # chunks of the I's whose W has not run, oldest first
    rows: list[tuple[str, int, int, int, int]] = []

    def put(kind: str, c: int) -> None:
        mb = nxt[kind, c]
        nxt[kind, c] = mb + 1
        rows.append((kind, c * p + rank, mb, 0, c))

    def backward(k: int) -> None:
        c = v - 1 - ((k - w) // per) % v
        put("I", c)
        owed.append(c)
        if k - w >= rank:  # rank r keeps r weight gradients back
            put("W", owed.pop(0))

    for k in range(w):  # warmup
        put("F", (k // per) % v)
    for k in range(w, total):  # steady: F I [W]
        put("F", (k // per) % v)
        backward(k)
    for k in range(total, total + w):  # cooldown: I [W]
        backward(k)
    for c in owed:  # tail
        put("W", c)
    return Order.of_rows(rows)


def validate(cfg: Config) -> None:
    require(cfg.vpp >= 2, cfg, "vpp", cfg.vpp, "expected at least 2 chunks per rank (zb-h1 is the one-chunk order)")
    n, _ = rounds(cfg.pp, cfg.microbatches)
    if cfg.microbatches % n:
        near = [str(k) for k in sorted(range(1, 2 * cfg.microbatches), key=lambda k: (abs(k - cfg.microbatches), k))
                if k % rounds(cfg.pp, k)[0] == 0][:2]
        raise InputError(f"{cfg.source}: field 'microbatches': got {cfg.microbatches}, expected a multiple of the "
                         f"{n} rounds (microbatches // pp) for schedule '{cfg.schedule}' (torch's "
                         f"ScheduleInterleavedZeroBubble: \"Zero bubble requires the number of microbatches to be a "
                         f"multiple of the number of rounds ({n}), but got {cfg.microbatches}.\"); sizes that fit: "
                         f"{' or '.join(near)} (or any multiple of pp)")


def build(cfg: Config) -> Schedule:
    validate(cfg)
    p, v, m = cfg.pp, cfg.vpp, cfg.microbatches
    return assemble(cfg, NAME, {r: phase_order(r, p, v, m) for r in range(p)}, num_stages=p * v, microbatches=m,
                    meta=PipelineMeta(weight_grad_store="rank").to_meta())


def bubble(cfg: Config) -> float | None:
    """(p-1)(F+I-W) per rank with per-chunk costs, when m >= pp (None below: the fill is not covered).

    Worked from the order: rank r holds back r weight gradients, one W per hop, so the last
    rank's I still waits (p-1)(F+I) for the first gradient and the deferred W's give back (p-1)W
    (ZB-H1 holds back two per hop and reaches (p-1)(F+I-2W))."""
    if cfg.microbatches < cfg.pp:
        return None
    c = cfg.costs
    return max(0.0, (cfg.pp - 1) * (c.lookup("F") + c.lookup("I") - c.lookup("W")))


def memory(cfg: Config) -> float:
    _, per = rounds(cfg.pp, cfg.microbatches)
    return float(min((cfg.vpp - 1) * per + cfg.pp, cfg.microbatches * cfg.vpp)) * cfg.activation


def assumptions(cfg: Config) -> list[str]:
    from pptl.schedules._common import uniform_cost_assumptions

    out = uniform_cost_assumptions(cfg, ("F", "I", "W"))
    c = cfg.costs
    f, i, w = c.lookup("F"), c.lookup("I"), c.lookup("W")
    if f is not None and i is not None and w is not None and cfg.pp > 1 and cfg.microbatches >= cfg.pp \
            and w > min(f, i):
        # Measured (m >= p, V 2-4, p 2-5): a W longer than the F or I whose slot it fills no longer
        # fits it, and every rank idles (p-1)max(F, I), (p-1)(W-min(F, I)) more than (p-1)(F+I-W).
        out.append(f"W={w:g} > min(F, I)={min(f, i):g}: each rank idles (p-1)max(F,I) = "
                   f"{(cfg.pp - 1) * max(f, i):g}")
    if cfg.microbatches < cfg.pp:
        out.append(f"microbatches={cfg.microbatches} < pp={cfg.pp}: the fill is not covered")
    return out


FAMILY = Family(
    name=NAME,
    summary="interleaved zero bubble (ZB1P on looped chunks): torch's InterleavedZeroBubble, B split into I and W",
    constraints="vpp >= 2; microbatches a multiple of max(1, microbatches // pp) (torch's rounds); any pp >= 1",
    validate=validate,
    build=build,
    bubble=bubble,
    bubble_formula="(p-1)(F+I-W) with per-chunk costs, when m >= p",
    memory=memory,
    memory_formula="min((V-1)R + p, mV) chunk activations on rank 0, R = m // max(1, m // p)",
    source="Qi et al. 2024 (ZB1P); torch ScheduleInterleavedZeroBubble",
    assumptions=assumptions,
    aliases=("interleavedzerobubble", "izb", "zb1p-interleaved"),
    memory_bound=True,
    style="default",
    runtime=None,  # the training executor runs its F, B, I and W
    kinds=frozenset({"F", "I", "W"}),
    torch_schedule="ScheduleInterleavedZeroBubble",
)
