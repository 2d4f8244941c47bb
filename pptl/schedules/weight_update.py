"""Weight update by bucketed host-to-device copy and broadcast through a double IPC buffer.

Source: MoonshotAI/checkpoint-engine (``ParameterServer._update_per_bucket``, ``_detect_bucket_size``,
``_gen_h2d_buckets``) and the pipeline figure of its README / the Kimi K2 technical report (seed 003).
This is not a training schedule: ``pp`` is the number of ranks (GPUs), and the work items are
*buckets* of weights instead of micro-batches.

Vocabulary:

- **owner**: the rank whose pinned host memory holds a tensor (the trainer's shard).
- **bucket**: consecutive tensors of one owner packed up to ``bucket_size`` bytes (256-byte aligned);
  ``op.bucket`` is the bucket's global index. Buckets go round by round: round ``i`` broadcasts the
  ``i``-th bucket of owner 0, then owner 1, ... (owners with fewer buckets drop out).
- **H2D buffer**: one bucket of GPU memory per rank; each owner copies its next bucket into it.
- **IPC buffer**: two halves of one bucket each, shared with the serving engine; bucket ``g`` uses half
  ``g % 2`` (``op.half``).

Per bucket ``g`` (owner ``o``), the phase table:

1. ``H2D(g)`` on o's ``h2d`` lane: pinned host memory -> H2D buffer (bytes / h2d_bandwidth).
2. ``COPY(g)`` on o's ``ipc`` lane: H2D buffer -> IPC half g%2 (bytes / d2d_bandwidth).
3. ``BCAST(g)`` on every rank's ``comm`` lane, source o: the half is filled everywhere
   (bcast_latency + bytes / bcast_bandwidth).
4. ``RELOAD(g)`` on every rank's ``compute`` lane: the serving engine loads from the half
   (bytes / reload_rate) while the next bucket is broadcast into the other half.

Dependencies (``Schedule.deps``): H2D(g) -> COPY(g) -> BCAST(g) on every rank -> RELOAD(g) on that
rank; every rank's RELOAD(g-2) -> COPY(g) (the half is rewritten only after it is released); the
owner's COPY of its previous bucket -> its next H2D (one H2D buffer).

Fallback without an H2D buffer (``h2d_buffer: false``, or ``auto`` when the largest tensor exceeds
a third of the usable memory): the owner copies host memory straight into the IPC half, so H2D(g)
waits for the half like COPY does and the owners' copies no longer run ahead of the broadcasts.

Assumptions (NOTE where we deviate from checkpoint-engine's code):

- Ranks reload at the same rate, so the barrier checkpoint-engine runs after each reload changes
  nothing and is not modelled; neither is the ZeroMQ round trip.
- ``h2d_overlap: true`` (default) draws the paper's three-stage pipeline: an owner copies its next
  bucket into the H2D buffer as soon as the previous one left it. checkpoint-engine's README says
  that pipeline is not implemented yet; ``h2d_overlap: false`` models its loop, where the copies of
  round i+1 start after the last broadcast of round i (in the fallback: after the previous broadcast).
- ``microbatches`` from the config is ignored; the plan's micro-batch count is its bucket count.
- Time is in milliseconds; sizes in bytes (``"8GiB"``, ``"1.5TB"``); bandwidths in bytes per
  second (``"25GB/s"``). A cost given for a kind (``--cost RELOAD=5``) replaces its bandwidth.
"""
from __future__ import annotations

import math
import re
from dataclasses import dataclass, replace
from typing import Any, Mapping

from pptl.config import MAX_OPS, Config
from pptl.errors import InputError
from pptl.formats._quote import counted
from pptl.intervals import overlap_length
from pptl.ir import Op, Schedule, ScheduleBuilder
from pptl.schedules._common import Family, Runtime
from pptl.schedules._weight_update_meta import BucketMeta, WeightUpdateMeta

__all__ = [
    "FAMILY",
    "NAME",
    "ALIGN",
    "UpdateSpec",
    "Bucket",
    "spec_from_config",
    "spec_from_options",
    "auto_bucket_size",
    "plan_buckets",
    "validate",
    "build",
    "update_metrics",
    "runnable",
    "human_bytes",
]

