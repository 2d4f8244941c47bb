"""What a new user's pass over README.md and docs/*.md with configs of their own found, each pinned here
(tests/test_new_user_pass.py holds the pass over ``pptl run``):

- a file of another kind given where a config goes was refused in the config reader's words, naming a
  field the user never wrote: ``pptl plan measured.json`` read "unknown field 'events'; known fields:
  activation, comm, ...", a profiler trace "unknown field 'baseTimeNanoseconds'", pptl's own Chrome
  trace "unknown field 'displayTimeUnit'", a torch CSV "unknown file type '.csv'", a ``pptl tune``
  model file "unknown field 'model'";
- ``pptl tune`` given a schedule config, a plan or a timeline read "unknown field 'schedule'" (or
  'format'), and the list of tune fields;
- ``pptl plan --costs-from RUN`` from a run of more stages than the plan blamed a config field the user
  never wrote (``fixtures/1f1b.yaml: field 'costs.stages': stage 4 is not in this plan``; with flags
  only, ``field 'costs.stages': ...`` and no file at all) instead of naming the run.

Every case: exit 2 and one line on stderr, nothing on stdout.
"""
from __future__ import annotations

import gzip
import shutil
from pathlib import Path

import pytest
from typer.testing import CliRunner

from pptl.cli import app

ROOT = Path(__file__).resolve().parent.parent
RUN = ROOT / "tests" / "data" / "whatif_gpu" / "call2" / "measured_calibrate.json"  # pptl run: 1f1b, 2 ranks
TRACE = ROOT / "tests" / "data" / "traces" / "Schedule1F1B" / "rank0.json.gz"  # torch profiler, rank 0

MODEL = """\
pp: 3
microbatches: [5, 9]
memory_limit: 6000
model:
  layers: 21
  layer: {F: 1.0, B: 2.0, I: 1.0, W: 1.0, activation: 150, weight: 200}
  embedding: {F: 1.5, B: 3.0, activation: 300, weight: 400}
  head: {F: 5.0, B: 10.0, activation: 900, weight: 1200}
workload: {hidden: 2560, tokens: 2048, dtype: bfloat16}
"""


def _pptl(*args: str):
    r = CliRunner().invoke(app, list(args))
    assert r.exception is None or isinstance(r.exception, SystemExit), r.exception
    return r, r.stderr.splitlines()


def _one_error(r, err) -> str:
    assert r.exit_code == 2, r.output
    assert r.stdout == ""
    assert len(err) == 1 and err[0].startswith("error: "), err
    return err[0]


@pytest.fixture
def files(tmp_path, monkeypatch):
    """The files a user has at hand after the README's tour: a plan, a measured run, a profiler trace,
    pptl's Chrome trace and torch CSV of the plan, a tune model file; names relative to the folder."""
    monkeypatch.chdir(tmp_path)
    shutil.copy(ROOT / "fixtures" / "1f1b.yaml", "1f1b.yaml")
    shutil.copy(RUN, "measured.json")
    Path("rank0.json").write_bytes(gzip.decompress(TRACE.read_bytes()))
    Path("model.yaml").write_text(MODEL)
    r, _ = _pptl("plan", "1f1b.yaml", "-o", "plan.json")
    assert r.exit_code == 0, r.output
    for to, name in (("chrome", "trace.json"), ("torch-csv", "sched.csv")):
        r, _ = _pptl("export", "plan.json", "--to", to, "-o", name)
        assert r.exit_code == 0, r.output
    return tmp_path


@pytest.mark.parametrize("name, line", [
    ("measured.json", "error: measured.json: is a measured timeline, not a config or plan; to take its durations, "
                      "give it to --costs-from (pptl plan CONFIG --costs-from measured.json)"),
    ("rank0.json", "error: rank0.json: is a profiler trace (a measured timeline), not a config or plan; to take its "
                   "durations, give it to --costs-from (pptl plan CONFIG --costs-from rank0.json)"),
    ("trace.json", "error: trace.json: is a Chrome trace for Perfetto (what pptl export writes), not a config or "
                   "plan; give pptl the plan or timeline it was exported from"),
    ("sched.csv", "error: sched.csv: is a torch CSV schedule, not a config or plan; plan it with "
                  "'pptl plan --from sched.csv'"),
    ("model.yaml", "error: model.yaml: is a pptl tune config (a model description), not a config or plan; rank "
                   "schedules for it with 'pptl tune model.yaml'"),
])
def test_plan_says_what_a_file_that_is_not_a_config_is(files, name, line):
    assert _one_error(*_pptl("plan", name)) == line


