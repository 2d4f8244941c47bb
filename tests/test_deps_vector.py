"""The numpy derivation of the training facts gives exactly the op-by-op oracle's edges
(tests/deps_oracle.py), on every family and on mutated op lists."""
from __future__ import annotations

import random
from dataclasses import replace

import pytest
from deps_oracle import training_deps_loop as _training_deps_loop

from pptl.config import config_from_mapping
from pptl.deps import facts_of_table, training_deps
from pptl.ir import Op
from pptl.optable import OpTable
from pptl.schedules import build_schedule

CASES = [
    ("1f1b", 4, 8, {}), ("interleaved-1f1b", 4, 8, {"vpp": 2}), ("zb-h1", 4, 8, {}), ("zb-h2", 4, 8, {}),
    ("zbv", 4, 8, {}), ("dualpipe", 8, 20, {}), ("dualpipev", 4, 8, {}), ("gpipe", 3, 5, {}),
    ("moe-1f1b-overlap", 4, 8, {"vpp": 2}),
]


def _mutate(ops: list[Op], pp: int, rnd: random.Random) -> list[Op]:
    """Duplicates, gaps, wrong stages / micro-batches / flows / ranks, FB pairs: the checker's inputs."""
    out = list(ops)
    for _ in range(5):
        j = rnd.randrange(len(out))
        op = out[j]
        change = rnd.choice(["dup", "del", "stage", "mb", "flow", "rank", "pair"])
        if change == "dup":
            out.insert(rnd.randrange(len(out)), op)
        elif change == "del":
            del out[j]
        elif change == "stage":
            out[j] = replace(op, stage=op.stage + rnd.choice([-1, 1, 5]))
        elif change == "mb":
            out[j] = replace(op, mb=op.mb + rnd.choice([-1, 1]))
        elif change == "flow":
            out[j] = replace(op, flow=rnd.choice(["F", "B", "X", ""]))
        elif change == "rank":
            out[j] = replace(op, rank=rnd.randrange(pp))
        else:
            out[j] = replace(op, kind="FB", pair=rnd.choice([None, (1, 2, 0), (op.stage, op.mb, 1)]))
    return out


@pytest.mark.parametrize("family,pp,m,extra", CASES)
def test_vector_deps_equal_the_loop(family: str, pp: int, m: int, extra: dict) -> None:
    s = build_schedule(config_from_mapping({"schedule": family, "pp": pp, "microbatches": m, **extra}, source="t"))
    expected = _training_deps_loop(s.ops, s.num_stages)
    assert expected, family
    assert training_deps(s.ops, s.num_stages) == expected
    rnd = random.Random(family)
    for _ in range(20):
        ops = _mutate(s.ops, pp, rnd)
        assert training_deps(ops, s.num_stages) == _training_deps_loop(ops, s.num_stages)


def test_large_schedules_have_the_oracle_s_edges() -> None:
    s = build_schedule(config_from_mapping({"schedule": "interleaved-1f1b", "pp": 8, "vpp": 2, "microbatches": 256},
                                           source="t"))
    assert len(s.ops) >= 20_000
    assert training_deps(s.ops, s.num_stages) == _training_deps_loop(s.ops, s.num_stages) == s.deps


@pytest.mark.parametrize("family,pp,m,extra", [
    ("interleaved-1f1b", 8, 256, {"vpp": 3, "split_backward": True}), ("dualpipe", 16, 320, {}), ("zb-h1", 16, 400, {}),
])
def test_families_derive_the_loop_s_facts_from_their_columns(family: str, pp: int, m: int, extra: dict) -> None:
    """assemble derives a large plan's facts from the table it builds (split backward, FB pairs),
    as sorted arrays; the ops and the list of facts exist only once something reads them."""
    s = build_schedule(config_from_mapping({"schedule": family, "pp": pp, "microbatches": m, **extra}, source="t"))
    assert not s.has_ops()
    t = s.table
    assert facts_of_table(t, s.num_stages) is facts_of_table(t, s.num_stages)  # derived once, kept
    assert s.deps == sorted(_training_deps_loop(s.ops, s.num_stages))


@pytest.mark.parametrize("far", [1 << 40, (1 << 62) - 5], ids=["2**40", "2**62-5"])
def test_indices_too_wide_to_pack_are_keyed_by_rank(far: int) -> None:
    """Places spread past an int64 key are keyed by their rank among the values present: the
    same facts (a stage's neighbours still meet), where the loop needs no packing at all."""
    ops = [Op("F", 0, "compute", stage=0, mb=0), Op("F", 1, "compute", stage=1, mb=0),
           Op("F", 0, "compute", stage=-far, mb=far, direction=far >> 10),
           Op("F", 1, "compute", stage=-far + 1, mb=far, direction=far >> 10),
           Op("B", 1, "compute", stage=1, mb=0), Op("B", 0, "compute", stage=0, mb=0)]
    assert training_deps(ops, 2) == _training_deps_loop(ops, 2) == [(0, 1), (0, 5), (1, 4), (4, 5)]
    assert OpTable.from_ops(ops).n == 6


@pytest.mark.parametrize("seed", range(3))
def test_many_widely_spread_places_keep_the_oracle_s_facts(seed: int) -> None:
    """deps._dep_keys 108 (``/`` in the wide packing): many distinct directions, stages and
    micro-batches spread past an int64 key, so that any other arithmetic in the packing makes two
    places share a key (or split one) and the facts differ from the loop's."""
    rng = random.Random(seed)
    far = 1 << 61
    dirs, mbs = [0, far // 3, far], [0, 7, far // 5, far // 2, far - 1]
    stages = [0, 1, 2, far // 7, far // 7 + 1, far // 7 + 2]
    ops = []
    seen = set()
    for _ in range(240):
        op = Op(rng.choice("FBIW"), rng.randrange(4), "compute", stage=rng.choice(stages), mb=rng.choice(mbs),
                direction=rng.choice(dirs))
        key = (op.kind, op.stage, op.mb, op.direction)
        if key not in seen:  # one op per place and kind, as a plan has
            seen.add(key)
            ops.append(op)
    facts = training_deps(ops, 3)
    assert len(facts) > 50
    assert facts == _training_deps_loop(ops, 3)
