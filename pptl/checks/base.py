"""What every check rule shares: the violation it reports, the context it reads, the rule record.

The rule modules import this module, and :mod:`pptl.checks` imports them; so nothing here may
import a rule module (that is what keeps the package free of import cycles).
"""
from __future__ import annotations

from dataclasses import dataclass, field
from functools import cached_property
from typing import TYPE_CHECKING, Any, Callable, TypeVar, cast

from pptl.columns import Columns, use_arrays
from pptl.dag import Adjacency, Successors, adjacency, build_dag, kahn_order, successors, topological_order
from pptl.ir import Schedule
from pptl.messages import message_key

if TYPE_CHECKING:
    import networkx as nx

    from pptl.checks._keyed import LaneArrays
    from pptl.checks.work_arrays import WorkArrays
    from pptl.config import Costs
    from pptl.optable import OpTable
    from pptl.simulate import Simulation

__all__ = ["Violation", "Context", "Rule", "WorkIndex", "P2P_MODES"]

T = TypeVar("T")

P2P_MODES = ("nonblocking", "nccl", "blocking")

#: (role, direction, stage, mb): a unit of work (see :mod:`pptl.deps`).
WorkKey = tuple[str, int, int, int]


@dataclass(frozen=True, slots=True)
class Violation:
    code: str
    message: str
    ops: tuple[str, ...] = ()
    severity: str = "error"
    """"error" (the schedule is invalid) or "warning" (a formula's assumption fails, etc.)."""
    line: int | None = None
    """Line of the source file the violation points at (set by readers that know it, e.g. CSV)."""

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {"code": self.code, "severity": self.severity, "message": self.message, "ops": list(self.ops)}
        if self.line is not None:
            out["line"] = self.line
        return out


@dataclass
class Context:
    """What rules read. The graph, topological order and simulation are built once, on demand.

    ``adjacency`` (plain lists) serves the order and the simulator; ``dag`` (networkx) is built
    only for a rule that asks for it, which on an acyclic plan none does.
    """

    schedule: Schedule
    memory_limit: float | None = None
    p2p: str = "nccl"
    costs: Costs | None = None
    """The cost model the simulation uses; None: the schedule's config's (or the defaults)."""
    _once: dict[Callable[[Context], Any], Any] = field(default_factory=dict, init=False, repr=False, compare=False)

    def once(self, fn: Callable[[Context], T]) -> T:
        """``fn(self)``, computed once per context: what several rules read (a rule module's own
        index) is built by the first that asks, without this module knowing the rule modules."""
        if fn not in self._once:
            self._once[fn] = fn(self)
        return cast(T, self._once[fn])

    @cached_property
    def adjacency(self) -> Adjacency:
        return adjacency(self.schedule)

    @cached_property
    def dag(self) -> nx.DiGraph:
        return build_dag(self.schedule)

    @cached_property
    def order(self) -> list[int] | None:
        """A topological order, or None when the DAG has a cycle (a plan file's order, once
        verified edge by edge, saves the walk: :func:`pptl.optable.verified_order`)."""
        hint = self.schedule.order_hint()
        if hint is not None:
            from pptl.optable import verified_order

            order = verified_order(self.schedule, hint)
            if order is not None:
                return order
        if self.table is not None:
            return kahn_order(self.successors)
        return topological_order(self.adjacency)

    @cached_property
    def successors(self) -> Successors:
        """The graph as flat successor lists (:func:`pptl.dag.successors`): what the order and the
        simulator walk on large plans, where per-op adjacency lists cost more than the walk."""
        return successors(self.schedule)

    @cached_property
    def simulation(self) -> Simulation:
        from pptl.simulate import simulate

        built = self.__dict__
        dag = built.get("successors") or built.get("adjacency") or (self.successors if self.table is not None
                                                                      else self.adjacency)
        return simulate(self.schedule, self.costs, dag=dag, order=self.order)

    @cached_property
    def kinds(self) -> frozenset[str]:
        """The op kinds present (family rules return at once when theirs are absent)."""
        if self.table is not None:
            return self.table.kinds()
        return frozenset(op.kind for op in self.schedule.ops)

    @cached_property
    def n(self) -> int:
        """The number of ops (without building them)."""
        return self.schedule.n_ops

    @cached_property
    def table(self) -> OpTable | None:
        """The ops as columns when the rules run on arrays (:func:`pptl.columns.use_arrays`), else None.

        A rule's array path returns what its plain path would; ``schedule.ops`` is built only when a
        rule has something to report (a table-made schedule has no ``Op`` objects until then).
        """
        if not use_arrays(self.n):
            return None
        from pptl.optable import table_of  # numpy: only for schedules the array paths serve

        try:
            return table_of(self.schedule)
        except (OverflowError, TypeError, ValueError):  # an index wider than int64: the plain paths
            return None

    @cached_property
    def work_arrays(self) -> WorkArrays:
        """:attr:`work` as arrays (:mod:`pptl.checks.work_arrays`), for the array paths (those that
        run where :attr:`table` is not None).

        Raises:
            ValueError: the rules run on objects here (misuse: read :attr:`work` instead).
        """
        if self.table is None:
            raise ValueError("Context.work_arrays is for the array paths; this context has no table")
        from pptl.checks.work_arrays import work_arrays

        return work_arrays(self.table)

    @cached_property
    def lane_arrays(self) -> LaneArrays:
        """Every lane entry as arrays (:func:`pptl.checks._keyed.lane_arrays`), for the array paths."""
        from pptl.checks._keyed import lane_arrays

        return lane_arrays(self.schedule)

    @cached_property
    def columns(self) -> Columns | None:
        """:attr:`table` in the fixed codes of :mod:`pptl.columns` (None when rules run on objects)."""
        return self.table.columns if self.table is not None else None

    @cached_property
    def work(self) -> WorkIndex:
        return WorkIndex.of(self.schedule)

    @cached_property
    def ids(self) -> list[str]:
        return [op.id for op in self.schedule.ops]


