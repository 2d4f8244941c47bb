"""The weight-update plan (checkpoint-engine): hand-computed makespans, checks, errors, CLI, docs."""
from __future__ import annotations

import dataclasses
import json
import random
from pathlib import Path

import pytest
from typer.testing import CliRunner

from pptl.checks import run_checks
from pptl.cli import app
from pptl.config import config_from_mapping, load_config
from pptl.errors import InputError
from pptl.ir import Op, Schedule, ScheduleBuilder
from pptl.planning import plan
from pptl.schedules import build_schedule, get_family
from pptl.schedules.weight_update import auto_bucket_size, plan_buckets, spec_from_config
from pptl.schedules.weight_update_estimate import estimate_markdown, fast_update_time
from pptl.simulate import simulate

ROOT = Path(__file__).resolve().parents[2]
MiB, GiB = 1 << 20, 1 << 30
runner = CliRunner()


def _cfg(pp: int, **options) -> object:
    return config_from_mapping({"schedule": "weight-update", "pp": pp, "microbatches": 1, "options": options})


def _unit(**rates: str) -> dict:
    """1 MiB buckets and bandwidths in MiB/s, so one MiB at 1 MiB/s takes exactly 1000 ms."""
    base = {"bucket_size": "1MiB", "h2d_bandwidth": "1MiB/s", "d2d_bandwidth": "1MiB/s",
            "bcast_bandwidth": "1MiB/s", "reload_rate": "1MiB/s"}
    return {**base, **rates}


def _per_rank(pp: int, buckets: int) -> list[list[str]]:
    return [["1MiB"] * buckets for _ in range(pp)]


# Each case: (ranks, buckets per rank, options, extra costs, makespan in ms worked out by hand).
# Buckets go g0 (rank 0), g1 (rank 1), ... round by round; bucket g uses IPC half g % 2.
CASES = {
    # All stages 1 s. g0: H2D 0-1, COPY 1-2, BCAST 2-3, RELOAD 3-4; g1: BCAST 3-4, RELOAD 4-5;
    # g2 (rank 0): H2D 2-3 (after COPY g0), COPY waits RELOAD g0 -> 4-5, BCAST 5-6, RELOAD 6-7;
    # g3: COPY waits RELOAD g1 -> 5-6, BCAST 6-7, RELOAD 7-8.
    "2r-equal": (2, 2, _unit(), {}, 8000.0),
    # H2D 2 s, COPY 0.25 s, BCAST 1 s, RELOAD 0.5 s. g0: H 0-2, C 2-2.25, B 2.25-3.25, R 3.25-3.75;
    # g1: B 3.25-4.25, R 4.25-4.75; g2: H 2.25-4.25, C 4.25-4.5, B 4.5-5.5, R 5.5-6;
    # g3: C waits R g1 -> 4.75-5, B 5.5-6.5, R 6.5-7.
    "2r-unequal": (2, 2, _unit(h2d_bandwidth="0.5MiB/s", d2d_bandwidth="4MiB/s", reload_rate="2MiB/s"), {}, 7000.0),
    # Reload-bound (H2D 1, COPY 0, BCAST 1, RELOAD 3): reloads run back to back after the first
    # broadcast ends at 2: 2 + 4 x 3 = 14.
    "2r-reload-bound": (2, 2, _unit(reload_rate="0.3333333333333333MiB/s"), {"COPY": 0}, 14000.0),
    # One bucket per rank, all 1 s: g2's COPY waits RELOAD g0 (ends 4) -> B 5-6; g3's waits g1 (5) -> R 7-8.
    "4r-equal": (4, 1, _unit(), {}, 8000.0),
    # Broadcast-bound (H2D 1, COPY 0, BCAST 2, RELOAD 1): 1 + 4 x 2 + 1 = 10.
    "4r-bcast-bound": (4, 1, _unit(bcast_bandwidth="0.5MiB/s"), {"COPY": 0}, 10000.0),
    # No H2D buffer, all 1 s: H2D goes straight into the half. g0: H 0-1, B 1-2, R 2-3; g1: H 0-1, B 2-3,
    # R 3-4; g2: H waits R g0 -> 3-4, B 4-5, R 5-6; g3: H waits R g1 -> 4-5, B 5-6, R 6-7.
    "2r-no-h2d-buffer": (2, 2, _unit(h2d_buffer=False), {}, 7000.0),
    # checkpoint-engine's loop: round 1's H2D waits for round 0's last broadcast (ends 4): g2: H 4-5,
    # C 5-6, B 6-7, R 7-8; g3: H 4-5, C 5-6, B 7-8, R 8-9.
    "2r-no-h2d-overlap": (2, 2, _unit(h2d_overlap=False), {}, 9000.0),
    # One IPC half: every write waits for the previous bucket's reload; C+B+R per bucket after it:
    # g0 R ends 4; g1 C 4-5, B 5-6, R 6-7; g2 C 7-8 .. R 9-10; g3 C 10-11 .. R 12-13.
    "2r-one-half": (2, 2, _unit(ipc_halves=1), {}, 13000.0),
}


