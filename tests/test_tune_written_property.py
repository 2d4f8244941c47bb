"""Property: ``pptl tune MODEL -o best.json [--csv best.csv]`` writes exactly the candidate it ranked,
on model shapes drawn at random (pp 1-5, 1-12 micro-batches, 1-30 layers, embedding and head of 0-4
layers, split or whole backward, memory limits from none to nothing fitting, duty exponent 0, 0.25 or
absent), and on a few wide ones (pp 10-12).

For every drawn model (through the library; a few through the CLI):

1. the best plan written passes every check and simulates (``pptl plan``) to the step it was ranked at
   (rel 1e-9), with the ranked order per rank and the split's ``stage_layers``;
2. each row of the written torch CSV (one row per rank) is that rank's compute order in the ranked plan;
3. the ranking is sorted by the documented key (fitting candidates by step per micro-batch, then those
   over the limit by peak memory, then the rejected and skipped), a candidate fits exactly when its peak
   is within the limit, and the pick fits whenever any candidate does; when none does, exit 1 with one
   line naming the closest by peak memory; a config no candidate can be built for, or fewer layers than
   stages, is one error line with exit 2;
4. with 10 or more ranks, every per-rank output (peaks in the table and JSON, the CSV's rows, the plan's
   per-rank costs and lanes) stays in numeric rank order.

Two small cases are worked out by hand and asserted exactly.
"""
from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import pytest
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from typer.testing import CliRunner

from pptl.cli import app
from pptl.errors import InputError
from pptl.formats.loader import load_any
from pptl.planning import plan_from_file
from pptl.tune import tune
from pptl.tune.model import SPLIT_FAMILIES, tune_config_from_mapping
from pptl.tune.rank import Result, TuneResult
from pptl.tune.write import plan_result, write_best

runner = CliRunner()
REL = 1e-9
#: Families whose backward is whole (B ops only).
WHOLE = ["gpipe", "1f1b", "interleaved-1f1b", "looped-bfs"]
#: Families whose plans hold I and W ops (DualPipe(V) split their cool-down's backward): tune needs their costs.
NEEDS_IW = SPLIT_FAMILIES | {"dualpipe", "dualpipev"}
SETTINGS = dict(deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
                derandomize=True)

# -- drawing model files ------------------------------------------------------------------------------

_cost = st.sampled_from([0.1, 0.25, 0.5, 0.7, 1.0, 1.3, 2.0, 2.9, 3.0])
_cost0 = st.sampled_from([0.0, 0.1, 0.7, 1.0, 1.3, 2.9])  # I or W may cost nothing


