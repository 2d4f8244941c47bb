"""Megatron-Core combined 1F1B with expert-parallel overlap and fine-grained activation offloading.

Source: Megatron-LM ``megatron/core/pipeline_parallel/combined_1f1b.py`` (``--overlap-moe-expert-parallel-comm
--delay-wgrad-compute``), ``schedule_layer_1f1b`` / ``schedule_chunk_1f1b`` in
``megatron/core/models/common/model_chunk_schedule_plan.py``, ``get_pp_rank_microbatches`` in
``schedules.py`` and ``fine_grained_activation_offload.py``; seed figures 000-002.

Phase table of pipeline rank r (interleaved 1F1B's table, :func:`interleaved.schedule_table`,
entries k = 0 .. mV-1 of (micro-batch, chunk); B_k runs entry k with chunk V-1-c):

    warmup    F_k                  k < w,   w = min(interleaved warmup(r) + 1, mV)   "VPP + 1 warmup"
    steady    (F_{w+k} | B_k)      one paired step: F of one virtual micro-batch with B of an earlier one
    cooldown  B_k                  k >= mV - w

Interleaved 1F1B's warmup(r) is Megatron-Core's 2(pp-r-1) + (V-1)G at every m (``options.order:
megatron-pre-2025`` restores its older all-forwards warmup at m = pp), and the group size obeys
Megatron-Core's group rules (:func:`interleaved.check_groups`).

The +1: on the last rank interleaved 1F1B's first steady pair is F and B of the *same* virtual
micro-batch (stage pV-1, mb 0); run as one overlapped step, its backward would need its own
forward. Megatron schedules one more warmup forward so every pair is independent. With
``extra_warmup: 0`` the family builds that broken order on purpose (``pptl check`` names it,
PP043). pp = 1 is Megatron's no-pipelining variant: F_0 alone, then pairs, then the last B.

One paired layer issues, in Megatron's order, on the compute lane and the communication lane:

    F.attn  B.combine  F.dispatch  B.mlp  B.dispatch  F.mlp  F.combine  B.attn  WGrad(B)

so each all-to-all of one micro-batch runs while the other micro-batch computes. Layer i of the
forward pairs with layer L-1-i of the backward. Weight gradients are delayed to the end of each
backward layer (``--delay-wgrad-compute``). PP transfers are received before the step and sent after
it, on the ``send`` and ``recv`` lanes: the PP and EP groups are different NCCL communicators, each
with its own stream (``pptl run`` gives each PP channel a stream), so a transfer runs beside an
all-to-all. On the ``comm`` lane it queued them behind each other, and the calibrated no-overlap plan
of the 4-GPU run came out 4% slower than the run.

Activation offloading (``offload: true``): after each layer's forward MLP, that layer's saved
inputs are copied to host on the ``d2h`` lane; in backward they come back on ``h2d`` in reverse
layer order, one layer ahead: the onload of layer l is issued when layer l+1's backward attention
ends, the onload of a chunk's last layer when the previous backward chunk on the rank ends. As in
Megatron, a chunk's last layer is not offloaded when the next backward on the rank is its own.

How the sub-ops and the generic checks fit together (the design choice): the layer sub-ops (ATTN,
MLP, WGRAD, A2A_*, OFFLOAD, ONLOAD, SEND/RECV) carry no training roles; each pass also gets
zero-time *markers* on a ``pass`` lane that carry them (:func:`pptl.deps.roles`): ``F`` where a
forward starts (its ``pair`` names the backward it overlaps in a paired step), ``I`` where the
backward's input gradient is complete (after layer 0's backward attention) and ``W`` where its
delayed weight gradients are (after layer 0's WGrad). So missing/duplicate work (PP002/PP003),
placement (PP004/PP005), local order (PP006), P2P pairing (PP008) and the memory model (F
allocates at the forward's start, I/W free at the backward's end, as for every family) keep their
meaning unchanged, and the renderer's "VPP + 1 warmup" grid groups the sub-ops themselves (the
markers sit on their own lane and take no time, so no figure row shows them). The data facts
between sub-ops are built here explicitly (``Schedule.deps``) and kept by plan files; the
deadlock check (PP007) sees any order that contradicts them. The MoE rules PP040-PP049 live in
:mod:`pptl.checks.moe`.

Expert parallelism: with ``ep`` > 1 the ranks form a pp x ep grid (rank = r * ep + e); EP member
e runs its own copy of the pipeline as direction e (its own micro-batches), and
``meta['ep_groups']`` lists the ranks of each EP group, whose all-to-alls must come in one order
(PP042). With ``ep`` = 1 one member per pipeline rank is modelled and the all-to-alls still cost
their time.

Assumptions: looped placement (stage c*pp + r on rank r); every chunk holds ``layers_per_chunk``
identical MoE layers; an all-to-all takes ``dispatch``/``combine`` (or latency + bytes /
bandwidth) whatever the other members do (``combine_loss``, default ``combine``, for the last
stage's last forward combine, which in ``pptl run`` also computes the loss and its gradient); offloaded bytes are off the GPU from the end of their
Offload to the end of their Onload; memory is counted in ``Config.activation`` units (one chunk's
activations for one micro-batch), so ``offload_bytes`` uses that unit too.

NOTE: Megatron also recomputes or keeps some groups on the GPU by fraction and balances offload
bytes across PP ranks; we offload every layer except the one about to be used.
"""
from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any, Mapping

