"""Boundaries of what a user types: a config's and the flags' ranges at their very ends, the exit
codes (1: a schedule that breaks a rule, 2: bad input), the plan table's screenful of ranks, the
output names (upper-case and ``.gz`` suffixes), and the explorer's request limits and plan cache.

Hand-written mutants (/work/wt/_mutants/wave2_cli.py) showed no test held these. Every expected value
is worked out by hand in the test's docstring or comments, from the semantics the modules state,
not read off the code's output.
"""
from __future__ import annotations

import gzip
import http.client
import json
from pathlib import Path
from typing import Any
from urllib.parse import urlencode

import pytest
from typer.testing import CliRunner

from pptl.cli import app
from pptl.config import config_from_mapping
from pptl.errors import InputError
from pptl.fields import strict_number
from pptl.serve import api
from pptl.timeline import Event, Timeline

runner = CliRunner()
FIXTURES = Path(__file__).resolve().parent.parent / "fixtures"
CONFIG = str(FIXTURES / "1f1b.yaml")


def _cfg(**fields: Any) -> Any:
    return config_from_mapping({"schedule": "1f1b", "pp": 2, "microbatches": 2, **fields}, source="c.yaml")


# ----------------------------------------------------------------------------------------------
# pptl/config.py and pptl/fields.py: each range is closed at its stated end


@pytest.mark.parametrize("name", ["pp", "microbatches", "vpp"])
def test_a_size_of_exactly_one_million_is_a_size_and_one_more_is_refused(name: str) -> None:
    """config.py: "expected at most 1000000": the bound itself is allowed (a config is not planned
    here, so 1,000,000 costs nothing), 1,000,001 is the first refused."""
    assert getattr(_cfg(**{name: 1_000_000}), name) == 1_000_000
    with pytest.raises(InputError) as e:
        _cfg(**{name: 1_000_001})
    assert str(e.value) == f"c.yaml: field '{name}': got 1000001, expected at most 1000000"


def test_w_activation_of_exactly_one_is_the_whole_activation() -> None:
    """w_activation is a fraction of the activation that I leaves held until W: 0..1, both ends
    meaningful (1: I frees nothing)."""
    assert _cfg(w_activation=1).w_activation == 1.0
    assert _cfg(w_activation=0).w_activation == 0.0
    with pytest.raises(InputError, match=r"^c\.yaml: field 'w_activation': got 1\.5, expected at most 1\.0$"):
        _cfg(w_activation=1.5)


def test_workload_sizes_at_their_largest_are_kept() -> None:
    """MAX_HIDDEN 65536, MAX_TOKENS 2**20 = 1048576 and MAX_LAYERS 100000 are the largest allowed
    (strict_int's range is lo..hi, both ends in); one more is refused naming the range."""
    w = _cfg(workload={"hidden": 65_536, "tokens": 1_048_576, "layers_per_stage": 100_000,
                       "stage_layers": [100_000, 1]}).workload
    assert (w.hidden, w.tokens, w.layers_per_stage, w.stage_layers) == (65_536, 1_048_576, 100_000, (100_000, 1))
    with pytest.raises(InputError, match=r"field 'workload\.hidden': got 65537, expected an integer in 1\.\.65536$"):
        _cfg(workload={"hidden": 65_537})
    with pytest.raises(InputError, match=r"field 'workload\.stage_layers': got \[100001\], expected a list of "
                                         r"integers 1\.\.100000"):
        _cfg(workload={"stage_layers": [100_001]})


def test_a_rank_factor_of_zero_is_refused() -> None:
    """costs.rank_scale: a factor on the rank's durations, > 0 (0 would make its ops free)."""
    assert _cfg(costs={"rank_scale": {0: 1e-9}}).costs.rank_scale == {0: 1e-9}
    with pytest.raises(InputError, match=r"rank_scale\.0': got 0, expected a finite number > 0$"):
        _cfg(costs={"rank_scale": {0: 0}})


