"""The comparison table in docs/schedules.md is generated here, so its numbers cannot drift.

On a mismatch the assertion message holds the fresh table to paste into the docs.
"""
from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest

from pptl.config import load_config
from pptl.planning import plan

ROOT = Path(__file__).resolve().parents[2]
DOCS = ROOT / "docs" / "schedules.md"

ROWS = (
    ("interleaved 1F1B", "moe_interleaved.yaml", {}),
    ("combined 1F1B", "moe_overlap.yaml", {"offload": False}),
    ("combined 1F1B + offloading", "moe_overlap.yaml", {}),
)
HEAD = ("| schedule | micro-batches | makespan | EP all-to-all per rank | exposed EP (worst rank) "
        "| peak activation (worst rank) | without offloading | offload+onload per rank | exposed copies |\n"
        "|---|---:|---:|---:|---:|---:|---:|---:|---:|")


def comparison_table(microbatches: tuple[int, ...] = (8, 32)) -> str:
    """Markdown rows for fixtures/moe_interleaved.yaml and fixtures/moe_overlap.yaml (one model:
    pp=4, vpp=2, 2 MoE layers per chunk, Attn = MLP = 1, EP-D = EP-C = 0.5, WGrad = 2, PP 0.25)."""
    lines = [HEAD]
    for m in microbatches:
        for name, fixture, override in ROWS:
            cfg = load_config(ROOT / "fixtures" / fixture)
            cfg = replace(cfg, microbatches=m, options={**cfg.options, **override})
            res = plan(cfg)
            moe = res.metrics["moe"]
            lines.append(f"| {name} | {m} | {res.metrics['makespan']:g} | {moe['ep_time']:g} | {moe['exposed_ep']:g} "
                         f"| {moe['peak_activation']:g} | {moe['peak_activation_no_offload']:g} "
                         f"| {moe['copy_time']:g} | {moe['exposed_copy']:g} |")
    return "\n".join(lines)


def test_docs_table_is_current() -> None:
    table = comparison_table()
    assert table in DOCS.read_text(), "docs/schedules.md is out of date; paste:\n" + table


@pytest.mark.parametrize("m", [8, 32], ids=["m8", "m32"])
def test_overlap_hides_communication_and_offloading_saves_memory(m: int) -> None:
    rows = comparison_table((m,)).splitlines()[2:]
    cells = [[c.strip() for c in row.strip("|").split("|")] for row in rows]
    inter, comb, off = ({"makespan": float(c[2]), "ep": float(c[3]), "exposed": float(c[4]), "peak": float(c[5])}
                        for c in cells)
    # without overlap nearly every all-to-all stalls the compute lane: only where two passes meet does
    # one run beside compute (a forward's last combine beside the next forward's attention), 3 of 64 or 256
    assert inter["ep"] - 3 == inter["exposed"]
    assert comb["exposed"] <= inter["exposed"] / 2 and comb["makespan"] < inter["makespan"]
    assert comb["peak"] == inter["peak"] + 1  # the "+1" warmup micro-batch holds one more chunk
    assert off["peak"] < comb["peak"] and off["makespan"] == comb["makespan"]