@pytest.mark.parametrize("case", list(CASES), ids=list(CASES))
def test_makespan_matches_hand_computation(case: str) -> None:
    pp, per_rank, options, fixed, expected = CASES[case]
    data = {"schedule": "weight-update", "pp": pp, "microbatches": 1,
            "options": {**options, "tensors": _per_rank(pp, per_rank)}, "costs": fixed}
    cfg = config_from_mapping(data)
    schedule = build_schedule(cfg)
    sim = simulate(schedule)
    assert sim.makespan == pytest.approx(expected)
    assert fast_update_time(spec_from_config(cfg))["update_time"] == pytest.approx(expected)
    assert run_checks(schedule) == []


def test_fast_estimate_equals_simulation_on_random_plans() -> None:
    rnd = random.Random(7)
    for _ in range(40):
        pp = rnd.choice([2, 3, 5])
        tensors = [[f"{rnd.choice([1, 2, 3])}MiB" for _ in range(rnd.randint(0, 4))] for _ in range(pp)]
        tensors[0].append("1MiB")
        options = {"tensors": tensors, "bucket_size": f"{rnd.choice([3, 4])}MiB",
                   "h2d_buffer": rnd.choice([True, False]), "h2d_overlap": rnd.choice([True, False]),
                   "ipc_halves": rnd.choice([1, 2]), "bcast_latency": rnd.choice([0, 3]),
                   "h2d_bandwidth": f"{rnd.choice([1, 4])}MiB/s", "bcast_bandwidth": f"{rnd.choice([1, 2])}MiB/s",
                   "reload_rate": f"{rnd.choice([1, 4])}MiB/s", "d2d_bandwidth": "8MiB/s"}
        cfg = _cfg(pp, **options)
        sim = simulate(build_schedule(cfg))
        assert fast_update_time(spec_from_config(cfg))["update_time"] == pytest.approx(sim.makespan), options


def test_ops_follow_the_contract() -> None:
    s = build_schedule(load_config(ROOT / "fixtures/weight_update_seed.yaml"))
    assert get_family("weight-update").style == "weight-update"
    assert {(op.kind, op.lane) for op in s.ops} == {("H2D", "h2d"), ("COPY", "ipc"), ("BCAST", "comm"),
                                                     ("RELOAD", "compute")}
    assert s.pp == 4 and s.microbatches == 8  # 64 GiB / 8 GiB buckets
    assert sorted({op.bucket for op in s.ops}) == list(range(8))
    for op in s.ops:
        # The bucket and the IPC half have fields of their own: mb and sub keep their meaning.
        assert (op.mb, op.sub, op.stage) == (-1, -1, -1)
        owner = op.bucket % 4  # 2 rounds of one bucket per rank
        if op.kind == "BCAST":
            assert op.peer == owner and op.half == op.bucket % 2
            assert op.label == ("Broadcast (src)" if op.rank == owner else "Broadcast (dst)")
        elif op.kind in ("H2D", "COPY"):
            assert op.rank == owner and op.label == {"H2D": "H2D", "COPY": "IPC"}[op.kind]
            assert op.half == (op.bucket % 2 if op.kind == "COPY" else -1)  # H2D fills the H2D buffer
        else:
            assert op.label == "Reload weights" and op.half == op.bucket % 2
    ids = [op.id for op in s.ops]
    assert len(set(ids)) == len(ids)
    assert "r1/ipc/COPY IPC bucket5 half1" in ids and "r1/h2d/H2D H2D bucket5" in ids
    assert "r0/comm/BCAST Broadcast (dst) bucket5 half1" in ids
    assert run_checks(s) == []


