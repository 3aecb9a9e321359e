"""Errors a user can act on.

Every bad input the product sees (a scenario field, a trace row, a profile) ends in a
:class:`ScenarioError` that names the field, the value and what is allowed, so the CLI and the UI
can print one line and exit with status 2 instead of a traceback.
"""
from __future__ import annotations

from collections.abc import Sequence
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
        super().__init__(f"{_one_line(field)} = {_short(value)}: {_one_line(message)}")

    def __reduce__(self) -> tuple[Any, ...]:
        # Rebuilt from its three parts: an error raised in a planner worker process reaches the parent
        # whole (the default pickling passes only the joined text, and the pool broke on it).
        return type(self), (self.field, self.value, self.message)


class FieldError(ScenarioError):
    """A :class:`ScenarioError` raised by a validator of a pydantic model (a check across fields), naming
    the field at fault by its dotted path *relative to where the validator runs*: the model for a model
    validator (``tiers`` in the workload, ``hit_rate`` in the response cache), the field for a field
    validator (a key of a mapping). The translators of validation errors (``scenario_from_dict``,
    ``load_profile``, ``load_plan``) put that location in front, so the one-line error names
    ``workload.tiers`` rather than dumping the whole workload. Raised outside a validator, ``field`` is
    read as a full path."""


def field_error_of(error: Any) -> FieldError | None:
    """The :class:`FieldError` behind one entry of ``ValidationError.errors()``, if a validator raised one."""
    exc = (error.get("ctx") or {}).get("error") if isinstance(error, dict) else None
    return exc if isinstance(exc, FieldError) else None


def check_unique_names(items: Sequence[Any], field: str, what: str) -> None:
    """Refuse two entries of the list at ``field`` with the same ``name`` (``what``: "tier", "region").

    Raises:
        FieldError: naming the second entry's name, ``<field>[i].name``, and the first entry of that name.
    """
    first: dict[str, int] = {}
    for i, item in enumerate(items):
        if item.name in first:
            raise FieldError(f"{field}[{i}].name", item.name, f"{field}[{first[item.name]}] has this name too; "
                             f"every {what} needs its own name")
        first[item.name] = i


def _one_line(text: Any) -> str:
    """``text`` (as ``str``) with its control characters escaped as ``repr`` writes them (a column name
    or file name holding a line break stays on the error's one line)."""
    text = str(text)
    if text.isprintable():
        return text
    return "".join(ch if ch.isprintable() or ch == " " else repr(ch)[1:-1] for ch in text)


def _short(value: Any, limit: int = 160) -> str:
    """``repr(value)``, shortened in the middle so that both ends (a path's file name) survive."""
    text = repr(value.item() if hasattr(value, "item") else value)
    if len(text) <= limit:
        return text
    keep = (limit - 3) // 2
    return text[:keep] + "..." + text[-keep:]
