"""Timelines and traces as hostile input, and what compare and explain make of them: units that convert,
events that contradict each other or their metadata, error lines of bounded length, one set of
measured rules for check, compare and explain."""
from __future__ import annotations

import copy
import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from pptl import explain as explain_module
from pptl.cli import app
from pptl.compare import compare_timelines, comparison_lines
from pptl.errors import InputError
from pptl.explain import explain
from pptl.formats._quote import int_ranges, quoted
from pptl.formats.kineto import parse_trace
from pptl.formats.loader import load_any
from pptl.timeline import Event, Timeline, TimelineMeta

runner = CliRunner()
DATA = Path(__file__).resolve().parent / "data"
RUNS = DATA / "runs"
#: An error line longer than this quotes a value without a bound.
_SHORT = 400


def _measured(name: str = "1f1b_h200") -> dict:
    return json.loads((RUNS / f"{name}.measured.json").read_text())


def _write(tmp_path: Path, data: object, name: str = "tl.json") -> Path:
    path = tmp_path / name
    path.write_text(json.dumps(data))
    return path


def _refused(args: list[str]) -> str:
    """The one error line of a command that must exit 2."""
    r = runner.invoke(app, args)
    assert r.exit_code == 2, r.output
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: "), r.stderr[:1000]
    return lines[0]


# ---------------------------------------------------------------------------------------------
# 1. compare: a plan in another time unit converts exactly; only cost-model units are fitted


def _tl(units: str, times: list[tuple[float, float]], source: str) -> Timeline:
    ev = [Event(f"r0/compute/F s0 mb{k}", 0, "compute", a, b, "F", stage=0, mb=k, chunk=0)
          for k, (a, b) in enumerate(times)]
    return Timeline(ev, TimelineMeta(source=source, units=units, family="1f1b", pp=1, microbatches=len(times)))


def test_a_plan_in_ms_against_a_run_in_us_is_converted_not_fitted() -> None:
    # Plan: two F of 2 ms back to back (makespan 4 ms). Run: the same two F of 2.2 ms (2200 us),
    # makespan 4400 us. Error: (4000 - 4400) / 4400 = -1/11 = -9.1%; F mean 2000 us vs 2200 us, -9.1%.
    plan = _tl("ms", [(0, 2), (2, 4)], "planned")
    run = _tl("us", [(0, 2200), (2200, 4400)], "measured")
    cmp = compare_timelines(plan, run)
    assert cmp.scale == 1000.0 and not cmp.shapes_only
    assert cmp.makespan_planned == 4000.0 and cmp.makespan_measured == 4400.0
    assert cmp.makespan_error == pytest.approx(-1 / 11)
    assert [(k.kind, k.planned_mean, k.measured_mean) for k in cmp.kinds] == [("F", 2000.0, 2200.0)]
    head = comparison_lines(cmp)[0]
    assert head == "makespan: planned 4 ms, measured 4.4 ms (error -9.1%)"
    assert cmp.notes == ["the plan is in 'ms' and the run in 'us': plan times are converted (x1000)"]


@pytest.mark.parametrize(("plan_units", "run_units", "scale"), [("s", "ns", 1e9), ("us", "ms", 1e-3),
                                                                ("ns", "s", 1e-9), ("ms", "s", 1e-3)])
def test_every_pair_of_time_units_converts_by_its_power_of_ten(plan_units: str, run_units: str,
                                                               scale: float) -> None:
    cmp = compare_timelines(_tl(plan_units, [(0, 1)], "planned"), _tl(run_units, [(0, 3)], "measured"))
    assert cmp.scale == scale and not cmp.shapes_only
    assert cmp.makespan_planned == pytest.approx(scale)


def test_a_plan_in_cost_model_units_is_still_fitted_to_the_run() -> None:
    cmp = compare_timelines(_tl("unit", [(0, 1), (1, 2)], "planned"), _tl("ms", [(0, 3), (3, 6)], "measured"))
    assert cmp.shapes_only and cmp.scale == 3.0 and cmp.makespan_error == 0
    assert "by construction" in comparison_lines(cmp)[0]