def test_default_bucket_size_follows_checkpoint_engine() -> None:
    # At least 8 GiB or the largest tensor, at most a third of 90% of free memory.
    assert auto_bucket_size(largest_tensor=GiB, free_memory=32 * GiB) == (8 * GiB, True)
    assert auto_bucket_size(largest_tensor=10 * GiB, free_memory=40 * GiB) == (10 * GiB, True)
    size, h2d = auto_bucket_size(largest_tensor=GiB, free_memory=12 * GiB)
    assert h2d and size == int(12 * GiB * 0.9) // (3 * 256) * 256
    # The largest tensor does not fit in a third: fall back to two buffers (no H2D buffer).
    size, h2d = auto_bucket_size(largest_tensor=5 * GiB, free_memory=12 * GiB)
    assert not h2d and size == int(12 * GiB * 0.9) // (2 * 256) * 256
    s = build_schedule(_cfg(2, model_size="64GiB", tensor_size="5GiB", free_memory="12GiB"))
    assert not any(op.kind == "COPY" for op in s.ops)
    assert all(op.half in (0, 1) for op in s.ops if op.kind == "H2D")  # H2D writes the IPC half


def test_fallback_fixture_has_no_h2d_buffer() -> None:
    result = plan(load_config(ROOT / "fixtures/weight_update_no_h2d_buffer.yaml"))
    s = result.schedule
    assert s.meta["weight_update"]["h2d_buffer"] is False
    assert s.meta["weight_update"]["bucket_size"] == 10 * GiB  # half of 90% of 32 GiB allows the 10 GiB tensor
    assert not any(op.kind == "COPY" for op in s.ops) and result.violations == []
    assert set(result.metrics["weight_update"]["hidden"]) == {"h2d", "compute"}
    assert "(no H2D buffer: H2D serialised per owner, 2 IPC halves)" in result.metrics["report"][0]


