"""Run one rank's program for one step: real forward/backward, P2P, and a timestamp pair per op.

On CUDA every lane is a stream. An op first makes its stream wait on the end events of the ops it
needs from other lanes of this rank (never a global synchronize), then records its start event,
runs, and records its end event. SEND/RECV are ``batch_isend_irecv`` calls on the channel's own
two-rank process group (see :mod:`pptl.run.program`), so the i-th SEND of a channel always meets
its i-th RECV (NCCL matches in order); which stream each starts from is the run's message mode
(below). The host enqueues a whole step without blocking, then polls the events; a step with no progress for
the timeout raises :class:`OpFailure` naming the op the GPU is stuck at.

On CPU (gloo) compute runs on the host; SEND/RECV are posted asynchronously and a consumer waits
for its RECV; times come from the host clock.

Every tensor that crosses streams or ranks stays referenced until the step has finished, so the
caching allocator can never hand its memory to another stream while a transfer still uses it.
"""
from __future__ import annotations

import os
import signal
import time
from contextlib import nullcontext as _nullcontext
from dataclasses import dataclass, field
from typing import Any, Callable, Sequence

import torch
import torch.distributed as dist

from pptl.config import Workload
from pptl.run.model import (
    DTYPES,
    Activation,
    backward_full,
    backward_input,
    backward_weight,
    forward,
    make_chunk,
    make_input,
    make_target,
    zero_grad_buffers,
)
from pptl.run.options import MESSAGE_MODES
from pptl.run.program import Program, issued_for, stream_keys, workload_of

__all__ = ["OpFailure", "Executor", "Fault"]


class OpFailure(Exception):
    """A step failed at one op (the message names it)."""

    def __init__(self, rank: int, op_id: str, step: int, cause: str) -> None:
        super().__init__(f"rank {rank} failed at op {op_id} (step {step}): {cause}")
        self.rank, self.op_id, self.step, self.cause = rank, op_id, step, cause


@dataclass(frozen=True)
class Fault:
    """A deliberate failure for tests: ``PPTL_RUN_FAULT=raise|kill|hang:RANK:OP ID``, or
    ``swap:RANK:A|B`` (RANK issues SEND A right after SEND B: :mod:`pptl.run.swap`)."""

    kind: str
    rank: int
    op: str

    @staticmethod
    def from_env() -> "Fault | None":
        raw = os.environ.get("PPTL_RUN_FAULT", "")
        if not raw:
            return None
        kind, rank, op = raw.split(":", 2)
        return Fault(kind, int(rank), op)

    def fire(self) -> None:
        if self.kind == "kill":
            os.kill(os.getpid(), signal.SIGKILL)
        if self.kind == "hang":
            time.sleep(10 ** 6)
        raise RuntimeError("injected fault (PPTL_RUN_FAULT)")


@dataclass
class _Step:
    """What one step keeps between ops."""

    acts: dict[tuple[int, int, int], Activation] = field(default_factory=dict)
    grads: dict[tuple[int, int, int], torch.Tensor] = field(default_factory=dict)
    """Input gradient of (d, s, mb), waiting for stage s-1 (local) or its SEND."""
    recvd: dict[tuple[str, int, int, int], torch.Tensor] = field(default_factory=dict)
    works: dict[int, list[Any]] = field(default_factory=dict)
    """CPU: op index -> pending gloo works."""
    keep: list[torch.Tensor] = field(default_factory=list)
    loss: torch.Tensor | None = None
    times: dict[int, list[float | None]] = field(default_factory=dict)
    """CPU: op index -> [start, end] host times (end None while pending)."""
    started: list[int] = field(default_factory=list)
    """Op indices in the order the host started them (CUDA: enqueued them on their streams)."""
    timed: bool = False
    ended: list[int] = field(default_factory=list)
    """CUDA, timed steps: ops whose end event this step recorded (an event not recorded again
    still holds the previous step's time, and one never recorded reads as complete)."""
    i_end: dict[int, float] = field(default_factory=dict)
    """B's op index -> where its I part ended: CPU, the host time (perf_counter, s); CUDA, 0 (the
    end is the op's ``mid_ev``, recorded on its stream; the key says it was recorded this step)."""


