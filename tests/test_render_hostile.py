"""Figures given what a user may well type: `$` in titles and file names, tiny --size, tall plans,
long titles, overlapping measured lanes, options that do not apply, forced styles."""
from __future__ import annotations

import shutil
from pathlib import Path

import numpy as np
import pytest
from typer.testing import CliRunner

from pptl import planning
from pptl.cli import app
from pptl.errors import InputError
from pptl.planning import load_timeline
from pptl.render import static_figure
from pptl.render.layout import build_layout
from pptl.render.mpl import FigureOptions, figure_from_layout, image_bytes
from pptl.render.options import RenderOptions

runner = CliRunner()
ROOT = Path(__file__).resolve().parent.parent
CONFIG = ROOT / "fixtures" / "1f1b.yaml"
RUNS = Path(__file__).resolve().parent / "data" / "runs"


def _timeline(schedule: str = "1f1b", pp: int = 4, m: int = 8):
    cfg = planning.make_config(None, {"schedule": schedule, "pp": pp, "microbatches": m}, [], None)
    return planning.plan(cfg).timeline


def _title_text(fig):
    """The figure-level text pptl draws its title with (the largest, bold)."""
    return max(fig.texts, key=lambda t: t.get_fontsize())


def _render(*args: str):
    r = runner.invoke(app, ["render", *args])
    return r.exit_code, r.stdout, r.stderr


# -- $ is text, not mathtext --------------------------------------------------------------------


@pytest.mark.parametrize("title", ["$\\frac{$", "step_$1_$2", "costs $5 and $10"])
def test_dollar_titles_draw_literally(title: str) -> None:
    fig = static_figure(_timeline(), RenderOptions(title=title))
    text = _title_text(fig)
    assert text.get_text() == title and not text.get_parse_math()
    assert image_bytes(fig, "png")[:4] == b"\x89PNG"  # drawing parses nothing either
    assert image_bytes(fig, "svg").count(b"costs $5 and $10") == (title == "costs $5 and $10")


@pytest.mark.parametrize("suffix", [".png", ".svg", ".pdf"])
def test_dollar_title_through_the_cli(tmp_path: Path, suffix: str) -> None:
    code, _, err = _render(str(CONFIG), "--title", "$\\frac{$", "-o", str(tmp_path / f"a{suffix}"))
    assert code == 0, err


def test_dollar_file_names_are_explain_titles(tmp_path: Path) -> None:
    measured = tmp_path / "cost_$5_and_$6.json"
    shutil.copy(RUNS / "1f1b_cpu.measured.json", measured)
    r = runner.invoke(app, ["explain", str(measured), "-o", str(tmp_path / "e.png")])
    assert r.exit_code == 0, r.output
    assert (tmp_path / "e.png").read_bytes()[:4] == b"\x89PNG"


def test_every_figure_builder_runs_with_literal_text() -> None:
    import matplotlib

    from pptl.render import compare, diagnose_figure, explain_figure, moe_mpl, mpl, pareto
    from pptl.render.rc import pptl_figure
    from pptl.whatif import figure as whatif_figure

    builders = [mpl.figure_from_layout, compare.overlay_figure, compare.overlay_bytes, explain_figure.explain_figure,
                explain_figure.explain_bytes, pareto.pareto_figure, diagnose_figure.diagnose_figure,
                moe_mpl.moe_mpl_figure, moe_mpl.compare_mpl_figure, whatif_figure.whatif_figure,
                whatif_figure.whatif_bytes]
    assert all(b.__code__ is pptl_figure(len).__code__ for b in builders)  # each runs inside pptl_figure
    seen = pptl_figure(lambda: matplotlib.rcParams["text.parse_math"])()
    assert seen is False and matplotlib.rcParams["text.parse_math"] is True  # only inside


# -- --size -------------------------------------------------------------------------------------


@pytest.mark.parametrize("size", ["1,1", "2,1", "7,1"])
def test_too_small_size_is_one_line_naming_the_least(tmp_path: Path, size: str) -> None:
    code, _, err = _render(str(CONFIG), "--size", size, "-o", str(tmp_path / "s.png"))
    assert code == 2
    lines = err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith(f"error: --size {size}: too small for this figure (4 rows")
    least = lines[0].rsplit("--size ", 1)[1]
    w, h = (float(v) for v in least.split(","))
    if size == "7,1":
        assert w == 7  # the width asked is wide enough: only the height grows
    code, _, err = _render(str(CONFIG), "--size", least, "-o", str(tmp_path / "least.png"))
    assert code == 0, err
    code, _, _ = _render(str(CONFIG), "--size", f"{w:g},{h - 0.1:.1f}", "-o", str(tmp_path / "less.png"))
    assert code == 2  # the least, not a guess above it


def test_sized_rows_fit_inside_the_figure() -> None:
    lay = build_layout(_timeline(pp=12, m=24))
    with pytest.raises(InputError, match=r"--size 7,1: too small .*\(12 rows"):
        figure_from_layout(lay, FigureOptions(size=(7.0, 1.0)))
    fig = figure_from_layout(lay, FigureOptions(size=(7.0, 2.5)))
    main = fig.axes[0].get_position()
    assert 0 <= main.y0 < main.y1 <= 1
    # 12 rows of at least 0.1 in each (1 in in all, the rows' least height for a few rows)
    assert main.height * 2.5 >= 1.0 - 1e-9


def test_moe_figure_refuses_a_size_it_cannot_hold(tmp_path: Path) -> None:
    moe = ROOT / "fixtures" / "moe_seed.yaml"
    code, _, err = _render(str(moe), "--size", "1,1", "-o", str(tmp_path / "m.png"))
    assert code == 2 and err.startswith("error: --size 1,1: too small for this figure; it needs at least --size ")
    least = err.strip().rsplit("--size ", 1)[1]
    code, _, err = _render(str(moe), "--size", least, "-o", str(tmp_path / "m.png"))
    assert code == 0, err


