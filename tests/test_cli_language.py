"""The commands speak one language, tried as a new user would (issue: "the same language in every
command"): family names, error wording, YAML numbers, flags that do not apply, units and labels.

Each test runs ``python -m pptl`` as a user does. ``PPTL_TREE`` points the tests at another
checkout (``PPTL_TREE=/path/to/old pytest tests/test_cli_language.py``), which is how each was seen
to fail before the change it holds.
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
TREE = Path(os.environ.get("PPTL_TREE", ROOT))
FIXTURES = ROOT / "fixtures"
RUNS = ROOT / "tests" / "data" / "runs"
TRACES = ROOT / "tests" / "data" / "traces"
ENV = dict(os.environ, PYTHONPATH=str(TREE))

TUNE = """\
pp: 2
microbatches: [4]
memory_limit: 100
model:
  layers: 4
  layer: {F: 1.0, B: 2.0, I: 1.0, W: 1.0, activation: 0.1, weight: 0.5}
comm: {latency: 0.05, bandwidth: 2.0e7}
"""


def pptl(*args: str | Path, cwd: Path = TREE) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "pptl", *map(str, args)], capture_output=True, text=True, cwd=cwd,
                          env=ENV, timeout=300)


def one_error(r: subprocess.CompletedProcess[str], code: int = 2) -> str:
    """The one stderr line of a refused command (no traceback, no usage block)."""
    assert r.returncode == code, r.stdout + r.stderr
    lines = r.stderr.splitlines()
    assert len(lines) == 1, r.stderr
    return lines[0]


@pytest.fixture(scope="module")
def plan_file(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("plan") / "p.json"
    r = pptl("plan", "-s", "1f1b", "--pp", "2", "-m", "2", "-o", path)
    assert r.returncode == 0, r.stderr
    return path


# ----------------------------------------------------------------------------------------------
# tune: the family names of `pptl schedules`, "skipped", YAML 1.2 numbers


def test_tune_takes_and_prints_the_family_names_pptl_schedules_lists(tmp_path: Path) -> None:
    config = tmp_path / "t.yaml"
    config.write_text(TUNE + "families: [interleaved-1f1b]\n")
    r = pptl("tune", config, "--output", "json")
    assert r.returncode == 0, r.stderr
    labels = [c["label"] for c in json.loads(r.stdout)["candidates"]]
    # 4 layers on 2 ranks: vpp 2 only; groups pp=2 and m=4
    assert labels == ["interleaved-1f1b vpp=2 G=2 m=4 split=balanced", "interleaved-1f1b vpp=2 G=4 m=4 split=balanced"]
    config.write_text(TUNE + "families: [interleaved]\n")  # the alias `pptl plan` takes names the same family
    r = pptl("tune", config, "--output", "json")
    assert r.returncode == 0, r.stderr
    assert {c["family"] for c in json.loads(r.stdout)["candidates"]} == {"interleaved-1f1b"}


def test_tune_says_skipped_for_an_ilp_it_did_not_try(tmp_path: Path) -> None:
    # pp 8, 64 micro-batches: 3 m^2 p = 98,304 order binaries, past the ILP's bound
    config = tmp_path / "t.yaml"
    config.write_text(TUNE.replace("pp: 2", "pp: 8").replace("[4]", "[64]").replace("layers: 4", "layers: 8")
                      + "families: [synth]\n")
    r = pptl("tune", config)
    assert r.returncode == 0, r.stderr
    ilp = [line for line in r.stdout.splitlines() if " ilp " in line]
    assert ilp and all("skipped: synth ILP skipped: 98304 order binaries" in line for line in ilp), r.stdout
    assert "rejected: synth ILP" not in r.stdout
    summary = next(line for line in r.stdout.splitlines() if " candidates: " in line)
    assert ", 0 rejected, 1 skipped (times in unit)" in summary, summary


def test_yaml_numbers_read_as_yaml_1_2_does(tmp_path: Path) -> None:
    """``2.0e7`` and ``1e-3`` are numbers (YAML 1.1 wants ``2.0e+7``); the docs/tune.md example uses one."""
    config = tmp_path / "t.yaml"
    config.write_text(TUNE + "families: [1f1b]\n")
    r = pptl("tune", config, "--output", "json")
    assert r.returncode == 0, r.stderr
    plan = tmp_path / "c.yaml"
    plan.write_text("schedule: 1f1b\npp: 2\nmicrobatches: 2\ncosts: {F: 1e0, B: 2e0}\n")
    r = pptl("plan", plan, "--output", "json")
    assert r.returncode == 0, r.stderr
    assert json.loads(r.stdout)["makespan"] == (1 + 2) * (2 + 2 - 1)  # (F + B)(m + p - 1)


# ----------------------------------------------------------------------------------------------
# one wording per kind of error: file first, the field (or flag), what was got, what is expected


@pytest.mark.parametrize("args,line", [
    (["check", "{p}", "--memory-limit", "-1"], "error: --memory-limit: got -1, expected a number >= 0"),
    (["plan", "-s", "1f1b", "--pp", "2", "-m", "2", "--memory-limit", "-1"],
     "error: --memory-limit: got -1, expected a number >= 0"),
    (["plan", "-s", "1f1b", "--pp", "x", "-m", "2"], "error: --pp: got 'x', expected an integer >= 1"),
    (["plan", "-s", "interleaved-1f1b", "--pp", "2", "-m", "4"],
     "error: --vpp: got 1, expected at least 2 chunks per rank (use 1f1b for one) for schedule 'interleaved-1f1b'"),
], ids=["check-limit", "plan-limit", "not-an-int", "flag-not-field"])
def test_a_bad_value_reads_the_same_in_every_command(plan_file: Path, args: list[str], line: str) -> None:
    assert one_error(pptl(*[a.replace("{p}", str(plan_file)) for a in args])) == line


@pytest.mark.parametrize("command", ["check", "plan", "render", "run", "tune"])
def test_a_missing_file_is_worded_once(tmp_path: Path, command: str) -> None:
    assert one_error(pptl(command, "gone.yaml", cwd=tmp_path)) == "error: gone.yaml: no such file"


@pytest.mark.parametrize("suffix", [".yaml", ".toml", ".json"])
def test_an_empty_file_is_empty_whatever_its_format(tmp_path: Path, suffix: str) -> None:
    (tmp_path / f"e{suffix}").write_text("\n")
    assert one_error(pptl("plan", f"e{suffix}", cwd=tmp_path)) == f"error: e{suffix}: the file is empty"


def test_a_yaml_of_comments_only_is_empty_too(tmp_path: Path) -> None:
    (tmp_path / "c.yaml").write_text("# nothing yet\n")
    assert one_error(pptl("plan", "c.yaml", cwd=tmp_path)) == "error: c.yaml: the file is empty"


def _csv_with_blank_line(tmp_path: Path) -> Path:
    rows = (FIXTURES / "csv" / "gpipe_pp4_m6.csv").read_text().splitlines()
    path = tmp_path / "blank.csv"
    path.write_text("\n".join(rows[:2] + [""] + rows[2:]) + "\n")
    return path


def test_check_of_a_csv_with_a_blank_line_reads_what_render_draws(tmp_path: Path) -> None:
    """A blank line is a rank with no action (as torch reads it): stages sit neither looped nor in a V."""
    path = _csv_with_blank_line(tmp_path)
    r = pptl("check", path)
    assert r.returncode == 0, r.stdout + r.stderr
    assert r.stdout.splitlines()[-1] == f"{path}: ok, 48 ops checked"
    assert f"{path}: note: placement: custom (1 stage on the busiest rank), 4 stages (inferred)" in r.stdout


def test_run_of_a_csv_without_messages_is_an_invalid_schedule_named_by_its_file(tmp_path: Path) -> None:
    # exit 1, as pptl check says of the same file (PP008: a rank crossing without communication)
    pytest.importorskip("torch")
    path = _csv_with_blank_line(tmp_path)
    line = one_error(pptl("run", path, "--device", "cpu", cwd=tmp_path), code=1)
    assert line.startswith(f"error: {path}: r0/compute/F s0 mb0 -> r1/compute/F s1 mb0 crosses ranks without a "
                           "SEND/RECV"), line


def test_serve_starts_from_a_plan_file(plan_file: Path) -> None:
    """``pptl serve plan.json`` opens the plan's config (it said "unknown field 'config'")."""
    proc = subprocess.Popen([sys.executable, "-m", "pptl", "serve", str(plan_file), "--port", "0"],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=ENV, cwd=TREE)
    try:
        first = proc.stdout.readline() if proc.stdout else ""
    finally:
        proc.terminate()
        _, err = proc.communicate(timeout=30)
    assert first.startswith("pptl serve: open http://127.0.0.1:"), err