NAME = "weight-update"
#: checkpoint-engine flattens every tensor to a multiple of 256 bytes.
ALIGN = 256
GiB = 1 << 30
#: checkpoint-engine sizes buffers from 90% of the free memory it measures.
USABLE_FRACTION = 0.9
KINDS = ("H2D", "COPY", "BCAST", "RELOAD")

_DEFAULTS: dict[str, Any] = {
    "model_size": "64GiB", "tensor_size": "256MiB", "bytes_per_param": 2, "bucket_size": "auto",
    "max_bucket_size": "8GiB", "free_memory": "32GiB", "h2d_bandwidth": "25GB/s",
    "d2d_bandwidth": "1000GB/s", "bcast_bandwidth": "50GB/s", "bcast_latency": 0.0,
    "reload_rate": "100GB/s", "h2d_buffer": "auto", "h2d_overlap": True, "ipc_halves": 2,
}
_SIZE_OPTIONS = ("model_size", "params", "tensors")
_KNOWN = sorted(set(_DEFAULTS) | set(_SIZE_OPTIONS))
_UNITS = {"": 1, "b": 1, "kb": 1e3, "mb": 1e6, "gb": 1e9, "tb": 1e12, "pb": 1e15,
          "kib": 2**10, "mib": 2**20, "gib": 2**30, "tib": 2**40, "pib": 2**50}
_COUNTS = {"": 1, "k": 1e3, "m": 1e6, "b": 1e9, "g": 1e9, "t": 1e12}
_NUMBER = re.compile(r"^\s*([0-9]*\.?[0-9]+(?:[eE][+-]?[0-9]+)?)\s*([A-Za-z]*)\s*(/\s*s)?\s*$")


@dataclass(frozen=True, kw_only=True)
class UpdateSpec:
    """A validated weight-update request (what ``options:`` asks for, with defaults applied)."""

    pp: int
    """Ranks taking part in the broadcast."""
    owners: tuple[tuple[int, ...], ...]
    """Per rank: the aligned sizes of the tensors it owns, in bucket order."""
    bucket_size: int
    """Bytes of one bucket = one IPC half = the H2D buffer."""
    bucket_auto: bool
    free_memory: int
    max_bucket_size: int
    h2d_buffer: bool
    h2d_overlap: bool
    ipc_halves: int
    h2d_bandwidth: float
    """Bytes per second, host to device, per rank."""
    d2d_bandwidth: float
    bcast_bandwidth: float
    bcast_latency: float
    """Milliseconds added to every broadcast."""
    reload_rate: float
    fixed: Mapping[str, float]
    """Per-kind durations (ms) that replace the bandwidth model (from the config's costs)."""

    @property
    def model_bytes(self) -> int:
        return sum(sum(t) for t in self.owners)

    @property
    def largest_tensor(self) -> int:
        return max((max(t) for t in self.owners if t), default=0)

    @property
    def buffers(self) -> int:
        """Buckets of GPU memory held: the IPC halves plus the H2D buffer if used."""
        return self.ipc_halves + (1 if self.h2d_buffer else 0)

    def duration(self, kind: str, nbytes: float) -> float:
        """Milliseconds of one op of ``kind`` moving ``nbytes``."""
        if kind in self.fixed:
            return self.fixed[kind]
        if kind == "H2D":
            return 1e3 * nbytes / self.h2d_bandwidth
        if kind == "COPY":
            return 1e3 * nbytes / self.d2d_bandwidth
        if kind == "BCAST":
            return self.bcast_latency + 1e3 * nbytes / self.bcast_bandwidth
        return 1e3 * nbytes / self.reload_rate


@dataclass(frozen=True, slots=True)
class Bucket:
    index: int
    """Global position in the broadcast order (``op.bucket``)."""
    owner: int
    round: int
    """Which of its owner's buckets this is."""
    nbytes: int
    tensors: int
    largest: int
    half: int
    """IPC half (``op.half``)."""


# --------------------------------------------------------------------------------------------
# Options


