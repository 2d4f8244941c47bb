"""The pieces of pptl run that need no processes: the split backward, --verify's comparison, and
turning rank records into a measured timeline."""
from __future__ import annotations

import pytest

from pptl.config import Workload, config_from_mapping
from pptl.run.results import build_timeline
from pptl.schedules import build_schedule

torch = pytest.importorskip("torch")

from pptl.run.model import backward_full, backward_input, backward_weight, forward, make_chunk  # noqa: E402
from pptl.run.verify import compare_gradients, reference_step  # noqa: E402

W = Workload(hidden=16, tokens=4, layers_per_stage=2, dtype="float32")
CPU = torch.device("cpu")


@pytest.mark.parametrize("stage,last", [(0, False), (1, False), (1, True)], ids=["first", "middle", "last"])
def test_input_then_weight_gradient_equals_full_backward(stage, last):
    x = torch.randn(W.tokens, W.hidden)
    dy = None if last else torch.randn(W.tokens, W.hidden)
    target = torch.randn(W.tokens, W.hidden) if last else None
    full, split = make_chunk(W, stage, CPU), make_chunk(W, stage, CPU)
    a = forward(full, x, needs_input_grad=stage > 0, keep_linears=False, target=target, scale=0.5)
    dx_full = backward_full(full, a, dy)
    b = forward(split, x, needs_input_grad=stage > 0, keep_linears=True, target=target, scale=0.5)
    dx_split = backward_input(split, b, dy)
    assert all(float(p.grad.abs().max()) == 0 for p in split.params), "I must not touch weight gradients"
    backward_weight(split, b)
    for p, q in zip(full.params, split.params):
        torch.testing.assert_close(q.grad, p.grad, rtol=1e-5, atol=1e-6)
    if stage > 0:
        torch.testing.assert_close(dx_split, dx_full, rtol=1e-5, atol=1e-6)
    else:
        assert dx_full is None and dx_split is None


@pytest.mark.parametrize("stage,last", [(0, False), (1, False), (1, True)], ids=["first", "middle", "last"])
def test_full_backward_after_a_kept_forward_accumulates_by_gemm_from_dropped_gradients(stage, last):
    """B on a forward that kept its Linears is I then W: each weight gradient accumulated by its GEMM.
    From gradients dropped (None, as the executor leaves them at a step's start) over two
    micro-batches, it equals autograd's B over the same two from zeroed gradients, and dx too."""
    ref, fused = make_chunk(W, stage, CPU), make_chunk(W, stage, CPU)
    for p in fused.params:
        p.grad = None
    for mb in range(2):
        x = torch.randn(W.tokens, W.hidden)
        dy = None if last else torch.randn(W.tokens, W.hidden)
        target = torch.randn(W.tokens, W.hidden) if last else None
        a = forward(ref, x, needs_input_grad=stage > 0, keep_linears=False, target=target, scale=0.5)
        dx_ref = backward_full(ref, a, dy)
        b = forward(fused, x, needs_input_grad=stage > 0, keep_linears=True, target=target, scale=0.5)
        dx = backward_full(fused, b, dy)
        assert b.linear_grad is None and b.linear_in == []  # W took what I kept
        if stage > 0:
            torch.testing.assert_close(dx, dx_ref, rtol=1e-5, atol=1e-6)
        else:
            assert dx is None and dx_ref is None
        if mb == 0:  # the first micro-batch wrote the gradients: nothing was there to add to
            assert all(p.grad is not None for p in fused.params)
    for p, q in zip(ref.params, fused.params):
        torch.testing.assert_close(q.grad, p.grad, rtol=1e-5, atol=1e-6)
    assert float(ref.params[0].grad.abs().max()) > 0


def test_copies_of_a_stage_start_equal():
    a, b = make_chunk(W, 3, CPU), make_chunk(W, 3, CPU)
    assert all(torch.equal(p, q) for p, q in zip(a.params, b.params))
    assert not torch.equal(a.params[0], make_chunk(W, 2, CPU).params[0])


def test_verify_flags_a_wrong_gradient_and_names_it():
    loss, grads = reference_step(W, num_stages=2, directions=1, microbatches=2, device=CPU)
    ok = compare_gradients(W, loss, loss, [list(g) for g in grads], grads)
    assert ok.ok and ok.max_grad_rel_err == 0
    bad = [list(g) for g in grads]
    bad[1][2] = bad[1][2] * 1.001  # stage 1, layer 0, W_down off by 0.1%
    v = compare_gradients(W, loss, loss, bad, grads)
    assert not v.ok and v.worst == "stage 1 layer 0 W_down"
    assert v.max_grad_rel_err == pytest.approx(1e-3, rel=1e-3)
    assert v.line().startswith("verify FAILED")


def _payload(rank: int, steps: list[tuple[int, bool, float]], events: dict[int, list] | None = None) -> dict:
    return {"rank": rank, "issue": [], "info": {"device": "cpu"},
            "steps": [{"step": k, "timed": t, "step_ms": ms, "wall_ms": ms, "loss": None,
                       "events": (events or {}).get(k, [])} for k, t, ms in steps]}


def test_timeline_is_the_median_timed_step():
    s = build_schedule(config_from_mapping({"schedule": "1f1b", "pp": 2, "microbatches": 1}))
    i0 = next(i for i, op in enumerate(s.ops) if op.rank == 0)
    i1 = next(i for i, op in enumerate(s.ops) if op.rank == 1)
    payloads = [_payload(0, [(1, True, 5.0), (2, False, 4.0), (3, True, 9.0), (4, False, 4.2), (5, True, 7.0)],
                         {1: [[i0, 0, 1]], 3: [[i0, 0, 2]], 5: [[i0, 0, 3]]}),
                _payload(1, [(1, True, 6.0), (2, False, 4.5), (3, True, 8.0), (4, False, 3.0), (5, True, 7.5)],
                         {1: [[i1, 1, 2]], 3: [[i1, 1, 3]], 5: [[i1, 1, 4]]})]
    tl = build_timeline(s, payloads)
    x = tl.meta.extra
    assert x["step_ms"] == [6.0, 9.0, 7.5] and x["median_step_ms"] == 7.5 and x["step"] == 5
    assert x["untimed_step_ms"] == [4.5, 4.2] and x["overhead"] == pytest.approx(7.5 / 4.35 - 1)
    assert [(e.op, e.start, e.end) for e in tl.events] == [(s.ops[i0].id, 0, 3), (s.ops[i1].id, 1, 4)]
    assert tl.meta.source == "measured" and tl.meta.units == "ms"


def test_timeline_of_an_interrupted_run_uses_the_partial_step():
    s = build_schedule(config_from_mapping({"schedule": "1f1b", "pp": 2, "microbatches": 1}))
    p = _payload(0, [])
    p["partial"] = {"step": 0, "events": [[0, 0.0, 1.0]]}
    tl = build_timeline(s, [p, _payload(1, [])], extra={"failed": "boom"})
    assert tl.meta.extra["partial"] is True and tl.meta.extra["failed"] == "boom"
    assert [e.op for e in tl.events] == [s.ops[0].id]
