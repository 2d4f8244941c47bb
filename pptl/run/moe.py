"""Run ``moe-1f1b-overlap`` plans: a pp x ep grid of ranks, real all-to-alls, real offload copies.

Ranks: ``meta['ep_groups']`` lists the EP groups (rank = r * ep + e); member e of pipeline rank r
holds the attention-like part of its stages and expert e of each layer (see
:mod:`pptl.run.moe_model`). Streams: one per plan lane, as in :mod:`pptl.run.executor` —
``compute`` (Attn, MLP, WGrad), ``comm`` (EP-D, EP-C: ``all_to_all_single`` in the EP group's own
communicator, issued with the comm stream current, which then waits for it), ``d2h`` (Offload:
GPU -> pinned host memory), ``h2d`` (Onload: back) and ``pass`` (the plan's zero-time markers,
which carry the training roles: they run nothing, keep their waits, and are recorded with zero
length). PP transfers run on their channels, as for every plan. A paired F/B step is the plan's
sub-ops issued in the plan's order, each on its stream after the events of the sub-ops it needs,
so the dispatch and combine of one micro-batch run while the other micro-batch computes.

Memory: no tensor is kept to the end of the step. A compute-made tensor an all-to-all or a copy
reads is kept until a fixed later compute op (:func:`release_points`), which makes the compute
stream wait for the reader and then lets it go, so the pool reuses it in stream order at a point
the issue order fixes; one made on another stream, or read by a compute op, is marked with
``record_stream`` instead, so the caching allocator reuses it only after that stream's work. The
memory each sub-op holds is what it holds in the plan (the offloaded expert inputs leave the GPU at
their Offload and come back at their Onload; with ``options.costs.hidden_bytes`` the plan also
counts the layer in flight, received inputs and the loss gradient, ``meta['held']``). Each step
reports ``torch.cuda.max_memory_allocated`` above the step's starting allocation and
``max_memory_reserved``.

What makes offloading save real memory, and why this way: the host is held back to within
``meta['host_lag']`` compute sub-ops of the GPU (:class:`pptl.run.hostlag.HostLag`: before issuing
compute sub-op n it waits for the event recorded after sub-op n - lag). Then a block the host
drops has been passed by the streams that still had to read it by the time memory is asked for
again, so the caching allocator hands it back out instead of mapping new segments, and the
allocated view frees and allocates when the GPU does. The alternative, a pool of device buffers
sized by the plan's peak, was not taken: it would hold its whole size for the whole step (what
offloading saves between the peaks it would keep), and the allocator already is a pool of
reusable blocks once its free events complete. Host buffers are a pool: one pinned buffer pair
per offloaded layer, made once per plan and reused by every step.

On CPU (gloo) the all-to-alls are blocking; every member of an EP group issues its ops in one
order (:func:`pptl.run.families.symmetric_issue`), so that is deadlock-free, and "host memory"
is a second CPU tensor.
"""
from __future__ import annotations

import statistics
from contextlib import nullcontext as _nullcontext
from dataclasses import dataclass
from typing import Any, Callable

import torch
import torch.distributed as dist

from pptl.errors import InputError
from pptl.run.executor import Executor
from pptl.run.family_program import cost_means, refine, symmetric_issue
from pptl.run.moe_model import (
    ATTN_WIDTH,
    EXPERT_WIDTH,
    LayerState,
    ffn_forward,
    ffn_input_grad,
    ffn_weight_grad,
    loss_grad,
    make_ffn,
    make_input,
    make_target,
    reference_step,
)
from pptl.run.program import Program, workload_of
from pptl.schedules._moe_meta import MoEMeta

__all__ = ["MoEExecutor", "copies_at_their_ends", "outputs_made_by", "release_points"]

_MiB = float(1 << 20)


@dataclass
class _StageParams:
    """The weights of one (member, stage), in the order :meth:`Executor.grads` reports them."""

    params: list[torch.Tensor]


