"""When the checks and the simulator run on numpy arrays, and the fixed codes they read.

The columns themselves are a schedule's op table (:class:`pptl.optable.OpTable`, built once per
schedule); :class:`Columns` is its view in the codes below, shared by the rules of one check run.

The array paths run from :data:`pptl.deps.VECTOR_MIN_OPS` ops up, as the vector derivation of the
training facts does: below that, numpy's import (about 0.07 s) costs more than the passes save.
When numpy is imported already (a process that has torch loaded, a test run, a library caller),
that cost is paid and they run from :data:`ARRAYS_MIN_OPS_NUMPY_LOADED` ops up: measured
2026-11-26 (Python 3.11, numpy 2, 2 cores) on torch's compute_comms CSVs, ``load_any`` plus every
rule plus the simulator took, objects / arrays: 573-768 ops 3.9-4.5 / 4.7-5.4 ms; 2,109-3,328 ops
13.1-17.6 / 12.1-15.3 ms; 4,857-6,656 ops 28.7-33.0 / 22.6-26.1 ms (reading the file on arrays
alone wins from about 700 ops). Each array path has a plain-Python twin; tests run both on the
same schedules.
"""
from __future__ import annotations

import sys
from dataclasses import dataclass
from itertools import chain
from typing import TYPE_CHECKING, Any, Sequence

from pptl.deps import VECTOR_MIN_OPS

if TYPE_CHECKING:
    from pptl.ir import Schedule
    from pptl.optable import OpTable

__all__ = ["ARRAYS_MIN_OPS_NUMPY_LOADED", "Columns", "KIND_CODE", "LANE_CODE", "FLOW_CODE", "use_arrays",
           "table_if_arrays", "edge_arrays"]

#: Kind codes (0: any other kind). The same numbering as :mod:`pptl._deps_np`.
KIND_CODE = {"F": 1, "B": 2, "I": 3, "W": 4, "FB": 5, "SEND": 6, "RECV": 7}
#: Lane codes (3: any other lane).
LANE_CODE = {"compute": 0, "send": 1, "recv": 2}
#: Flow codes (3: any other flow).
FLOW_CODE = {"": 0, "F": 1, "B": 2}

#: The array paths' threshold once numpy is imported (see the module docstring).
ARRAYS_MIN_OPS_NUMPY_LOADED = 2_000

#: Forced path for tests: None decides by size, True/False force arrays or plain Python.
FORCE: bool | None = None


def use_arrays(n: int) -> bool:
    """Whether passes over ``n`` ops run on numpy arrays (see the module docstring)."""
    if FORCE is not None:
        return FORCE
    return n >= (ARRAYS_MIN_OPS_NUMPY_LOADED if "numpy" in sys.modules else VECTOR_MIN_OPS)


@dataclass(frozen=True, slots=True)
class Columns:
    """One array per op field that the array passes read, indexed like ``schedule.ops``."""

    kind: Any
    """int8 :data:`KIND_CODE` of each op."""
    rank: Any
    lane: Any
    """int8 :data:`LANE_CODE` of each op."""
    stage: Any
    mb: Any
    direction: Any
    peer: Any
    flow: Any
    """int8 :data:`FLOW_CODE` of each op."""

    @property
    def n(self) -> int:
        return int(self.kind.size)


def table_if_arrays(schedule: Schedule) -> OpTable | None:
    """The schedule's :class:`~pptl.optable.OpTable` when its passes run on arrays
    (:func:`use_arrays`) and it has one already (made from a table, or the checker built it), else
    None: building a table for a pass alone costs more than the pass's loop."""
    return schedule.built_table() if use_arrays(schedule.n_ops) else None


def edge_arrays(edges: Sequence[tuple[int, int]]) -> tuple[Any, Any]:
    """(producers, consumers) of a list of index pairs, as two int64 arrays."""
    import numpy as np

    flat = np.fromiter(chain.from_iterable(edges), dtype=np.int64, count=2 * len(edges))
    return flat[0::2], flat[1::2]
