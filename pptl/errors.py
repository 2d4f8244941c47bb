"""Typed errors. ``cli.py`` catches :class:`PptlError` in one place and exits with its code.

Raising is for misuse and unreadable input; an invalid schedule is reported by the checker as
violations, never raised (compare ``networkx/exception.py``: misuse vs. no answer).
"""
from __future__ import annotations

__all__ = ["PptlError", "InputError", "InvalidScheduleError", "RunError"]


class PptlError(Exception):
    """Base of every error pptl reports to a user as one line."""

    exit_code = 2


class InputError(PptlError):
    """Bad input or usage: an unreadable file, a bad field, a bad flag (exit 2)."""

    exit_code = 2


class InvalidScheduleError(PptlError):
    """The schedule cannot be planned or simulated as given (exit 1)."""

    exit_code = 1


class RunError(PptlError):
    """A run on GPUs or CPUs failed (exit 1)."""

    exit_code = 1
