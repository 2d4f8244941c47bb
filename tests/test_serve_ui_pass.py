"""Defects found by using ``pptl serve`` in headless Chromium as a user would, each pinned here.

- many ranks froze the page: plotly lays out tick labels in time that grows with their square
  (pp 2,000 x 1 micro-batch: two minutes in ``Plotly.react``; pp 9,000: the tab never came back);
- a plan over the explorer's bound was always shown by the micro-batches field, also when pp was
  at fault (pp 100,000 x 8 micro-batches: the message sat under "8", pp was not marked);
- the "torch CSV" link of a plan torch's CSV cannot hold (dualpipe, inference, weight-update) ended
  in a download the browser marks "Failed", with the server's reason lost;
- under an error the last good plan stayed on screen as if current.
"""
from __future__ import annotations

import math
import shutil
import threading
from typing import Iterator

import pytest
from serve_calls import error as _error
from serve_calls import plan as _plan
from serve_calls import req as _req

from pptl.errors import InputError
from pptl.serve import api
from pptl.serve.server import make_server

# -- many ranks: at most MAX_ROW_LABELS labelled rows ------------------------------------------------


def test_many_ranks_label_every_kth_row() -> None:
    y = _plan(pp="500", microbatches="1")["figure"]["layout"]["yaxis"]
    # 500 rows of 1f1b (one lane each) -> every ceil(500 / 80) = 7th: rows 0, 7, ..., 497 = 72 labels
    assert len(y["tickvals"]) == len(y["ticktext"]) == 72
    assert api.MAX_ROW_LABELS == 80
    assert y["tickvals"][:3] == [0.5, 7.5, 14.5]  # a row is 1 high, labelled at its centre
    assert y["ticktext"][0].startswith("rank 0 ") and y["ticktext"][1].startswith("rank 7 ")
    assert y["ticktext"][-1].startswith("rank 497 ")
    assert y["range"] == [500.0, 0.0]  # every row is still drawn


def test_few_ranks_keep_every_label() -> None:
    y = _plan(pp="80", microbatches="1")["figure"]["layout"]["yaxis"]
    assert [t.split(" (")[0] for t in y["ticktext"]] == [f"rank {r}" for r in range(80)]


def test_compare_thins_both_timelines() -> None:
    lay = _plan(pp="200", microbatches="1", compare="gpipe")["figure"]["layout"]
    step = math.ceil(200 / 80)  # 3: rows 0, 3, ..., 198
    for axis in ("yaxis", "yaxis3"):
        assert len(lay[axis]["tickvals"]) == 67
        assert lay[axis]["ticktext"][1].startswith(f"rank {step} ")


# -- a plan over the bound is shown by the field at fault --------------------------------------------


def test_too_many_ranks_is_shown_by_pp() -> None:
    # 1f1b, 100,000 ranks: 800,000 stage x micro-batch slots; one micro-batch alone is still
    # 100,000 slots of about 6 ops (F, B and their sends and receives), past 500,000
    body = _error(pp="100000", microbatches="8")
    assert body["field"] == "pp"
    assert body["error"].startswith("field 'pp': 1f1b with pp=100000 x vpp=1 x microbatches=8 would plan")


def test_too_many_chunks_is_shown_by_vpp() -> None:
    # interleaved-1f1b takes at least pp = 4 micro-batches: 4 x 99,999 x 4 = 1.6M slots > 500,000
    body = _error(schedule="interleaved-1f1b", pp="4", vpp="99999", microbatches="8")
    assert body["field"] == "vpp"


def test_too_many_microbatches_is_still_shown_by_microbatches() -> None:
    body = _error(pp="8", microbatches="100000")  # 8 x 1 micro-batch is tiny: fewer micro-batches fit
    assert body["field"] == "microbatches"
    assert body["error"].startswith("field 'microbatches': ")


# -- a download the plan cannot take is not offered ------------------------------------------------