from pptl.config import MAX_OPS, Config
from pptl.errors import InputError
from pptl.fields import strict_flag, strict_int, strict_number
from pptl.ir import Schedule
from pptl.schedules import interleaved
from pptl.schedules._common import Family, Runtime, require
from pptl.schedules._moe_layers import Costs as LayerCosts
from pptl.schedules._moe_layers import build_ops
from pptl.schedules._moe_meta import MoEMeta
from pptl.schedules._moe_metrics import moe_metrics

__all__ = ["FAMILY", "NAME", "MoEOptions", "parse_options", "validate", "build", "steps", "warmup",
           "bubble", "memory", "runnable", "COST_KEYS"]

NAME = "moe-1f1b-overlap"
_TAIL = f" for schedule '{NAME}'"

#: Keys of ``options.costs`` (per layer, in time units; bytes and bandwidths in memory units).
COST_KEYS = ("attn", "mlp", "attn_b", "mlp_b", "wgrad", "dispatch", "combine", "combine_loss", "a2a_bytes",
             "ep_bandwidth", "ep_latency", "offload_bytes", "offload_bandwidth", "onload_bandwidth", "hidden_bytes")
_OPTION_KEYS = ("layers_per_chunk", "ep", "overlap", "offload", "extra_warmup", "order", "costs", "host_lag")

Step = tuple[tuple[int, int] | None, tuple[int, int] | None]
"""(forward (mb, chunk) or None, backward (mb, chunk) or None) of one step on one rank."""


@dataclass(frozen=True)
class MoEOptions:
    """The family's ``options`` section, validated, with defaults filled in."""

    layers: int = 2
    """MoE layers per model chunk (``layers_per_chunk``)."""
    ep: int = 1
    """EP members modelled as ranks per pipeline rank (ranks = pp x ep)."""
    overlap: bool = True
    """Pair F and B in steady steps (combined 1F1B); false gives interleaved 1F1B of the same layers."""
    offload: bool = False
    """Fine-grained activation offloading on the d2h/h2d lanes."""
    extra_warmup: int = 1
    """Megatron's "+1" warmup micro-batch (0 reproduces the self-dependent pair; for study)."""
    costs: LayerCosts = LayerCosts()
    hidden_bytes: float = 0.0
    """Memory of one tokens x hidden tensor (``Config.activation`` units); > 0 adds the working
    memory a layer in flight holds (:func:`pptl.schedules._moe_layers.held_spans`)."""
    host_lag: int = 4
    """``pptl run``: compute sub-ops the host may issue ahead of the GPU (0: unbounded)."""


def _unknown(data: Mapping[str, Any], known: tuple[str, ...], where: str, cfg: Config) -> None:
    extra = sorted(str(k) for k in data if k not in known)
    if extra:
        raise InputError(f"{cfg.source}: field '{where}.{extra[0]}' is unknown for schedule '{NAME}'; "
                         f"known: {', '.join(known)}")