def test_buckets_pack_per_owner_and_go_round_by_round() -> None:
    cfg = _cfg(2, bucket_size="4MiB", tensors=[["3MiB", "1MiB", "2MiB"], ["1MiB"]])
    got = [(b.owner, b.round, b.nbytes // MiB, b.half) for b in plan_buckets(spec_from_config(cfg))]
    assert got == [(0, 0, 4, 0), (1, 0, 1, 1), (0, 1, 2, 0)]


def test_flat_tensor_list_is_sharded_in_contiguous_runs() -> None:
    spec = spec_from_config(_cfg(2, tensors=["1MiB", "1MiB", "2MiB"]))
    assert [sum(t) // MiB for t in spec.owners] == [2, 2]


def _mutate_halves(s: Schedule, half: int) -> Schedule:
    ops = [dataclasses.replace(op, half=half) if op.half >= 0 else op for op in s.ops]
    return dataclasses.replace(s, ops=ops)


def test_dropping_the_double_buffer_is_caught() -> None:
    s = build_schedule(_cfg(2, **_unit(), tensors=_per_rank(2, 2)))
    assert run_checks(s) == []
    one_half = _mutate_halves(s, 0)  # every bucket in half 0, but writes still only wait for bucket g-2
    codes = [v.code for v in run_checks(one_half)]
    assert set(codes) == {"PP050"}
    v = run_checks(one_half, select={"PP050"})[0]
    assert "IPC half 0 is rewritten with bucket 1" in v.message and "buffer reused before release" in v.message
    assert "r0/compute/RELOAD Reload weights bucket0 half0" in v.ops or \
        "r1/compute/RELOAD Reload weights bucket0 half0" in v.ops


def test_one_half_done_right_passes() -> None:
    s = build_schedule(_cfg(2, **_unit(ipc_halves=1), tensors=_per_rank(2, 2)))
    assert {op.half for op in s.ops if op.half >= 0} == {0}
    assert run_checks(s) == []


def _drop_dep(s: Schedule, producer: str, consumer: str) -> Schedule:
    idx = s.index()
    edge = (idx[producer], idx[consumer])
    assert edge in s.deps
    return dataclasses.replace(s, deps=[e for e in s.deps if e != edge])


def test_h2d_buffer_overwritten_before_copy_is_caught() -> None:
    s = build_schedule(_cfg(2, **_unit(), tensors=_per_rank(2, 2)))
    broken = _drop_dep(s, "r0/ipc/COPY IPC bucket0 half0", "r0/h2d/H2D H2D bucket2")
    v = run_checks(broken)
    assert [x.code for x in v] == ["PP054"]
    assert "r0/h2d/H2D H2D bucket2 overwrites rank 0's H2D buffer" in v[0].message


def test_release_dependency_missing_is_caught() -> None:
    s = build_schedule(_cfg(2, **_unit(), tensors=_per_rank(2, 2)))
    idx = s.index()
    copy2 = idx["r0/ipc/COPY IPC bucket2 half0"]
    broken = dataclasses.replace(s, deps=[e for e in s.deps if not (e[1] == copy2 and s.ops[e[0]].kind == "RELOAD")])
    assert {x.code for x in run_checks(broken)} == {"PP050"}


def test_tensor_larger_than_bucket_is_caught() -> None:
    s = build_schedule(_cfg(2, bucket_size="1MiB", tensors=[["2MiB"], ["1MiB"]]))
    v = run_checks(s)
    assert [x.code for x in v] == ["PP051", "PP052"]
    assert v[0].message == ("bucket 0 is 2 MiB (2097152 bytes), larger than the 1 MiB buffer (1048576 bytes) it is "
                            "copied and broadcast through (r0/h2d/H2D H2D bucket0)")
    assert v[1].message.startswith("bucket 0 (owner rank 0) holds a tensor of 2 MiB (2097152 bytes), larger than the "
                                   "bucket size 1 MiB (1048576 bytes); raise options.bucket_size")


def test_buffers_over_free_memory_are_caught() -> None:
    s = build_schedule(_cfg(2, bucket_size="16GiB", free_memory="32GiB", h2d_buffer=True))
    v = run_checks(s)
    assert [x.code for x in v] == ["PP056"]
    assert "3 buffers of 16 GiB need 48 GiB of GPU memory, more than the 28.8 GiB usable" in v[0].message


def test_broadcast_in_a_different_order_is_caught() -> None:
    s = build_schedule(_cfg(3, **_unit(), tensors=_per_rank(3, 1)))
    lanes = {k: s.lane_ops(*k) for k in s.lanes}
    comm = lanes[(2, "comm")]
    comm[0], comm[1] = comm[1], comm[0]
    v = run_checks(s.with_lanes(lanes))
    assert [x.code for x in v] == ["PP053"]
    assert v[0].message == ("rank 2 broadcasts bucket 1 from rank 1 as its broadcast #0, but the other ranks broadcast "
                            "bucket 0 from rank 0 there (a collective must run in the same order on every rank)")


def test_missing_reload_is_caught_and_training_rules_stay_quiet() -> None:
    s = build_schedule(_cfg(2, **_unit(), tensors=_per_rank(2, 1)))
    lanes = {k: [op for op in s.lane_ops(*k) if not (op.kind == "RELOAD" and op.rank == 1 and op.bucket == 1)]
             for k in s.lanes}
    v = run_checks(s.with_lanes(lanes))
    assert [(x.code, x.message) for x in v] == [("PP055", "bucket 1 is missing its reload on rank 1")]


def test_missing_work_skips_only_schedules_without_training_ops() -> None:
    only_update = ScheduleBuilder()
    only_update.add(Op(kind="RELOAD", rank=0, lane="compute", bucket=0))
    s = Schedule("custom", 1, 1, 1, only_update.ops, only_update.lanes)
    assert run_checks(s, select={"PP003"}) == []
    training = ScheduleBuilder()
    training.add(Op(kind="F", rank=0, lane="compute", stage=0, mb=0))
    t = Schedule("custom", 1, 1, 1, training.ops, training.lanes)
    assert [v.message for v in run_checks(t, select={"PP003"})] == ["missing B for stage 0 mb 0"]
    empty = Schedule("custom", 1, 1, 1, [], {})
    assert [v.code for v in run_checks(empty, select={"PP003"})] == ["PP003"]


def test_metrics_report_hidden_and_exposed_time() -> None:
    cfg = config_from_mapping({"schedule": "weight-update", "pp": 4, "microbatches": 1, "costs": {"COPY": 0},
                               "options": {**_unit(bcast_bandwidth="0.5MiB/s"), "tensors": _per_rank(4, 1)}})
    m = plan(cfg).metrics["weight_update"]
    assert m["update_time"] == pytest.approx(10000.0)
    # Reloads at 3-4, 5-6, 7-8, 9-10 against broadcasts 1-3, 3-5, 5-7, 7-9: three of four hidden.
    assert m["hidden"]["compute"] == pytest.approx(0.75)
    assert m["hidden"]["h2d"] == pytest.approx(0.0)  # every H2D runs 0-1, before the first broadcast
    assert m["exposed"] == pytest.approx(2000.0)
    assert m["stages"]["comm"] == {"total": pytest.approx(32000.0), "max_rank": pytest.approx(8000.0)}
    assert m["buckets"] == 4


BAD = {
    "negative-bandwidth": ({"bcast_bandwidth": "-5GB/s"}, "field 'options.bcast_bandwidth': got '-5GB/s', expected "
                           "a bandwidth > 0 in bytes per second, such as 25GB/s for schedule 'weight-update'"),
    "zero-bandwidth": ({"h2d_bandwidth": 0}, "field 'options.h2d_bandwidth': got 0, expected a bandwidth > 0"),
    "word-bandwidth": ({"reload_rate": "fast"}, "field 'options.reload_rate': got 'fast', expected a bandwidth"),
    "unknown-unit": ({"model_size": "12parsecs"}, "field 'options.model_size': got '12parsecs', expected a size > 0"),
    "rate-as-size": ({"bucket_size": "8GiB/s"}, "field 'options.bucket_size': got '8GiB/s', expected a size > 0"),
    "zero-size": ({"bucket_size": "0B"}, "field 'options.bucket_size': got '0B', expected a size > 0"),
    "negative-tensor": ({"tensors": ["1GiB", -3]}, r"field 'options.tensors\[1\]': got -3, expected a size > 0"),
    "empty-tensors": ({"tensors": []}, "field 'options.tensors': got \\[\\], expected a non-empty list"),
    "rows-per-rank": ({"tensors": [["1GiB"]]}, "field 'options.tensors': got 1 list, expected one list of tensor "
                      r"sizes per rank \(2\)"),
    "two-sizes": ({"model_size": "1GiB", "params": "7B"}, "fields 'options.model_size' and 'options.params' both"),
    "bad-params": ({"params": "lots"}, "field 'options.params': got 'lots', expected a parameter count"),
    "halves": ({"ipc_halves": 3}, "field 'options.ipc_halves': got 3, expected 1 or 2"),
    "h2d-buffer": ({"h2d_buffer": "maybe"}, "field 'options.h2d_buffer': got 'maybe', expected true, false or auto"),
    "latency": ({"bcast_latency": -1}, "field 'options.bcast_latency': got -1, expected milliseconds >= 0"),
    "typo": ({"bucket_sise": "1GiB"}, "field 'options.bucket_sise' is unknown for schedule 'weight-update'; known: "
             "bcast_bandwidth"),
    "too-many-tensors": ({"tensor_size": "1B", "model_size": "1TB"}, "field 'options.tensor_size': got '1B', which "
                         "makes 1000000000000 tensors, more than the 5000000"),
}


@pytest.mark.parametrize("case", list(BAD), ids=list(BAD))
def test_bad_options_are_one_line_errors(case: str) -> None:
    options, message = BAD[case]
    with pytest.raises(InputError, match=message):
        build_schedule(_cfg(2, **options))


def test_plan_too_large_to_build_points_to_the_estimate() -> None:
    with pytest.raises(InputError, match="2000 buckets on 2000 ranks make 8004000 ops, more than the 5000000 a plan may "
                       "hold; raise options.bucket_size or use weight_update.fast_update_time"):
        build_schedule(_cfg(2000, model_size="1GiB"))
    assert fast_update_time(spec_from_config(_cfg(2000, model_size="1GiB")))["buckets"] == 2000


def test_one_rank_is_refused() -> None:
    with pytest.raises(InputError, match="field 'pp': got 1, expected at least 2 ranks"):
        build_schedule(_cfg(1))


@pytest.mark.parametrize("case", ["negative-bandwidth", "unknown-unit", "typo"])
def test_bad_options_exit_2_on_the_cli(tmp_path: Path, case: str) -> None:
    options, message = BAD[case]
    path = tmp_path / "bad.json"
    path.write_text(json.dumps({"schedule": "weight-update", "pp": 2, "microbatches": 1, "options": options}))
    result = runner.invoke(app, ["plan", str(path)])
    assert result.exit_code == 2, result.output
    assert result.output.startswith(f"error: {path}: field ")
    assert len(result.output.strip().splitlines()) == 1


def test_cli_plan_flags_prints_the_update_report() -> None:
    result = runner.invoke(app, ["plan", "--schedule", "weight-update", "--pp", "4", "--microbatches", "1"])
    assert result.exit_code == 0, result.output
    lines = result.output.splitlines()
    assert "weight update: 8 buckets of at most 8 GiB (H2D buffer, 2 IPC halves) · update time 1812 ms" in lines
    assert any(line.startswith("hidden behind broadcast: H2D 50%") for line in lines)


def test_cli_plan_file_round_trips_through_check(tmp_path: Path) -> None:
    out = tmp_path / "update.json"
    result = runner.invoke(app, ["plan", str(ROOT / "fixtures/weight_update_seed.yaml"), "-o", str(out),
                                 "--output", "json"])
    assert result.exit_code == 0, result.output
    metrics = json.loads(result.output)
    assert metrics["weight_update"]["update_time"] == pytest.approx(metrics["makespan"])
    result = runner.invoke(app, ["check", str(out)])
    assert result.exit_code == 0, result.output
    assert result.output.strip() == f"{out}: ok, 80 ops checked"


def test_cli_check_reports_a_tensor_over_the_bucket(tmp_path: Path) -> None:
    path = tmp_path / "big.yaml"
    path.write_text("schedule: weight-update\npp: 2\nmicrobatches: 1\n"
                    "options: {bucket_size: 1MiB, tensors: [[2MiB], [1MiB]]}\n")
    result = runner.invoke(app, ["check", str(path)])
    assert result.exit_code == 1, result.output
    assert f"{path}: PP052 error: bucket 0 (owner rank 0) holds a tensor" in result.output


def test_docs_estimate_table_is_generated() -> None:
    doc = (ROOT / "docs/weight_update.md").read_text()
    body = doc.split("<!-- estimate:begin -->")[1].split("<!-- estimate:end -->")[0]
    assert body.strip() == estimate_markdown().strip()
    assert "| 1024 | " in body and "| 1T |" in body