def _fail(source: str, name: str, value: Any, expected: str) -> InputError:
    return InputError(f"{source}: field 'options.{name}': got {value!r}, expected {expected} for schedule '{NAME}'")


def _scaled(value: Any, name: str, source: str, table: Mapping[str, float], what: str, rate: bool) -> float:
    if isinstance(value, bool) or value is None:
        raise _fail(source, name, value, what)
    if isinstance(value, (int, float)):
        number = float(value)
    elif isinstance(value, str):
        m = _NUMBER.match(value)
        unit = m.group(2).lower() if m else ""
        if not m or unit not in table or (m.group(3) and not rate):
            raise _fail(source, name, value, what)
        number = float(m.group(1)) * table[unit]
    else:
        raise _fail(source, name, value, what)
    if not math.isfinite(number) or number <= 0:
        raise _fail(source, name, value, what)
    return number


def _size(value: Any, name: str, source: str) -> int:
    return int(math.ceil(_scaled(value, name, source, _UNITS, "a size > 0 in bytes or with a unit, such as 8GiB", False)))


def _bandwidth(value: Any, name: str, source: str) -> float:
    return _scaled(value, name, source, _UNITS, "a bandwidth > 0 in bytes per second, such as 25GB/s", True)


def _flag(value: Any, name: str, source: str) -> bool:
    if not isinstance(value, bool):
        raise _fail(source, name, value, "true or false")
    return value


def _aligned(nbytes: int) -> int:
    return (nbytes + ALIGN - 1) // ALIGN * ALIGN


def _split(total: int, pieces: int) -> list[int]:
    base, extra = divmod(total, pieces)
    return [base + (1 if r < extra else 0) for r in range(pieces)]


