"""pptl against torch.distributed.pipelining itself (CPU torch; skipped where torch is absent).

torch's schedules are generated with mock stages (no process group), as bench/check_vs_torch.py
does; pptl's exports go through torch's own loader, validator and simulator.
"""
from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")
S = pytest.importorskip("torch.distributed.pipelining.schedules")

from pptl.checks import run_checks  # noqa: E402
from pptl.config import config_from_mapping  # noqa: E402
from pptl.formats.torch_csv import dumps_rows, export_csv, load_csv_text, to_rows  # noqa: E402
from pptl.schedules import build_schedule  # noqa: E402
from pptl.simulate import simulate  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent
_spec = importlib.util.spec_from_file_location("check_vs_torch", ROOT / "bench/check_vs_torch.py")
bench = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(bench)


def _plan(name: str, pp: int, m: int, **kw):
    return build_schedule(config_from_mapping({"schedule": name, "pp": pp, "microbatches": m, **kw}))


def _errors(schedule, p2p: str = "nccl") -> list[str]:
    return [f"{v.code} {v.message}" for v in run_checks(schedule, p2p=p2p) if v.severity == "error"]


BUILTIN = ["GPipe", "Interleaved1F1B", "InterleavedZeroBubble", "ZBVZeroBubble", "DualPipeV", "LoopedBFS"]


@pytest.mark.parametrize("name", BUILTIN)
@pytest.mark.parametrize("pp,m", [(2, 4), (4, 8), (4, 12)], ids=lambda v: str(v))
def test_torch_builtin_schedules_are_accepted_and_simulated(name: str, pp: int, m: int) -> None:
    sched = bench.torch_schedule(name, pp, m)
    for rows in ([bench.compute_rows(sched)] +
                 ([bench.comms_rows(sched)] if hasattr(sched, "pipeline_order_with_comms") else [])):
        s, _, _, _ = load_csv_text(dumps_rows(rows))
        assert s.microbatches == m
        for mode in ("nonblocking", "nccl", "blocking"):
            assert _errors(s, mode) == [], mode
        sim = simulate(s)
        assert sim.makespan > 0 and all(r.busy > 0 for r in sim.ranks)


def test_torch_1f1b_ir_is_caught_by_pptl_and_by_torch_s_own_validator() -> None:
    # torch 2.13's Schedule1F1B._get_pipeline_order gives the last rank F1..Fm (no F0, an Fm that
    # does not exist). pptl names both problems; the runtime loop itself is not affected.
    sched = bench.torch_schedule("1F1B", 4, 8)
    s, _, _, _ = load_csv_text(dumps_rows(bench.compute_rows(sched)))
    errors = _errors(s)
    assert "PP003 missing F for stage 3 mb 0" in errors
    assert any(e.startswith("PP004 r3/compute/F s3 mb8") for e in errors)
    with pytest.raises(AssertionError, match="Running Full Backward for stage 3, microbatch 0 without first"):
        S._validate_schedule(sched.pipeline_order, 4, 4, 8)


@pytest.mark.parametrize("name,kw", [
    ("gpipe", {}), ("1f1b", {}), ("interleaved-1f1b", {"vpp": 2}), ("zb-h1", {}), ("zbv", {"vpp": 2}),
    ("dualpipev", {"vpp": 2}), ("looped-bfs", {"vpp": 2}), ("interleaved-zb", {"vpp": 2}), ("v-half", {}),
    ("v-min", {}),
], ids=lambda v: v if isinstance(v, str) else None)
@pytest.mark.parametrize("fmt", ["compute_only", "compute_comms"])
def test_pptl_exports_load_in_torch_runtime(tmp_path: Path, name: str, kw: dict, fmt: str) -> None:
    pp, m = 4, 8
    s = _plan(name, pp, m, **kw)
    path = tmp_path / "s.csv"
    text, _ = export_csv(s, comms=fmt == "compute_comms")
    path.write_text(text)
    n = s.num_stages
    v = s.meta.get("placement") == "v" or name in ("zbv", "dualpipev")
    local = [0, n - 1] if v else list(range(0, n, pp))
    runtime = S._PipelineScheduleRuntime([bench._MockStage(i, n, pp, 0) for i in local], m)
    runtime._load_csv(str(path), format=fmt)  # torch's loader: parse, _validate_schedule, lowering
    assert runtime.stage_index_to_group_rank == {st: r for st, r in
                                                 ((op.stage, op.rank) for op in s.ops if op.lane == "compute")}
    assert bench.torch_check_file(path, pp, n, m) == "ok"  # and torch's simulator


# pptl orders torch also generates: same pp, stages per rank and micro-batches.
CASES = [(pp, m) for pp in (2, 3, 4, 8) for m in (pp, 2 * pp, 3 * pp, 2 * pp + 2)]


