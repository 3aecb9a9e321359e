"""``llmplan``: the command line, the top layer (it may import every part of the simulator; nothing in
the simulator imports it).

:func:`main` is the ``llmplan`` command's entry point and ``python -m simulator.cli``'s. It takes charge
of a Ctrl-C before the command tree is imported (:mod:`simulator.cli.startup`): importing it takes about
a second, and an interrupt in that second prints ``error: interrupted`` and exits with status 130
instead of a traceback. So this module imports nothing heavy, and ``app`` (the Typer command tree of
:mod:`simulator.cli.commands`) is imported on first use (PEP 562).

The modules: ``commands`` (the tree: every command registered, the version option, one-line errors
for bad option values), ``runs`` (simulate, compare, sweep), ``studies`` (what compare, sweep and
``simulate --seeds`` run and print), ``profiles`` (models, profiles, import-profile), ``measure``
(calibrate, observe, validate: real engines and kernels), ``plan`` and ``plan_report`` (the plan
command, its progress bars and tables), ``vllm`` (import vllm, compare-metrics), ``support`` (what
the command modules share; they import from it, never from each other) and ``startup``.
"""
from __future__ import annotations

from typing import TYPE_CHECKING, Any

from simulator.cli.startup import guard_startup, loading_modules, run_to_exit

if TYPE_CHECKING:  # pragma: no cover
    from simulator.cli.commands import app

__all__ = ["app", "main"]


def main() -> None:
    """``llmplan``: guard the start-up, import the command tree (collector paused), restore the usual
    handler, run."""
    restore = guard_startup()
    with loading_modules():
        from simulator.cli.commands import run

    restore()
    run_to_exit(run)


def __getattr__(name: str) -> Any:
    if name == "app":
        from simulator.cli.commands import app
        return app
    raise AttributeError(f"module 'simulator.cli' has no attribute {name!r}")