@pytest.mark.parametrize(("schedule", "reason"), [
    ("dualpipe", "schedule 'dualpipe' has 2 directions; torch's CSV has one (export dualpipev rather than dualpipe)"),
    ("inference", "schedule 'inference' runs forwards only"),
    ("weight-update", "schedule 'weight-update' uses lane 'comm'"),
])
def test_csv_refusal_is_in_the_panel(schedule: str, reason: str) -> None:
    req = _req(schedule=schedule)
    cache = api.PlanCache()
    panel = api.plan_view(req, cache=cache)["a"]
    assert set(panel["unavailable"]) == {"csv"} and panel["unavailable"]["csv"].startswith(reason)
    with pytest.raises(InputError) as e:  # the link would have asked for exactly this
        api.download("csv", req, "a", cache=cache)
    assert " ".join(str(e.value).split()) == panel["unavailable"]["csv"]


def test_every_download_of_1f1b_is_offered() -> None:
    view = _plan(compare="dualpipev", compare_vpp="2")
    assert view["a"]["unavailable"] == {} and view["b"]["unavailable"] == {}


# -- the page: headless Chromium (skipped where it is missing) ---------------------------------------

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
try:
    from playwright.sync_api import sync_playwright
except ImportError:  # pragma: no cover - the test extra installs it
    sync_playwright = None

browser_only = pytest.mark.skipif(CHROMIUM is None or sync_playwright is None,
                                  reason="needs chromium and the playwright package")


@pytest.fixture(scope="module")
def page_url() -> Iterator[tuple[object, str]]:
    logged: list[str] = []
    srv = make_server("127.0.0.1", 0, log=logged.append)
    t = threading.Thread(target=srv.serve_forever, kwargs={"poll_interval": 0.1}, daemon=True)
    t.start()
    with sync_playwright() as p:
        b = p.chromium.launch(executable_path=CHROMIUM, args=["--headless", "--no-sandbox", "--disable-gpu"])
        yield b, srv.url
        b.close()
    srv.shutdown()
    srv.server_close()
    assert logged == [], f"the server logged errors: {logged}"


def _wait(page: object, after: int) -> None:
    page.wait_for_function(f"() => Number(document.body.dataset.done || 0) >= {after} && "
                           "document.body.dataset.state !== 'busy'", timeout=60_000)


def _open(browser: object, url: str) -> tuple[object, object]:
    ctx = browser.new_context(viewport={"width": 1400, "height": 900})
    page = ctx.new_page()
    page.goto(url)
    _wait(page, 1)
    return ctx, page


@browser_only
def test_page_says_why_there_is_no_csv(page_url: tuple[object, str]) -> None:
    browser, url = page_url
    ctx, page = _open(browser, url + "#schedule=dualpipe&pp=4&microbatches=8")
    assert page.locator('#panel-a a[data-download="csv"]').count() == 0  # no link that would only fail
    assert page.locator('#panel-a a[data-download="plan"]').count() == 1
    assert page.locator('#panel-a [data-refused="csv"]').inner_text() == (
        "no torch CSV: schedule 'dualpipe' has 2 directions; torch's CSV has one (export dualpipev rather than dualpipe)")
    ctx.close()


@browser_only
def test_page_fades_the_last_plan_under_an_error(page_url: tuple[object, str]) -> None:
    browser, url = page_url
    ctx, page = _open(browser, url)
    assert page.evaluate("getComputedStyle(document.getElementById('plot')).opacity") == "1"
    field = page.locator('[name="pp"]')
    field.click(click_count=3)
    field.press_sequentially("0")
    _wait(page, 2)
    assert page.locator('[data-field="pp"] .err').inner_text().startswith("field 'pp': got 0")
    # the pp=4 plan is still there, faded: its numbers are not those of the fields
    for sel in ("plot", "panels"):
        assert float(page.evaluate(f"getComputedStyle(document.getElementById('{sel}')).opacity")) < 0.5
    ctx.close()
