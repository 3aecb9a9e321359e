"""How many requests a scenario's arrivals draw and over how long: refused past the limits of
:mod:`simulator.scenario.limits` when the scenario is loaded, before any request is drawn."""
from __future__ import annotations

from typing import TYPE_CHECKING, Any

from simulator.errors import ScenarioError
from simulator.scenario.limits import MAX_NUM_REQUESTS, MAX_SESSION_TURNS_DRAWN, MAX_TIME_S
from simulator.scenario.workload import (
    ClosedLoopArrival,
    DiurnalArrival,
    FixedLength,
    GammaArrival,
    GeometricLength,
    LognormalLength,
    PoissonArrival,
    UniformLength,
)

if TYPE_CHECKING:  # pragma: no cover
    from simulator.scenario.config import Scenario


def check_run_size(scenario: Scenario) -> None:
    """Refuse a run whose arrivals would not fit the limits of :mod:`simulator.scenario.limits`: more
    than ``MAX_NUM_REQUESTS`` requests (turns of sessions included), or arrivals spread over more than
    ``MAX_TIME_S``. Trace arrivals are checked when the trace is read.

    Raises:
        ScenarioError: naming the rate, ``duration_s``, the think time or the session turns.
    """
    arrival, first = scenario.workload.arrival, scenario.num_requests
    if isinstance(arrival, (PoissonArrival, GammaArrival, DiurnalArrival)):
        first = _check_rate(scenario, arrival)
    elif isinstance(arrival, ClosedLoopArrival) and first is not None:
        # Each client sends one request per think time at least: the sending spans about this long.
        span = first / arrival.concurrency * arrival.think_time_s
        if span > MAX_TIME_S:
            raise ScenarioError("workload.arrival.think_time_s", arrival.think_time_s,
                                f"{first:,} requests from {arrival.concurrency:,} clients pausing this long span "
                                f"about {span:.3g} s; the longest simulated span is {MAX_TIME_S:.0e} s")
    sessions = scenario.workload.sessions
    if sessions is not None and first is not None:
        turns = _mean_of(sessions.turns)
        if first * turns > MAX_SESSION_TURNS_DRAWN:
            raise ScenarioError("workload.sessions.turns", sessions.turns.model_dump(exclude_none=True),
                                f"{first:,} sessions of about {turns:,.3g} turns each would draw "
                                f"{first * turns:,.0f} turns; at most {MAX_SESSION_TURNS_DRAWN:,}: fewer turns "
                                "per session or fewer requests")


def _check_rate(scenario: Scenario, arrival: PoissonArrival | GammaArrival | DiurnalArrival) -> int:
    """The first turns a renewal or diurnal process draws (``num_requests``, or the expected count over
    ``duration_s``), refusing a span over ``MAX_TIME_S`` or a count over ``MAX_NUM_REQUESTS``."""
    if isinstance(arrival, DiurnalArrival):
        name, rate = "mean_rate_per_s", arrival.mean_rate_per_s
        peak = max(arrival.hourly) * 24 / sum(arrival.hourly) if arrival.hourly else arrival.peak_to_mean or 1.0
        window = scenario.duration_s or MAX_TIME_S
        # Bursts add arrivals on top of the daily profile (at most its peak times the multiplier).
        extra = sum((b.multiplier - 1) * peak * min(b.duration_s, window) for b in arrival.bursts if b.multiplier > 1)
        per_s = rate * (1 + extra / window)
    else:
        name, rate, per_s = "rate_per_s", arrival.rate_per_s, arrival.rate_per_s
    if scenario.num_requests is not None:
        check_span(scenario.num_requests, rate, f"workload.arrival.{name}", rate,
                   f"{scenario.num_requests:,} requests at this rate", "raise the rate or lower num_requests")
        return scenario.num_requests
    assert scenario.duration_s is not None   # the model requires one of the two
    expected = per_s * scenario.duration_s
    if expected > MAX_NUM_REQUESTS:
        raise ScenarioError("duration_s", scenario.duration_s,
                            f"about {expected:,.0f} requests arrive in it at {name}={rate:g}; a run holds at most "
                            f"{MAX_NUM_REQUESTS:,}: shorten duration_s, lower the rate or give num_requests")
    return int(expected)


def check_span(count: int, rate: float, field: str, value: Any, what: str, advice: str) -> None:
    """Refuse ``count`` arrivals at ``rate`` per second: they would spread over more than ``MAX_TIME_S``.

    Raises:
        ScenarioError: naming ``field`` and ``value``; ``what`` arrive over the span, ``advice`` ends it.
    """
    span = count / rate
    if span > MAX_TIME_S:
        raise ScenarioError(field, value, f"{what} arrive over about {span:.3g} s; the longest simulated span is "
                                          f"{MAX_TIME_S:.0e} s (about 3 years): {advice}")


def _mean_of(dist: Any) -> float:
    """A length distribution's mean before truncation (an upper bound with it); 1 for an empirical file."""
    if isinstance(dist, FixedLength):
        return float(dist.value)
    if isinstance(dist, UniformLength):
        return (dist.min + dist.max) / 2
    if isinstance(dist, (LognormalLength, GeometricLength)):
        return dist.mean if dist.max is None else min(dist.mean, dist.max)
    return 1.0
