"""What every ``llmplan`` command shares: the consoles, one-line errors (:func:`guarded`), plain progress
lines for logs, option checks, percentages and JSON-safe values. The command modules of
:mod:`simulator.cli` import from here, never from each other."""
from __future__ import annotations

import math
import os
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import typer
from rich.console import Console
from rich.markup import escape

from simulator.arguments import check_name
from simulator.cli.startup import Terminated
from simulator.errors import ScenarioError
from simulator.output import check_path_name


def _console(stderr: bool = False) -> Console:
    """A console that, when piped, prints wide enough that tables keep whole names. On a stream that is
    not UTF-8 (``LC_ALL=C``) a character it cannot encode is written as an escape (``caf\\xe9``) and
    tables are drawn in ASCII, so a non-ASCII name never turns a finished run into an error."""
    stream = sys.stderr if stderr else sys.stdout
    encoding = (getattr(stream, "encoding", None) or "utf-8").lower().replace("-", "").replace("_", "")
    if not encoding.startswith("utf") and hasattr(stream, "reconfigure"):
        stream.reconfigure(errors="backslashreplace")
    console = Console(stderr=stderr)
    return console if console.is_terminal else Console(stderr=stderr, width=200)


out_console = _console()
err_console = _console(stderr=True)

#: ``--trace-format``'s help, for every command that reads a trace (the formats of
#: :data:`simulator.workload.traces.TRACE_FORMATS`).
TRACE_FORMAT_HELP = "The trace's format: requests, openai, azure, mooncake, observation (docs/scenario.md)."


class PlainProgress:
    """Progress as plain lines for a stderr that is not a terminal (a log file, CI), where a bar would be
    invisible or garbled: a line when another tenth of the work is done but at most one a second, a line
    after ``heartbeat_s`` without one when the tenths come slowly, and always one at the end. A run
    shorter than a second prints only its last line."""

    def __init__(self, what: str, unit: str, console: Console, enabled: bool, *, min_gap_s: float = 1.0,
                 heartbeat_s: float = 30.0, clock: Callable[[], float] = time.monotonic) -> None:
        self.what, self.unit, self.console, self.enabled = what, unit, console, enabled
        self.min_gap_s, self.heartbeat_s, self.clock = min_gap_s, heartbeat_s, clock
        self.start = self.last = clock()
        self.tenth = 0
        self.finished = False

    def __call__(self, done: int, total: int | None, note: str = "") -> None:
        if not self.enabled or self.finished:
            return
        now = self.clock()
        tenth = 10 * done // total if total else self.tenth
        final = total is not None and total != 0 and done >= total
        if not (final or (tenth > self.tenth and now - self.last >= self.min_gap_s)
                or now - self.last >= self.heartbeat_s):
            return
        self.tenth, self.last, self.finished = tenth, now, final
        pct = f" ({100 * done / total:.0f}%)" if total else ""
        line = f"{self.what}: {done}/{total or '?'} {self.unit}{pct}, {now - self.start:.0f} s"
        line += f"; {note}" if note else ""
        self.console.print(line, markup=False, highlight=False, soft_wrap=True)


def at_least(flag: str, value: float | None, least: float) -> None:
    """Refuse an option's value below ``least`` (or not a finite number) before any work; None is unset."""
    if value is not None and not (math.isfinite(value) and value >= least):
        raise ScenarioError(flag, value, f"must be >= {least:g}")


def check_profile_out(out: Path, force: bool, name: str | None = None) -> None:
    """A profile folder for ``calibrate``/``import-profile``: a name a folder can have, not a file, and no
    finished profile in it unless ``--force`` (its ``profile.yaml`` and ``ops.csv`` are each replaced whole
    when written); ``name``, the profile's ``--name``, without control characters."""
    check_name("--name", name)
    check_path_name(out)
    if out.exists() and not out.is_dir():
        raise ScenarioError("--out", str(out), "exists and is not a directory")
    if (out / "profile.yaml").is_file() and not force:
        raise ScenarioError("--out", str(out), "already holds a finished profile (profile.yaml); pass --force "
                            "to replace it, or choose another folder")


def _fail(message: str, code: int = 2) -> None:
    err_console.print(f"[bold red]error:[/] {escape(message)}", highlight=False, soft_wrap=True)
    raise typer.Exit(code)


def guarded(fn: Callable[..., Any]) -> Callable[..., Any]:
    """Turn ScenarioErrors into one-line messages (exit 2) and anything else into exit 1."""
    import functools

    @functools.wraps(fn)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        try:
            return fn(*args, **kwargs)
        except typer.Exit:
            raise
        except ScenarioError as exc:
            _fail(str(exc))
        except Terminated:
            _fail("terminated", code=143)
        except KeyboardInterrupt:
            _fail("interrupted", code=130)
        except Exception as exc:  # the CLI must never print a bare traceback
            if os.environ.get("LLMPLAN_DEBUG"):
                raise
            _fail(f"internal error: {type(exc).__name__}: {exc} (set LLMPLAN_DEBUG=1 for the traceback)", code=1)
    return wrapper


def percent(x: Any) -> str:
    """A fraction as a percentage with one decimal (``12.3%``), or ``-`` when there is none."""
    return "-" if x is None or (isinstance(x, float) and not math.isfinite(x)) else f"{100 * x:.1f}%"


def jsonable(obj: Any) -> Any:
    """Replace NaN/inf with None and numpy scalars with Python ones, recursively."""
    if isinstance(obj, dict):
        return {str(k): jsonable(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [jsonable(v) for v in obj]
    if hasattr(obj, "item") and not isinstance(obj, (str, bytes)):
        obj = obj.item()
    if isinstance(obj, float) and not math.isfinite(obj):
        return None
    return obj
