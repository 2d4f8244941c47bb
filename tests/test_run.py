"""pptl run on CPU (gloo): every training family at 2 and 4 processes, the executed order, --verify,
failures, and the command line. One launch runs all families of a size (start-up is paid once)."""
from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
from runorder import assert_runs_the_plans_order
from typer.testing import CliRunner

from pptl.cli import app
from pptl.config import config_from_mapping
from pptl.errors import InputError, InvalidScheduleError, RunError
from pptl.formats.plan import dumps, plan_to_dict
from pptl.ir import Op
from pptl.run.program import RUN_KINDS, build_program
from pptl.schedules import FAMILIES, build_schedule

torch = pytest.importorskip("torch")

TINY = {"hidden": 32, "tokens": 8, "layers_per_stage": 1, "dtype": "float32"}
ROOT = Path(__file__).resolve().parent.parent


def _training_schedule(name: str, pp: int):
    """The family's schedule at (pp, 2pp micro-batches) with the tiny workload, or None if it is not a
    training family pptl run executes (e.g. a weight-update plan). A family that builds at neither
    vpp=1 nor vpp=2 raises: it must be seen, not dropped from the grid."""
    errors = []
    for vpp in (1, 2):
        try:
            s = build_schedule(config_from_mapping({"schedule": name, "pp": pp, "microbatches": 2 * pp, "vpp": vpp,
                                                    "workload": TINY}))
        except InputError as e:
            errors.append(str(e))
            continue
        return s if {op.kind for op in s.ops} <= RUN_KINDS else None
    raise AssertionError(f"family {name} builds at neither vpp=1 nor vpp=2 with pp={pp}: {errors}")


def _families() -> tuple[list[str], dict[str, str]]:
    """(training families, family -> why it is not in the grid): collection must not fail on one family."""
    training, left_out = [], {}
    for n in FAMILIES:
        try:
            s = _training_schedule(n, 2)
        except AssertionError as e:
            left_out[n] = str(e)
            continue
        if s is not None:
            training.append(n)
    return training, left_out


TRAINING, LEFT_OUT = _families()
GRID = [(pp, n) for pp in (2, 4) for n in TRAINING]


@pytest.fixture(scope="module")
def runs():
    """(pp, family) -> (schedule, measured timeline): one launch per process count, --verify on."""
    from pptl.run import run_plans

    out = {}
    for pp in (2, 4):
        schedules = {n: _training_schedule(n, pp) for n in TRAINING}
        tls = run_plans([(s, None) for s in schedules.values()], gpus=pp, device="cpu", steps=1, warmup=0,
                        verify=True, timeout=60)
        for (n, s), tl in zip(schedules.items(), tls):
            out[(pp, n)] = (s, tl)
    return out


def test_training_families_found():
    assert {"gpipe", "1f1b", "interleaved-1f1b"} <= set(TRAINING)
    # Every family either runs in the grid or is not a training plan; none is dropped by an error.
    assert LEFT_OUT == {}


@pytest.mark.parametrize("pp", [2, 4])
def test_every_family_is_in_the_grid_or_not_a_training_plan(pp):
    for n in FAMILIES:
        s = _training_schedule(n, pp)
        assert (s is not None) == (n in TRAINING), n


@pytest.mark.parametrize("pp,family", GRID, ids=[f"pp{pp}-{n}" for pp, n in GRID])
def test_each_rank_runs_the_plans_order(runs, pp, family):
    schedule, tl = runs[(pp, family)]
    # Compute ops start in plan order too (host clock, one at a time).
    assert_runs_the_plans_order(schedule, tl, serial_lanes=("compute",))


@pytest.mark.parametrize("pp,family", GRID, ids=[f"pp{pp}-{n}" for pp, n in GRID])
def test_verify_matches_single_process_reference(runs, pp, family):
    _, tl = runs[(pp, family)]
    v = tl.meta.extra["verify"]
    assert v["ok"], v
    assert v["max_grad_rel_err"] < 1e-5 and v["loss_rel_err"] < 1e-5
    assert v["loss"] > 0


