"""What ``pptl tune`` reads: a model description and the search's settings (``TuneConfig``).

A tune config is its own file (YAML, TOML or JSON)::

    pp: 4
    microbatches: [8, 16]        # an int, or a list to sweep
    memory_limit: 12000          # per rank, in the unit of the memory fields below (optional)
    model:
      layers: 32
      layer:     {F: 1.0, B: 2.0, I: 1.0, W: 1.0, activation: 144, weight: 512}
      embedding: {F: 2.0, B: 4.0, activation: 288, weight: 1024}
      head:      {F: 2.0, B: 4.0, activation: 288, weight: 1024}
      message_bytes: 16777216
      w_activation: 0.5           # what I leaves held until W, as a share of F's activation (0..2)
      i_working: 0.5              # share of it I allocates on top while it runs (default 0)
      work: mlp                   # or {F: {flops: .., bytes: ..}, B: .., I: .., W: ..} (see below)
    comm: {latency: 0.02, bandwidth: 2.0e7}
    families: [1f1b, zb-h1]       # optional subset (default: every training family and synth)
    workload: {hidden: 4096, tokens: 2048, dtype: bfloat16}   # what the best plan runs with pptl run
    run_blocks: {embedding: 2, head: 2}   # MLP blocks pptl run executes for the embedding and head
    device: {duty_exponent: 0.3, jitter: {F: 0.03, B: 0.03, step: 0.01}}  # optional; see below

Durations are per layer and micro-batch; ``B`` defaults to ``I + W``; ``embedding`` and ``head``
default to nothing (zero cost). ``activation`` is held per micro-batch from F to B (or split
between I and W by ``w_activation``); ``weight`` counts parameters, gradients and optimizer state.
Every validation error names the file and the field on one line (:class:`InputError`, exit 2).

``work`` says what one layer's F, B, I and W compute: GEMM FLOPs and the bytes its memory-bound
kernels move (``mlp``: ``pptl run``'s MLP block at the config's ``workload``, :func:`mlp_block_work`).
``--costs-from`` a run without a split backward needs it to derive I and W: the run's F and B fix
the time per FLOP and per byte, which then give I and W (:mod:`pptl.tune.calibrate`).

``device.duty_exponent`` (alpha) says how a GPU's speed depends on how busy it is: under a power
cap, a rank busy a share ``u`` of the step runs its compute at ``u ** alpha`` of its full-duty
duration (an idle-ish GPU keeps higher clocks). The costs above are then full-duty durations and
the timing iterates simulate -> per-rank duty -> rescale (:mod:`pptl.tune.rank`). Not given, it
is 0 (no effect), or ``--costs-from`` sets it from the run (:mod:`pptl.tune.calibrate`: the clock law
where the run recorded its clocks, each rank then no faster than at its top clock).

``device.jitter`` gives each kind's relative deviation of one op and the step's (``--costs-from``
measures them): every candidate's step then carries a p05-p95 spread (:mod:`pptl.tune.spread`).
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Mapping

from pptl.config import Workload
from pptl.errors import InputError
from pptl.fields import strict_int, strict_number
from pptl.formats.structured import read_structured
from pptl.tune.memory import MemoryModel
from pptl.tune.spread import Jitter

__all__ = ["LayerCost", "Work", "ModelDesc", "mlp_block_work", "MeasuredRun", "TuneConfig", "TRAINING_FAMILIES", "SPLIT_FAMILIES", "load_tune_config",
           "tune_config_from_mapping"]

#: Families the search covers (``synth`` is the order ``pptl tune`` builds for the model).
TRAINING_FAMILIES = ("gpipe", "1f1b", "interleaved-1f1b", "zb-h1", "zb-h2", "zbv", "dualpipe", "dualpipev", "looped-bfs",
                     "interleaved-zb", "v-half", "v-min", "synth")
_KINDS = ("F", "B", "I", "W")
#: Families whose backward is split into I and W (they need both costs).
SPLIT_FAMILIES = frozenset({"zb-h1", "zb-h2", "zbv", "interleaved-zb", "v-half", "v-min", "synth"})


@dataclass(frozen=True, kw_only=True)
class LayerCost:
    """Cost of one layer (or the embedding, or the head) for one micro-batch."""

    F: float | None = None
    """Forward time."""
    B: float | None = None
    """Full backward time (default I + W)."""
    I: float | None = None  # noqa: E741 - the paper's name
    """Input-gradient time."""
    W: float | None = None
    """Weight-gradient time."""
    activation: float = 0.0
    """Memory one micro-batch's forward keeps until its backward."""
    weight: float = 0.0
    """Memory of the layer's parameters, gradients and optimizer state."""

    def get(self, kind: str) -> float | None:
        v = getattr(self, kind)
        if v is None and kind == "B" and self.I is not None and self.W is not None:
            return self.I + self.W
        return v


