"""Test helper: a copy of a schedule made from its op table (no ``Op`` objects until read)."""
from __future__ import annotations

from pptl.ir import Facts, Schedule
from pptl.optable import OpTable, edge_arrays


def table_made(s: Schedule) -> Schedule:
    """``s`` made from a copy of its table and facts: same ops, lanes, facts, config and meta;
    ``has_ops()`` is False until something reads ``ops``."""
    return Schedule(s.family, s.pp, s.num_stages, s.microbatches, lanes={k: list(v) for k, v in s.lanes.items()},
                    directions=s.directions, config=s.config, meta=s.meta,
                    table=OpTable(**{f: getattr(s.table, f) for f in OpTable.__dataclass_fields__}),
                    facts=Facts(*edge_arrays(s.deps)))
