"""The terminal view: fits the width, pins a 1F1B grid (golden), colours by kind, split blocks."""
from __future__ import annotations

import os
import re
from io import StringIO
from pathlib import Path

import pytest
from rich.console import Console

from pptl import planning
from pptl.config import config_from_mapping
from pptl.demo import default_fixtures_dir, example_files
from pptl.planning import load_timeline
from pptl.render.samples import dualpipe_sample, moe_sample, scaled, weight_update_sample
from pptl.render.terminal import TerminalOptions, TimelineView, render_text

EXAMPLES = example_files(default_fixtures_dir())
GOLDEN = Path(__file__).parent / "golden"
_ANSI = re.compile(r"\x1b\[[0-9;]*m")


def _1f1b():
    cfg = config_from_mapping({"schedule": "1f1b", "pp": 4, "microbatches": 8, "costs": {"F": 1, "B": 2}},
                              source="<test>")
    return planning.plan(cfg).timeline


def _golden(name: str, text: str) -> None:
    path = GOLDEN / name
    if os.environ.get("PPTL_UPDATE_GOLDEN"):
        path.write_text(text)
    assert text == path.read_text(), f"terminal view changed; PPTL_UPDATE_GOLDEN=1 rewrites {path}"


def test_golden_1f1b_grid() -> None:
    _golden("terminal_1f1b_pp4_m8_w80.txt", render_text(_1f1b(), width=80))


def test_golden_dualpipe_sample() -> None:
    _golden("terminal_dualpipe_sample_w72.txt", render_text(dualpipe_sample(), width=72))


@pytest.mark.parametrize("width", [40, 80, 133], ids=lambda w: f"w{w}")
@pytest.mark.parametrize("path", EXAMPLES, ids=lambda p: p.name)
def test_every_example_fits_the_width(path: Path, width: int) -> None:
    tl = load_timeline(path)
    for colour_output in (False, True):
        text = _ANSI.sub("", render_text(tl, width=width, colour_output=colour_output))
        lines = text.splitlines()
        assert len(lines) > 3
        too_wide = [line for line in lines if len(line) > width]
        assert not too_wide


@pytest.mark.parametrize("sample", [dualpipe_sample, moe_sample, weight_update_sample], ids=lambda f: f.__name__)
def test_seed_styles_fit_the_width(sample) -> None:
    text = render_text(sample(), width=60)
    assert max(len(line) for line in text.splitlines()) <= 60


def test_one_line_per_rank_and_busy_lane_with_bubbles() -> None:
    lines = render_text(_1f1b(), width=80).splitlines()
    assert lines[0] == "1f1b: pp=4 vpp=1 micro-batches=8 makespan=33 bubble=27.3%"
    rows = [line for line in lines if re.match(r"r\d ", line)]
    assert [r[:2] for r in rows] == ["r0", "r1", "r2", "r3"]
    assert all(r.endswith("27.3%") for r in rows)
    assert "F=Forward  B=Backward" in lines


def test_idle_is_visible_and_time_scales_to_width() -> None:
    narrow = render_text(_1f1b(), width=60).splitlines()
    wide = render_text(_1f1b(), width=140).splitlines()
    # rank 3 waits 3 F-times for its first micro-batch: idle cells before its first block
    assert re.match(r"r3\s+·+ ?F0", narrow[4]) and re.match(r"r3\s+·+ ?F0", wide[4])
    assert len(wide[4].split("·")[0]) < len(wide[4]) and wide[4].count("·") > narrow[4].count("·")


def test_colour_by_kind() -> None:
    text = render_text(_1f1b(), width=80, colour_output=True)
    assert "48;2;78;121;167" in text  # forward background (#4E79A7)
    assert "48;2;242;142;43" in text  # backward background (#F28E2B)


def test_split_block_shows_both_micro_batches() -> None:
    text = render_text(dualpipe_sample(), width=100)
    # F half is mb 1; the B half belongs to the reverse direction, whose ids the DualPipe figure omits.
    assert "FB1/-" in text
    assert "FB=Overlapped forward & Backward" in text


def test_moe_view_has_rows_and_grid() -> None:
    text = render_text(moe_sample(), width=100, style="moe")
    assert "0 comp" in text and "0 comm" in text and "0 offl" in text
    assert "VPP + 1 warmup" in text
    assert "F1 FB2/1 FB3/2" in text


def test_measure_and_wide_console() -> None:
    view = TimelineView(scaled(2000, ranks=8), TerminalOptions())
    buf = StringIO()
    console = Console(file=buf, width=200, color_system=None)
    assert console.measure(view).maximum == 200
    console.print(view)
    assert max(len(line) for line in buf.getvalue().splitlines()) <= 200
