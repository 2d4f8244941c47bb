"""pptl whatif's inputs: straggler specs whose parts combine, hiccups at a micro-batch the plan has,
errors that name the plan, a plan refused where a measured run is needed, plans of one unit.

Every makespan is worked out by hand on plans small enough to walk: a chain of ops on one rank, and
1F1B on 2 ranks with 2 micro-batches (F 1, B 2, free messages: 3 x 3 = 9).
"""
from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from pptl.cli import app
from pptl.config import Costs
from pptl.errors import InputError
from pptl.ir import Op, Schedule
from pptl.whatif import Spread, monte_carlo, parse_straggler
from pptl.whatif.study import study_plans

RUNS = Path(__file__).parent / "data" / "runs"
TRACES = Path(__file__).parent / "data" / "traces"

#: One rank, five ops in a row, micro-batches 0..4: the makespan is their sum, 11.
CHAIN = [4.0, 1.0, 2.5, 3.0, 0.5]


def _chain() -> tuple[Schedule, Costs]:
    ops = [Op("F", 0, "compute", stage=0, mb=i, cost=f"c{i}") for i in range(len(CHAIN))]
    s = Schedule(family="hand", pp=1, num_stages=1, microbatches=len(CHAIN), ops=ops,
                 lanes={(0, "compute"): list(range(len(ops)))}, deps=[])
    return s, Costs(base={f"c{i}": d for i, d in enumerate(CHAIN)})


def _makespan(spec: str) -> float:
    s, costs = _chain()
    return float(monte_carlo(s, costs, Spread(stragglers=parse_straggler(spec)), samples=1).makespan[0])


@pytest.mark.parametrize("spec,want", [
    ("rank=0,x2,x1.5", 3 * 11.0),            # factors multiply: x3 (was x1.5 alone: 16.5)
    ("rank=0,+1,+1", 11.0 + 5 * 2),           # delays add: +2 on each of the 5 ops (was +1: 16)
    ("rank=0,+1@mb2,+1@mb3", 11.0 + 1 + 1),   # each hiccup on its own micro-batch (was mb 3 only: 12)
    ("rank=0,+1@mb2,+0.5@mb2", 11.0 + 1.5),   # two hiccups at one micro-batch add
    ("rank=0,x2,+1,+1@mb4", 2 * 11.0 + 5 * 1 + 1),
])
def test_the_parts_of_one_straggler_spec_combine(spec, want):
    assert _makespan(spec) == pytest.approx(want)


def test_a_spec_combines_as_the_same_parts_in_repeated_flags(tmp_path):
    r = CliRunner()
    plan = tmp_path / "p.json"
    assert r.invoke(app, ["plan", "-s", "1f1b", "--pp", "2", "-m", "2", "-o", str(plan)]).exit_code == 0
    # rank 1 runs F0 B0 F1 B1 back to back once F0 arrives (at 1); each is 1 longer: F0 1-3, B0 3-6,
    # F1 6-8, B1 8-11; rank 0's B1 waits for it: 11-13. 9 + 4 = 13 (mb 1 alone: 11)
    one = r.invoke(app, ["whatif", str(plan), "--straggler", "rank=1,+1@mb0,+1@mb1", "-n", "2", "--output", "json"])
    two = r.invoke(app, ["whatif", str(plan), "--straggler", "rank=1,+1@mb0", "--straggler", "rank=1,+1@mb1",
                         "-n", "2", "--output", "json"])
    assert one.exit_code == 0 and two.exit_code == 0, one.output + two.output
    a, b = json.loads(one.stdout), json.loads(two.stdout)
    assert a["plans"][0]["makespan"]["p50"] == b["plans"][0]["makespan"]["p50"] == pytest.approx(13.0)
    assert a["spread"] == "rank 1 +1 on each op of mb 0; rank 1 +1 on each op of mb 1"
    c = r.invoke(app, ["whatif", str(plan), "--straggler", "rank=1,x1.5,x2", "-n", "1"])
    assert c.stdout.splitlines()[0] == "1 sample, seed 0; spread: rank 1 x3"


def test_a_hiccup_is_on_each_op_of_its_micro_batch(tmp_path):
    r = CliRunner()
    plan = tmp_path / "p.json"
    assert r.invoke(app, ["plan", "-s", "1f1b", "--pp", "2", "-m", "2", "-o", str(plan)]).exit_code == 0
    # rank 1 runs F0 1-2, B0 2-4, then F1 and B1 each 2 longer: F1 4-7, B1 7-11; rank 0's B1 11-13:
    # 9 + 2 x 2 = 13 (the step grows by the delay once per op of that micro-batch on the rank)
    res = r.invoke(app, ["whatif", str(plan), "--straggler", "rank=1,+2@mb1", "-n", "1"])
    assert res.exit_code == 0, res.output
    lines = res.stdout.splitlines()
    assert lines[0] == "1 sample, seed 0; spread: rank 1 +2 on each op of mb 1"
    assert lines[2].split()[1:3] == ["9", "13"]


def test_an_overlapped_fb_counts_once_for_either_of_its_micro_batches():
    # F mb0 (4), FB of F mb1 with B mb0 (1), F mb2 (2.5): a hiccup of 2 at mb 0 is on the F and, once, on the FB
    ops = [Op("F", 0, "compute", stage=0, mb=0, cost="c0"),
           Op("FB", 0, "compute", stage=0, mb=1, pair=(0, 0, 0), cost="c1"),
           Op("F", 0, "compute", stage=0, mb=2, cost="c2")]
    s = Schedule(family="hand", pp=1, num_stages=1, microbatches=3, ops=ops, lanes={(0, "compute"): [0, 1, 2]},
                 deps=[])
    costs = Costs(base={"c0": 4.0, "c1": 1.0, "c2": 2.5})
    for spec, want in (("rank=0,+2@mb0", 7.5 + 4), ("rank=0,+2@mb1", 7.5 + 2), ("rank=0,+2@mb2", 7.5 + 2)):
        out = monte_carlo(s, costs, Spread(stragglers=parse_straggler(spec)), samples=1)
        assert out.makespan.tolist() == [want], spec


