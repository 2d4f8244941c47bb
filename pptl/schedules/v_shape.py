"""V-Half and V-Min: the controllable-memory V schedules, at about 1/2 and 1/3 of 1F1B's activations.

Source: Qi, Wan, Amar, Lin, "Pipeline Parallelism with Controllable Memory" (NeurIPS 2024, arXiv
2405.15362), and the stable patterns of its repository (sail-sg/zero-bubble-pipeline-parallelism,
``zbv_greedy.py``: ``stable_pattern_v_half``, ``stable_pattern_v_min``, ``put_w``).

Placement: the V of ZB-V: rank r holds stage r (chunk 0) and stage 2p-1-r (chunk 1). A schedule
repeats one building block every 6 time slots (F = I = W = 1 slot; one micro-batch is F and I and W
on both chunks). The block fixes when rank r runs micro-batch 0's four passes; micro-batch k runs
them 6k slots later:

    V-Min   F0  r           F1  2p-1-r      I1  2p+x+r       I0  4p+x-1-r      x = 2 if 3 | p else 0
    V-Half  F0  2r          F1  3p-r-2      I1  3p+x+2r-1    I0  6p+x-r-2      x = 3 if 2 | p else 0

(x keeps the four offsets of a rank apart modulo 6.) The lifespan of a chunk's activation, F to
I, is what sets the memory: about 4p slots for V-Min and 6p for V-Half, against 1F1B's 6p slots at
twice the chunk size, so a rank holds about 1/3 (V-Min) or 1/2 (V-Half) of 1F1B's activations.
The two slots of each block the passes leave free run weight gradients (W), chunk 1's first, each
chunk's in micro-batch order; a rank's order is its slots sorted by time.

The repository then squeezes the fill and the drain (:mod:`pptl.schedules._v_squeeze`: a pass
moves into an earlier free slot where its inputs allow and memory does not rise above the pattern's
peak); ``options: {squeeze: false}`` keeps the pattern's order. Either way the simulator runs each
op as soon as its inputs and its rank allow, which removes the idle slots the grid leaves.

Bubble, F = I = W, m >= 2p: unsqueezed, exactly (4p-5+x)F (V-Min) and (7p-7+x)F/2 (V-Half), the
fill and drain of the pattern; squeezed, no closed form (V-Half idles 7F at p = 4 where unsqueezed
it idles 12F, 49F at p = 16, 161F at p = 48; V-Min 11F, 59F, 188F), near the paper's rates of
about p/2m (V-Half) and 2p/3m (V-Min) of the step, i.e. 3pF and 4pF.

Assumptions: B is always split into I and W; the fractions hold for F = I = W and m at least the
micro-batches a rank holds; the memory formula is the paper's, activations held from F to W
(``w_activation: 1``); with less held until W a rank holds no more than it.
"""
from __future__ import annotations

from typing import Any, Callable

from pptl.config import Config
from pptl.errors import InputError
from pptl.ir import Schedule
from pptl.schedules._common import Family, Order, assemble, overlap_metrics, require, uniform_cost_assumptions
from pptl.schedules._pipeline_meta import PipelineMeta
from pptl.schedules._v_capped import MIN_CAP, capped_orders
from pptl.schedules._v_squeeze import squeeze

__all__ = ["FAMILY_HALF", "FAMILY_MIN", "build", "validate", "block", "phase_orders", "held_microbatches", "idle_slots",
           "squeezed"]

#: Slots of one building block: F, I and W of both chunks of one micro-batch.
PERIOD = 6


def block(variant: str, rank: int, p: int) -> tuple[int, int, int, int]:
    """The slots of micro-batch 0's (F0, F1, I1, I0) on ``rank`` (the paper's building block)."""
    if variant == "min":
        x = 2 if p % 3 == 0 else 0
        return rank, 2 * p - 1 - rank, 2 * p + x + rank, 4 * p + x - 1 - rank
    x = 3 if p % 2 == 0 else 0
    return 2 * rank, 3 * p - rank - 2, 3 * p + x + 2 * rank - 1, 6 * p + x - rank - 2


