"""PP023 (warning): a plan holds more activations than its family's memory formula says."""
from __future__ import annotations

from typing import TYPE_CHECKING, Sequence

from pptl.checks.base import Context, Violation

if TYPE_CHECKING:
    from pptl.config import Config
    from pptl.schedules._common import Family
    from pptl.simulate import RankMetrics

__all__ = ["memory_formula"]


def memory_formula(ctx: Context) -> list[Violation]:
    """PP023 (warning): the simulated peak activation of a rank is above the family's formula.

    For the families whose formula is a bound pptl holds its plans to (``Family.memory_bound``: the
    controllable-memory V schedules, whose point is their fraction of 1F1B's memory, the torch orders
    and inference): a plan whose peak passes the formula is not the schedule the formula describes
    (a hand-edited order, or a config outside the formula's assumptions: slow messages held by
    inference, ``w_activation`` for a formula counted to I). The message names the rank, both values
    and, for a V schedule, the fraction of 1F1B's memory on the same model. Schedules without a
    config or family get no warning. Notes: O(ranks) after the simulation the checker already ran.
    """
    s = ctx.schedule
    cfg = s.config
    if cfg is None:
        return []
    from pptl.schedules import find_family

    fam = find_family(s.family)
    if fam is None or not fam.memory_bound:
        return []
    ranks = ctx.simulation.ranks
    out = _past_target(fam, cfg, ranks)
    bound = fam.memory(cfg)
    if bound is None:
        return out
    over = [r for r in ranks if r.peak_activation > bound + _slack(cfg)]
    if not over:
        return out
    worst = max(over, key=lambda r: r.peak_activation)
    share = ""
    if s.num_stages == 2 * s.pp and cfg.activation > 0 and min(cfg.pp, cfg.microbatches) > 0:
        # A V chunk is half of a 1F1B stage of the same model: 1F1B holds min(p, m) stages.
        share = (f" ({worst.peak_activation / 2 / (min(cfg.pp, cfg.microbatches) * cfg.activation):.2f} of "
                 f"1F1B's, against {bound / 2 / (min(cfg.pp, cfg.microbatches) * cfg.activation):.2f})")
    return out + [Violation("PP023", f"{fam.name}: simulated peak activation {worst.peak_activation:g} on rank "
                            f"{worst.rank} is above the formula's {bound:g}{share}: {fam.memory_formula}; "
                            f"{len(over)} rank(s) over", (), severity="warning")]


def _past_target(fam: Family, cfg: Config, ranks: Sequence[RankMetrics]) -> list[Violation]:
    """The family's promise (``Family.memory_target``), where a rank's simulated peak passes it."""
    if fam.memory_target is None:
        return []
    target, words = fam.memory_target(cfg)
    worst = max(ranks, key=lambda r: r.peak_activation, default=None)
    if worst is None or worst.peak_activation <= target + _slack(cfg):
        return []
    return [Violation("PP023", f"{fam.name}: simulated peak activation {worst.peak_activation:g} on rank {worst.rank} "
                      f"is above the family's {target:g} ({words})", (), severity="warning")]


def _slack(cfg: Config) -> float:
    """Rounding in a peak summed from activations: a 1e-9 share of one micro-batch's activation.
    Relative, so that a plan whose activations are given in a large unit (1e-10 of it each) is held
    to its formula too, where an absolute 1e-9 would pass any peak."""
    return 1e-9 * abs(cfg.activation)
