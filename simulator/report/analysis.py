"""What the dashboard shows, computed from a run's records (pure numpy/pandas; no plotting).

* :func:`kpis`: the headline numbers of one run (TTFT/TPOT/E2E p50/p99, throughput, SLO
  attainment, cost per million tokens) with units and which direction is better;
  :func:`compare_kpis` puts two runs side by side.
* :func:`cost_per_million_tokens`: GPU-hours per token at the simulated throughput.
* :func:`latency_cdf`, :func:`stage_breakdown`, :func:`time_series`: the data behind the charts.
* :func:`run_report`: all of the above for one :class:`~simulator.run.records.SimulationResult`,
  small enough to cache and pin.
* :func:`with_arrival_rate`, :func:`with_concurrency`, :func:`load_sweep`,
  :func:`max_load_meeting_slo`: latency against offered load (an arrival rate, or a closed loop's
  number of clients) and the largest load that holds the SLO.

Every function here works on the measured requests of the run (arrived inside the measurement
window ``[warmup_s, last arrival - cooldown_s]`` and finished), the same set the summary uses.
"""
from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import pandas as pd

from simulator.errors import ScenarioError
from simulator.metrics import SWEEP_METRICS, in_measurement_window, slo_thresholds_s, summary_row  # noqa: F401
from simulator.run.records import SimulationResult
from simulator.run.simulate import simulate
from simulator.scenario.config import ClosedLoopArrival, GammaArrival, OfflineArrival, PoissonArrival, Scenario
from simulator.workload.prefix import requests_per_session

LATENCY_METRICS = ("ttft_s", "tpot_s", "e2e_s")


class RunCancelled(Exception):
    """Raised from an ``on_progress`` callback to stop a run (a stop button, a time limit)."""


# -- one run -------------------------------------------------------------------------------------
def measured_requests(result: SimulationResult) -> pd.DataFrame:
    """Requests that arrived inside the measurement window and finished (the summary's sample)."""
    req, sc = result.requests, result.scenario
    in_window = in_measurement_window(req, sc.warmup_s, sc.cooldown_s, sc.workload.arrival,
                                      sc.workload.sessions)
    return req[in_window & (req["status"].astype(str) == "finished_length_capped")]


def num_gpus(scenario: Scenario) -> int:
    """GPUs the deployment holds: replicas x tensor-, pipeline- and data-parallel sizes (summed over
    model pools)."""
    dep = scenario.deployment
    if dep.pools:
        return sum(p.replicas * (p.tensor_parallel_size or dep.tensor_parallel_size) for p in dep.pools)
    return dep.replicas * dep.gpus_per_replica


def cost_per_million_tokens(summary: dict[str, Any], price_per_gpu_hour: float | None,
                            gpus: int) -> dict[str, float | None]:
    """Dollars per million tokens at the simulated throughput.

    ``usd_per_hour = gpus x price_per_gpu_hour``; the deployment is paid for whether it is busy or
    not, so a lightly loaded system costs more per token. ``usd_per_1m_output_tokens`` divides
    by generated tokens only; ``usd_per_1m_tokens`` by prompt + generated tokens. ``None`` when
    the profile has no price or nothing finished.
    """
    tp = summary.get("throughput") or {}
    out_tps, in_tps = tp.get("output_tokens_per_s"), tp.get("input_tokens_per_s")
    if price_per_gpu_hour is None:
        return {"usd_per_hour": None, "usd_per_1m_output_tokens": None, "usd_per_1m_tokens": None}
    usd_per_s = gpus * price_per_gpu_hour / 3600.0
    per_out = usd_per_s / out_tps * 1e6 if out_tps else None
    per_all = usd_per_s / (out_tps + (in_tps or 0.0)) * 1e6 if out_tps else None
    return {"usd_per_hour": gpus * price_per_gpu_hour, "usd_per_1m_output_tokens": per_out,
            "usd_per_1m_tokens": per_all}


@dataclass(frozen=True)
class KPI:
    """One headline number in display units."""

    key: str
    label: str
    value: float | None
    unit: str
    higher_is_better: bool


