"""The explorer's work limits: ops counted per family before planning, a cache bounded by the
ops it holds, one-line errors by their field."""
from __future__ import annotations

import http.client
import json
from urllib.parse import urlencode

import pytest

from pptl import planning
from pptl.errors import InputError
from pptl.schedules import get_family
from pptl.serve import api


def _estimate(cfg):
    from pptl.schedules import get_family

    return api.estimate_ops(cfg, get_family(cfg.schedule), limit=api.SERVE_MAX_OPS)


def _cfg(**params: str):
    base = {"schedule": "1f1b", "pp": "4", "microbatches": "8"}
    base.update(params)
    s = api.parse_request(base).settings
    return planning.make_config(None, {"schedule": s.schedule, "pp": s.pp, "microbatches": s.microbatches,
                                       "vpp": s.vpp, "group_size": s.group_size or None}, [], None)


def test_1f1b_count_by_hand() -> None:
    # pp 4 x 8 micro-batches: 64 compute ops (F and B), 3 links x 8 x 2 directions = 48 transfers,
    # each a SEND and a RECV: 96; 160 in all.
    assert _estimate(_cfg()) == 160
    assert _estimate(_cfg(microbatches="1000")) == 20 * 1000  # 8 + 12 per micro-batch
    assert _estimate(_cfg(pp="1000", microbatches="1")) == 2 * 1000 + 4 * 999


@pytest.mark.parametrize(("schedule", "pp", "vpp", "m"), [
    ("moe-1f1b-overlap", "4", "2", "40"), ("dualpipe", "4", "1", "40"), ("interleaved-1f1b", "8", "2", "24"),
    ("zbv", "4", "2", "30"), ("weight-update", "4", "1", "500"), ("inference", "6", "1", "100"),
    ("dualpipev", "6", "2", "100"), ("gpipe", "64", "1", "128"),
])
def test_estimate_is_the_count_the_family_builds(schedule: str, pp: str, vpp: str, m: str) -> None:
    cfg = _cfg(schedule=schedule, pp=pp, vpp=vpp, microbatches=m)
    assert _estimate(cfg) == len(get_family(schedule).build(cfg).ops)


def test_moe_over_the_limit_is_refused_before_planning(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(api.planning, "plan", lambda cfg: pytest.fail("planned"))
    req = api.parse_request({"schedule": "moe-1f1b-overlap", "pp": "4", "vpp": "2", "microbatches": "10000"})
    with pytest.raises(InputError) as e:
        api.plan_view(req, cache=api.PlanCache())
    body = api.error_body(e.value)
    # 4 x 2 x 10000 slots, 24.5 ops each (the old 6-op guess let this through at 480,000)
    assert body["field"] == "microbatches"
    assert "would plan about 1,960,000 ops, more than the 500,000" in body["error"]


def test_a_config_files_options_count(fixtures) -> None:
    from pptl.config import load_config

    base = load_config(fixtures / "moe_seed.yaml")
    s = api.settings_from_config(base)
    cfg = api.config_of(s, base)
    assert _estimate(cfg) == len(get_family(cfg.schedule).build(cfg).ops)


def test_cache_is_bounded_by_the_ops_it_holds() -> None:
    cache = api.PlanCache(max_ops=300)
    a = api.parse_request({"schedule": "1f1b", "pp": "4", "microbatches": "8"}).settings  # 160 ops
    b = api.parse_request({"schedule": "1f1b", "pp": "4", "microbatches": "9"}).settings  # 180 ops
    cache.plan(a, None)
    assert (len(cache), cache.ops_held) == (1, 160)
    cache.plan(b, None)
    assert (len(cache), cache.ops_held) == (1, 180)  # 340 > 300: the older plan goes
    big = api.PlanCache(max_ops=10)
    big.plan(a, None)
    assert (len(big), big.ops_held) == (1, 160)  # the newest always stays


def test_default_cache_holds_at_most_two_plans_at_the_limit() -> None:
    assert api.PlanCache()._max_ops == 2 * api.SERVE_MAX_OPS


def _post(srv, params: dict) -> tuple[int, dict]:
    conn = http.client.HTTPConnection("127.0.0.1", srv.server_address[1], timeout=60)
    conn.request("POST", "/api/plan", body=json.dumps({"params": params}).encode(),
                 headers={"Content-Type": "application/json"})
    res = conn.getresponse()
    data = json.loads(res.read())
    conn.close()
    return res.status, data


def test_server_refuses_a_big_moe_plan(server, monkeypatch: pytest.MonkeyPatch) -> None:
    srv, _ = server
    monkeypatch.setattr(api.planning, "plan", lambda cfg: pytest.fail("planned"))
    status, body = _post(srv, {"schedule": "moe-1f1b-overlap", "pp": "4", "vpp": "2", "microbatches": "10000"})
    assert status == 400 and body["field"] == "microbatches" and "1,960,000 ops" in body["error"]


def test_stage_override_key_is_the_stages_field(server) -> None:
    srv, _ = server
    status, body = _post(srv, {"schedule": "1f1b", "pp": "4", "microbatches": "8", "stages": "0:Q=5"})
    assert status == 400
    assert body == {"error": "stages: unknown cost key 'Q' in a per-stage override; known keys: F, B, I, W, FB "
                             "(op kinds)", "field": "stages"}


def test_png_download_of_too_many_ranks_is_one_line(server) -> None:
    srv, _ = server
    conn = http.client.HTTPConnection("127.0.0.1", srv.server_address[1], timeout=120)
    conn.request("GET", "/api/download/png?" + urlencode({"schedule": "1f1b", "pp": "4000", "microbatches": "1"}))
    res = conn.getresponse()
    body = json.loads(res.read())
    conn.close()
    assert res.status == 400
    assert body["error"].startswith("4000 rows do not fit a figure 30 in tall")
