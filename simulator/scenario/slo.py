"""The scenario's ``slo`` section (and each tier's): the latency objectives a run is judged against.

Only the thresholds live here; :mod:`simulator.slo` judges a run's requests against them.
"""
from __future__ import annotations

from pydantic import Field

from simulator.scenario.frozen import Frozen
from simulator.scenario.limits import FiniteFloat


class SLOConfig(Frozen):
    """Latency objectives, judged over every request that arrived in the measurement window:
    a dropped request (shed, rejected, timed out, unfinished) misses every threshold. Each
    ``<metric>_p<N>_ms`` holds that percentile of the metric within the threshold; see
    ``simulator.slo`` for the judge."""

    ttft_p50_ms: FiniteFloat | None = Field(default=None, gt=0)
    """Time to first token (client-perceived when the scenario has a network), p50 threshold;
    ``_p90``, ``_p95``, ``_p99`` likewise."""
    ttft_p90_ms: FiniteFloat | None = Field(default=None, gt=0)
    ttft_p95_ms: FiniteFloat | None = Field(default=None, gt=0)
    ttft_p99_ms: FiniteFloat | None = Field(default=None, gt=0)
    tpot_p50_ms: FiniteFloat | None = Field(default=None, gt=0)
    """Time per output token after the first, p50 threshold;
    ``_p90``, ``_p95``, ``_p99`` likewise."""
    tpot_p90_ms: FiniteFloat | None = Field(default=None, gt=0)
    tpot_p95_ms: FiniteFloat | None = Field(default=None, gt=0)
    tpot_p99_ms: FiniteFloat | None = Field(default=None, gt=0)
    e2e_p50_ms: FiniteFloat | None = Field(default=None, gt=0)
    """End-to-end latency (client-perceived with a network), p50 threshold;
    ``_p90``, ``_p95``, ``_p99`` likewise."""
    e2e_p90_ms: FiniteFloat | None = Field(default=None, gt=0)
    e2e_p95_ms: FiniteFloat | None = Field(default=None, gt=0)
    e2e_p99_ms: FiniteFloat | None = Field(default=None, gt=0)
    queue_delay_p50_ms: FiniteFloat | None = Field(default=None, gt=0)
    """Wait before the first admission to a batch, p50 threshold;
    ``_p90``, ``_p95``, ``_p99`` likewise."""
    queue_delay_p90_ms: FiniteFloat | None = Field(default=None, gt=0)
    queue_delay_p95_ms: FiniteFloat | None = Field(default=None, gt=0)
    queue_delay_p99_ms: FiniteFloat | None = Field(default=None, gt=0)
    ttua_p50_ms: FiniteFloat | None = Field(default=None, gt=0)
    """Time to usable answer (``client.usable_answer_tokens``; client-perceived with a network),
    p50 threshold; ``_p90``, ``_p95``, ``_p99`` likewise."""
    ttua_p90_ms: FiniteFloat | None = Field(default=None, gt=0)
    ttua_p95_ms: FiniteFloat | None = Field(default=None, gt=0)
    ttua_p99_ms: FiniteFloat | None = Field(default=None, gt=0)
    task_ttua_p50_ms: FiniteFloat | None = Field(default=None, gt=0)
    """Time to usable answer of a whole session (an agent task: from its first turn's arrival to the
    usable answer of its last), over the sessions that started in the measurement window, failed
    and unfinished ones as +inf; needs ``workload.sessions``. p50 threshold; ``_p90``, ``_p95``,
    ``_p99`` likewise. Not part of ``attainment``, which counts requests."""
    task_ttua_p90_ms: FiniteFloat | None = Field(default=None, gt=0)
    task_ttua_p95_ms: FiniteFloat | None = Field(default=None, gt=0)
    task_ttua_p99_ms: FiniteFloat | None = Field(default=None, gt=0)
    attainment: FiniteFloat = Field(default=0.0, ge=0, le=1)
    """Least share of the judged requests that complete within every metric's per-request limit
    (the threshold of the highest percentile set for it); 0 = only the percentiles are held."""
    max_drop_fraction: FiniteFloat = Field(default=0.0, ge=0, le=1)
    """Error/timeout budget: the largest share of the judged requests that may be dropped (shed,
    rejected, timed out or unfinished). The default 0 allows none."""
