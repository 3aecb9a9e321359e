"""Several runs side by side, for ``llmplan compare`` and ``llmplan simulate --seeds N``.

The numbers are the dashboard's: each run's headline KPIs (:func:`~simulator.report.analysis.run_kpis`),
compared with a baseline as the What-if page does (:func:`~simulator.report.analysis.compare_kpis`).
Across seeds, each KPI's mean, standard deviation and the 95% confidence interval of the mean
(Student's t over the seeds: the seeds are independent replications of the same system).
"""
from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import pandas as pd

from simulator.critical_values import t_ppf
from simulator.errors import ScenarioError
from simulator.report.analysis import KPI, compare_kpis

#: ``--set`` variants of one scenario: overrides of one variant are joined by this.
VARIANT_SEPARATOR = ";"


def variant_overrides(text: str) -> list[str]:
    """``"a=1;b.c=2"`` -> ``["a=1", "b.c=2"]`` (one ``--set`` variant of ``llmplan compare``).

    Raises:
        ScenarioError: an empty variant.
    """
    parts = [p.strip() for p in text.split(VARIANT_SEPARATOR) if p.strip()]
    if not parts:
        raise ScenarioError("--set", text, "give key.path=value, several joined by ';' "
                            "(e.g. 'scheduler.max_num_seqs=128;deployment.replicas=2')")
    return parts


def compare_table(runs: Sequence[tuple[str, Sequence[KPI]]]) -> pd.DataFrame:
    """Every run after the first against the first (the baseline), KPI by KPI: long format with
    ``run, kpi, unit, baseline, value, delta, delta_pct, better`` (``better`` None when unchanged)."""
    if len(runs) < 2:
        raise ScenarioError("runs", len(runs), "a comparison needs at least two runs")
    base_label, base = runs[0]
    frames = []
    for label, kpis in runs[1:]:
        frame = compare_kpis(base, kpis).rename(columns={"current": "value"})
        frame.insert(0, "run", label)
        frames.append(frame)
    out = pd.concat(frames, ignore_index=True)
    out.attrs["baseline"] = base_label
    return out


def seed_runs(runs: Sequence[tuple[int, Sequence[KPI]]]) -> pd.DataFrame:
    """One row per seed: ``seed`` and each KPI's value (columns named by the KPI's key)."""
    return pd.DataFrame([{"seed": seed, **{k.key: k.value for k in kpis}} for seed, kpis in runs])


def seed_stats(runs: Sequence[tuple[int, Sequence[KPI]]], confidence: float = 0.95) -> pd.DataFrame:
    """Per KPI over the seeds: ``kpi, unit, n, mean, std, ci_low, ci_high, min, max`` (``std`` the
    sample standard deviation; ``ci_*`` the ``confidence`` interval of the mean; a KPI a run has no
    value for, e.g. the cost without a price, counts over the runs that have one).

    Raises:
        ScenarioError: fewer than two seeds.
    """
    if len(runs) < 2:
        raise ScenarioError("--seeds", len(runs), "give 2 or more seeds for a spread")
    rows = []
    for i, first in enumerate(runs[0][1]):
        values = [v for _, kpis in runs if (v := kpis[i].value) is not None and math.isfinite(v)]
        n = len(values)
        mean = sum(values) / n if n else math.nan
        std = math.sqrt(sum((v - mean) ** 2 for v in values) / (n - 1)) if n >= 2 else math.nan
        half = t_ppf(0.5 + confidence / 2, n - 1) * std / math.sqrt(n) if n >= 2 else math.nan
        rows.append({"kpi": first.label, "key": first.key, "unit": first.unit, "n": n, "mean": mean, "std": std,
                     "ci_low": mean - half, "ci_high": mean + half,
                     "min": min(values) if values else math.nan, "max": max(values) if values else math.nan})
    return pd.DataFrame(rows)


def records(frame: pd.DataFrame) -> list[dict[str, Any]]:
    """A frame's rows as JSON-ready dicts (NaN -> None)."""
    return [{k: (None if isinstance(v, float) and not math.isfinite(v) else v) for k, v in row.items()}
            for row in frame.astype(object).where(frame.notna(), None).to_dict("records")]
