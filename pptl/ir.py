"""The schedule model: operations on lanes, in order, tied by dependencies.

Vocabulary (used the same way everywhere in pptl):

- **rank**: one device / process.
- **lane**: one serial resource on one rank (``compute``, ``send``, ``recv``, ``comm``, ``d2h``,
  ``h2d``, ...). Ops on a lane run in their listed order, one at a time; lanes of one rank run
  concurrently.
- **stage**: a virtual pipeline stage, numbered along the data flow of its *direction*. Stage ``s``
  of direction ``d`` feeds stage ``s + 1`` of the same direction.
- **chunk**: which of a rank's model chunks holds the stage (``0 .. vpp - 1``).
- **mb**: the micro-batch index (within its direction).
- **bucket**, **half**: a weight update's work item (a bucket of weights, in broadcast order) and
  the IPC buffer half it goes through; the training families leave both at -1.
- **direction**: ``0`` for the usual flow; DualPipe runs a second flow (``1``) that enters at the
  last rank. Stage numbers of direction 1 count along *its* flow.

The order of ops on a lane is the *choice* a schedule makes; the dependencies are the *facts* of
the model (see :mod:`pptl.deps`).
"""
from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any, Iterable

from pptl.deps import training_deps
from pptl.op import COMM_KINDS, COMPUTE_KINDS, Op
from pptl.optable import OpTable, edge_arrays

if TYPE_CHECKING:
    from pptl.config import Config

__all__ = [
    "COMPUTE_KINDS",
    "COMM_KINDS",
    "Op",
    "Schedule",
    "ScheduleBuilder",
    "table_of",
]

@dataclass
class Schedule:
    """A planned schedule: ops in order on each (rank, lane), plus dependencies.

    ``ops`` is the flat list; ``lanes`` maps (rank, lane) to indices into ``ops`` in run order.
    ``deps`` are (producer index, consumer index) pairs: the data facts, not the lane order.
    """

    family: str
    pp: int
    """Number of ranks."""
    num_stages: int
    """Stages per direction."""
    microbatches: int
    """Micro-batches per direction."""
    ops: list[Op]
    lanes: dict[tuple[int, str], list[int]]
    deps: list[tuple[int, int]] = field(default_factory=list)
    directions: int = 1
    config: Config | None = None
    """The :class:`pptl.config.Config` it came from (``None`` for imported schedules)."""
    meta: dict[str, Any] = field(default_factory=dict)
    """Family extras: placement, parameter copies, notes; plain JSON values only."""

    @classmethod
    def from_table(cls, *, family: str, pp: int, num_stages: int, microbatches: int, table: OpTable,
                   lanes: dict[tuple[int, str], list[int]], dep_arrays: tuple[Any, Any], directions: int = 1,
                   config: Config | None = None, meta: dict[str, Any] | None = None, order_hint: Any = None) -> Schedule:
        """A schedule whose ops are the rows of ``table`` and whose facts are ``dep_arrays``
        (producers, consumers): ``ops`` and ``deps`` are built only when something reads them.

        ``order_hint``: a claimed topological position per op (a plan file's); the checker uses it
        only after verifying that every edge goes forward in it.
        """
        s = cls.__new__(cls)
        s.__dict__.update(family=family, pp=pp, num_stages=num_stages, microbatches=microbatches, lanes=lanes,
                          directions=directions, config=config, meta=dict(meta or {}), _table=table, _table_ops=None,
                          _dep_arrays=dep_arrays, _deps_list=None, _order_hint=order_hint)
        return s

    def __getattr__(self, name: str) -> Any:
        # Reached only when normal lookup fails: the ops or facts of a schedule made from a table.
        d = self.__dict__
        if name == "ops" and "_table" in d:
            ops = d["_table"].ops()
            d["ops"] = d["_table_ops"] = ops
            return ops
        if name == "deps" and "_dep_arrays" in d:
            u, v = d["_dep_arrays"]
            deps = list(zip(u.tolist(), v.tolist()))
            d["deps"] = d["_deps_list"] = deps
            return deps
        raise AttributeError(f"'Schedule' object has no attribute '{name}'")

    @property
    def n_ops(self) -> int:
        """``len(self.ops)``, without building the ops of a schedule made from a table."""
        d = self.__dict__
        ops = d.get("ops")
        return len(ops) if ops is not None else int(d["_table"].n)

    def attach_table(self, table: OpTable, ops: list[Op]) -> None:
        """Keep ``table`` as the columns of ``ops`` (what :func:`table_of` built)."""
        self.__dict__.update(_table=table, _table_ops=ops)

    def built_table(self) -> OpTable | None:
        """The ops as columns (:class:`pptl.optable.OpTable`) if the schedule was made from a table
        or :func:`table_of` built one for its current ``ops``, else None."""
        d = self.__dict__
        t: OpTable | None = d.get("_table")
        ops: list[Op] | None = d.get("ops")
        if t is None or ops is None:
            return t  # made from the table, ops not built yet (or no table at all)
        return t if len(ops) == t.n and ops is d.get("_table_ops") else None

    def has_ops(self) -> bool:
        """Whether ``ops`` exists as objects (false for a table-made schedule nothing has read yet)."""
        return "ops" in self.__dict__

    def dep_arrays(self) -> tuple[Any, Any]:
        """``deps`` as (producers, consumers) int64 arrays (kept while ``deps`` is the same list)."""
        d = self.__dict__
        arrs = d.get("_dep_arrays")
        deps = d.get("deps")
        if arrs is not None and (deps is None or deps is d.get("_deps_list")):
            return arrs  # type: ignore[no-any-return]
        deps = self.deps
        arrs = edge_arrays(deps)
        d["_dep_arrays"], d["_deps_list"] = arrs, deps
        return arrs

    def order_hint(self) -> Any:
        """A plan file's claimed topological position per op, or None (unverified: see :meth:`from_table`)."""
        return self.__dict__.get("_order_hint")

    def copy_with(self, **changes: Any) -> Schedule:
        """``dataclasses.replace`` that keeps a table-made schedule's table, facts and order hint
        when neither the ops, the lanes nor the facts change."""
        d = self.__dict__
        if "_table" in d and "ops" not in d and not ({"ops", "lanes", "deps"} & changes.keys()):
            fields = {k: d[k] for k in ("family", "pp", "num_stages", "microbatches", "lanes", "directions",
                                        "config", "meta")}
            fields.update(changes)
            return Schedule.from_table(table=d["_table"], dep_arrays=self.dep_arrays(),
                                       order_hint=d.get("_order_hint"), **fields)
        return replace(self, **changes)

    def lane_ops(self, rank: int, lane: str) -> list[Op]:
        return [self.ops[i] for i in self.lanes.get((rank, lane), [])]

    def rank_lanes(self, rank: int) -> list[str]:
        return [lane for (r, lane) in self.lanes if r == rank]

    def index(self) -> dict[str, int]:
        """Op id -> index (first occurrence; duplicates are the checker's business)."""
        out: dict[str, int] = {}
        for i, op in enumerate(self.ops):
            out.setdefault(op.id, i)
        return out

    def with_lanes(self, lanes: dict[tuple[int, str], list[Op]]) -> "Schedule":
        """A copy whose lane orders are replaced (used by tests and mutation)."""
        return ScheduleBuilder.from_lanes(self, lanes)


