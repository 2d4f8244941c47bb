"""Mutations of a valid schedule that the checker must catch (shared by the families' property tests)."""
from __future__ import annotations

import random

import networkx as nx

from pptl.checks import run_checks
from pptl.ir import Op, Schedule

__all__ = ["error_codes", "lanes_of", "drop_one", "duplicate_one", "move_before_dependency"]


def error_codes(schedule: Schedule) -> set[str]:
    return {v.code for v in run_checks(schedule) if v.severity == "error"}


def lanes_of(schedule: Schedule) -> dict[tuple[int, str], list[Op]]:
    """Each lane's ops in order, as lists a test may edit and hand to ``Schedule.with_lanes``."""
    return {k: [schedule.ops[i] for i in v] for k, v in schedule.lanes.items()}


def drop_one(schedule: Schedule, rnd: random.Random) -> tuple[Schedule, Op]:
    """The schedule without one random op, and that op."""
    lanes = lanes_of(schedule)
    key = rnd.choice(sorted(lanes))
    victim = lanes[key].pop(rnd.randrange(len(lanes[key])))
    return schedule.with_lanes(lanes), victim


def duplicate_one(schedule: Schedule, rnd: random.Random) -> Schedule:
    """The schedule with one random op listed a second time, somewhere on its lane."""
    lanes = lanes_of(schedule)
    ops = lanes[rnd.choice(sorted(lanes))]
    ops.insert(rnd.randrange(len(ops) + 1), ops[rnd.randrange(len(ops))])
    return schedule.with_lanes(lanes)


def move_before_dependency(schedule: Schedule, rnd: random.Random, *, tries: int = 200) -> tuple[Schedule, Op] | None:
    """Move an op ahead of an op on its own lane that it needs, directly or through other ranks.

    Looks at up to ``tries`` random ops; None when none of them has such a dependency.
    """
    data = nx.DiGraph(schedule.deps)
    pos = {i: (key, k) for key, order in schedule.lanes.items() for k, i in enumerate(order)}
    for v in rnd.sample(range(len(schedule.ops)), min(tries, len(schedule.ops))):
        if v not in data:
            continue
        key, j = pos[v]
        order = schedule.lanes[key]
        anc = nx.ancestors(data, v)
        earlier = [k for k in range(j) if order[k] in anc]
        if earlier:
            lanes = lanes_of(schedule)
            lanes[key].insert(rnd.choice(earlier), lanes[key].pop(j))
            return schedule.with_lanes(lanes), schedule.ops[v]
    return None
