"""Expanding the steps of ``moe-1f1b-overlap`` into layer sub-ops on lanes, with their data facts.

Per rank the lanes are ``compute`` (Attn, MLP, WGrad), ``comm`` (EP-D, EP-C), ``send`` and
``recv`` (PP), ``d2h`` (Offload), ``h2d`` (Onload) and ``pass`` (zero-time F/I/W markers that
carry the training roles, see :mod:`pptl.schedules.moe_overlap`). Ops are appended in the order
the rank's program issues them, so each lane's order is its stream's order.

Keys name sub-ops while the schedule is built: ``(part, direction, stage, mb, layer)`` where part
is FA/FD/FM/FC (forward attention, dispatch, MLP, combine), BC/BM/BD/BA/WG (backward combine, MLP,
dispatch, attention, weight gradient), OFF/ON (offload, onload); ``(MF|MI|MW, d, s, mb)`` for the
markers and ``(SEND|RECV, flow, d, stage, mb)`` for PP transfers (stage: sender's for SEND,
receiver's for RECV, as :func:`pptl.deps.comm_key`).
"""
from __future__ import annotations

from dataclasses import dataclass, fields, replace

from pptl.config import Config
from pptl.deps import training_deps
from pptl.ir import Op, Schedule, ScheduleBuilder
from pptl.schedules._moe_meta import HeldSpan, MoEMeta

__all__ = ["Costs", "build_ops", "SUB_OPS", "LABELS"]

#: (kind, flow) of one layer's sub-ops, forward then backward; WGRAD belongs to the backward.
SUB_OPS: tuple[tuple[str, str], ...] = (
    ("ATTN", "F"), ("A2A_DISPATCH", "F"), ("MLP", "F"), ("A2A_COMBINE", "F"),
    ("A2A_COMBINE", "B"), ("MLP", "B"), ("A2A_DISPATCH", "B"), ("ATTN", "B"), ("WGRAD", "B"),
)
LABELS = {"ATTN": "Attn", "MLP": "MLP", "WGRAD": "WGrad", "A2A_DISPATCH": "EP-D", "A2A_COMBINE": "EP-C",
          "SEND": "PP", "RECV": "PP", "OFFLOAD": "Offload", "ONLOAD": "Onload"}
_PART = {  # part -> (kind, flow, lane, cost key)
    "FA": ("ATTN", "F", "compute", "attn"), "FD": ("A2A_DISPATCH", "F", "comm", "dispatch"),
    "FM": ("MLP", "F", "compute", "mlp"), "FC": ("A2A_COMBINE", "F", "comm", "combine"),
    "BC": ("A2A_COMBINE", "B", "comm", "combine"), "BM": ("MLP", "B", "compute", "mlp_b"),
    "BD": ("A2A_DISPATCH", "B", "comm", "dispatch"), "BA": ("ATTN", "B", "compute", "attn_b"),
    "WG": ("WGRAD", "B", "compute", "wgrad"), "OFF": ("OFFLOAD", "F", "d2h", "offload"),
    "ON": ("ONLOAD", "B", "h2d", "onload"),
}
_MARK = {"MF": "F", "MI": "I", "MW": "W"}


@dataclass(frozen=True)
class Costs:
    """Per-layer durations (time units) and offload size (``Config.activation`` units)."""

    attn: float = 1.0
    mlp: float = 1.0
    attn_b: float = 1.0
    mlp_b: float = 1.0
    wgrad: float = 2.0
    dispatch: float = 0.5
    combine: float = 0.5
    combine_loss: float = 0.5
    """The last stage's last forward combine, which also computes the loss and its gradient."""
    offload_bytes: float = 0.25
    offload: float = 0.25
    """Time of one layer's Offload (offload_bytes / offload_bandwidth)."""
    onload: float = 0.25

    def table(self) -> dict[str, float]:
        """Cost keys the sub-ops name (``Op.cost``); ``mark`` is the zero-time markers'."""
        out = {f.name: getattr(self, f.name) for f in fields(self) if f.name != "offload_bytes"}
        out["mark"] = 0.0
        return out


Key = tuple


_A2A_PARTS = frozenset(("FD", "FC", "BC", "BD"))
"""The sub-op parts that are all-to-all copies (one per EP member)."""


