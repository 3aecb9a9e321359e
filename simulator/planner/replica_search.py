"""The fewest replicas of one scenario that meet its SLO: the planner's search
(:func:`simulator.planner.search.minimal_count`) over ``deployment.replicas``, each count simulated
once and judged by the one SLO judge (:mod:`simulator.slo`). The notebooks' burstiness study
(:func:`simulator.report.studies.burstiness_cost`) and the request-path tests call it."""
from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

import pandas as pd

from simulator.errors import ScenarioError
from simulator.metrics import summary_row
from simulator.planner.search import minimal_count
from simulator.run.records import SimulationResult
from simulator.run.simulate import simulate
from simulator.scenario.config import Scenario


def meets_slo(result: SimulationResult) -> bool:
    """The one SLO judge's verdict on the run (:mod:`simulator.slo`): every threshold over every
    request that arrived in the window (dropped ones as misses), the drop budget, and stability."""
    slo = result.summary.get("slo") or {}
    if "passed" not in slo:
        raise ScenarioError("slo", None, "the scenario has no SLO thresholds to search replicas against")
    return bool(slo["passed"])


def min_replicas(scenario: Scenario, max_replicas: int = 64,
                 on_run: Callable[[int, bool], None] | None = None) -> tuple[int | None, pd.DataFrame]:
    """The fewest replicas (``deployment.replicas``) whose simulated run :func:`meets_slo`, found by
    the planner's search (:func:`simulator.planner.search.minimal_count`) from the scenario's own
    count. Returns the count (None if ``max_replicas`` does not suffice) and one row per simulated
    count (``replicas, meets_slo`` and :func:`summary_row`'s columns), sorted."""
    tried: dict[int, tuple[bool, dict[str, Any]]] = {}

    def ok(n: int) -> bool:
        if n not in tried:
            result = simulate(scenario.with_overrides({"deployment.replicas": n}))
            tried[n] = (meets_slo(result), summary_row(result))
            if on_run:
                on_run(n, tried[n][0])
        return tried[n][0]

    n = minimal_count(ok, scenario.deployment.replicas, max_replicas)
    return n, _tried_frame(tried)


def _tried_frame(tried: Mapping[int, tuple[bool, dict[str, Any]]]) -> pd.DataFrame:
    rows = [{"replicas": n, "meets_slo": ok, **row} for n, (ok, row) in sorted(tried.items())]
    return pd.DataFrame(rows)