def test_measured_timeline_is_a_timeline_in_ms(runs):
    _, tl = runs[(2, "1f1b")]
    assert tl.meta.source == "measured" and tl.meta.units == "ms" and tl.meta.family == "1f1b"
    x = tl.meta.extra
    assert x["device"] == "cpu" and x["backend"] == "gloo" and x["world"] == 2
    assert x["median_step_ms"] > 0 and x["median_untimed_step_ms"] > 0 and x["overhead"] is not None
    assert all(e.end >= e.start >= 0 for e in tl.events)


@pytest.mark.parametrize("family,says", [("1f1b", "i-then-w"), ("dualpipe", "i-then-w"), ("zb-h1", None)])
def test_the_timeline_says_how_its_full_backward_ran(runs, family, says):
    """pptl tune --costs-from reads it: B as I then W did I's and W's work and no more; a plan
    with no B (every backward split) says nothing."""
    _, tl = runs[(2, family)]
    assert tl.meta.extra.get("full_backward") == says


@pytest.mark.parametrize("pp,family", [(2, "1f1b"), (4, "1f1b"), (2, "gpipe")])
def test_every_b_reports_its_i_part_inside_it(runs, pp, family):
    """B runs I then W and marks where I ended: every B of the timed step has its I part, inside
    its own duration (first and last stage alike), which pptl tune --costs-from learns I and W from."""
    schedule, tl = runs[(pp, family)]
    parts = tl.meta.extra["b_input_ms"]
    bs = [e for e in tl.events if e.kind == "B"]
    assert {e.op for e in bs} == set(parts) and len(bs) == sum(op.kind == "B" for op in schedule.ops)
    assert all(0 < parts[e.op] < e.duration for e in bs), [(e.op, parts[e.op], e.duration) for e in bs]
    assert {e.stage for e in bs} == set(range(pp))


def test_only_plain_b_ops_report_an_i_part(runs):
    """zb-h1 runs I and W as ops of their own (nothing to mark); DualPipe's FB overlaps a forward with
    a backward, so only its plain B ops report their I part."""
    _, zb = runs[(2, "zb-h1")]
    assert "b_input_ms" not in zb.meta.extra
    _, dp = runs[(2, "dualpipe")]
    bs = {e.op for e in dp.events if e.kind == "B"}
    assert bs and set(dp.meta.extra["b_input_ms"]) == bs
    assert any(e.kind == "FB" for e in dp.events)


# ----------------------------------------------------------------------------------------------
# The program (pure)


@pytest.mark.parametrize("family", TRAINING)
def test_issue_order_is_a_linear_extension_of_the_plan(family):
    s = _training_schedule(family, 4)
    prog = build_program(s)
    for rp in prog.ranks:
        pos = {i: k for k, i in enumerate(rp.issue)}
        assert sorted(pos) == sorted(i for i, op in enumerate(s.ops) if op.rank == rp.rank)
        for u, v in s.deps:
            if u in pos and v in pos:
                assert pos[u] < pos[v], (s.ops[u].id, s.ops[v].id)
        for order in rp.lanes.values():
            assert [pos[i] for i in order] == sorted(pos[i] for i in order)


def test_channels_pair_each_send_with_its_recv():
    s = _training_schedule("1f1b", 4)
    prog = build_program(s)
    sends = {(op.stage, op.mb, op.flow): rp.channels[i] for rp in prog.ranks for i, op in enumerate(s.ops)
             if i in rp.channels and op.kind == "SEND"}
    for rp in prog.ranks:
        for i, ch in rp.channels.items():
            op = s.ops[i]
            if op.kind == "RECV":
                sender_stage = op.stage - 1 if op.flow == "F" else op.stage + 1
                assert sends[(sender_stage, op.mb, op.flow)] == ch


def test_refuses_kinds_it_cannot_execute():
    s = _training_schedule("1f1b", 2)
    bad = s.with_lanes({**{k: s.lane_ops(*k) for k in s.lanes},
                        (0, "comm"): [Op(kind="A2A_DISPATCH", rank=0, lane="comm", stage=0, mb=0)]})
    with pytest.raises(InputError, match=r"op r0/comm/A2A_DISPATCH s0 mb0 has kind A2A_DISPATCH; pptl run executes"):
        build_program(bad, source="bad.json")


