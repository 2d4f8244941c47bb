"""Boundaries of the tune writer, ZB-V's short tables, the op table's ids, the V families' memory
option, the weight-update buffers and the MoE layers' loss gradient that hand-written mutants
(rows 620 on of ``tests/hand_mutants.py``) showed no test held.

Every expected value is worked out by hand in the test's comments, from the semantics the module
docstrings state, not read off the code's output.
"""
from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from pptl.config import Config
from pptl.errors import InputError
from pptl.optable import first_of, group_ids
from pptl.schedules import build_schedule, get_family
from pptl.schedules.weight_update import spec_from_options
from pptl.schedules.zbv import phase_table

FIX = Path(__file__).resolve().parent.parent / "fixtures"


# ------------------------------------------------------------------------------------------------
# pptl/tune/write.py: the plan of a calibrated ranking keeps the run's unit


@pytest.mark.parametrize("units", ["ms", "unit"])
def test_the_written_best_plan_keeps_the_unit_its_costs_came_in(units: str, tmp_path: Path) -> None:
    """``pptl tune --costs-from run.json -o best.json``: the costs are the run's, in milliseconds, so
    the written plan's times are milliseconds and ``pptl plan best.json`` (its timeline, the figure's
    axis, a whatif band against the run) says ms; an uncalibrated model stays in the config's unit."""
    from pptl.planning import plan_from_file
    from pptl.tune import load_tune_config, tune
    from pptl.tune.write import write_best

    tc = load_tune_config(FIX / "tune" / "user3.yaml")
    best = tune(tc).best
    assert best is not None
    out = tmp_path / "best.json"
    write_best(tc, best, out=out, csv=None, units=units)
    assert plan_from_file(out).simulation.timeline().meta.units == units


# ------------------------------------------------------------------------------------------------
# pptl/schedules/zbv.py: fewer micro-batches than 2p-1


def test_zbv_two_ranks_two_microbatches_builds_the_table_for_three() -> None:
    """p = 2, m = 2 < 2p-1 = 3: the table is built for n = 3 micro-batches and the ops of mb 2 dropped
    (torch does the same). Rank 1 (stages 1 and 2), worked through the phase table:

        warmup 1  2(p-r)-1 = 1 F0:        F0:0
        warmup 2  r = 1 x F1 F0:          F1:0 F0:1
        warmup 3  p-r = 1 x F1 I1 W1:     F1:1 I1:0 W1:0
        steady    F1 = F0 = 2 but F0 < n = 3: one round F0 I0 W0 F1 I1 W1 -> (F0:2) I0:0 W0:0 (F1:2) I1:1 W1:1
        cooldown 1  r = 1 x I0 I1:        I0:1 (I1:2)
        cooldown 2  p-r = 1 x I0 W0:      (I0:2) W0:1
        tail      the W1 and W0 of mb 2:  dropped

    A table built for 2p-2 = 2 skips the steady round: I0:0 I1:1 I0:1 W0:0 W1:1 W0:1 after W1:0."""
    got = [f"{op.kind}{op.chunk}:{op.mb}" for op in phase_table(1, 2, 2)]
    assert got == ["F0:0", "F1:0", "F0:1", "F1:1", "I1:0", "W1:0",
                   "I0:0", "W0:0", "I1:1", "W1:1", "I0:1", "W0:1"]


# ------------------------------------------------------------------------------------------------
# pptl/optable.py: ids of values far apart


def test_group_ids_of_values_far_apart_are_compressed_not_spread_over_the_range() -> None:
    """Two rows, 0 and 10**12: two distinct keys, so ids 0 and 1 and a size of 2. Packing them as they
    are (size 10**12 + 1) would make :func:`first_of` allocate 8 TB for a hostile plan's stage numbers."""
    ids, size = group_ids(np.array([0, 10**12], dtype=np.int64))
    assert size == 2 and sorted(ids.tolist()) == [0, 1]
    assert first_of(ids, size, np.array([5, 7], dtype=np.int64))[ids].tolist() == [5, 7]


# ------------------------------------------------------------------------------------------------
# pptl/schedules/v_shape.py: options.memory at 1


