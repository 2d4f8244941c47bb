"""Boundaries of the modules no earlier wave of hand-written mutants reached: whatif's step opening
and figure, the CLI glue of plan, check, render and tune, and explain's reading of a run.

Hand-written mutants (/work/wt/_mutants/wave3_leftovers.py) showed no test held these. Every expected
value is worked out by hand in the test's docstring or comments, from the semantics the modules
state, not read off the code's output.
"""
from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from pptl.cli import app
from pptl.whatif.opening import Opening, fit_opening, opening_factors

runner = CliRunner()
FIXTURES = Path(__file__).resolve().parent.parent / "fixtures"
CONFIG = str(FIXTURES / "1f1b.yaml")
TUNE = str(FIXTURES / "tune" / "user3.yaml")
DEADLOCK = str(FIXTURES / "invalid" / "deadlock_two_ranks.json")


def _plan(tmp_path: Path, name: str, *args: str) -> Path:
    path = tmp_path / f"{name}.json"
    r = runner.invoke(app, ["plan", *args, "-o", str(path)])
    assert r.exit_code == 0, r.output
    return path


# ----------------------------------------------------------------------------------------------
# pptl/whatif/opening.py


def test_an_op_of_mean_zero_is_work_but_in_neither_factor() -> None:
    """A fitted op is one of positive mean; an op of mean 0 (time 0.5) still counts as work.

    Work 1.0 + 0.5 + 0.9 + 2.2 = 4.6, half 2.3. The mean-0 op starts at 1.0 (not fitted), the third at
    1.5 (under 2.3: early, 0.9 / 1.0), the fourth at 2.4 (late, 2.2 / 2.0 = 1.1). Fitting the mean-0 op
    too makes early (0.5 + 0.9) / 1.0 = 1.4.
    """
    got = fit_opening([(1.0, 1.0, True), (0.5, 0.0, False), (0.9, 1.0, False), (2.2, 2.0, False)])
    assert got is not None
    assert (got.work, got.early, got.late) == pytest.approx((4.6, 0.9, 1.1))


def test_the_leads_extra_counts_once_as_work() -> None:
    """Opening(work 8, early 0.75, late 1.25), times 2, 2, 1, lead extra 0.25.

    The lead: factor 1, work after it 2 + 0.25 = 2.25. The second starts after 2.25 (under 4: early,
    0.75) and adds 2 x 0.75 = 1.5: 3.75. The third starts after 3.75, still under 4: early. The extra
    counted again after the second op would put the third at 4.0, late (1.25).
    """
    assert opening_factors([2.0, 2.0, 1.0], Opening(8.0, 0.75, 1.25), lead_extra=0.25) == [1.0, 0.75, 0.75]


# ----------------------------------------------------------------------------------------------
# pptl/whatif/band.py


def _measured_run(**extra: object) -> Any:
    """A measured 1F1B run (pp 2, 2 micro-batches, F 1 / B 2 ms, free messages) of two steps, the
    second 10% slower, with ``extra`` in its record."""
    from pptl.config import Config, Costs
    from pptl.schedules import build_schedule
    from pptl.simulate import simulate
    from pptl.timeline import Timeline, TimelineMeta

    tl = simulate(build_schedule(Config(schedule="1f1b", pp=2, microbatches=2)), Costs(base={"F": 1.0, "B": 2.0})).timeline()
    ops = {e.op: e.duration for e in tl.events if e.lane == "compute"}
    record = {"step_ms": [tl.makespan + 0.2, 1.1 * tl.makespan + 0.2],
              "step_ops": {"span_ms": [tl.makespan, 1.1 * tl.makespan], "ms": {k: [d, 1.1 * d] for k, d in ops.items()}},
              **extra}
    return Timeline(tl.events, TimelineMeta(source="measured", units="ms", family="1f1b", pp=2, microbatches=2,
                                            extra=record))