def test_compare_reports_the_same_error_whichever_unit_the_run_is_in(tmp_path: Path) -> None:
    cal = tmp_path / "cal.json"
    r = runner.invoke(app, ["plan", str(RUNS / "1f1b_plan.json"), "--costs-from", str(RUNS / "1f1b_h200.measured.json"),
                            "-o", str(cal)])
    assert r.exit_code == 0, r.output
    d = _measured()
    d["meta"]["units"] = "us"
    for e in d["events"]:
        e["start"] *= 1000
        e["end"] *= 1000
    in_us = _write(tmp_path, d, "m_us.json")
    outs = []
    for run in (RUNS / "1f1b_h200.measured.json", in_us):
        r = runner.invoke(app, ["compare", str(cal), str(run)])
        assert r.exit_code == 0, r.output
        outs.append(r.stdout.splitlines())
    ms, us = outs
    assert ms[0] == us[0] == "makespan: planned 117.5 ms, measured 118.8 ms (error -1.1%)"
    f_row = "F         32       3.212       3.212    +0.0%"
    assert f_row in ms and f_row in us


# ---------------------------------------------------------------------------------------------
# 2. a repeated op id is refused


def test_a_timeline_that_lists_its_events_twice_is_refused(tmp_path: Path) -> None:
    d = _measured()
    first = d["events"][0]["op"]
    d["events"] += copy.deepcopy(d["events"])
    path = _write(tmp_path, d, "dup_all.json")
    for cmd in ("check", "render", "explain"):
        assert _refused([cmd, str(path)]) == f"error: {path}: events[160]: op '{first}' appears twice (events[0])"


def test_one_repeated_event_is_refused_by_the_reader() -> None:
    ev = {"op": "r0/compute/F s0 mb0", "rank": 0, "lane": "compute", "kind": "F", "start": 0, "end": 1}
    other = {**ev, "op": "r0/compute/F s0 mb1", "start": 1, "end": 2}
    data = {"format": "pptl-timeline", "version": 1, "events": [ev, other, {**ev, "start": 5, "end": 6}]}
    from pptl.formats.timeline import timeline_from_dict

    with pytest.raises(InputError, match=r"^t: events\[2\]: op 'r0/compute/F s0 mb0' appears twice \(events\[0\]\)$"):
        timeline_from_dict(data, source="t")


# ---------------------------------------------------------------------------------------------
# 3. ranks, pp and version


def test_a_rank_its_op_id_contradicts_is_refused(tmp_path: Path) -> None:
    d = _measured()
    op = d["events"][0]["op"]
    assert op.startswith("r2/")
    d["events"][0]["rank"] = 9
    path = _write(tmp_path, d, "rank9.json")
    for cmd in ("check", "render", "explain"):
        assert _refused([cmd, str(path)]) == f"error: {path}: events[0]: rank 9, but its op id '{op}' names rank 2"


@pytest.mark.parametrize("rank", [4, 9])  # 4: the first rank past pp 4's
def test_a_rank_outside_meta_pp_is_refused(tmp_path: Path, rank: int) -> None:
    d = _measured()
    e = d["events"][0]
    e["rank"] = rank
    e["op"] = f"r{rank}/" + e["op"].split("/", 1)[1]
    path = _write(tmp_path, d)
    assert _refused(["check", str(path)]) == \
        f"error: {path}: events[0].rank: got {rank}, expected a rank in 0..3 (meta.pp is 4)"


def test_a_lane_its_op_id_contradicts_is_refused(tmp_path: Path) -> None:
    d = _measured()
    d["events"][0]["lane"] = "compute"
    path = _write(tmp_path, d)
    assert _refused(["check", str(path)]) == (f"error: {path}: events[0]: lane 'compute', but its op id "
                                              f"'{d['events'][0]['op']}' names lane 'recv'")


@pytest.mark.parametrize(("field", "value", "expected"), [
    ("pp", -3, "field 'meta.pp': got -3, expected an integer in 1..10000000"),
    ("pp", 0, "field 'meta.pp': got 0, expected an integer in 1..10000000"),
    ("vpp", 0, "field 'meta.vpp': got 0, expected an integer in 1..10000000"),
    ("microbatches", -1, "field 'meta.microbatches': got -1, expected an integer in 0..10000000"),
], ids=["pp-3", "pp0", "vpp0", "microbatches-1"])
def test_non_positive_counts_in_meta_are_refused(tmp_path: Path, field: str, value: int, expected: str) -> None:
    d = _measured()
    d["meta"][field] = value
    path = _write(tmp_path, d)
    assert _refused(["check", str(path)]) == f"error: {path}: {expected}"


