"""The ``llmplan`` command's entry point: the CLI, with a Ctrl-C during start-up handled like one
later (:mod:`simulator.startup`): importing the CLI takes about a second, and an interrupt in that
second prints ``error: interrupted`` and exits with status 130 instead of a traceback."""
from __future__ import annotations

from simulator.startup import guard_startup, loading_modules, run_to_exit


def main() -> None:
    """``llmplan``: guard the start-up, import the CLI (collector paused), restore the usual handler, run."""
    restore = guard_startup()
    with loading_modules():
        from simulator.cli import main as cli_main

    restore()
    run_to_exit(cli_main)


if __name__ == "__main__":  # pragma: no cover
    main()