def kpis(summary: dict[str, Any], scenario: Scenario, price_per_gpu_hour: float | None) -> list[KPI]:
    """The headline numbers of one run, from its summary (latencies in ms, E2E in s)."""
    def q(metric: str, p: str, scale: float) -> float | None:
        v = (summary.get(metric) or {}).get(p)
        return None if v is None else v * scale

    tp = summary.get("throughput") or {}
    cost = cost_per_million_tokens(summary, price_per_gpu_hour, num_gpus(scenario))
    att = summary.get("slo_attainment")
    tasks = summary.get("tasks")   # sessions: the whole task's time to a usable answer
    task_kpi = [] if tasks is None else [
        KPI("task_ttua_p99", "Task TTUA p99", (tasks["task_ttua_s"] or {}).get("p99"), "s", False)]
    return [
        KPI("ttft_p50", "TTFT p50", q("ttft_s", "p50", 1e3), "ms", False),
        KPI("ttft_p99", "TTFT p99", q("ttft_s", "p99", 1e3), "ms", False),
        KPI("tpot_p50", "TPOT p50", q("tpot_s", "p50", 1e3), "ms", False),
        KPI("tpot_p99", "TPOT p99", q("tpot_s", "p99", 1e3), "ms", False),
        KPI("e2e_p50", "E2E p50", q("e2e_s", "p50", 1.0), "s", False),
        KPI("e2e_p99", "E2E p99", q("e2e_s", "p99", 1.0), "s", False),
        KPI("ttua_p99", "TTUA p99", q("ttua_s", "p99", 1.0), "s", False),
        *task_kpi,
        KPI("throughput_rps", "Throughput", tp.get("requests_per_s"), "req/s", True),
        KPI("output_tps", "Output tokens", tp.get("output_tokens_per_s"), "tok/s", True),
        KPI("slo_attainment", "SLO attainment", None if att is None else 100.0 * att, "%", True),
        KPI("usd_per_1m_output_tokens", "Cost", cost["usd_per_1m_output_tokens"], "$/1M output tok", False),
    ]


#: Decimals a KPI is shown with, by unit (others: 1).
DISPLAY_DIGITS = {"s": 2, "$/1M output tok": 2, "tok/s": 0}


def display_digits(unit: str) -> int:
    return DISPLAY_DIGITS.get(unit, 1)


def kpi_change(baseline: float | None, current: float | None, unit: str) -> float | None:
    """``current - baseline``, or None when either is missing; a change that rounds to zero at the
    KPI's display precision is 0.0 (a "-0.0" is no change, neither better nor worse)."""
    if baseline is None or current is None:
        return None
    delta = current - baseline
    return 0.0 if round(delta, display_digits(unit)) == 0 else delta


def run_kpis(result: SimulationResult) -> list[KPI]:
    """One run's KPIs, priced at its hardware profile's GPU-hour price."""
    return kpis(result.summary, result.scenario, result.system.profile.price_per_gpu_hour)


def compare_kpis(baseline: Sequence[KPI], current: Sequence[KPI]) -> pd.DataFrame:
    """Side by side: baseline, current, absolute and relative change, and whether it improved (None: no
    change at the KPI's display precision, :func:`kpi_change`)."""
    base = {k.key: k for k in baseline}
    rows = []
    for k in current:
        b = base.get(k.key)
        bv = b.value if b is not None else None
        delta = k.value - bv if k.value is not None and bv is not None else None
        rel = delta / bv if delta is not None and bv not in (0, None) else None
        shown = kpi_change(bv, k.value, k.unit)
        better = None if not shown else (shown > 0) == k.higher_is_better
        rows.append({"kpi": k.label, "unit": k.unit, "baseline": bv, "current": k.value, "delta": delta,
                     "delta_pct": None if rel is None else 100.0 * rel, "better": better})
    return pd.DataFrame(rows)


def latency_cdf(requests: pd.DataFrame, metrics: Sequence[str] = LATENCY_METRICS,
                max_points: int = 500) -> pd.DataFrame:
    """Empirical CDFs, long format (``metric``, ``value_s``, ``fraction``), at most ``max_points``
    per metric: order statistics at evenly spaced ranks, always including the minimum and maximum."""
    frames = []
    for metric in metrics:
        x = np.sort(requests[metric].to_numpy(dtype=float))
        x = x[~np.isnan(x)]
        n = len(x)
        if n == 0:
            continue
        idx = np.unique(np.linspace(0, n - 1, min(n, max_points)).round().astype(np.int64))
        frames.append(pd.DataFrame({"metric": metric, "value_s": x[idx], "fraction": (idx + 1) / n}))
    if not frames:
        return pd.DataFrame({"metric": pd.Series(dtype=str), "value_s": pd.Series(dtype=float),
                             "fraction": pd.Series(dtype=float)})
    return pd.concat(frames, ignore_index=True)


