"""Interactive HTML: self-contained, one trace per kind, hover fields, size limits, and a real
headless browser (Debian's chromium) that loads it with no network, draws bars, raises no error."""
from __future__ import annotations

import json
import re
import shutil
import subprocess
from pathlib import Path

import pytest

from pptl.demo import default_fixtures_dir, example_files
from pptl.errors import InputError
from pptl.planning import load_timeline
from pptl.render import write_file
from pptl.render.html import HTML_WARN_BLOCKS, HtmlOptions, figure_dict, html_document, size_warning
from pptl.render.layout import build_layout
from pptl.render.samples import dualpipe_sample, moe_sample, scaled, weight_update_sample

EXAMPLES = example_files(default_fixtures_dir())
FIXTURE_1F1B = default_fixtures_dir() / "1f1b.yaml"


@pytest.mark.parametrize("path", EXAMPLES, ids=lambda p: p.name)
def test_every_example_is_a_self_contained_page(path: Path, tmp_path: Path) -> None:
    out = tmp_path / "x.html"
    write_file(load_timeline(path), out)
    page = out.read_text()
    assert page.lower().startswith("<!doctype html>") and page.rstrip().endswith("</html>")
    assert "<title>" in page
    assert "Plotly.newPlot" in page
    assert len(page) > 1_000_000  # plotly.js is embedded, not fetched
    assert not re.search(r"<script[^>]+src=", page)


def test_one_bar_trace_per_kind_with_numeric_bases() -> None:
    tl = load_timeline(FIXTURE_1F1B)
    fig = figure_dict(tl)
    traces = {t["name"]: t for t in fig["data"]}
    assert set(traces) == {"Idle (bubble)", "Forward", "Backward"}
    fwd = traces["Forward"]
    assert fwd["type"] == "bar" and fwd["orientation"] == "h"
    assert len(fwd["base"]) == 32 and all(isinstance(b, float) for b in fwd["base"])
    assert fig["layout"]["xaxis"].get("type") is None  # linear, not a date axis
    assert "shapes" not in fig["layout"]  # bars are traces, not layout shapes
    assert fig["layout"]["yaxis"]["fixedrange"] is True  # zoom acts on time only
    assert fig["layout"]["legend"]["itemclick"] == "toggle"


def test_hover_shows_id_kind_stage_chunk_mb_times_and_waits() -> None:
    tl = load_timeline(FIXTURE_1F1B)
    fig = figure_dict(tl)
    bwd = next(t for t in fig["data"] if t["name"] == "Backward")
    for field in ("kind", "stage", "chunk", "mb", "start", "end", "duration", "waits on"):
        assert field in bwd["hovertemplate"]
    row = next(r for r in bwd["customdata"] if r[0] == "r3/compute/B s3 mb0")
    assert row[1:8] == ["B", 3, 0, "0", "4", "6", "2"]
    assert "r3/compute/F s3 mb0" in row[8]


def test_split_blocks_keep_their_two_colours() -> None:
    fig = figure_dict(dualpipe_sample())
    fb = next(t for t in fig["data"] if t["name"] == "Overlapped forward & Backward")
    assert fb["marker"]["color"] == ["#F6B26B", "#38761D"]
    assert fb["width"][0] == pytest.approx(fb["width"][1])
    # seed 004: the halves sit side by side (F left, B right) in one row
    assert fb["offset"][0] == pytest.approx(fb["offset"][1])
    assert fb["base"][0] + fb["x"][0] == pytest.approx(fb["base"][1])
    swatch = next(t for t in fig["data"] if t["name"] == "Overlapped forward & Backward" and t.get("showlegend", True))
    assert swatch["marker"]["pattern"]["fgcolor"] == "#38761D" and swatch["marker"]["pattern"]["bgcolor"] == "#F6B26B"


def test_overlapped_cell_has_one_black_border_around_both_halves() -> None:
    fig = figure_dict(dualpipe_sample())
    fb = next(t for t in fig["data"] if t["name"] == "Overlapped forward & Backward")
    frames = [t for t in fig["data"] if t["name"] == "frame"]
    assert len(frames) == 1 and frames[0]["showlegend"] is False and frames[0]["hoverinfo"] == "skip"
    fr = frames[0]
    assert fr["marker"]["color"] == "rgba(0,0,0,0)" and fr["marker"]["line"]["color"] == "#000000"
    assert len(fr["x"]) == len(fb["x"]) // 2  # one border per op, not one per half
    # the border spans the left half's start to the right half's end, at the halves' height
    assert fr["base"][0] == pytest.approx(fb["base"][0])
    assert fr["base"][0] + fr["x"][0] == pytest.approx(fb["base"][1] + fb["x"][1])
    assert fr["offset"][0] == pytest.approx(fb["offset"][0]) and fr["width"][0] == pytest.approx(fb["width"][0])
    assert fr["legendgroup"] == fb["legendgroup"]  # hiding the entry hides the borders too
    assert not [t for t in figure_dict(load_timeline(default_fixtures_dir() / "1f1b.yaml"))["data"]
                if t["name"] == "frame"]