class MoEExecutor(Executor):
    """One rank of a ``moe-1f1b-overlap`` plan."""

    message_modes = ("overlap",)  # its messages have their own ordering
    full_backward = None  # sub-ops of its own (moe_model), no B
    measures_activations = False  # its own model and steps: buffers and state outside() does not name
    primes = False  # its own model: Executor.prime runs the training model's stages

    def __init__(self, program: Program, rank: int, device: torch.device, channels: dict[Any, Any],
                 **kw: Any) -> None:
        meta = MoEMeta.of(program.schedule)
        self.layers = meta.layers_per_chunk or 1
        self.ep = meta.ep_size
        groups = [list(g) for g in (meta.ep_groups or [[r] for r in range(program.world)])]
        self.member = next(g.index(rank) for g in groups if rank in g)
        self.ep_group = _ep_group(channels, groups, rank, device) if self.ep > 1 else None
        program = refine(program, issue=symmetric_issue(program, groups))
        program = refine(program, issue={rp.rank: copies_at_their_ends(program.schedule.ops, rp.issue, rp.waits)
                                         for rp in program.ranks})
        self.markers = frozenset(i for i in program.ranks[rank].issue if program.schedule.ops[i].lane == "pass")
        self.memory: list[dict[str, float]] = []
        self.hold = None
        if device.type == "cuda":
            from pptl.run.hostlag import HostLag

            self.hold = HostLag(meta.host_lag or 0, torch.cuda.Event, timeout=float(kw.get("timeout", 60)))
        rp, ops = program.ranks[rank], program.schedule.ops
        on_compute = frozenset(i for i in rp.issue if ops[i].lane == "compute")
        self.outputs_made_by = outputs_made_by(ops, rp.issue, rp.waits, on_compute)
        self.release_at: dict[int, int] = {}
        """Side-lane op -> the compute op that frees the compute-made tensors it read (:func:`release_points`)."""
        if device.type == "cuda":
            from pptl.simulate import simulate

            sim = simulate(program.schedule)
            self.release_at = release_points(ops, rp.issue, rp.waits, on_compute, sim.start, sim.end)
        self._frees = frozenset(self.release_at.values())
        self._reading: list[torch.Tensor] = []
        self._held: dict[int, list[tuple[Any, list[torch.Tensor]]]] = {}
        self._foreign: set[int] = set()
        """Storages made on a stream other than compute (their pool is another's): freed the old way."""
        super().__init__(program, rank, device, channels, **kw)
        self.compute_ops = frozenset(i for i in self.rp.issue if self.ops[i].lane == "compute")
        self._made: dict[tuple, torch.Tensor] = {}
        if self.ep_group is not None:  # the communicator's set-up, outside any step
            t = torch.zeros(self.shape, dtype=self.dtype, device=device)
            self._a2a(t, torch.empty_like(t))
            if self.cuda:
                torch.cuda.synchronize(device)

    # ------------------------------------------------------------------------------------------
    # Model and step

    def _setup_model(self) -> None:
        w, dev, m = self.workload, self.device, self.program.schedule.microbatches
        stages = sorted({s for _d, s in self.rp.stages})
        self.attn = {(s, l): make_ffn(w, ATTN_WIDTH, dev, 1, s, l) for s in stages for l in range(self.layers)}
        self.expert = {(s, l): make_ffn(w, EXPERT_WIDTH, dev, 2, s, l, self.member)
                       for s in stages for l in range(self.layers)}
        self.chunks = {(d, s): _StageParams([p for l in range(self.layers)
                                             for f in (self.attn[(s, l)], self.expert[(s, l)]) for p in f.params])
                       for d, s in self.rp.stages}
        self.inputs = {(d, mb): make_input(w, d, mb, dev) for d, s in self.rp.stages if s == 0 for mb in range(m)}
        self.targets = {(d, mb): make_target(w, d, mb, dev)
                        for d, s in self.rp.stages if s == self.last for mb in range(m)}
        pin = dev.type == "cuda"
        rows, h = w.tokens, w.hidden
        self.host = {(op.direction, op.stage, op.mb, op.sub): [
            torch.empty(rows, h, dtype=self.dtype, pin_memory=pin),
            torch.empty(rows, EXPERT_WIDTH * h, dtype=self.dtype, pin_memory=pin)]
            for op in self.ops if op.rank == self.rank and op.kind == "OFFLOAD"}

    def step(self, k: int, *, timed: bool) -> dict[str, Any]:
        self._outs: dict[tuple, torch.Tensor] = {}
        """Layer outputs (d, s, mb, layer) until the next layer, the SEND or the loss uses them."""
        self._dx: dict[tuple, torch.Tensor] = {}
        """Input gradients of layers > 0, until the layer below takes them."""
        self._dloss: dict[tuple, torch.Tensor] = {}
        self._made = {}
        self._held = {}
        base = 0
        if self.hold is not None:
            self.hold.reset()
        if self.cuda:
            torch.cuda.reset_peak_memory_stats(self.device)
            base = torch.cuda.memory_allocated(self.device)
        rec = super().step(k, timed=timed)
        if self.cuda:
            mem = {"base_mib": base / _MiB, "peak_mib": torch.cuda.max_memory_allocated(self.device) / _MiB,
                   "reserved_peak_mib": torch.cuda.max_memory_reserved(self.device) / _MiB}
            mem["activation_peak_mib"] = mem["peak_mib"] - mem["base_mib"]
            rec["memory"] = mem
            self.memory.append(mem)
        # The markers hold no work: recorded where they are reached, with zero length.
        rec["events"] = [[i, a, a] if i in self.markers else [i, a, b] for i, a, b in rec["events"]]
        return rec

    def _zero_grads(self) -> None:
        # The sub-ops accumulate into gradient buffers made once (moe_model.ffn_weight_grad): zeroed
        # on the compute stream, where WGrad adds into them.
        with torch.no_grad(), (torch.cuda.stream(self.compute) if self.cuda else _nullcontext()):
            for c in self.chunks.values():
                for p in c.params:
                    p.grad.zero_()  # type: ignore[union-attr]

    def _before_issue(self, i: int) -> None:
        if self.hold is not None and i in self.compute_ops:
            self.hold.before()

    def report(self) -> dict[str, Any]:
        out: dict[str, Any] = {"member": self.member, "offloaded_layers": len(self.host)}
        if self.hold is not None:
            out["host_lag"] = self.hold.lag
            out["host_waits"] = self.hold.waits
        if self.memory:
            later = self.memory[1:] or self.memory  # the first step also sets up the allocator's pools
            out["memory"] = {k: max(m[k] for m in later) for k in later[0]}
        if self.cuda:
            out["allocator"] = self._allocator()
        return out

    def _allocator(self) -> dict[str, Any]:
        """What the caching allocator holds after the steps: reserved MiB per stream pool (a block
        serves only the stream it was made for; nothing is released between steps, so this is the
        plan's reserved peak split by pool), and the peaks that show fragmentation."""
        names = {s.cuda_stream: str(lane) for lane, s in self.streams.items()}
        pools: dict[str, float] = {}
        for seg in torch.cuda.memory_snapshot():
            if seg.get("device") != self.device.index:
                continue
            name = names.get(seg.get("stream"), "default" if seg.get("stream") == 0 else "other")
            pools[name] = pools.get(name, 0.0) + seg["total_size"] / _MiB
        st = torch.cuda.memory_stats(self.device)
        return {"reserved_by_stream_mib": {k: round(v, 1) for k, v in sorted(pools.items())},
                "inactive_split_peak_mib": st.get("inactive_split_bytes.all.peak", 0) / _MiB,
                "segments_peak": st.get("segment.all.peak", 0), "alloc_retries": st.get("num_alloc_retries", 0)}

    # ------------------------------------------------------------------------------------------
    # Sub-ops

    def _action(self, i: int) -> Callable[[Any], None]:
        op = self.ops[i]
        if op.lane == "pass":
            return lambda st: None
        key = (op.direction, op.stage, op.mb, op.sub)
        table: dict[tuple[str, str], Callable[[Any, tuple], None]] = {
            ("ATTN", "F"): self._attn_f, ("A2A_DISPATCH", "F"): self._dispatch_f, ("MLP", "F"): self._mlp_f,
            ("A2A_COMBINE", "F"): self._combine_f, ("A2A_COMBINE", "B"): self._combine_b, ("MLP", "B"): self._mlp_b,
            ("A2A_DISPATCH", "B"): self._dispatch_b, ("ATTN", "B"): self._attn_b, ("WGRAD", "B"): self._wgrad,
            ("OFFLOAD", "F"): self._offload, ("ONLOAD", "B"): self._onload,
        }
        if op.kind == "SEND":
            return self._send(i)
        if op.kind == "RECV":
            return self._recv(i)
        fn = table.get((op.kind, op.flow))
        if fn is None:
            raise InputError(f"op {op.id}: kind {op.kind} with flow {op.flow!r} is not a sub-op pptl run knows")
        outputs = [self.ops[j] for j in self.outputs_made_by.get(i, ())]
        if op.lane == "compute" and (self.hold is not None or outputs or i in self._frees):
            hold = self.hold

            def compute(st: Any) -> None:
                for ev, _tensors in self._held.pop(i, ()):
                    torch.cuda.current_stream().wait_event(ev)  # then the tensors go: this pool may reuse them
                fn(st, key)
                for o in outputs:  # on the compute stream, before the all-to-all's wait on this op
                    self._made[(o.kind, o.flow, o.direction, o.stage, o.mb, o.sub)] = torch.empty(
                        self.shape, dtype=self.dtype, device=self.device)
                if hold is not None:
                    hold.after()  # on the op's stream, after its work: what the host waits for lag ops on
            return compute
        if i in self.release_at:
            def side(st: Any) -> None:
                fn(st, key)
                if self._reading:  # after the op's work: what the compute stream will wait for
                    ev = torch.cuda.Event()
                    ev.record()
                    self._held.setdefault(self.release_at[i], []).append((ev, self._reading))
                    self._reading = []
            return side
        return lambda st: fn(st, key)

    def _hand_over(self, *tensors: torch.Tensor | None) -> None:
        """Tensors this side-lane op reads: kept until the compute op :func:`release_points` names
        for it has made the compute stream wait for this op (then that pool reuses them in order);
        a tensor of another stream's pool, or read by an op without such a point, is marked with
        ``record_stream`` as :meth:`_use` does."""
        if not self.cuda:
            return
        later = self.current in self.release_at
        s = torch.cuda.current_stream()
        for t in tensors:
            if t is None:
                continue
            if later and t.untyped_storage().data_ptr() not in self._foreign:
                self._reading.append(t)
            else:
                t.record_stream(s)

    def _foreign_made(self, t: torch.Tensor) -> torch.Tensor:
        if self.cuda:
            self._foreign.add(t.untyped_storage().data_ptr())
        return t

    def _use(self, *tensors: torch.Tensor | None) -> None:
        """Tensors made on another stream: the allocator must wait for this stream before reusing them."""
        if self.cuda:
            s = torch.cuda.current_stream()
            for t in tensors:
                if t is not None:
                    t.record_stream(s)

    def _output(self, kind: str, flow: str, key: tuple, like: torch.Tensor) -> torch.Tensor:
        """The tensor an all-to-all writes: made by the compute op it waits on (see
        :func:`outputs_made_by`), else here, on the comm stream."""
        made = self._made.pop((kind, flow, *key), None)
        if made is None or made.shape != like.shape:
            return self._foreign_made(torch.empty_like(like))
        # No record_stream here: its readers wait for this all-to-all's end and run on compute
        # (where its block is freed, so reuse follows them), except the loss's (_combine_f).
        return made

    def _a2a(self, t: torch.Tensor, out: torch.Tensor) -> torch.Tensor:
        if self.ep_group is None:
            out.copy_(t)  # one member: every token stays
            return out
        work = dist.all_to_all_single(out, t, group=self.ep_group, async_op=self.cuda)
        if self.cuda:
            work.wait()  # the comm stream waits; the host goes on
        return out

    def _layer_input(self, st: Any, d: int, s: int, mb: int, layer: int) -> torch.Tensor:
        if layer > 0:
            return self._outs.pop((d, s, mb, layer - 1))
        if s == 0:
            return self.inputs[(d, mb)]
        if (d, s - 1) in self.local:
            return self._outs.pop((d, s - 1, mb, self.layers - 1))
        return st.recvd.pop(("F", d, s, mb))

    def _output_grad(self, st: Any, d: int, s: int, mb: int, layer: int) -> torch.Tensor:
        if layer < self.layers - 1:
            return self._dx.pop((d, s, mb, layer + 1))
        if s == self.last:
            return self._dloss.pop((d, mb))
        if (d, s + 1) in self.local:
            return st.grads.pop((d, s + 1, mb))
        return st.recvd.pop(("B", d, s, mb))

    def _attn_f(self, st: Any, key: tuple) -> None:
        d, s, mb, layer = key
        x = self._layer_input(st, d, s, mb, layer)
        self._use(x)
        out, u = ffn_forward(self.attn[(s, layer)], x)
        st.acts[key] = LayerState(x=x, u_a=u, h=x + out)

    def _dispatch_f(self, st: Any, key: tuple) -> None:
        ls = st.acts[key]
        self._hand_over(ls.h)
        ls.r = self._a2a(ls.h, self._output("A2A_DISPATCH", "F", key, ls.h))

    def _mlp_f(self, st: Any, key: tuple) -> None:
        ls = st.acts[key]
        self._use(ls.r)
        ls.m, ls.u_e = ffn_forward(self.expert[key[1], key[3]], ls.r)

    def _combine_f(self, st: Any, key: tuple) -> None:
        d, s, mb, layer = key
        ls = st.acts[key]
        self._hand_over(ls.m, ls.h)
        y = self._a2a(ls.m, self._output("A2A_COMBINE", "F", key, ls.m))
        y.add_(ls.h)  # the residual sum in the all-to-all's output: one tensor of a layer's size, not two
        ls.h = ls.m = None
        if s == self.last and layer == self.layers - 1:
            self._hand_over(y)  # read by the loss here, on this stream, and dropped
            loss, dy = loss_grad(y, self.targets[(d, mb)], self.scale)
            st.loss += loss
            self._dloss[(d, mb)] = self._foreign_made(dy)
        else:
            self._outs[key] = y

    def _combine_b(self, st: Any, key: tuple) -> None:
        ls = st.acts[key]
        dy = self._output_grad(st, *key)
        self._hand_over(dy)
        ls.dy = dy
        ls.dm = self._a2a(dy, self._output("A2A_COMBINE", "B", key, dy))

    def _mlp_b(self, st: Any, key: tuple) -> None:
        ls = st.acts[key]
        self._use(ls.dm, ls.r, ls.u_e)
        ls.dr, ls.du_e = ffn_input_grad(self.expert[key[1], key[3]], ls.dm, ls.u_e)

    def _dispatch_b(self, st: Any, key: tuple) -> None:
        ls = st.acts[key]
        self._hand_over(ls.dr)
        ls.dh_e = self._a2a(ls.dr, self._output("A2A_DISPATCH", "B", key, ls.dr))
        ls.dr = None

    def _attn_b(self, st: Any, key: tuple) -> None:
        d, s, mb, layer = key
        ls = st.acts[key]
        self._use(ls.dh_e, ls.dy)
        dh = ls.dy + ls.dh_e
        ls.dy = ls.dh_e = None
        dxa, ls.du_a = ffn_input_grad(self.attn[(s, layer)], dh, ls.u_a)
        ls.dh = dh
        if layer > 0:
            self._dx[key] = dh + dxa
        elif s > 0:
            st.grads[(d, s, mb)] = dh + dxa

    def _wgrad(self, st: Any, key: tuple) -> None:
        ls = st.acts.pop(key)
        self._use(ls.x, ls.u_a, ls.dh, ls.du_a, ls.r, ls.u_e, ls.dm, ls.du_e)
        ffn_weight_grad(self.attn[key[1], key[3]], ls.x, ls.u_a, ls.dh, ls.du_a)
        ffn_weight_grad(self.expert[key[1], key[3]], ls.r, ls.u_e, ls.dm, ls.du_e)

    def _offload(self, st: Any, key: tuple) -> None:
        ls = st.acts[key]
        self._hand_over(ls.r, ls.u_e)
        host = self.host[key]
        host[0].copy_(ls.r, non_blocking=True)
        host[1].copy_(ls.u_e, non_blocking=True)
        ls.r = ls.u_e = None  # off the GPU once the compute stream has waited for the copy (_hand_over)

    def _onload(self, st: Any, key: tuple) -> None:
        ls = st.acts[key]
        if self.cuda:
            # The destination comes from the compute stream's pool, not the h2d stream's: the
            # allocator keeps a pool per stream, and one of its own would hold an onloaded layer's
            # worth of segments beside the blocks the Offloads gave back to the compute pool (on 2
            # H200s, more reserved with offloading than without). A block of that pool is free
            # for work ordered after what compute has been given so far, so the copy waits for
            # that; the Onload is issued right after the compute op it waits for anyway
            # (copies_at_their_ends), so this costs the copy no time.
            copy = torch.cuda.current_stream()
            with torch.cuda.stream(self.compute):
                back = [torch.empty(t.shape, dtype=t.dtype, device=self.device) for t in self.host[key]]
            copy.wait_stream(self.compute)
        else:
            back = [torch.empty(t.shape, dtype=t.dtype, device=self.device) for t in self.host[key]]
        for dst, src in zip(back, self.host[key]):
            dst.copy_(src, non_blocking=True)
        ls.r, ls.u_e = back

    # ------------------------------------------------------------------------------------------
    # PP messages: as the training executor's, but nothing is kept to the end of the step on CUDA

    def _send(self, i: int) -> Callable[[Any], None]:
        op = self.ops[i]
        group = self.channels[self.rp.channels[i]]

        def send(st: Any) -> None:
            if op.flow == "F":
                t = self._outs.pop((op.direction, op.stage, op.mb, self.layers - 1))
            else:
                t = st.grads.pop((op.direction, op.stage, op.mb))
            self._use(t)
            if self.gates is not None:
                self.gates.open(i, self._step_index, torch.cuda.current_stream())
            works = dist.batch_isend_irecv([dist.P2POp(dist.isend, t.contiguous(), op.peer, group=group)])
            if self.cuda:
                for w in works:
                    w.wait()
            else:
                st.keep.append(t)
                st.works[i] = works
        return send

    def _recv(self, i: int) -> Callable[[Any], None]:
        op = self.ops[i]
        group = self.channels[self.rp.channels[i]]

        def recv(st: Any) -> None:
            buf = self._foreign_made(torch.empty(self.shape, dtype=self.dtype, device=self.device))
            if self.gates is not None:
                self.gates.wait(i, self._step_index, torch.cuda.current_stream(), timeout=self.timeout,
                                on_timeout=lambda: self._stuck(i, "its sender never reached the matching SEND"))
            works = dist.batch_isend_irecv([dist.P2POp(dist.irecv, buf, op.peer, group=group)])
            if self.cuda:
                for w in works:
                    w.wait()
            else:
                st.works[i] = works
            st.recvd[(op.flow, op.direction, op.stage, op.mb)] = buf
        return recv

    # ------------------------------------------------------------------------------------------
    # After the run (rank 0)

    @staticmethod
    def verify(program: Program, gathered: list[dict[str, Any]], device: torch.device) -> Any:
        """``--verify``: loss and every gradient against :func:`pptl.run.moe_model.reference_step`."""
        from pptl.run.verify import TOLERANCE, VerifyResult

        s = program.schedule
        meta, w = MoEMeta.of(s), workload_of(s)
        layers, ep = meta.layers_per_chunk or 1, meta.ep_size
        loss_ref, ref = reference_step(w, num_stages=s.num_stages, ep=ep, layers=layers,
                                       microbatches=s.microbatches, device=device)
        names = ("attn w1", "attn b1", "attn w2", "attn b2", "expert w1", "expert b1", "expert w2", "expert b2")
        worst, worst_err = "-", 0.0
        for p in gathered:
            for key, grads in p["grads"].items():
                d, st = (int(x) for x in key.split(","))
                for k, (a, b) in enumerate(zip(grads, ref[(d, st)])):
                    err = float((a - b).norm() / b.norm().clamp_min(1e-30))
                    if err > worst_err or worst == "-":
                        worst, worst_err = f"member {d} stage {st} layer {k // 8} {names[k % 8]}", err
        last = min(p["steps"][-1]["step"] for p in gathered)
        loss = sum(float(x["loss"]) for p in gathered for x in p["steps"]
                   if x["step"] == last and x.get("loss") is not None)
        tol = TOLERANCE[w.dtype]
        loss_err = abs(loss - loss_ref) / max(abs(loss_ref), 1e-30)
        return VerifyResult(loss_err <= tol and worst_err <= tol, loss, loss_ref, loss_err, worst_err, worst, tol)

    @staticmethod
    def finish_timeline(schedule: Any, timeline: Any) -> Any:
        """Add the measured EP/copy exposure, memory and per-cost-key means (for calibration)."""
        from pptl.schedules._moe_metrics import EP_KINDS, exposure_of_timeline

        x = timeline.meta.extra
        group_of = MoEMeta.of(schedule).group_of()

        def a2a(op: Any) -> Any:  # the copies of one all-to-all: the twins on one EP group's members
            if op.kind not in EP_KINDS:
                return None
            return (group_of.get(op.rank, op.rank), op.kind, op.flow, op.stage, op.mb, op.sub)

        x["cost_means"] = cost_means(schedule, timeline.events, a2a, contexts=True)
        moe: dict[str, Any] = exposure_of_timeline(schedule, timeline)
        ranks = range(schedule.pp)
        reports = x.get("reports", {})
        mems = [reports[str(r)]["memory"] for r in ranks if "memory" in reports.get(str(r), {})]
        if mems:
            moe["activation_peak_mib"] = max(m["activation_peak_mib"] for m in mems)
            moe["peak_mib"] = max(m["peak_mib"] for m in mems)
            moe["reserved_peak_mib"] = max(m["reserved_peak_mib"] for m in mems)
            moe["per_rank"]["activation_peak_mib"] = [m["activation_peak_mib"] for m in mems]
        steps = x.get("step_ms") or []
        if steps:
            moe["median_step_ms"] = statistics.median(steps)
        x["moe"] = moe
        return timeline