_ZERO = LayerCost(F=0.0, B=0.0, I=0.0, W=0.0)


@dataclass(frozen=True)
class Work:
    """What one op kind of one layer computes: GEMM FLOPs and bytes of memory-bound kernels."""

    flops: float
    bytes: float


def mlp_block_work(hidden: int, tokens: int, elem_bytes: int) -> dict[str, Work]:
    """F, B, I and W of ``pptl run``'s block ``x + Linear(4h, h)(GELU(Linear(h, 4h)(x)))``
    (:mod:`pptl.run.model`), per micro-batch of ``tokens``.

    Every kind runs two GEMMs of ``2 t h 4h`` FLOPs (F: both Linears; I: the input gradient of
    each; W: the weight gradient of each; B: all four). Memory-bound work, in elements of
    ``t h`` and ``h^2``: F's GELU reads and writes ``4th`` each, its residual add reads ``2th`` and
    writes ``th`` (11 th); I's GELU backward reads the pre-activation and its gradient and writes
    one (12 th), plus the residual's gradient sum (3 th); W's ``addmm_`` reads the ``8h^2``
    gradient it adds to, and the bias sums read ``5th``; B through autograd does I's and W's
    element-wise work, but writes each weight gradient to a fresh tensor and then adds it into
    ``.grad`` (read, read, write: ``24h^2``) where W's ``addmm_`` only reads it (``8h^2``). That
    extra pass is why ``I + W`` is less than ``B`` (about 7% at hidden 4096, 2048 tokens, bf16).
    ``pptl run`` now runs B as I then W (:mod:`pptl.run.model`) and says so in its timeline
    (``full_backward: i-then-w``); calibrating from such a run takes B's work as I's plus W's
    (:func:`pptl.tune.calibrate.calibrate_tune`). This B stays for runs made before, which say nothing.
    """
    h, t, e = float(hidden), float(tokens), float(elem_bytes)
    gemm = 2 * t * h * 4 * h
    th, hh = t * h * e, h * h * e
    return {"F": Work(2 * gemm, 11 * th), "I": Work(2 * gemm, 15 * th), "W": Work(2 * gemm, 5 * th + 8 * hh),
            "B": Work(4 * gemm, 20 * th + 24 * hh)}


@dataclass(frozen=True, kw_only=True)
class ModelDesc:
    """A stack of ``layers`` identical layers with an embedding before and a head after."""

    layers: int
    layer: LayerCost
    embedding: LayerCost = _ZERO
    head: LayerCost = _ZERO
    message_bytes: float = 0.0
    """Bytes of one activation (or gradient) message between stages."""
    w_activation: float = 0.5
    """What I leaves held until W, as a share of the activation F keeps (zero-bubble families).
    Above 1 where I makes more than it frees: ``pptl run``'s MLP block keeps 9h per token from F to
    I and 10h from I to W (the weight gradients' inputs and output gradients; :mod:`pptl.run.footprint`)."""
    i_working: float = 0.0
    """Share of the stage's activation I allocates on top while it runs (the gradients W will
    need are made before the forward's saved tensors go)."""
    work: Mapping[str, Work] | None = None
    """Per kind, what one layer computes (derives I and W from a run with B only)."""

    def part_cost(self, part: LayerCost, kind: str) -> float | None:
        """``kind``'s duration for ``part``; an embedding's or head's missing I or W splits its B
        in the layer's I:W ratio."""
        v = part.get(kind)
        if v is None and part is not self.layer and kind in ("I", "W"):
            b, i, w = part.get("B"), self.layer.get("I"), self.layer.get("W")
            if b is not None and i is not None and w is not None and i + w > 0:
                return b * (i if kind == "I" else w) / (i + w)
        return v

    def missing(self, kinds: tuple[str, ...]) -> list[str]:
        """``model.<part>.<kind>`` for every cost of ``kinds`` no part gives."""
        out = []
        for name, part in (("layer", self.layer), ("embedding", self.embedding), ("head", self.head)):
            for k in kinds:
                if self.part_cost(part, k) is None:
                    out.append(f"model.{name}.{k}")
        return out