@st.composite
def models(draw, pp=st.integers(1, 5), layers=st.integers(1, 30), mbs=st.integers(1, 12)) -> dict[str, Any]:
    p = draw(pp)
    n_layers = draw(layers)
    m = draw(st.one_of(mbs, st.lists(mbs, min_size=2, max_size=2, unique=True)))
    split = draw(st.sampled_from([True, True, True, False]))
    F = draw(_cost)
    layer: dict[str, Any] = {"F": F, "activation": draw(st.sampled_from([0.1, 0.15, 0.5, 1.0])),
                             "weight": draw(st.sampled_from([0.0, 0.5, 1.0]))}
    if split:
        layer["I"], layer["W"] = draw(_cost0), draw(_cost0)
        if draw(st.booleans()):
            layer["B"] = draw(_cost)  # given apart from I + W
    else:
        layer["B"] = draw(_cost)
    b = layer.get("B", layer.get("I", 0) + layer.get("W", 0))
    model: dict[str, Any] = {"layers": n_layers, "layer": layer}
    for part in ("embedding", "head"):
        k = draw(st.sampled_from([None, 0.0, 0.5, 1.0, 2.5, 4.0]))
        if k is not None:
            model[part] = {"F": round(k * F, 6), "B": round(k * b, 6), "activation": round(k * layer["activation"], 6),
                           "weight": round(k * layer["weight"], 6)}
    if draw(st.booleans()):
        model["w_activation"] = draw(st.sampled_from([0.0, 0.5, 1.1]))
    data: dict[str, Any] = {"pp": p, "microbatches": m, "model": model}
    # A memory limit from none to nothing fitting, relative to one stage's weights and one activation.
    ref = math.ceil(n_layers / p) * layer["weight"] + layer["activation"]
    q = draw(st.sampled_from([None, None, 0.01, 1.0, 2.0, 4.0, 8.0, 1000.0]))
    if q is not None:
        data["memory_limit"] = round(max(q * ref, 1e-3), 6)
    duty = draw(st.sampled_from(["absent", 0, 0.25]))
    if duty != "absent":
        data["device"] = {"duty_exponent": duty}
    if draw(st.sampled_from([False, False, False, True])):  # a spread: the pick may be the lowest p95
        data.setdefault("device", {})["jitter"] = {"F": 0.03, "B": 0.03, "step": 0.01}
    comm = draw(st.sampled_from([None, "latency", "bandwidth"]))
    if comm is not None:
        data["comm"] = {"latency": 0.05} if comm == "latency" else {"latency": 0.02, "bandwidth": 20000}
        if comm == "bandwidth":
            model["message_bytes"] = 1000
        if draw(st.booleans()):
            data["messages"] = "overlap"
    fams = draw(st.sampled_from(["all", "some"] if split else ["whole", "whole", "whole", "all", "some"]))
    if fams == "whole":
        data["families"] = draw(st.lists(st.sampled_from(WHOLE), min_size=1, max_size=3, unique=True))
    elif fams == "some":
        data["families"] = draw(st.lists(st.sampled_from(WHOLE + sorted(NEEDS_IW)), min_size=1, max_size=4,
                                         unique=True))
    data["ilp_time_limit"] = 0.2
    return data


def _load(data: dict[str, Any]):
    """The config, or the InputError it is refused with (checked to say why)."""
    try:
        return tune_config_from_mapping(data, source="t.yaml")
    except InputError as e:
        msg = str(e)
        assert "\n" not in msg, msg
        if data["model"]["layers"] < data["pp"]:
            assert f"got {data['model']['layers']}, fewer than pp={data['pp']} stages" in msg
            return e
        raise


def _expected_refusal(data: dict[str, Any], tc) -> str | None:
    """The missing-cost refusal of ``tune``: split families listed (or all) without I and W."""
    layer = data["model"]["layer"]
    fams = data.get("families")
    split_needed = fams is None or any(f in NEEDS_IW for f in fams)
    if split_needed and ("I" not in layer or "W" not in layer):
        return "no cost given"
    if split_needed and layer["I"] + layer["W"] == 0 and any(part in data["model"] for part in ("embedding", "head")):
        # an embedding's or head's I and W split its B in the layer's I:W ratio: 0:0 gives none
        return r"field 'model\.(embedding|head)\.I': no cost given"
    return None


# -- the properties ---------------------------------------------------------------------------------

def _per_mb(r: Result) -> float:
    return r.step / r.structure.microbatches


def assert_ranked_order(res: TuneResult, limit: float | None) -> None:
    """Property 3: fitting by step per micro-batch, then over-limit by peak, then untimed."""
    rs = res.results
    group = [1 if r.fits else (2 if r.step is not None else 3) for r in rs]
    assert group == sorted(group), [r.label for r in rs]
    for r in rs:
        if r.step is None:
            assert not r.fits and (r.rejected or r.skipped)
            continue
        fits = limit is None or max(r.peak) <= limit * (1 + 1e-9)
        assert r.fits == fits, (r.label, r.peak, limit)
    fitting = [r for r in rs if r.fits]
    # with a spread the pick may be moved to the front (the lowest p95 among overlapping spreads)
    tail = fitting[1:] if any(r.spread is not None for r in fitting) else fitting
    for a, b in zip(tail, tail[1:]):
        assert _per_mb(a) <= _per_mb(b) * (1 + 1e-12), (a.label, a.step, b.label, b.step)
    over = [r for r in rs if r.step is not None and not r.fits]
    for a, b in zip(over, over[1:]):
        assert a.max_peak <= b.max_peak, (a.label, b.label)
    if fitting:
        assert res.best is rs[0] and res.best.fits
        if limit is not None:
            assert res.best.max_peak <= limit * (1 + 1e-9)
        fastest = min(fitting, key=_per_mb)
        if res.best.spread is None:
            assert _per_mb(res.best) == _per_mb(fastest)
        else:  # the pick: overlapping the fastest's spread (per micro-batch), with the lowest p95 of those
            b, f = res.best, fastest
            mb, mf = b.structure.microbatches, f.structure.microbatches
            assert b.spread.p05 / mb <= f.spread.p95 / mf and f.spread.p05 / mf <= b.spread.p95 / mb, (b.label, f.label)
            assert b.spread.p95 / mb <= f.spread.p95 / mf, (b.label, f.label)
    else:
        assert res.best is None


