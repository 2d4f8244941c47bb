"""``pptl explain``: each rank's idle time split into bubble, late input, transfer, host gap and
imbalance; the parts add up to the idle time; the critical path; the CLI."""
from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import pytest
from kineto_synth import rank_traces, write
from typer.testing import CliRunner

from pptl.cli import app
from pptl.config import config_from_mapping
from pptl.explain import PARTS, explain
from pptl.formats.loader import load_any
from pptl.formats.plan import dumps, plan_to_dict
from pptl.schedules import build_schedule
from pptl.simulate import simulate
from pptl.timeline import Event, Timeline, TimelineMeta

runner = CliRunner()
DATA = Path(__file__).resolve().parent / "data"


def _sim(family: str, **cfg):
    s = build_schedule(config_from_mapping({"schedule": family, "pp": 4, "microbatches": 8, **cfg}))
    sim = simulate(s)
    tl = sim.timeline()
    return s, replace(tl, meta=replace(tl.meta, source="measured"))


def _assert_sums(x) -> None:
    for r in x.ranks:
        assert all(getattr(r, p) >= -1e-9 for p in PARTS), r
        assert r.parts_sum == pytest.approx(r.idle, rel=0.01, abs=1e-9), r


@pytest.mark.parametrize("family,cfg", [("1f1b", {}), ("gpipe", {}), ("interleaved-1f1b", {"vpp": 2}),
                                        ("zbv", {}), ("dualpipev", {})])
def test_a_timeline_that_runs_as_planned_is_all_bubble(family: str, cfg: dict) -> None:
    s, tl = _sim(family, **cfg)
    x = explain(tl, s)
    _assert_sums(x)
    for r in x.ranks:
        assert r.bubble == pytest.approx(r.idle)
        assert r.late_input == r.transfer == r.host == r.imbalance == 0


def test_1f1b_bubble_is_the_textbook_one() -> None:
    s, tl = _sim("1f1b", costs={"F": 1, "B": 2})
    x = explain(tl)  # the facts derived from the measured ops alone
    assert [r.bubble for r in x.ranks] == pytest.approx([3 * (1 + 2)] * 4)


def test_transfer_time_is_told_from_waiting() -> None:
    """With a message latency, each crossing's wait is the schedule's bubble plus the transfer."""
    s, tl = _sim("1f1b", comm={"latency": 0.25})
    x = explain(tl, s)
    _assert_sums(x)
    r1 = x.ranks[1]
    assert r1.transfer > 0 and r1.late_input >= 0
    # rank 3's first forward waits three stages of forwards (bubble) and three transfers: the
    # transfer into it is the last hop only; the earlier hops made its producer late.
    first = min((e for e in tl.events if e.rank == 3 and e.lane == "compute"), key=lambda e: e.start)
    assert first.start == pytest.approx(3 * 1 + 3 * 0.25)
    assert x.ranks[3].transfer >= 0.25


def test_host_gap_late_input_and_its_root() -> None:
    """pp=2, 1F1B, two micro-batches, every op 1 long: rank 0 launches its second forward 2 late."""
    meta = TimelineMeta(source="measured", units="ms", pp=2, microbatches=2,
                        extra={"launch": {"r0/compute/F s0 mb1": 3}})
    rows = [(0, "F", 0, 0, 1), (0, "F", 1, 3, 4), (0, "B", 0, 4, 5), (0, "B", 1, 6, 7),
            (1, "F", 0, 1, 2), (1, "B", 0, 2, 3), (1, "F", 1, 4, 5), (1, "B", 1, 5, 6)]
    ev = [Event(f"r{r}/compute/{k} s{r} mb{mb}", r, "compute", a, b, k, stage=r, mb=mb) for r, k, mb, a, b in rows]
    x = explain(Timeline(ev, meta))
    _assert_sums(x)
    r0, r1 = x.ranks
    assert (r0.host, r0.bubble, r0.late_input) == pytest.approx((2, 1, 0))  # its host; then r1's B1, as planned
    assert (r1.bubble, r1.late_input, r1.host) == pytest.approx((2, 1, 0))  # F1 came 1 later than planned
    assert [(li.op, li.root) for li in x.late] == [("r1/compute/F s1 mb1", "r0/compute/F s0 mb1")]
    assert x.late[0].reason.startswith("host gap before it")
    assert [s.op for s in x.path] == ["r0/compute/F s0 mb0", "r0/compute/F s0 mb1", "r1/compute/F s1 mb1",
                                      "r1/compute/B s1 mb1", "r0/compute/B s0 mb1"]
    assert [s.via for s in x.path] == ["", "lane", "data", "lane", "data"]
    assert any("kernel launches: the GPU waited 2 " in n for n in x.notes)


