"""What files written before an op's weight-update bucket and IPC half had fields of their own meant.

Plan files of versions 1 and 2, and timeline files written before 2026-11-26, stored a weight
update's bucket in ``mb`` and its IPC buffer half in ``sub``. Their readers move those values into
``bucket`` and ``half`` for the kinds below, so that ``mb`` only ever means a micro-batch and
``sub`` a MoE layer. The kinds are the weight-update family's as of those files: a fixed fact of
the old formats, deliberately not read from the family's record (which may grow).
"""
from __future__ import annotations

import re

__all__ = ["BUCKET_KINDS", "bucket_fields", "bucket_id"]

BUCKET_KINDS = frozenset({"H2D", "COPY", "BCAST", "RELOAD"})


def bucket_fields(kind: str, mb: int, sub: int) -> tuple[int, int, int, int]:
    """``(mb, sub, bucket, half)`` of an op an older file stored with ``mb`` and ``sub``."""
    if kind in BUCKET_KINDS:
        return -1, -1, mb, sub
    return mb, sub, -1, -1


#: An old weight-update op id: ``r0/ipc/COPY IPC mb3 #1`` (label optional, no half on an H2D into the H2D buffer).
_OLD_ID = re.compile(r"^(r\d+/[^/]+/(?:H2D|COPY|BCAST|RELOAD)(?: .*?)?) mb(\d+)(?: #(\d+))?$")


def bucket_id(op_id: str) -> str:
    """The id a weight-update op of an older file has now (``... mb3 #1`` -> ``... bucket3 half1``);
    any other id unchanged."""
    m = _OLD_ID.match(op_id) if len(op_id) < 1000 else None
    if m is None:
        return op_id
    head, bucket, half = m.groups()
    return f"{head} bucket{bucket}" + (f" half{half}" if half is not None else "")