def test_a_sync_send_run_on_an_unknown_device_keeps_the_plans_sends_off_the_compute_lane() -> None:
    """The plan: 1F1B pp 2 m 2, F 1, B 2, a message 0.5 (ms). As planned: rank 0 F0 [0, 1], F1 [1, 2];
    rank 1 F0 [1.5, 2.5], B0 [2.5, 4.5], F1 [4.5, 5.5], B1 [5.5, 7.5]; rank 0 B0 [5, 7], B1 [8, 10]:
    10. Run on a GPU with sync-send, every SEND holds its rank's compute lane for its 0.5: rank 1's B0
    SEND ends at 5, so F1 [5, 6], B1 [6, 8] and its SEND [8, 8.5]; rank 0's B1 [8.5, 10.5]: 10.5, the
    whole band 0.5 (times the run's step factor, about 1) later. A run whose device is not recorded
    (None) or a CPU run is banded as planned, as a run without sync-send."""
    from pptl.config import Config, Costs
    from pptl.schedules import build_schedule
    from pptl.whatif.band import step_band

    s = build_schedule(Config(schedule="1f1b", pp=2, microbatches=2,
                              costs=Costs(base={"F": 1.0, "B": 2.0}, comm_latency=0.5)))
    s.meta["units"] = "ms"
    plain = step_band(s, _measured_run(), "m.json")
    unknown = step_band(s, _measured_run(messages="sync-send"), "m.json")
    cpu = step_band(s, _measured_run(messages="sync-send", device="cpu"), "m.json")
    gpu = step_band(s, _measured_run(messages="sync-send", device="cuda"), "m.json")
    assert plain is not None and unknown is not None and cpu is not None and gpu is not None
    assert plain.p50 == pytest.approx(10.0 + 0.2, abs=0.1)  # the steps' offset 0.2 ms, their factor about 1
    assert unknown == plain and cpu == plain
    assert gpu.p50 - plain.p50 == pytest.approx(0.5, abs=0.01)


# ----------------------------------------------------------------------------------------------
# pptl/whatif/figure.py


def _timeline_axes(fig: object) -> list[object]:
    return [ax for ax in fig.axes if "timeline at mean durations" in ax.get_title()]  # type: ignore[attr-defined]


def test_whatif_figure_draws_the_timelines_of_the_first_four_plans_only(tmp_path: Path) -> None:
    """MAX_TIMELINES = 4: five plans get five violins but four timelines, those of the first four
    (m = 1, 2, 3, 4; not m = 5)."""
    from pptl.whatif.figure import MAX_TIMELINES, whatif_figure
    from pptl.whatif.study import study_plans

    assert MAX_TIMELINES == 4
    files = [_plan(tmp_path, f"m{m}", "-s", "1f1b", "--pp", "2", "-m", str(m)) for m in range(1, 6)]
    fig = whatif_figure(study_plans(files, samples=2))
    titles = [ax.get_title() for ax in _timeline_axes(fig)]  # type: ignore[attr-defined]
    assert titles == [f"m{m}.json (1f1b, m={m}): timeline at mean durations, colour = criticality" for m in range(1, 5)]
    violins = fig.axes[0]
    assert [t.get_text() for t in violins.get_yticklabels()] == [f"m{m}.json\n(1f1b, m={m})" for m in range(1, 6)]


def test_whatif_timeline_rows_leave_out_lanes_of_no_time(tmp_path: Path) -> None:
    """Without a message latency a plan's SENDs and RECVs take no time: the timeline holds one row per
    rank, its compute lane (pp 2: two rows)."""
    from pptl.whatif.figure import whatif_figure
    from pptl.whatif.study import study_plans

    plan = _plan(tmp_path, "z", "-s", "1f1b", "--pp", "2", "-m", "2")
    (ax,) = _timeline_axes(whatif_figure(study_plans([plan], samples=2)))
    assert [t.get_text() for t in ax.get_yticklabels()] == ["rank 0 compute", "rank 1 compute"]  # type: ignore[attr-defined]


def test_whatif_timeline_rows_put_each_ranks_compute_lane_first(tmp_path: Path) -> None:
    """With a latency of 0.5 a message takes time on its SEND (its RECV is a wait of no time), so each
    rank has a send row too; the rows go by rank, the compute lane first, then the others by name."""
    from pptl.whatif.figure import whatif_figure
    from pptl.whatif.study import study_plans

    plan = _plan(tmp_path, "c", "-s", "1f1b", "--pp", "2", "-m", "2", "--comm-latency", "0.5")
    (ax,) = _timeline_axes(whatif_figure(study_plans([plan], samples=2)))
    assert [t.get_text() for t in ax.get_yticklabels()] == [  # type: ignore[attr-defined]
        "rank 0 compute", "rank 0 send", "rank 1 compute", "rank 1 send"]


# ----------------------------------------------------------------------------------------------
# pptl/commands/check.py: exit 0 ok, 1 a violation, 2 bad input


