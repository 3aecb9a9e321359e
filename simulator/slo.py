"""The one SLO judge and the one stability test, shared by ``simulate``'s summary, the planner,
the studies behind the notebooks and the dashboard.

**Who is judged.** Every request that *arrived* in the measurement window
(:func:`simulator.metrics.measurement_window`), whatever became of it. A request that did not
complete (shed or rejected by admission, timed out by its client, or still unfinished when the run
ended) is *dropped*: it misses every threshold, counts against ``max_drop_fraction``, and enters the
percentiles as an infinitely late answer. So a system cannot pass by refusing work.

**What is checked** (every check must hold):

* each percentile threshold that is set (``{ttft,tpot,e2e,queue_delay}_p{50,90,95,99}_ms``): the
  percentile over the judged requests, dropped ones as +inf, is within the threshold. TPOT has no
  value for a completed one-token answer; such requests are left out of the TPOT percentiles only;
* ``attainment``: the share of judged requests that completed within every metric's *per-request
  limit* (the threshold of the highest percentile set for that metric) is at least this floor;
* ``max_drop_fraction``: dropped / judged is at most this (default 0: no request may be dropped);
* stability (when a stability test is given): a run whose backlog grows is never a pass, whatever
  its short-run percentiles.

TTFT and E2E are the client-perceived ones (``client_ttft_s``/``client_e2e_s``) when the frame has
them (a network or the planner's regions), the server's otherwise.

**Goodput** is the rate of requests that completed inside the window *and* met every per-request
limit; it counts a subset of the requests behind the throughput (completions inside the window),
so goodput <= throughput by construction.

**Stability** (:func:`stability`): an overloaded system's backlog grows linearly, a stable one's
fluctuates around a mean. The backlog is every request *in system* (arrived and not finished:
waiting, running in a batch, or preempted), so an excess that fills a fleet's seats before it
queues is seen as soon as it starts. It is sampled over the measurement window (after the warm-up,
:mod:`simulator.steady_state`), averaged in 10 consecutive batches, and a line is fitted to the
batch means. The in-system count drifts for about as long as a request stays: in a window shorter
than 5 mean times in system its batch means are too correlated to test, and the waiting backlog
(arrived, not yet admitted to a batch, not dropped) is tested instead (``backlog`` says which).
The run is unstable when the backlog grows by more than 1% of the arrival rate
(``backlog_growth_fraction``), the slope is significant (one-sided t-test on the batch means,
99%) and the rise over the window exceeds 3 square roots of the backlog's mean (the fluctuation of
a stable count; :func:`simulator.steady_state.grows`). Both figures converge as the run gets longer
(to 0 for a stable system and to
``1 - served/offered`` for an overloaded one): a system offered 5% more than it completes grows by
about 5% of its arrival rate, however many seats it has. A run too short to leave its warm-up can
be called unstable; the planner then runs it longer (:mod:`simulator.planner.search`).

**Precision.** Each percentile check and the attainment floor also carry the batch-means interval
of the share of judged requests beyond the limit (:func:`simulator.steady_state.share_interval`).
A check whose interval holds the allowed share (1% for a p99, the floor's complement for
attainment) is *uncertain*, and a verdict with an uncertain check and no clear failure is
``marginal``: never a pass. ``outcome`` is ``pass``, ``fail`` or ``marginal``.
"""
from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from itertools import pairwise
from typing import TYPE_CHECKING, Any

import numpy as np

from simulator.steady_state import (
    MIN_RESIDENCES,
    STABILITY_BATCHES,
    STABILITY_CONFIDENCE,
    STABILITY_GROWTH_FRACTION,
    grows,
    in_system_trend,
    share_interval,
    trend,
)

if TYPE_CHECKING:  # pragma: no cover
    import pandas as pd

SLO_METRICS = ("ttft", "tpot", "e2e", "queue_delay", "ttua")
TASK_METRICS = ("task_ttua",)
"""Metrics of whole sessions (agent tasks), judged over the tasks that started in the window."""
SLO_PERCENTILES = (50, 90, 95, 99)
COMPLETED = "finished_length_capped"



def thresholds_s(slo: Any) -> dict[tuple[str, int], float]:
    """``{("ttft", 99): 0.5, ...}``: every percentile threshold the SLO sets, in seconds."""
    if slo is None:
        return {}
    out = {}
    for metric in SLO_METRICS + TASK_METRICS:
        for p in SLO_PERCENTILES:
            value = getattr(slo, f"{metric}_p{p}_ms", None)
            if value is not None:
                out[(metric, p)] = value / 1000.0
    return out