def _compute_rows(schedule) -> list[list[tuple[str, int, int]]]:
    return [[(op.kind, op.stage, op.mb) for op in schedule.lane_ops(r, "compute")] for r in range(schedule.pp)]


def assert_written_is_ranked(tc, r: Result, tmp_path: Path, tag: str, csv: bool = True) -> None:
    """Properties 1 and 2 through the library: -o's plan and --csv's rows are the ranked candidate."""
    out, csv_path = tmp_path / f"{tag}.json", tmp_path / f"{tag}.csv"
    notes: list[str] = []
    write_best(tc, r, out=out, csv=csv_path if csv else None, notes=notes)
    again = plan_from_file(out)
    assert again.valid, (r.label, [v.message for v in again.violations if v.severity == "error"])
    assert again.simulation.makespan == pytest.approx(r.step, rel=REL, abs=1e-12), r.label
    assert _compute_rows(again.schedule) == _compute_rows(r.schedule if r.schedule is not None else again.schedule)
    blocks = list(r.split.layers)
    blocks[0] += tc.run_blocks[0]
    blocks[-1] += tc.run_blocks[1]
    assert list(again.schedule.config.workload.stage_layers) == blocks, r.label
    saved = json.loads(out.read_text())
    assert saved["metrics"]["tune"]["label"] == r.label and saved["metrics"]["tune"]["step"] == r.step
    if csv:
        if r.structure.family == "dualpipe":
            assert not csv_path.exists() and notes and notes[0].startswith("--csv: ")
        else:
            assert not notes, notes
            rows = [ln for ln in csv_path.read_text().splitlines() if ln.strip()]
            assert len(rows) == tc.pp
            assert _compute_rows(load_any(csv_path).schedule) == _compute_rows(again.schedule), r.label


def check_model(data: dict[str, Any], tmp_path: Path, *, others: int = 3) -> TuneResult | None:
    tc = _load(data)
    if isinstance(tc, InputError):
        return None
    why = _expected_refusal(data, tc)
    if why is not None:
        with pytest.raises(InputError, match=why):
            tune(tc)
        return None
    res = tune(tc)
    if res.unbuilt("t.yaml") is not None:
        assert all(r.step is None for r in res.results)
        return res
    for r in res.results:
        if r.step is not None:
            assert len(r.peak) == tc.pp, r.label
    assert_ranked_order(res, tc.memory_limit)
    if res.best is not None:
        assert_written_is_ranked(tc, res.best, tmp_path, "best")
    # a few other timed candidates (one per family) write as ranked too
    seen: set[str] = set()
    for r in res.results:
        if r.step is None or r is res.best or r.structure.family in seen or len(seen) >= others:
            continue
        seen.add(r.structure.family)
        assert_written_is_ranked(tc, r, tmp_path, f"c{len(seen)}", csv=False)
    return res


def _write_yaml(tmp_path: Path, data: dict[str, Any]) -> Path:
    p = tmp_path / "model.yaml"
    p.write_text(yaml.safe_dump(data))
    return p