def test_plan_keeps_the_config_readers_word_for_a_misspelt_field(files):
    Path("typo.yaml").write_text("schedule: 1f1b\npp: 3\nmicrobatchs: 5\n")
    assert _one_error(*_pptl("plan", "typo.yaml")).startswith(
        "error: typo.yaml: unknown field 'microbatchs'; known fields: ")


def test_plan_still_plans_a_plan_file_and_the_run_calibrates_it(files):
    r, _ = _pptl("plan", "plan.json")
    assert r.exit_code == 0, r.output
    r, _ = _pptl("plan", "--schedule", "1f1b", "--pp", "2", "--microbatches", "4", "--costs-from", "measured.json")
    assert r.exit_code == 0, r.output


@pytest.mark.parametrize("name, what", [
    ("1f1b.yaml", "a schedule config"), ("plan.json", "a plan"), ("measured.json", "a measured timeline"),
    ("rank0.json", "a profiler trace (a measured timeline)"), ("sched.csv", "a torch CSV schedule"),
    ("trace.json", "a Chrome trace for Perfetto (what pptl export writes)"),
])
def test_tune_says_what_a_file_that_is_not_a_model_description_is(files, name, what):
    assert _one_error(*_pptl("tune", name)) == (
        f"error: {name}: is {what}, not a tune config; pptl tune takes a model description (pp, microbatches, "
        f"model: layers and their costs; docs/tune.md)")


def test_tune_keeps_its_readers_word_for_a_misspelt_model_field(files):
    Path("m1.yaml").write_text(MODEL.replace("layers: 21", "layer_count: 21"))
    assert _one_error(*_pptl("tune", "m1.yaml")).startswith("error: m1.yaml: unknown field 'model.layer_count'")
    r, _ = _pptl("tune", "model.yaml", "--top", "3")
    assert r.exit_code == 0, r.output


def test_costs_from_a_run_of_more_stages_names_the_run(files):
    """Flags only: the message was "field 'costs.stages': stage 1 is not in this plan", no file named."""
    line = _one_error(*_pptl("plan", "--schedule", "1f1b", "--pp", "1", "--microbatches", "2",
                             "--costs-from", "measured.json"))
    assert line == ("error: --costs-from measured.json: its costs are for stages 0-1, this plan has stages 0-0: "
                    "calibrate from a run of a plan with the same stages")


def test_costs_from_a_plan_of_more_stages_names_that_plan(files):
    """The config's file was blamed: "1f1b.yaml: field 'costs.stages': stage 4 is not in this plan"."""
    r, _ = _pptl("plan", "--schedule", "interleaved-1f1b", "--pp", "4", "--vpp", "2", "--microbatches", "8",
                 "-o", "deep.json")
    assert r.exit_code == 0, r.output
    assert _one_error(*_pptl("plan", "1f1b.yaml", "--costs-from", "deep.json")) == (
        "error: --costs-from deep.json: its costs are for stages 0-7, this plan has stages 0-3: calibrate from a "
        "run of a plan with the same stages")


def test_a_config_own_stage_cost_out_of_range_still_names_the_config_field(files):
    Path("st.yaml").write_text("schedule: 1f1b\npp: 2\nmicrobatches: 4\ncosts: {F: 1, B: 2, stages: {2: {F: 3}}}\n")
    assert _one_error(*_pptl("plan", "st.yaml")) == (
        "error: st.yaml: field 'costs.stages': stage 2 is not in this plan (stages 0-1)")


def test_run_refuses_to_write_its_timeline_over_the_plan(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    plan = tmp_path / "p.json"
    assert CliRunner().invoke(app, ["plan", "-s", "1f1b", "--pp", "2", "-m", "2", "-o", str(plan)]).exit_code == 0
    before = plan.read_bytes()
    monkeypatch.chdir(tmp_path)
    for out in (str(plan), "./p.json", "../" + tmp_path.name + "/p.json"):
        r = CliRunner().invoke(app, ["run", str(plan), "-o", out, "--device", "cpu", "--steps", "1"])
        assert r.exit_code == 2, r.output
        assert r.output.strip().endswith("is the plan being run; name another file for the measured timeline "
                                         "(it would replace the plan)"), r.output
        assert len(r.output.strip().splitlines()) == 1
    assert plan.read_bytes() == before
