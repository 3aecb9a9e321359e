"""A Ctrl-C during start-up handled like one later (used by :func:`simulator.cli.main`, the ``llmplan``
command and ``python -m simulator.cli``).

Importing the CLI takes about a second (pandas, scipy, pydantic). A Ctrl-C in that second used to
print a traceback of whichever import it hit; here it prints ``error: interrupted`` and exits with
status 130, as an interrupt of a running command does (:func:`simulator.cli.support.guarded`). This module
imports nothing heavy, and the package's ``__init__`` imports its names lazily, so the guard is in
place before the imports start.
"""
from __future__ import annotations

import gc
import os
import signal
import sys
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any


def _interrupted(signum: int, frame: Any) -> None:
    sys.stderr.write("error: interrupted\n")
    sys.stderr.flush()
    os._exit(130)   # mid-import: nothing to clean up, and no exception may escape into a traceback


def guard_startup() -> Callable[[], None]:
    """Make Ctrl-C exit at once with one line; returns the function that restores the previous handler.
    A SIGINT that is ignored (a background job) stays ignored."""
    if threading.current_thread() is not threading.main_thread():
        return lambda: None
    previous = signal.getsignal(signal.SIGINT)
    if previous == signal.SIG_IGN:
        return lambda: None
    signal.signal(signal.SIGINT, _interrupted)

    def restore() -> None:
        signal.signal(signal.SIGINT, previous)
    return restore


class Terminated(KeyboardInterrupt):
    """SIGTERM (``kill``, ``timeout``, a CI job cancelled) during a command: raised like a Ctrl-C, so the
    same clean-up runs (a plan's worker processes are ended, a half-written output folder removed),
    and the command exits with status 143 (:func:`simulator.cli.support.guarded`)."""


def _terminated(signum: int, frame: Any) -> None:
    raise Terminated


def stop_on_sigterm() -> None:
    """Let SIGTERM stop a running command like a Ctrl-C (see :class:`Terminated`). Only in the main
    thread, and only where SIGTERM still has its default action (an embedding program keeps its own)."""
    if threading.current_thread() is threading.main_thread() and \
            signal.getsignal(signal.SIGTERM) == signal.SIG_DFL:
        signal.signal(signal.SIGTERM, _terminated)


def redeliver_interrupts() -> None:
    """A Ctrl-C (or SIGTERM) whose exception is raised inside a callback Python cannot raise from (a
    weakref callback of the import system's module locks, a ``__del__``) is printed as "Exception
    ignored in ..." with a traceback, and lost: the command ran on. From here on such an interrupt is
    sent again to this process, to land in ordinary code and stop the command as any other does; other
    unraisable exceptions go to the hook in place before."""
    previous = sys.unraisablehook

    def hook(unraisable: Any) -> None:
        if isinstance(unraisable.exc_value, KeyboardInterrupt):
            signal.raise_signal(signal.SIGTERM if isinstance(unraisable.exc_value, Terminated) else signal.SIGINT)
            return
        previous(unraisable)

    sys.unraisablehook = hook


@contextmanager
def loading_modules() -> Iterator[None]:
    """Import a command's modules with the cyclic garbage collector paused, then freeze what is alive.

    Imports allocate hundreds of thousands of long-lived objects (classes, functions, pydantic
    schemas) and next to no garbage, so the collections they would trigger find nothing (35 ms of
    a 0.6 s ``llmplan simulate``); frozen, later collections skip them too. The collector's previous
    state is restored on the way out.
    """
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        gc.freeze()
        if was_enabled:
            gc.enable()


def run_to_exit(main: Callable[[], Any]) -> None:
    """Run a process's ``main`` (the ``llmplan`` command), then freeze what is still alive: the
    interpreter's exit then skips a last collection over every loaded module (about 50 ms of a
    ``simulate`` run). Only for a process that ends with ``main``: a caller that goes on would keep
    those objects out of later collections. Exit handlers and stream flushes run as before."""
    try:
        main()
    finally:
        gc.freeze()