def check_cli(data: dict[str, Any], tmp_path: Path, res: TuneResult | None) -> dict[str, Any] | None:
    """Properties 1-3 through ``pptl tune -o --csv --output json``, ``pptl check`` and ``pptl plan``."""
    path = _write_yaml(tmp_path, data)
    best, csv = tmp_path / "best.json", tmp_path / "best.csv"
    for p in (best, csv):
        p.unlink(missing_ok=True)
    r = runner.invoke(app, ["tune", str(path), "-o", str(best), "--csv", str(csv), "--output", "json"])
    only_two_way = data.get("families") is not None and set(data["families"]) <= {"dualpipe"}
    if res is None or res.unbuilt(str(path)) is not None or only_two_way:  # refused: one line, exit 2
        # (--csv with only two-direction families is refused before ranking: no winner could be a CSV)
        assert r.exit_code == 2, r.output
        lines = r.stderr.strip().splitlines()
        assert len(lines) == 1 and lines[0].startswith("error: "), r.stderr
        assert not best.exists() and not csv.exists()
        return None
    if res.best is None:  # nothing fits: one line naming the closest by peak memory, exit 1
        assert r.exit_code == 1, r.output
        lines = r.stderr.strip().splitlines()
        assert len(lines) == 1 and lines[0].startswith("error: no candidate fits the memory limit "), r.stderr
        closest = res.closest()
        assert f"; closest: {closest.label} with peak " in lines[0], (lines[0], closest.label)
        assert not best.exists() and not csv.exists()
        return json.loads(r.stdout)
    assert r.exit_code == 0, r.output
    got = json.loads(r.stdout)
    # the CLI's search (forked workers) ranks as the library's did
    assert [c["label"] for c in got["candidates"]] == [x.label for x in res.results]
    assert got["best"]["label"] == res.best.label and got["best"]["step"] == res.best.step
    for c, x in zip(got["candidates"], res.results):
        assert c["step"] == x.step and c["peak_memory"] == list(x.peak), x.label
    c = runner.invoke(app, ["check", str(best)])
    assert c.exit_code == 0, c.output
    p = runner.invoke(app, ["plan", str(best), "--output", "json"])
    assert p.exit_code == 0, p.output
    assert json.loads(p.stdout)["makespan"] == pytest.approx(got["best"]["step"], rel=REL, abs=1e-12)
    plan = load_any(best).schedule
    if res.best.structure.family == "dualpipe":
        assert not csv.exists()
    else:
        assert _compute_rows(load_any(csv).schedule) == _compute_rows(plan) == _compute_rows(res.best.schedule)
    return got


# -- property tests -----------------------------------------------------------------------------------

@settings(max_examples=40, **SETTINGS)
@given(data=models())
def test_library_writes_the_ranked_candidate(data: dict[str, Any], tmp_path_factory) -> None:
    check_model(data, tmp_path_factory.mktemp("lib"))


@settings(max_examples=12, **SETTINGS)
@given(data=models(pp=st.integers(1, 4), layers=st.integers(1, 16), mbs=st.integers(1, 8)))
def test_cli_writes_the_ranked_candidate(data: dict[str, Any], tmp_path_factory) -> None:
    tmp = tmp_path_factory.mktemp("cli")
    res = check_model(data, tmp, others=0)
    check_cli(data, tmp, res)


def _numeric_rank_order(tc, res: TuneResult, got: dict[str, Any], stdout_text: str, best: Path, csv: Path) -> None:
    pp = tc.pp
    b = res.best
    assert len(b.peak) == pp and got["best"]["peak_memory"] == list(b.peak)
    # the table's peak column: the best's row lists every rank's peak in rank order
    row = next(ln for ln in stdout_text.splitlines() if b.label in ln and ln.lstrip().startswith("1 "))
    assert " ".join(f"{p:.4g}" for p in b.peak) in row, row
    saved = json.loads(best.read_text())
    ranks = [ln["rank"] for ln in saved["lanes"]]
    assert ranks == sorted(ranks)
    assert [m["rank"] for m in saved["metrics"]["ranks"]] == list(range(pp))
    scale = saved["config"]["costs"].get("rank_scale")
    if scale:
        assert list(scale) == [str(r) for r in range(pp)]
    if b.structure.family != "dualpipe" and b.structure.vpp == 1:
        rows = [ln for ln in csv.read_text().splitlines() if ln.strip()]
        # one stage a rank: row k holds stage k's ops only
        assert [{tok.split("F")[0].split("I")[0].split("W")[0].split("B")[0] for tok in r_.split(",")} for r_ in rows] \
            == [{str(k)} for k in range(pp)]