STAGES = ("network", "pre", "queue", "prefill", "decode", "post")


def stage_breakdown(requests: pd.DataFrame) -> pd.DataFrame:
    """Where a request's end-to-end time goes: mean, p50 and p99 of each stage and its share of
    the mean E2E (the stage means add up to the mean E2E exactly).

    * network = client-perceived E2E - server E2E (round trips and connection set-up; only when
      the scenario has a ``network``, else the stage is left out)
    * pre = the processing stages before the engine and the response-cache lookup (``pre_s``;
      only with ``pipeline`` / ``response_cache``), post = the stages after it (``post_s``)
    * queue = first admission into a batch - arrival at the engine
    * prefill = first token - first admission (the prompt's step, including any wait between
      admission and the step's end)
    * decode = finish - first token (includes time lost to preemption and recompute)
    """
    arrival, sched = requests["arrival_time"].to_numpy(float), requests["first_scheduled_time"].to_numpy(float)
    first, finish = requests["first_token_time"].to_numpy(float), requests["finish_time"].to_numpy(float)
    parts = {"queue": sched - arrival, "prefill": first - sched, "decode": finish - first}
    total = finish - arrival
    if "pre_s" in requests.columns:   # pipeline stages / response-cache lookup around the engine
        parts["pre"] = requests["pre_s"].to_numpy(float)
        parts["queue"] = parts["queue"] - parts["pre"]
        parts["post"] = requests["post_s"].to_numpy(float)
        total = total + parts["post"]
    if "client_e2e_s" in requests.columns:
        parts["network"] = requests["client_e2e_s"].to_numpy(float) - requests["e2e_s"].to_numpy(float)
        total = total + parts["network"]
    e2e_mean = float(np.mean(total)) if len(requests) else math.nan
    rows = []
    for stage in (s for s in STAGES if s in parts):
        x = parts[stage]
        empty = len(x) == 0
        rows.append({"stage": stage, "mean_s": math.nan if empty else float(x.mean()),
                     "p50_s": math.nan if empty else float(np.quantile(x, 0.5)),
                     "p99_s": math.nan if empty else float(np.quantile(x, 0.99)),
                     "share": math.nan if empty or e2e_mean <= 0 else float(x.mean() / e2e_mean)})
    return pd.DataFrame(rows)


def time_series(steps: pd.DataFrame, num_gpu_blocks: int, num_replicas: int, end_s: float,
                num_bins: int = 200) -> pd.DataFrame:
    """Time averages per time bin of the engine state, summed over replicas.

    Columns: ``time_s`` (bin start), ``bin_s``, ``queue_depth`` (waiting requests),
    ``running_batch`` (requests in the running batch), ``kv_usage`` (fraction of all replicas' KV
    blocks in use). Each step's value holds for its duration and idle time counts as zero, so
    every bin's average is the exact integral over the bin divided by its width (steps that
    straddle a bin edge are split at the edge). ``num_waiting`` is the waiting queue as the step
    began.
    """
    end_s = max(float(end_s), float((steps["start_time"] + steps["duration_s"]).max()) if len(steps) else 0.0)
    if end_s <= 0:
        end_s = 1.0
    edges = np.linspace(0.0, end_s, num_bins + 1)
    width = edges[1] - edges[0]
    cols = {"queue_depth": "num_waiting", "running_batch": "num_seqs", "kv_usage": "kv_blocks_used"}
    integrals = {k: np.zeros(num_bins + 1) for k in cols}
    for _, s in steps.groupby("replica", sort=False):
        s = s.sort_values("start_time", kind="stable")
        start, dur = s["start_time"].to_numpy(float), s["duration_s"].to_numpy(float)
        last = np.searchsorted(start, edges, side="right") - 1          # last step begun by each edge
        valid = last >= 0
        li = np.where(valid, last, 0)
        partial_t = np.where(valid, np.clip(edges - start[li], 0.0, dur[li]), 0.0)
        for key, col in cols.items():
            v = s[col].to_numpy(float)
            full = np.concatenate([[0.0], np.cumsum(v * dur)])            # integral of steps before index i
            integrals[key] += np.where(valid, full[li] + v[li] * partial_t, 0.0)
    out = pd.DataFrame({"time_s": edges[:-1], "bin_s": width})
    for key in cols:
        out[key] = np.diff(integrals[key]) / width
    out["kv_usage"] /= max(1, num_gpu_blocks * num_replicas)
    return out


