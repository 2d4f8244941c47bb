"""Boundaries of the executor's and the worker's pure parts, run without ranks or processes: the
first op of a rank (index 0) when a step fails or a wait restores it, a SEND still pending in a
failure record, a message's works only partly done, a failure line at exactly 300 characters, a
rank of two digits in a failure file, and a chunk's gradient key for stage 10+.
Hand mutants: /work/wt/_mutants/wave5_executor.py."""
from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import torch

from pptl.errors import InputError
from pptl.run.executor import Executor, OpFailure, _first_line, _Step
from pptl.run.options import Job, PlanJob
from pptl.run.worker import _fail, failure_path, records_path


@dataclass
class _Op:
    kind: str


class _Work:
    """A gloo work stand-in: done or not, and how often it was waited on."""

    def __init__(self, done: bool) -> None:
        self.done = done
        self.waited = 0

    def is_completed(self) -> bool:
        return self.done

    def wait(self) -> None:
        self.waited += 1


class _Chunk:
    def __init__(self, params: list[torch.Tensor]) -> None:
        self.params = params


def _bare(ops: list[str]) -> Any:
    """An executor with only what the helpers under test read (no process group, no model)."""
    ex: Any = object.__new__(Executor)
    ex.cuda = False
    ex.rank = 11
    ex.ops = [_Op(k) for k in ops]
    ex.ids = [f"{k}{i}" for i, k in enumerate(ops)]
    ex.chunks = {}
    ex.posts = []
    ex.post = lambda step, op: ex.posts.append((step, op))
    return ex


# ----------------------------------------------------------------------------------------------
# pptl/run/executor.py


class _FailsAtFirstOp(Executor):
    def _step_cpu(self, k: int, st: _Step, timed: bool) -> dict[str, Any]:
        self.current = 0  # the rank's first op (index 0) is running when it fails
        raise ValueError("boom")


def test_a_step_failing_in_its_first_op_names_that_op_not_the_step_start() -> None:
    # Op index 0 is a real op: the failure must name "F0", not "(step start)" (which is for -1).
    ex: Any = object.__new__(_FailsAtFirstOp)
    base = _bare(["F", "SEND"])
    ex.__dict__.update(base.__dict__)
    with pytest.raises(OpFailure) as info:
        ex.step(4, timed=True)
    assert info.value.op_id == "F0"
    assert str(info.value) == "rank 11 failed at op F0 (step 4): ValueError: boom"
    assert ex.posts == [(4, -1)]  # the step start was posted before the op ran


def test_a_wait_from_the_first_op_posts_that_op_again_afterwards() -> None:
    # Op 0 waits on RECV 5: the board shows 5 while waiting, then 0 again (index 0 is an op, not
    # "no op"); the RECV's end is the clock's 7.5 ms at the end of the wait.
    ex = _bare(["F", "F", "F", "F", "F", "RECV"])
    ex.current, ex._step_index = 0, 2
    work = _Work(done=False)
    st = _Step(works={5: [work]}, times={5: [1.0, None]})
    ex._cpu_wait(5, st, lambda: 7.5)
    assert ex.posts == [(2, 5), (2, 0)]
    assert ex.current == 0
    assert st.times[5] == [1.0, 7.5]
    assert work.waited == 1 and st.works == {}


def test_a_message_is_reaped_only_when_every_one_of_its_works_is_done() -> None:
    # Op 3 has two works, one done: it is still pending (no end time); op 4's only work is done.
    ex = _bare(["F", "F", "F", "SEND", "RECV"])
    a, b, c = _Work(True), _Work(False), _Work(True)
    st = _Step(works={3: [a, b], 4: [c]}, times={3: [0.5, None], 4: [0.6, None]})
    ex._cpu_reap(st, lambda: 9.0)
    assert list(st.works) == [3]
    assert st.times == {3: [0.5, None], 4: [0.6, 9.0]}
    assert (a.waited, b.waited, c.waited) == (0, 0, 1)


def test_a_failure_record_keeps_a_pending_send_but_not_a_pending_recv() -> None:
    # CPU: op 0 ended at 1 ms; SEND 1 pending (kept, no end: its RECV tells whether it arrived);
    # RECV 2 pending (left out: its end would be the stop).
    ex = _bare(["F", "SEND", "RECV"])
    assert ex.partial_events() == []  # no step started yet
    ex._last = _Step(times={0: [0.0, 1.0], 1: [1.0, None], 2: [1.0, None]})
    assert ex.partial_events() == [[0, 0.0, 1.0], [1, 1.0, None]]


def test_a_failure_cause_keeps_exactly_300_characters_of_its_first_line() -> None:
    assert _first_line(ValueError("x" * 300 + "\nsecond")) == "x" * 300
    assert _first_line(ValueError("y" * 301)) == "y" * 300
    assert _first_line(ValueError("  first\nsecond  ")) == "first"
    assert _first_line(ValueError("")) == ""