def phase_orders(variant: str, p: int, m: int, squeeze_fill: bool = True) -> dict[int, Order]:
    """Every rank's compute order: the block's passes for every micro-batch (squeezed by
    :func:`pptl.schedules._v_squeeze.squeeze` unless ``squeeze_fill`` is false), by slot, with the
    weight gradients in the free slots (chunk 1's first) and the rest at the end."""
    slots = [[[t + PERIOD * mb for mb in range(m)] for t in block(variant, r, p)] for r in range(p)]
    if squeeze_fill:
        squeeze(slots, p, m)
    return {r: _rank_order(slots[r], r, p) for r in range(p)}


def _rank_order(slots: list[list[int]], rank: int, p: int) -> Order:
    stages = (rank, 2 * p - 1 - rank)
    # (slot, kind, chunk, mb) of the four passes of every micro-batch
    passes = sorted((t, kind, c, mb) for ts, kind, c in zip(slots, ("F", "F", "I", "I"), (0, 1, 1, 0))
                    for mb, t in enumerate(ts))
    owed: tuple[list[int], list[int]] = ([], [])  # per chunk: micro-batches whose W is due
    rows: list[tuple[str, int, int, int, int]] = []
    slot = 0
    for t, kind, c, mb in passes:
        while slot < t:  # a free slot: the oldest W owed, chunk 1 first
            for w in (1, 0):
                if owed[w]:
                    rows.append(("W", stages[w], owed[w].pop(0), 0, w))
                    break
            slot += 1
        rows.append((kind, stages[c], mb, 0, c))
        if kind == "I":
            owed[c].append(mb)
        slot = t + 1
    for w in (1, 0):
        rows += [("W", stages[w], mb, 0, w) for mb in owed[w]]
    return Order.of_rows(rows)


def held_microbatches(variant: str, p: int) -> int:
    """Micro-batches (of 1F1B's stage size) the busiest rank holds in the steady state: the paper's
    (p+4)//3 for V-Min and (p+2)//2 for V-Half; pptl's memory formula is twice this in chunks."""
    return (p + 4) // 3 if variant == "min" else (p + 2) // 2


_OPTION_KEYS = ("squeeze", "memory")

#: The share of 1F1B's activations (same model) each family holds at most by default: the paper's
#: 1/2 and 1/3 with the tolerance its pattern's constant term reaches at large pp (V-Half 0.55 at
#: p = 20, V-Min 0.4 at p = 10).
SHARE = {"half": 0.55, "min": 0.4}


def squeezed(cfg: Config) -> bool:
    """``options.squeeze`` (default true: the repository's squeeze of the fill and the drain)."""
    value = (cfg.options or {}).get("squeeze", True)
    require(isinstance(value, bool), cfg, "options.squeeze", repr(value), "expected true or false")
    return bool(value)


def share(variant: str, cfg: Config) -> float | None:
    """``options.memory``: the most a rank may hold, as a share of 1F1B's activations on the same
    model (default :data:`SHARE`); None for ``pattern``, the paper's building block as it is."""
    value = (cfg.options or {}).get("memory", SHARE[variant])
    if value == "pattern":
        return None
    ok = isinstance(value, (int, float)) and not isinstance(value, bool) and 0 < value <= 1
    require(ok, cfg, "options.memory", repr(value), "expected a share of 1F1B's activations in (0, 1] or 'pattern'")
    return float(value)


def one_f_one_b_chunks(cfg: Config) -> int:
    """1F1B's peak on the same model, in V chunks: min(p, m) micro-batches of a whole stage (two chunks)."""
    return 2 * min(cfg.pp, cfg.microbatches)


def pattern_chunks(variant: str, cfg: Config) -> int:
    """The paper's count for the busiest rank, in chunks: 2 * held micro-batches, at most 2m."""
    return min(2 * held_microbatches(variant, cfg.pp), 2 * cfg.microbatches)


def cap_chunks(variant: str, cfg: Config) -> int | None:
    """Chunks a rank may hold where the pattern holds more than ``options.memory`` allows (None: the
    pattern fits): the share of 1F1B's, rounded down to whole chunks, and never under the two chunks
    of one micro-batch that any V order holds."""
    frac = share(variant, cfg)
    if frac is None:
        return None
    cap = max(MIN_CAP, int(frac * one_f_one_b_chunks(cfg) + 1e-9))
    return None if pattern_chunks(variant, cfg) <= cap else cap