@pytest.mark.parametrize("version", [0, -1])
def test_versions_below_1_are_refused(tmp_path: Path, version: int) -> None:
    d = _measured()
    d["version"] = version
    path = _write(tmp_path, d)
    assert _refused(["check", str(path)]) == (f"error: {path}: field 'version': got {version}, expected 1 (no timeline "
                                              "format had a version below 1)")


def test_a_timeline_that_does_not_know_its_pp_round_trips(tmp_path: Path) -> None:
    tl = Timeline([Event("r5/compute/F s0 mb0", 5, "compute", 0, 1, "F")], TimelineMeta(source="measured"))
    written = tl.to_dict()
    assert "pp" not in written["meta"]  # 0 means unknown, and is written as no field at all
    back = load_any(_write(tmp_path, written)).timeline
    assert back.meta.pp == 0 and back.events == tl.events


# ---------------------------------------------------------------------------------------------
# 4. explain: one mean per kind


def _two_ranks() -> Timeline:
    def f(r: int, mb: int, a: float, b: float) -> Event:
        return Event(f"r{r}/compute/F s{r} mb{mb}", r, "compute", a, b, "F", stage=r, mb=mb, chunk=0)

    # rank 0: F 1 ms then F 3 ms; rank 1: each F 2 ms, as soon as its input is there. Mean F: 2 ms.
    return Timeline([f(0, 0, 0, 1), f(0, 1, 1, 4), f(1, 0, 1, 3), f(1, 1, 4, 6)],
                    TimelineMeta(source="measured", units="ms", pp=2))


def test_explain_splits_by_the_kind_mean_worked_by_hand() -> None:
    # The replay at the mean (2 ms each): r0 [0,2] [2,4], r1 [2,4] [4,6]; at the measured durations:
    # r0 [0,1] [1,4], r1 [1,3] [4,6]. Rank 1 waits [0,1] for F s0 mb0: the mean replay leaves 2, the
    # measured 1, so 1 ms of bubble. It waits [3,4] for F s0 mb1: the mean replay leaves no gap, the
    # measured 1 ms, so 1 ms of imbalance. Rank 0 is idle after 4 ms, as in both replays: 2 ms of bubble.
    x = explain(_two_ranks())
    assert [(r.rank, r.busy, r.idle, r.parts()) for r in x.ranks] == [
        (0, 4.0, 2.0, {"bubble": 2.0, "late_input": 0.0, "transfer": 0.0, "host": 0.0, "imbalance": 0.0}),
        (1, 4.0, 2.0, {"bubble": 1.0, "late_input": 0.0, "transfer": 0.0, "host": 0.0, "imbalance": 1.0})]


