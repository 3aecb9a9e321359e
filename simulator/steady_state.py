"""Where a run's steady state starts, found from the run's own output, and how precise a share
measured over it is.

**Warm-up (MSER-5).** A fleet starts empty: its running batch fills over tens of seconds, and until
it has, every latency is lower than it will be. :func:`detect` finds the end of that transient with
the MSER-5 rule (White, 1997; Franklin and White, 2008): a per-request series, in arrival order, is
averaged in batches of 5, and the truncation point ``d`` is the one that minimises the standard
error of the mean of what is left, ``sum((z_j - mean_d)^2) / (m - d)^2`` over ``d`` in ``[0, m/2]``.
Three series are truncated, and the latest truncation point wins:

* the requests in system (arrived, not finished) that each arrival finds: the running batch and the
  waiting queue together, so a fleet whose seats absorb an excess shows it too;
* each finished request's TTFT, and its TPOT (requests with two or more output tokens).

A minimum at the search's bound (``d = m/2``) means the series still trends in its second half: the
run never reached steady state (``reached`` false), and what it measures are warm-up numbers.

It applies to stationary open-loop load (``poisson`` and ``gamma`` arrivals, sessions included). A
replayed trace and a diurnal curve change their load by design, an offline batch only drains and a
closed loop's steady part is found from its clients (:func:`simulator.metrics.measurement_window`):
for them ``applies`` is false and the window is the configured one.

**Precision (batch means).** A run's requests are correlated through the queue, so the share of
them above a limit is summarised in :data:`BATCHES` consecutive batches (in arrival order) and its
95% interval is the batch means' t interval (:func:`share_interval`). The SLO judge
(:mod:`simulator.slo`) calls a check *marginal* when that interval holds the allowed share.
"""
from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np

from simulator.critical_values import t_ppf

MSER_BATCH = 5
"""Requests per batch of the MSER rule (MSER-5)."""
MIN_MSER_BATCHES = 20
"""Fewer batches than this in a series: too short to tell (``reached`` is None)."""
BATCHES = 10
"""Batches of the batch-means interval on a judged share."""
LEVEL = 0.95
"""Two-sided confidence of the batch-means interval."""
STATIONARY = ("poisson", "gamma")
"""Arrival processes whose runs have a steady state to find."""
STABILITY_BATCHES = 10
"""Batch means the in-system trend is fitted to."""
STABILITY_GROWTH_FRACTION = 0.01
"""Growth of the requests in system, as a share of the arrival rate, above which (when significant) the
system is not steady: well below the 4.8% of a system offered 5% more than it completes, above the
noise of a stable fleet's hundreds of requests in system over a run of a few thousand."""
STABILITY_CONFIDENCE = 0.99
"""One-sided confidence of the trend's t-test."""
NOISE_SIGMAS = 3.0
"""A count's rise over the window must exceed this many square roots of its mean to count as growth."""
MIN_RESIDENCES = 5
"""Mean times in system a window must span for the trend of the requests in system to be tested."""


@dataclass(frozen=True)
class SteadyState:
    """Where a run's measurement starts (the summary's ``steady_state``)."""

    applies: bool
    """Whether the warm-up was searched for (stationary open-loop load)."""
    warmup_s: float
    """Start of the measured window: the detected end of the warm-up, or ``warmup_s`` if later."""
    configured_warmup_s: float
    """The scenario's ``warmup_s`` (a lower bound on the detected one)."""
    detected_s: float | None
    """Arrival time of the first request after the latest truncation point (None: not searched)."""
    reached: bool | None
    """Whether every series settled before the second half of the run (None: too short to tell or not
    searched)."""
    truncated_requests: int
    """Arrivals in the configured window before the measured one starts."""
    binding_series: str
    """The series whose truncation point was the latest."""
    reason: str

    def to_dict(self) -> dict[str, Any]:
        return {"applies": self.applies, "warmup_s": self.warmup_s, "configured_warmup_s": self.configured_warmup_s,
                "detected_s": self.detected_s, "reached": self.reached,
                "truncated_requests": self.truncated_requests, "binding_series": self.binding_series,
                "rule": "MSER-5 over requests in system, TTFT and TPOT in arrival order" if self.applies else None,
                "reason": self.reason}


