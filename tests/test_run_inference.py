"""A forward-only plan in pptl run's executor builds no autograd graph and keeps a forward's output
only until its consumer takes it (one process, gloo, CPU)."""
from __future__ import annotations

import pytest

from pptl.config import config_from_mapping
from pptl.run.program import build_program
from pptl.schedules import build_schedule

torch = pytest.importorskip("torch")
dist = pytest.importorskip("torch.distributed")

from pptl.run.executor import Executor  # noqa: E402


@pytest.fixture
def one_rank(tmp_path):
    dist.init_process_group("gloo", store=dist.FileStore(str(tmp_path / "store"), 1), rank=0, world_size=1)
    yield
    dist.destroy_process_group()


def _run(cfg):
    """Run one step; return (op id, outputs held, any held output with a graph) before each op, and the step."""
    prog = build_program(build_schedule(config_from_mapping(cfg)))
    seen = []
    box = []

    def post(k, i):
        if box and i >= 0:
            st = box[0]._last
            seen.append((box[0].ids[i], len(st.acts), any(a.y.grad_fn is not None for a in st.acts.values())))

    ex = Executor(prog, 0, torch.device("cpu"), {}, timeout=30, post=post)
    box.append(ex)
    return seen, ex.step(0, timed=True), ex


def test_inference_holds_one_output_at_most_and_no_graph(one_rank):
    # 3 chunks on one rank, 4 micro-batches: each forward's output waits only for the next chunk's
    # forward; the last chunk's output is the loss. Before: 12 activations with their graphs at the end.
    seen, rec, ex = _run({"schedule": "inference", "pp": 1, "vpp": 3, "microbatches": 4,
                          "workload": {"hidden": 8, "tokens": 4}})
    assert [n for _, n, _ in seen] == [0, 1, 1] * 4
    assert not any(graph for _, _, graph in seen)
    assert ex._last.acts == {} and ex._last.keep == []
    assert rec["loss"] is not None and rec["loss"] > 0


def test_training_plan_still_keeps_forwards_for_their_backward(one_rank):
    seen, _, ex = _run({"schedule": "gpipe", "pp": 1, "vpp": 1, "microbatches": 3,
                        "workload": {"hidden": 8, "tokens": 4}})
    held = dict((op, n) for op, n, _ in seen)
    assert held["r0/compute/B s0 mb0"] == 3  # all three forwards wait for their backward
    assert all(graph for op, n, graph in seen if n)
    assert ex._last.acts == {}
