"""Shared page pieces: choosing a scenario, cached runs with progress and cancellation, errors.

Widgets are read here and passed as plain values to library functions; the cached functions
take the scenario's canonical JSON (``simulator.scenario.io.scenario_key``), so the same frozen
scenario is simulated once per server and a second view of it is instant.
"""
from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pandas as pd
import streamlit as st

from simulator import ScenarioError, load_scenario, simulate
from simulator.report.analysis import RunCancelled, RunReport, load_sweep, run_report
from simulator.report.knobs import Knob
from simulator.scenario.io import MAX_SCENARIO_BYTES, scenario_from_key, scenario_from_yaml_bytes, scenario_key

ROOT = Path(__file__).resolve().parent.parent
EXAMPLES = ROOT / "examples"
DEFAULT_EXAMPLE = "chat-h100.yaml"
DEFAULT_TIME_LIMIT_S = 120.0


PLAN_FILES = "plan-*.yaml"
"""Which files in ``examples/`` are capacity plans (the Capacity plan page's), not scenarios."""


def example_files() -> list[str]:
    """Scenario files shipped in ``examples/`` (the default first; plan files are not scenarios)."""
    plans = set(plan_files())
    names = sorted(p.name for p in EXAMPLES.glob("*.yaml") if p.name not in plans)
    return sorted(names, key=lambda n: n != DEFAULT_EXAMPLE)


def plan_files() -> list[str]:
    """Capacity plan files shipped in ``examples/`` (:data:`PLAN_FILES`)."""
    return sorted(p.name for p in EXAMPLES.glob(PLAN_FILES))


@st.cache_data(max_entries=64, show_spinner=False)
def _example_key(name: str, mtime: float) -> str:
    return scenario_key(load_scenario(EXAMPLES / name))


def load_example(name: str):  # returns a Scenario
    """The example scenario ``examples/<name>`` (parsed once per file version)."""
    path = EXAMPLES / name
    if path.parent != EXAMPLES or not path.is_file():
        raise ScenarioError("example", name, f"no such example; known: {', '.join(example_files())}")
    return scenario_from_key(_example_key(name, path.stat().st_mtime))


_MARKDOWN = str.maketrans({c: "\\" + c for c in "\\*$`[]<>~|"})


def plain(text: str) -> str:
    """Text shown literally in markdown (values in errors may hold ``*``, ``$``, brackets...)."""
    return text.translate(_MARKDOWN)


def show_error(exc: BaseException) -> None:
    """One clear message: a ScenarioError names the field (in bold), the value and what is allowed."""
    if isinstance(exc, ScenarioError):
        text = str(exc)
        rest = text[len(exc.field):] if text.startswith(exc.field) else f": {text}"
        st.error(f"**{plain(exc.field)}**{plain(rest)}", icon=":material/error:")
    else:
        st.error(f"Internal error: {plain(f'{type(exc).__name__}: {exc}')}", icon=":material/bug_report:")


WHAT_IF = "What-if's"


def scenario_source(prefix: str, *, default_example: str | None = None, offer_what_if: bool = False):
    """Sidebar choice of an example or an uploaded YAML (or the What-if page's current scenario);
    returns ``(scenario or None, label)``.

    A bad upload shows an error naming the field and returns ``None``; the page goes on. A view
    without a scenario draws none of the page's widgets, so Streamlit forgets their values: it also
    forgets ``<prefix>_base_id``, so that the next scenario (even the one shown before) sets the
    widgets from its own values again instead of leaving them at their minimums.
    """
    scenario, label = _scenario_source(prefix, default_example=default_example, offer_what_if=offer_what_if)
    if scenario is None:
        st.session_state.pop(f"{prefix}_base_id", None)
    return scenario, label


def _scenario_source(prefix: str, *, default_example: str | None, offer_what_if: bool):
    examples = example_files()
    modes = ["Example", "Upload YAML"]
    current = st.session_state.get("wi_current") if offer_what_if else None
    if current is not None:
        modes.insert(0, WHAT_IF)
    if st.session_state.get(f"{prefix}_mode") not in modes:
        st.session_state[f"{prefix}_mode"] = modes[0]
    mode = st.sidebar.radio("Scenario", modes, key=f"{prefix}_mode", horizontal=True,
                            help="What-if's: the scenario with the knobs as set on the What-if page")
    if mode == WHAT_IF:
        return scenario_from_key(current), "What-if scenario"
    if mode == "Example":
        start = default_example if default_example in examples else examples[0]
        if st.session_state.get(f"{prefix}_example") not in examples:
            st.session_state[f"{prefix}_example"] = start
        name = st.sidebar.selectbox("Example scenario", examples, key=f"{prefix}_example", help="Files in examples/")
        try:
            return load_example(name), name
        except ScenarioError as exc:
            show_error(exc)
            return None, name
    upload = st.sidebar.file_uploader(
        "Scenario file (.yaml)", type=["yaml", "yml"], key=f"{prefix}_upload",
        help=f"A scenario as in the README; at most {MAX_SCENARIO_BYTES // 1024} KiB. Parsed with "
             "yaml.safe_load; traces and length files must lie under the app's folder (relative paths "
             "resolve against it).")
    kept = f"{prefix}_uploaded"   # the last valid upload survives a visit to another page
    if upload is None:
        if st.session_state.get(kept):
            key, name = st.session_state[kept]
            st.sidebar.caption(f"Using {name}, uploaded earlier.")
            return scenario_from_key(key), name
        st.info("Upload a scenario YAML in the sidebar, or choose an example.", icon=":material/upload_file:")
        return None, None
    try:
        scenario = scenario_from_yaml_bytes(upload.getvalue(), source=upload.name, base_dir=ROOT,
                                            allowed_root=ROOT)
    except ScenarioError as exc:
        st.session_state.pop(kept, None)
        show_error(exc)
        return None, upload.name
    st.session_state[kept] = (scenario_key(scenario), upload.name)
    return scenario, upload.name


