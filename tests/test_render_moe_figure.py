"""The MoE seed figure (seeds 000-002) as layout data: sections, labels, colours, grid numbers."""
from __future__ import annotations

from pathlib import Path

import pytest
from typer.testing import CliRunner

from pptl.cli import app
from pptl.errors import InputError
from pptl.planning import load_timeline, plain_counterpart
from pptl.render import write_file
from pptl.render.moe_figure import SECTION_ROWS, moe_figure
from pptl.render.options import RenderOptions, parse_size

SEED = Path(__file__).resolve().parent.parent / "fixtures" / "moe_seed.yaml"
runner = CliRunner()


@pytest.fixture(scope="module")
def tl():
    return load_timeline(SEED)


@pytest.fixture(scope="module")
def fig(tl):
    return moe_figure(tl)


def test_sections_are_warmup_steady_cooldown_of_the_last_device(fig) -> None:
    assert fig.device == 3
    assert [s.key for s in fig.sections] == ["warmup", "steady", "cooldown"]
    assert [s.what for s in fig.sections] == ["F mb 4 (chunk 0)", "F mb 7 (chunk 0) | B mb 2 (chunk 0)",
                                              "B mb 8 (chunk 1)"]


def test_section_windows_come_from_the_plans_op_times(tl, fig) -> None:
    for sec in fig.sections:
        parts = [p.split() for p in sec.what.split(" | ")]
        own = [e for e in tl.events if e.rank == 3 and e.duration > 0 and e.lane in ("compute", "comm", "send")
               and any(e.flow == f and e.mb + 1 == int(mb) for f, _m, mb, *_ in parts)
               and (e.lane == "comm" or e.kind != "WGRAD" or e.flow == "B")
               and any(e.chunk == int(p[-1].rstrip(")")) for p in parts)]
        assert sec.t0 == min(e.start for e in own)
        assert sec.t1 == max(e.end for e in own)
    # the phase boundaries of device 3 are the starts of its first steady and first cooldown steps
    assert [p[0] for p in fig.phases] == ["warmup", "steady", "cooldown"]
    assert fig.phases[0][2] == fig.phases[1][1] and fig.phases[1][2] == fig.phases[2][1]


def test_every_block_is_labelled_and_coloured_by_kind(fig) -> None:
    seen = {(s.key, b.row, b.label, b.colour) for s in fig.sections for b in s.blocks}
    steady = [(b.row, b.label, b.colour) for b in fig.sections[1].blocks]
    # the seed's paired step, in order: Attn F, MLP B, MLP F, Attn B, WGrad
    assert [(lab, col) for row, lab, col in steady if row == "Computation"] == [
        ("Attn", "moe.forward"), ("MLP", "moe.backward"), ("MLP", "moe.forward"), ("Attn", "moe.backward"),
        ("WGrad", "moe.backward")]
    # one step, as the seed draws it: the next step's ops that start in the window are not drawn
    assert [lab for row, lab, _c in steady if row == "Communication"] == ["EP-C", "EP-D", "EP-D", "EP-C", "PP", "PP"]
    assert [lab for row, lab, _c in steady if row == "Offload"] == ["Offload", "Onload"]
    assert [[b.label for b in s.blocks if b.row == "Computation"] for s in (fig.sections[0], fig.sections[2])] == [
        ["Attn", "MLP"], ["MLP", "Attn", "WGrad"]]
    comm = [(lab, col) for row, lab, col in steady if row == "Communication"]
    assert ("EP-D", "moe.ep.forward") in comm and ("EP-D", "moe.ep.backward") in comm  # by the pass served
    assert ("EP-C", "moe.ep.forward") in comm and ("EP-C", "moe.ep.backward") in comm
    assert ("PP", "moe.pp") in comm
    offload = {(s.key, b.label, b.colour) for s in fig.sections for b in s.blocks if b.row == "Offload"}
    assert offload == {("warmup", "Offload", "moe.offload"), ("steady", "Offload", "moe.offload"),
                       ("steady", "Onload", "moe.onload"), ("cooldown", "Load", "moe.load")}
    assert all(b.label for s in fig.sections for b in s.blocks)
    assert {row for _k, row, _l, _c in seen} == set(SECTION_ROWS)
    legend = {c.key: c for c in fig.categories}
    assert legend["onload"].hatch != legend["load"].hatch and legend["offload"].colours != legend["load"].colours
    assert legend["F.c1"].label == "Forward pass, chunk 1 (darker)"  # chunk shades are named


