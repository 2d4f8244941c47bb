"""What every check rule shares: the violation it reports, the context it reads, the rule record.

The rule modules import this module, and :mod:`pptl.checks` imports them; so nothing here may
import a rule module (that is what keeps the package free of import cycles).
"""
from __future__ import annotations

from dataclasses import dataclass, field
from functools import cached_property
from typing import TYPE_CHECKING, Any, Callable, TypeVar, cast

from pptl.dag import Successors, build_dag, kahn_order, successors, verified_order
from pptl.ir import Schedule
from pptl.optable import OpTable
from pptl.violation import Violation

if TYPE_CHECKING:
    import networkx as nx

    from pptl.checks.work_arrays import LaneArrays, WorkArrays
    from pptl.config import Costs
    from pptl.simulate import Simulation

__all__ = ["Violation", "Context", "Rule", "P2P_MODES"]

T = TypeVar("T")

P2P_MODES = ("nonblocking", "nccl", "blocking")

@dataclass
class Context:
    """What rules read. The graph, topological order and simulation are built once, on demand.

    ``successors`` (flat lists) serves the order and the simulator; ``dag`` (networkx) is built
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
    def dag(self) -> nx.DiGraph:
        return build_dag(self.schedule)

    @cached_property
    def order(self) -> list[int] | None:
        """A topological order, or None when the DAG has a cycle (a plan file's order, once
        verified edge by edge, saves the walk: :func:`pptl.dag.verified_order`)."""
        hint = self.schedule.order_hint
        if hint is not None:
            order = verified_order(self.schedule, hint)
            if order is not None:
                return order
        return kahn_order(self.successors)

    @cached_property
    def successors(self) -> Successors:
        """The graph as flat successor lists (:func:`pptl.dag.successors`): what the order and the
        simulator walk."""
        return successors(self.schedule)

    @cached_property
    def simulation(self) -> Simulation:
        from pptl.simulate import simulate

        return simulate(self.schedule, self.costs, dag=self.successors, order=self.order)

    @cached_property
    def kinds(self) -> frozenset[str]:
        """The op kinds present (family rules return at once when theirs are absent)."""
        return self.table.kinds()

    @cached_property
    def n(self) -> int:
        """The number of ops (without building them)."""
        return self.schedule.n_ops

    @cached_property
    def table(self) -> OpTable:
        """The ops as columns: what every rule reads. ``schedule.ops`` is built only when a rule
        has something to report (a table-made schedule has no ``Op`` objects until then)."""
        return self.schedule.table

    @cached_property
    def work_arrays(self) -> WorkArrays:
        """The work every op does (:mod:`pptl.checks.work_arrays`), shared by the rules that index it."""
        from pptl.checks.work_arrays import work_arrays

        return work_arrays(self.table)

    @cached_property
    def lane_arrays(self) -> LaneArrays:
        """Every lane entry as arrays (:func:`pptl.checks.work_arrays.lane_arrays`)."""
        from pptl.checks.work_arrays import lane_arrays

        return lane_arrays(self.schedule)

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