def _deadline_progress(bar: Any, label: str, time_limit_s: float) -> Callable[[int, int], None]:
    deadline = time.monotonic() + time_limit_s

    def on_progress(done: int, total: int) -> None:
        bar.progress(min(1.0, done / max(total, 1)), text=f"{label}: {done:,} / {total:,} requests finished")
        if time.monotonic() > deadline:
            raise RunCancelled(f"stopped after the {time_limit_s:g} s time limit ({done:,} of {total:,} requests "
                               "finished); fewer requests or a higher limit will finish")
    return on_progress


@st.cache_data(max_entries=32, show_spinner=False)
def cached_report(key: str, _time_limit_s: float = DEFAULT_TIME_LIMIT_S) -> RunReport:
    """Simulate the scenario with this canonical JSON once; later calls return the cached report.

    The progress bar is drawn inside the cached function (so a cache hit replays nothing
    visible); a cancellation or error propagates and nothing is cached.
    """
    scenario = scenario_from_key(key)
    bar = st.progress(0.0, text="simulating")
    result = simulate(scenario, on_progress=_deadline_progress(bar, "simulating", _time_limit_s))
    bar.empty()
    return run_report(result)


@st.cache_data(max_entries=16, show_spinner=False)
def cached_sweep(key: str, rates: tuple[float, ...], _time_limit_s: float = DEFAULT_TIME_LIMIT_S,
                 axis: str = "rate") -> pd.DataFrame:
    """Load sweep of the scenario with this canonical JSON over ``rates`` (arrival rates, or with
    ``axis="concurrency"`` numbers of closed-loop clients; cached)."""
    scenario = scenario_from_key(key)
    bar = st.progress(0.0, text="sweeping")
    deadline = time.monotonic() + _time_limit_s

    def on_progress(point: int, points: int, done: int, total: int) -> None:
        bar.progress(min(1.0, (point + done / max(total, 1)) / points),
                     text=f"{what} {point + 1} of {points}: {done:,} / {total:,} requests finished")
        if time.monotonic() > deadline:
            raise RunCancelled(f"stopped after the {_time_limit_s:g} s time limit at {what} {point + 1} of {points}; "
                               "fewer points or requests will finish")

    what = "load" if axis == "concurrency" else "rate"
    sweep = load_sweep(scenario, rates, axis=axis, on_progress=on_progress)
    bar.empty()
    return sweep


def knob_widget(knob: Knob, key: str, *, label: str | None = None, help_text: str | None = None,
                options: list[Any] | None = None, disabled: bool = False,
                on_change: Callable[[], None] | None = None) -> Any:
    """Draw one knob of ``simulator.report.knobs`` under ``key`` (its label, bounds and help unless
    given); returns its value. A select needs its ``options`` (:meth:`Knob.options`)."""
    label = knob.label if label is None else label
    common: dict[str, Any] = {"key": key, "help": (knob.help if help_text is None else help_text) or None,
                              "disabled": disabled, "on_change": on_change}
    if knob.widget == "select":
        return st.selectbox(label, options or [], **common)
    if knob.widget == "toggle":
        return st.toggle(label, **common)
    bounds = {"min_value": knob.min_value, "max_value": knob.max_value, "step": knob.step}
    if knob.widget == "slider":
        return st.slider(label, **bounds, **common)
    return st.number_input(label, **bounds, **common)


def fmt(value: float | None, digits: int = 1) -> str:
    """A number for a card, or an en dash when there is none."""
    if value is None or pd.isna(value):
        return "–"
    return f"{value:,.{digits}f}"


def restore_widgets(prefix: str) -> None:
    """Put back widget values Streamlit dropped while another page was shown."""
    for key, value in st.session_state.get(f"_{prefix}_shadow", {}).items():
        if key not in st.session_state:
            st.session_state[key] = value


def save_widgets(prefix: str, keys: list[str]) -> None:
    """Remember these widgets' values for :func:`restore_widgets`."""
    st.session_state[f"_{prefix}_shadow"] = {k: st.session_state[k] for k in keys if k in st.session_state}


def interrupted_run(prefix: str, stop_clicked: bool) -> None:
    """Say why there are no new results when the last run did not finish.

    Streamlit stops a running script as soon as the user clicks or changes any widget (the next
    progress update raises inside the run), so the Stop button needs no flag of its own: the run
    sets ``<prefix>_running`` and clears it when it ends; if it is still set, the run was cut short.
    """
    was_running = st.session_state.pop(f"{prefix}_running", False)
    if was_running and stop_clicked:
        st.info("Stopped. Nothing from the stopped run was kept (any results below are from the last "
                "finished run).", icon=":material/stop_circle:")
    elif was_running:
        st.info("The run in progress was interrupted by a change on the page; press the run button to "
                "start again.", icon=":material/pause_circle:")