def table_of(schedule: Schedule) -> OpTable:
    """The schedule's op table: the one it was made from, else built from its ops once (and kept
    while ``schedule.ops`` is the same list)."""
    t = schedule.built_table()
    if t is None:
        ops = schedule.ops
        t = OpTable.from_ops(ops)
        schedule.attach_table(t, ops)
    return t


class ScheduleBuilder:
    """Appends ops lane by lane and produces a :class:`Schedule`."""

    def __init__(self) -> None:
        self.ops: list[Op] = []
        self.lanes: dict[tuple[int, str], list[int]] = {}

    def add(self, op: Op) -> int:
        idx = len(self.ops)
        self.ops.append(op)
        self.lanes.setdefault((op.rank, op.lane), []).append(idx)
        return idx

    def extend(self, ops: Iterable[Op]) -> None:
        # add() written out: families build every op of a plan through here.
        out = self.ops
        lanes = self.lanes
        for op in ops:
            key = (op.rank, op.lane)
            order = lanes.get(key)
            if order is None:
                order = lanes[key] = []
            order.append(len(out))
            out.append(op)

    @staticmethod
    def from_lanes(template: Schedule, lanes: dict[tuple[int, str], list[Op]]) -> Schedule:
        b = ScheduleBuilder()
        for key in sorted(lanes):
            for op in lanes[key]:
                b.add(op)
        # Keep the template's non-derived facts (family extras) for ops that survive; the
        # training facts are derived again, since the point of a new order is to test them.
        where = {op: i for i, op in enumerate(b.ops)}
        kept = [
            (where[template.ops[i]], where[template.ops[j]])
            for i, j in template.deps
            if template.ops[i] in where and template.ops[j] in where
        ]
        deps = sorted(set(training_deps(b.ops, template.num_stages)) | set(kept))
        return replace(template, ops=b.ops, lanes=b.lanes, deps=deps)