@dataclass(frozen=True)
class Rule:
    code: str
    name: str
    fn: Callable[[Context], list[Violation]]
    needs_acyclic: bool = False
    """Skip when the DAG has a cycle (the deadlock rule has reported it)."""




@dataclass(frozen=True, slots=True)
class WorkIndex:
    """The work every op does, indexed in one pass for the rules that read it (PP002-PP006, PP008).

    Notes:
        O(ops). Rules used to walk the ops and call :func:`pptl.deps.roles` each; at 400k ops that
        was most of ``pptl check``'s time.
    """

    items: list[tuple[int, str, int, int, int]]
    """(op index, role, direction, stage, mb) for every unit of work, in op order."""
    producer: dict[WorkKey, int]
    """The first op doing each unit of work."""
    repeated: bool
    """Whether any unit of work is done by two ops (then some rules take their exact, slower path)."""
    comm: dict[tuple[str, str, int, int, int], int]
    """The first SEND or RECV of each (kind, *:func:`pptl.messages.message_key`): a SEND and its
    RECV differ only in the kind."""
    comm_repeated: bool = True
    """Whether two SENDs or RECVs share a key of ``comm`` (if not, no two of them are the same op)."""

    @staticmethod
    def of(schedule: Schedule) -> WorkIndex:
        items: list[tuple[int, str, int, int, int]] = []
        add = items.append
        comm: dict[tuple[str, str, int, int, int], int] = {}
        ncomm = 0
        for i, op in enumerate(schedule.ops):
            k = op.kind
            if k == "F":
                add((i, "F", op.direction, op.stage, op.mb))
            elif k == "B":
                add((i, "G", op.direction, op.stage, op.mb))
                add((i, "W", op.direction, op.stage, op.mb))
            elif k == "I":
                add((i, "G", op.direction, op.stage, op.mb))
            elif k == "W":
                add((i, "W", op.direction, op.stage, op.mb))
            elif k == "SEND" or k == "RECV":
                comm.setdefault((k, *message_key(op)), i)
                ncomm += 1
            elif k == "FB" and op.pair is not None:
                add((i, "F", op.direction, op.stage, op.mb))
                ps, pm, pd = op.pair
                add((i, "G", pd, ps, pm))
                add((i, "W", pd, ps, pm))
        producer: dict[WorkKey, int] = {}
        for i, role, d, st, mb in reversed(items):
            producer[(role, d, st, mb)] = i  # reversed: the first op wins
        return WorkIndex(items, producer, len(producer) != len(items), comm, ncomm != len(comm))
