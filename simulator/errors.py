"""Errors a user can act on.

Every bad input the product sees (a scenario field, a trace row, a profile) ends in a
:class:`ScenarioError` that names the field, the value and what is allowed, so the CLI and the UI
can print one line and exit with status 2 instead of a traceback.
"""
from __future__ import annotations

from typing import Any


class ScenarioError(ValueError):
    """A scenario, profile or trace that cannot be simulated.

    Args:
        field: dotted path of the offending field (``workload.arrival.rate_per_s``), or a file
            path and row for trace problems.
        value: the value that was given.
        message: what is wrong and what is allowed.
    """

    def __init__(self, field: str, value: Any, message: str) -> None:
        self.field = field
        self.value = value
        self.message = message
        super().__init__(f"{field} = {_short(value)}: {message}")

    def __reduce__(self) -> tuple[Any, ...]:
        # Rebuilt from its three parts: an error raised in a planner worker process reaches the parent
        # whole (the default pickling passes only the joined text, and the pool broke on it).
        return type(self), (self.field, self.value, self.message)


def _short(value: Any, limit: int = 160) -> str:
    """``repr(value)``, shortened in the middle so that both ends (a path's file name) survive."""
    text = repr(value.item() if hasattr(value, "item") else value)
    if len(text) <= limit:
        return text
    keep = (limit - 3) // 2
    return text[:keep] + "..." + text[-keep:]