def _owners(opts: Mapping[str, Any], pp: int, source: str) -> tuple[tuple[int, ...], ...]:
    given = [k for k in _SIZE_OPTIONS if k in opts]
    if len(given) > 1:
        raise InputError(f"{source}: fields 'options.{given[0]}' and 'options.{given[1]}' both give the model size; "
                         f"keep one for schedule '{NAME}'")
    if "tensors" in opts:
        raw = opts["tensors"]
        if not isinstance(raw, list) or not raw:
            raise _fail(source, "tensors", raw, "a non-empty list of sizes, or one list of sizes per rank")
        if all(isinstance(x, list) for x in raw):
            if len(raw) != pp:
                raise InputError(f"{source}: field 'options.tensors': got {counted(len(raw), 'list')}, expected one list of "
                                 f"tensor sizes per rank ({pp}) for schedule '{NAME}'")
            return tuple(tuple(_aligned(_size(x, f"tensors[{r}][{k}]", source)) for k, x in enumerate(row))
                         for r, row in enumerate(raw))
        sizes = [_aligned(_size(x, f"tensors[{k}]", source)) for k, x in enumerate(raw)]
        # A flat list is sharded like a trainer does: contiguous runs of about equal bytes.
        total, seen = sum(sizes), 0
        rows: list[list[int]] = [[] for _ in range(pp)]
        for s in sizes:
            rows[min(pp - 1, seen * pp // total)].append(s)
            seen += s
        return tuple(tuple(r) for r in rows)
    if "params" in opts:
        count = _scaled(opts["params"], "params", source, _COUNTS, "a parameter count > 0 such as 70B or 7e10", False)
        per = _scaled(opts.get("bytes_per_param", _DEFAULTS["bytes_per_param"]), "bytes_per_param", source,
                      {"": 1}, "bytes per parameter > 0, such as 2 for BF16", False)
        total = int(math.ceil(count * per))
    else:
        total = _size(opts.get("model_size", _DEFAULTS["model_size"]), "model_size", source)
    tensor = _size(opts.get("tensor_size", _DEFAULTS["tensor_size"]), "tensor_size", source)
    if total / tensor > MAX_OPS:  # refuse before listing them (bounded work on hostile input)
        raise InputError(f"{source}: field 'options.tensor_size': got {opts.get('tensor_size')!r}, which makes "
                         f"{total // tensor} tensors, more than the {MAX_OPS} a plan may hold; use a larger tensor_size "
                         f"for schedule '{NAME}'")
    rows = []
    for share in _split(total, pp):
        full, rest = divmod(share, tensor)
        row = [_aligned(tensor)] * full + ([_aligned(rest)] if rest else [])
        rows.append(tuple(row))
    return tuple(rows)


def auto_bucket_size(*, largest_tensor: int, free_memory: int, max_bucket_size: int = 8 * GiB,
                     h2d_buffer: bool | None = None, ipc_halves: int = 2) -> tuple[int, bool]:
    """checkpoint-engine's choice: ``min(max(max_bucket_size, largest tensor), usable / buffers)``.

    ``usable`` is 90% of ``free_memory``; the buffers are the IPC halves plus the H2D buffer,
    which ``h2d_buffer=None`` (auto) keeps only when the largest tensor fits in a third of usable.

    Returns:
        (bucket size in bytes, whether the H2D buffer is used).

    Example:
        >>> auto_bucket_size(largest_tensor=1 << 30, free_memory=32 << 30)
        (8589934592, True)
    """
    usable = int(free_memory * USABLE_FRACTION)
    with_buffer = usable // ((ipc_halves + 1) * ALIGN) * ALIGN
    if h2d_buffer is None:
        h2d_buffer = largest_tensor <= with_buffer
    limit = with_buffer if h2d_buffer else usable // (ipc_halves * ALIGN) * ALIGN
    return min(max(max_bucket_size, largest_tensor), limit), h2d_buffer


def spec_from_options(options: Mapping[str, Any], *, pp: int, source: str = "<options>",
                      fixed: Mapping[str, float] | None = None) -> UpdateSpec:
    """Validate a family's ``options:`` section; every error names the field and what was expected."""
    if not isinstance(options, Mapping):
        raise InputError(f"{source}: field 'options': expected a mapping for schedule '{NAME}'")
    unknown = sorted(str(k) for k in options if k not in _KNOWN)
    if unknown:
        raise InputError(f"{source}: field 'options.{unknown[0]}' is unknown for schedule '{NAME}'; "
                         f"known: {', '.join(_KNOWN)}")
    if pp < 2:
        raise InputError(f"{source}: field 'pp': got {pp}, expected at least 2 ranks (a broadcast needs a receiver) "
                         f"for schedule '{NAME}'")
    opt = {**_DEFAULTS, **options}
    owners = _owners(options, pp, source)
    if not any(owners):
        raise _fail(source, "tensors", [], "at least one tensor")
    halves = opt["ipc_halves"]
    if isinstance(halves, bool) or halves not in (1, 2):
        raise _fail(source, "ipc_halves", halves, "1 or 2")
    h2d = opt["h2d_buffer"]
    if not (h2d == "auto" or isinstance(h2d, bool)):
        raise _fail(source, "h2d_buffer", h2d, "true, false or auto")
    free = _size(opt["free_memory"], "free_memory", source)
    max_bucket = _size(opt["max_bucket_size"], "max_bucket_size", source)
    largest = max((max(t) for t in owners if t), default=0)
    h2d_choice = None if h2d == "auto" else h2d
    if opt["bucket_size"] == "auto":
        bucket, use_h2d = auto_bucket_size(largest_tensor=largest, free_memory=free, max_bucket_size=max_bucket,
                                           h2d_buffer=h2d_choice, ipc_halves=halves)
        if bucket <= 0:
            raise _fail(source, "free_memory", opt["free_memory"], f"room for {halves + 1} buckets")
    else:
        bucket = _size(opt["bucket_size"], "bucket_size", source)
        fits = (halves + 1) * bucket <= int(free * USABLE_FRACTION)
        use_h2d = fits if h2d_choice is None else h2d_choice
    latency = opt["bcast_latency"]
    if isinstance(latency, bool) or not isinstance(latency, (int, float)) or not 0 <= latency < math.inf:
        raise _fail(source, "bcast_latency", latency, "milliseconds >= 0")
    return UpdateSpec(
        pp=pp, owners=owners, bucket_size=bucket, bucket_auto=opt["bucket_size"] == "auto", free_memory=free,
        max_bucket_size=max_bucket, h2d_buffer=use_h2d, h2d_overlap=_flag(opt["h2d_overlap"], "h2d_overlap", source),
        ipc_halves=halves, h2d_bandwidth=_bandwidth(opt["h2d_bandwidth"], "h2d_bandwidth", source),
        d2d_bandwidth=_bandwidth(opt["d2d_bandwidth"], "d2d_bandwidth", source),
        bcast_bandwidth=_bandwidth(opt["bcast_bandwidth"], "bcast_bandwidth", source),
        bcast_latency=float(latency), reload_rate=_bandwidth(opt["reload_rate"], "reload_rate", source),
        fixed=dict(fixed or {}),
    )


def spec_from_config(cfg: Config) -> UpdateSpec:
    """The spec of ``cfg``; a cost set for H2D, COPY, BCAST or RELOAD fixes that kind's duration."""
    fixed = {k: v for k, v in cfg.costs.base.items() if k in KINDS}
    return spec_from_options(cfg.options, pp=cfg.pp, source=cfg.source, fixed=fixed)


def plan_buckets(spec: UpdateSpec) -> list[Bucket]:
    """Pack each owner's tensors into buckets, then order them round by round.

    A bucket closes when the next tensor would overflow it (a tensor larger than the bucket gets a
    bucket of its own, which the checker reports). Notes: O(tensors).
    """
    per_owner: list[list[tuple[int, int, int]]] = []
    for sizes in spec.owners:
        packed: list[list[int]] = []  # [bytes, tensors, largest] per bucket
        for s in sizes:
            if packed and packed[-1][0] + s <= spec.bucket_size:
                last = packed[-1]
                last[0] += s
                last[1] += 1
                last[2] = max(last[2], s)
            else:
                packed.append([s, 1, s])
        per_owner.append([(b[0], b[1], b[2]) for b in packed])
    out: list[Bucket] = []
    for rnd in range(max((len(b) for b in per_owner), default=0)):
        for owner, buckets in enumerate(per_owner):
            if rnd < len(buckets):
                nbytes, count, largest = buckets[rnd]
                g = len(out)
                out.append(Bucket(g, owner, rnd, nbytes, count, largest, g % spec.ipc_halves))
    return out


def validate(cfg: Config) -> None:
    """Raise InputError for options this family cannot plan (sizes, bandwidths, sizes of the plan)."""
    if cfg.vpp != 1:
        raise InputError(f"{cfg.source}: field 'vpp': got {cfg.vpp}, expected 1 for schedule '{NAME}' "
                         "(a weight update has no model chunks)")
    spec = spec_from_config(cfg)
    buckets = len(plan_buckets(spec))
    ops = buckets * (2 * spec.pp + 1 + (1 if spec.h2d_buffer else 0))
    if ops > MAX_OPS:
        raise InputError(f"{cfg.source}: {buckets} buckets on {spec.pp} ranks make {ops} ops, more than the {MAX_OPS} "
                         "a plan may hold; raise options.bucket_size or use weight_update.fast_update_time")


# --------------------------------------------------------------------------------------------
# The plan


def build(cfg: Config) -> Schedule:
    """The weight-update plan of ``cfg`` (see the module docstring for the phase table)."""
    validate(cfg)
    spec = spec_from_config(cfg)
    buckets = plan_buckets(spec)
    p, halves = spec.pp, spec.ipc_halves
    b = ScheduleBuilder()
    deps: list[tuple[int, int]] = []
    costs: dict[str, float] = {}

    def op(kind: str, rank: int, lane: str, bk: Bucket, label: str, half: int = -1, peer: int = -1) -> int:
        key = kind if kind in spec.fixed else f"{kind}@{bk.nbytes}"
        costs[key] = spec.duration(kind, bk.nbytes)
        return b.add(Op(kind=kind, rank=rank, lane=lane, bucket=bk.index, half=half, peer=peer, label=label,
                        payload=float(bk.nbytes), cost=key))

    h2d: list[int] = []
    copy: list[int] = []
    bcast: list[list[int]] = []
    reload: list[list[int]] = []
    last_copy: dict[int, int] = {}
    round_end: dict[int, int] = {}  # round -> its last bucket
    for bk in buckets:
        g, o = bk.index, bk.owner
        gate = bk.round > 0 and not spec.h2d_overlap
        if spec.h2d_buffer:
            h = op("H2D", o, "h2d", bk, "H2D")
            c = op("COPY", o, "ipc", bk, "IPC", half=bk.half)
            deps.append((h, c))
            if o in last_copy:
                deps.append((last_copy[o], h))  # one H2D buffer: the previous bucket must have left it
            if gate:
                deps.append((bcast[round_end[bk.round - 1]][o], h))
            last_copy[o] = c
            src = c
        else:
            h = op("H2D", o, "h2d", bk, "H2D", half=bk.half)  # straight into the IPC half
            c = -1
            if g > 0 and not spec.h2d_overlap:
                deps.append((bcast[g - 1][o], h))
            src = h
        if g >= halves:
            deps.extend((reload[g - halves][r], src) for r in range(p))  # the half is released everywhere
        row_b = [op("BCAST", r, "comm", bk, "Broadcast (src)" if r == o else "Broadcast (dst)", half=bk.half, peer=o)
                 for r in range(p)]
        row_r = [op("RELOAD", r, "compute", bk, "Reload weights", half=bk.half) for r in range(p)]
        deps.extend((src, x) for x in row_b)
        deps.extend(zip(row_b, row_r))
        h2d.append(h)
        copy.append(c)
        bcast.append(row_b)
        reload.append(row_r)
        round_end[bk.round] = g
    config = replace(cfg, costs=cfg.costs.with_defaults(costs))
    meta = {"units": "ms", **_meta(spec, buckets).to_meta()}
    return Schedule(family=NAME, pp=p, num_stages=1, microbatches=max(1, len(buckets)), ops=b.ops, lanes=b.lanes,
                    deps=deps, config=config, meta=meta)


def _meta(spec: UpdateSpec, buckets: list[Bucket]) -> WeightUpdateMeta:
    return WeightUpdateMeta(
        bucket_size=spec.bucket_size, bucket_auto=spec.bucket_auto, free_memory=spec.free_memory,
        max_bucket_size=spec.max_bucket_size, h2d_buffer=spec.h2d_buffer, h2d_overlap=spec.h2d_overlap,
        ipc_halves=spec.ipc_halves, buffers=spec.buffers, model_bytes=spec.model_bytes,
        largest_tensor=spec.largest_tensor,
        buckets=tuple(BucketMeta(owner=k.owner, round=k.round, bytes=k.nbytes, tensors=k.tensors,
                                 largest=k.largest, half=k.half) for k in buckets),
    )


# --------------------------------------------------------------------------------------------
# Metrics


def update_metrics(schedule: Schedule, sim: Any) -> dict[str, Any]:
    """Total update time, per-stage busy time, and how much H2D / copy / reload hides behind broadcasts.

    ``hidden`` is the fraction of a stage's time that overlaps the same rank's broadcasts (stages
    with no ops, such as the IPC copy without an H2D buffer, are left out);
    ``exposed`` is the update time minus the broadcast time (what the pipeline failed to hide).
    Notes: O(ops log ops).
    """
    if not any(op.kind in ("BCAST", "RELOAD") for op in schedule.ops):
        return {}
    lanes = {"H2D": "h2d", "COPY": "ipc", "BCAST": "comm", "RELOAD": "compute"}
    spans: dict[tuple[int, str], list[tuple[float, float]]] = {}
    for i, op in enumerate(schedule.ops):
        if op.kind in lanes:
            spans.setdefault((op.rank, op.kind), []).append((sim.start[i], sim.end[i]))
    for v in spans.values():
        v.sort()
    stages: dict[str, dict[str, float]] = {}
    hidden: dict[str, float] = {}
    for kind, lane in lanes.items():
        per_rank = {r: sum(e - s for s, e in v) for (r, k), v in spans.items() if k == kind}
        total = sum(per_rank.values())
        stages[lane] = {"total": total, "max_rank": max(per_rank.values(), default=0.0)}
        if kind != "BCAST":
            covered = sum(overlap_length(v, spans.get((r, "BCAST"), [])) for (r, k), v in spans.items() if k == kind)
            if total > 0:  # no COPY ops without an H2D buffer: nothing to hide
                hidden[lane] = covered / total
    bcast = stages["comm"]["max_rank"]
    meta = WeightUpdateMeta.of(schedule)
    out = {"update_time": sim.makespan, "stages": stages, "hidden": hidden, "exposed": sim.makespan - bcast,
           "buckets": len(meta.buckets or ()), "bucket_size": meta.bucket_size,
           "h2d_buffer": meta.h2d_buffer, "ipc_halves": meta.ipc_halves}
    unit = schedule.meta.get("units", "unit")
    mode = "H2D buffer" if meta.h2d_buffer else "no H2D buffer: H2D serialised per owner"
    report = [
        f"weight update: {counted(out['buckets'], 'bucket')} of at most {human_bytes(meta.bucket_size or 0)} "
        f"({mode}, {counted(meta.ipc_halves, 'IPC half', 'IPC halves')}) · update time {sim.makespan:.4g} {unit}",
        "stage busy on the busiest rank: " + " · ".join(
            f"{name} {stages[lane]['max_rank']:.4g}" for name, lane in
            (("H2D", "h2d"), ("IPC copy", "ipc"), ("broadcast", "comm"), ("reload", "compute"))) + f" {unit}",
        "hidden behind broadcast: " + " · ".join(
            f"{name} {100 * hidden[lane]:.0f}%" for name, lane in (("H2D", "h2d"), ("IPC copy", "ipc"),
                                                                  ("reload", "compute")) if lane in hidden)
        + f" · exposed {out['exposed']:.4g} {unit}",
    ]
    return {"weight_update": out, "report": report}


def human_bytes(nbytes: float) -> str:
    """``8589934592`` -> ``"8 GiB"`` (three significant digits, binary units)."""
    for unit, scale in (("TiB", 2**40), ("GiB", 2**30), ("MiB", 2**20), ("KiB", 2**10)):
        if nbytes >= scale:
            return f"{nbytes / scale:.3g} {unit}"
    return f"{nbytes:g} B"


# --------------------------------------------------------------------------------------------
# Estimates over ranks and model size

def runnable(schedule: Schedule, source: str) -> None:
    """Refuse what the weight-update executor cannot run: a plan without its buckets (a
    hand-written file), or a bucket larger than the buffers."""
    wu = WeightUpdateMeta.of(schedule)
    if wu.buckets is None or wu.bucket_size is None:
        raise InputError(f"{source}: a {NAME} plan needs meta.weight_update.buckets and bucket_size "
                         "(write it with pptl plan)")
    for g, b in enumerate(wu.buckets):
        if b.bytes > wu.bucket_size:
            raise InputError(f"{source}: bucket {g} holds {b.bytes} bytes, more than the buffers' "
                             f"bucket_size {wu.bucket_size} (a tensor larger than a bucket; run 'pptl check')")


FAMILY = Family(
    name=NAME,
    summary="weight update: H2D, broadcast through a double IPC buffer, reload (checkpoint-engine)",
    constraints="pp >= 2 ranks, vpp = 1; microbatches is ignored (buckets come from options: model_size, params "
                "or tensors, bucket_size, free_memory, bandwidths, h2d_buffer, h2d_overlap, ipc_halves)",
    validate=validate,
    build=build,
    bubble=lambda cfg: None,
    bubble_formula="n/a (not a training schedule)",
    memory=lambda cfg: None,
    memory_formula="GPU buffers: (2 IPC halves + 1 H2D) x bucket",
    source="MoonshotAI/checkpoint-engine (ps.py _update_per_bucket); Kimi K2 technical report",
    style="weight-update",
    step_unit="buckets",
    memory_label=None,
    extra_metrics=update_metrics,
    takes_options=True,
    own_costs=True,
    runtime=Runtime(executor="pptl.run.weight_update:WeightUpdateExecutor", check=runnable,
                    collectives=frozenset({"BCAST", "RELOAD"}),  # RELOAD frees a shared buffer for the next writer
                    kinds=frozenset({"H2D", "COPY", "BCAST", "RELOAD"})),
)
