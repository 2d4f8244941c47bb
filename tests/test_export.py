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
