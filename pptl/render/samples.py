"""Small hand-made timelines in each figure style's vocabulary, and big ones for benchmarks.

They follow the op contract the families use (docs: /work/notes/contract.md in the project
notes): lanes, kinds, ``flow``, ``label``, ``pair``, ``direction``, ``peer``. Tests draw them to
pin each style without depending on a family's planner; ``bench/render_scale.py`` uses
:func:`scaled` for its 1k/10k/100k-op timelines.
"""
from __future__ import annotations

from pptl.timeline import Event, Timeline, TimelineMeta

__all__ = ["dualpipe_sample", "moe_sample", "weight_update_sample", "scaled"]


def _ev(rank: int, lane: str, kind: str, start: float, end: float, **kw) -> Event:
    bits = [f"r{rank}/{lane}/{kind}"]
    if kw.get("flow"):
        bits[0] += "_" + kw["flow"]
    if kw.get("label"):
        bits.append(kw["label"])
    if kw.get("stage", -1) >= 0:
        bits.append(f"s{kw['stage']}")
    if kw.get("mb", -1) >= 0:
        bits.append(f"mb{kw['mb']}")
    if kw.get("direction"):
        bits.append(f"d{kw['direction']}")
    # the rest of an op id's parts (pptl.op.Op.id): a timeline names each op once
    if kw.get("bucket", -1) >= 0:
        bits.append(f"bucket{kw['bucket']}")
    if kw.get("half", -1) >= 0:
        bits.append(f"half{kw['half']}")
    if kw.get("pair") is not None:
        ps, pm, pd = kw["pair"]
        bits.append(f"+B s{ps} mb{pm}" + (f" d{pd}" if pd else ""))
    return Event(op=" ".join(bits), rank=rank, lane=lane, start=start, end=end, kind=kind, **kw)


def dualpipe_sample() -> Timeline:
    """Two devices: forwards of both directions, an overlapped F&B, a split backward (I, W), a B."""
    e = [
        _ev(0, "compute", "F", 0, 1, stage=0, mb=0, chunk=0),
        _ev(1, "compute", "F", 0, 1, stage=0, mb=0, chunk=1, direction=1),
        _ev(0, "compute", "F", 1, 2, stage=1, mb=0, chunk=1, direction=1),
        _ev(1, "compute", "F", 1, 2, stage=1, mb=0, chunk=0),
        _ev(1, "compute", "I", 2, 3, stage=1, mb=0, chunk=0),
        _ev(0, "compute", "FB", 2, 5, stage=0, mb=1, chunk=0, pair=(1, 0, 1)),
        _ev(1, "compute", "W", 3, 4, stage=1, mb=0, chunk=0),
        _ev(1, "compute", "B", 5, 7, stage=0, mb=0, chunk=0, direction=1),
        _ev(0, "compute", "B", 6, 8, stage=0, mb=0, chunk=0),
        _ev(0, "send", "SEND", 1, 1.2, stage=0, mb=0, peer=1, flow="F"),
    ]
    return Timeline(e, TimelineMeta(family="dualpipe", pp=2, vpp=1, microbatches=2))


def moe_sample(pp: int = 2, steps: int = 3, vpp: int = 2) -> Timeline:
    """Per rank: forward sub-ops of mb i overlapping the backward sub-ops of mb i-1 (combined 1F1B),
    with EP all-to-alls and PP on ``comm``, offload on ``d2h`` and onload on ``h2d``."""
    ev = []
    for r in range(pp):
        for i in range(steps):
            t = r + 4.0 * i
            fwd = [("compute", "ATTN", "Attn", 0.0, 1.0), ("comm", "A2A_DISPATCH", "EP-D", 1.0, 1.5),
                   ("compute", "MLP", "MLP", 1.5, 2.5), ("comm", "A2A_COMBINE", "EP-C", 2.5, 3.0),
                   ("comm", "PP", "PP", 3.0, 3.4)]
            for lane, kind, label, a, b in fwd:
                ev.append(_ev(r, lane, kind, t + a, t + b, stage=r, mb=i, chunk=0, label=label, flow="F"))
            if i > 0:  # backward of the previous micro-batch, interleaved with this forward
                bwd = [("compute", "MLP", "MLP", 1.0, 1.5), ("compute", "ATTN", "Attn", 2.5, 3.2),
                       ("compute", "WGRAD", "WGrad", 3.2, 3.8), ("comm", "A2A_DISPATCH", "EP-D", 0.4, 0.9),
                       ("comm", "A2A_COMBINE", "EP-C", 1.6, 2.1), ("comm", "PP", "PP", 3.5, 3.9)]
                for lane, kind, label, a, b in bwd:
                    ev.append(_ev(r, lane, kind, t + a, t + b, stage=r, mb=i - 1, chunk=0, label=label, flow="B"))
                ev.append(_ev(r, "h2d", "ONLOAD", t + 0.2, t + 1.0, stage=r, mb=i - 1, label="Onload", flow="B"))
            ev.append(_ev(r, "d2h", "OFFLOAD", t + 1.0, t + 2.2, stage=r, mb=i, label="Offload", flow="F"))
    return Timeline(ev, TimelineMeta(family="moe", pp=pp, vpp=vpp, microbatches=steps))


def weight_update_sample(ranks: int = 4, buckets: int = 4) -> Timeline:
    """Bucket g: H2D on its owner g % ranks, copy into IPC half g % 2, broadcast from the owner,
    then every rank reloads it."""
    ev = []
    for g in range(buckets):
        owner = g % ranks
        t = 2.0 * g
        ev.append(_ev(owner, "h2d", "H2D", t, t + 2, bucket=g, label="H2D"))
        ev.append(_ev(owner, "ipc", "COPY", t + 2, t + 2.2, bucket=g, half=g % 2, label="IPC"))
        for r in range(ranks):
            label = "Broadcast (src)" if r == owner else "Broadcast (dst)"
            ev.append(_ev(r, "comm", "BCAST", t + 2.2, t + 4.2, bucket=g, half=g % 2, peer=owner, label=label))
            ev.append(_ev(r, "compute", "RELOAD", t + 4.2, t + 5.2, bucket=g, half=g % 2, label="Reload weights"))
    return Timeline(ev, TimelineMeta(family="weight-update", pp=ranks, vpp=1, microbatches=buckets))


def scaled(ops: int, *, ranks: int = 16) -> Timeline:
    """A 1F1B-shaped timeline of about ``ops`` compute events on ``ranks`` ranks (F=1, B=2)."""
    m = max(1, ops // (2 * ranks))
    ev = []
    for r in range(ranks):
        t = float(r)
        warm = min(ranks - 1 - r, m)
        order = [("F", i) for i in range(warm)]
        f, b = warm, 0
        while b < m:
            if f < m:
                order.append(("F", f))
                f += 1
            order.append(("B", b))
            b += 1
        for kind, mb in order:
            d = 1.0 if kind == "F" else 2.0
            ev.append(_ev(r, "compute", kind, t, t + d, stage=r, mb=mb, chunk=0))
            t += d
    return Timeline(ev, TimelineMeta(family="1f1b", pp=ranks, vpp=1, microbatches=m))
