"""Executor.prime: one step of the rank's ops with its messages left out, before the first step, so no
first use of a kernel and no allocation the caching allocator lacks falls inside a step where a message
spins for its peer. Run on CPU without ranks: the executor is built with no process groups (no message
is sent; the step's barrier is a no-op here), and the model's forward and backward are watched."""
from __future__ import annotations

from typing import Any

import pytest
import torch

import pptl.run.executor as executor_mod
from pptl.config import config_from_mapping
from pptl.run.executor import Executor, Fault
from pptl.run.program import build_program
from pptl.schedules import build_schedule


def _executor(cfg: dict[str, Any], rank: int, monkeypatch: pytest.MonkeyPatch, **kw: Any) -> Executor:
    monkeypatch.setattr(executor_mod.dist, "barrier", lambda *a, **k: None)
    s = build_schedule(config_from_mapping({"workload": {"hidden": 16, "tokens": 4}, **cfg}))
    program = build_program(s)
    return Executor(program, rank, torch.device("cpu"), {ch: None for ch in program.channels}, timeout=5.0, **kw)


def _watch(monkeypatch: pytest.MonkeyPatch) -> list[tuple[str, int, Any]]:
    calls: list[tuple[str, int, Any]] = []
    real_forward, real_backward = executor_mod.forward, executor_mod.backward_full

    def forward(chunk: Any, x: torch.Tensor, **kw: Any) -> Any:
        calls.append(("F", chunk.stage, kw["target"] is not None))
        return real_forward(chunk, x, **kw)

    def backward_full(chunk: Any, act: Any, dy: Any, *a: Any) -> Any:
        calls.append(("B", chunk.stage, dy is None))
        return real_backward(chunk, act, dy, *a)

    monkeypatch.setattr(executor_mod, "forward", forward)
    monkeypatch.setattr(executor_mod, "backward_full", backward_full)
    return calls


def test_interleaved_rank_runs_its_step_without_messages_and_keeps_nothing(monkeypatch: pytest.MonkeyPatch) -> None:
    # pp 2, vpp 2, m 4: rank 1 holds stages 1 and 3 (the last: its forward takes the target, its backward
    # starts from the loss), four micro-batches each, every input received: 8 forwards, 8 backwards
    ex = _executor({"schedule": "interleaved-1f1b", "pp": 2, "vpp": 2, "microbatches": 4}, 1, monkeypatch)
    actions, posts = ex.actions, []
    ex.post = lambda step, op: posts.append((step, op))
    calls = _watch(monkeypatch)
    ex.prime()
    assert sorted(calls) == sorted([("F", 1, False)] * 4 + [("F", 3, True)] * 4
                                   + [("B", 1, False)] * 4 + [("B", 3, True)] * 4)
    first_b = next(k for k, c in enumerate(calls) if c[0] == "B")
    assert calls[first_b] == ("B", 3, True)  # in the rank's issue order: F s1 x4, F s3 mb0 then B s3 mb0
    # the gradient buffers as make_chunk left them, zeroed (base_mib counts them: pptl tune subtracts the
    # weights and their gradients from it to find the inputs' and targets' memory), not the step's sums
    grads = [(p, p.grad) for c in ex.chunks.values() for p in c.params]
    assert grads and all(g is not None and g.shape == p.shape and g.dtype == p.dtype and not g.any()
                         for p, g in grads)
    assert ex.actions is actions and posts == []  # the real messages back; nothing posted to the launcher
    assert ex._last is None  # its step's buffers and activations let go: the rank's memory as before


def test_nothing_the_priming_step_made_outlives_it(monkeypatch: pytest.MonkeyPatch) -> None:
    # what a rank holds before its first step is its base memory (pptl tune fits inputs and targets from it):
    # every output of the priming step, the ones its SENDs kept and the last stage's loss included, is freed
    import gc
    import weakref

    ex = _executor({"schedule": "interleaved-1f1b", "pp": 2, "vpp": 2, "microbatches": 4}, 1, monkeypatch)
    made: list[weakref.ref[torch.Tensor]] = []
    real_forward = executor_mod.forward

    def forward(chunk: Any, x: torch.Tensor, **kw: Any) -> Any:
        act = real_forward(chunk, x, **kw)
        made.append(weakref.ref(act.y))
        return act

    real_payload = ex._send_payload

    def payload(st: Any, op: Any) -> torch.Tensor:
        t = real_payload(st, op)
        made.append(weakref.ref(t))
        return t

    monkeypatch.setattr(executor_mod, "forward", forward)
    monkeypatch.setattr(ex, "_send_payload", payload)
    ex.prime()
    gc.collect()
    # 8 forwards and rank 1's 12 SENDs (4 forwards of stage 1, 4 + 4 backwards of stages 3 and 1)
    assert len(made) == 20 and all(r() is None for r in made)


def test_first_rank_of_1f1b_runs_each_forward_and_backward_once(monkeypatch: pytest.MonkeyPatch) -> None:
    ex = _executor({"schedule": "1f1b", "pp": 4, "microbatches": 6}, 0, monkeypatch)
    calls = _watch(monkeypatch)
    ex.prime()
    assert sorted(calls) == sorted([("F", 0, False)] * 6 + [("B", 0, False)] * 6)


def test_an_inference_plan_primes_forwards_only(monkeypatch: pytest.MonkeyPatch) -> None:
    ex = _executor({"schedule": "inference", "pp": 2, "microbatches": 3}, 1, monkeypatch)
    calls = _watch(monkeypatch)
    ex.prime()
    assert calls == [("F", 1, True)] * 3


def test_a_fault_waits_for_the_real_step(monkeypatch: pytest.MonkeyPatch) -> None:
    fired: list[str] = []
    monkeypatch.setattr(Fault, "fire", lambda self: fired.append(self.op))
    ex = _executor({"schedule": "1f1b", "pp": 2, "microbatches": 2}, 0, monkeypatch,
                   fault=Fault("raise", 0, "r0/compute/F s0 mb1"))
    index = ex._fault_index
    ex.prime()
    assert fired == [] and ex._fault_index == index is not None


def test_a_primed_receive_keeps_its_buffer_to_the_steps_end(monkeypatch: pytest.MonkeyPatch) -> None:
    # as a real RECV does (st.keep): the same blocks held as long, so the allocator sees the same pattern
    ex = _executor({"schedule": "1f1b", "pp": 2, "microbatches": 2}, 1, monkeypatch)
    i = next(i for i in ex.rp.issue if ex.ops[i].kind == "RECV")
    st = executor_mod._Step(timed=False)
    ex._local_message(i)(st)
    (buf,) = st.recvd.values()
    assert st.keep == [buf] and buf.shape == (4, 16) and not buf.any()


def test_a_family_with_its_own_model_is_not_primed() -> None:
    from pptl.run.moe import MoEExecutor
    from pptl.run.weight_update import WeightUpdateExecutor

    assert Executor.primes and not MoEExecutor.primes and not WeightUpdateExecutor.primes