@dataclass(frozen=True, kw_only=True)
class MeasuredRun:
    """The plan a ``--costs-from`` run ran and the median step it measured: what the ranking's own
    candidate of that plan is held to (:func:`pptl.tune.calibrate.own_plan_note`)."""

    family: str
    microbatches: int
    vpp: int
    split: tuple[int, ...]
    """Model layers per stage, the embedding's and head's run blocks left out (as a candidate's split)."""
    step_p50: float


@dataclass(frozen=True, kw_only=True)
class TuneConfig:
    """What to search: the model, the pipeline size, the micro-batch counts, the memory limit."""

    pp: int
    microbatches: tuple[int, ...]
    model: ModelDesc
    memory_limit: float | None = None
    comm_latency: float = 0.0
    comm_bandwidth: float = math.inf
    families: tuple[str, ...] = TRAINING_FAMILIES
    workload: Workload = field(default_factory=Workload)
    run_blocks: tuple[int, int] = (0, 0)
    """MLP blocks ``pptl run`` executes for the embedding and for the head (its synthetic model
    has neither): the best plan's ``workload.stage_layers`` adds them to the first and last stage."""
    messages: str = "sync-send"
    """How the runtime sends: ``sync-send`` (``pptl run``'s CUDA default: a send's time is on its
    producer's compute lane) or ``overlap`` (sends beside compute)."""
    send_hold: float | None = None
    """Under ``sync-send``: how long a SEND holds its producer's compute stream (``--costs-from``
    measures it: the run's median SEND). The rest of the message time is the transfer the consumer
    waits for and the producer does not. None: the whole message time is on the producer."""
    ilp_time_limit: float = 2.0
    """Seconds HiGHS may spend on each exact synthesised order."""
    measured_split: tuple[int, ...] | None = None
    """Layers per stage of the run ``--costs-from`` reads (default: the even split)."""
    duty_exponent: float | None = None
    """alpha of ``device.duty_exponent``: a rank busy a share u of the step runs its compute at
    u ** alpha of the full-duty cost (None: fitted by ``--costs-from`` where the run allows, else 0)."""
    duty_floor: Mapping[int, float] = field(default_factory=dict)
    """Per rank, the least factor its compute takes relative to full duty: its time at its GPU's top clock,
    however idle the rank (``--costs-from`` a run that recorded its clocks). A rank not named has none."""
    jitter: Jitter | None = None
    """Per-op and per-step variation (``device.jitter``, or measured by ``--costs-from``): each
    candidate's step gets a spread from it (:mod:`pptl.tune.spread`); None: no spread."""
    memory: MemoryModel = field(default_factory=MemoryModel)
    """Coefficients of the per-rank peak memory (:mod:`pptl.tune.memory`): the model as given,
    or fitted by ``--costs-from`` a run that measured memory."""
    measured_run: MeasuredRun | None = None
    """What the ``--costs-from`` run ran and measured, where its record says (None: no run, or none said)."""
    source: str = "<config>"

    @property
    def alpha(self) -> float:
        """The duty exponent the timing uses (0 when neither given nor fitted)."""
        return self.duty_exponent or 0.0


def _family_name(name: Any, source: str) -> str:
    """``name`` as ``pptl schedules`` lists it (an alias such as ``interleaved`` gives its family)."""
    if name in TRAINING_FAMILIES:
        return str(name)
    from pptl.schedules import FAMILIES

    canonical = next((f.name for f in FAMILIES.values() if name == f.name or name in f.aliases), None)
    if canonical not in TRAINING_FAMILIES:
        raise InputError(f"{source}: field 'families': got {name!r}, expected one of {', '.join(TRAINING_FAMILIES)}")
    return str(canonical)


def load_tune_config(path: str | Path) -> TuneConfig:
    data = read_structured(path)
    if not isinstance(data, Mapping):
        raise InputError(f"{path}: expected a mapping with pp, microbatches and model")
    return tune_config_from_mapping(data, source=str(path))


_TOP = ("pp", "microbatches", "model", "memory_limit", "comm", "families", "workload", "measured_split",
        "run_blocks", "ilp_time_limit", "messages", "device", "name", "description")