@pytest.mark.parametrize("torch_name,family,kw", [
    ("GPipe", "gpipe", {}), ("ZBVZeroBubble", "zbv", {"vpp": 2}), ("DualPipeV", "dualpipev", {"vpp": 2}),
], ids=["gpipe", "zbv", "dualpipev"])
@pytest.mark.parametrize("pp,m", CASES, ids=lambda v: str(v))
def test_compute_order_equals_torch(torch_name: str, family: str, kw: dict, pp: int, m: int) -> None:
    try:
        sched = bench.torch_schedule(torch_name, pp, m)
    except ValueError as e:
        # Only the refusal torch documents (DualPipeV needs m >= its 2*pp stages); any other error fails.
        if torch_name == "DualPipeV" and m < 2 * pp and "at least as many microbatches as stages" in str(e):
            pytest.skip(f"torch refuses this size: {e}")
        raise
    rows, _ = to_rows(_plan(family, pp, m, **kw))
    assert rows == bench.compute_rows(sched)


@pytest.mark.parametrize("pp,m", CASES, ids=lambda v: str(v))
def test_interleaved_order_equals_torch(pp: int, m: int) -> None:
    sched = bench.torch_schedule("Interleaved1F1B", pp, m)
    group = m // max(1, m // pp)  # torch's microbatches_per_round
    rows, _ = to_rows(_plan("interleaved-1f1b", pp, m, vpp=2, group_size=group))
    assert rows == bench.compute_rows(sched)


@pytest.mark.parametrize("pp,v", [(2, 2), (3, 2), (4, 2), (8, 2), (2, 3), (4, 3), (4, 4)], ids=lambda x: str(x))
def test_interleaved_m_equals_pp_equals_torch_and_not_the_pre_2025_order(pp: int, v: int) -> None:
    # At m = pp Megatron-Core (since commit 4295be1) and torch warm rank r up with (V-1)p + 2(p-1-r)
    # forwards; Megatron's older order, kept as options.order megatron-pre-2025, ran all mV first.
    sched = bench.torch_schedule("Interleaved1F1B", pp, pp, stages_per_rank=v)
    theirs = bench.compute_rows(sched)
    text, _ = export_csv(_plan("interleaved-1f1b", pp, pp, vpp=v))
    assert load_csv_text(text)[0].microbatches == pp
    assert [row.split(",") for row in text.strip().splitlines()] == theirs
    old, _ = to_rows(_plan("interleaved-1f1b", pp, pp, vpp=v, options={"order": "megatron-pre-2025"}))
    assert old[0] == theirs[0] and old[1:] != theirs[1:]


def test_1f1b_order_equals_torch_on_all_but_the_last_rank() -> None:
    sched = bench.torch_schedule("1F1B", 4, 8)
    rows, _ = to_rows(_plan("1f1b", 4, 8))
    theirs = bench.compute_rows(sched)
    assert rows[:3] == theirs[:3]
    assert rows[3][:2] == ["3F0", "3B0"] and theirs[3][:2] == ["3F1", "3B0"]  # torch's IR bug, above


@pytest.mark.parametrize("fixture,torch_result,modes", [
    ("p2p_nccl_reordered.csv", "ok", {"nonblocking": [], "nccl": ["PP030"], "blocking": ["PP030"]}),
    ("p2p_nccl_hang.csv", "ok", {"nonblocking": [], "nccl": ["PP031"], "blocking": ["PP031"]}),
    ("p2p_nccl_defer_recv.csv", "ok", {"nonblocking": [], "nccl": ["PP031"], "blocking": ["PP031"]}),
    ("p2p_blocking_send_first.csv", "ok", {"nonblocking": [], "nccl": ["PP031"], "blocking": ["PP031"]}),
    ("p2p_blocking_ring.csv", "ok", {"nonblocking": [], "nccl": [], "blocking": ["PP031"]}),
], ids=lambda v: v if isinstance(v, str) and v.endswith(".csv") else None)
def test_orderings_torch_accepts_but_pptl_flags(fixture: str, torch_result: str, modes: dict) -> None:
    path = ROOT / "fixtures/invalid" / fixture
    s, _, _, _ = load_csv_text(path.read_text())
    assert bench.torch_check_file(path, s.pp, s.num_stages, s.microbatches) == torch_result
    for mode, codes in modes.items():
        assert [e.split()[0] for e in _errors(s, mode)] == codes, mode


def test_torch_defer_recv_lowering_is_the_nccl_fixture() -> None:
    # The fixture is torch's own _defer_recv_ops (defer_pp_recv=True) output for Interleaved1F1B pp=2 m=4.
    sched = bench.torch_schedule("Interleaved1F1B", 2, 4)
    mapping = sched.stage_index_to_group_rank
    deferred = S._defer_recv_ops(sched.pipeline_order_with_comms, lambda x: mapping[x])
    rows = [[str(a) for a in deferred[r] if a.computation_type.value not in ("UNSHARD", "RESHARD", "REDUCE_GRAD")]
            for r in sorted(deferred)]
    assert dumps_rows(rows) == (ROOT / "fixtures/invalid/p2p_nccl_defer_recv.csv").read_text()
