"""pptl tune's inputs and outputs at their edges: a best plan torch's CSV cannot hold, a plan given
where a measured run is needed, a config no family builds, a sweep too large to time, rejection
reasons that hold brackets, numbers past the bound."""
from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml
from typer.testing import CliRunner

import pptl.tune.rank
from pptl.cli import app
from pptl.errors import InputError
from pptl.tune import tune
from pptl.tune.model import tune_config_from_mapping

RUNS = Path(__file__).parent / "data" / "runs"
runner = CliRunner()

LAYER = {"F": 1.0, "B": 2.0, "I": 1.0, "W": 1.0, "activation": 0.2, "weight": 0.5}
#: The head costs 8 layers: DualPipe, which runs it from both ends at once, wins at m=8.
L4 = {"pp": 4, "microbatches": [1, 3, 8], "memory_limit": 50,
      "model": {"layers": 4, "layer": LAYER,
                "embedding": {"F": 0.5, "B": 1.0, "activation": 0.1, "weight": 1.0},
                "head": {"F": 8.0, "B": 16.0, "activation": 1.0, "weight": 3.0}}}


def _write(tmp_path: Path, data: dict, name: str = "t.yaml") -> Path:
    p = tmp_path / name
    p.write_text(yaml.safe_dump(data))
    return p


def _error_line(r) -> str:
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: "), r.stderr
    return lines[0]


def test_a_dualpipe_best_keeps_the_ranking_and_the_plan_and_notes_the_csv(tmp_path):
    cfg = _write(tmp_path, L4)
    best, csv = tmp_path / "best.json", tmp_path / "best.csv"
    r = runner.invoke(app, ["tune", str(cfg), "-o", str(best), "--csv", str(csv)])
    assert r.exit_code == 0, r.output
    assert "best: dualpipe m=8 split=balanced" in r.stdout
    assert json.loads(best.read_text())["format"] == "pptl-plan"
    assert not csv.exists()
    assert (f"note: --csv: {csv} not written: the best plan (dualpipe m=8 split=balanced) cannot be a torch CSV: "
            f"schedule 'dualpipe' has 2 directions; torch's CSV has one") in r.stdout
    assert f"wrote {best}" in r.stderr and f"wrote {csv}" not in r.stderr
    j = runner.invoke(app, ["tune", str(cfg), "--csv", str(csv), "--output", "json"])
    assert j.exit_code == 0 and any(n.startswith("--csv: ") for n in json.loads(j.stdout)["notes"])


def test_csv_of_only_two_direction_families_is_refused_before_ranking(tmp_path):
    cfg = _write(tmp_path, {**L4, "families": ["dualpipe"]})
    best = tmp_path / "best.json"
    r = runner.invoke(app, ["tune", str(cfg), "-o", str(best), "--csv", str(tmp_path / "b.csv")])
    assert r.exit_code == 2, r.output
    assert _error_line(r) == (f"error: --csv: {cfg} lists only dualpipe, which runs micro-batches in two directions; "
                              f"torch's CSV has one: drop --csv, or add a family it holds (dualpipev pairs F and B as "
                              f"dualpipe does)")
    assert r.stdout == "" and not best.exists()
    # with a family the CSV holds, the ranking runs (and the CSV is written when that one wins)
    ok = runner.invoke(app, ["tune", str(_write(tmp_path, {**L4, "families": ["dualpipe", "1f1b"]}, "u.yaml")),
                             "--csv", str(tmp_path / "b.csv")])
    assert ok.exit_code == 0, ok.output


def test_costs_from_a_plan_is_refused(tmp_path):
    cfg = _write(tmp_path, {"pp": 2, "microbatches": 6,
                            "model": {"layers": 10, "layer": {**LAYER, "activation": 240, "weight": 288}},
                            "workload": {"hidden": 3072, "tokens": 4096, "dtype": "bfloat16"}})
    plan = RUNS / "1f1b_plan.json"
    r = runner.invoke(app, ["tune", str(cfg), "--costs-from", str(plan), "--top", "1"])
    assert r.exit_code == 2, r.output
    assert _error_line(r) == (f"error: {plan} is a plan, not a measured run; --costs-from takes a 'pptl run -o' "
                              f"timeline (or a profiler trace)")