def tune_config_from_mapping(data: Mapping[str, Any], *, source: str) -> TuneConfig:
    from pptl.config import _workload

    for k in data:
        if k not in _TOP:
            raise InputError(f"{source}: unknown field '{k}'; known fields: {', '.join(_TOP)}")
    if "model" not in data:
        raise InputError(f"{source}: field 'model' is required. Example: model: {{layers: 32, layer: {{F: 1, B: 2}}}}")
    pp = strict_int(data.get("pp"), "pp", source, lo=1, hi=4096, required=True)
    mbs = data.get("microbatches")
    if mbs is None:
        raise InputError(f"{source}: field 'microbatches' is required. Example: microbatches: [8, 16]")
    mb_list = mbs if isinstance(mbs, list) else [mbs]
    if not mb_list or len(mb_list) > 64:
        raise InputError(f"{source}: field 'microbatches': expected an integer or a list of 1..64 integers")
    micro = tuple(sorted({strict_int(m, "microbatches", source, lo=1, hi=100_000, required=True) for m in mb_list}))
    workload = _workload(data.get("workload") or {}, source)
    model = _model(data["model"], source, workload)
    if model.layers < pp:
        raise InputError(f"{source}: field 'model.layers': got {model.layers}, fewer than pp={pp} stages; "
                         f"give at least {pp} layers or a smaller pp")
    limit = data.get("memory_limit")
    comm = data.get("comm") or {}
    if not isinstance(comm, Mapping) or any(k not in ("latency", "bandwidth") for k in comm):
        raise InputError(f"{source}: field 'comm': expected a mapping with latency and bandwidth")
    fams = data.get("families")
    if fams is None:
        families = TRAINING_FAMILIES
    else:
        if not isinstance(fams, list) or not fams:
            raise InputError(f"{source}: field 'families': expected a list such as [1f1b, zb-h1]")
        families = tuple(dict.fromkeys(_family_name(f, source) for f in fams))
    split = data.get("measured_split")
    if split is not None:
        if not isinstance(split, list) or not split:
            raise InputError(f"{source}: field 'measured_split': expected a list of layers per stage, e.g. [8, 8, 8, 8]")
        split = tuple(strict_int(x, "measured_split", source, lo=1, hi=100_000, required=True) for x in split)
        if sum(split) != model.layers:
            raise InputError(f"{source}: field 'measured_split': sums to {sum(split)}, expected model.layers="
                             f"{model.layers}")
    rb = data.get("run_blocks") or {}
    if not isinstance(rb, Mapping) or any(k not in ("embedding", "head") for k in rb):
        raise InputError(f"{source}: field 'run_blocks': expected a mapping such as {{embedding: 2, head: 2}}")
    run_blocks = (strict_int(rb.get("embedding", 0), "run_blocks.embedding", source, lo=0, hi=1000, required=True),
                  strict_int(rb.get("head", 0), "run_blocks.head", source, lo=0, hi=1000, required=True))
    messages = data.get("messages", "sync-send")
    if messages not in ("sync-send", "overlap"):
        raise InputError(f"{source}: field 'messages': got {messages!r}, expected sync-send or overlap")
    device = data.get("device") or {}
    if not isinstance(device, Mapping) or any(k not in ("duty_exponent", "jitter") for k in device):
        raise InputError(f"{source}: field 'device': expected a mapping such as {{duty_exponent: 0.3, "
                         f"jitter: {{F: 0.02, B: 0.02, step: 0.01}}}}")
    jitter = _jitter(device.get("jitter"), source)
    alpha = device.get("duty_exponent")
    if alpha is not None:
        alpha = strict_number(alpha, "device.duty_exponent", source)
        if alpha > 2:
            raise InputError(f"{source}: field 'device.duty_exponent': got {alpha}, expected 0..2 "
                             f"(0: speed does not depend on how busy a GPU is)")
    return TuneConfig(
        pp=pp, microbatches=micro, model=model, messages=messages, duty_exponent=alpha, jitter=jitter,
        memory_limit=None if limit is None else strict_number(limit, "memory_limit", source, positive=True),
        comm_latency=strict_number(comm.get("latency", 0.0), "comm.latency", source),
        comm_bandwidth=strict_number(comm.get("bandwidth", math.inf), "comm.bandwidth", source, inf=True,
                                     positive=True),
        families=families, workload=workload, run_blocks=run_blocks,
        measured_split=split,
        ilp_time_limit=strict_number(data.get("ilp_time_limit", 2.0), "ilp_time_limit", source, positive=True),
        source=source)


#: Largest ``model.w_activation``: I keeps what W needs (the layer's weight-gradient inputs and its
#: output gradients), which is at most twice what F kept for the backward.
MAX_W_ACTIVATION = 2.0