def test_an_integer_of_exactly_the_largest_number_is_a_number() -> None:
    """strict_number takes numbers up to MAX_NUMBER = 1e15 inclusive, as YAML reads them: the integer
    1000000000000000 (10**15) is that bound, as the float 1e15 is."""
    assert strict_number(10 ** 15, "c", "f") == 1e15
    with pytest.raises(InputError, match=r"expected a number in 0\.\.1e15$"):
        strict_number(10 ** 15 + 1, "c", "f")


@pytest.mark.parametrize("text", ["--4", "\u00b2", "\u0664"])
def test_a_size_in_text_is_plain_ascii_digits_or_one_line(text: str) -> None:
    """A config's sizes may be text ("4"), as YAML users write them, read as a plain integer: "--4"
    (two signs), "²" (a superscript, which str.isdigit() takes and int() refuses) and "٤" (another
    script's 4, refused as the number fields refuse it) are one line, not a ValueError traceback."""
    assert _cfg(pp="4").pp == 4
    with pytest.raises(InputError, match=r"^c\.yaml: field 'pp': got -3, expected an integer >= 1$"):
        _cfg(pp="-3")
    with pytest.raises(InputError) as e:
        _cfg(pp=text)
    assert str(e.value) == f"c.yaml: field 'pp': got {text!r}, expected an integer"


def test_a_rank_in_text_is_plain_ascii_digits_or_one_line() -> None:
    """costs.rank_scale's ranks may be text ("1": JSON keys are); "²" is no rank: one line, not a
    ValueError traceback."""
    assert _cfg(costs={"rank_scale": {"1": 1.5}}).costs.rank_scale == {1: 1.5}
    with pytest.raises(InputError, match=r"^c\.yaml: field 'costs\.rank_scale': rank '\u00b2' is not an integer >= 0$"):
        _cfg(costs={"rank_scale": {"\u00b2": 1.5}})


# ----------------------------------------------------------------------------------------------
# pptl/planning.py


def test_calibrated_costs_keep_the_first_stages_own_means() -> None:
    """Stage 0 is a stage: a run whose stage 0 took F = 2 and stage 1 F = 4 gives per-stage F of 2
    and 4 (and a base F of their mean, 3), so a re-plan keeps the first stage's own speed."""
    from pptl.planning import costs_from_timeline

    events = [Event(op="f0", rank=0, lane="compute", start=0.0, end=2.0, kind="F", stage=0, mb=0),
              Event(op="f1", rank=1, lane="compute", start=2.0, end=6.0, kind="F", stage=1, mb=0)]
    costs = costs_from_timeline(Timeline(events))
    assert costs["F"] == 3.0
    assert {s: v["F"] for s, v in costs["stages"].items()} == {0: 2.0, 1: 4.0}


def test_plan_to_an_upper_case_json_gz_name_is_gzipped(tmp_path: Path) -> None:
    """write_plan: "gzip-compressed when the name ends in .json.gz", a name compared without case
    (check_json_name takes PLAN.JSON.GZ too): the file starts with gzip's magic 1f 8b."""
    out = tmp_path / "PLAN.JSON.GZ"
    r = runner.invoke(app, ["plan", "--schedule", "1f1b", "--pp", "2", "-m", "2", "-o", str(out)])
    assert r.exit_code == 0, r.output
    raw = out.read_bytes()
    assert raw[:2] == b"\x1f\x8b"
    assert json.loads(gzip.decompress(raw))["format"] == "pptl-plan"


# ----------------------------------------------------------------------------------------------
# pptl/commands: the value types at their ends, the exit codes, the screenful of ranks


@pytest.mark.parametrize("text", ["1__2", "_4", "4_"])
def test_an_integer_option_with_misplaced_underscores_is_one_line(text: str) -> None:
    """Integer options take 4, 4.0 and 4_000 (Python's digit grouping: one _ between digits); "1__2",
    "_4" and "4_" are no integer: one line, exit 2, not a ValueError traceback (exit 1)."""
    r = runner.invoke(app, ["plan", "--schedule", "1f1b", "--pp", "2", "-m", "1_0", "--output", "json"])
    assert r.exit_code == 0, r.output  # 1_0 is 10: 2 * 2 * 10 compute ops + 4 * 1 * 10 messages
    assert json.loads(r.stdout)["ops"] == 80
    r = runner.invoke(app, ["plan", "--schedule", "1f1b", "--pp", text, "-m", "2"])
    assert r.exit_code == 2
    assert r.stderr.splitlines() == [f"error: --pp: got '{text}', expected an integer >= 1"]  # text, quoted