# How a CUDA rank runs its messages (``pptl run --messages``, :data:`MESSAGE_MODES`). What decides
# between them: an NCCL kernel launched while a GEMM holds every SM starts only when that GEMM
# ends (0.3 ms on the anchor workload, per message), and a receive that waits on the GPU spins on
# SMs that the rank's GEMMs then lack.
#
# - ``sync-send`` (default): a SEND runs on the compute stream right after its producer, and the
#   next compute op waits for it, so the transfer never queues behind a GEMM. A RECV runs on its
#   channel's stream where the plan issues it, started once its sender is ready (gates,
#   :mod:`pptl.run.gates`), so it overlaps compute without spinning long.
# - ``overlap``: SENDs too run on their channel's stream, beside compute (the next GEMM can delay
#   them).
# - ``inline``: what torch.distributed.pipelining does: a SEND starts from the compute stream right
#   after its producer (compute does not wait for it); a RECV starts from the compute stream right
#   before its consumer, which waits for it. A receive spins only while its rank waits for it
#   anyway, and no receive overlaps compute.


class Executor:
    """One rank's program, ready to run steps."""

    #: The message modes this executor runs (families with messages of their own keep ``overlap``).
    message_modes: tuple[str, ...] = MESSAGE_MODES
    #: A :class:`pptl.run.slow.Stretch` on the rank ``pptl run --slow-rank`` names (set by the worker).
    stretch: Any = None
    #: A :class:`pptl.run.memory.Probe` for the step the worker measures activations on (CUDA).
    probe: Any = None
    #: How a full backward (B) runs, written to the measured timeline (``meta.extra.full_backward``) so
    #: that what calibrates from it (``pptl tune --costs-from``) knows: "i-then-w" (each weight gradient
    #: accumulated by its GEMM; runs before it went through autograd and say nothing); None: no B.
    full_backward: str | None = "i-then-w"
    #: Whether :meth:`outside` names every tensor this executor holds beside the activations, so the
    #: worker's activation-measuring step applies (:mod:`pptl.run.memory`): true for the training
    #: model and steps of this class; a family with a model or steps of its own declares false.
    measures_activations: bool = True
    #: Whether :meth:`prime` runs one step of this rank's ops, its messages left out, before the first
    #: step: true for the training model of this class; a family with a model of its own declares false.
    primes: bool = True

    def __init__(self, program: Program, rank: int, device: torch.device, channels: dict[Any, Any], *,
                 timeout: float, post: Callable[[int, int], None] | None = None, fault: Fault | None = None,
                 gates: Any = None, messages: str = "overlap") -> None:
        if messages not in self.message_modes:
            raise ValueError(f"message mode {messages!r}: this executor runs {', '.join(self.message_modes)}")
        self.messages = messages  # on CPU only the issue order changes (gloo has no streams)
        program = issued_for(program, self.messages)
        if fault is not None and fault.kind == "swap":  # every rank applies it: peers see the same program
            from pptl.run.swap import parse_swap, swap_sends

            program = swap_sends(program, *parse_swap(fault.rank, fault.op))
            fault = None
        s = program.schedule
        self.program, self.rank, self.device = program, rank, device
        self.rp = program.ranks[rank]
        self.ops = s.ops
        self.ids = [op.id for op in s.ops]
        self.cuda = device.type == "cuda"
        self.workload: Workload = workload_of(s)
        self.last = s.num_stages - 1
        self.scale = 1.0 / (s.microbatches * s.directions)
        self.channels = channels
        self.gates = gates
        """A :class:`pptl.run.gates.Gates` (CUDA on one node, not ``inline``) or None."""
        self.timeout = timeout
        self.post = post or (lambda step, op: None)
        self.fault = fault if fault is not None and fault.rank == rank else None
        self._fault_index = next((i for i in self.rp.issue if self.ids[i] == self.fault.op), None) if self.fault else None
        self.local = {k for k, r in program.placement.items() if r == rank}
        self.shape = (self.workload.tokens, self.workload.hidden)
        self.dtype = DTYPES[self.workload.dtype]
        # A plan without backwards (inference) builds no autograd graph: a forward's output is all
        # it leaves, and its consumer (the next stage here, or the SEND) takes it.
        self.forward_only = not any(op.kind in _BACKWARD_KINDS for op in self.ops)
        self._setup_model()
        self._setup_storages = {t.untyped_storage().data_ptr() for t in self._setup_tensors()}
        self.actions = {i: self._action(i) for i in self.rp.issue}
        if self.cuda:
            keys = stream_keys(program, rank, self.messages)
            lanes = {self.ops[i].lane for i in self.rp.issue if i not in self.rp.channels} | {"compute"}
            self.streams: dict[Any, torch.cuda.Stream] = {lane: torch.cuda.Stream(device) for lane in sorted(lanes)}
            self.streams.update({ch: torch.cuda.Stream(device) for ch in sorted(set(self.rp.channels.values()))})
            self.compute = self.streams["compute"]
            self.stream_of = {i: self.streams[keys[i]] for i in self.rp.issue}
            self.start_ev = {i: torch.cuda.Event(enable_timing=True) for i in self.rp.issue}
            self.end_ev = {i: torch.cuda.Event(enable_timing=True) for i in self.rp.issue}
            self.sync_ev = {i: torch.cuda.Event() for i in self.rp.waited}
            # Where a B's I part ends (B runs I then W): the step record's ``b_input``.
            self.mid_ev = {i: torch.cuda.Event(enable_timing=True) for i in self.rp.issue if self.ops[i].kind == "B"}
            self.lane_done = {lane: torch.cuda.Event(enable_timing=True) for lane in self.streams}
            self.anchor = torch.cuda.Event(enable_timing=True)
            self.calib = torch.cuda.Event(enable_timing=True)
            self.flag = torch.zeros(1, device=device)
            torch.cuda.synchronize(device)  # weights and inputs were made on the default stream
        self.current = -1
        self._anchor: tuple[float, float] | None = None

    def _setup_model(self) -> None:
        """Weights, inputs and targets of this rank (a family's executor builds its own model)."""
        m, device = self.program.schedule.microbatches, self.device
        self.chunks = {(d, st): make_chunk(self.workload, st, device) for d, st in self.rp.stages}
        self.inputs = {(d, mb): make_input(self.workload, d, mb, device)
                       for d, st in self.rp.stages if st == 0 for mb in range(m)}
        self.targets = {(d, mb): make_target(self.workload, d, mb, device)
                        for d, st in self.rp.stages if st == self.last for mb in range(m)}
        # Every forward with a backward keeps its Linears: I and W need them, and B runs as I then W
        # (pptl.run.model: each weight gradient accumulated by its GEMM).
        self.keep_linears = not self.forward_only

    def prime(self) -> None:
        """Run one step of this rank's ops with its messages left out (a SEND keeps its tensor, a RECV
        makes a zero buffer on its stream), then drop what it made, gradients included.

        The first use of a kernel, and an allocation the caching allocator has no cached memory for,
        can wait for the whole GPU (CUDA loads modules lazily; cudaMalloc). Inside a step, a SEND or
        RECV spinning there for its peer then never ends, and the host that waits for its GPU never
        issues what the peer waits for: interleaved 1F1B, pp 2, G = 13, bf16 h2816 hung on 2 H200s at
        its last stage's first F (a kernel loaded there), and, with kernels loaded first, at its first
        W (``w.grad = du.t() @ x``, a new allocation). This step makes the same allocations on the same
        streams in the same order, on a GPU with nothing waiting on a peer, so the allocator holds what
        a step needs and every kernel is loaded. Its collectives (the step's barriers) run on every rank."""
        if not self.primes:
            return
        saved = (self.actions, self.gates, self._fault_index, self.post)
        self.actions = {i: self._local_message(i) if self.ops[i].kind in ("SEND", "RECV") else a
                        for i, a in self.actions.items()}
        # no fault fires and no op is posted: to the launcher this is still set-up
        self.gates, self._fault_index, self.post = None, None, lambda step, op: None
        try:
            self.step(-1, timed=False)
        finally:
            self.actions, self.gates, self._fault_index, self.post = saved
        # nothing of it is kept: what the rank holds before its first step (memory's base_mib, from which
        # pptl tune fits the inputs' and targets' memory) is what it held before this step, the zeroed
        # gradient buffers make_chunk made included (dropped alone, they left base_mib short of the
        # weights pptl tune counts, and its fit read the inputs as 4.3 MiB where they are 34.1: a V order
        # whose rank 0 holds 40 of them then went over the limit it was ranked under)
        self._last = None
        for c in self.chunks.values():
            zero_grad_buffers(c)
        if self.cuda:
            torch.cuda.synchronize(self.device)

    def _local_message(self, i: int) -> Callable[[_Step], None]:
        """Op ``i`` (a SEND or RECV) as :meth:`prime` runs it: what it takes and leaves in the step's
        state, with no peer."""
        op = self.ops[i]
        if op.kind == "SEND":
            return lambda st: st.keep.append(self._send_payload(st, op))
        key = (op.flow, op.direction, op.stage, op.mb)

        def recv(st: _Step) -> None:
            buf = torch.zeros(self.shape, dtype=self.dtype, device=self.device)  # on the channel's stream
            st.keep.append(buf)
            st.recvd[key] = buf
        return recv

    def _setup_tensors(self) -> list[torch.Tensor]:
        """What :meth:`_setup_model` made and every step reads (weights, inputs, targets)."""
        return [p for c in getattr(self, "chunks", {}).values() for p in c.params] + \
            list(getattr(self, "inputs", {}).values()) + list(getattr(self, "targets", {}).values())

    def report(self) -> dict[str, Any]:
        """Family-specific numbers of this rank after its steps (JSON-ready; none for training plans)."""
        return {}

    # ------------------------------------------------------------------------------------------
    # One step

    def step(self, k: int, *, timed: bool) -> dict[str, Any]:
        """Run every op once; return the record (times in ms after the anchor)."""
        st = _Step(timed=timed)
        self._last = st  # what partial_events reads if this step never finishes
        self._step_index = k
        self._zero_grads()
        self.current = -1
        self.post(k, -1)
        try:
            if self.cuda:
                return self._step_cuda(k, st, timed)
            return self._step_cpu(k, st, timed)
        except OpFailure:
            raise
        except Exception as e:  # any error inside an op: name the rank and the op
            op = self.ids[self.current] if self.current >= 0 else "(step start)"
            raise OpFailure(self.rank, op, k, f"{type(e).__name__}: {_first_line(e)}") from e

    def partial_events(self) -> list[list[float | None]]:
        """Events of the interrupted step that completed (best effort, for the failure record).

        An op still running at the stop is left out: its end would be the stop, not its own. On
        CPU a SEND pending is kept with no end (None): a gloo send reports completion only once
        waited on (at the step's end), so whether it was delivered is its RECV's to tell
        (:func:`pptl.run.results.build_timeline` ends it there, or drops it).
        """
        st = getattr(self, "_last", None)
        out: list[list[float | None]] = []
        if st is None:
            return out
        if not self.cuda:
            return [[i, t[0], t[1]] for i, t in st.times.items()
                    if t[1] is not None or self.ops[i].kind == "SEND"]
        if not st.timed:  # an untimed step records no times; the events still hold the last timed step's
            return out
        try:
            for i in st.ended:
                s, e = self.start_ev[i], self.end_ev[i]
                if s.query() and e.query():
                    out.append([i, self.anchor.elapsed_time(s), self.anchor.elapsed_time(e)])
        except Exception:  # the context may be unusable after a fault
            pass
        return out

    def partial_anchor(self) -> tuple[float, float] | None:
        """(host ms, its uncertainty) of the interrupted step's anchor, when it is known."""
        if not self.cuda:
            return self._anchor
        try:
            if self._anchor is not None and self.anchor.query():
                mid, err = self._anchor
                return mid + self.calib.elapsed_time(self.anchor), err
        except Exception:
            pass
        return None

    def _calibrate(self) -> tuple[float, float]:
        """Where the GPU's event clock sits on this host's clock: (host ms of ``self.calib``, half
        the window it was recorded in). The GPU is idle here (the last step was polled to its end),
        so the event completes as soon as it is recorded. A window wider than 20 us (the thread was
        descheduled) is tried again, up to 3 times; the event kept is the last one recorded. Every
        rank sees the same launch latency, so what is left between two ranks is the window."""
        for _ in range(3):
            h0 = time.perf_counter()
            self.calib.record(self.compute)
            self.calib.synchronize()
            h1 = time.perf_counter()
            if h1 - h0 < 20e-6:
                break
        return (h0 + h1) * 5e2, (h1 - h0) * 5e2

    def _zero_grads(self) -> None:
        # Dropped, not zeroed (see pptl.run.model): the step's first gradient of each parameter is
        # written, not added. Its memory goes back to the compute stream's pool, where the step
        # allocates it again (the last step's backwards ran there).
        for c in self.chunks.values():
            for p in c.params:
                p.grad = None

    def _step_cuda(self, k: int, st: _Step, timed: bool) -> dict[str, Any]:
        comp = self.compute
        mapped = _device_allocs(self.device)
        calib = self._anchor = self._calibrate()
        # Wall time the way bench/torch_pp_anchor.py takes it: from an idle, joined start to the
        # moment every rank is done (both barriers are outside the event-timed window).
        dist.barrier()
        wall0 = time.perf_counter()
        with torch.cuda.stream(comp):
            st.loss = torch.zeros((), device=self.device, dtype=torch.float32)
            dist.all_reduce(self.flag)  # every rank's clock anchor follows the same collective
            self.anchor.record(comp)
        for s in self.streams.values():
            if s is not comp:
                s.wait_event(self.anchor)
        nvtx = torch.cuda.nvtx if timed else None
        ends = self.end_ev if timed else self.sync_ev
        probe = self.probe
        if probe is not None:
            probe.begin()
        for i in self.rp.issue:
            self.current = i
            self.post(k, i)
            self._before_issue(i)
            stream = self.stream_of[i]
            with torch.cuda.stream(stream):
                for u in self.rp.waits.get(i, ()):
                    stream.wait_event(ends[u])
                if timed:
                    self.start_ev[i].record(stream)
                    nvtx.range_push(self.ids[i])
                if i == self._fault_index:
                    self.fault.fire()
                st.started.append(i)
                if probe is not None:
                    before, waiting = self.outside(st), set(st.grads)
                self.actions[i](st)
                if probe is not None:
                    # An input gradient this op made (I, B) came after its busiest moment, the first
                    # block's da and du (pptl.run.footprint): it was not there to leave out.
                    made = [st.grads[key] for key in st.grads.keys() - waiting]
                    probe.after(i, {**before, **self.outside(st, leave=made)})
                if timed:
                    nvtx.range_pop()
                    self.end_ev[i].record(stream)
                    st.ended.append(i)
                elif i in self.sync_ev:
                    self.sync_ev[i].record(stream)
                if self.stretch is not None and self.ops[i].lane == "compute":
                    self.stretch.cuda(i, stream)
        for lane, s in self.streams.items():
            self.lane_done[lane].record(s)
        pending = ([(i, self.end_ev[i]) for i in self.rp.issue] if timed else []) + \
                  [(-1, ev) for ev in self.lane_done.values()]
        self._poll(k, pending)
        dist.barrier()
        wall_ms = (time.perf_counter() - wall0) * 1e3
        step_ms = max(self.anchor.elapsed_time(ev) for ev in self.lane_done.values())
        events = ([[i, self.anchor.elapsed_time(self.start_ev[i]), self.anchor.elapsed_time(self.end_ev[i])]
                   for i in self.rp.issue] if timed else [])
        b_input = ([[i, self.start_ev[i].elapsed_time(ev)] for i, ev in self.mid_ev.items() if i in st.i_end]
                   if timed else [])
        if self.stretch is not None and timed:
            self.stretch.measured({i: b - a for i, a, b in events if self.ops[i].lane == "compute"}, self.device)
        loss = float(st.loss) if self._has_loss() else None
        mid, err = calib
        return {"step": k, "timed": timed, "step_ms": step_ms, "wall_ms": wall_ms, "loss": loss, "events": events,
                "b_input": b_input, "started": st.started, "anchor_ms": mid + self.calib.elapsed_time(self.anchor),
                "anchor_err_ms": err, "device_allocs": _device_allocs(self.device) - mapped}

    def outside(self, st: _Step, *, leave: Sequence[torch.Tensor] = ()) -> dict[int, int]:
        """Storages (data pointer -> bytes) the step holds now that are not activations as
        :mod:`pptl.run.footprint` counts them: the weight gradients made so far, the messages, the
        input gradients waiting for their consumer, every held chunk's input and output and the
        output gradient it received (which a chunk on this rank sent it without a message). What the
        rank held before the step (weights, inputs, targets) is left out: it is the probe's base,
        and so is what ``leave`` holds."""
        tensors: list[torch.Tensor | None] = [p.grad for c in self.chunks.values() for p in c.params]
        tensors += st.keep
        tensors += st.grads.values()
        tensors += st.recvd.values()
        for (_, stage, _), a in st.acts.items():
            tensors += [a.x, a.y]
            if a.linear_grad and stage != self.last:  # the last block's dd: the gradient it received
                tensors.append(a.linear_grad[-1])
        skip = self._setup_storages | {t.untyped_storage().data_ptr() for t in leave}
        out = {}
        for t in tensors:
            if t is None:
                continue
            s = t.untyped_storage()
            if s.data_ptr() not in skip:
                out[s.data_ptr()] = s.nbytes()
        return out

    def _before_issue(self, i: int) -> None:
        """CUDA: called before op ``i`` is issued (and timed); a family may hold the host back here."""

    def _poll(self, k: int, pending: list[tuple[int, Any]]) -> None:
        """Wait for the step's events without blocking in CUDA, so a stuck op can be named."""
        last = time.monotonic()
        j = 0
        while j < len(pending):
            i, ev = pending[j]
            if ev.query():
                j += 1
                last = time.monotonic()
                continue
            if i >= 0 and i != self.current:
                self.current = i
                self.post(k, i)
            if time.monotonic() - last > self.timeout:
                op = self.ids[i] if i >= 0 else "(end of step)"
                raise OpFailure(self.rank, op, k, f"no progress for {self.timeout:g} s (a peer may have failed)")
            time.sleep(0.00002)  # the step's end is in the wall time: notice it within tens of microseconds

    def _step_cpu(self, k: int, st: _Step, timed: bool) -> dict[str, Any]:
        st.loss = torch.zeros((), dtype=torch.float32)
        dist.barrier()
        t0 = time.perf_counter()
        # perf_counter is the host's monotonic clock, one clock for every process of this host:
        # the anchor on it is what places this rank's times beside the others' (run/timebase.py).
        self._anchor = (t0 * 1e3, 0.0)

        def now() -> float:
            return (time.perf_counter() - t0) * 1e3

        for i in self.rp.issue:
            self.current = i
            self.post(k, i)
            for u in self.rp.waits.get(i, ()):
                self._cpu_wait(u, st, now)
            if i == self._fault_index:
                self.fault.fire()
            start = now()
            st.started.append(i)
            self.actions[i](st)
            st.times[i] = [start, None if i in st.works else now()]
            if self.stretch is not None and self.ops[i].lane == "compute":
                self.stretch.cpu(st.times[i][1] - start)  # type: ignore[operator]
            self._cpu_reap(st, now)
        for i in list(st.works):
            self.current = i
            self._cpu_wait(i, st, now)
        step_ms = max((t[1] for t in st.times.values()), default=0.0)
        events = [[i, t[0], t[1]] for i, t in st.times.items()] if timed else []
        b_input = [[i, (t - t0) * 1e3 - st.times[i][0]] for i, t in st.i_end.items()  # type: ignore[operator]
                   if i in st.times] if timed else []
        loss = float(st.loss) if self._has_loss() else None
        return {"step": k, "timed": timed, "step_ms": step_ms, "wall_ms": now(), "loss": loss, "events": events,
                "b_input": b_input, "started": st.started, "anchor_ms": t0 * 1e3, "anchor_err_ms": 0.0}

    def _cpu_wait(self, u: int, st: _Step, now: Callable[[], float]) -> None:
        works = st.works.pop(u, None)
        if works is None:
            return
        saved, self.current = self.current, u  # a failed wait is the RECV's (or SEND's) failure
        self.post(self._step_index, u)
        for w in works:
            w.wait()
        self.current = saved
        if saved >= 0:
            self.post(self._step_index, saved)
        st.times[u][1] = now()

    def _cpu_reap(self, st: _Step, now: Callable[[], float]) -> None:
        for u in [u for u, ws in st.works.items() if all(w.is_completed() for w in ws)]:
            for w in st.works.pop(u):
                w.wait()  # surfaces an error a completed work carries
            st.times[u][1] = now()

    def _has_loss(self) -> bool:
        return bool(self.targets)

    # ------------------------------------------------------------------------------------------
    # What each op does (closures built once per plan)

    def _action(self, i: int) -> Callable[[_Step], None]:
        op = self.ops[i]
        k = op.kind
        if k == "F":
            return lambda st: self._forward(st, op.direction, op.stage, op.mb)
        if k in ("B", "I"):
            full = k == "B"
            return lambda st: self._backward(st, op.direction, op.stage, op.mb, full, i)
        if k == "W":
            key = (op.direction, op.stage, op.mb)
            return lambda st: backward_weight(self.chunks[key[:2]], st.acts.pop(key))
        if k == "FB":
            ps, pm, pd = op.pair  # type: ignore[misc]

            def fb(st: _Step) -> None:
                self._forward(st, op.direction, op.stage, op.mb)
                self._backward(st, pd, ps, pm, True, -1)
            return fb
        if k == "SEND":
            return self._send_action(i)
        return self._recv_action(i)

    def _forward(self, st: _Step, d: int, s: int, mb: int) -> None:
        if s == 0:
            x = self.inputs[(d, mb)]
        elif (d, s - 1) in self.local:
            prev = (d, s - 1, mb)
            x = (st.acts.pop(prev) if self.forward_only else st.acts[prev]).y
        else:
            x = st.recvd.pop(("F", d, s, mb))
        last = s == self.last
        with torch.no_grad() if self.forward_only else _nullcontext():
            act = forward(self.chunks[(d, s)], x, needs_input_grad=s > 0 and not self.forward_only,
                          keep_linears=self.keep_linears,
                          target=self.targets[(d, mb)] if last else None, scale=self.scale)
        if last:
            st.loss += act.y.detach()
            if self.forward_only:
                return
        st.acts[(d, s, mb)] = act

    def _backward(self, st: _Step, d: int, s: int, mb: int, full: bool, i: int) -> None:
        """Op ``i``'s backward (an FB's has ``i`` -1: its I part is not marked)."""
        if s == self.last:
            dy = None
        elif (d, s + 1) in self.local:
            dy = st.grads.pop((d, s + 1, mb))
        else:
            dy = st.recvd.pop(("B", d, s, mb))
        key = (d, s, mb)
        chunk = self.chunks[(d, s)]
        if full:
            act = st.acts.pop(key)
            dx = backward_full(chunk, act, dy, None if i < 0 or not st.timed else lambda: self._mark_input(st, i))
        else:
            dx = backward_input(chunk, st.acts[key], dy)
        if dx is not None:
            st.grads[key] = dx

    def _mark_input(self, st: _Step, i: int) -> None:
        """B ``i``'s I part has been issued (CUDA) or has run (CPU): mark its end, so the timeline
        reports I and W of one B apart (what ``pptl tune --costs-from`` learns their speeds from)."""
        if self.cuda:
            self.mid_ev[i].record(torch.cuda.current_stream(self.device))
            st.i_end[i] = 0.0
        else:
            st.i_end[i] = time.perf_counter()

    def _send_action(self, i: int) -> Callable[[_Step], None]:
        op = self.ops[i]
        group = self.channels[self.rp.channels[i]]
        peer = op.peer

        def send(st: _Step) -> None:
            t = self._send_payload(st, op)
            st.keep.append(t)
            if self.gates is not None:
                self.gates.open(i, self._step_index, torch.cuda.current_stream())
            # inline: NCCL's stream follows compute (no extra hop); the channel's stream waits for the transfer
            inline = self.cuda and self.messages == "inline"
            with torch.cuda.stream(self.compute) if inline else _nullcontext():
                works = dist.batch_isend_irecv([dist.P2POp(dist.isend, t, peer, group=group)])
            if self.cuda:
                for w in works:
                    w.wait()  # the lane's stream waits for the transfer; the host does not
            else:
                st.works[i] = works
        return send

    def _send_payload(self, st: _Step, op: Any) -> torch.Tensor:
        """What a SEND sends, taken from the step's state: a forward's output (kept for its backward
        unless the plan has none) or an input gradient."""
        key = (op.direction, op.stage, op.mb)
        if op.flow == "F":
            t = (st.acts.pop(key) if self.forward_only else st.acts[key]).y.detach()
        else:
            t = st.grads.pop(key)
        return t.contiguous()

    def _recv_action(self, i: int) -> Callable[[_Step], None]:
        op = self.ops[i]
        key = (op.flow, op.direction, op.stage, op.mb)
        group = self.channels[self.rp.channels[i]]
        peer = op.peer

        def recv(st: _Step) -> None:
            buf = torch.empty(self.shape, dtype=self.dtype, device=self.device)  # on the channel's stream
            st.keep.append(buf)
            if self.gates is not None:
                self.gates.wait(i, self._step_index, torch.cuda.current_stream(), timeout=self.timeout,
                                on_timeout=lambda: self._stuck(i, "its sender never reached the matching SEND"))
            works = dist.batch_isend_irecv([dist.P2POp(dist.irecv, buf, peer, group=group)])
            if self.cuda:
                for w in works:
                    w.wait()
            else:
                st.works[i] = works
            st.recvd[key] = buf
        return recv

    def _stuck(self, i: int, why: str) -> None:
        raise OpFailure(self.rank, self.ids[i], self._step_index, f"no progress for {self.timeout:g} s: {why}")

    def grads(self) -> dict[str, list[torch.Tensor]]:
        """"d,s" -> this rank's gradient of that copy (CPU, fp32), for --verify."""
        return {f"{d},{s}": [(p.grad if p.grad is not None else torch.zeros_like(p)).detach().float().cpu()
                             for p in c.params] for (d, s), c in self.chunks.items()}


_BACKWARD_KINDS = frozenset({"B", "I", "W", "FB"})


def _device_allocs(device: torch.device) -> int:
    """How many times the caching allocator has mapped new memory on ``device`` (cudaMalloc)."""
    return int(torch.cuda.memory_stats(device).get("num_device_alloc", 0))


def _first_line(e: BaseException) -> str:
    text = str(e).strip()
    return text.splitlines()[0][:300] if text else ""
