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
    "Facts",
]

class Facts:
    """The data facts of a schedule as (producer, consumer) int64 arrays; the list of pairs that
    ``Schedule.deps`` reads is built from them on first use."""

    __slots__ = ("u", "v", "_pairs")

    def __init__(self, u: Any, v: Any, pairs: list[tuple[int, int]] | None = None) -> None:
        self.u, self.v, self._pairs = u, v, pairs

    @property
    def pairs(self) -> list[tuple[int, int]]:
        if self._pairs is None:
            self._pairs = list(zip(self.u.tolist(), self.v.tolist()))
        return self._pairs


@dataclass
class Schedule:
    """A planned schedule: ops in order on each (rank, lane), plus dependencies.

    Its ops are one :class:`pptl.optable.OpTable` (``table``) at every size, and its facts one
    pair of arrays (``facts``). ``ops`` (the ``Op`` of every row) and ``deps`` ((producer index,
    consumer index) pairs: the data facts, not the lane order) are views built on first read,
    for messages, hover text, tests and the executor. ``lanes`` maps (rank, lane) to op indices
    in run order.

    Made from ``ops`` (and ``deps``), the table (and facts) are built from them; made from a
    ``table`` and ``facts``, nothing else is built until read.
    """

    family: str
    pp: int
    """Number of ranks."""
    num_stages: int
    """Stages per direction."""
    microbatches: int
    """Micro-batches per direction."""
    ops: list[Op] = None  # type: ignore[assignment]  # a view of ``table`` (the property below)
    lanes: dict[tuple[int, str], list[int]] = field(default_factory=dict)
    deps: list[tuple[int, int]] = None  # type: ignore[assignment]  # a view of ``facts``
    directions: int = 1
    config: Config | None = None
    """The :class:`pptl.config.Config` it came from (``None`` for imported schedules)."""
    meta: dict[str, Any] = field(default_factory=dict)
    """Family extras: placement, parameter copies, notes; plain JSON values only."""
    table: OpTable = field(default=None, repr=False, compare=False)  # type: ignore[assignment]
    """Every op, one column per field: the schedule's storage."""
    facts: Facts = field(default=None, repr=False, compare=False)  # type: ignore[assignment]
    order_hint: Any = field(default=None, repr=False, compare=False)
    """A plan file's claimed topological position per op, or None; never trusted: the checker
    uses it only after verifying that every edge goes forward in it (:func:`pptl.dag.verified_order`)."""

    def __post_init__(self) -> None:
        d = self.__dict__
        ops, deps = d.pop("_given_ops", None), d.pop("_given_deps", None)
        # Ops or facts handed in beside a table are the table's own views (a copy made with
        # dataclasses.replace) unless they are other lists: then they are the new storage.
        if self.table is None or (ops is not None and ops is not self.table.built_ops()):
            self.table = OpTable.from_ops(ops if isinstance(ops, list) else list(ops or ()))
        if self.facts is None or (deps is not None and deps is not self.facts._pairs):
            pairs = list(deps or ())
            self.facts = Facts(*edge_arrays(pairs), pairs)

    @property
    def chunks_per_rank(self) -> int:
        """Virtual stages per rank as built: the config's vpp, or more where a family places several
        stages on a rank whatever vpp says (zbv and dualpipev: 2). Every title and header says this."""
        cfg = self.config
        return max(getattr(cfg, "vpp", 1) if cfg is not None else 1, self.num_stages // max(1, self.pp))

    @property
    def n_ops(self) -> int:
        """``len(self.ops)``, without building the ops."""
        return self.table.n

    def has_ops(self) -> bool:
        """Whether ``ops`` exists as objects (false for a table-made schedule nothing has read yet)."""
        return self.table.built_ops() is not None

    def dep_arrays(self) -> tuple[Any, Any]:
        """The facts as (producers, consumers) int64 arrays."""
        return self.facts.u, self.facts.v

    def copy_with(self, **changes: Any) -> Schedule:
        """``dataclasses.replace`` without building the ops or facts it keeps (and without the
        order hint once the ops, the lanes or the facts change)."""
        kept = {"family": self.family, "pp": self.pp, "num_stages": self.num_stages, "microbatches": self.microbatches,
                "lanes": self.lanes, "directions": self.directions, "config": self.config, "meta": self.meta,
                "table": self.table, "facts": self.facts,
                "order_hint": None if {"ops", "lanes", "deps"} & changes.keys() else self.order_hint}
        return Schedule(**{**kept, **changes})

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


def _ops_of(self: Schedule) -> list[Op]:
    return self.table.op_list


def _set_ops(self: Schedule, ops: list[Op] | None) -> None:
    self.__dict__["_given_ops"] = ops  # read once by __post_init__


def _deps_of(self: Schedule) -> list[tuple[int, int]]:
    return self.facts.pairs


def _set_deps(self: Schedule, deps: list[tuple[int, int]] | None) -> None:
    self.__dict__["_given_deps"] = deps


# Set after the dataclass is made: its __init__ and replace() see plain fields, reading them
# builds the views on demand.
Schedule.ops = property(_ops_of, _set_ops)  # type: ignore[assignment]
Schedule.deps = property(_deps_of, _set_deps)  # type: ignore[assignment]


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
        for op in ops:
            self.add(op)

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