def _plans(tmp_path: Path) -> dict[str, Path]:
    r = CliRunner()
    out = {}
    for name, args in (("p4", ["-s", "1f1b", "--pp", "4", "-m", "8"]), ("p2", ["-s", "1f1b", "--pp", "2", "-m", "4"]),
                       ("dp", ["-s", "dualpipe", "--pp", "2", "-m", "4"])):
        out[name] = tmp_path / f"{name}.json"
        assert r.invoke(app, ["plan", *args, "-o", str(out[name])]).exit_code == 0
    return out


@pytest.mark.parametrize("plans,spec,msg", [
    (["p4"], "rank=1,+2@mb8", "micro-batch 8 is not in {p4} (micro-batches 0-7)"),
    # DualPipe numbers micro-batches per direction: 4 in all, 0-1 in each
    (["dp"], "rank=0,+1@mb2", "micro-batch 2 is not in {dp} (micro-batches 0-1 in each of its 2 directions)"),
    (["p4", "p2"], "rank=3,x1.3", "rank 3 is not in {p2} (ranks 0-1)"),
    (["p4", "p2"], "rank=1,+1@mb5", "micro-batch 5 is not in {p2} (micro-batches 0-3)"),
])
def test_a_straggler_outside_a_plan_is_refused_naming_the_plan(tmp_path, plans, spec, msg):
    files = _plans(tmp_path)
    res = CliRunner().invoke(app, ["whatif", *(str(files[p]) for p in plans), "--straggler", spec, "-n", "2"])
    assert res.exit_code == 2, res.output
    assert res.stderr.strip().splitlines() == ["error: --straggler: " + msg.format(**{k: v for k, v in files.items()})]


def test_the_last_micro_batch_of_each_direction_is_accepted(tmp_path):
    files = _plans(tmp_path)
    res = CliRunner().invoke(app, ["whatif", str(files["dp"]), "--straggler", "rank=0,+1@mb1", "-n", "1"])
    assert res.exit_code == 0, res.output


def test_a_plan_is_refused_where_a_measured_run_is_needed(tmp_path):
    files = _plans(tmp_path)
    with pytest.raises(InputError, match=r"^.*p4.json is a plan, not a measured run; --from takes a 'pptl run -o' "
                                         r"timeline \(or a profiler trace\)$"):
        study_plans([files["p4"]], measured=files["p4"], samples=1)
    # a timeline that says it was planned (what a simulated plan's timeline saves) is no run either
    data = json.loads((RUNS / "1f1b_cpu.measured.json").read_text())
    data["meta"]["source"] = "planned"
    planned = tmp_path / "planned.json"
    planned.write_text(json.dumps(data))
    res = CliRunner().invoke(app, ["whatif", str(files["p4"]), "--from", str(planned), "-n", "1"])
    assert res.exit_code == 2, res.output
    assert res.stderr.strip().splitlines() == [f"error: {planned} is a planned timeline, not a measured run; --from "
                                               f"takes a 'pptl run -o' timeline (or a profiler trace)"]


@pytest.mark.parametrize("run", [RUNS / "1f1b_cpu.measured.json", TRACES / "Schedule1F1B"], ids=["run", "profiler"])
def test_measured_runs_and_profiler_traces_are_still_taken(tmp_path, run):
    files = _plans(tmp_path)
    res = CliRunner().invoke(app, ["whatif", str(files["p4"]), "--from", str(run), "-n", "2"])
    assert res.exit_code == 0, res.output
    assert res.stdout.splitlines()[0].startswith(f"2 samples, seed 0; spread: measured {run} ")


def test_plans_in_different_units_are_refused_side_by_side(tmp_path):
    files = _plans(tmp_path)
    ms = tmp_path / "ms.json"
    data = json.loads(files["p2"].read_text())
    data["schedule"].setdefault("meta", {})["units"] = "ms"  # as pptl tune --costs-from writes its plan
    ms.write_text(json.dumps(data))
    r = CliRunner()
    res = r.invoke(app, ["whatif", str(files["p2"]), str(ms), "--straggler", "rank=1,+2", "-n", "1"])
    assert res.exit_code == 2, res.output
    assert res.stderr.strip().splitlines() == [
        f"error: {ms} is in 'ms' and {files['p2']} in cost-model units: plans side by side share one unit; compare "
        f"plans of one unit, or give --from a measured run (every plan then takes its costs)"]
    # alone, each is fine and labelled in its own unit
    one = r.invoke(app, ["whatif", str(ms), "-n", "1"])
    assert one.exit_code == 0 and one.stdout.splitlines()[1].endswith("(makespan, ms)"), one.output


def test_the_figure_subtitle_reads_as_a_phrase(tmp_path):
    from pptl.whatif.figure import whatif_figure

    files = _plans(tmp_path)
    fig = whatif_figure(study_plans([files["p2"]], samples=2))
    titles = [ax.get_title() for ax in fig.axes]
    assert "p2.json (1f1b, m=4): timeline at mean durations, colour = criticality" in titles