def parse_options(cfg: Config) -> MoEOptions:
    """Validate ``cfg.options`` (one-line errors naming ``options.<field>``) and fill in defaults.

    ``order`` is interleaved 1F1B's (:data:`interleaved.ORDERS`): ``megatron-pre-2025`` gives every
    rank all its forwards first when microbatches = pp, as Megatron-Core did before late 2024.

    Example::

        options: {layers_per_chunk: 2, ep: 2, offload: true,
                  costs: {attn: 1, mlp: 1.5, dispatch: 0.6, combine: 0.6, offload_bytes: 0.2}}
    """
    data = cfg.options or {}
    _unknown(data, _OPTION_KEYS, "options", cfg)
    layers = strict_int(data.get("layers_per_chunk", 2), "options.layers_per_chunk", cfg.source, lo=1, hi=1024,
                        tail=_TAIL)
    ep = strict_int(data.get("ep", 1), "options.ep", cfg.source, lo=1, hi=1024, tail=_TAIL)
    overlap = strict_flag(data.get("overlap", True), "options.overlap", cfg.source, tail=_TAIL)
    offload = strict_flag(data.get("offload", False), "options.offload", cfg.source, tail=_TAIL)
    extra = strict_int(data.get("extra_warmup", 1), "options.extra_warmup", cfg.source, lo=0, hi=1, tail=_TAIL)
    interleaved.order_of(cfg)
    raw = data.get("costs", {}) or {}
    if not isinstance(raw, Mapping):
        raise InputError(f"{cfg.source}: field 'options.costs': got {type(raw).__name__}, expected a mapping such "
                         f"as {{attn: 1, mlp: 1, dispatch: 0.5}} for schedule '{NAME}'")
    _unknown(raw, COST_KEYS, "options.costs", cfg)
    c = {k: strict_number(v, f"options.costs.{k}", cfg.source, positive=k.endswith("bandwidth"), tail=_TAIL)
         for k, v in raw.items()}
    attn, mlp = c.get("attn", 1.0), c.get("mlp", 1.0)
    a2a = {"dispatch": c.get("dispatch"), "combine": c.get("combine")}
    if "a2a_bytes" in c:
        if "ep_bandwidth" not in c:
            raise InputError(f"{cfg.source}: field 'options.costs.ep_bandwidth' is required with a2a_bytes "
                             f"for schedule '{NAME}'. Example: costs: {{a2a_bytes: 4, ep_bandwidth: 8}}")
        t = c.get("ep_latency", 0.0) + c["a2a_bytes"] / c["ep_bandwidth"]
        a2a = {k: (t if v is None else v) for k, v in a2a.items()}
    off_bytes = c.get("offload_bytes", cfg.activation / (2 * layers))
    if off_bytes * layers > cfg.activation + 1e-12:
        raise InputError(f"{cfg.source}: field 'options.costs.offload_bytes': got {off_bytes:g}, expected at most "
                         f"activation / layers_per_chunk = {cfg.activation / layers:g} (a layer cannot offload "
                         f"more than it holds) for schedule '{NAME}'")
    off_bw = c.get("offload_bandwidth", 1.0)
    costs = LayerCosts(
        attn=attn, mlp=mlp, attn_b=c.get("attn_b", attn), mlp_b=c.get("mlp_b", mlp),
        wgrad=c.get("wgrad", attn + mlp),
        dispatch=0.5 if a2a["dispatch"] is None else a2a["dispatch"],
        combine=0.5 if a2a["combine"] is None else a2a["combine"],
        combine_loss=c.get("combine_loss", 0.5 if a2a["combine"] is None else a2a["combine"]),
        offload_bytes=off_bytes, offload=off_bytes / off_bw, onload=off_bytes / c.get("onload_bandwidth", off_bw))
    hidden = c.get("hidden_bytes", 0.0)
    lag = strict_int(data.get("host_lag", 4), "options.host_lag", cfg.source, lo=0, hi=1 << 20, tail=_TAIL)
    return MoEOptions(layers=layers, ep=ep, overlap=overlap, offload=offload, extra_warmup=extra, costs=costs,
                      hidden_bytes=hidden, host_lag=lag)