@dataclass(frozen=True)
class RunReport:
    """Everything the What-if page shows about one run (small: no per-request or per-step rows)."""

    scenario: Scenario
    summary: dict[str, Any]
    kpis: list[KPI]
    cdf: pd.DataFrame
    stages: pd.DataFrame
    series: pd.DataFrame
    system: dict[str, Any]


def run_report(result: SimulationResult, *, max_cdf_points: int = 500, num_bins: int = 200) -> RunReport:
    """The page's data for one run: KPIs, CDFs, stage breakdown, time series and the resolved
    system (model, profile, KV blocks, GPUs, price)."""
    sc, system = result.scenario, result.system
    measured = measured_requests(result)
    plan = system.kv_plan
    info = {"model": system.model.name, "profile": system.profile.name, "profile_source": system.profile.source,
            "device": system.profile.device, "num_gpus": num_gpus(sc), "num_gpu_blocks": plan.num_gpu_blocks,
            "block_size": plan.block_size, "kv_token_slots": plan.num_token_slots,
            "price_per_gpu_hour": system.profile.price_per_gpu_hour, "max_model_len": system.max_model_len,
            "slo_thresholds_s": slo_thresholds_s(sc.slo)}
    return RunReport(
        scenario=sc, summary=result.summary,
        kpis=run_kpis(result),
        cdf=latency_cdf(measured, max_points=max_cdf_points),
        stages=stage_breakdown(measured),
        series=time_series(result.steps, *_kv_blocks_and_replicas(result), result.sim_time_s, num_bins),
        system=info)


def _kv_blocks_and_replicas(result: SimulationResult) -> tuple[int, int]:
    """KV blocks per replica and replicas, for the usage series (model pools: all blocks, 1)."""
    pools = getattr(result.system, "pools", ())
    if pools:
        return sum(s.kv_plan.num_gpu_blocks * sub.deployment.replicas for sub, s in pools), 1
    return result.system.kv_plan.num_gpu_blocks, result.scenario.deployment.replicas


# -- load ------------------------------------------------------------------------------------------
def with_arrival_rate(scenario: Scenario, rate_per_s: float, cv: float | None = None) -> Scenario:
    """The scenario with its arrival rate (and, if given, the gaps' coefficient of variation)
    replaced: ``cv == 1`` gives Poisson arrivals, anything else gamma-distributed gaps.

    A closed loop or an offline batch becomes an open loop (Poisson unless ``cv`` says otherwise).

    Raises:
        ScenarioError: for trace arrivals (their rate is the trace's; use ``speedup``), or a bad value.
    """
    arrival = scenario.workload.arrival
    if not isinstance(arrival, (PoissonArrival, GammaArrival, ClosedLoopArrival, OfflineArrival)):
        raise ScenarioError("workload.arrival.process", arrival.process,
                            "a rate can only be set for poisson or gamma arrivals; a trace keeps its own "
                            "rate (change workload.arrival.speedup)")
    if cv is None:
        cv = arrival.cv if isinstance(arrival, GammaArrival) else 1.0
    new: dict[str, Any] = ({"process": "poisson", "rate_per_s": rate_per_s} if cv == 1.0
                           else {"process": "gamma", "rate_per_s": rate_per_s, "cv": cv})
    return scenario.with_overrides({"workload.arrival": new})