def test_memory_limit_of_zero_is_a_limit_so_the_plan_breaks_it_exit_1() -> None:
    """--memory-limit takes a number >= 0: 0 is a limit (exit 1, the plan holds activations, PP009),
    not bad input (exit 2). 1f1b pp=2 m=2: each rank's first F (at t=0 and t=1, F=1) already holds 1
    unit, over 0; rank 0 runs F F B B (peak 2), rank 1 F B F B (peak 1)."""
    r = runner.invoke(app, ["plan", "--schedule", "1f1b", "--pp", "2", "-m", "2", "--memory-limit", "0"])
    assert r.exit_code == 1, r.output
    assert [line for line in r.stdout.splitlines() if line.startswith("PP")] == [
        "PP009 error: rank 0 holds 1 activation unit at t=0 (when r0/compute/F s0 mb0 starts), over the limit 0; "
        "peak 2",
        "PP009 error: rank 1 holds 1 activation unit at t=1 (when r1/compute/F s1 mb0 starts), over the limit 0; "
        "peak 1"]


def test_tune_memory_limit_must_be_above_zero() -> None:
    """tune's --memory-limit is > 0 (a pipeline always holds something): 0 is bad input, exit 2."""
    r = runner.invoke(app, ["tune", str(FIXTURES / "tune" / "uneven.yaml"), "--memory-limit", "0"])
    assert r.exit_code == 2, r.output
    assert r.stderr.splitlines() == ["error: --memory-limit: got 0, expected a number > 0"]


def _capture_run(monkeypatch: pytest.MonkeyPatch) -> dict[str, Any]:
    """Replace run_plans by a recorder that stops the command (exit 2) before any process starts."""
    import pptl.run

    seen: dict[str, Any] = {}

    def fake(plans: Any, **kwargs: Any) -> Any:
        seen.update(kwargs)
        raise InputError("recorded")

    monkeypatch.setattr(pptl.run, "run_plans", fake)
    return seen


