"""``pptl export --to torchtitan``: the schedule class named comes from the family record or the placement."""
from __future__ import annotations

from pathlib import Path

import pytest

from pptl.export import export_torchtitan
from pptl.schedules import get_family

FIXTURES = Path(__file__).resolve().parent.parent / "fixtures"


@pytest.mark.parametrize("fixture, name", [
    ("gpipe", "GPipe"),  # the record names torch's class
    ("dualpipev", "DualPipeV"),  # the record names it; a V otherwise means ZB-V
    ("zbv", "ZBVZeroBubble"),  # a V placement (plan meta)
    ("1f1b", "1F1B"),  # one stage per rank
    ("zb_h1", "1F1B"),
    ("interleaved", "Interleaved1F1B"),  # a loop of several stages per rank
])
def test_torchtitan_schedule_name(fixture: str, name: str) -> None:
    files = export_torchtitan(FIXTURES / f"{fixture}.yaml", csv_path="pp.csv")
    assert f'pipeline_parallel_schedule = "{name}"' in files.toml.splitlines()


def test_only_families_torch_names_differently_declare_a_name() -> None:
    assert get_family("gpipe").torch_schedule == "GPipe"
    assert get_family("dualpipev").torch_schedule == "DualPipeV"
    assert get_family("zbv").torch_schedule == "" and get_family("1f1b").torch_schedule == ""


@pytest.mark.parametrize("to, rank", [("torch-csv", 10), ("torchtitan", 10), ("torch-csv", 4)])
def test_export_refuses_ops_on_a_rank_the_plan_has_not(tmp_path: Path, to: str, rank: int) -> None:
    """A plan file whose first lane was moved to rank 10 of a pp-4 plan: torch's CSV has a row per
    rank 0-3, so rank 10's 16 ops would be dropped and the CSV describe another schedule (it was,
    exit 0). Now one line naming the op, exit 1 (an invalid schedule), and nothing written."""
    import json

    from typer.testing import CliRunner

    from pptl.cli import app

    runner = CliRunner()
    plan = tmp_path / "r.json"
    assert runner.invoke(app, ["plan", "--schedule", "1f1b", "--pp", "4", "--microbatches", "8", "-o", str(plan)]).exit_code == 0
    data = json.loads(plan.read_text())
    data["lanes"][0]["rank"] = rank  # 4: the first rank past pp 4's
    bad = tmp_path / "r10.json"
    bad.write_text(json.dumps(data))
    out = tmp_path / ("x.toml" if to == "torchtitan" else "x.csv")
    r = runner.invoke(app, ["export", str(bad), "--to", to, "-o", str(out)])
    assert r.exit_code == 1, r.output
    errors = [ln for ln in r.output.splitlines() if ln.startswith("error:")]
    assert len(errors) == 1 and f"r{rank}/compute/F s0 mb0 is on rank {rank}, outside the plan's ranks 0-3 (16 ops" in errors[0]
    assert not out.exists()
    ok = runner.invoke(app, ["export", str(plan), "--to", to, "-o", str(out)])
    assert ok.exit_code == 0 and out.exists()