def test_refuses_crossing_without_communication():
    s = _training_schedule("1f1b", 2)
    compute_only = s.with_lanes({k: s.lane_ops(*k) for k in s.lanes if k[1] == "compute"})
    with pytest.raises(InvalidScheduleError, match=r"r0/compute/F s0 mb0 -> r1/compute/F s1 mb0 crosses ranks"):
        build_program(compute_only, source="p.json")


def test_refuses_messages_in_different_orders():
    s = _training_schedule("1f1b", 2)
    lanes = {k: s.lane_ops(*k) for k in s.lanes}
    recv = lanes[(1, "recv")]
    lanes[(1, "recv")] = [recv[1], recv[0]] + recv[2:]  # rank 1 expects mb1 before mb0
    with pytest.raises(InvalidScheduleError, match=r"NCCL matches them in order"):
        build_program(s.with_lanes(lanes), source="p.json")


# ----------------------------------------------------------------------------------------------
# Failures: one message naming the rank and the op; what was measured is written


def _tiny_plan(tmp_path: Path, family: str = "1f1b", pp: int = 2) -> Path:
    path = tmp_path / f"{family}.json"
    path.write_text(dumps(plan_to_dict(_training_schedule(family, pp))))
    return path


@pytest.mark.parametrize("fault,message", [
    ("raise:1:r1/compute/F s1 mb2", r"rank 1 failed at op r1/compute/F s1 mb2 \(step 0\): RuntimeError: injected"),
    ("kill:0:r0/compute/B s0 mb1", r"rank 0 was lost \(killed by SIGKILL\) at op r0/compute/B s0 mb1 \(step 0\)"),
    ("hang:1:r1/compute/B s1 mb0", r"no rank made progress for the --timeout; rank 1 is stuck at op "
                                   r"r1/compute/B s1 mb0"),
], ids=["exception", "lost-rank", "hang"])
def test_failure_stops_every_rank_and_keeps_measurements(tmp_path, monkeypatch, fault, message):
    from pptl.run import run_plans

    monkeypatch.setenv("PPTL_RUN_FAULT", fault)
    out = tmp_path / "m.json"
    with pytest.raises(RunError, match=message):
        # Only a hang waits for the timeout; elsewhere a short one lets a loaded machine's slow op look hung.
        run_plans([(_tiny_plan(tmp_path), out)], gpus=2, device="cpu", steps=2, warmup=0,
                  timeout=3 if fault.startswith("hang") else 20)
    data = json.loads(out.read_text())
    assert data["meta"]["extra"]["partial"] is True
    assert re.search(message, data["meta"]["extra"]["failed"])
    assert data["events"], "the ops that finished before the failure are kept"


def test_more_processes_than_the_plan_has_ranks(tmp_path):
    from pptl.run import run_plans

    with pytest.raises(InputError, match=r"the plan has pp=2 ranks; run it with --gpus 2"):
        run_plans([(_tiny_plan(tmp_path), None)], gpus=4, device="cpu")


@pytest.mark.skipif(torch.cuda.is_available(), reason="this machine has CUDA")
def test_cuda_where_there_is_none():
    from pptl.run.launcher import check_device

    with pytest.raises(InputError, match=r"--device cuda: no CUDA device is available here .*use --device cpu"):
        check_device("cuda", 2)


def test_more_gpus_than_exist(monkeypatch):
    from pptl.run.launcher import check_device

    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 4)
    with pytest.raises(InputError, match=r"--gpus 8: only 4 CUDA devices visible here"):
        check_device("cuda", 8)
    assert check_device(None, 4) == "cuda"


# ----------------------------------------------------------------------------------------------
# Command line and torchrun


