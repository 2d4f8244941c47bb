"""Test helper: a copy of a schedule made from its op table (no ``Op`` objects until read)."""
from __future__ import annotations

from pptl.ir import Schedule
from pptl.optable import OpTable, edge_arrays


def table_made(s: Schedule) -> Schedule:
    """``s`` as :meth:`Schedule.from_table` makes it: same ops, lanes, facts, config and meta;
    ``has_ops()`` is False until something reads ``ops``."""
    return Schedule.from_table(family=s.family, pp=s.pp, num_stages=s.num_stages, microbatches=s.microbatches,
                               table=OpTable.from_ops(s.ops), lanes={k: list(v) for k, v in s.lanes.items()},
                               dep_arrays=edge_arrays(s.deps), directions=s.directions, config=s.config,
                               meta=s.meta)
