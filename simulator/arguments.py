"""Checks of the arguments the public API and the command line are given, in one place.

The scenario models check every field of a scenario; this module checks what is handed to the
functions around them (``load_scenario(path, overrides)``, ``simulate(scenario, seed=...,
on_progress=...)``, ``resolve(scenario)``, ``load_profile(ref)``, a CLI option's value), so that a
wrong argument is one :class:`~simulator.errors.ScenarioError` naming the argument and its value,
raised before any work, instead of a ``TypeError`` or ``AttributeError`` from deep inside a run.
The limits are the command line's (a seed from 0 to 2^62, as a scenario's ``seed`` field).

Names a user gives (scenario, plan, region, candidate, tier, profile names; output folders) may not
hold control characters: a newline or an escape sequence in a name splits the lines of a log and
the rows of a table, or rewrites the terminal. :func:`check_name` is that rule for a CLI option,
:data:`simulator.scenario.limits.Name` the same rule for a configuration field.

Only the standard library is imported here (the CLI imports this module before pandas).
"""
from __future__ import annotations

import os
import re
from pathlib import Path
from typing import Any

from simulator.errors import ScenarioError

INT_LIMIT = 2**62
"""Largest whole number any field or option takes (seeds included); :mod:`simulator.scenario.limits`
re-exports it."""

#: C0 and C1 control characters, DEL, and the Unicode line and paragraph separators (a tab included).
CONTROL_CHARACTERS = re.compile("[\x00-\x1f\x7f-\x9f\u2028\u2029]")
CONTROL_MESSAGE = "must not hold control characters (a newline, tab, escape or other invisible character)"


def has_control_characters(text: str) -> bool:
    return CONTROL_CHARACTERS.search(text) is not None


def check_name(field: str, value: Any) -> Any:
    """``value`` (a name given as text; None passes), refused if it is not text or holds a control character.

    Raises:
        ScenarioError: naming ``field`` and ``value``.
    """
    if value is None:
        return None
    if not isinstance(value, str):
        raise ScenarioError(field, value, "must be text")
    if has_control_characters(value):
        raise ScenarioError(field, value, CONTROL_MESSAGE)
    return value


def check_path(field: str, value: Any, what: str = "a file path") -> Path:
    """``value`` as a :class:`~pathlib.Path`: text or an ``os.PathLike``, not empty, no NUL byte.

    Raises:
        ScenarioError: naming ``field`` and ``value``.
    """
    if isinstance(value, bytes) or not isinstance(value, (str, os.PathLike)):
        raise ScenarioError(field, value, f"must be {what} (a str or pathlib.Path), not {type(value).__name__}")
    text = os.fspath(value)
    if not isinstance(text, str) or not text.strip():
        raise ScenarioError(field, text, f"must be {what}, not empty text")
    if "\x00" in text:
        raise ScenarioError(field, text, f"must be {what}; it holds a NUL character")
    return Path(text)


def check_seed(field: str, value: Any) -> int | None:
    """``value`` as a seed: None (the scenario's own), or a whole number from 0 to 2^62.

    Raises:
        ScenarioError: naming ``field`` and ``value``.
    """
    if value is None:
        return None
    if isinstance(value, bool) or not hasattr(value, "__index__"):
        raise ScenarioError(field, value, f"must be a whole number from 0 to 2^62, not {type(value).__name__}")
    seed = value.__index__()
    if not 0 <= seed <= INT_LIMIT:
        raise ScenarioError(field, seed, "must be a whole number from 0 to 2^62")
    return seed


def check_flag(field: str, value: Any) -> bool:
    """``value`` if it is True or False (not 0, 1 or text that reads as either).

    Raises:
        ScenarioError: naming ``field`` and ``value``.
    """
    if not isinstance(value, bool):
        raise ScenarioError(field, value, "must be True or False")
    return value


def check_callback(field: str, value: Any, call: str) -> Any:
    """``value`` if it is None or callable (``call`` shows how it is called, for the message).

    Raises:
        ScenarioError: naming ``field`` and ``value``.
    """
    if value is not None and not callable(value):
        raise ScenarioError(field, value, f"must be None or a function called as {call}")
    return value


def check_mapping(field: str, value: Any, what: str) -> dict[Any, Any]:
    """``value`` if it is a dict (``what`` says what it holds, for the message).

    Raises:
        ScenarioError: naming ``field`` and ``value``.
    """
    if not isinstance(value, dict):
        raise ScenarioError(field, value, f"must be a dict of {what}, not {type(value).__name__}")
    return value


def check_overrides(field: str, value: Any) -> Any:
    """Scenario overrides: None, a dict ``{"key.path": value}`` with text keys, or a list of
    ``"key.path=value"`` strings (the CLI's ``--set``). A single string is refused: it would be read
    one character at a time.

    Raises:
        ScenarioError: naming ``field`` and ``value``.
    """
    if value is None:
        return None
    usage = 'a list of "key.path=value" strings or a dict {"key.path": value}'
    if isinstance(value, dict):
        bad = [k for k in value if not isinstance(k, str)]
        if bad:
            raise ScenarioError(field, value, f"must be {usage}; the key {bad[0]!r} is not text")
        return value
    if isinstance(value, (list, tuple)):
        bad = [v for v in value if not isinstance(v, str)]
        if bad:
            raise ScenarioError(field, value, f"must be {usage}; the item {bad[0]!r} is not text")
        return value
    hint = f' (for one override, give ["{value}"])' if isinstance(value, str) else ""
    raise ScenarioError(field, value, f"must be {usage}, not {type(value).__name__}{hint}")


def check_instance(field: str, value: Any, kind: type, advice: str) -> Any:
    """``value`` if it is a ``kind``; else an error naming the type given and ``advice`` (how to get one).

    Raises:
        ScenarioError: naming ``field`` and ``value``.
    """
    if not isinstance(value, kind):
        raise ScenarioError(field, value, f"must be a {kind.__name__}, not {type(value).__name__}; {advice}")
    return value