def copies_at_their_ends(ops: Any, issue: tuple[int, ...], waits: Any) -> tuple[int, ...]:
    """``issue`` with each Offload right after the F.mlp that makes its tensors and each Onload
    right after the last op it waits for (same direction, stage, micro-batch and layer).

    Why: the caching allocator counts a tensor as freed when the host drops it and as allocated
    when the host asks for it, so the allocated peak follows the host's issue order, not the GPU's
    timing. The plan's order puts each copy at its planned start, which is late when the plan's
    copy costs are off (a copy queued behind others on its lane): the host then keeps an
    offloaded layer allocated until the late Offload. Issued at its producer, an Offload drops its
    tensors at once (``record_stream`` keeps the blocks from reuse until the copy has read them).
    An Onload takes its destination from the compute stream's pool (where the Offload's blocks went
    back), so its copy must follow the compute work issued before that allocation: issued right
    after the last op it waits for, that is the wait the copy has anyway, and the copy starts when
    the plan starts it. Each copy lane keeps its order; a copy without its producer or consumer on
    this rank stays where it was, and ``issue`` is kept whole if a moved copy would be issued
    before an op it waits for or after one that waits for it (``waits``: op -> the ops its stream
    waits on)."""
    def key(i: int) -> tuple:
        o = ops[i]
        return (o.direction, o.stage, o.mb, o.sub)

    fwd_mlp = {key(i) for i in issue if ops[i].kind == "MLP" and ops[i].flow == "F"}
    bwd_mlp = {key(i) for i in issue if ops[i].kind == "MLP" and ops[i].flow == "B"}
    off = {key(i): i for i in issue if ops[i].kind == "OFFLOAD" and key(i) in fwd_mlp}
    on = [i for i in issue if ops[i].kind == "ONLOAD" and key(i) in bwd_mlp]
    moved = set(off.values()) | set(on)
    rest = [i for i in issue if i not in moved]
    # Each Onload goes after the last of its waits among the ops not moved (its Offload, on d2h,
    # only orders the copy lanes), or right before its B.mlp if it waits on none of them.
    place = {i: k for k, i in enumerate(rest)}
    after: dict[int, list[int]] = {}
    before: dict[int, list[int]] = {}
    mlp_b = {key(i): i for i in rest if ops[i].kind == "MLP" and ops[i].flow == "B"}
    for i in on:
        ws = [place[u] for u in waits.get(i, ()) if u in place]
        if ws:
            after.setdefault(rest[max(ws)], []).append(i)
        else:
            before.setdefault(mlp_b[key(i)], []).append(i)
    out: list[int] = []
    for i in rest:
        o = ops[i]
        out += before.get(i, [])
        out.append(i)
        if o.kind == "MLP" and o.flow == "F" and key(i) in off:
            out.append(off[key(i)])
        out += after.get(i, [])
    pos = {i: k for k, i in enumerate(out)}
    for lane in ("d2h", "h2d"):
        if [i for i in out if ops[i].lane == lane] != [i for i in issue if ops[i].lane == lane]:
            return tuple(issue)
    for v, us in waits.items():
        if any(pos.get(u, -1) > pos.get(v, len(out)) for u in us if u in moved or v in moved):
            return tuple(issue)  # waiting on an event not yet recorded would not wait at all
    return tuple(out)


