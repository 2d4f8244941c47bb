"""The explorer's API as plain functions: parameters in, JSON-ready answers out."""
from __future__ import annotations

import json

import pytest
from serve_calls import error as _error
from serve_calls import plan as _plan
from serve_calls import req as _req

from pptl.config import load_config
from pptl.errors import InputError
from pptl.formats.plan import plan_from_dict
from pptl.formats.torch_csv import load_csv_text
from pptl.serve import api


def test_plan_view_has_metrics_formula_and_figure() -> None:
    view = _plan(**{"pp": "8", "microbatches": "64"})
    a = view["a"]
    assert a["makespan"] == 213 and a["ops"] == 2816 and len(a["ranks"]) == 8
    assert a["formula"] == "(p-1)(F+B)" and a["textbook"] == 21 and a["simulated_idle"] == 21
    assert a["violations"] == [] and a["valid"]
    assert view["b"] is None and view["figure"]["blocks"] == 1024
    assert view["figure"]["layout"]["yaxis"]["ticktext"][0].startswith("rank 0")
    json.dumps(view, allow_nan=False)  # what the server sends


def test_costs_stage_overrides_and_latency_reach_the_plan() -> None:
    plain = _plan()["a"]["makespan"]
    assert _plan(**{"cost.F": "2"})["a"]["makespan"] > plain
    assert _plan(stages="3:B=5")["a"]["makespan"] > plain
    assert _plan(comm_latency="0.5")["a"]["makespan"] > plain


def test_memory_limit_gives_pp009() -> None:
    codes = {v["code"] for v in _plan(memory_limit="2")["a"]["violations"]}
    assert codes == {"PP009"}


@pytest.mark.parametrize(("params", "field", "message"), [
    ({"pp": "0"}, "pp", "field 'pp': got 0, expected an integer >= 1"),
    ({"pp": "abc"}, "pp", "field 'pp': got 'abc', expected an integer"),
    ({"pp": ""}, "pp", "--pp required with --schedule"),
    ({"microbatches": "-3"}, "microbatches", "field 'microbatches': got -3"),
    ({"vpp": "2"}, "vpp", "field 'vpp': got 2, expected 1"),
    ({"schedule": "nope"}, "schedule", "unknown schedule 'nope'; known schedules: gpipe"),
    ({"cost.F": "x"}, "cost.F", "field '--cost F': got 'x', expected a number"),
    ({"cost.B": "-1"}, "cost.B", "expected a finite number >= 0"),
    ({"comm_latency": "fast"}, "comm_latency", "--comm-latency: got 'fast'"),
    ({"memory_limit": "lots"}, "memory_limit", "field 'memory_limit': got 'lots', expected a number"),
    ({"stages": "0:F"}, "stages", "stages: got 'F' in '0:F', expected STAGE:KIND=VALUE"),
    ({"stages": "x:F=1"}, "stages", "field 'costs.stages': stage 'x' is not an integer"),
    ({"stages": "0:F=y"}, "stages", "field 'costs.stages.0.F': got 'y'"),
    ({"microbatches": "100000", "pp": "8"}, "microbatches", "more than the 500,000 the explorer draws live"),
    ({"schedule": "dualpipe", "pp": "3"}, "pp", "expected an even number of ranks"),
], ids=lambda v: v if isinstance(v, str) else None)
def test_bad_values_get_one_line_and_their_field(params: dict, field: str, message: str) -> None:
    body = _error(**params)
    assert body["field"] == field
    assert message in body["error"]
    assert "\n" not in body["error"] and not body["error"].startswith("<flags>")


def test_compare_plans_a_second_family_on_one_time_axis() -> None:
    view = _plan(compare="zb-h1")
    assert view["b"]["family"] == "zb-h1" and view["compare_error"] is None
    lay = view["figure"]["layout"]
    assert lay["yaxis3"]["domain"][1] < lay["yaxis"]["domain"][0]
    assert lay["xaxis"]["anchor"] == "y3"
    assert lay["xaxis"]["range"][1] == max(view["a"]["makespan"], view["b"]["makespan"])
    names = [t["name"] for t in view["figure"]["data"] if t.get("showlegend", True)]
    assert len(names) == len(set(names))  # one legend entry per kind for both
    assert {t.get("yaxis", "y") for t in view["figure"]["data"]} == {"y", "y3"}


def test_compare_error_names_the_compare_fields() -> None:
    view = _plan(compare="dualpipe", compare_vpp="2")
    assert view["b"] is None
    assert view["compare_error"]["field"] == "compare_vpp"
    view = _plan(compare="interleaved-1f1b", compare_vpp="2", microbatches="3")
    assert view["compare_error"]["field"] == "compare"


