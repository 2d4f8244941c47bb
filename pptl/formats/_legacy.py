"""What files written before an op's weight-update bucket and IPC half had fields of their own meant.

Plan files of versions 1 and 2, and timeline files written before 2026-11-26, stored a weight
update's bucket in ``mb`` and its IPC buffer half in ``sub``. Their readers move those values into
``bucket`` and ``half`` for the kinds below, so that ``mb`` only ever means a micro-batch and
``sub`` a MoE layer. The kinds are the weight-update family's as of those files: a fixed fact of
the old formats, deliberately not read from the family's record (which may grow).
"""
from __future__ import annotations

__all__ = ["BUCKET_KINDS", "bucket_fields"]

BUCKET_KINDS = frozenset({"H2D", "COPY", "BCAST", "RELOAD"})


def bucket_fields(kind: str, mb: int, sub: int) -> tuple[int, int, int, int]:
    """``(mb, sub, bucket, half)`` of an op an older file stored with ``mb`` and ``sub``."""
    if kind in BUCKET_KINDS:
        return -1, -1, mb, sub
    return mb, sub, -1, -1