def with_concurrency(scenario: Scenario, concurrency: int) -> Scenario:
    """The scenario as a closed loop of ``concurrency`` clients (a closed loop keeps its think time and
    the trace it replays; any other arrival process becomes a closed loop without one).

    Raises:
        ScenarioError: a bad value, or a scenario whose features a closed loop does not model.
    """
    arrival = scenario.workload.arrival
    think = (arrival.model_dump(exclude={"process", "concurrency"}, exclude_none=True)
             if isinstance(arrival, ClosedLoopArrival) else {})
    return scenario.with_overrides({"workload.arrival": {"process": "closed_loop", "concurrency": concurrency,
                                                         **think}})


SweepProgress = Callable[[int, int, int, int], None]

LOAD_AXES = ("rate", "concurrency")
"""What a load sweep varies: the open-loop arrival rate, or a closed loop's number of clients."""


def load_sweep(scenario: Scenario, rates_per_s: Sequence[float],
               policies: Mapping[str, Mapping[str, Any]] | None = None, *, axis: str = "rate",
               on_progress: SweepProgress | None = None,
               on_run: Callable[[str, float], None] | None = None) -> pd.DataFrame:
    """Simulate the scenario at each load (same seed, same lengths) under each batching policy and
    tabulate latency: the one load sweep of the dashboard, the notebooks and the studies.

    ``axis="rate"``: ``rates_per_s`` are open-loop arrival rates in requests/s (with sessions, each
    starts ``rate / mean turns`` sessions/s, as the planner does; ``sessions_per_s`` gives that rate).
    ``axis="concurrency"``: they are
    numbers of closed-loop clients (:func:`with_concurrency`), the way serving benchmarks sweep;
    the load a closed loop offers is what it achieves, so each row's ``rate_per_s`` is then the
    measured throughput (requests/s) and ``concurrency`` the clients.

    ``policies`` maps a label to the overrides that make it (``{"chunked": {"scheduler.policy":
    "chunked_prefill", "scheduler.max_num_batched_tokens": 2048}}``); default: the scenario as is.
    ``on_progress(point, num_points, done, total)`` is called as each run progresses (raising
    :class:`RunCancelled` from it stops the sweep); ``on_run(policy, load)`` before each run.

    Returns one row per (policy, load), loads ascending: ``policy``, (``concurrency``,)
    ``rate_per_s``, ``rate_per_gpu`` and :func:`summary_row`'s columns (and, for concurrency,
    ``mean_running_batch``).
    """
    if axis not in LOAD_AXES:
        raise ScenarioError("axis", axis, f"allowed: {', '.join(LOAD_AXES)}")
    closed = axis == "concurrency"
    loads = sorted(int(r) if closed else float(r) for r in rates_per_s)
    if not loads or loads[0] <= 0 or (closed and any(int(r) != r for r in rates_per_s)):
        raise ScenarioError("concurrency" if closed else "rates_per_s", list(rates_per_s),
                            "give one or more whole numbers of clients >= 1" if closed
                            else "give one or more positive arrival rates")
    policies = policies or {scenario.scheduler.policy: {}}
    gpus = num_gpus(scenario)
    points = [(label, overrides, load) for label, overrides in policies.items() for load in loads]
    rows = []
    for i, (label, overrides, load) in enumerate(points):
        if on_run:
            on_run(label, load)
        base = scenario.with_overrides(dict(overrides)) if overrides else scenario
        per_session = 1.0 if closed else requests_per_session(base)
        sc = with_concurrency(base, int(load)) if closed else with_arrival_rate(base, float(load) / per_session)
        cb = None if on_progress is None else (lambda done, total, i=i: on_progress(i, len(points), done, total))
        result = simulate(sc, on_progress=cb)
        row = summary_row(result)
        if closed:
            rate = row["throughput_rps"] if row["throughput_rps"] is not None else math.nan
            rows.append({"policy": label, "concurrency": int(load), "rate_per_s": rate, "rate_per_gpu": rate / gpus,
                         **row, "mean_running_batch": result.summary["benchmark"]["mean_running_batch"]})
        else:
            sessions = {"sessions_per_s": load / per_session} if base.workload.sessions is not None else {}
            rows.append({"policy": label, "rate_per_s": load, "rate_per_gpu": load / gpus, **sessions, **row})
    return pd.DataFrame(rows)


