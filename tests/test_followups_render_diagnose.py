"""Follow-ups of a new-user pass: a missing path named as missing (render, explain, export, whatif), every
family of the tune Pareto figure drawn distinguishably, and gloo's flight-recorder dumps (every call
"scheduled") not read as a hang."""
from __future__ import annotations

import pickle
from pathlib import Path
from types import SimpleNamespace

import pytest
from typer.testing import CliRunner

from pptl.cli import app

runner = CliRunner()


# 1. a path that does not exist ------------------------------------------------------------------------------


@pytest.mark.parametrize("slash", ["/", ""])
@pytest.mark.parametrize("args", [["render"], ["explain"], ["export", "--to", "chrome"], ["whatif"]])
def test_a_missing_path_is_named_missing(tmp_path: Path, monkeypatch, args: list[str], slash: str) -> None:
    """Worded as ``pptl plan`` and ``pptl check`` word a missing file, not as a file without a suffix."""
    monkeypatch.chdir(tmp_path)
    result = runner.invoke(app, [args[0], "nothere" + slash, *args[1:]])
    assert result.exit_code == 2, result.output
    lines = [line for line in result.stderr.splitlines() if line.strip()]
    assert lines == ["error: nothere: no such file"], result.output
    plan = runner.invoke(app, ["plan", "nothere"])  # the wording it follows
    assert plan.exit_code == 2 and plan.stderr.strip() == "error: nothere: no such file", plan.output


def test_an_existing_file_without_suffix_still_says_so(tmp_path: Path, monkeypatch) -> None:
    monkeypatch.chdir(tmp_path)
    Path("nosuffix").write_text("x")
    result = runner.invoke(app, ["render", "nosuffix"])
    assert result.exit_code == 2 and "nosuffix: no file suffix; expected a folder of traces" in result.stderr


# 2. the Pareto figure --------------------------------------------------------------------------------------


def _fake_tune(families: list[str]) -> SimpleNamespace:
    """A TuneResult as pareto_figure reads it: two candidates per family."""
    results = [SimpleNamespace(step=10.0 + k + j / 2, max_peak=5.0 + k / 2 + j, label=f"{fam} {j}",
                               structure=SimpleNamespace(family=fam, microbatches=8))
               for k, fam in enumerate(families) for j in range(2)]
    return SimpleNamespace(results=results, limit=9.0, best=results[0])


def _drawn_styles(fig) -> dict[str, tuple[str, tuple]]:
    """Family (legend label) -> (face colour, marker outline) of its scatter."""
    from matplotlib.collections import PathCollection
    from matplotlib.colors import to_hex

    out = {}
    for c in fig.axes[0].collections:
        if isinstance(c, PathCollection) and not c.get_label().startswith("_"):
            verts = tuple(map(tuple, c.get_paths()[0].vertices.round(4)))
            out[c.get_label()] = (to_hex(c.get_facecolor()[0]), verts)
    return out


@pytest.mark.parametrize("extra", [[], ["custom-a", "custom-b", "custom-c"]])
def test_every_family_of_the_pareto_figure_has_its_own_colour_and_marker(extra: list[str]) -> None:
    """tab10 repeats after ten families: v-min was 1f1b's orange circle. Every (colour, marker) pair
    differs, also for families the style table does not know."""
    from pptl.render.pareto import pareto_figure
    from pptl.tune.model import TRAINING_FAMILIES

    fams = list(TRAINING_FAMILIES) + extra
    assert len(fams) > 10
    styles = _drawn_styles(pareto_figure(_fake_tune(fams)))
    assert sorted(styles) == sorted(fams)
    assert len(set(styles.values())) == len(fams), styles
    # the families tune knows differ in colour alone too
    assert len({styles[f][0] for f in TRAINING_FAMILIES}) == len(TRAINING_FAMILIES)


def test_tune_figure_writes_a_png(tmp_path: Path) -> None:
    fix = Path(__file__).resolve().parent.parent / "fixtures" / "tune" / "uneven.yaml"
    out = tmp_path / "pareto.png"
    result = runner.invoke(app, ["tune", str(fix), "--figure", str(out)])
    assert result.exit_code == 0, result.output
    assert out.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


# 3. gloo's flight-recorder dumps ---------------------------------------------------------------------------