def test_a_config_no_family_builds_is_bad_input_with_the_reason(tmp_path):
    cfg = _write(tmp_path, {"pp": 3, "microbatches": [4, 7], "memory_limit": 20,
                            "model": {"layers": 13, "layer": LAYER}, "families": ["dualpipe"]})
    r = runner.invoke(app, ["tune", str(cfg)])
    assert r.exit_code == 2, r.output
    assert _error_line(r) == (f"error: {cfg}: no candidate could be built: dualpipe m=4, dualpipe m=7: field 'pp': got "
                              f"3, expected an even number of ranks >= 2 for schedule 'dualpipe'")


def test_a_sweep_past_the_op_bound_is_refused_up_front(tmp_path, monkeypatch):
    data = {"pp": 2, "microbatches": [4, 8], "families": ["1f1b", "gpipe"], "model": {"layers": 4, "layer": LAYER}}
    tc = tune_config_from_mapping(data, source="t.yaml")
    # 2 families x (4 + 8) micro-batches x 6 ops x 2 ranks = 288 ops
    monkeypatch.setattr(pptl.tune.rank, "MAX_TUNE_OPS", 288)
    assert tune(tc).best is not None
    monkeypatch.setattr(pptl.tune.rank, "MAX_TUNE_OPS", 287)
    with pytest.raises(InputError, match=r"^t.yaml: 4 candidate plans of about 288 ops in all, more than the 287 "
                                         r"pptl tune times in one call \(micro-batches up to 8 at pp 2\); sweep fewer "
                                         r"or smaller micro-batch counts, or list fewer families$"):
        tune(tc)


def test_a_huge_micro_batch_count_is_refused_at_once(tmp_path):
    cfg = _write(tmp_path, {"pp": 2, "microbatches": 100_000, "model": {"layers": 4, "layer": LAYER}})
    r = runner.invoke(app, ["tune", str(cfg)])
    assert r.exit_code == 2, r.output
    assert "more than the 10,000,000 pptl tune times in one call (micro-batches up to 100,000 at pp 2)" in _error_line(r)


def test_bracketed_reasons_print_as_written(tmp_path):
    cfg = _write(tmp_path, {"pp": 3, "microbatches": 1, "memory_limit": 20, "model": {"layers": 13, "layer": LAYER}})
    r = runner.invoke(app, ["tune", str(cfg), "--top", "200"])
    assert r.exit_code == 0, r.output
    flat = " ".join(r.stdout.split())  # the verdict column wraps
    assert "group rule: G in [pp, microbatches])" in flat
    assert "G in )" not in flat


@pytest.mark.parametrize("field,value,msg", [
    ("activation", 1.0e29, "expected a number in 0..1e15"),
    ("activation", float("inf"), "expected a finite number >= 0"),
])
def test_a_number_past_the_bound_says_the_bound(tmp_path, field, value, msg):
    data = {"pp": 2, "microbatches": 4, "model": {"layers": 4, "layer": {**LAYER, field: value}}}
    with pytest.raises(InputError, match=rf"field 'model.layer.{field}': got .*, {msg}$"):
        tune_config_from_mapping(data, source="t.yaml")


def test_a_memory_limit_past_the_bound_says_the_bound():
    data = {"pp": 2, "microbatches": 4, "memory_limit": 1e20, "model": {"layers": 4, "layer": LAYER}}
    with pytest.raises(InputError, match=r"field 'memory_limit': got 1e\+20, expected a number above 0, at most 1e15$"):
        tune_config_from_mapping(data, source="t.yaml")