def test_cli_run_verify_then_compare_then_calibrate(tmp_path):
    plan = _tiny_plan(tmp_path, "zb-h1")
    runner = CliRunner()
    measured = tmp_path / "m.json"
    r = runner.invoke(app, ["run", str(plan), "--gpus", "2", "--device", "cpu", "--steps", "1", "--warmup", "0",
                            "--verify", "-o", str(measured)])
    assert r.exit_code == 0, r.output
    assert "zb-h1: 2 ranks on cpu (gloo)" in r.output
    assert "verify ok: loss rel err" in r.output
    assert "instrumentation overhead" in r.output
    r = runner.invoke(app, ["render", str(measured), "-o", str(tmp_path / "m.png")])
    assert r.exit_code == 0, r.output
    r = runner.invoke(app, ["compare", str(plan), str(measured), "-o", str(tmp_path / "cmp.png")])
    assert r.exit_code == 0, r.output
    assert "makespan: planned" in r.output and "note: the plan is in 'unit' and the run in 'ms'" in r.output
    assert (tmp_path / "cmp.png").read_bytes()[:4] == b"\x89PNG"
    cfg = tmp_path / "cfg.json"
    cfg.write_text(json.dumps({"schedule": "zb-h1", "pp": 2, "microbatches": 4, "workload": TINY}))
    r = runner.invoke(app, ["plan", str(cfg), "--costs-from", str(measured), "-o", str(tmp_path / "cal.json")])
    assert r.exit_code == 0, r.output
    cal = json.loads((tmp_path / "cal.json").read_text())
    assert cal["timeline"]["meta"]["units"] == "ms"
    costs = cal["config"]["costs"]
    assert costs["B"] == pytest.approx(costs["I"] + costs["W"])  # zb-h1 measured I and W only
    r = runner.invoke(app, ["compare", str(tmp_path / "cal.json"), str(measured), "--output", "json"])
    assert r.exit_code == 0, r.output
    assert json.loads(r.output)["scale"] == 1.0


@pytest.mark.parametrize("args,message", [
    (["--gpus", "3"], "the plan has pp=2 ranks; run it with --gpus 2"),
    (["--device", "tpu"], "--device: got 'tpu', expected one of cuda, cpu"),
    (["--steps", "0"], "--steps: got 0, expected an integer >= 1"),
], ids=["gpus", "device", "steps"])
def test_cli_run_usage_errors_exit_2(tmp_path, args, message):
    r = CliRunner().invoke(app, ["run", str(_tiny_plan(tmp_path)), *args, "-o", str(tmp_path / "m.json")])
    assert r.exit_code == 2, r.output
    assert message in r.output