def test_grid_numbers_per_device_show_the_extra_warmup_forward(tl, fig) -> None:
    rows = {d.label: " ".join("/".join(c.texts) for c in d.steps) for d in fig.devices}
    assert rows == {
        "Device 0": "1 2 3 4 1 2 3 4 5 6 7 8/1 5/2 6/3 7/4 8/1 2 3 4 5 6 7 8 5 6 7 8",
        "Device 1": "1 2 3 4 1 2 3 4 5 6/1 7/2 8/3 5/4 6/1 7/2 8/3 4 5 6 7 8 5 6 7 8",
        "Device 2": "1 2 3 4 1 2 3 4/1 5/2 6/3 7/4 8/1 5/2 6/3 7/4 8/5 6 7 8 5 6 7 8",
        "Device 3": "1 2 3 4 1 2/1 3/2 4/3 5/4 6/1 7/2 8/3 5/4 6/5 7/6 8/7 8 5 6 7 8",
    }
    assert fig.grid_title == "VPP + 1 warmup"
    assert all(d.pp for d in fig.devices)  # PP transfers are in the grid, green
    plain = moe_figure(plain_counterpart(SEED))
    assert plain.grid_title == "Interleaved 1F1B (VPP)"  # no "+1" where it does not apply
    assert all(len(c.texts) == 1 for d in plain.devices for c in d.steps)  # nothing paired
    # +1: forward-only steps before the first pair = Megatron's interleaved warmup 2(p-r-1) + (V-1)G, plus one
    assert [sum(1 for c in d.steps if c.phase == "warmup") for d in fig.devices] == [
        2 * (4 - r - 1) + (2 - 1) * 4 + 1 for r in range(4)]


def test_device_option_picks_the_close_up_and_rejects_a_missing_rank(tl) -> None:
    assert moe_figure(tl, 0).device == 0
    with pytest.raises(ValueError, match="--device: got 9, expected one of 0..3"):
        moe_figure(tl, 9)


@pytest.mark.parametrize("fmt", ["png", "pdf", "svg", "html"])
def test_seed_figure_writes_every_format_with_text_as_text(tl, tmp_path: Path, fmt: str) -> None:
    path = tmp_path / f"moe.{fmt}"
    write_file(tl, path, options=RenderOptions(dpi=100))
    data = path.read_bytes()
    if fmt == "pdf":
        assert b"/FontFile2" in data  # TrueType embedded (fonttype 42), not Type 3 outlines
    if fmt == "svg":
        assert b"<text" in data and b"Attn" in data
    if fmt == "html":
        assert b"VPP + 1 warmup" in data and b"Steady state: one paired step" in data


def test_parse_size_and_option_errors_name_the_option() -> None:
    assert parse_size("7,4.5") == (7.0, 4.5)
    with pytest.raises(InputError, match=r"--size: got '7', expected W,H"):
        parse_size("7")
    with pytest.raises(InputError, match="--legend: got 'left'"):
        RenderOptions(legend="left")


def test_cli_render_paper_options(tmp_path: Path) -> None:
    out = tmp_path / "m.png"
    r = runner.invoke(app, ["render", str(SEED), "-o", str(out), "--size", "7,5", "--dpi", "150",
                            "--font-size", "7", "--title", "auto", "--device", "1", "--compare-warmup"])
    assert r.exit_code == 0, r.output
    from PIL import Image

    assert Image.open(out).size == (1050, 750)
    r = runner.invoke(app, ["render", str(SEED), "-o", str(out), "--device", "7"])
    assert r.exit_code == 2 and "--device: got 7, expected one of 0..3" in r.output
    r = runner.invoke(app, ["render", str(SEED), "-o", str(out), "--size", "big"])
    assert r.exit_code == 2 and "--size: got 'big'" in r.output


def test_schedules_never_truncates_in_a_narrow_terminal() -> None:
    from pptl.schedules import FAMILIES

    r = runner.invoke(app, ["schedules"], terminal_width=60)
    assert r.exit_code == 0, r.output
    assert "…" not in r.output
    for f in FAMILIES.values():
        assert f.name in r.output