def _model(data: Any, source: str, workload: Workload) -> ModelDesc:
    if not isinstance(data, Mapping):
        raise InputError(f"{source}: field 'model': expected a mapping with layers and layer")
    known = ("layers", "layer", "embedding", "head", "message_bytes", "w_activation", "i_working", "work")
    for k in data:
        if k not in known:
            raise InputError(f"{source}: unknown field 'model.{k}'; known: {', '.join(known)}")
    if "layer" not in data:
        raise InputError(f"{source}: field 'model.layer' is required. Example: layer: {{F: 1, B: 2, activation: 1}}")
    w_act = strict_number(data.get("w_activation", 0.5), "model.w_activation", source)
    if w_act > MAX_W_ACTIVATION:
        raise InputError(f"{source}: field 'model.w_activation': got {w_act}, expected 0..{MAX_W_ACTIVATION:g} "
                         f"(what I leaves held until W, as a share of F's activation)")
    return ModelDesc(
        layers=strict_int(data.get("layers"), "model.layers", source, lo=1, hi=100_000, required=True),
        layer=_layer(data["layer"], "model.layer", source, zero=False),
        embedding=_layer(data.get("embedding"), "model.embedding", source, zero=True),
        head=_layer(data.get("head"), "model.head", source, zero=True),
        message_bytes=strict_number(data.get("message_bytes", 0.0), "model.message_bytes", source),
        w_activation=w_act, i_working=strict_number(data.get("i_working", 0.0), "model.i_working", source),
        work=_work(data.get("work"), source, workload))


def _work(data: Any, source: str, workload: Workload) -> dict[str, Work] | None:
    if data is None:
        return None
    if data == "mlp":
        esz = {"float32": 4, "bfloat16": 2, "float16": 2}.get(workload.dtype, 4)
        return mlp_block_work(workload.hidden, workload.tokens, esz)
    example = "work: mlp, or work: {F: {flops: 5.5e11, bytes: 1.8e8}, B: ..., I: ..., W: ...}"
    if not isinstance(data, Mapping) or set(data) != set(_KINDS):
        raise InputError(f"{source}: field 'model.work': expected {example}")
    out = {}
    for k in _KINDS:
        v = data[k]
        if not isinstance(v, Mapping) or set(v) != {"flops", "bytes"}:
            raise InputError(f"{source}: field 'model.work.{k}': expected a mapping of flops and bytes; {example}")
        out[k] = Work(strict_number(v["flops"], f"model.work.{k}.flops", source),
                      strict_number(v["bytes"], f"model.work.{k}.bytes", source))
    return out


def _jitter(data: Any, source: str) -> Jitter | None:
    if data is None:
        return None
    known = _KINDS + ("FB", "step")
    if not isinstance(data, Mapping) or not data or any(k not in known for k in data):
        raise InputError(f"{source}: field 'device.jitter': expected a mapping of relative deviations such as "
                         f"{{F: 0.02, B: 0.02, step: 0.01}} (keys: {', '.join(known)})")
    vals = {k: strict_number(v, f"device.jitter.{k}", source) for k, v in data.items()}
    for k, v in vals.items():
        if v > 1:
            raise InputError(f"{source}: field 'device.jitter.{k}': got {v}, expected 0..1 (a relative deviation)")
    step = vals.pop("step", 0.0)
    return Jitter(vals, step) if vals or step else None


def _layer(data: Any, name: str, source: str, *, zero: bool) -> LayerCost:
    if data is None:
        return _ZERO
    if not isinstance(data, Mapping):
        raise InputError(f"{source}: field '{name}': expected a mapping such as {{F: 1, B: 2, activation: 1}}")
    known = _KINDS + ("activation", "weight")
    for k in data:
        if k not in known:
            raise InputError(f"{source}: unknown field '{name}.{k}'; known: {', '.join(known)}")
    # The embedding and head cost nothing unless given; their I and W, when not given, split B
    # in the layer's I:W ratio (see ModelDesc.part_cost).
    vals = {k: (strict_number(data[k], f"{name}.{k}", source) if k in data
                else (0.0 if zero and k == "F" else None)) for k in _KINDS}
    if zero and vals["B"] is None and (vals["I"] is None or vals["W"] is None):
        vals["B"] = 0.0
    return LayerCost(**vals, activation=strict_number(data.get("activation", 0.0), f"{name}.activation", source),
                     weight=strict_number(data.get("weight", 0.0), f"{name}.weight", source))