def per_request_limits_s(slo: Any) -> dict[str, float]:
    """Each metric's per-request limit: the threshold at the highest percentile set for it."""
    limits: dict[str, float] = {}
    for (metric, _p), limit in sorted(thresholds_s(slo).items(), key=lambda kv: kv[0][1]):
        if metric not in TASK_METRICS:
            limits[metric] = limit
    return limits


def has_objectives(slo: Any) -> bool:
    """Whether the SLO asks anything: a threshold or an attainment floor (a drop budget alone is
    not judged: without objectives there is nothing to hold)."""
    if slo is None:
        return False
    return bool(thresholds_s(slo)) or slo.attainment > 0


def judged_latencies(frame: Mapping[str, Any]) -> dict[str, np.ndarray]:
    """The latency each metric is judged on (client-perceived TTFT/E2E when the frame has them)."""
    ttft = "client_ttft_s" if "client_ttft_s" in frame else "ttft_s"
    e2e = "client_e2e_s" if "client_e2e_s" in frame else "e2e_s"
    ttua = "client_ttua_s" if "client_ttua_s" in frame else ("ttua_s" if "ttua_s" in frame else e2e)
    return {"ttft": np.asarray(frame[ttft], dtype=float), "tpot": np.asarray(frame["tpot_s"], dtype=float),
            "e2e": np.asarray(frame[e2e], dtype=float), "queue_delay": np.asarray(frame["queue_delay_s"], dtype=float),
            "ttua": np.asarray(frame[ttua], dtype=float)}


DROPPED = ("finished_rejected", "finished_shed", "finished_aborted")


def tasks(frame: Mapping[str, Any]) -> pd.DataFrame:
    """One row per session (agent task) of a request frame with sessions (``session``, ``turn``,
    ``session_turns`` columns): ``start_s`` (its first turn's arrival), ``calls`` (turns sent),
    ``turns`` (turns it has), ``outcome`` (``completed``: every turn completed; ``failed``: a turn
    was dropped; ``unfinished``: the run ended first) and ``ttua_s``: from the first turn's
    arrival to the usable answer of the last (:func:`judged_latencies`'s TTUA), +inf unless completed."""
    import pandas as pd
    arrival = np.asarray(frame["arrival_time"], dtype=float)
    status = np.asarray(frame["status"]).astype(str)
    completed = status == COMPLETED
    end = np.where(completed, arrival + judged_latencies(frame)["ttua"], np.nan)
    per = pd.DataFrame({"session": np.asarray(frame["session"]), "arrival": arrival, "end": end,
                        "completed": completed, "dropped": np.isin(status, DROPPED),
                        "turns": np.asarray(frame["session_turns"])}).groupby("session", sort=True)
    out = pd.DataFrame({"start_s": per["arrival"].min(), "calls": per.size(), "turns": per["turns"].first(),
                        "done": per["completed"].sum(), "failed": per["dropped"].any(), "end": per["end"].max()})
    whole = out["done"].to_numpy() == out["turns"].to_numpy()
    out["outcome"] = np.where(whole, "completed", np.where(out["failed"].to_numpy(), "failed", "unfinished"))
    out["ttua_s"] = np.where(whole, out["end"].to_numpy() - out["start_s"].to_numpy(), math.inf)
    return out[["start_s", "calls", "turns", "outcome", "ttua_s"]]


def sorted_quantile(x: np.ndarray, q: float) -> float:
    """numpy's default (linear) quantile of ``x``, already sorted and without NaN: the value
    ``np.quantile(x, q)`` gives, bit for bit (the same interpolation, in the same float operations),
    without its copy, partition and set-up (most of its cost on a summary's few quantiles)."""
    n = len(x)
    virtual = (n - 1) * q
    lo = math.floor(virtual)
    hi = lo + 1
    if virtual >= n - 1:     # the last value, which numpy interpolates with itself
        lo = hi = -1
    gamma = virtual - lo
    a, b = float(x[lo]), float(x[hi])
    diff = b - a
    return b - diff * (1 - gamma) if gamma >= 0.5 else a + diff * gamma