def test_slow_rank_zero_is_a_rank_and_gets_the_default_factor(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """--slow-rank 0 names rank 0 (a rank number, not "no rank"): without --slow-factor it runs 1.3
    times slower, the documented default; with --slow-factor 100, the largest allowed, 100 times."""
    seen = _capture_run(monkeypatch)
    r = runner.invoke(app, ["run", CONFIG, "--device", "cpu", "--slow-rank", "0", "-o", str(tmp_path / "m.json")])
    assert r.stderr.splitlines() == ["error: recorded"], r.output
    assert (seen["slow_rank"], seen["slow_factor"]) == (0, 1.3)
    r = runner.invoke(app, ["run", CONFIG, "--device", "cpu", "--slow-rank", "0", "--slow-factor", "100",
                            "-o", str(tmp_path / "m.json")])
    assert r.stderr.splitlines() == ["error: recorded"], r.output
    assert (seen["slow_rank"], seen["slow_factor"]) == (0, 100.0)


def test_run_timeout_of_zero_is_refused_before_running(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """--timeout is seconds without progress before the ranks are stopped, > 0: 0 would stop every
    run at once, so it is bad input (exit 2) and nothing runs."""
    seen = _capture_run(monkeypatch)
    r = runner.invoke(app, ["run", CONFIG, "--device", "cpu", "--timeout", "0", "-o", str(tmp_path / "m.json")])
    assert r.exit_code == 2
    assert r.stderr.splitlines() == ["error: --timeout: got 0, expected a number > 0"]
    assert seen == {}


def test_render_width_of_exactly_the_largest_is_drawn() -> None:
    """--width takes 40 to MAX_WIDTH = 1000 columns, both ends in; 1001 is refused naming them."""
    r = runner.invoke(app, ["render", CONFIG, "--width", "1000"])
    assert r.exit_code == 0, r.output
    assert max(len(line) for line in r.stdout.splitlines()) <= 1000
    r = runner.invoke(app, ["render", CONFIG, "--width", "1001"])
    assert r.exit_code == 2
    assert r.stderr.splitlines() == ["error: --width: got 1001, expected an integer from 40 to 1000"]


def test_comm_latency_of_exactly_the_largest_value_is_planned() -> None:
    """--comm-latency takes 0 to MAX_VALUE = 1e15 inclusive (the config's comm.latency bound). 1f1b
    pp=2 m=1 with F=1, B=2: F0, a message, F1, B1, a message, B0: 1 + 1e15 + 1 + 2 + 1e15 + 2."""
    r = runner.invoke(app, ["plan", "--schedule", "1f1b", "--pp", "2", "-m", "1", "--comm-latency", "1e15",
                            "--output", "json"])
    assert r.exit_code == 0, r.output
    assert json.loads(r.stdout)["makespan"] == 2e15 + 6


def test_compare_top_zero_lists_no_op() -> None:
    """compare --top is how many ops to list with their errors, from 0 (none: no "largest end-time
    errors" section) up; --top 1 lists one of the 160 ops (the plan's, 1f1b pp=4 m=8)."""
    measured = Path(__file__).resolve().parent / "data" / "runs" / "1f1b_cpu.measured.json"
    r = runner.invoke(app, ["compare", CONFIG, str(measured), "--top", "0"])
    assert r.exit_code == 0, r.output
    # the planned bubble of 1f1b pp=4 m=8 (F=1, B=2): idle (p-1)(F+B) = 9 of (m+p-1)(F+B) = 33, 27.3%
    assert "largest end-time errors" not in r.stdout and "bubble: planned 27.3%" in r.stdout
    r = runner.invoke(app, ["compare", CONFIG, str(measured), "--top", "1"])
    assert "largest end-time errors (1 of 160 ops; planned - measured, ms):" in r.stdout


def _rank_rows(output: str) -> list[str]:
    return [line.split("│")[0].strip() for line in output.splitlines() if "│" in line]


def test_a_screenful_of_32_ranks_is_listed_in_full_and_33_is_summarised() -> None:
    """_SCREEN_RANKS = 32 ranks are listed in full; from 33 the table shows the first 8, one … row
    and the last 8, and says 33 - 2 * 8 = 17 middle ranks are summarised. (1f1b takes m=1 < pp.)"""
    r = runner.invoke(app, ["plan", "--schedule", "1f1b", "--pp", "32", "-m", "1"])
    assert r.exit_code == 0, r.output
    assert _rank_rows(r.stdout) == [str(i) for i in range(32)]
    assert "middle ranks" not in r.stdout
    r = runner.invoke(app, ["plan", "--schedule", "1f1b", "--pp", "33", "-m", "1"])
    assert r.exit_code == 0, r.output
    assert _rank_rows(r.stdout) == [str(i) for i in range(8)] + ["…"] + [str(i) for i in range(25, 33)]
    assert "17 middle ranks summarised in the … row (ranges)" in r.stdout


def test_check_of_a_good_file_and_a_missing_one_reports_both_and_exits_2(tmp_path: Path) -> None:
    """Two inputs, one missing: the readable one is still checked and reported (ok), the missing one
    is one error line, and bad input wins the exit code (2, not 0). In JSON, the whole is not valid."""
    missing = str(tmp_path / "gone.json")
    r = runner.invoke(app, ["check", CONFIG, missing])
    assert r.exit_code == 2, r.output
    assert r.stdout.splitlines() == [f"{CONFIG}: ok, 160 ops checked"]
    assert r.stderr.splitlines() == [f"error: {missing}: no such file"]
    r = runner.invoke(app, ["check", CONFIG, missing, "--output", "json"])
    assert r.exit_code == 2, r.output
    data = json.loads(r.stdout)
    assert data["valid"] is False
    assert [f.get("valid") for f in data["files"]] == [True, None]
    assert data["files"][1] == {"path": missing, "error": f"{missing}: no such file"}


def test_export_to_an_upper_case_gz_name_gzips_or_is_refused(tmp_path: Path) -> None:
    """export: ".gz gzips", the suffix compared without case as plan -o does: -o T.JSON.GZ --to chrome
    is gzip (magic 1f 8b); a CSV to .GZ is refused as one to .gz is (gzip is for --to chrome)."""
    out = tmp_path / "T.JSON.GZ"
    r = runner.invoke(app, ["export", CONFIG, "--to", "chrome", "-o", str(out)])
    assert r.exit_code == 0, r.output
    raw = out.read_bytes()
    assert raw[:2] == b"\x1f\x8b" and "traceEvents" in json.loads(gzip.decompress(raw))
    csv = tmp_path / "s.csv.GZ"
    r = runner.invoke(app, ["export", CONFIG, "--to", "torch-csv", "-o", str(csv)])
    assert r.exit_code == 2
    assert r.stderr.splitlines() == [f"error: -o {csv}: .gz output is for --to chrome"]
    assert not csv.exists()


# ----------------------------------------------------------------------------------------------
# pptl/serve: the request limits, the op bound and the plan cache at their ends


def test_a_request_of_exactly_64_parameters_is_read_and_65_are_refused() -> None:
    """MAX_PARAMS = 64 parameters per request, the 64th included: 3 fields and 61 cost keys."""
    params = {"schedule": "1f1b", "pp": "4", "microbatches": "8", **{f"cost.K{i}": "1" for i in range(61)}}
    assert len(api.parse_request(params).settings.costs) == 61
    with pytest.raises(InputError, match=r"^request: 65 parameters, at most 64 accepted$"):
        api.parse_request({**params, "cost.K61": "1"})


def test_a_value_of_exactly_400_characters_is_read() -> None:
    """MAX_VALUE_CHARS = 400 characters a value, the 400th included: 50 stage overrides '0:F=1.5;'
    of 8 characters each."""
    stages = "0:F=1.5;" * 50
    assert len(stages) == 400
    assert api.parse_request({"schedule": "1f1b", "stages": stages}).settings.stages == stages
    with pytest.raises(InputError, match=r"^stages: 401 characters, at most 400 accepted$"):
        api.parse_request({"schedule": "1f1b", "stages": stages + "0"})


def _settings(**params: str) -> api.Settings:
    return api.parse_request({"schedule": "1f1b", "pp": "4", **params}).settings


def test_a_plan_of_exactly_the_explorers_bound_is_planned() -> None:
    """SERVE_MAX_OPS = 500,000 ops, the bound included. 1f1b holds 2pm compute ops and 4(p-1)m
    messages (a SEND and a RECV each way per link and micro-batch): m(6p - 4) = 20m at pp=4, so
    m = 25,000 is exactly 500,000 ops and m = 25,001 is 500,020."""
    assert api.config_of(_settings(microbatches="25000")).microbatches == 25_000  # not planned, only bounded
    with pytest.raises(InputError, match=r"would plan about 500,020 ops, more than the 500,000"):
        api.config_of(_settings(microbatches="25001"))


def test_the_cache_keeps_plans_that_fill_it_exactly() -> None:
    """PlanCache drops the oldest plans while the ops held are over max_ops: 1f1b pp=4 holds 20m ops
    (160 at m=8, 180 at m=9), so with max_ops 340 both stay; a third plan (m=10, 200) makes 540, and
    the oldest (160) goes, leaving 380, then the next (180), leaving 200."""
    cache = api.PlanCache(max_ops=340)
    cache.plan(_settings(microbatches="8"), None)
    cache.plan(_settings(microbatches="9"), None)
    assert (len(cache), cache.ops_held) == (2, 340)
    cache.plan(_settings(microbatches="10"), None)
    assert (len(cache), cache.ops_held) == (1, 200)


def test_the_cache_holds_as_many_plans_as_its_size() -> None:
    """PlanCache(size=2) holds two plans (a pair to compare): a third drops the oldest."""
    cache = api.PlanCache(size=2)
    cache.plan(_settings(microbatches="8"), None)
    cache.plan(_settings(microbatches="9"), None)
    assert (len(cache), cache.ops_held) == (2, 160 + 180)
    cache.plan(_settings(microbatches="10"), None)
    assert (len(cache), cache.ops_held) == (2, 180 + 200)


def test_a_download_of_one_chunk_per_rank_names_no_vpp() -> None:
    """The file name says -vppN only where a rank holds more than one chunk."""
    cache = api.PlanCache()
    req = api.parse_request({"schedule": "1f1b", "pp": "4", "microbatches": "8"})
    assert api.download("plan", req, "a", cache=cache).filename == "1f1b-pp4-mb8.json"


def test_a_block_exactly_as_wide_as_a_readable_label_keeps_it() -> None:
    """Labels narrower than _MIN_LABEL_PX = 12 px are blanked; one exactly 12 px wide is readable. A
    time axis of 1100 units over the 1100-px plot is one px a unit: widths 12 and 11.5."""
    from pptl.serve.api import _drop_unreadable_labels

    fig: dict[str, Any] = {"layout": {"xaxis": {"range": [0.0, 1100.0]}},
                           "data": [{"text": ["F1", "B1"], "x": [12.0, 11.5]}]}
    _drop_unreadable_labels(fig)
    assert fig["data"][0]["text"] == ["F1", ""]


def test_the_server_remembers_the_latest_request_of_256_pages() -> None:
    """_MAX_CLIENTS = 256 pages' latest request numbers are kept; the 257th drops the oldest."""
    from pptl.serve.server import make_server

    srv = make_server("127.0.0.1", 0, log=lambda line: None)
    try:
        for k in range(256):
            srv.note_request(f"page{k}", 1)
        assert len(srv.latest) == 256 and "page0" in srv.latest
        srv.note_request("page256", 1)
        assert len(srv.latest) == 256 and "page0" not in srv.latest and "page1" in srv.latest
    finally:
        srv.server_close()


def _download(srv: Any, fields: int) -> tuple[int, bytes]:
    """GET a plan download whose query has ``fields`` fields: which, schedule, pp, microbatches, then
    cost.F=1 repeated (one parameter once read, as a page's query may repeat one)."""
    query = urlencode([("which", "a"), ("schedule", "1f1b"), ("pp", "2"), ("microbatches", "2")]
                      + [("cost.F", "1")] * (fields - 4))
    conn = http.client.HTTPConnection("127.0.0.1", srv.server_address[1], timeout=60)
    conn.request("GET", "/api/download/plan?" + query)
    res = conn.getresponse()
    body = res.read()
    conn.close()
    return res.status, body


def test_a_download_query_of_which_and_64_parameters_is_read(server: Any) -> None:
    """A download's query is which (a or b) and at most MAX_PARAMS = 64 parameters: 65 fields in
    all are read; 66 are refused as more than 64 parameters."""
    srv, _ = server
    status, body = _download(srv, 65)
    assert status == 200 and json.loads(body)["format"] == "pptl-plan"
    status, body = _download(srv, 66)
    assert status == 400 and json.loads(body)["error"] == "request: more than 64 parameters"


@pytest.mark.parametrize("command", [["check"], ["diagnose"]])
def test_a_file_name_too_long_for_the_file_system_is_one_line_exit_2(tmp_path: Path, command: list[str]) -> None:
    """A 300-character name (Linux takes 255 a component): `pptl check` tests whether it exists and
    `pptl diagnose` whether it is a folder, and the system refuses the name itself (ENAMETOOLONG) before
    any reader can word it: that was a traceback, exit 1."""
    path = str(tmp_path / ("a" * 300 + ".json"))
    result = runner.invoke(app, [*command, path])
    assert result.exit_code == 2, result.output
    err = [line for line in result.output.splitlines() if line.strip()]
    assert len(err) == 1 and err[0].startswith(f"error: {path}: cannot read: File name too long"), err
