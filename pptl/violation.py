"""What a rule reports: a code, one line, the ops it names (:class:`Violation`). A base module,
below the checker and the readers (a reader reports what it could not read the same way)."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any

__all__ = ["Violation"]


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