def test_check_of_an_invalid_file_and_a_missing_one_exits_2() -> None:
    """Bad input wins the exit code over a violation: a deadlocking plan (1 alone) beside a missing
    file is 2, and the deadlock is still reported."""
    r = runner.invoke(app, ["check", DEADLOCK, "/nonexistent/gone.json"])
    assert r.exit_code == 2, r.output
    assert "PP007 error: deadlock across ranks 0, 1:" in r.stdout
    alone = runner.invoke(app, ["check", DEADLOCK])
    assert alone.exit_code == 1, alone.output


def test_check_of_one_missing_file_in_json_is_one_error_line_not_a_report(tmp_path: Path) -> None:
    """One input that cannot be read is the command's error (exit 2, one line on stderr), in every
    output but github's; JSON prints no report of no files."""
    missing = str(tmp_path / "gone.json")
    r = runner.invoke(app, ["check", missing, "--output", "json"])
    assert r.exit_code == 2, r.output
    assert r.stdout == ""
    assert len(r.stderr.strip().splitlines()) == 1 and r.stderr.startswith("error:")


# ----------------------------------------------------------------------------------------------
# pptl/commands/render.py: --width from 40 to MAX_WIDTH (1000) columns


@pytest.mark.parametrize(("width", "code"), [("39", 2), ("40", 0), ("1000", 0), ("1001", 2)])
def test_render_width_is_taken_from_40_to_1000_columns(width: str, code: int) -> None:
    r = runner.invoke(app, ["render", CONFIG, "--width", width])
    assert r.exit_code == code, r.output
    if code:
        assert f"--width: got {width}, expected an integer from 40 to 1000" in r.stderr


def test_render_html_without_out_writes_the_files_name_in_the_current_folder(tmp_path: Path,
                                                                            monkeypatch: pytest.MonkeyPatch) -> None:
    """--html without -o writes FILE's name + .html, in the current folder, not beside FILE."""
    plan = _plan(tmp_path, "p", "-s", "1f1b", "--pp", "2", "-m", "2")
    here = tmp_path / "here"
    here.mkdir()
    monkeypatch.chdir(here)
    r = runner.invoke(app, ["render", str(plan), "--html"])
    assert r.exit_code == 0, r.output
    assert (here / "p.html").is_file() and not (tmp_path / "p.html").exists()


# ----------------------------------------------------------------------------------------------
# pptl/commands/tune.py


@pytest.mark.parametrize(("args", "msg"), [
    (["--top", "0"], "error: --top: got 0, expected an integer >= 1"),
    (["--memory-limit", "0"], "error: --memory-limit: got 0, expected a number > 0"),
])
def test_tune_options_at_their_open_ends_are_refused(args: list[str], msg: str) -> None:
    r = runner.invoke(app, ["tune", TUNE, *args])
    assert r.exit_code == 2, r.output
    assert r.stderr.strip().splitlines() == [msg]


def test_tune_with_no_candidate_fitting_still_draws_and_names_its_figure(tmp_path: Path) -> None:
    """No candidate fits a limit of 0.001: exit 1 (the closest named), but the figure (step against
    peak memory of every candidate) is drawn, and stderr says it was written; no plan is."""
    fig, plan = tmp_path / "f.png", tmp_path / "best.json"
    r = runner.invoke(app, ["tune", TUNE, "--memory-limit", "0.001", "--figure", str(fig), "-o", str(plan)])
    assert r.exit_code == 1, r.output
    assert fig.is_file() and not plan.exists()
    assert f"wrote {fig}" in r.stderr and f"wrote {plan}" not in r.stderr
    assert "error: no candidate fits the memory limit 0.001; closest:" in r.stderr


def test_tune_names_the_csv_it_wrote(tmp_path: Path) -> None:
    """A best plan torch's CSV holds (user3.yaml ranks no DualPipe first) is written to both -o and
    --csv, and stderr names both files; no note says the CSV was left out."""
    plan, csv = tmp_path / "best.json", tmp_path / "best.csv"
    r = runner.invoke(app, ["tune", TUNE, "-o", str(plan), "--csv", str(csv)])
    assert r.exit_code == 0, r.output
    assert plan.is_file() and csv.is_file()
    assert f"wrote {plan}" in r.stderr and f"wrote {csv}" in r.stderr
    assert "not written" not in r.output