def max_load_meeting_slo(sweep: pd.DataFrame) -> dict[str, Any]:
    """The largest swept load such that it and every lower swept load meet the SLO.

    Returns ``max_rate_per_s`` and ``max_rate_per_gpu`` (``None`` when even the lowest load
    misses, or when there is no SLO), ``first_failing_rate_per_s`` (at the next swept load, which
    misses; ``None`` if all met: the true maximum is then above the sweep) and ``reason``. A
    concurrency sweep is ordered by clients, its rates are measured throughputs, and it also gives
    ``max_concurrency`` and ``first_failing_concurrency``. The answer is only as fine as the grid:
    the true limit lies between the two loads.
    """
    closed = "concurrency" in sweep
    s = sweep.sort_values("concurrency" if closed else "rate_per_s")
    out: dict[str, Any] = {"max_rate_per_s": None, "max_rate_per_gpu": None, "first_failing_rate_per_s": None}
    if closed:
        out.update(max_concurrency=None, first_failing_concurrency=None)
    if s.empty or s["slo_met"].isna().all():
        return {**out, "reason": "no SLO set: add slo.ttft_p99_ms / tpot_p99_ms / e2e_p99_ms"}
    best = None
    failing = None
    for _, row in s.iterrows():
        if bool(row["slo_met"]):
            best = row
        else:
            failing = row
            break
    if failing is not None:
        out["first_failing_rate_per_s"] = float(failing["rate_per_s"])
        if closed:
            out["first_failing_concurrency"] = int(failing["concurrency"])
    if best is None:
        assert failing is not None   # the first (lowest) load failed
        lowest = f"{int(failing['concurrency'])} clients" if closed else f"{failing['rate_per_s']:g} req/s"
        return {**out, "reason": f"even the lowest {'load' if closed else 'rate'} ({lowest}) misses the SLO"}
    out.update(max_rate_per_s=float(best["rate_per_s"]), max_rate_per_gpu=float(best["rate_per_gpu"]))
    if closed:
        out["max_concurrency"] = int(best["concurrency"])
    what = "load" if closed else "rate"
    out["reason"] = (f"every swept {what} meets the SLO; the limit is above the sweep" if failing is None
                     else f"the SLO breaks between this {what} and the next swept one")
    return out


# -- hardware --------------------------------------------------------------------------------------
def profiles_overview(profiles: dict[str, Any]) -> pd.DataFrame:
    """One row per hardware profile with its source and datasheet numbers (display units)."""
    rows = []
    for name, p in profiles.items():
        rows.append({
            "profile": name, "device": p.device, "source": p.source, "cost_model": p.cost_model,
            "memory_gib": p.memory_bytes / 2**30 if p.memory_bytes else None,
            "bandwidth_tb_s": p.memory_bandwidth_bytes_per_s / 1e12 if p.memory_bandwidth_bytes_per_s else None,
            "bf16_tflops": p.peak_flops.get("bf16", math.nan) / 1e12 if p.peak_flops else None,
            "fp8_tflops": p.peak_flops["fp8"] / 1e12 if "fp8" in p.peak_flops else None,
            "interconnect": p.interconnect.name if p.interconnect else None,
            "interconnect_gb_s": p.interconnect.bandwidth_bytes_per_s / 1e9 if p.interconnect else None,
            "usd_per_gpu_hour": p.price_per_gpu_hour,
            "document": str(p.provenance.get("document", "")),
        })
    return pd.DataFrame(rows)


def step_time_curves(profile: Any, model: Any, tensor_parallel_size: int = 1, *,
                     batch_sizes: Sequence[int] = (1, 2, 4, 8, 16, 32, 64, 128, 256),
                     context_tokens: int = 1024,
                     prompt_tokens: Sequence[int] = (16, 64, 128, 256, 512, 1024, 2048, 4096, 8192)) -> pd.DataFrame:
    """The cost model's predicted engine step time for a profile and model, long format
    (``kind``, ``x``, ``step_ms``, ``per_token_ms``): ``decode`` steps of ``x`` requests each
    attending over ``context_tokens``, and ``prefill`` steps of one prompt of ``x`` tokens."""
    from simulator.cost.base import BatchShape
    from simulator.cost.factory import make_cost_model

    cost = make_cost_model(profile, model, tensor_parallel_size)
    rows = []
    for b in batch_sizes:
        t = cost.step_time_s(BatchShape.decode(b, b * (context_tokens + 1)))
        rows.append({"kind": "decode", "x": int(b), "step_ms": 1e3 * t, "per_token_ms": 1e3 * t / b})
    for n in prompt_tokens:
        t = cost.step_time_s(BatchShape.prefill(int(n)))
        rows.append({"kind": "prefill", "x": int(n), "step_ms": 1e3 * t, "per_token_ms": 1e3 * t / n})
    return pd.DataFrame(rows)