def _gloo_dumps(folder: Path, calls: dict[int, int], state: dict[int, str] | None = None,
                backend: str = "gloo") -> Path:
    """One dump per rank as torch's gloo backend writes them: all_reduce #1..#n on the default group, every
    entry ``scheduled`` with no start or end time, no P2P (``state``: rank -> another state, NCCL-like)."""
    folder.mkdir()
    cfg = {"0": {"name": "0", "desc": "default_pg", "ranks": str(sorted(calls))}}
    for rank, n in calls.items():
        st = (state or {}).get(rank, "scheduled")
        entries = [{
            "record_id": k, "pg_id": 0, "process_group": ("0", "default_pg"), "collective_seq_id": k + 1,
            "p2p_seq_id": 0, "op_id": k + 1, "profiling_name": f"{backend}:all_reduce", "time_created_ns": 1000 * (k + 1),
            "input_sizes": [[4]], "input_dtypes": ["Float"], "output_sizes": [[4]], "output_dtypes": ["Float"],
            "state": st, "is_p2p": False, "retired": st == "completed",
            "time_discovered_started_ns": None if st == "scheduled" else 1000 * (k + 1) + 10,
            "time_discovered_completed_ns": 1000 * (k + 1) + 20 if st == "completed" else None,
        } for k in range(n)]
        dump = {"version": "2.10", "pg_config": cfg, "entries": entries}
        (folder / f"nccl_trace_rank_{rank}").write_bytes(pickle.dumps(dump, protocol=2))
    return folder


def test_nccl_dumps_all_scheduled_are_a_hang_at_the_first_call(tmp_path: Path) -> None:
    # NCCL's flight recorder marks what completed: every call of every rank still "scheduled" is a job that
    # hung in its first collective, not a dump that cannot tell
    result = runner.invoke(app, ["diagnose", str(_gloo_dumps(tmp_path / "first", {0: 1, 1: 1}, backend="nccl"))])
    assert result.exit_code == 1, result.output
    assert "no hang shown" not in result.output and "record no completion" not in result.output
    assert "wait in" in result.output.splitlines()[0]


def test_a_healthy_gloo_run_is_no_hang(tmp_path: Path) -> None:
    result = runner.invoke(app, ["diagnose", str(_gloo_dumps(tmp_path / "ok", {0: 3, 1: 3}))])
    assert result.exit_code == 0, result.output
    first = result.stdout.splitlines()[0]
    assert first.startswith("no hang shown: the dumps record no completion (every call is 'scheduled', as gloo's")
    assert "so no rank can be shown waiting" in first
    assert "wait in" not in result.stdout and "first not completed" not in result.stdout
    data = __import__("json").loads(runner.invoke(app, ["diagnose", str(tmp_path / "ok"), "--output", "json"]).stdout)
    assert data["hung"] is False and data["completion_recorded"] is False and data["cause"]["kind"] == "no_completion"


def test_a_gloo_rank_missing_a_collective_is_still_reported(tmp_path: Path) -> None:
    result = runner.invoke(app, ["diagnose", str(_gloo_dumps(tmp_path / "short", {0: 3, 1: 2}))])
    assert result.exit_code == 1, result.output
    lines = result.stdout.splitlines()
    assert lines[0] == "group default_pg #3: issued by rank 0 all_reduce of 4 elements (scheduled); never by rank 1"
    assert any(line.startswith("note: the dumps record no completion") for line in lines)
    assert "first not completed" not in result.stdout


def test_scheduled_on_one_rank_and_completed_on_another_is_still_a_wait(tmp_path: Path) -> None:
    """A state past ``scheduled`` somewhere: the dumps record completion, so ``scheduled`` means waiting."""
    result = runner.invoke(app, ["diagnose", str(_gloo_dumps(tmp_path / "nccl", {0: 3, 1: 3}, {1: "completed"}))])
    assert result.exit_code == 1, result.output
    assert "no completion" not in result.stdout
    assert "rank 1 all_reduce completed (state differs)" in result.stdout


def test_the_figure_of_gloo_dumps_shows_no_call_as_never_completed(tmp_path: Path) -> None:
    import matplotlib.colors as mc

    from pptl.diagnose_inputs import diagnose_paths
    from pptl.render.diagnose_figure import diagnose_figure

    got = diagnose_paths([_gloo_dumps(tmp_path / "ok", {0: 3, 1: 3})])
    fig = diagnose_figure(got.result)
    ax = fig.axes[0]
    assert ax.get_title(loc="left") == "no hang shown: the dumps record no completion"
    red = mc.to_rgba("#d62728")
    edges = [tuple(c) for coll in ax.collections for c in coll.get_edgecolors()]
    assert edges and red not in edges  # six calls drawn, none in the red of "never completed"
    labels = [t.get_text() for t in ax.get_legend().get_texts()]
    assert "completion not recorded (gloo)" in labels and "never completed" not in labels
    # the same calls from NCCL, every one still scheduled: a hang, drawn red
    nccl = diagnose_figure(diagnose_paths([_gloo_dumps(tmp_path / "nccl", {0: 1, 1: 1}, backend="nccl")]).result)
    assert red in [tuple(c) for coll in nccl.axes[0].collections for c in coll.get_edgecolors()]