# -- tall plans ----------------------------------------------------------------------------------


def test_too_many_rows_are_refused_not_dropped() -> None:
    lay = build_layout(_timeline(pp=4000, m=1))
    with pytest.raises(InputError, match=r"^4000 rows do not fit a figure 30 in tall \(at most about 2,\d{3} rows"):
        figure_from_layout(lay, FigureOptions())


def test_a_tall_plan_that_fits_draws_every_row() -> None:
    fig = figure_from_layout(build_layout(_timeline(pp=2000, m=1)), FigureOptions())
    ax = fig.axes[0]
    pos = ax.get_position()
    assert 0 <= pos.y0 < pos.y1 <= 1  # before, the rows ran off the top: ranks 0-2700 were missing
    lo, hi = sorted(ax.get_ylim())
    assert lo == 0 and hi == pytest.approx(2000)


# -- titles -------------------------------------------------------------------------------------


def _inside(fig, text) -> bool:
    from matplotlib.backends.backend_agg import FigureCanvasAgg

    FigureCanvasAgg(fig)
    box = text.get_window_extent(fig.canvas.get_renderer())
    return box.x0 >= 0 and box.x1 <= fig.bbox.x1


@pytest.mark.parametrize("window", [None, (100.0, 200.0)])
def test_titles_wrap_inside_the_figure(window) -> None:
    long = "a title far longer than seven inches of bold text can hold on one line, " * 2
    opts = RenderOptions(title="auto" if window else long)
    fig = static_figure(_timeline(), opts, window=window)
    text = _title_text(fig)
    assert "\n" in text.get_text() and _inside(fig, text)
    assert text.get_text().replace("\n", " ") == (long.strip() if window is None else
                                                  "1f1b: pp=4 vpp=1 micro-batches=8 makespan=33 bubble=27.3% · "
                                                  "window 100-200, outside the step (0-33)")


def test_measured_title_rounds_to_4_digits() -> None:
    tl = load_timeline(RUNS / "zbv_h200.measured.json")
    assert tl.makespan == pytest.approx(92.0714, abs=1e-4)
    lay = build_layout(tl)
    assert "makespan=92.07 ms " in lay.title


# -- measured labels ----------------------------------------------------------------------------


def test_measured_labels_never_overlap() -> None:
    from matplotlib.backends.backend_agg import FigureCanvasAgg

    fig = static_figure(load_timeline(RUNS / "zbv_h200.measured.json"))
    FigureCanvasAgg(fig)
    r = fig.canvas.get_renderer()
    ax = fig.axes[0]
    boxes = [t.get_window_extent(r) for t in ax.texts if t.get_ha() == "center"]
    assert len(boxes) > 100
    b = np.array([[x.x0, x.x1, x.y0, x.y1] for x in boxes])
    overlap = ((b[:, None, 0] < b[None, :, 1] - 0.5) & (b[None, :, 0] < b[:, None, 1] - 0.5)
               & (b[:, None, 2] < b[None, :, 3] - 0.5) & (b[None, :, 2] < b[:, None, 3] - 0.5))
    np.fill_diagonal(overlap, False)
    assert not overlap.any()


def test_plans_keep_all_their_labels() -> None:
    fig = static_figure(_timeline())
    labels = [t.get_text() for t in fig.axes[0].texts if t.get_ha() == "center"]
    assert len(labels) == 64  # every F and B of 4 ranks x 8 micro-batches


# -- HTML ----------------------------------------------------------------------------------------


@pytest.mark.parametrize("plotlyjs", ["inline", "directory"])
def test_html_has_no_send_to_cloud(tmp_path: Path, plotlyjs: str) -> None:
    out = tmp_path / "x.html"
    code, _, err = _render(str(CONFIG), "--plotlyjs", plotlyjs, "-o", str(out))
    assert code == 0, err
    page = out.read_text()
    assert '"showSendToCloud": false' in page
    assert '"modeBarButtonsToRemove": ["sendDataToCloud"]' in page


def test_explorer_page_has_no_send_to_cloud() -> None:
    js = (ROOT / "pptl" / "serve" / "static" / "app.js").read_text()
    assert 'showSendToCloud: false, modeBarButtonsToRemove: ["sendDataToCloud"]' in js


@pytest.mark.parametrize("out", ["y.png", None])
def test_plotlyjs_without_html_is_one_line(tmp_path: Path, out: str | None) -> None:
    args = [str(CONFIG), "--plotlyjs", "directory"] + (["-o", str(tmp_path / out)] if out else [])
    code, stdout, err = _render(*args)
    assert code == 2 and stdout == ""
    lines = err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: --plotlyjs directory shapes HTML pages but ")


# -- forced styles ------------------------------------------------------------------------------


def test_forced_style_lists_only_kinds_present() -> None:
    tl = _timeline()
    assert [c.label for c in build_layout(tl, "weight-update").categories] == ["B", "F", "RECV", "SEND"]
    assert [c.label for c in build_layout(tl, "dualpipe").categories] == ["Forward", "Backward"]


def test_own_seed_style_keeps_its_full_legend() -> None:
    from pptl.render.samples import dualpipe_sample

    lay = build_layout(dualpipe_sample(), "auto")
    assert len(lay.categories) == 5  # the seed lists all five entries


def test_size_help_says_what_a_small_size_does() -> None:
    from typing import get_args

    from pptl.commands.render import SizeOpt

    assert "A size smaller than the title, legend and rows need is refused, naming the least that fits." in \
        get_args(SizeOpt)[1].help