_A2A = frozenset({("A2A_DISPATCH", "F"), ("A2A_COMBINE", "F"), ("A2A_COMBINE", "B"), ("A2A_DISPATCH", "B")})
"""The all-to-alls: each writes one tensor of a layer's size (the forward combine adds the residual into it)."""


def outputs_made_by(ops: Any, issue: tuple[int, ...], waits: Any, compute: frozenset[int]) -> dict[int, list[int]]:
    """Compute op -> the all-to-alls whose output tensors are made right after it is issued, on the
    compute stream: each all-to-all that waits on a compute op issued before it, at the last such op.

    Why: the caching allocator keeps a pool per stream. Made on the comm stream, the all-to-alls'
    outputs (the expert inputs, the combined layer outputs, their gradients) held a pool of their
    own beside the compute pool, each reaching its high-water mark at another time (on 2 H200s,
    1848 MiB of segments for a 1104-1200 MiB activation peak), so what offloading saved showed in
    allocated memory and not in reserved. A block the compute pool hands out at that point is free
    for work ordered after what the compute stream has been given so far; the all-to-all waits for
    the op's end, which is later, so its write is safe and it waits no longer than it did. Made at
    its own issue instead, the block could still be read by compute work issued in between."""
    pos = {i: k for k, i in enumerate(issue)}
    out: dict[int, list[int]] = {}
    for j in issue:
        if (ops[j].kind, ops[j].flow) not in _A2A:
            continue
        before = [u for u in waits.get(j, ()) if u in compute and pos.get(u, len(issue)) < pos[j]]
        if before:
            out.setdefault(max(before, key=pos.__getitem__), []).append(j)
    return out