def test_v_half_memory_option_takes_exactly_one_and_refuses_more() -> None:
    """``options.memory`` is a share in (0, 1]. At 1 (all of 1F1B's activations) on p = 4, m = 8:
    1F1B holds 2 * min(4, 8) = 8 chunks, the cap would be int(1 * 8) = 8, and V-Half's pattern holds
    2 * ((4 + 2) // 2) = 6 <= 8 chunks, so the pattern is kept: 6 activations. At the default 0.55 the
    cap is int(0.55 * 8) = 4 < 6: 4. Just over 1 is refused."""
    fam = get_family("v-half")
    one = Config(schedule="v-half", pp=4, microbatches=8, options={"memory": 1})
    assert fam.memory(one) == 6.0
    assert fam.memory(Config(schedule="v-half", pp=4, microbatches=8)) == 4.0
    assert build_schedule(one).num_stages == 8
    with pytest.raises(InputError, match=r"options.memory.*in \(0, 1\]"):
        build_schedule(Config(schedule="v-half", pp=4, microbatches=8, options={"memory": 1.0001}))


# ------------------------------------------------------------------------------------------------
# pptl/schedules/weight_update.py: free memory with no room for a bucket


@pytest.mark.parametrize(("free", "bucket"), [(568, None), (569, 256)])
def test_free_memory_too_small_for_one_aligned_bucket_is_refused(free: int, bucket: int | None) -> None:
    """Two 256-byte tensors on 2 ranks, buckets sized automatically. usable = int(free * 0.9); the
    largest tensor (256) is over a third of usable (rounded down to 256 bytes: 0), so no H2D buffer,
    and a bucket is usable // (2 * 256) * 256 bytes. free 568: usable int(511.2) = 511 -> 0 bytes, no
    bucket at all: refused. free 569: usable int(512.1) = 512 -> one 256-byte bucket."""
    if bucket is None:
        with pytest.raises(InputError, match=r"field 'options.free_memory': got 568, expected room for 3 buckets"):
            spec_from_options({"free_memory": free, "tensors": [256, 256]}, pp=2)
    else:
        spec = spec_from_options({"free_memory": free, "tensors": [256, 256]}, pp=2)
        assert (spec.bucket_size, spec.h2d_buffer) == (bucket, False)


# ------------------------------------------------------------------------------------------------
# pptl/schedules/_moe_layers.py: the loss gradient's span


def test_the_loss_gradient_is_held_until_the_last_layers_b_attn_ends() -> None:
    """One stage (the last), two layers, hidden_bytes 1: the loss gradient is made with the last
    layer's forward combine and held (1 tensor) until that layer's B.attn has read it, i.e. to
    B.attn's end, as the output gradient dy is. Layer 0's combine output goes to layer 1's Attn instead."""
    s = build_schedule(Config(schedule="moe-1f1b-overlap", pp=1, microbatches=1,
                              options={"layers_per_chunk": 2, "costs": {"hidden_bytes": 1}}))
    ops = s.ops
    spans = [(ops[a].sub, ea, ops[b].sub, eb, n) for a, ea, b, eb, n in s.meta["held"]
             if (ops[a].kind, ops[a].flow, ops[b].kind, ops[b].flow) == ("A2A_COMBINE", "F", "ATTN", "B")]
    assert spans == [(1, 1, 1, 1, 1)]


# ------------------------------------------------------------------------------------------------
# pptl/commands/diagnose.py: a plan the simulator refuses as bad input is drawn in issue order


def test_diagnose_draws_in_issue_order_when_the_simulator_refuses_the_plan_as_bad_input(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """``pptl diagnose DUMPS --plan P -o fig.svg``: the plan's simulated times only place the pending
    ops; a plan the simulator refuses (as an invalid schedule or as bad input, e.g. a cost it cannot
    read) still gets its figure, in issue order, and the verdict of the dumps (the real NCCL order
    hang: exit 1), not a one-line input error in place of both."""
    from typer.testing import CliRunner

    import pptl.simulate
    from pptl.cli import app

    def refuse(*_a: object, **_k: object) -> None:
        raise InputError("plan.json: field 'costs.F': cannot be timed")

    monkeypatch.setattr(pptl.simulate, "simulate", refuse)
    fig = tmp_path / "hang.svg"
    r = CliRunner().invoke(app, ["diagnose", str(FIX / "flight_recorder" / "real_csv_nccl_order"), "--plan",
                                 str(FIX / "csv" / "invalid" / "hang_nccl_order.csv"), "-o", str(fig)])
    assert r.exit_code == 1, r.output
    assert "cannot be timed" not in r.output
    svg = fig.read_text()
    assert "SEND_F mb3" in svg and "RECV_B mb0" in svg and "SEND_B mb0" in svg