def validate(cfg: Config) -> None:
    """The family's rules, each a one-line error naming the field."""
    opts = parse_options(cfg)
    if cfg.pp > 1:
        require(cfg.vpp >= 2, cfg, "vpp", cfg.vpp,
                "expected at least 2 when pp > 1 (Megatron overlaps EP communication across micro-batches only "
                "under interleaving; set vpp: 2, or pp: 1)")
        interleaved.check_groups(cfg)  # Megatron-Core's group rules, as interleaved 1F1B
    else:
        require(cfg.vpp == 1, cfg, "vpp", cfg.vpp, "expected 1 when pp = 1 (no pipeline to interleave)")
    # Each (stage, micro-batch) of each EP member: 9 sub-ops and 2 copies a layer, 3 markers, 4 PP ops.
    estimate = (11 * opts.layers + 7) * cfg.pp * cfg.vpp * cfg.microbatches * opts.ep
    require(estimate <= MAX_OPS, cfg, "microbatches", cfg.microbatches,
            f"which would plan about {estimate:,} ops, more than the {MAX_OPS:,} pptl accepts (reduce microbatches, "
            "options.layers_per_chunk or options.ep)")


def warmup(cfg: Config, rank: int, opts: MoEOptions) -> int:
    """Forwards before the first steady step on pipeline rank ``rank``: interleaved 1F1B's, plus
    Megatron's one extra micro-batch when steps are paired."""
    total = cfg.microbatches * cfg.vpp
    plus = opts.extra_warmup if opts.overlap else 0
    return min(interleaved.warmup_count(cfg, rank) + plus, total)


def steps(cfg: Config, rank: int, opts: MoEOptions) -> list[Step]:
    """The step sequence of pipeline rank ``rank`` (its phase table)."""
    v = cfg.vpp
    table = interleaved.schedule_table(cfg.microbatches, v, cfg.group)
    total = len(table)
    w = warmup(cfg, rank, opts)

    def fwd(k: int) -> tuple[int, int]:
        return table[k]

    def bwd(k: int) -> tuple[int, int]:
        mb, c = table[k]
        return (mb, v - 1 - c)

    out: list[Step] = []
    # Phase 1 (warmup, "VPP + 1"): F_0 .. F_{w-1}
    out += [(fwd(k), None) for k in range(w)]
    # Phase 2 (steady): (F_{w+k} | B_k) paired, or F then B without overlap
    for k in range(total - w):
        out += [(fwd(w + k), bwd(k))] if opts.overlap else [(fwd(w + k), None), (None, bwd(k))]
    # Phase 3 (cooldown): B_{total-w} .. B_{total-1}
    out += [(None, bwd(k)) for k in range(total - w, total)]
    return out


def build(cfg: Config) -> Schedule:
    validate(cfg)
    opts = parse_options(cfg)
    per_rank = {r: steps(cfg, r, opts) for r in range(cfg.pp)}
    defaults = opts.costs.table()
    if "combine_loss" not in cfg.costs.base and "combine" in cfg.costs.base:
        # costs learned from a run that did not time the loss's combine apart: the combine's
        defaults["combine_loss"] = cfg.costs.base["combine"]
    cfg = replace(cfg, costs=cfg.costs.with_defaults(defaults))
    meta = MoEMeta(
        layers_per_chunk=opts.layers, ep=opts.ep, overlap=opts.overlap, offload=opts.offload,
        extra_warmup=opts.extra_warmup if opts.overlap else 0,
        ep_groups=tuple(tuple(r * opts.ep + e for e in range(opts.ep)) for r in range(cfg.pp)),
        warmup=tuple(warmup(cfg, r, opts) for r in range(cfg.pp)),
        host_lag=opts.host_lag,
    )
    return build_ops(cfg, NAME, per_rank, layers=opts.layers, ep=opts.ep, offload=opts.offload,
                     offload_bytes=opts.costs.offload_bytes, delay_wgrad=opts.overlap, meta=meta,
                     hidden_bytes=opts.hidden_bytes)


def _chunk_costs(cfg: Config) -> tuple[float, float, float]:
    """(F, B, all-to-all) time of one chunk for one micro-batch."""
    opts = parse_options(cfg)
    c, n = opts.costs, opts.layers
    return n * (c.attn + c.mlp), n * (c.attn_b + c.mlp_b + c.wgrad), n * (c.dispatch + c.combine)