def quantile_with_drops(values: np.ndarray, q: float) -> float:
    """numpy's default (linear) quantile of ``values`` where +inf marks a dropped request and NaN
    is left out; a quantile that reaches into the dropped ones is +inf."""
    x = np.sort(values[~np.isnan(values)])
    n = len(x)
    if n == 0:
        return math.nan
    h = (n - 1) * q
    lo, hi = math.floor(h), math.ceil(h)
    if math.isinf(x[hi]):
        return math.inf if (hi != lo or math.isinf(x[lo])) else float(x[lo])
    return sorted_quantile(x, q)


@dataclass(frozen=True)
class Check:
    metric: str
    percentile: int
    limit_s: float
    value_s: float
    """The percentile over the judged requests (+inf when it reaches into dropped ones; NaN: no sample)."""

    @property
    def name(self) -> str:
        return f"{self.metric}_p{self.percentile}"

    @property
    def met(self) -> bool:
        return not math.isnan(self.value_s) and self.value_s <= self.limit_s

    @property
    def ratio(self) -> float:
        """value / limit (> 1 fails); a check without a sample counts as failed."""
        return math.inf if math.isnan(self.value_s) else self.value_s / self.limit_s


@dataclass(frozen=True)
class Verdict:
    """What the judge found; ``passed`` is the one answer every caller uses."""

    arrived: int
    completed: int
    dropped: int
    checks: tuple[Check, ...]
    attainment: float | None
    attainment_floor: float
    max_drop_fraction: float
    goodput_requests_per_s: float | None
    stable: bool | None
    ratios: dict[str, float] = field(default_factory=dict)
    shares: dict[str, tuple[float, float, float]] = field(default_factory=dict)
    """Per percentile check and ``attainment``: (share of judged requests beyond the limit, half-width of
    its batch-means 95% interval, the share allowed)."""

    @property
    def uncertain(self) -> tuple[str, ...]:
        """The checks whose interval holds the allowed share: the run cannot tell whether they hold."""
        return tuple(name for name, (share, half, allowed) in self.shares.items()
                     if not (share + half <= allowed or share - half > allowed))

    @property
    def outcome(self) -> str:
        """``fail`` when a check fails beyond its noise (or requests are dropped, the run is unstable, none
        arrived); else ``marginal`` when a check is uncertain; else ``pass``."""
        if self.arrived == 0:
            return "fail"
        unsure = self.uncertain
        if any(r > 1.0 and name not in unsure for name, r in self.ratios.items()):
            return "fail"
        return "marginal" if unsure else "pass"

    @property
    def drop_fraction(self) -> float:
        return self.dropped / self.arrived if self.arrived else 0.0

    @property
    def passed(self) -> bool:
        """Every check holds beyond its noise (``outcome == "pass"``)."""
        return self.outcome == "pass"

    @property
    def score(self) -> float:
        """The worst ratio (1 = exactly at a limit); ranks failing candidates by how close they came."""
        return max(self.ratios.values(), default=0.0)

    @property
    def binding(self) -> str:
        """The check with the worst ratio."""
        return max(self.ratios, key=lambda k: self.ratios[k]) if self.ratios else ""

    def failures(self) -> list[str]:
        """One phrase per failed check, worst first."""
        parts = []
        by_name = {c.name: c for c in self.checks}
        for name, ratio in sorted(self.ratios.items(), key=lambda kv: -kv[1]):
            if ratio <= 1.0:
                continue
            if name == "attainment":
                parts.append(f"attainment {100 * (self.attainment or 0.0):.2f}% < {100 * self.attainment_floor:.2f}%")
            elif name == "dropped":
                parts.append(f"{self.dropped} of {self.arrived} requests dropped ({100 * self.drop_fraction:.2f}% > "
                             f"{100 * self.max_drop_fraction:.2f}% allowed)")
            elif name == "stability":
                parts.append("unstable (requests in system grow)")
            else:
                c = by_name[name]
                value = "no sample" if math.isnan(c.value_s) else (
                    "dropped requests" if math.isinf(c.value_s) else f"{1000 * c.value_s:.1f} ms")
                parts.append(f"{name} {value} > {1000 * c.limit_s:g} ms")
        for name in self.uncertain:
            share, half, allowed = self.shares[name]
            parts.append(f"{name} marginal: {100 * share:.2f}% +/- {100 * half:.2f}% of requests beyond the limit, "
                         f"{100 * allowed:.2f}% allowed")
        if self.arrived == 0:
            parts.append("no request arrived in the measurement window")
        return parts

    def to_dict(self) -> dict[str, Any]:
        return {
            "passed": self.passed, "all_met": self.passed,
            "met": {c.name: c.met for c in self.checks},
            "checks": [{"name": c.name, "limit_s": c.limit_s, "value_s": c.value_s, "met": c.met}
                       for c in self.checks],
            "attainment": self.attainment, "attainment_floor": self.attainment_floor,
            "judged": self.arrived, "completed": self.completed, "dropped": self.dropped,
            "drop_fraction": self.drop_fraction, "max_drop_fraction": self.max_drop_fraction,
            "stable": self.stable, "binding": self.binding, "worst_ratio": self.score, "outcome": self.outcome,
            "uncertain": list(self.uncertain),
            "beyond_limit": {name: {"share": share, "ci95_half_width": half, "allowed": allowed}
                             for name, (share, half, allowed) in self.shares.items()},
            "failures": self.failures(),
        }