def release_points(ops: Any, issue: tuple[int, ...], waits: Any, compute: frozenset[int],
                   start: Any = None, end: Any = None) -> dict[int, int]:
    """Op of a side lane (all-to-all, copy) -> the compute op at whose issue the compute-made
    tensors it read go back to the compute stream's pool, the compute stream having waited for it.

    A comm op's tensors go back at the first compute op issued after it that waits on it or on a
    later op of its lane: the compute stream waits there anyway, so nothing waits longer. A copy
    (``d2h``, ``h2d``) no compute op waits on soon: its tensors go back at the first compute op
    issued after it that the plan starts at or after the copy's end (``start``, ``end``: the plan's
    times per op), where the compute stream is given a wait on the copy that, on plan, is already
    over; if no such op follows, at the first that waits on it as above. A reader with neither is
    left out (its tensors are freed the old way: ``record_stream``).

    Why: a block freed by the host while another stream still reads it (``record_stream``) goes
    back to the pool only when a later allocation finds that stream past it, so what the allocator
    has to map depends on how far the host runs ahead of the GPU: the same plan reserved one to
    three 48 MiB segments more or less from launch to launch (2 H200s), as much as offloading
    saves. Freed in the compute stream's order at a fixed op, the pool's state follows the issue
    order alone (the same reserved MiB in every launch). Both kinds are needed: with the copies'
    tensors freed this way and the all-to-alls' the old way, reserved was as steady but equal with
    and without offloading (4262 and 4264 MiB, three launches); with both, lower (4072 against
    4166, four launches). The price: a tensor an all-to-all read counts as allocated until its
    consumer is issued, not until the host drops it (96 MiB more allocated at the peak, with and
    without offloading alike)."""
    pos = {i: k for k, i in enumerate(issue)}
    out: dict[int, int] = {}
    waited: dict[Any, int] = {}
    """Per lane: the latest position the compute stream has waited on, in issue order."""
    pending: list[int] = []
    for i in issue:
        lane = ops[i].lane
        if i in compute:
            for u in waits.get(i, ()):
                if u in pos:
                    waited[ops[u].lane] = max(waited.get(ops[u].lane, -1), pos[u])
            for j in list(pending):
                copy = ops[j].lane in _COPY_LANES
                timed = copy and start is not None and end is not None
                if (timed and start[i] >= end[j]) or waited.get(ops[j].lane, -1) >= pos[j]:
                    out[j] = i
                    pending.remove(j)
        elif lane in _COPY_LANES or lane == "comm":
            pending.append(i)
    return out


_COPY_LANES = frozenset({"d2h", "h2d"})


def _ep_group(channels: dict[Any, Any], groups: list[list[int]], rank: int, device: torch.device) -> Any:
    """This rank's EP communicator. Every rank creates every group, in one order (torch requires it);
    groups are kept with the channels, so later plans of the same launch reuse them."""
    options = None
    if device.type == "cuda":
        options = dist.ProcessGroupNCCL.Options(is_high_priority_stream=True)  # not starved by queued compute
    mine = None
    for g in groups:
        key = ("ep", tuple(g))
        if key not in channels:
            channels[key] = dist.new_group(list(g), pg_options=options) if len(g) > 1 else None
        if rank in g:
            mine = channels[key]
    return mine
