"""How many ops a family's builder makes for a config, before it builds them: the bound
``pptl plan`` and the explorer hold plans to (bounded work on hostile input) needs the family's own
count, which differs several-fold between families per (stage, micro-batch)."""
from __future__ import annotations

import math
from dataclasses import replace
from typing import Any

from pptl.config import Config
from pptl.errors import InputError

__all__ = ["estimate_ops"]


#: Stage x micro-batch slots a probe build may take: a few hundred thousand ops at most, built in
#: well under the time planning them would take.
_PROBE_SLOTS = 4_000


def estimate_ops(cfg: Config, fam: Any, *, limit: int) -> int:
    """The ops ``fam`` (``cfg``'s family) makes for ``cfg``, from builds of the same pp and vpp with
    fewer micro-batches: families differ several-fold per (stage, micro-batch) (MoE's sub-ops per
    layer and EP member), so no one constant bounds them all. A family's count is a line in the
    micro-batches past its smallest sizes (the weight update's is flat), so two probe sizes give it."""
    slots = cfg.pp * cfg.vpp * cfg.microbatches
    if slots > limit:  # every stage and micro-batch has at least one op: past ``limit`` whatever the family
        return slots
    sizes = _probe_sizes(cfg, fam)
    if not sizes:  # the family refuses this size: planning will say why
        return slots
    if any(cfg.pp * cfg.vpp * m > _PROBE_SLOTS for m in sizes):
        # Probes this deep would cost what planning does: the rate of shallow pipelines instead.
        return max(slots, math.ceil(_small_pipeline_rate(cfg, fam) * slots))
    if len(sizes) == 1:
        return _count(fam, cfg, sizes[0])
    (m1, m2), n1 = sizes, _count(fam, cfg, sizes[0])
    n2 = _count(fam, cfg, m2)
    return max(1, math.ceil(n2 + (n2 - n1) / (m2 - m1) * (cfg.microbatches - m2)))


def _small_pipeline_rate(cfg: Config, fam: Any) -> float:
    """Ops per (stage, micro-batch) slot of the family in a deep pipeline, from pipelines of 4 and 8
    stages: the rate is about ``a - b/pp`` (links and the pipeline's ends are ``b``), so its limit
    ``a`` is twice the 8-stage rate less the 4-stage one. 1 where the family takes neither depth."""
    rates = []
    for pp in (4, 8):
        m = 2 * pp  # the fewest micro-batches every family takes at this depth: the most ops per slot
        small = replace(cfg, pp=pp, microbatches=m, group_size=None)
        try:
            fam.validate(small)
        except InputError:
            return max(rates, default=1.0)
        rates.append(_count(fam, small, m) / (pp * cfg.vpp * m))
    return max(rates[1], 2 * rates[1] - rates[0])


def _count(fam: Any, cfg: Config, m: int) -> int:
    return len(fam.build(replace(cfg, microbatches=m)).ops)


def _probe_sizes(cfg: Config, fam: Any) -> list[int]:
    """The two smallest micro-batch counts up to the asked one that the family accepts at this pp
    and vpp (its rules tie micro-batches to pp and group_size): the asked one alone where no
    smaller one fits, none where the family refuses that too."""
    m = cfg.microbatches
    unit = int(cfg.group_size or cfg.pp) or 1
    candidates = sorted({c for c in (1, 2, 4, 8, unit, 2 * unit, 3 * unit, 4 * unit) if 1 <= c < m} | {m})
    found: list[int] = []
    for c in candidates:
        try:
            fam.validate(replace(cfg, microbatches=c))
        except InputError:
            continue
        found.append(c)
        if len(found) == 2:
            break
    return found