def judge(requests: Mapping[str, Any], slo: Any, window: tuple[float, float], *,
          stable: bool | None = None) -> Verdict:
    """Judge the requests that arrived in ``window`` against ``slo`` (see the module docstring).

    ``requests`` is a run's whole request frame or its request columns (goodput needs completions whose arrival was
    before the window); ``stable`` is :func:`stability`'s verdict, ``None`` when not tested.
    """
    start, end = window
    arrival = np.asarray(requests["arrival_time"], dtype=float)
    in_window = (arrival >= start) & (arrival <= end)
    completed = np.asarray(requests["status"] == COMPLETED)
    lat = judged_latencies(requests)
    limits = per_request_limits_s(slo)
    ok = completed.copy()
    for metric, limit in limits.items():
        x = lat[metric]
        ok &= np.isnan(x) | (x <= limit)       # a one-token answer has no TPOT to miss
    judged = in_window
    n = int(judged.sum())
    dropped = int((judged & ~completed).sum())
    checks = []
    shares: dict[str, tuple[float, float, float]] = {}
    order = np.argsort(arrival[judged], kind="stable")     # the shares' batches follow arrival order
    task_ttua = None
    for (metric, p), limit in thresholds_s(slo).items():
        if metric == "task_ttua":   # over the tasks that started in the window; failed and unfinished: +inf
            if task_ttua is None:
                t = tasks(requests) if "session" in requests else None
                task_ttua = (np.zeros(0) if t is None else
                             t["ttua_s"].to_numpy()[((t["start_s"] >= start) & (t["start_s"] <= end)).to_numpy()])
            x = task_ttua
        else:
            x = lat[metric][judged].copy()
            x[~completed[judged]] = math.inf
        check = Check(metric, p, limit, quantile_with_drops(x, p / 100.0))
        checks.append(check)
        xs = x if metric == "task_ttua" else x[order]
        shares[check.name] = (*share_interval(xs[~np.isnan(xs)] > limit), 1.0 - p / 100.0)
    attainment = float(ok[judged].mean()) if n else None
    floor = float(getattr(slo, "attainment", 0.0) or 0.0)
    max_drop = float(getattr(slo, "max_drop_fraction", 0.0) or 0.0)
    span = end - start
    finish = np.asarray(requests["finish_time"], dtype=float)
    done_in_window = completed & (finish >= start) & (finish <= end)
    goodput = float((ok & done_in_window).sum() / span) if span > 0 else None
    ratios = {c.name: c.ratio for c in checks}
    if floor > 0:
        miss = 1.0 - (attainment or 0.0)
        ratios["attainment"] = miss / (1.0 - floor) if floor < 1 else (math.inf if miss > 0 else 0.0)
        if floor < 1:
            shares["attainment"] = (*share_interval(~ok[judged][order]), 1.0 - floor)
    frac = dropped / n if n else 0.0
    ratios["dropped"] = frac / max_drop if max_drop > 0 else (math.inf if dropped else 0.0)
    if stable is False:
        ratios["stability"] = math.inf
    return Verdict(arrived=n, completed=int((judged & completed).sum()), dropped=dropped, checks=tuple(checks),
                   attainment=attainment, attainment_floor=floor, max_drop_fraction=max_drop,
                   goodput_requests_per_s=goodput, stable=stable, ratios=ratios, shares=shares)