def mser5(series: np.ndarray) -> tuple[int, bool] | None:
    """The MSER-5 truncation point of ``series`` (values in arrival order) as a count of leading values
    to drop, and whether it lies before the search's bound (the series settled); None when the series
    has fewer than :data:`MIN_MSER_BATCHES` batches."""
    m = len(series) // MSER_BATCH
    if m < MIN_MSER_BATCHES:
        return None
    z = series[:m * MSER_BATCH].reshape(m, MSER_BATCH).mean(axis=1)
    z = z - z.mean()                       # centred: the sums of squares below keep their precision
    s1 = np.cumsum(z[::-1])[::-1]          # sum of z[d:]
    s2 = np.cumsum((z * z)[::-1])[::-1]
    k = np.arange(m, 0, -1, dtype=float)   # m - d
    bound = m // 2
    stat = (s2[:bound + 1] - s1[:bound + 1] ** 2 / k[:bound + 1]) / k[:bound + 1] ** 2
    d = int(np.argmin(stat))
    return d * MSER_BATCH, d < bound


def detect(requests: Mapping[str, Any], window: tuple[float, float], process: str | None,
           configured_warmup_s: float) -> SteadyState:
    """The steady state of the requests that arrived in ``window`` (the configured measurement window,
    ``[warmup_s, last arrival - cooldown_s]``), for a run whose arrival ``process`` is ``process``."""
    start, end = window
    if process not in STATIONARY:
        why = {"trace": "a replayed trace is measured as given", "diurnal": "a diurnal curve has no steady load",
               "offline": "an offline batch only drains", "closed_loop": "a closed loop's steady part starts when "
               "every client has had an answer"}.get(process or "", "not a stationary open loop")
        return SteadyState(False, start, configured_warmup_s, None, None, 0, "", why)
    arrival = np.asarray(requests["arrival_time"], dtype=float)
    order = np.argsort(arrival, kind="stable")
    a = arrival[order]
    lo, hi = int(np.searchsorted(a, start, side="left")), int(np.searchsorted(a, end, side="right"))
    finish = np.asarray(requests["finish_time"], dtype=float)
    done = np.sort(np.where(np.isnan(finish), math.inf, finish))
    in_system = (np.arange(len(a)) - np.searchsorted(done, a, side="right")).astype(float)[lo:hi]
    series = {"requests in system": (in_system, a[lo:hi])}
    for name in ("ttft_s", "tpot_s"):
        x = np.asarray(requests[name], dtype=float)[order][lo:hi]
        keep = ~np.isnan(x)
        series[name.removesuffix("_s").upper()] = (x[keep], a[lo:hi][keep])
    cut_s, binding, reached = start, "", True
    for name, (x, when) in series.items():
        found = mser5(x)
        if found is None:
            return SteadyState(True, start, configured_warmup_s, None, None, 0, "",
                               f"too few requests to find the warm-up ({len(x)} {name} values; "
                               f"{MIN_MSER_BATCHES * MSER_BATCH} needed)")
        d, settled = found
        reached &= settled
        if d and when[d] > cut_s:
            cut_s, binding = float(when[d]), name
    # MSER can stop inside a slow creep of the requests in system (a large fleet's batch filling up):
    # drop a tenth of what is left while the in-system count still grows, up to half the window (while
    # what is left spans MIN_RESIDENCES mean times in system: the trend's test needs that much).
    gone_by_arrival = np.where(np.isnan(finish), math.inf, finish)[order]
    gone = np.sort(gone_by_arrival)
    rate = (hi - lo) / (end - start)
    stay = gone_by_arrival[lo:hi] - a[lo:hi]
    residence_s = float(stay[np.isfinite(stay)].mean()) if np.isfinite(stay).any() else math.inf
    while end - cut_s >= MIN_RESIDENCES * residence_s:
        slope, t, means = in_system_trend(a, gone, cut_s, end, STABILITY_BATCHES)
        if not grows(slope, t, rate, STABILITY_BATCHES, end - cut_s, float(means.mean())):
            break
        if cut_s >= start + (end - start) / 2:
            reached = False
            break
        cut_s, binding = min(cut_s + (end - cut_s) / STABILITY_BATCHES, start + (end - start) / 2), "in-system trend"
    truncated = int(np.searchsorted(a[lo:hi], cut_s, side="left"))
    if reached:
        reason = (f"warm-up ends at {cut_s:.4g} s (set by {binding})" if binding
                  else f"no warm-up after {start:.4g} s (warmup_s)")
    else:
        reason = ("never reached: the second half of the run still trends (warm-up numbers: give more requests; "
                  "or the load exceeds what the deployment serves)")
    return SteadyState(True, cut_s, configured_warmup_s, cut_s, reached, truncated, binding, reason)