def test_compare_of_moe_plans_drops_the_order_grid() -> None:
    view = _plan(schedule="moe-1f1b-overlap", vpp="2", compare="interleaved-1f1b", compare_vpp="2")
    assert "xaxis2" not in view["figure"]["layout"]
    assert all(t.get("xaxis", "x") == "x" for t in view["figure"]["data"])


def test_big_plans_get_metrics_but_no_live_figure() -> None:
    view = _plan(pp="8", microbatches="1300")
    assert view["figure"].get("data") is None
    assert "too many to draw live" in view["figure"]["note"]
    assert view["a"]["ops"] > 50_000


@pytest.mark.parametrize(("params", "message"), [
    ({f"cost.K{i}": "1" for i in range(70)}, "at most 64 accepted"),
    ({"pp": "9" * 500}, "at most 400 accepted"),
    ({"evil": "1"}, "unknown parameter 'evil'"),
    ({"cost.__class__": "1"}, "a cost key is a letter"),
    ({"pp": ["4"]}, "expected text"),
    ({"split_backward": "maybe"}, "expected 0 or 1"),
], ids=["count", "length", "unknown", "cost-key", "type", "bool"])
def test_hostile_parameters_are_refused(params: dict, message: str) -> None:
    with pytest.raises(InputError, match=message):
        api.parse_request({"schedule": "1f1b", **params})


def test_downloads_are_the_library_formats() -> None:
    cache = api.PlanCache()
    req = _req(schedule="zbv", vpp="2", compare="1f1b", compare_vpp="1")
    plan = api.download("plan", req, "a", cache=cache)
    schedule, timeline = plan_from_dict(json.loads(plan.data))
    assert plan.filename == "zbv-pp4-vpp2-mb8.json" and schedule.family == "zbv" and timeline is not None
    csv = api.download("csv", req, "b", cache=cache)
    assert load_csv_text(csv.data.decode())[0].pp == 4
    assert api.download("png", req, "a", cache=cache).data[:4] == b"\x89PNG"
    assert b"<svg" in api.download("svg", req, "a", cache=cache).data[:400]
    with pytest.raises(InputError, match="expected one of plan, png, svg, csv"):
        api.download("exe", req, "a", cache=cache)
    with pytest.raises(InputError, match="no second schedule"):
        api.download("plan", _req(), "b", cache=cache)


def test_cache_plans_once_per_settings(monkeypatch: pytest.MonkeyPatch) -> None:
    calls = []
    real = api.planning.plan
    monkeypatch.setattr(api.planning, "plan", lambda cfg: calls.append(cfg) or real(cfg))
    cache = api.PlanCache(size=2)
    req = _req()
    api.plan_view(req, cache=cache)
    api.download("plan", req, "a", cache=cache)
    assert len(calls) == 1


def test_config_file_gives_the_starting_fields_and_keeps_its_options(fixtures) -> None:
    cfg = load_config(fixtures / "moe_seed.yaml")
    s = api.settings_from_config(cfg)
    params = api.settings_params(s)
    assert params["schedule"] == "moe-1f1b-overlap" and params["pp"] == str(cfg.pp)
    assert params["comm_latency"] == "0.25" and params["vpp"] == "2"
    again = api.config_of(api.parse_request(params).settings, cfg)
    assert again.options == cfg.options and again.costs == cfg.costs  # sub-op costs live in its options
    other = api.config_of(api.parse_request({**params, "schedule": "interleaved-1f1b"}).settings, cfg)
    assert other.options == {}  # another family does not get MoE options


def test_init_lists_families_with_their_natural_vpp() -> None:
    init = api.init_view(api.parse_request({"schedule": "1f1b", "pp": "4", "microbatches": "8"}).settings)
    vpp = {f["name"]: f["vpp"] for f in init["families"]}
    assert vpp["1f1b"] == 1 and vpp["interleaved-1f1b"] == 2 and vpp["moe-1f1b-overlap"] == 2


@pytest.mark.parametrize("family,vpp,formula", [
    ("looped-bfs", 2, "(p-1)(F+B) with F, B of one chunk, when m >= p"),
    ("interleaved-zb", 2, "(p-1)(F+I-W) with per-chunk costs, when m >= p"),
    ("v-half", 1, "about 3pF per rank (the paper's rate p/2m)"), ("v-min", 1, "about 4pF per rank"),
    ("inference", 1, "(p-1)F with F of one chunk (m a multiple of p when vpp > 1)"),
])
def test_newer_families_are_listed_and_planned(family: str, vpp: int, formula: str) -> None:
    init = api.init_view(api.parse_request({"schedule": family, "pp": "4", "microbatches": "8"}).settings)
    assert {f["name"]: f["vpp"] for f in init["families"]}[family] == vpp
    view = _plan(schedule=family, pp="4", microbatches="8", vpp=str(vpp))
    a = view["a"]
    assert a["valid"] and a["formula"].startswith(formula), a["formula"]
    json.dumps(view, allow_nan=False)