def test_moe_page_has_the_order_grid() -> None:
    fig = figure_dict(moe_sample(), HtmlOptions(style="moe"))
    assert fig["layout"]["annotations"][0]["text"] == "<b>VPP + 1 warmup</b>"
    grid = [t for t in fig["data"] if t.get("yaxis") == "y2"]
    assert len(grid) == 1 and set(grid[0]["text"]) == {"1", "2", "3"}


def test_size_limit_points_to_chrome_trace() -> None:
    with pytest.raises(InputError, match=r"10 blocks is above the HTML limit of 5; write a Chrome trace with "
                                         r"'pptl export FILE --to chrome -o trace.json'"):
        figure_dict(dualpipe_sample(), HtmlOptions(max_blocks=5))


def test_size_warning_above_the_comfortable_size() -> None:
    assert size_warning(build_layout(dualpipe_sample())) is None
    big = build_layout(scaled(HTML_WARN_BLOCKS + 200, ranks=4))
    assert "slow in a browser" in size_warning(big) and "Perfetto" in size_warning(big)


def test_write_file_returns_the_warning(tmp_path: Path) -> None:
    warnings = write_file(scaled(HTML_WARN_BLOCKS + 200, ranks=4), tmp_path / "big.html")
    assert len(warnings) == 1 and "Chrome trace" in warnings[0]


# -- a real browser ---------------------------------------------------------------------------

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
needs_chromium = pytest.mark.skipif(CHROMIUM is None, reason="chromium not installed (make install-browser "
                                                              "installs Debian's chromium)")

_RECORDER = """<script>
window.__pptl_errors = [];
window.addEventListener('error', function (e) { window.__pptl_errors.push(String(e.message)); });
window.addEventListener('unhandledrejection', function (e) { window.__pptl_errors.push(String(e.reason)); });
(function () { var orig = console.error; console.error = function () {
  window.__pptl_errors.push(Array.prototype.join.call(arguments, ' ')); orig.apply(console, arguments); }; })();
window.addEventListener('load', function () { setTimeout(function () {
  var bars = document.querySelectorAll('g.trace.bars g.point path').length;
  var out = document.createElement('pre'); out.id = 'pptl-report';
  out.textContent = JSON.stringify({errors: window.__pptl_errors, bars: bars});
  document.body.appendChild(out); }, 300); });
</script>"""


def _chromium(*args: str, user_dir: Path) -> subprocess.CompletedProcess:
    cmd = [CHROMIUM, "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
           "--disable-background-networking", "--disable-component-update", "--disable-sync",
           "--disable-extensions", f"--user-data-dir={user_dir}",
           # No network: every host resolves to nothing and every proxy is closed.
           "--host-resolver-rules=MAP * ~NOTFOUND", "--proxy-server=127.0.0.1:9",
           "--virtual-time-budget=5000", *args]
    return subprocess.run(cmd, capture_output=True, text=True, timeout=90)


def _nonwhite_fraction(png: Path) -> float:
    """Fraction of pixels of a screenshot that are not (near) white."""
    import numpy as np
    from PIL import Image  # matplotlib depends on pillow

    px = np.asarray(Image.open(png).convert("RGB"))
    return float((px.min(axis=2) < 200).mean())


def _page(name: str) -> tuple[str, object]:
    seed = default_fixtures_dir() / "dualpipe_seed.yaml"
    if name == "dualpipe":  # the real DualPipe plan when its family is there, else the hand-made sample
        return ("auto", load_timeline(seed)) if seed.exists() else ("dualpipe", dualpipe_sample())
    return "moe", moe_sample()


@needs_chromium
@pytest.mark.parametrize("name", ["dualpipe", "moe"], ids=str)
def test_browser_draws_bars_without_errors(name: str, tmp_path: Path) -> None:
    style, tl = _page(name)
    page = html_document(tl, HtmlOptions(style=style))
    html = tmp_path / "page.html"
    html.write_text(page.replace("<head>", "<head>" + _RECORDER, 1))
    shot = tmp_path / "shot.png"
    res = _chromium("--dump-dom", f"--screenshot={shot}", "--window-size=1200,700", html.as_uri(),
                    user_dir=tmp_path / "profile")
    m = re.search(r'<pre id="pptl-report">(.*?)</pre>', res.stdout)
    assert m, f"no report in the DOM; chromium said: {res.stderr[-2000:]}"
    report = json.loads(m.group(1).replace("&quot;", '"'))
    assert report["errors"] == []
    assert report["bars"] >= len(build_layout(tl, style).blocks)
    # A page that failed to draw is white; bars cover a good part of this one.
    assert shot.exists(), res.stderr[-2000:]
    assert _nonwhite_fraction(shot) > 0.05


def test_weight_update_page_names_seed_rows() -> None:
    fig = figure_dict(weight_update_sample())
    ticks = fig["layout"]["yaxis"]["ticktext"]
    assert ticks[:3] == ["H2D Buffer", "IPC Buffer", "Device 0"]