# ----------------------------------------------------------------------------------------------
# pptl/commands/plan.py: the … row of a plan over a screenful of ranks


def test_plan_summary_row_ranges_over_the_middle_ranks_only() -> None:
    """1F1B pp 33, m 33 (F 1, B 2): rank r holds pp - r = 33 - r activations at its peak. The … row
    stands for ranks 8..24, so its peak is rank 8's, 25 (rank 7's 26 is on its own row), and its busy
    time 33 x 3 = 99 for every rank."""
    r = runner.invoke(app, ["plan", "--schedule", "1f1b", "--pp", "33", "-m", "33"])
    assert r.exit_code == 0, r.output
    row = next(line for line in r.stdout.splitlines() if line.strip().startswith("…"))
    cells = [c.strip() for c in row.split("│")]
    assert cells[1] == "99..99" and cells[-1] == "25 max"


# ----------------------------------------------------------------------------------------------
# pptl/explain_inputs.py


def test_explain_reads_one_timeline_file_as_the_run(tmp_path: Path) -> None:
    """One path is one pptl timeline (or trace folder), named by its file name; only two or more are
    a profiler trace per rank."""
    from pptl.explain_inputs import load_run

    plan = _plan(tmp_path, "p", "-s", "1f1b", "--pp", "2", "-m", "2")
    from pptl.formats.loader import load_any
    from pptl.simulate import simulate

    s = load_any(plan).schedule
    assert s is not None
    timeline = simulate(s).timeline()
    tl = tmp_path / "run.json"
    tl.write_text(json.dumps(timeline.to_dict()))
    run = load_run([tl])
    assert run.name == "run.json" and len(run.timeline.events) == len(timeline.events) > 0


def test_explain_of_a_timeline_of_no_events_is_one_line_exit_2(tmp_path: Path) -> None:
    """A pptl timeline that holds no op is nothing measured: exit 2, one line naming the file."""
    from pptl.timeline import Timeline, TimelineMeta

    empty = tmp_path / "empty.json"
    empty.write_text(json.dumps(Timeline([], TimelineMeta(source="measured", units="ms")).to_dict()))
    r = runner.invoke(app, ["explain", str(empty)])
    assert r.exit_code == 2, r.output
    assert r.stderr.strip().splitlines() == [
        "error: empty.json: has no measured timeline (expected pptl run output or profiler traces)"]


# ----------------------------------------------------------------------------------------------
# render and check: the options that name where a drawing goes