def test_diagnose_of_a_plan_says_it_is_a_plan(plan_file: Path) -> None:
    assert one_error(pptl("diagnose", plan_file)) == (
        f"error: {plan_file}: is a plan, not the record of a hung run; pptl diagnose takes flight-recorder dumps, "
        "or the timeline a stopped pptl run wrote with --plan PLAN")


# ----------------------------------------------------------------------------------------------
# flags that do not apply are refused, in one line


@pytest.mark.parametrize("args,line", [
    (["export", "{p}", "--to", "torch-csv", "-m", "3"],
     "error: {p}: -m/--microbatches applies to a config or a torch CSV, not to a plan; drop it"),
    (["export", "{p}", "--to", "torch-csv", "--placement", "loop"],
     "error: {p}: --placement applies to a torch CSV, not to a plan; drop it"),
    (["export", "{p}", "--to", "torch-csv", "--placement", "x"], "error: --placement: got 'x', expected one of loop, v"),
    (["check", "{p}", "--microbatches", "1000000000"],
     "error: {p}: -m/--microbatches applies to a config or a torch CSV, not to a plan; drop it"),
    (["export", str(FIXTURES / "1f1b.yaml"), "--to", "torchtitan", "-o", "{d}/pp.yaml"],
     "error: -o {d}/pp.yaml: --to torchtitan writes TOML, expected a .toml name"),
    (["render", "{p}", "--width", "100000000"], "error: --width: got 100000000, expected an integer from 40 to 1000"),
    (["render", "{p}", "--width", "1001"], "error: --width: got 1001, expected an integer from 40 to 1000"),
    (["render", "{p}", "--width", "80", "-o", "{d}/x.png"],
     "error: --width sizes the terminal drawing; a figure file takes --size"),
], ids=["export-m", "export-placement", "placement-word", "check-m", "torchtitan-yaml", "render-width",
        "render-width-1001", "width-with-file"])