def validate(cfg: Config) -> None:
    require(cfg.vpp in (1, 2), cfg, "vpp", cfg.vpp, "expected 2 (the V placement; 1 is read as 2)")
    extra = sorted(str(k) for k in (cfg.options or {}) if k not in _OPTION_KEYS)
    if extra:
        raise InputError(f"{cfg.source}: field 'options.{extra[0]}' is unknown for schedule '{cfg.schedule}'; "
                         f"known: {', '.join(_OPTION_KEYS)}")
    squeezed(cfg)
    share("half", cfg)  # checks options.memory's value; either variant's default is valid


def _builder(variant: str, name: str) -> Callable[[Config], Schedule]:
    def build(cfg: Config) -> Schedule:
        validate(cfg)
        p, m = cfg.pp, cfg.microbatches
        cap = cap_chunks(variant, cfg)
        orders = phase_orders(variant, p, m, squeezed(cfg)) if cap is None else capped_orders(p, m, cap)
        return assemble(cfg, name, orders, num_stages=2 * p, microbatches=m,
                        meta=PipelineMeta(weight_grad_store="stage", placement="v").to_meta())

    return build


def build(cfg: Config) -> Schedule:
    """Build ``cfg.schedule`` (v-half or v-min)."""
    return (FAMILY_MIN if cfg.schedule.strip().lower() in FAMILY_MIN.aliases + (FAMILY_MIN.name,) else
            FAMILY_HALF).build(cfg)


def _memory(variant: str) -> Callable[[Config], float]:
    def memory(cfg: Config) -> float:
        cap = cap_chunks(variant, cfg)
        return float(pattern_chunks(variant, cfg) if cap is None else cap) * cfg.activation

    return memory


def _target(variant: str) -> Callable[[Config], tuple[float, str]]:
    def target(cfg: Config) -> tuple[float, str]:
        """The family's promise, for PP023: the activations a rank holds at most (the share of 1F1B's),
        in words, with why a plan can miss it."""
        chosen = share(variant, cfg)
        frac = SHARE[variant] if chosen is None else chosen
        units = frac * one_f_one_b_chunks(cfg)
        if units < MIN_CAP:
            least = MIN_CAP / one_f_one_b_chunks(cfg)
            why = f"any V order holds both chunks of a micro-batch on rank 0 as its forward turns, {least:.2g}x of 1F1B's"
        elif chosen is None:
            why = "options.memory: pattern keeps the paper's building block, whose constant term holds more at this pp"
        else:
            why = ""
        return units * cfg.activation, f"{frac:g}x of 1F1B's" + (f"; {why}" if why else "")

    return target


def idle_slots(variant: str, p: int) -> float:
    """Idle slots per rank of the unsqueezed order with F = I = W = 1 and zero communication: the fill
    and drain of the pattern (the steady state has none), 4p-5+x for V-Min and (7p-7+x)/2 for V-Half.
    Worked from the block: the last rank's first I waits for the V's round trip, and the tail
    drains it back."""
    x = block(variant, 0, p)[2] - (2 * p if variant == "min" else 3 * p - 1)
    return max(0.0, 4 * p - 5 + x if variant == "min" else (7 * p - 7 + x) / 2)


def _bubble(variant: str) -> Callable[[Config], float | None]:
    def bubble(cfg: Config) -> float | None:
        c = cfg.costs
        f = c.lookup("F")
        if (not f == c.lookup("I") == c.lookup("W") or cfg.microbatches < cfg.pp or squeezed(cfg)
                or cap_chunks(variant, cfg) is not None):
            return None  # the squeeze and the cap have no closed form (the formula text gives the paper's rate)
        return idle_slots(variant, cfg.pp) * f

    return bubble


def _assumptions(variant: str) -> Callable[[Config], list[str]]:
    def assumptions(cfg: Config) -> list[str]:
        out = uniform_cost_assumptions(cfg, ("F", "I", "W"))
        c = cfg.costs
        if not c.lookup("F") == c.lookup("I") == c.lookup("W"):
            out.append(f"F={c.lookup('F'):g}, I={c.lookup('I'):g}, W={c.lookup('W'):g} are not equal (the building "
                       "block's slots assume F = I = W)")
        if cfg.microbatches < cfg.pp:
            out.append(f"microbatches={cfg.microbatches} < pp={cfg.pp}: the pattern never reaches its steady state")
        cap = cap_chunks(variant, cfg)
        if cap is not None:
            out.append(f"the paper's pattern holds {pattern_chunks(variant, cfg)} chunks, over the {cap} that "
                       "options.memory allows: the order is the memory-capped greedy, with no closed-form bubble")
        return out

    return assumptions