def test_render_width_with_html_is_refused_as_with_a_figure_file(tmp_path: Path,
                                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    """--html writes a page (FILE's name + .html) as -o x.html would: --width, which sizes the terminal
    drawing only, is refused (exit 2, one line), and no page is written."""
    monkeypatch.chdir(tmp_path)
    r = runner.invoke(app, ["render", CONFIG, "--width", "80", "--html"])
    assert r.exit_code == 2, r.output
    assert r.stderr.strip().splitlines() == ["error: --width sizes the terminal drawing; a figure file takes --size"]
    assert not (tmp_path / "1f1b.html").exists()


def test_render_compare_warmup_with_html_draws_the_page(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """--compare-warmup draws a figure; --html is one (FILE's name + .html), so it needs no -o."""
    monkeypatch.chdir(tmp_path)
    r = runner.invoke(app, ["render", str(FIXTURES / "moe_seed.yaml"), "--compare-warmup", "--html"])
    assert r.exit_code == 0, r.output
    assert (tmp_path / "moe_seed.html").is_file()


def test_check_of_one_missing_file_in_github_output_is_an_annotation(tmp_path: Path) -> None:
    """In github output even a single unreadable input is an annotation on stdout (the workflow shows
    it on the file), not an error of the command; the exit is 2 all the same."""
    missing = str(tmp_path / "gone.json")
    r = runner.invoke(app, ["check", missing, "--output", "github"])
    assert r.exit_code == 2, r.output
    assert r.stdout.splitlines() == [f"::error file={missing},line=1,title=input::no such file"]


def test_plan_from_a_file_refuses_costs_from_a_run(tmp_path: Path) -> None:
    """--from takes the schedule and its costs from its file; --costs-from beside it is refused (exit 2,
    one line) rather than ignored."""
    plan = _plan(tmp_path, "p", "-s", "1f1b", "--pp", "2", "-m", "2")
    r = runner.invoke(app, ["plan", "--from", str(plan), "--costs-from", str(plan)])
    assert r.exit_code == 2, r.output
    assert r.stderr.strip().splitlines() == [
        "error: --from takes the schedule from its file; drop the config, --schedule and --costs-from"]


def _ranked_rows(stdout: str) -> list[str]:
    return [line.split("│")[0].strip() for line in stdout.splitlines() if "│" in line]


def test_tune_lists_fifteen_rows_by_default_and_one_at_top_1() -> None:
    """--top's default is 15: user3.yaml ranks 129 candidates, and the table numbers rows 1..15; at
    --top 1, its least, one row."""
    r = runner.invoke(app, ["tune", TUNE])
    assert r.exit_code == 0, r.output
    assert _ranked_rows(r.stdout) == [str(i) for i in range(1, 16)]
    one = runner.invoke(app, ["tune", TUNE, "--top", "1"])
    assert one.exit_code == 0, one.output
    assert _ranked_rows(one.stdout) == ["1"]


def test_whatif_figure_of_one_sample_says_one_sample() -> None:
    """The distributions' title counts the samples per plan: 1 sample (singular), 2 samples."""
    from pptl.whatif.figure import whatif_figure
    from pptl.whatif.study import study_plans

    plan = FIXTURES / "1f1b.yaml"
    for n, words in ((1, "1 sample"), (2, "2 samples")):
        fig = whatif_figure(study_plans([plan], samples=n))
        assert fig.axes[0].get_title() == f"pptl whatif: {words} per plan"


# ----------------------------------------------------------------------------------------------
# pptl/tune/synth_ilp.py: the ILP's time model (its warm start and the pick between starts)


def test_order_makespan_waits_for_the_next_stages_input_gradient_on_every_rank_but_the_last() -> None:
    """pp 2, m 1, F = I = W = 1, a message 0.5; each rank runs F0, I0, W0.

    Rank 0: F0 [0, 1]. Rank 1: F0 after rank 0's F0 and the message, [1.5, 2.5]; the last stage's I0
    follows its own F0, [2.5, 3.5]; W0 [3.5, 4.5]. Rank 0's I0 waits for rank 1's I0 and the message:
    [4, 5]; W0 [5, 6]. Step 6 (rank 0's I0 after its own F0 would make it 4.5).
    """
    from pptl.tune.synth import SynthInput
    from pptl.tune.synth_ilp import order_makespan

    x = SynthInput(pp=2, microbatches=1, F=[1.0, 1.0], I=[1.0, 1.0], W=[1.0, 1.0], activation=[1.0, 1.0],
                   limit=[float("inf")] * 2, w_activation=0.5, message=0.5)
    order = [("F", 0), ("I", 0), ("W", 0)]
    assert order_makespan(x, {0: list(order), 1: list(order)}) == pytest.approx(6.0)


def test_check_takes_nccl_p2p_semantics_by_default() -> None:
    """p2p_nccl_hang.csv: rank 0 sends F1 to rank 1 before it receives B0, rank 1 sends B0 to rank 0
    before it receives F1. Under NCCL a send completes with its receive, so each send waits on a
    receive the other rank posts only after its own send: a hang (exit 1) by default, as with --p2p
    nccl. Non-blocking sends complete on their own: exit 0."""
    hang = str(FIXTURES / "invalid" / "p2p_nccl_hang.csv")
    r = runner.invoke(app, ["check", hang])
    assert r.exit_code == 1, r.output
    assert "PP031 error: hangs under NCCL P2P" in r.stdout
    ok = runner.invoke(app, ["check", hang, "--p2p", "nonblocking"])
    assert ok.exit_code == 0, ok.output


@pytest.mark.parametrize(("config", "option"), [("moe_seed.yaml", ["--device", "0"]),
                                                 ("dualpipe_seed.yaml", ["--reverse-ids"])])
def test_render_figure_options_without_a_figure_file_are_refused(config: str, option: list[str]) -> None:
    """--device (the MoE close-ups) and --reverse-ids (DualPipe's block numbers) shape a figure file
    only: with the drawing going to the terminal they are refused (exit 2, one line), not ignored."""
    r = runner.invoke(app, ["render", str(FIXTURES / config), *option])
    assert r.exit_code == 2, r.output
    assert r.stderr.strip().splitlines() == [
        f"error: {option[0]} shapes a figure file but the drawing goes to the terminal; add -o FILE.png "
        "(or .svg, .pdf, .html) or drop it"]