def test_flags_that_do_not_apply_are_refused(plan_file: Path, tmp_path: Path, args: list[str], line: str) -> None:
    def fill(s: str) -> str:
        return s.replace("{p}", str(plan_file)).replace("{d}", str(tmp_path))

    assert one_error(pptl(*map(fill, args))) == fill(line)
    assert not (tmp_path / "pp.yaml").exists() and not (tmp_path / "x.png").exists()


def test_render_width_at_its_bounds_draws(plan_file: Path) -> None:
    for width in (40, 1000):
        r = pptl("render", plan_file, "--width", width)
        assert r.returncode == 0, r.stderr
        assert max(len(line) for line in r.stdout.splitlines()) <= width


# ----------------------------------------------------------------------------------------------
# units and labels


def test_compare_prints_ms_like_explain_and_explains_a_rescaled_headline(tmp_path: Path) -> None:
    plan = tmp_path / "p.json"
    assert pptl("plan", "-s", "1f1b", "--pp", "4", "-m", "8", "-o", plan).returncode == 0
    r = pptl("compare", plan, TRACES / "Schedule1F1B")
    assert r.returncode == 0, r.stderr
    head = r.stdout.splitlines()[0]
    assert head == ("makespan: planned 118.5 ms, measured 118.5 ms (error +0.0% by construction: the plan is in "
                    "'unit', scaled by 3590 to the run's makespan)"), head
    explain = pptl("explain", TRACES / "Schedule1F1B")
    assert any(line.startswith("makespan 118.5 ms;") for line in explain.stdout.splitlines()), explain.stdout


def test_compare_with_swapped_files_is_refused() -> None:
    measured, plan = RUNS / "1f1b_h200.measured.json", RUNS / "1f1b_plan.json"
    assert pptl("compare", plan, measured).returncode == 0
    assert one_error(pptl("compare", measured, plan)) == (
        f"error: {measured}: is a measured run and {plan} a plan: give the plan first (pptl compare {plan} {measured})")


def test_a_weight_update_plan_counts_buckets_and_shows_no_activation_column() -> None:
    r = pptl("plan", FIXTURES / "weight_update_seed.yaml")
    assert r.returncode == 0, r.stderr
    lines = r.stdout.splitlines()
    assert lines[0].startswith("weight-update: pp=4 buckets=8 makespan=")
    assert lines[1].split() == ["rank", "┃", "busy", "┃", "idle", "┃", "bubble"]
    assert "microbatches" not in r.stdout and "peak act." not in r.stdout


def test_zbv_says_vpp_2_in_its_header_metrics_and_measured_title() -> None:
    plan = pptl("plan", FIXTURES / "zbv.yaml", "--output", "json")
    assert json.loads(plan.stdout)["vpp"] == 2
    assert pptl("plan", FIXTURES / "zbv.yaml").stdout.startswith("zbv: pp=4 vpp=2 microbatches=8 ")
    # the measured timeline of a zbv run (written before: its meta said vpp 1) is titled by the plan's shape
    r = pptl("render", RUNS / "zbv_cpu.measured.json", "--width", "200")
    assert r.returncode == 0, r.stderr
    assert " vpp=2 " in r.stdout.splitlines()[0], r.stdout.splitlines()[0]


def test_run_sizes_its_model_with_hidden_and_tokens(tmp_path: Path, plan_file: Path) -> None:
    pytest.importorskip("torch")
    out = tmp_path / "m.json"
    r = pptl("run", plan_file, "--device", "cpu", "--steps", "1", "--warmup", "0", "--hidden", "32", "--tokens", "8",
             "-o", out)
    assert r.returncode == 0, r.stderr
    workload = json.loads(out.read_text())["meta"]["extra"]["workload"]
    assert (workload["hidden"], workload["tokens"]) == (32, 8)
    assert one_error(pptl("run", plan_file, "--hidden", "0")) == "error: --hidden: got 0, expected an integer from 1 to 65536"