def test_cli_and_core_do_not_import_torch():
    code = ("import sys; from typer.testing import CliRunner; from pptl.cli import app; "
            "CliRunner().invoke(app, ['--help']); CliRunner().invoke(app, ['run', '--help']); "
            "import pptl.run, pptl.compare, pptl.run.program, pptl.run.results; print('torch' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT)
    assert out.stdout.strip() == "False", out.stderr


def test_per_rank_entry_under_torchrun(tmp_path):
    plan = _tiny_plan(tmp_path, "gpipe")
    out = tmp_path / "m.json"
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    r = subprocess.run([sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node", "2",
                        "-m", "pptl.run", str(plan), "--device", "cpu", "--steps", "1", "--warmup", "0", "-o",
                        str(out)], capture_output=True, text=True, env=env, timeout=120)
    assert r.returncode == 0, r.stdout + r.stderr
    data = json.loads(out.read_text())
    assert data["meta"]["source"] == "measured" and len(data["events"]) == len(_training_schedule("gpipe", 2).ops)


def test_per_rank_entry_needs_torchrun():
    r = subprocess.run([sys.executable, "-m", "pptl.run", "plan.json"], capture_output=True, text=True, cwd=ROOT,
                       env={k: v for k, v in os.environ.items() if k not in ("RANK", "WORLD_SIZE")})
    assert r.returncode == 2
    assert "RANK and WORLD_SIZE not set: start this under torchrun, or use 'pptl run'" in r.stderr


# ----------------------------------------------------------------------------------------------
# Message modes: the tightened issue order (pure) and the deadlock argument, replayed


def _inline_replay(prog) -> list[str]:
    """Run every rank's issue order as the ``inline`` mode does on CUDA: one stream per rank, a SEND
    never blocks, a RECV blocks until its sender's stream has passed the matching SEND (NCCL pairs
    the k-th messages of a channel). Returns the ops left when nothing can move (empty: no deadlock)."""
    ops = prog.schedule.ops
    sent: dict = {}
    taken: dict = {}
    at = {rp.rank: 0 for rp in prog.ranks}
    moved = True
    while moved:
        moved = False
        for rp in prog.ranks:
            while at[rp.rank] < len(rp.issue):
                i = rp.issue[at[rp.rank]]
                ch = rp.channels.get(i)
                if ops[i].kind == "SEND":
                    sent.setdefault(ch, []).append(i)
                elif ops[i].kind == "RECV":
                    k = taken.get(ch, 0)
                    if len(sent.get(ch, [])) <= k:
                        break
                    taken[ch] = k + 1
                at[rp.rank] += 1
                moved = True
    return [ops[rp.issue[at[rp.rank]]].id for rp in prog.ranks if at[rp.rank] < len(rp.issue)]


def _sync_send_replay(prog) -> list[str]:
    """The ``sync-send`` mode: compute and SENDs on one stream per rank, each SEND blocking until its
    RECV is at the head of the receiver's channel stream (RECVs are on their channel, in issue
    order); a consumer waits for its RECV to complete."""
    s = prog.schedule
    ops = s.ops
    need = {v: [u for u, v2 in s.deps if v2 == v and ops[u].kind == "RECV"] for v in range(len(ops))}
    chan_recvs = {}
    for rp in prog.ranks:
        for i in rp.issue:
            if ops[i].kind == "RECV":
                chan_recvs.setdefault(rp.channels[i], []).append(i)
    head = {ch: 0 for ch in chan_recvs}
    done: set = set()
    at = {rp.rank: 0 for rp in prog.ranks}
    compute = {rp.rank: [i for i in rp.issue if ops[i].kind != "RECV"] for rp in prog.ranks}
    moved = True
    while moved:
        moved = False
        for rp in prog.ranks:
            seq = compute[rp.rank]
            while at[rp.rank] < len(seq):
                i = seq[at[rp.rank]]
                if ops[i].kind == "SEND":
                    ch = rp.channels[i]
                    r = chan_recvs[ch][head[ch]]
                    head[ch] += 1
                    done.add(r)
                elif not all(u in done for u in need[i]):
                    break
                at[rp.rank] += 1
                moved = True
    return [ops[compute[r][k]].id for r, k in at.items() if k < len(compute[r])]


@pytest.mark.parametrize("family", TRAINING)
def test_tightened_messages_keep_the_plan_and_cannot_deadlock(family):
    from pptl.run.program import tighten_messages

    s = _training_schedule(family, 4)
    prog = build_program(s)
    tight = tighten_messages(prog)
    ops = s.ops
    for old, rp in zip(prog.ranks, tight.ranks):
        assert sorted(rp.issue) == sorted(old.issue)
        pos = {i: k for k, i in enumerate(rp.issue)}
        for u, v in s.deps:
            if u in pos and v in pos:
                assert pos[u] < pos[v], (ops[u].id, ops[v].id)
        compute = [i for i in rp.issue if ops[i].kind not in ("SEND", "RECV")]
        assert compute == [i for i in old.issue if ops[i].kind not in ("SEND", "RECV")]
        for ch in set(rp.channels.values()):
            assert [i for i in rp.issue if rp.channels.get(i) == ch] == \
                [i for i in old.issue if old.channels.get(i) == ch]
        # A SEND follows its producer with only other messages between; a RECV likewise precedes its consumer.
        for k, i in enumerate(rp.issue):
            if ops[i].kind == "SEND":
                prev = next(j for j in reversed(rp.issue[:k]) if ops[j].kind not in ("SEND", "RECV"))
                assert (prev, i) in set(s.deps), ops[i].id
            if ops[i].kind == "RECV":
                nxt = next(j for j in rp.issue[k + 1:] if ops[j].kind not in ("SEND", "RECV"))
                assert (i, nxt) in set(s.deps), ops[i].id
    assert _inline_replay(tight) == []
    assert _sync_send_replay(tight) == []
    # sync-send moves the SENDs only: every other op keeps its place, and the order still cannot deadlock
    sends_only = tighten_messages(prog, receives=False)
    for old, rp in zip(prog.ranks, sends_only.ranks):
        assert [i for i in rp.issue if ops[i].kind != "SEND"] == [i for i in old.issue if ops[i].kind != "SEND"]
        pos = {i: k for k, i in enumerate(rp.issue)}
        assert all(pos[u] < pos[v] for u, v in s.deps if u in pos and v in pos)
    assert _sync_send_replay(sends_only) == []


def test_sync_send_posts_a_receive_where_its_data_arrives_not_before_its_consumer():
    """looped-bfs, pp 2, 8 micro-batches (F = 1, B = 2): rank 1 runs all eight stage-3 backwards
    before stage 1's. Stage 2's gradient for micro-batch 7 leaves rank 0 once rank 0 has run B s2 mb7
    (2 units after B s3 mb7's gradient reached it), so in the plan it arrives while rank 1 runs its
    third stage-3 backward (mb5): sync-send posts its RECV there; inline posts it right before
    B s1 mb7, after all eight."""
    from pptl.run.program import issued_for

    s = build_schedule(config_from_mapping({"schedule": "looped-bfs", "pp": 2, "vpp": 2, "microbatches": 8}))
    prog = build_program(s)
    names = lambda p: [s.ops[i].id.split("/")[-1] for i in p.ranks[1].issue]  # noqa: E731
    sync, inline = names(issued_for(prog, "sync-send")), names(issued_for(prog, "inline"))
    recv = "RECV_B s1 mb7 <-r0"
    assert sync.index("B s3 mb6") < sync.index(recv) < sync.index("B s3 mb4")
    assert inline.index(recv) == inline.index("B s1 mb7") - 1 > inline.index("B s3 mb0")
    assert issued_for(prog, "overlap") is prog


def test_replays_catch_a_deadlock():
    """The replays above can fail: rank 0 sending its activations only after the first backward,
    which needs them, deadlocks both modes."""
    from dataclasses import replace

    s = _training_schedule("1f1b", 2)
    prog = build_program(s)
    ops = s.ops
    r0 = prog.ranks[0]
    cut = r0.issue.index(next(i for i in r0.issue if ops[i].kind == "B")) + 1
    early = r0.issue[:cut]
    # The sends issued before that backward follow it, in their order (NCCL still pairs them right).
    late = [i for i in early if ops[i].kind != "SEND"] + [i for i in early if ops[i].kind == "SEND"]
    late += r0.issue[cut:]
    bad = replace(prog, ranks=(replace(r0, issue=tuple(late)), prog.ranks[1]))
    assert _inline_replay(bad) != [] and _sync_send_replay(bad) != []
    assert _inline_replay(prog) == [] and _sync_send_replay(prog) == []


@pytest.mark.parametrize("mode", ["inline", "overlap"])
def test_every_family_runs_and_verifies_in_each_message_mode(mode):
    """On CPU a mode changes only the issue order (gloo has no streams); the tightened order must still
    run every family, each lane in its planned order, with exact gradients."""
    from pptl.run import run_plans

    schedules = {n: _training_schedule(n, 4) for n in TRAINING}
    tls = run_plans([(s, None) for s in schedules.values()], gpus=4, device="cpu", steps=1, warmup=0, verify=True,
                    timeout=60, messages=mode)
    for (name, s), tl in zip(schedules.items(), tls):
        assert tl.meta.extra["messages"] == mode
        assert tl.meta.extra["verify"]["ok"], (name, tl.meta.extra["verify"])
        assert_runs_the_plans_order(s, tl, serial_lanes=("compute",))


def test_cli_run_refuses_an_unknown_message_mode(tmp_path):
    r = CliRunner().invoke(app, ["run", str(_tiny_plan(tmp_path)), "--messages", "eager", "-o", str(tmp_path / "m.json")])
    assert r.exit_code == 2, r.output
    assert "--messages: got 'eager', expected one of sync-send, overlap, inline" in r.output
    assert not (tmp_path / "m.json").exists()