@settings(max_examples=4, **SETTINGS)
@given(data=models(pp=st.integers(10, 12), layers=st.integers(12, 30), mbs=st.integers(1, 12)))
def test_ten_or_more_ranks_stay_in_numeric_order(data: dict[str, Any], tmp_path_factory) -> None:
    data = {**data, "families": ["1f1b", "zb-h1", "synth"], "microbatches": data["microbatches"]}
    data["model"]["layer"].setdefault("I", 1.0)
    data["model"]["layer"].setdefault("W", 1.0)
    data.pop("memory_limit", None)
    tmp = tmp_path_factory.mktemp("wide")
    res = check_model(data, tmp, others=1)
    assert res is not None and res.best is not None
    path = _write_yaml(tmp, data)
    best, csv = tmp / "best.json", tmp / "best.csv"
    j = runner.invoke(app, ["tune", str(path), "-o", str(best), "--csv", str(csv), "--output", "json"])
    assert j.exit_code == 0, j.output
    t = runner.invoke(app, ["tune", str(path), "--top", "3"])
    assert t.exit_code == 0, t.output
    tc = tune_config_from_mapping(data, source="t.yaml")
    _numeric_rank_order(tc, res, json.loads(j.stdout), t.stdout, best, csv)


# -- worked by hand -----------------------------------------------------------------------------------

def _hand(families: list[str], **layer: float) -> dict[str, Any]:
    return {"pp": 2, "microbatches": 2, "families": families,
            "model": {"layers": 2, "layer": {**layer, "activation": 1.0, "weight": 1.0}}}


def test_hand_1f1b_and_gpipe_pp2_m2(tmp_path: Path) -> None:
    """pp 2, m 2, one layer a stage, F=1, B=2, no messages, no embedding or head.

    1F1B: r0 F0 [0,1] F1 [1,2]; r1 F0 [1,2] B0 [2,4] F1 [4,5] B1 [5,7]; r0 B0 [4,6] B1 [7,9]: 9.
    GPipe: r1 F0 [1,2] F1 [2,3] B0 [3,5] B1 [5,7]; r0 B0 [5,7] B1 [7,9]: 9 too, 1F1B first on the peak
    (weights 1 + 2 activations on rank 0 for both; rank 1 holds 1 in 1F1B, 2 in GPipe: tie on the max,
    then the label). Busy 6 of 2*9: bubble 1/3."""
    tc = tune_config_from_mapping(_hand(["gpipe", "1f1b"], F=1.0, B=2.0), source="t.yaml")
    res = tune(tc)
    by = {r.label: r for r in res.results}
    assert by["1f1b m=2 split=balanced"].step == 9.0
    assert by["gpipe m=2 split=balanced"].step == 9.0
    assert by["1f1b m=2 split=balanced"].peak == (3.0, 2.0)
    assert by["gpipe m=2 split=balanced"].peak == (3.0, 3.0)
    assert by["1f1b m=2 split=balanced"].bubble == pytest.approx(1 / 3)
    assert res.best.label == "1f1b m=2 split=balanced"
    assert_written_is_ranked(tc, res.best, tmp_path, "h1")
    assert plan_result(tc, res.best).simulation.makespan == 9.0


def test_hand_zb_h1_pp2_m2(tmp_path: Path) -> None:
    """pp 2, m 2, F=I=W=1 (B=2), no messages. ZB-H1 (its CSV): r1 F0 [1,2] I0 [2,3] F1 [3,4] I1 [4,5]
    W0 [5,6] W1 [6,7]; r0 F0 [0,1] F1 [1,2] I0 [3,4] W0 [4,5] I1 [5,6] W1 [6,7]: 7 (1F1B's 9 less the
    two W's moved into the bubble). Peak: rank 0 weights 1 + F0 + F1 = 3; rank 1 (I frees half) 1 + 1.5."""
    data = _hand(["1f1b", "zb-h1"], F=1.0, I=1.0, W=1.0)
    tc = tune_config_from_mapping(data, source="t.yaml")
    res = tune(tc)
    best = res.best
    assert best.label == "zb-h1 m=2 split=balanced"
    assert best.step == 7.0 and best.peak == (3.0, 2.5)
    assert next(r for r in res.results if r.structure.family == "1f1b").step == 9.0
    assert_written_is_ranked(tc, best, tmp_path, "h2")
    assert (tmp_path / "h2.csv").read_text().split() == ["0F0,0F1,0I0,0W0,0I1,0W1", "1F0,1I0,1F1,1I1,1W0,1W1"]
    got = check_cli(data, tmp_path, res)
    assert got["best"]["step"] == 7.0


