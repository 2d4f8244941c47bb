"""Executor.prime: each of a rank's stages runs once, forward and backward, before the first step, so no
first use of a kernel or library (which can wait for the whole GPU) falls inside a step where a message
spins for its peer. Run on CPU without ranks: the executor is built with no process groups (no message
is sent), and the model's forward and backward are watched."""
from __future__ import annotations

from typing import Any

import pytest
import torch

import pptl.run.executor as executor_mod
from pptl.config import config_from_mapping
from pptl.run.executor import Executor
from pptl.run.program import build_program
from pptl.schedules import build_schedule


def _executor(cfg: dict[str, Any], rank: int) -> Executor:
    s = build_schedule(config_from_mapping({"workload": {"hidden": 16, "tokens": 4}, **cfg}))
    program = build_program(s)
    return Executor(program, rank, torch.device("cpu"), {ch: None for ch in program.channels}, timeout=5.0)


def _watch(monkeypatch: pytest.MonkeyPatch) -> list[tuple[str, int, Any]]:
    calls: list[tuple[str, int, Any]] = []
    real_forward, real_backward = executor_mod.forward, executor_mod.backward_full

    def forward(chunk: Any, x: torch.Tensor, **kw: Any) -> Any:
        calls.append(("F", chunk.stage, (kw["needs_input_grad"], kw["target"] is not None)))
        return real_forward(chunk, x, **kw)

    def backward_full(chunk: Any, act: Any, dy: Any, *a: Any) -> Any:
        calls.append(("B", chunk.stage, dy is None))
        return real_backward(chunk, act, dy, *a)

    monkeypatch.setattr(executor_mod, "forward", forward)
    monkeypatch.setattr(executor_mod, "backward_full", backward_full)
    return calls


def test_interleaved_rank_primes_both_its_stages_and_keeps_no_gradient(monkeypatch: pytest.MonkeyPatch) -> None:
    # pp 2, vpp 2: rank 1 holds stages 1 and 3; stage 3 is the last (its forward takes the target and
    # its backward starts from the loss), stage 1's forward needs its input's gradient
    ex = _executor({"schedule": "interleaved-1f1b", "pp": 2, "vpp": 2, "microbatches": 4}, 1)
    calls = _watch(monkeypatch)
    ex.prime()
    assert calls == [("F", 1, (True, False)), ("B", 1, False), ("F", 3, (True, True)), ("B", 3, True)]
    assert all(p.grad is None for c in ex.chunks.values() for p in c.params)


def test_first_rank_primes_stage_zero_without_an_input_gradient(monkeypatch: pytest.MonkeyPatch) -> None:
    ex = _executor({"schedule": "1f1b", "pp": 4, "microbatches": 4}, 0)
    calls = _watch(monkeypatch)
    ex.prime()
    assert calls == [("F", 0, (False, False)), ("B", 0, False)]


def test_dualpipe_rank_primes_a_stage_of_each_direction(monkeypatch: pytest.MonkeyPatch) -> None:
    # DualPipe pp 4: rank 0 holds stage 0 of direction 0 and stage 3 (the last) of direction 1
    ex = _executor({"schedule": "dualpipe", "pp": 4, "microbatches": 8}, 0)
    calls = _watch(monkeypatch)
    ex.prime()
    assert sorted(calls) == sorted([("F", 0, (False, False)), ("B", 0, False), ("F", 3, (True, True)),
                                    ("B", 3, True)])


def test_an_inference_plan_primes_forwards_only(monkeypatch: pytest.MonkeyPatch) -> None:
    ex = _executor({"schedule": "inference", "pp": 2, "microbatches": 3}, 1)
    calls = _watch(monkeypatch)
    ex.prime()
    assert calls == [("F", 1, (False, True))]


def test_a_family_with_its_own_model_is_not_primed() -> None:
    from pptl.run.moe import MoEExecutor
    from pptl.run.weight_update import WeightUpdateExecutor

    assert Executor.primes and not MoEExecutor.primes and not WeightUpdateExecutor.primes