def bubble(cfg: Config) -> float:
    """Compute-lane idle per rank, with F, B one chunk's forward and backward compute, a its
    all-to-alls per pass and w one layer's WGrad.

    Combined 1F1B: (p-1)(F+B-w) when the all-to-alls are hidden: a rank sends each input gradient
    before its last layer's (delayed) WGrad, so the drain is w shorter per stage than interleaved
    1F1B's (p-1)(F+B). Without overlap, every all-to-all leaves the compute lane idle:
    (p-1)(F+B+2a) + 2a*mV.
    """
    opts = parse_options(cfg)
    f, b, a = _chunk_costs(cfg)
    if opts.overlap:
        return (cfg.pp - 1) * (f + b - opts.costs.wgrad)
    return (cfg.pp - 1) * (f + b + 2 * a) + 2 * a * cfg.microbatches * cfg.vpp


def memory(cfg: Config) -> float:
    """Peak chunk activations on rank 0 without offloading: the warmup forwards plus the one a
    steady step starts before its backward frees."""
    opts = parse_options(cfg)
    return float(min(warmup(cfg, 0, opts) + 1, cfg.microbatches * cfg.vpp)) * cfg.activation


def _assumptions(cfg: Config) -> list[str]:
    out: list[str] = []
    opts = parse_options(cfg)
    if opts.overlap and opts.costs.dispatch + opts.costs.combine > 0:
        out.append("all-to-alls take time (the formula assumes the paired micro-batch hides them all, "
                   "but the warmup and cooldown steps have no partner)")
    if cfg.costs.comm_time(0.0) > 0:
        out.append(f"PP transfers take {cfg.costs.comm_time(0.0):g} each (the formula assumes zero)")
    return out


def runnable(schedule: Schedule, source: str) -> None:
    """Refuse what the MoE executor cannot run: a plan without its EP groups and layers (a
    hand-written file), or tokens that do not split evenly over the EP members."""
    meta = MoEMeta.of(schedule)
    if meta.ep_groups is None or meta.layers_per_chunk is None:
        raise InputError(f"{source}: an {NAME} plan needs meta.ep_groups and meta.layers_per_chunk "
                         "(write it with pptl plan)")
    ep = meta.ep_size
    tokens = schedule.config.workload.tokens if schedule.config is not None else None
    if tokens is not None and tokens % ep:
        raise InputError(f"{source}: field 'workload.tokens': got {tokens}, expected a multiple of options.ep = "
                         f"{ep} (an all-to-all sends each EP member an equal block of tokens)")


FAMILY = Family(
    name=NAME,
    summary="Megatron-Core combined 1F1B: interleaved 1F1B whose steady steps overlap F of one micro-batch "
            "with B of another, EP all-to-all on a comm lane, delayed wgrad, optional activation offloading",
    constraints="pp > 1 needs vpp >= 2, pp <= group_size <= microbatches and microbatches mod group_size 0 or "
                ">= pp (Megatron-Core's group rules); pp = 1 needs vpp = 1; options: layers_per_chunk, ep, overlap, "
                "offload, extra_warmup (0|1), order (megatron | megatron-pre-2025), costs {" + ", ".join(COST_KEYS) + "}",
    validate=validate,
    build=build,
    bubble=bubble,
    bubble_formula="(p-1)(F+B-w); without overlap (p-1)(F+B+2a) + 2a*mV",
    memory=memory,
    memory_formula="min(2(p-1) + (V-1)G + 2, mV) chunk activations on rank 0 without offloading "
                   "(one more than interleaved 1F1B; as interleaved without overlap)",
    source="Megatron-LM combined_1f1b.py, schedule_layer_1f1b, get_pp_rank_microbatches, "
           "fine_grained_activation_offload.py",
    style="moe",
    aliases=("moe-overlap", "combined-1f1b", "moe"),
    assumptions=_assumptions,
    extra_metrics=moe_metrics,
    takes_options=True,
    own_costs=True,
    # an all-to-all's copies need every EP member's inputs (edges across the members)
    runtime=Runtime(executor="pptl.run.moe:MoEExecutor", check=runnable,
                    collectives=frozenset({"A2A_DISPATCH", "A2A_COMBINE"}),
                    kinds=frozenset({"ATTN", "MLP", "WGRAD", "A2A_DISPATCH", "A2A_COMBINE", "OFFLOAD", "ONLOAD"})),
)
