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

if TYPE_CHECKING:
    from pptl.config import Config
    from pptl.optable import OpTable

__all__ = [
    "COMPUTE_KINDS",
    "COMM_KINDS",
    "Op",
    "Schedule",
    "ScheduleBuilder",
]

#: Kinds of the training families. ``FB`` is one op that runs F of one micro-batch and B of
#: another at once; its ``pair`` names the B half.
COMPUTE_KINDS = frozenset({"F", "B", "I", "W", "FB"})
COMM_KINDS = frozenset({"SEND", "RECV"})


@dataclass(frozen=True, slots=True)
class Op:
    """One unit of work on one lane of one rank.

    Fields that do not apply to a kind keep their default (``-1`` or empty).
    """

    kind: str
    """Op kind: F, B, I, W, FB, SEND, RECV, or one a family or a file format declares
    (:func:`pptl.kinds.known_kinds`)."""
    rank: int
    """The rank that runs the op."""
    lane: str
    """The serial resource on that rank."""
    stage: int = -1
    """Virtual stage index along the op's direction (for FB: the F half's stage)."""
    mb: int = -1
    """Micro-batch index (for FB: the F half's micro-batch)."""
    direction: int = 0
    """0, or 1 for the reverse flow of DualPipe."""
    chunk: int = -1
    """Which model chunk of the rank holds ``stage``."""
    pair: tuple[int, int, int] | None = None
    """FB: (stage, mb, direction) of the B half. On an F of a family that overlaps passes without
    FB ops (moe-1f1b-overlap): the backward this forward runs alongside (no training fact)."""
    peer: int = -1
    """SEND/RECV and broadcasts: the other rank (for BCAST, the source)."""
    flow: str = ""
    """SEND/RECV: what is carried, "F" (activations) or "B" (gradients)."""
    sub: int = -1
    """Layer of a MoE step (within its stage)."""
    label: str = ""
    """A family's display name for the op (``Attn``, ``EP-D``, ``Offload``...)."""
    payload: float = 0.0
    """Bytes moved, for communication and copies."""
    cost: str = ""
    """Cost key; empty means the kind."""
    bucket: int = -1
    """Weight update: the bucket's position in the broadcast order."""
    half: int = -1
    """Weight update: the IPC buffer half the op writes or reads (-1: none, such as an H2D into
    the H2D buffer)."""

    @property
    def id(self) -> str:
        """A stable, human-readable id, e.g. ``r0/compute/F s3 mb5``."""
        parts = [f"r{self.rank}/{self.lane}/{self.kind}"]
        if self.flow:
            parts[0] += f"_{self.flow}"
        if self.label:
            parts.append(self.label)
        if self.stage >= 0:
            parts.append(f"s{self.stage}")
        if self.mb >= 0:
            parts.append(f"mb{self.mb}")
        if self.direction:
            parts.append(f"d{self.direction}")
        if self.sub >= 0:
            parts.append(f"#{self.sub}")
        if self.bucket >= 0:
            parts.append(f"bucket{self.bucket}")
        if self.half >= 0:
            parts.append(f"half{self.half}")
        if self.pair is not None:
            ps, pm, pd = self.pair
            parts.append(f"+B s{ps} mb{pm}" + (f" d{pd}" if pd else ""))
        if self.peer >= 0 and self.kind in COMM_KINDS:
            parts.append(("->" if self.kind == "SEND" else "<-") + f"r{self.peer}")
        return " ".join(parts)

    @property
    def cost_key(self) -> str:
        return self.cost or self.kind

    def to_dict(self) -> dict[str, Any]:
        """Only the fields that differ from their defaults (keeps plan files small)."""
        out: dict[str, Any] = {"kind": self.kind, "rank": self.rank, "lane": self.lane}
        for name, default in _OPTIONAL_DEFAULTS.items():
            value = getattr(self, name)
            if value != default:
                out[name] = list(value) if name == "pair" else value
        return out


def _op_init(self: Op, kind: str, rank: int, lane: str, stage: int = -1, mb: int = -1, direction: int = 0,
             chunk: int = -1, pair: tuple[int, int, int] | None = None, peer: int = -1, flow: str = "",
             sub: int = -1, label: str = "", payload: float = 0.0, cost: str = "", bucket: int = -1,
             half: int = -1) -> None:
    # The generated __init__ of a frozen dataclass goes through object.__setattr__ once per field,
    # which made building a 400k-op plan spend most of its time here; the slot descriptors' own
    # setters do the same work about twice as fast. Same signature and defaults; still frozen.
    _S_KIND(self, kind)
    _S_RANK(self, rank)
    _S_LANE(self, lane)
    _S_STAGE(self, stage)
    _S_MB(self, mb)
    _S_DIRECTION(self, direction)
    _S_CHUNK(self, chunk)
    _S_PAIR(self, pair)
    _S_PEER(self, peer)
    _S_FLOW(self, flow)
    _S_SUB(self, sub)
    _S_LABEL(self, label)
    _S_PAYLOAD(self, payload)
    _S_COST(self, cost)
    _S_BUCKET(self, bucket)
    _S_HALF(self, half)


(_S_KIND, _S_RANK, _S_LANE, _S_STAGE, _S_MB, _S_DIRECTION, _S_CHUNK, _S_PAIR, _S_PEER, _S_FLOW, _S_SUB, _S_LABEL,
 _S_PAYLOAD, _S_COST, _S_BUCKET, _S_HALF) = (Op.__dict__[name].__set__ for name in Op.__slots__)
assert Op.__slots__ == ("kind", "rank", "lane", "stage", "mb", "direction", "chunk", "pair", "peer", "flow", "sub",
                        "label", "payload", "cost", "bucket", "half"), "keep _op_init in step with Op's fields"
_op_init.__qualname__ = "Op.__init__"
Op.__init__ = _op_init  # type: ignore[method-assign]

_OPTIONAL_DEFAULTS: dict[str, Any] = {
    "stage": -1, "mb": -1, "direction": 0, "chunk": -1, "pair": None, "peer": -1, "flow": "",
    "sub": -1, "label": "", "payload": 0.0, "cost": "", "bucket": -1, "half": -1,
}


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
    def chunks_per_rank(self) -> int:
        """Virtual stages per rank as built: the config's vpp, or more where a family places several
        stages on a rank whatever vpp says (zbv and dualpipev: 2). Every title and header says this."""
        cfg = self.config
        return max(getattr(cfg, "vpp", 1) if cfg is not None else 1, self.num_stages // max(1, self.pp))

    @property
    def n_ops(self) -> int:
        """``len(self.ops)``, without building the ops of a schedule made from a table."""
        d = self.__dict__
        ops = d.get("ops")
        return len(ops) if ops is not None else int(d["_table"].n)

    def attach_table(self, table: OpTable, ops: list[Op]) -> None:
        """Keep ``table`` as the columns of ``ops`` (what :func:`pptl.optable.table_of` built)."""
        self.__dict__.update(_table=table, _table_ops=ops)

    def built_table(self) -> OpTable | None:
        """The ops as columns (:class:`pptl.optable.OpTable`) if the schedule was made from a table
        or :func:`pptl.optable.table_of` built one for its current ``ops``, else None."""
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
        from pptl.columns import edge_arrays

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
        from pptl.deps import training_deps  # local: deps imports ir

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