# -- stability --------------------------------------------------------------------------------------
def stability(requests: Mapping[str, Any], window: tuple[float, float], *,
              batches: int = STABILITY_BATCHES, arrival: Any = None) -> dict[str, Any]:
    """Whether the requests in system grow (see the module docstring).

    A closed loop (``arrival`` a ``closed_loop`` config) or an offline batch is stable by
    construction, with at most N clients' or all requests outstanding: ``stable`` is true and
    ``reason`` says why, without the test.

    Returns ``stable`` (``None`` when the window is too short to tell: fewer than 50 arrivals in
    it, or all at one instant), ``offered_load_ratio`` (arrivals / departures of any kind in the
    window), ``backlog_growth_per_s`` (slope of the requests in system), ``backlog_growth_fraction``
    (that slope over the arrival rate), ``backlog_t`` (its t statistic), ``delay_trend_s_per_s``
    (slope of the queue delay against arrival time) and the backlog's mean in the first and last
    batch.
    """
    mode, clients = getattr(arrival, "process", None), getattr(arrival, "concurrency", None)
    start, end = window
    arrival = np.asarray(requests["arrival_time"], dtype=float)
    finish = np.asarray(requests["finish_time"], dtype=float)
    admitted = np.asarray(requests["first_scheduled_time"], dtype=float)
    in_window = (arrival >= start) & (arrival <= end)
    n = int(in_window.sum())
    span = end - start
    departed = int(((finish >= start) & (finish <= end)).sum())
    out: dict[str, Any] = {
        "stable": None, "offered_load_ratio": n / departed if departed else None,
        "backlog_growth_per_s": None, "backlog_growth_fraction": None, "backlog_t": None,
        "delay_trend_s_per_s": None, "backlog_first": None, "backlog_last": None,
        "backlog": None,
        "test": f"backlog trend over {batches} batch means: unstable when growth > "
                f"{100 * STABILITY_GROWTH_FRACTION:g}% of the arrival rate at "
                f"{100 * STABILITY_CONFIDENCE:g}% confidence",
    }
    if mode in ("closed_loop", "offline"):
        why = (f"closed loop: at most {clients} requests outstanding (one per client)"
               if mode == "closed_loop" else "offline: one batch, all sent at t=0, that only drains")
        out.update(stable=True, test=None, reason=f"{why}; the backlog cannot grow (the open-loop test does "
                   "not apply)")
        return out
    if n < 50 or span <= 0:
        return out
    # Requests in system leave when they finish (completed, shed, rejected, timed out); the waiting
    # ones at their first admission to a batch, or when they finish.
    gone = np.where(np.isnan(finish), math.inf, finish)
    leave = np.fmin(admitted, finish)
    leave = np.where(np.isnan(leave), math.inf, leave)
    residence = gone[in_window] - arrival[in_window]
    residence_s = float(residence[np.isfinite(residence)].mean()) if np.isfinite(residence).any() else math.inf
    in_system = span >= MIN_RESIDENCES * residence_s
    slope, t, means = in_system_trend(np.sort(arrival), np.sort(gone if in_system else leave), start, end, batches)
    rate = n / span
    out.update(backlog_growth_per_s=slope, backlog_growth_fraction=slope / rate, backlog_t=t,
               backlog_first=float(means[0]), backlog_last=float(means[-1]),
               backlog="requests in system" if in_system else
               f"waiting (the window, {span:.3g} s, is shorter than {MIN_RESIDENCES} mean times in system, "
               f"{residence_s:.3g} s each: too short for the in-system count's test)")
    # queue delay against arrival time (a request never admitted waits until it left or the run ended)
    sim_end = float(np.nanmax(finish)) if np.isfinite(finish).any() else end
    wait = np.where(np.isfinite(leave), leave, sim_end) - arrival
    order = np.argsort(arrival[in_window], kind="stable")
    w, a = wait[in_window][order], arrival[in_window][order]
    if len(w) >= batches * 2:
        edges = np.linspace(0, len(w), batches + 1).astype(int)
        wm = np.array([w[i:j].mean() for i, j in pairwise(edges)])
        am = np.array([a[i:j].mean() for i, j in pairwise(edges)])
        out["delay_trend_s_per_s"] = trend(am, wm)[0]
    out["stable"] = not grows(slope, t, rate, batches, span, float(means.mean()))
    return out