class _Builder:
    def __init__(self, cfg: Config, layers: int, ep: int, offload: bool, delay_wgrad: bool) -> None:
        self.cfg, self.layers, self.ep, self.offload = cfg, layers, ep, offload
        self.delay_wgrad = delay_wgrad
        self.last = cfg.pp * cfg.vpp - 1
        self.sb = ScheduleBuilder()
        self.at: dict[Key, int] = {}
        self.edges: list[tuple[Key, Key]] = []
        self.payload = 0.0

    # -- placement -------------------------------------------------------------------------
    def rank_of(self, stage: int, e: int) -> int:
        return (stage % self.cfg.pp) * self.ep + e

    def chunk_of(self, stage: int) -> int:
        return stage // self.cfg.pp

    # -- adding ops ------------------------------------------------------------------------
    def sub(self, part: str, rank: int, e: int, s: int, mb: int, layer: int) -> Key:
        kind, flow, lane, cost = _PART[part]
        if part == "FC" and s == self.last and layer == self.layers - 1:
            cost = "combine_loss"  # the run computes the loss and its gradient there too
        payload = self.payload if part in ("OFF", "ON") else 0.0
        key = (part, e, s, mb, layer)
        self.at[key] = self.sb.add(Op(kind=kind, rank=rank, lane=lane, stage=s, mb=mb, direction=e,
                                      chunk=self.chunk_of(s), flow=flow, sub=layer, label=LABELS[kind],
                                      payload=payload, cost=cost))
        return key

    def mark(self, part: str, rank: int, e: int, s: int, mb: int, pair: tuple[int, int, int] | None = None) -> Key:
        key = (part, e, s, mb)
        self.at[key] = self.sb.add(Op(kind=_MARK[part], rank=rank, lane="pass", stage=s, mb=mb, direction=e,
                                      chunk=self.chunk_of(s), pair=pair, cost="mark"))
        return key

    def p2p(self, kind: str, flow: str, rank: int, peer: int, e: int, s: int, mb: int) -> Key:
        key = (kind, flow, e, s, mb)
        # Own lanes, not ``comm``: PP and EP are different communicators, whose kernels NCCL runs on
        # different streams (``pptl run`` too: each PP channel has its stream), so a transfer
        # overlaps the all-to-alls rather than queueing behind them.
        lane = "send" if kind == "SEND" else "recv"
        self.at[key] = self.sb.add(Op(kind=kind, rank=rank, lane=lane, stage=s, mb=mb, direction=e,
                                      chunk=self.chunk_of(s), peer=peer, flow=flow, label="PP"))
        return key

    def need(self, u: Key, v: Key) -> None:
        self.edges.append((u, v))

    def chain(self, *keys: Key) -> None:
        for u, v in zip(keys, keys[1:]):
            self.need(u, v)

    # -- one rank --------------------------------------------------------------------------
    def rank_steps(self, r: int, e: int, steps: list) -> None:
        rank = r * self.ep + e
        p, L = self.cfg.pp, self.layers
        stage = lambda c: c * p + r  # noqa: E731 - looped placement
        bwds = [b for _, b in steps if b is not None]
        # Megatron keeps a chunk's last layer on the GPU when its own backward is the next one.
        keep_last: set[tuple[int, int]] = set()
        for i, (f, _) in enumerate(steps):
            if f is not None:
                nxt = next((b for _, b in steps[i + 1:] if b is not None), None)
                if nxt == f:
                    keep_last.add(f)
        offloaded = lambda mbc, layer: self.offload and not (layer == L - 1 and mbc in keep_last)  # noqa: E731
        n_bwd = 0
        last_compute: Key | None = None
        for f, b in steps:
            sf = stage(f[1]) if f is not None else -1
            sb = stage(b[1]) if b is not None else -1
            fm, bm = (f[0] if f else -1), (b[0] if b else -1)
            if f is not None:
                mf = self.mark("MF", rank, e, sf, fm, pair=(sb, bm, e) if b is not None else None)
                if last_compute is not None:
                    self.need(last_compute, mf)  # the forward (and its memory) starts with its step
                if sf > 0 and self.rank_of(sf - 1, e) != rank:
                    self.need(self.p2p("RECV", "F", rank, self.rank_of(sf - 1, e), e, sf, fm), mf)
                elif sf > 0:
                    self.need(("FC", e, sf - 1, fm, L - 1), mf)
                self.need(mf, ("FA", e, sf, fm, 0))
            if b is not None:
                first = ("BC", e, sb, bm, L - 1)
                if sb < self.last and self.rank_of(sb + 1, e) != rank:
                    self.need(self.p2p("RECV", "B", rank, self.rank_of(sb + 1, e), e, sb, bm), first)
                elif sb < self.last:
                    self.need(("BA", e, sb + 1, bm, 0), first)
                self.need(("FC", e, sb, bm, L - 1), first)  # its own forward (and, on the last stage, the loss)
                if n_bwd == 0 and offloaded(b, L - 1):
                    on = self.sub("ON", rank, e, sb, bm, L - 1)  # nothing earlier to prefetch it behind
                    if last_compute is not None:
                        self.need(last_compute, on)
            for i in range(L):
                j = L - 1 - i
                if f is not None:
                    fa = self.sub("FA", rank, e, sf, fm, i)
                    if i > 0:
                        self.need(("FC", e, sf, fm, i - 1), fa)
                if b is not None:
                    bc = self.sub("BC", rank, e, sb, bm, j)
                if f is not None:
                    self.chain(fa, self.sub("FD", rank, e, sf, fm, i))
                if b is not None:
                    bmlp = self.sub("BM", rank, e, sb, bm, j)
                    self.chain(bc, bmlp, self.sub("BD", rank, e, sb, bm, j))
                    if offloaded(b, j):
                        self.chain(("OFF", e, sb, bm, j), ("ON", e, sb, bm, j), bmlp)
                if f is not None:
                    fmlp = self.sub("FM", rank, e, sf, fm, i)
                    self.need(("FD", e, sf, fm, i), fmlp)
                    if offloaded(f, i):
                        self.need(fmlp, self.sub("OFF", rank, e, sf, fm, i))
                    self.chain(fmlp, self.sub("FC", rank, e, sf, fm, i))
                    last_compute = fmlp
                    if i == L - 1 and sf < self.last and self.rank_of(sf + 1, e) != rank:
                        send = self.p2p("SEND", "F", rank, self.rank_of(sf + 1, e), e, sf, fm)
                        self.chain(("FC", e, sf, fm, i), send, ("RECV", "F", e, sf + 1, fm))
                if b is not None:
                    ba = self.sub("BA", rank, e, sb, bm, j)
                    self.need(("BD", e, sb, bm, j), ba)
                    wg = self.sub("WG", rank, e, sb, bm, j)
                    self.need(ba, wg)
                    last_compute = wg
                    # Delayed wgrad: the input gradient moves on after B.attn; inline: after WGrad.
                    out = ba if self.delay_wgrad else wg
                    if j > 0:
                        self.need(out, ("BC", e, sb, bm, j - 1))
                        if offloaded(b, j - 1):  # onload one layer ahead
                            self.need(ba, self.sub("ON", rank, e, sb, bm, j - 1))
                        continue
                    self.need(out, self.mark("MI", rank, e, sb, bm))
                    if sb > 0 and self.rank_of(sb - 1, e) != rank:
                        send = self.p2p("SEND", "B", rank, self.rank_of(sb - 1, e), e, sb, bm)
                        self.chain(out, send, ("RECV", "B", e, sb - 1, bm))
                    nb = bwds[n_bwd + 1] if n_bwd + 1 < len(bwds) else None
                    if nb is not None and offloaded(nb, L - 1):  # the next backward's last layer, ahead of time
                        self.need(out, self.sub("ON", rank, e, stage(nb[1]), nb[0], L - 1))
                    self.need(wg, self.mark("MW", rank, e, sb, bm))
            if b is not None:
                n_bwd += 1

    def held(self, hidden: float) -> list[HeldSpan]:
        """What a layer in flight holds beyond its saved activations, as ``meta['held']`` spans
        ``[op a, 0 start | 1 end, op b, 0 | 1, amount]`` (:func:`pptl.simulate.memory_events_of`),
        in units of one tokens x hidden tensor of ``hidden`` activation units, as ``pptl run``'s
        layer (:mod:`pptl.run.moe_model`) keeps them:

        forward: h and the expert output m from Attn to Combine (2); the layer output y until the
        next layer, the next stage or the SEND takes it (1); a received input until its Attn (1);
        on the last stage the loss gradient until the last layer's B.attn (1). Backward: the output
        gradient dy until B.attn (1); dm from B.combine, du_e from B.mlp, dh and du_a (3) from
        B.attn, all until WGrad; dr from B.mlp to B.dispatch and dh_e from B.dispatch to B.attn.

        The saved tensors too, layer by layer, where the run makes and drops them (``meta['held_saved']``:
        the chunk-wide F/I/W markers then hold nothing): x and u_a (3) from Attn, r from Dispatch and
        u_e from MLP (1 each), all until WGrad; Offload and Onload move r and u_e off and back (an
        Onload's destination is held from the copy's start). The
        first stage's layer-0 input is made once, outside the step, and is not counted. A chunk-wide
        block from the forward's start to the backward's end over-counted a layer not yet made and
        (delayed wgrad) freed x before its WGrad had read it.
        """
        at, L, out = self.at, self.layers, []

        def span(a: Key, ea: int, b: Key, eb: int, n: float) -> None:
            if a in at and b in at:
                out.append((at[a], ea, at[b], eb, n * hidden))

        for key in list(at):
            if key[0] == "FA":
                _, e, s, mb, l = key
                span(key, 0, ("FC", e, s, mb, l), 1, 2)
                fc = ("FC", e, s, mb, l)
                if l < L - 1:
                    span(fc, 1, ("FA", e, s, mb, l + 1), 0, 1)
                elif s == self.last:
                    span(fc, 1, ("BA", e, s, mb, L - 1), 1, 1)
                elif ("SEND", "F", e, s, mb) in at:
                    span(fc, 1, ("SEND", "F", e, s, mb), 1, 1)
                else:
                    span(fc, 1, ("FA", e, s + 1, mb, 0), 0, 1)
                if l == 0:
                    span(("RECV", "F", e, s, mb), 0, key, 0, 1)
                wg = ("WG", e, s, mb, l)
                span(key, 0, wg, 1, 2 if (s == 0 and l == 0) else 3)
                span(("FD", e, s, mb, l), 0, wg, 1, 1)
                span(("FM", e, s, mb, l), 0, wg, 1, 1)
            elif key[0] == "BA":
                _, e, s, mb, j = key
                if j < L - 1:
                    span(("BA", e, s, mb, j + 1), 1, key, 1, 1)
                elif ("RECV", "B", e, s, mb) in at:
                    span(("RECV", "B", e, s, mb), 0, key, 1, 1)
                elif s < self.last:
                    span(("BA", e, s + 1, mb, 0), 1, key, 1, 1)
                if j == 0:
                    span(key, 1, ("SEND", "B", e, s, mb), 1, 1)
                wg = ("WG", e, s, mb, j)
                span(("BC", e, s, mb, j), 0, wg, 1, 1)
                span(("BM", e, s, mb, j), 0, wg, 1, 1)
                span(("BM", e, s, mb, j), 0, ("BD", e, s, mb, j), 1, 1)
                span(("BD", e, s, mb, j), 0, key, 1, 1)
                span(key, 0, wg, 1, 3)
            elif key[0] == "ON":
                # the run allocates an Onload's destination when it issues the copy, not when the
                # copy ends (where ONLOAD's own memory event puts the data back)
                out.append((at[key], 0, at[key], 1, self.payload))
        return sorted(out)

    def rendezvous(self) -> set[tuple[int, int]]:
        """Edges from what each EP member's copy of an all-to-all needs to every other member's copy.

        An all-to-all's output on one member holds tokens from all of them, so no copy ends before
        every member has issued its own; without these edges the members' pipelines are not
        connected in the DAG, and a member whose compute runs faster (``Costs.rank_scale``) would
        never wait for the slower one as it does on GPUs. The twins' comm-lane predecessors are
        left out: they are the twins of the copy's own predecessor (one order per EP group, PP042).
        """
        if self.ep < 2:
            return set()
        needs: dict[Key, list[Key]] = {}
        for u, v in self.edges:
            if v[0] in _A2A_PARTS:
                needs.setdefault(v, []).append(u)
        out: set[tuple[int, int]] = set()
        for v in needs:
            for e in range(self.ep):
                if e != v[1]:
                    out.update((self.at[u], self.at[v]) for u in needs.get((v[0], e, *v[2:]), ()))
        return out

    def schedule(self, family: str, meta: MoEMeta) -> Schedule:
        ops = self.sb.ops
        explicit = {(self.at[u], self.at[v]) for u, v in self.edges} | self.rendezvous()
        deps = sorted(set(training_deps(ops, self.last + 1)) | explicit)
        cfg = self.cfg
        return Schedule(family=family, pp=cfg.pp * self.ep, num_stages=self.last + 1, microbatches=cfg.microbatches,
                        ops=ops, lanes=self.sb.lanes, deps=deps, directions=self.ep, config=cfg, meta=meta.to_meta())


def build_ops(cfg: Config, family: str, per_rank: dict[int, list], *, layers: int, ep: int, offload: bool,
              offload_bytes: float, delay_wgrad: bool, meta: MoEMeta, hidden_bytes: float = 0.0) -> Schedule:
    """The full schedule: each pipeline rank's steps, for each EP member (direction).

    With ``delay_wgrad`` (combined 1F1B) a layer's input gradient moves on before its WGrad runs;
    without it (plain interleaved 1F1B) WGrad is part of the layer's backward.
    """
    b = _Builder(cfg, layers, ep, offload, delay_wgrad)
    b.payload = offload_bytes
    for r in range(cfg.pp):
        for e in range(ep):
            b.rank_steps(r, e, per_rank[r])
    if hidden_bytes > 0:
        meta = replace(meta, held=tuple(b.held(hidden_bytes)), held_saved=True)
    return b.schedule(family, meta)