_SIZE_AXIS = {"gemm": ("tokens", "tokens"), "elementwise": ("tokens", "tokens"), "sampling": ("tokens", "tokens"),
              "attn_prefill": ("tokens", "tokens"), "attn_decode": ("context", "context tokens"),
              "comm": ("message_bytes", "bytes")}


def measured_vs_fitted(profile: Any) -> pd.DataFrame:
    """Every measured op time of a ``table`` profile beside the time the cost model predicts for
    it with that point held out (leave-one-out, as :mod:`simulator.cost.op_table` fits it).

    Columns: ``op``, ``family``, ``size`` and ``size_unit`` (tokens, context tokens or bytes),
    ``measured_ms``, ``fitted_ms``, ``rel_error`` (fitted / measured - 1; NaN where a point
    cannot be held out).

    Raises:
        ScenarioError: the profile has no measurement table.
    """
    from simulator.cost.op_table import leave_one_out
    from simulator.report.profile_report import profile_table as read_ops
    from simulator.scenario.models import DTYPE_BYTES

    if profile.table is None:
        raise ScenarioError("hardware.cost_model", profile.cost_model,
                            f"profile {profile.name!r} has no measurements (only 'table' and 'kernel_table' "
                            "profiles do)")
    ops = read_ops(profile)
    dtype = str(ops["dtype"].iloc[0]) if len(ops) else "bf16"
    peak = float(profile.peak_flops_for(dtype)) if profile.peak_flops else 1e12
    bw = float(profile.memory_bandwidth_bytes_per_s or 1e11)
    loo = leave_one_out(ops, peak=peak, bw=bw, elem_bytes=DTYPE_BYTES.get(dtype, 2.0))
    size = pd.Series(np.nan, index=loo.index)
    unit = pd.Series("", index=loo.index, dtype=object)
    for fam, (col, label) in _SIZE_AXIS.items():
        m = loo["family"] == fam
        size[m] = loo.loc[m, col].astype(float)
        unit[m] = label
    measured = loo["median_s"].astype(float) * 1e3
    return pd.DataFrame({"op": loo["op"], "family": loo["family"], "size": size, "size_unit": unit,
                         "measured_ms": measured, "fitted_ms": measured * (1.0 + loo["rel_error"].astype(float)),
                         "rel_error": loo["rel_error"].astype(float)})


def tier_table(summary: dict[str, Any]) -> pd.DataFrame:
    """Per request tier (``workload.tiers``): share, priority, counts, p50/p99 latencies (TTFT and
    TPOT in ms, E2E in s), SLO attainment against the tier's own SLO, whether it is met and, when not,
    why (``slo_failures``: each failed check, e.g. ``ttft_p99 538 ms > 500 ms`` or the run being
    unstable). Empty without tiers."""
    rows = []
    for name, t in (summary.get("tiers") or {}).items():
        def q(metric: str, p: str, scale: float) -> float | None:
            v = (t.get(metric) or {}).get(p)  # noqa: B023 - q is called within this iteration only
            return None if v is None else v * scale

        att = t.get("slo_attainment")
        rows.append({"tier": name, "share": t["share"], "priority": t["priority"],
                     "arrived": t["requests"]["arrived"], "completed": t["requests"]["completed"],
                     "ttft_p50_ms": q("ttft_s", "p50", 1e3), "ttft_p99_ms": q("ttft_s", "p99", 1e3),
                     "tpot_p50_ms": q("tpot_s", "p50", 1e3), "tpot_p99_ms": q("tpot_s", "p99", 1e3),
                     "e2e_p99_s": q("e2e_s", "p99", 1.0),
                     "slo_attainment_pct": None if att is None else 100.0 * att,
                     "slo_met": (t.get("slo") or {}).get("passed"),
                     "slo_failures": "; ".join((t.get("slo") or {}).get("failures") or [])})
    return pd.DataFrame(rows)