def test_stage_imbalance() -> None:
    """The last stage is twice as slow: the others wait for it beyond the balanced bubble."""
    s, tl = _sim("1f1b", costs={"F": 1, "B": 2, "stages": {"3": {"F": 2, "B": 4}}})
    x = explain(tl, s)
    _assert_sums(x)
    assert x.ranks[0].imbalance > 0 and x.ranks[3].imbalance == pytest.approx(0)
    assert all(r.late_input == pytest.approx(0) and r.host == pytest.approx(0) for r in x.ranks)


def test_critical_path_ends_at_the_last_op() -> None:
    s, tl = _sim("zbv")
    x = explain(tl, s)
    assert x.path[-1].end == pytest.approx(tl.start + tl.makespan)
    assert x.path[0].start == pytest.approx(tl.start)
    assert all(b.start >= a.end - 1e-9 for a, b in zip(x.path, x.path[1:]))


def test_imported_traces_sum_to_their_idle(tmp_path: Path) -> None:
    s, tl = _sim("interleaved-1f1b", vpp=2)
    loaded = load_any(write(tmp_path / "t", rank_traces(s, simulate(s), fsdp=True)))
    x = explain(loaded.timeline)
    _assert_sums(x)
    assert all(r.late_input == pytest.approx(0, abs=1e-6) for r in x.ranks)


def test_cli_text_json_and_figure(tmp_path: Path) -> None:
    s, tl = _sim("zbv")
    measured = tmp_path / "m.json"
    measured.write_text(json.dumps(tl.to_dict()))
    r = runner.invoke(app, ["explain", str(measured), "-o", str(tmp_path / "x.png")])
    assert r.exit_code == 0, r.output
    assert "schedule bubble" in r.stdout and "critical path" in r.stdout
    assert (tmp_path / "x.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    r = runner.invoke(app, ["explain", str(measured), "--output", "json"])
    data = json.loads(r.stdout)
    assert [row["rank"] for row in data["ranks"]] == [0, 1, 2, 3]
    assert set(PARTS) <= set(data["ranks"][0])


def test_cli_refuses_a_plan_of_another_run(tmp_path: Path) -> None:
    s, tl = _sim("zbv")
    measured = tmp_path / "m.json"
    measured.write_text(json.dumps(tl.to_dict()))
    other = build_schedule(config_from_mapping({"schedule": "1f1b", "pp": 2, "microbatches": 2}))
    plan = tmp_path / "p.json"
    plan.write_text(dumps(plan_to_dict(other)))
    r = runner.invoke(app, ["explain", str(measured), "--plan", str(plan)])
    assert r.exit_code == 2 and "the plan is 1f1b, the run is zbv" in r.stderr
    assert len(r.stderr.strip().splitlines()) == 1
    r = runner.invoke(app, ["explain", str(measured), "-o", str(tmp_path / "x.gif")])
    assert r.exit_code == 2 and "cannot draw to '.gif'" in r.stderr


@pytest.mark.parametrize("name", ["1f1b_cpu.measured.json", "zbv_cpu.measured.json"])
def test_pptl_run_output_sums_to_its_idle(name: str) -> None:
    """Recorded with pptl run --device cpu (gloo), pp=4, 8 micro-batches (tests/data/README.md)."""
    tl = load_any(DATA / "runs" / name).timeline
    x = explain(tl)
    _assert_sums(x)
    assert sum(r.transfer for r in x.ranks) > 0  # RECV events tell waiting from transfer


def test_cli_takes_one_trace_file_per_rank(tmp_path: Path) -> None:
    s, _ = _sim("zbv")
    folder = write(tmp_path / "t", rank_traces(s, simulate(s)))
    files = [str(f) for f in sorted(folder.iterdir())]
    r = runner.invoke(app, ["explain", *files, "--output", "json"])
    assert r.exit_code == 0, r.output
    assert [row["rank"] for row in json.loads(r.stdout)["ranks"]] == [0, 1, 2, 3]
    r = runner.invoke(app, ["explain", files[0], str(tmp_path / "missing.json")])
    assert r.exit_code == 2 and len(r.stderr.strip().splitlines()) == 1