def _metrics(variant: str) -> Callable[[Schedule, Any], dict[str, Any]]:
    def metrics(schedule: Schedule, sim: Any) -> dict[str, Any]:
        """The zero-bubble metrics, and the plan's peak activation as a fraction of 1F1B's for the same
        model: 1F1B holds min(p, m) micro-batches of a whole stage (two chunks) on its first rank."""
        out = overlap_metrics(schedule, sim)
        cfg = schedule.config
        if cfg is None:
            return out
        peak = max((r.peak_activation for r in sim.ranks), default=0.0)
        one_f_one_b = one_f_one_b_chunks(cfg) * cfg.activation
        if one_f_one_b > 0:
            frac = peak / one_f_one_b
            cap = cap_chunks(variant, cfg)
            nominal = "1/3" if variant == "min" else "1/2"
            how = (f"the paper's pattern; its {nominal} is the limit as pp grows" if cap is None else
                   f"capped at {cap} chunks by options.memory; the paper's pattern holds "
                   f"{pattern_chunks(variant, cfg) / one_f_one_b_chunks(cfg):.2f}x here")
            out["activation_vs_1f1b"] = frac
            out["report"] = [*out["report"],
                             f"peak activation {peak:g} per rank: {frac:.2f}x of 1F1B's {one_f_one_b:g} for the same "
                             f"model ({how})"]
        return out

    return metrics


_CONSTRAINTS = ("any pp >= 1, microbatches >= 1; vpp 2 (implied); B is always split into I and W; options: squeeze "
                "(true | false, default true), memory (the most a rank holds as a share of 1F1B's activations, "
                "default 0.55 for v-half and 0.4 for v-min, or 'pattern': the paper's building block as it is)")

FAMILY_MIN = Family(
    name="v-min",
    summary="controllable-memory V: at most 0.4x of 1F1B's activations (about 1/3 as pp grows), more bubble than ZB-V",
    constraints=_CONSTRAINTS,
    validate=validate,
    build=_builder("min", "v-min"),
    bubble=_bubble("min"),
    bubble_formula="about 4pF per rank (the paper's rate 2p/3m) when F = I = W; unsqueezed exactly (4p-5+x)F, "
                   "x = 2 if 3 | p else 0, m >= p",
    memory=_memory("min"),
    memory_target=_target("min"),
    memory_formula="2 * ((p+4)//3) chunk activations (the paper's (p+4)//3 micro-batches), at most 2m, where that "
                   "is within options.memory (default 0.4) of 1F1B's 2 * min(p, m); else that share in whole chunks, "
                   "at least 2",
    source="Qi et al. 2024 (Pipeline Parallelism with Controllable Memory, V-Min); sail-sg zero-bubble zbv_greedy",
    assumptions=_assumptions("min"),
    extra_metrics=_metrics("min"),
    aliases=("vmin", "v_min"),
    takes_options=True,
    memory_bound=True,
    style="default",
    runtime=None,  # the training executor runs its F, B, I and W
    kinds=frozenset({"F", "I", "W"}),
)

FAMILY_HALF = Family(
    name="v-half",
    summary="controllable-memory V: at most 0.55x of 1F1B's activations (about 1/2 as pp grows), little bubble",
    constraints=_CONSTRAINTS,
    validate=validate,
    build=_builder("half", "v-half"),
    bubble=_bubble("half"),
    bubble_formula="about 3pF per rank (the paper's rate p/2m) when F = I = W; unsqueezed exactly (7p-7+x)F/2, "
                   "x = 3 if 2 | p else 0, m >= p",
    memory=_memory("half"),
    memory_target=_target("half"),
    memory_formula="2 * ((p+2)//2) chunk activations (the paper's (p+2)//2 micro-batches), at most 2m, where that "
                   "is within options.memory (default 0.55) of 1F1B's 2 * min(p, m); else that share in whole chunks, "
                   "at least 2",
    source="Qi et al. 2024 (Pipeline Parallelism with Controllable Memory, V-Half); sail-sg zero-bubble zbv_greedy",
    assumptions=_assumptions("half"),
    extra_metrics=_metrics("half"),
    aliases=("vhalf", "v_half"),
    takes_options=True,
    memory_bound=True,
    style="default",
    runtime=None,  # the training executor runs its F, B, I and W
    kinds=frozenset({"F", "I", "W"}),
)