def test_hand_nothing_fits_is_one_line_exit_1(tmp_path: Path) -> None:
    """The same model under a limit of 1.5: every plan holds a weight of 1 and at least one activation of 1
    on each rank (peaks 1F1B (3, 2), ZB-H1 (3, 2.5)), so nothing fits: exit 1, one line naming the
    closest by the busiest rank's peak (3 and 3), then by step (ZB-H1's 7 against 1F1B's 9)."""
    data = {**_hand(["1f1b", "zb-h1"], F=1.0, I=1.0, W=1.0), "memory_limit": 1.5}
    res = tune(tune_config_from_mapping(data, source="t.yaml"))
    assert res.best is None
    r = runner.invoke(app, ["tune", str(_write_yaml(tmp_path, data)), "-o", str(tmp_path / "b.json")])
    assert r.exit_code == 1
    assert r.stderr.strip() == "error: no candidate fits the memory limit 1.5; closest: zb-h1 m=2 split=balanced with peak 3"
    assert not (tmp_path / "b.json").exists()


def test_fewer_layers_than_stages_is_one_line_exit_2(tmp_path: Path) -> None:
    data = {"pp": 4, "microbatches": 4, "model": {"layers": 3, "layer": {"F": 1, "B": 2}}}
    r = runner.invoke(app, ["tune", str(_write_yaml(tmp_path, data)), "-o", str(tmp_path / "b.json")])
    assert r.exit_code == 2
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and "field 'model.layers': got 3, fewer than pp=4 stages" in lines[0]


# -- regressions found by the properties above -------------------------------------------------------

@pytest.mark.parametrize(("data", "family"), [
    # minimal: one rank, two layers, DualPipeV, a message latency (check's rules then time the plan)
    ({"pp": 1, "microbatches": 2, "model": {"layers": 2, "layer": {"F": 1, "B": 2}}, "families": ["dualpipev"],
      "comm": {"latency": 0.05}}, "dualpipev"),
    ({"pp": 2, "microbatches": 4, "model": {"layers": 4, "layer": {"F": 1, "B": 2}}, "families": ["dualpipe"],
      "comm": {"latency": 0.05}}, "dualpipe"),
    # without messages it was exit 2, but naming an op of a candidate instead of the missing field
    ({"pp": 2, "microbatches": 4, "model": {"layers": 4, "layer": {"F": 1, "B": 2}}, "families": ["dualpipev", "1f1b"]},
     "dualpipev"),
])
def test_dualpipe_without_i_and_w_costs_is_the_missing_field(data: dict[str, Any], family: str, tmp_path: Path) -> None:
    """DualPipe(V) split their cool-down's backward into I and W at every size, so, as the zero-bubble
    families, they need the layer's I and W. Before, tune did not ask for them: with a message latency
    the check's timing of the first plan raised out of the search (`error: no cost for 'I' (op r0/compute/I
    s0 mb1); set it with --cost I=VALUE`, exit 1, the code of "nothing fits"); without, every DualPipe
    candidate was rejected for an op of kind I with no model cost."""
    tc = tune_config_from_mapping(data, source="t.yaml")
    with pytest.raises(InputError, match=rf"field 'model.layer.I': no cost given \(needed by {family};"):
        tune(tc)
    r = runner.invoke(app, ["tune", str(_write_yaml(tmp_path, data)), "-o", str(tmp_path / "b.json")])
    assert r.exit_code == 2, r.output
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: ") and "field 'model.layer.I': no cost given" in lines[0]
    assert not (tmp_path / "b.json").exists()
