"""Testers' leftovers: strict workload integers, plurals of 1, gzip named .json, legends of zero-width
ops, and what ``pptl check`` reads of a plan's timeline. Expected values are worked out by hand."""
from __future__ import annotations

import gzip
import json
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from pptl.cli import app
from pptl.config import Workload, config_from_mapping
from pptl.errors import InputError
from pptl.formats.loader import load_any
from pptl.planning import check_file

runner = CliRunner()
FIXTURES = Path(__file__).resolve().parent.parent / "fixtures"
CONFIG = FIXTURES / "1f1b.yaml"  # pp 4, 8 micro-batches: 64 F/B, 96 SEND/RECV over 3 boundaries, 160 ops


def _config(workload: dict[str, Any]) -> Any:
    return config_from_mapping({"schedule": "1f1b", "pp": 2, "microbatches": 4, "workload": workload},
                               source="c.yaml")


def _plan(tmp_path: Path, cfg: Path = CONFIG, name: str = "p.json") -> Path:
    out = tmp_path / name
    result = runner.invoke(app, ["plan", str(cfg), "-o", str(out)])
    assert result.exit_code == 0, result.output
    return out


# 1. workload integers: strict (an int, not bool, not a string, not a float) and bounded -----------

@pytest.mark.parametrize(("workload", "message"), [
    ({"hidden": "64"}, "c.yaml: field 'workload.hidden': got '64', expected an integer in 1..65536"),
    ({"tokens": "64"}, "c.yaml: field 'workload.tokens': got '64', expected an integer in 1..1048576"),
    ({"layers_per_stage": "4"}, "c.yaml: field 'workload.layers_per_stage': got '4', expected an integer in 1..100000"),
    ({"hidden": 10 ** 10}, "c.yaml: field 'workload.hidden': got 10000000000, expected an integer in 1..65536"),
    ({"tokens": 1e10}, "c.yaml: field 'workload.tokens': got 10000000000.0, expected an integer in 1..1048576"),
    ({"tokens": 2 ** 20 + 1}, "c.yaml: field 'workload.tokens': got 1048577, expected an integer in 1..1048576"),
    ({"layers_per_stage": 100_001},
     "c.yaml: field 'workload.layers_per_stage': got 100001, expected an integer in 1..100000"),
    ({"hidden": True}, "c.yaml: field 'workload.hidden': got True, expected an integer in 1..65536"),
    ({"hidden": 64.0}, "c.yaml: field 'workload.hidden': got 64.0, expected an integer in 1..65536"),
    ({"hidden": 0}, "c.yaml: field 'workload.hidden': got 0, expected an integer in 1..65536"),
], ids=repr)
def test_workload_integers_are_strict_and_bounded(workload: dict[str, Any], message: str) -> None:
    with pytest.raises(InputError) as e:
        _config(workload)
    assert str(e.value) == message


def test_workload_bounds_themselves_and_null_are_accepted() -> None:
    cfg = _config({"hidden": 65536, "tokens": 1 << 20, "layers_per_stage": 100_000})
    assert cfg.workload == Workload(hidden=65536, tokens=1048576, layers_per_stage=100000)
    assert _config({"hidden": None}).workload.hidden == 256  # an empty YAML value keeps the default


def test_plan_refuses_a_string_width_in_one_line_exit_2(tmp_path: Path) -> None:
    cfg = tmp_path / "c.yaml"
    cfg.write_text('schedule: 1f1b\npp: 2\nmicrobatches: 4\nworkload:\n  hidden: "64"\n')
    result = runner.invoke(app, ["plan", str(cfg)])
    assert result.exit_code == 2
    assert result.output.strip().splitlines() == [
        f"error: {cfg}: field 'workload.hidden': got '64', expected an integer in 1..65536"]


# 2. plurals: a count of 1 is singular --------------------------------------------------------------

def test_counted() -> None:
    from pptl.formats._quote import counted

    assert [counted(0, "rank"), counted(1, "rank"), counted(2, "rank")] == ["0 ranks", "1 rank", "2 ranks"]
    assert [counted(1, "entry", "entries"), counted(3, "entry", "entries")] == ["1 entry", "3 entries"]


def test_one_event_and_one_op_are_singular(tmp_path: Path) -> None:
    cfg = tmp_path / "inf.yaml"
    cfg.write_text("schedule: inference\npp: 1\nmicrobatches: 1\n")  # one forward: one op, one event
    exported = runner.invoke(app, ["export", str(cfg), "--to", "chrome", "-o", str(tmp_path / "t.json")])
    assert exported.exit_code == 0, exported.output
    assert "note: planned timeline, 1 event; open it in https://ui.perfetto.dev" in exported.output
    checked = runner.invoke(app, ["check", str(cfg)])
    assert checked.exit_code == 0, checked.output
    assert f"{cfg}: ok, 1 op checked" in checked.output


def test_whatif_says_the_run_had_1_rank(tmp_path: Path) -> None:
    one = tmp_path / "one.yaml"
    one.write_text("schedule: gpipe\npp: 1\nmicrobatches: 1\n")
    from pptl.planning import load_timeline

    d = load_timeline(str(one)).to_dict()
    d["meta"].update(source="measured", units="ms")
    measured = tmp_path / "m.json"
    measured.write_text(json.dumps(d))
    result = runner.invoke(app, ["whatif", str(CONFIG), "--from", str(measured), "-n", "2"])
    assert result.exit_code == 2
    assert (f"error: {measured}: the run had 1 rank, the plan {CONFIG} (1f1b) 4: measure a run with the plan's "
            "ranks") in result.output


