"""PP020 (FB self-dependency), PP021 (weight-gradient FIFO) and PP043 (a paired step on its own
micro-batch) on a table-made schedule report what they report on the ``Op`` list, and build no
``Op`` when there is nothing to report."""
from __future__ import annotations

import random

import pytest

from pptl.checks import Context
from pptl.checks.moe import paired_self_dependency
from pptl.checks.overlap import fb_self_dependency, w_fifo_order
from pptl.config import Config
from pptl.demo import default_fixtures_dir
from pptl.formats.loader import load_any
from pptl.ir import Schedule
from pptl.schedules import build_schedule
from tests.table_copy import table_made

FIXTURES = default_fixtures_dir()
CONFIGS = [Config(schedule=name, pp=4, microbatches=8, **kw) for name, kw in [
    ("zb-h1", {}), ("zb-h2", {}), ("zbv", {}), ("dualpipe", {}), ("dualpipev", {}), ("1f1b", {"split_backward": True}),
    ("interleaved-1f1b", {"vpp": 2, "split_backward": True})]]




def _swapped_ws(s: Schedule, seed: int) -> Schedule:
    """``s`` with two W ops of one rank's compute lane swapped (a FIFO popped out of order)."""
    rng = random.Random(seed)
    lanes = {k: [s.ops[i] for i in v] for k, v in s.lanes.items()}
    key = rng.choice([k for k, ops in lanes.items() if sum(op.kind == "W" for op in ops) > 1])
    ws = [j for j, op in enumerate(lanes[key]) if op.kind == "W"]
    a, b = rng.sample(ws, 2)
    lanes[key][a], lanes[key][b] = lanes[key][b], lanes[key][a]
    return s.with_lanes(lanes)


def _cases() -> list[tuple[str, Schedule]]:
    out = [(f"{c.schedule}{'-split' if c.split_backward else ''}", build_schedule(c)) for c in CONFIGS]
    out += [(f"{name}-swapped{k}", _swapped_ws(s, k)) for name, s in list(out) for k in range(3)
            if any(op.kind == "W" for op in s.ops)]
    for name in ("zb_w_fifo.json", "dualpipe_fb_self_dependency.json", "w_before_i.json", "moe_no_extra_warmup.yaml"):
        out.append((name, load_any(FIXTURES / "invalid" / name).schedule))
    for name in ("moe_seed.yaml", "moe_overlap.yaml", "moe_interleaved.yaml"):
        out.append((name, load_any(FIXTURES / name).schedule))
    return out


CASES = _cases()


RULES = ((fb_self_dependency, "PP020"), (w_fifo_order, "PP021"), (paired_self_dependency, "PP043"))


@pytest.mark.parametrize("rule", [r for r, _ in RULES], ids=[code for _, code in RULES])
@pytest.mark.parametrize("name, s", CASES, ids=[name for name, _ in CASES])
def test_array_path_reports_what_the_plain_path_reports(rule, name: str, s: Schedule, force) -> None:
    force(False)
    plain = rule(Context(s))
    force(True)
    t = table_made(s)
    assert rule(Context(t)) == plain
    if not plain:
        assert not t.has_ops()


def test_the_cases_reach_both_rules() -> None:
    found = {code for _, s in CASES for rule, code in RULES if rule(Context(s))}
    assert found == {"PP020", "PP021", "PP043"}
