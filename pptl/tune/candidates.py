"""The search space of ``pptl tune``: one :class:`Structure` per (family, micro-batches, vpp, group
size, synthesis setting); each is then timed under every layer split (:mod:`pptl.tune.split`).

Interleaved 1F1B takes every vpp in 2..8 that leaves each virtual stage at least one layer, and group
sizes pp, 2pp and the micro-batch count (Megatron's ``microbatch_group_size_per_vp_stage`` must lie
in pp..m; a larger group holds more micro-batches in flight for a shorter fill). ``synth`` is built per split (its order
depends on the costs), under the memory limit and, without one, with pp and 2pp-1 micro-batches in
flight (the memory of ZB-H1 and ZB-H2), plus the exact (ILP) order under the limit for the balanced
split.
"""
from __future__ import annotations

from dataclasses import dataclass

from pptl.config import Config, config_from_mapping
from pptl.schedules import v_shape
from pptl.tune.model import SPLIT_FAMILIES, TuneConfig

__all__ = ["MAX_VPP", "Structure", "structures"]

#: Largest vpp tried (Megatron configs rarely go past 8 chunks per rank; each more is a full build).
MAX_VPP = 8


@dataclass(frozen=True)
class Structure:
    family: str
    microbatches: int
    vpp: int = 1
    group: int | None = None
    inflight: int | None = None
    """synth: micro-batches a rank may hold (None: as the memory limit allows)."""
    method: str = "greedy"
    """synth: ``greedy`` or ``ilp`` (exact, HiGHS; falls back to the greedy order with a note)."""
    pattern: bool = False
    """v-half / v-min: the paper's building block as it is (``options.memory: pattern``), where the
    family's default caps it to its share of 1F1B's memory."""

    @property
    def split_backward(self) -> bool:
        return self.family in SPLIT_FAMILIES

    @property
    def label(self) -> str:
        out = self.family + (" pattern" if self.pattern else "")
        if self.vpp > 1:
            out += f" vpp={self.vpp}"
        if self.group is not None:
            out += f" G={self.group}"
        if self.family == "synth":
            out += " mem-limit" if self.inflight is None else f" inflight={self.inflight}"
            if self.method == "ilp":
                out += " ilp"
        return out + f" m={self.microbatches}"


def structures(tc: TuneConfig) -> list[Structure]:
    p, L = tc.pp, tc.model.layers
    out: list[Structure] = []
    for m in tc.microbatches:
        for fam in tc.families:
            if fam == "interleaved-1f1b":
                for v in range(2, min(L // p, MAX_VPP) + 1):
                    # pp (Megatron's default), 2pp, and m (all micro-batches in one group): the
                    # sizes between trade memory for step time along the same line.
                    groups = [g for g in dict.fromkeys((p, 2 * p, m)) if p <= g <= m]
                    # No valid group (m < pp) still yields one candidate, rejected with the family's reason.
                    for g in groups or [p]:
                        out.append(Structure(fam, m, v, g))
            elif fam in ("zbv", "dualpipev", "v-half", "v-min", "looped-bfs", "interleaved-zb"):  # two chunks per rank
                out.append(Structure(fam, m, 2))
                if fam in ("v-half", "v-min") and v_shape.cap_chunks(fam[2:], _probe(fam, p, m)) is not None:
                    # where the share caps the order, the paper's faster pattern is a candidate too
                    out.append(Structure(fam, m, 2, pattern=True))
            elif fam == "synth":
                if tc.memory_limit is not None:
                    out.append(Structure(fam, m))
                for cap in dict.fromkeys((p, 2 * p - 1)):
                    out.append(Structure(fam, m, inflight=cap))
                # The exact order, under the limit (or ZB-H1's memory without one).
                out.append(Structure(fam, m, inflight=None if tc.memory_limit is not None else p, method="ilp"))
            else:
                out.append(Structure(fam, m))
    return out


def _probe(family: str, pp: int, m: int) -> Config:
    """The bare config whose shape decides whether a V family's default order is capped."""
    return config_from_mapping({"schedule": family, "pp": pp, "microbatches": m}, source="tune")