# 3. gzip data named .json ---------------------------------------------------------------------------

def test_gzip_named_json_is_told_to_be_json_gz(tmp_path: Path) -> None:
    plan = _plan(tmp_path)
    gz = tmp_path / "g.json"
    gz.write_bytes(gzip.compress(plan.read_bytes()))
    result = runner.invoke(app, ["check", str(gz)])
    assert result.exit_code == 2
    assert result.output.strip().splitlines() == [
        f"error: {gz}: gzip data, not text: name it g.json.gz, as pptl reads .json.gz files gunzipped"]
    renamed = gz.rename(tmp_path / "g.json.gz")  # the advice holds
    assert runner.invoke(app, ["check", str(renamed)]).exit_code == 0


def test_a_gzipped_config_named_json_gz_plans(tmp_path: Path) -> None:
    cfg = tmp_path / "c.json.gz"  # read_structured (pptl plan's reader) takes the name it advises too
    cfg.write_bytes(gzip.compress(b'{"schedule": "1f1b", "pp": 2, "microbatches": 4}'))
    result = runner.invoke(app, ["plan", str(cfg)])
    assert result.exit_code == 0, result.output
    assert "makespan 15" in result.output  # 1f1b pp 2 m 4, F 1, B 2: (m + p - 1)(F + B) = 15


def test_gzip_under_another_name_and_plain_binary(tmp_path: Path) -> None:
    from pptl.fileio import utf8_text

    raw = gzip.compress(b"schedule: 1f1b\n")
    with pytest.raises(InputError, match=r"^c\.yaml: gzip data, not text: gunzip it first \(pptl reads gzip only "
                                         r"in \.json\.gz files\)$"):
        utf8_text(raw, "c.yaml")
    with pytest.raises(InputError, match=r"^c\.json: not UTF-8 text$"):
        utf8_text(b"\xff\xfe", "c.json")


# 4. legend: only categories that draw something -----------------------------------------------------

@pytest.fixture
def comms_csv(tmp_path: Path) -> Path:
    out = tmp_path / "t.csv"  # each rank ends with a REDUCE_GRAD, which the CSV gives no duration
    result = runner.invoke(app, ["export", str(CONFIG), "--to", "torch-csv", "--comms", "-o", str(out)])
    assert result.exit_code == 0, result.output
    assert "REDUCE_GRAD" in out.read_text()
    return out


def test_terminal_legend_leaves_out_zero_width_ops(comms_csv: Path) -> None:
    result = runner.invoke(app, ["render", str(comms_csv), "--width", "100"])
    assert result.exit_code == 0, result.output
    assert result.output.splitlines()[-1] == "F=Forward  B=Backward"
    assert "REDUCE_GRAD" not in result.output


def test_figure_legend_leaves_out_zero_width_ops(comms_csv: Path) -> None:
    from pptl.planning import timeline_of
    from pptl.render.layout import build_layout
    from pptl.render.mpl import figure_from_layout

    lay = build_layout(timeline_of(load_any(comms_csv)))
    assert [c.label for c in lay.categories] == ["Forward", "Backward", "REDUCE_GRAD"]  # blocks index all three
    assert [c.label for c in lay.legend()] == ["Forward", "Backward"]
    fig = figure_from_layout(lay)
    assert [t.get_text() for lg in fig.legends for t in lg.get_texts()] == ["Forward", "Backward"]


# 5. pptl check and a plan's timeline: validated, never built ---------------------------------------

def test_check_reports_a_malformed_timeline_in_one_line(tmp_path: Path) -> None:
    plan = _plan(tmp_path)
    data = json.loads(plan.read_text())
    data["timeline"]["start"] = "bad"
    plan.write_text(json.dumps(data))
    for command in ("check", "render"):  # check passes no file render then refuses
        result = runner.invoke(app, [command, str(plan)])
        assert result.exit_code == 2
        assert result.output.strip().splitlines() == [
            f"error: {plan}: timeline.start: got 'bad', expected a list of 160 times (one per op, in file order)"]


def test_check_builds_no_events_of_a_planned_timeline(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from pptl.formats.plan import StoredColumns

    plan = _plan(tmp_path)

    def built(self: StoredColumns) -> None:
        raise AssertionError("pptl check built the plan's timeline events")

    monkeypatch.setattr(StoredColumns, "__call__", built)
    report = check_file(str(plan))
    assert report.valid and report.ops == 160


def test_comm_latency_flag_has_the_configs_bound():
    # costs and the config's comm.latency stop at 1e15; the flag did not, and 1e308 overflowed the timing
    # with no field named (serve showed it in the top box)
    from typer.testing import CliRunner

    from pptl.cli import app

    runner = CliRunner()
    for bad in ("1e308", "1e16", "-1"):
        r = runner.invoke(app, ["plan", "--schedule", "1f1b", "--pp", "2", "--microbatches", "2", "--comm-latency", bad])
        assert r.exit_code == 2, (bad, r.output)
        # one wording whichever check meets it first (the option's type or the library)
        assert "--comm-latency: got" in r.output and "1e+15" in r.output, r.output
    ok = runner.invoke(app, ["plan", "--schedule", "1f1b", "--pp", "2", "--microbatches", "2", "--comm-latency", "1e15"])
    assert ok.exit_code == 0, ok.output