def share_interval(hit: np.ndarray, batches: int = BATCHES) -> tuple[float, float]:
    """The share of true values in ``hit`` (booleans in arrival order) and the half-width of its
    batch-means interval at :data:`LEVEL` (inf when there are fewer values than batches)."""
    n = len(hit)
    if n == 0:
        return math.nan, math.inf
    share = float(hit.mean())
    if n < batches:
        return share, math.inf
    edges = np.linspace(0, n, batches + 1).astype(int)
    csum = np.concatenate([[0], np.cumsum(hit, dtype=float)])
    means = (csum[edges[1:]] - csum[edges[:-1]]) / np.diff(edges)
    sd = float(means.std(ddof=1))
    return share, float(t_ppf(0.5 + LEVEL / 2, batches - 1)) * sd / math.sqrt(batches)


def in_system_trend(arrival_sorted: np.ndarray, gone_sorted: np.ndarray, start: float, end: float,
                    batches: int) -> tuple[float, float, np.ndarray]:
    """Slope (requests/s) of the requests in system over ``[start, end]``, its t statistic and the
    ``batches`` batch means it is fitted to (the count sampled at 50 instants per batch). ``gone_sorted``:
    finish times, +inf for requests still in system at the end."""
    grid = np.linspace(start, end, batches * 50)
    count = (np.searchsorted(arrival_sorted, grid, side="right")
             - np.searchsorted(gone_sorted, grid, side="right")).astype(float)
    means = count.reshape(batches, -1).mean(axis=1)
    slope, t = trend(grid.reshape(batches, -1).mean(axis=1), means)
    return slope, t, means


def grows(slope: float, t: float, rate: float, batches: int, span_s: float, level: float) -> bool:
    """Whether a trend of ``slope`` requests/s (t statistic ``t``) at ``rate`` arrivals/s, over ``span_s``
    seconds of a count whose mean is ``level``, is growth: more than :data:`STABILITY_GROWTH_FRACTION` of
    the arrival rate, significant, and a rise over the window above :data:`NOISE_SIGMAS` times the
    square root of the level (a stable count of requests in system fluctuates by about that much: it is
    Poisson for an M/G/infinity system, and the batch means of a short window are too correlated for the
    t-test alone)."""
    return bool(rate > 0 and slope / rate > STABILITY_GROWTH_FRACTION
                and t > float(t_ppf(STABILITY_CONFIDENCE, batches - 2))
                and slope * span_s > NOISE_SIGMAS * math.sqrt(max(level, 1.0)))


def trend(x: np.ndarray, y: np.ndarray) -> tuple[float, float]:
    """OLS slope of y on x and its t statistic (inf for a perfect rising line)."""
    xc = x - x.mean()
    sxx = float((xc ** 2).sum())
    if sxx <= 0:
        return 0.0, 0.0
    slope = float((xc * (y - y.mean())).sum() / sxx)
    resid = y - y.mean() - slope * xc
    dof = len(x) - 2
    se = math.sqrt(float((resid ** 2).sum()) / dof / sxx) if dof > 0 else math.inf
    if se == 0:
        return slope, (math.inf if slope > 0 else (-math.inf if slope < 0 else 0.0))
    return slope, slope / se
