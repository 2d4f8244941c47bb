"""Which executor runs a plan and what it refuses, read from the family's own record
(``Family.runtime``), never from its name."""
from __future__ import annotations

from dataclasses import replace

import pytest

from pptl.config import config_from_mapping
from pptl.errors import InputError, InvalidScheduleError
from pptl.run.program import build_program
from pptl.schedules import FAMILIES, build_schedule, find_family

MOE = {"schedule": "moe-1f1b-overlap", "pp": 2, "vpp": 2, "microbatches": 4,
       "workload": {"hidden": 16, "tokens": 8}, "options": {"ep": 2, "layers_per_chunk": 1}}
UPDATE = {"schedule": "weight-update", "pp": 2, "microbatches": 1, "options": {"model_size": 1 << 20}}


def test_records_declare_the_runtime_of_the_families_that_have_one() -> None:
    own = {name: f.runtime for name, f in FAMILIES.items() if f.runtime is not None}
    assert set(own) == {"moe-1f1b-overlap", "weight-update"}
    assert own["moe-1f1b-overlap"].executor == "pptl.run.moe:MoEExecutor"
    # both cross ranks without SEND/RECV: broadcasts, and the all-to-all rendezvous of EP members
    assert own["weight-update"].collectives == {"BCAST", "RELOAD"}
    assert own["moe-1f1b-overlap"].collectives == {"A2A_DISPATCH", "A2A_COMBINE"}
    assert all(f.runtime is None or f.name in own for f in FAMILIES.values())
    assert find_family("torch-csv") is None  # an imported schedule: the training executor


def test_a_family_check_refuses_a_plan_without_its_metadata() -> None:
    s = build_schedule(config_from_mapping(MOE))
    build_program(s)  # as planned: runs
    bare = replace(s, meta={k: v for k, v in s.meta.items() if k != "ep_groups"})
    with pytest.raises(InputError, match=r"^p\.json: an moe-1f1b-overlap plan needs meta\.ep_groups"):
        build_program(bare, source="p.json")
    u = build_schedule(config_from_mapping(UPDATE))
    with pytest.raises(InputError, match=r"a weight-update plan needs meta\.weight_update\.buckets"):
        build_program(replace(u, meta={**u.meta, "weight_update": {}}))


def test_family_kinds_run_only_in_their_family() -> None:
    """An MoE plan relabelled as interleaved 1F1B has kinds the training executor does not run."""
    s = build_schedule(config_from_mapping(MOE))
    with pytest.raises(InputError, match=r"has kind \w+; pptl run executes training plans \(kinds .*\) and the "
                                         r"moe-1f1b-overlap, weight-update families$"):
        build_program(replace(s, family="interleaved-1f1b"))


def test_collective_families_skip_the_send_recv_crossing_check(monkeypatch: pytest.MonkeyPatch) -> None:
    """Broadcasts cross ranks without SEND/RECV; the record's ``collectives`` is what lets them."""
    import pptl.run.program as program

    u = build_schedule(config_from_mapping(UPDATE))
    build_program(u)
    fam = find_family("weight-update")
    assert fam is not None and fam.runtime is not None
    no_collectives = replace(fam, runtime=replace(fam.runtime, collectives=frozenset()))
    monkeypatch.setattr(program, "find_family", lambda name: no_collectives)
    with pytest.raises(InvalidScheduleError, match=r"BCAST .* crosses ranks without a SEND/RECV"):
        build_program(u)


def test_executor_class_comes_from_the_record() -> None:
    pytest.importorskip("torch")
    from pptl.run.executor import Executor
    from pptl.run.families import executor_class
    from pptl.run.moe import MoEExecutor
    from pptl.run.weight_update import WeightUpdateExecutor

    assert executor_class(build_schedule(config_from_mapping(MOE))) is MoEExecutor
    assert executor_class(build_schedule(config_from_mapping(UPDATE))) is WeightUpdateExecutor
    one = build_schedule(config_from_mapping({"schedule": "1f1b", "pp": 2, "microbatches": 2}))
    assert executor_class(one) is Executor
    assert executor_class(replace(one, family="torch-csv")) is Executor


def test_a_crossing_outside_the_collectives_is_still_refused() -> None:
    """The MoE record lets dependencies cross ranks into its all-to-alls, and no other."""
    s = build_schedule(config_from_mapping(MOE))
    build_program(s)  # the rendezvous edges across EP members are into all-to-alls
    a = next(i for i, op in enumerate(s.ops) if op.rank == 0 and op.kind == "ATTN")
    b = next(i for i, op in enumerate(s.ops) if op.rank == 1 and op.kind == "MLP")
    with pytest.raises(InvalidScheduleError, match=r"ATTN.* -> .*MLP.* crosses ranks without a SEND/RECV"):
        build_program(replace(s, deps=[*s.deps, (a, b)]))