def test_explain_sums_each_kinds_durations_once(monkeypatch: pytest.MonkeyPatch) -> None:
    # Summing a kind's durations once per event made explain quadratic (100,000 events: a minute).
    # Count the sums over lists as long as a kind's events: their number must not grow with the events.
    def sums_for(m: int) -> int:
        calls = []

        def counting_sum(xs, *a):  # type: ignore[no-untyped-def]
            xs = list(xs)
            if len(xs) >= m:
                calls.append(len(xs))
            return sum(xs, *a)

        ev = [Event(f"r{i % 2}/compute/F s{i % 2} mb{i // 2}", i % 2, "compute", i // 2 + (i % 2) * 0.5,
                    i // 2 + (i % 2) * 0.5 + 0.4, "F", stage=i % 2, mb=i // 2, chunk=0) for i in range(2 * m)]
        monkeypatch.setattr(explain_module, "sum", counting_sum, raising=False)
        try:
            explain(Timeline(ev, TimelineMeta(source="measured", units="ms", pp=2)))
        finally:
            monkeypatch.delattr(explain_module, "sum")
        return len(calls)

    assert sums_for(20) == sums_for(200) == 1


# ---------------------------------------------------------------------------------------------
# 5. error lines are bounded


def test_quoted_bounds_strings_numbers_and_containers() -> None:
    assert quoted("abc") == "'abc'"
    assert quoted("x" * 20_000_000) == "'" + "x" * 60 + "... (20,000,000 characters)"
    assert quoted(["ms"] * 5_000_000) == "a list of 5,000,000 items"
    assert quoted([1, 2, 3]) == "[1, 2, 3]"
    assert quoted({"a": 1}) == "{'a': 1}"
    assert quoted([[1]]) == "a list of 1 item"
    assert quoted({"k": ["x" * 100]}) == "an object of 1 key"
    assert quoted(10 ** 100) == "an integer of more than 60 digits"
    assert quoted(None) == "None" and quoted(True) == "True" and quoted(1.5) == "1.5"


def test_int_ranges_summarise_runs() -> None:
    assert int_ranges(range(1, 65535)) == "1-65534"
    assert int_ranges([7, 1, 2, 3, 9, 10]) == "1-3, 7, 9, 10"
    assert int_ranges(range(0, 40, 2), most=3) == "0, 2, 4 and 17 more runs"


def test_a_20_mb_value_gives_a_short_error_line(tmp_path: Path) -> None:
    ev = {"op": "r0/compute/F s0 mb0", "rank": "x" * 20_000_000, "lane": "compute", "kind": "F", "start": 0, "end": 1}
    path = _write(tmp_path, {"format": "pptl-timeline", "version": 1, "events": [ev]}, "big_err.json")
    line = _refused(["check", str(path)])
    assert line == (f"error: {path}: events[0].rank: got '{'x' * 60}... (20,000,000 characters), expected int")


def test_a_5m_item_list_in_meta_gives_a_short_error_line(tmp_path: Path) -> None:
    d = _measured()
    d["meta"]["units"] = ["ms"] * 5_000_000
    path = _write(tmp_path, d)
    assert _refused(["check", str(path)]) == (f"error: {path}: field 'meta.units': got a list of 5,000,000 items, "
                                              "expected a string")


def test_a_deep_structure_is_named_not_walked(tmp_path: Path) -> None:
    deep: object = 0
    for _ in range(500):
        deep = [deep]
    d = _measured()
    d["events"][3]["stage"] = deep
    path = _write(tmp_path, d)
    assert _refused(["check", str(path)]) == (f"error: {path}: events[3].stage: got a list of 1 item, expected an "
                                              "integer in -10000000..10000000")


def test_a_long_event_list_type_and_trace_range_give_short_error_lines(tmp_path: Path) -> None:
    path = _write(tmp_path, {"rank": 0, "events": [{"type": "F" * 1_000_000, "start_time": 0, "end_time": 1,
                                                   "minibatch": 0}]}, "ev.json")
    assert len(_refused(["check", str(path)])) < _SHORT
    bad = {"traceEvents": [{"ph": "X", "name": "PP:" + "x" * 1_000_000, "ts": "late", "dur": 1}]}
    with pytest.raises(InputError) as e:
        parse_trace(bad, "t.json")
    assert len(str(e.value)) < _SHORT and "... (1,000,003 characters)" in str(e.value)


def test_a_long_csv_cell_gives_a_short_error_line(tmp_path: Path) -> None:
    path = tmp_path / "s.csv"
    path.write_text("0F0," + "Q" * 100_000 + "\n")
    line = _refused(["render", str(path)])  # check reports a bad cell as PP001; render refuses the file
    assert len(line) < _SHORT and "(100,000 characters) is not an action" in line


def test_missing_ranks_are_summarised(tmp_path: Path) -> None:
    path = _write(tmp_path, {"rank": 65535, "events": [{"type": "F", "start_time": 0, "end_time": 1, "minibatch": 0}]},
                  "ev.json")
    notes = load_any(path).notes
    assert "no file for ranks 0-65534" in notes
    assert max(map(len, notes)) < _SHORT


# ---------------------------------------------------------------------------------------------
# 6. check applies the measured rules to imported traces, as compare and explain do


def test_check_reports_the_measurement_errors_explain_and_compare_report() -> None:
    trace = DATA / "traces" / "Schedule1F1B"
    r = runner.invoke(app, ["check", str(trace)])
    assert r.exit_code == 1, r.output
    found = [line for line in r.stdout.splitlines() if ": PP090 error: measurement error: " in line]
    assert len(found) == 18 and r.stdout.splitlines()[-1] == f"{trace}: invalid (18 errors), 160 ops checked"
    x = runner.invoke(app, ["explain", str(trace), "--output", "json"])
    assert x.exit_code == 0, x.output
    said = json.loads(x.stdout)["measurement_errors"]
    assert [e["message"] for e in said] == [line.split(": PP090 error: ", 1)[1] for line in found]
    c = runner.invoke(app, ["compare", str(Path(__file__).resolve().parents[1] / "fixtures" / "1f1b.yaml"), str(trace)])
    assert c.exit_code == 0, c.output
    assert "measurement error (PP090): 18 event pairs" in c.stdout


def test_check_finds_no_measurement_error_where_there_is_none() -> None:
    trace = DATA / "traces" / "ScheduleZBVZeroBubble"
    r = runner.invoke(app, ["check", str(trace)])
    assert r.exit_code == 0, r.output
    assert r.stdout.splitlines()[-1] == f"{trace}: ok, 408 ops checked"


# ---------------------------------------------------------------------------------------------
# 7. a clock tolerance longer than the step is refused


def _with_tolerance(tmp_path: Path, tol: object) -> Path:
    d = _measured("1f1b_cpu")  # 6 measurement errors at the default tolerance; makespan 228.05 ms
    d["meta"]["extra"]["clock"] = {"tolerance_ms": tol}
    return _write(tmp_path, d)


def test_a_tolerance_longer_than_the_makespan_is_refused(tmp_path: Path) -> None:
    path = _with_tolerance(tmp_path, 1e300)
    assert _refused(["check", str(path)]) == (
        f"error: {path}: field 'meta.extra.clock.tolerance_ms': got 1e+300 ms, longer than the timeline's makespan "
        "(228.053 ms): a tolerance that long would pass any measurement error; expected the clocks' uncertainty")
    assert _refused(["explain", str(path)]).startswith(f"error: {path}: field 'meta.extra.clock.tolerance_ms'")


@pytest.mark.parametrize("tol", [-1, "0.01", [0.01]], ids=["negative", "text", "list"])
def test_a_tolerance_that_is_no_duration_is_refused(tmp_path: Path, tol: object) -> None:
    path = _with_tolerance(tmp_path, tol)
    assert _refused(["check", str(path)]) == (f"error: {path}: field 'meta.extra.clock.tolerance_ms': got "
                                              f"{quoted(tol)}, expected a number of ms >= 0")


def test_a_tolerance_within_the_makespan_still_applies(tmp_path: Path) -> None:
    r = runner.invoke(app, ["check", str(_with_tolerance(tmp_path, 0.01))])
    assert r.exit_code == 1 and r.stdout.splitlines()[-1].endswith("invalid (6 errors), 160 ops checked"), r.output
    r = runner.invoke(app, ["check", str(_with_tolerance(tmp_path, 200))])
    assert r.exit_code == 0 and r.stdout.splitlines()[-1].endswith("ok, 160 ops checked"), r.output


def test_a_long_duplicate_key_gives_a_short_error_line(tmp_path: Path) -> None:
    key = "k" * 1_000_000
    path = tmp_path / "c.json"
    path.write_text(f'{{"{key}": 1, "{key}": 2}}')
    line = _refused(["check", str(path)])
    assert line == f"error: {path}: duplicate key '{'k' * 60}... (1,000,000 characters)"


@pytest.mark.parametrize(("text", "expected"), [
    ('{"schedule": "1f1b", "pp": 2, "pp": 3, "microbatches": 4}', "duplicate key 'pp'"),
    ('{"schedule": "1f1b", "pp": NaN, "microbatches": 4}', "'NaN' is not a number JSON allows"),
], ids=["duplicate-key", "nan"])
def test_a_json_config_read_by_the_trace_reader_is_as_strict_as_any(tmp_path: Path, text: str, expected: str) -> None:
    # A .json that does not open with pptl's "format" goes through the profiler reader first; a
    # config it hands back was parsed leniently, so "pp" silently read as its last value.
    path = tmp_path / "c.json"
    path.write_text(text)
    assert _refused(["check", str(path)]) == f"error: {path}: {expected}"
