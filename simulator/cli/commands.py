"""The ``llmplan`` command tree: every command registered on one Typer app, in the order ``--help``
lists them, the ``--version`` option, and one-line errors for an option's bad value.

Every user error (bad scenario field, unknown preset, unreadable trace, a model that does not
fit) prints one line naming the field and the value and exits with status 2; no tracebacks.
Set ``LLMPLAN_DEBUG=1`` to see the traceback of an unexpected internal error.

Importing this builds the tree only: each command imports what it runs (pandas, the engine, the
planner) when it is called, so ``llmplan --help`` stays fast.
"""
from __future__ import annotations

import re
import sys
from pathlib import Path
from typing import Any

import typer
from typer.core import TyperGroup

from simulator.cli import measure, plan, profiles, runs, vllm
from simulator.cli.startup import Terminated, redeliver_interrupts, stop_on_sigterm
from simulator.cli.support import _fail, err_console, out_console
from simulator.errors import ScenarioError


class _OneLineErrors(TyperGroup):
    """The command group: an option's value of the wrong type (``--seed abc``, ``--timeout abc``) is the
    same one line as every other bad value (``error: --seed = 'abc': must be a whole number``, exit 2),
    not a usage box that does not repeat the value. A missing argument keeps click's usage message."""

    def invoke(self, ctx: Any) -> Any:
        try:
            return super().invoke(ctx)
        except typer.BadParameter as exc:   # typer's own copy of click's, as typer raises it
            if type(exc).__name__ == "MissingParameter" or exc.param is None:
                raise
            _fail(str(ScenarioError(_option_name(exc.param), *_bad_value(exc))))


def _option_name(param: Any) -> str:
    """``--seed`` for an option (its longest flag), ``scenario`` for an argument."""
    flags = [o for o in param.opts if o.startswith("-")]
    return max(flags, key=len) if flags else str(param.name)


#: Pydantic's error types for a value of the wrong type (typer converts option values with pydantic).
_TYPE_WORDS = {"int_parsing": "must be a whole number", "int_from_float": "must be a whole number",
               "float_parsing": "must be a number", "bool_parsing": "must be true or false"}


def _bad_value(exc: typer.BadParameter) -> tuple[Any, str]:
    """The value given and what is wrong with it, from typer's conversion error (its cause, a pydantic
    ValidationError, holds the value) or click's message."""
    cause = exc.__cause__
    errors = getattr(cause, "errors", None)
    if callable(errors):
        first = errors(include_url=False)[0]
        return first.get("input"), _TYPE_WORDS.get(first["type"], str(first["msg"]))
    return "?", exc.format_message()


app = typer.Typer(add_completion=False, no_args_is_help=True, pretty_exceptions_enable=False, cls=_OneLineErrors,
                  help="Simulate LLM inference serving: TTFT/TPOT/E2E tails and the GPUs to hold an SLO.")


def package_version() -> str:
    """The installed ``llmplan``'s version, or the checkout's pyproject.toml version when not installed."""
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("llmplan")
    except PackageNotFoundError:
        pass
    for folder in Path(__file__).resolve().parents:
        pyproject = folder / "pyproject.toml"
        if pyproject.is_file():
            text = pyproject.read_text(encoding="utf-8")
            if re.search(r'(?m)^name\s*=\s*"llmplan"', text):
                found = re.search(r'(?m)^version\s*=\s*"([^"]+)"', text)
                if found:
                    return found.group(1)
    return "unknown"


def _print_version(value: bool) -> None:
    if value:
        from simulator.native import engine_build

        out_console.print(f"llmplan {package_version()}\nengine: {engine_build()}", highlight=False, markup=False)
        raise typer.Exit()


@app.callback()
def _root(version: bool = typer.Option(
        False, "--version", callback=_print_version, is_eager=True,
        help="Print the version and the engine's build (compiled or pure Python), and exit.")) -> None:
    pass



app.command()(runs.simulate)
app.command()(runs.compare)
app.command()(runs.sweep)
app.command()(profiles.models)
app.add_typer(profiles.profiles_app, name="profiles")
app.command()(measure.calibrate)
app.command()(measure.observe)
app.command("import-profile")(profiles.import_profile)
app.command()(measure.validate)
app.command()(plan.plan)
app.add_typer(vllm.import_app, name="import")
app.command("compare-metrics")(vllm.compare_metrics_cmd)


def run() -> None:
    """Run the command tree. A Ctrl-C outside a command (while the arguments are parsed) also ends in one
    line; SIGTERM stops a command as a Ctrl-C does (:class:`simulator.cli.startup.Terminated`: status 143),
    also where it lands in a callback that cannot raise (:func:`simulator.cli.startup.redeliver_interrupts`)."""
    stop_on_sigterm()
    redeliver_interrupts()
    try:
        app()
    except Terminated:
        err_console.print("[bold red]error:[/] terminated", highlight=False)
        sys.exit(143)
    except KeyboardInterrupt:
        err_console.print("[bold red]error:[/] interrupted", highlight=False)
        sys.exit(130)