def test_gradients_are_keyed_direction_then_stage_for_stage_10() -> None:
    # Chunk (direction 1, stage 10): key "1,10" (the verifier reads the stage after the comma); a
    # parameter with no gradient counts as zeros of its shape.
    ex = _bare([])
    p, q = torch.ones(2), torch.ones(3)
    p.grad = torch.full((2,), 4.0)
    ex.chunks = {(1, 10): _Chunk([p, q])}
    g = ex.grads()
    assert list(g) == ["1,10"]
    assert g["1,10"][0].tolist() == [4.0, 4.0]
    assert g["1,10"][1].tolist() == [0.0, 0.0, 0.0]


class _Event:
    """A CUDA event stand-in that completes on its second query."""

    def __init__(self) -> None:
        self.queries = 0

    def query(self) -> bool:
        self.queries += 1
        return self.queries > 1


def test_polling_a_step_stuck_in_its_first_op_posts_that_op() -> None:
    # The GPU sits in op 0 (the rank's first op) for one poll: the board must show op 0, so a hang
    # there names it (index 0 is an op; only -1, the step's end marker, is not).
    ex = _bare(["F", "SEND"])
    ex.current, ex.timeout = -1, 60.0
    ex._poll(3, [(0, _Event()), (-1, _Event())])
    assert ex.posts == [(3, 0)]
    assert ex.current == 0


# ----------------------------------------------------------------------------------------------
# pptl/run/worker.py


def test_record_and_failure_files_name_plan_and_rank_of_two_digits(tmp_path: Path) -> None:
    assert records_path(str(tmp_path), 2, 12) == tmp_path / "plan2.rank12.json"
    assert failure_path(str(tmp_path), 10) == tmp_path / "failure.rank10.json"


def test_an_op_failure_file_names_the_op_and_exit_code_1(tmp_path: Path, capsys: Any) -> None:
    job = Job(plans=(PlanJob(plan="p.json"),), rundir=str(tmp_path))
    _fail(job, 10, OpFailure(10, "B3", 0, "ValueError: x"), {"plan": 0, "executor": None, "payload": None})
    data = json.loads((tmp_path / "failure.rank10.json").read_text())
    assert (data["rank"], data["plan"], data["op"], data["exit_code"]) == (10, 0, "B3", 1)
    assert data["message"] == "rank 10 failed at op B3 (step 0): ValueError: x"
    assert "error: rank 10 failed at op B3" in capsys.readouterr().err


def test_an_input_error_file_keeps_its_exit_code_2_and_no_op(tmp_path: Path, capsys: Any) -> None:
    job = Job(plans=(PlanJob(plan="p.json"),), rundir=str(tmp_path))
    _fail(job, 0, InputError("bad plan"), {"plan": -1, "executor": None, "payload": None})
    data = json.loads((tmp_path / "failure.rank0.json").read_text())
    assert (data["op"], data["exit_code"], data["plan"]) == (None, 2, -1)
    assert data["message"] == "rank 0: bad plan"
    capsys.readouterr()


def test_an_other_error_line_keeps_300_characters_of_its_first_line(tmp_path: Path, capsys: Any) -> None:
    job = Job(plans=(PlanJob(plan="p.json"),), rundir=str(tmp_path))
    _fail(job, 3, RuntimeError("z" * 300 + "\nmore"), {"plan": 0, "executor": None, "payload": None})
    data = json.loads((tmp_path / "failure.rank3.json").read_text())
    assert data["message"] == "rank 3 failed: RuntimeError: " + "z" * 300
    capsys.readouterr()


def test_a_stopped_rank_writes_no_failure_file_but_keeps_its_partial_records(tmp_path: Path, capsys: Any) -> None:
    # quiet (SIGTERM from the launcher): the records get the interrupted step's events, no failure file.
    job = Job(plans=(PlanJob(plan="p.json"),), rundir=str(tmp_path))
    ex = _bare(["F", "SEND"])
    ex._step_index = 0
    ex._anchor = (5.0, 0.0)
    ex._last = _Step(times={0: [0.0, 2.0], 1: [2.0, None]})
    _fail(job, 12, RuntimeError("stop"), {"plan": 0, "executor": ex, "payload": {"steps": []}}, quiet=True)
    assert not (tmp_path / "failure.rank12.json").exists()
    rec = json.loads((tmp_path / "plan0.rank12.json").read_text())
    assert rec["partial"] == {"step": 0, "events": [[0, 0.0, 2.0], [1, 2.0, None]],
                              "anchor_ms": 5.0, "anchor_err_ms": 0.0}
    assert capsys.readouterr().err == ""
