"""``plan(plan)``: GPUs per region per quarter under p99 SLOs, as DataFrames.

For each forecast cell (quarter x region) the design load is the forecast peak, plus (with N+1
failover) the largest share of any one other region's peak that would be redirected here if that
region went down, times ``1 + headroom``. Every candidate is searched for its minimum replica
count at that load (:mod:`simulator.planner.search`, one task per cell and candidate, run on the
chosen executor) and the cell takes the cheapest candidate that meets the SLO.
"""
from __future__ import annotations

import math
import time
from collections.abc import Callable
from concurrent.futures import as_completed
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pandas as pd

from simulator.cluster.network import network_from_clients
from simulator.errors import ScenarioError
from simulator.planner.backends import open_executor
from simulator.planner.capacity import capacity_bound
from simulator.planner.config import LoadedPlan, PlanConfig, load_plan
from simulator.planner.search import SearchTask, search_replicas
from simulator.run.resolve import resolve
from simulator.scenario.config import GammaArrival, PoissonArrival, Scenario, scenario_from_dict
from simulator.workload.lengths import make_length

HOURS_PER_QUARTER = 365.25 * 24 / 4


@dataclass(frozen=True)
class PlanProgress:
    """One finished search, for progress displays."""

    quarter: str
    region: str
    candidate: str
    status: str
    replicas: int | None
    cell_done: int
    cell_total: int
    done: int
    total: int


@dataclass
class PlanResult:
    worksheet: pd.DataFrame
    """One row per quarter x region: the cheapest candidate meeting the SLO (or why none does)."""
    candidates: pd.DataFrame
    """One row per quarter x region x candidate: every search's answer."""
    totals: pd.DataFrame
    """One row per quarter: GPUs and cost over all regions."""
    wall_s: float


def plan(plan_config: LoadedPlan | PlanConfig | str | Path | dict[str, Any], *,
         on_progress: Callable[[PlanProgress], None] | None = None, backend: str = "local",
         workers: int | None = None, address: str | None = None, timeout_s: float = 10.0) -> PlanResult:
    """Size every forecast cell; see the module docstring.

    Raises:
        ScenarioError: a bad plan (before anything runs) or an unreachable cluster.
    """
    wall0 = time.perf_counter()
    loaded = _as_loaded(plan_config)
    tasks = build_tasks(loaded)
    per_cell: dict[tuple[str, str], int] = {}
    rows: list[dict[str, Any]] = []
    with open_executor(backend, workers=workers, address=address, timeout_s=timeout_s) as ex:
        futures = [ex.submit(search_replicas, t) for t in tasks]
        for done, fut in enumerate(as_completed(futures), 1):
            row = fut.result()
            rows.append(row)
            key = (row["quarter"], row["region"])
            per_cell[key] = per_cell.get(key, 0) + 1
            if on_progress is not None:
                on_progress(PlanProgress(row["quarter"], row["region"], row["candidate"], row["status"],
                                         row["replicas"] if row["status"] == "ok" else None,
                                         per_cell[key], len(loaded.config.candidates), done, len(tasks)))
    candidates = _candidates_frame(loaded, rows)
    worksheet = _worksheet(loaded, candidates)
    return PlanResult(worksheet, candidates, _totals(worksheet), time.perf_counter() - wall0)


def _as_loaded(p: Any) -> LoadedPlan:
    if isinstance(p, LoadedPlan):
        return p
    if isinstance(p, PlanConfig):
        return load_plan(p.model_dump(mode="python"), base_dir=p.base_dir)
    return load_plan(p)


# -- tasks -------------------------------------------------------------------------------------------
def build_tasks(loaded: LoadedPlan) -> list[SearchTask]:
    """One search per forecast cell and candidate, in forecast x candidate order."""
    cfg = loaded.config
    slo = cfg.slo
    net = cfg.network
    tasks = []
    for q, quarter in loaded.forecast.groupby("quarter", sort=False):
        peaks = dict(zip(quarter["region"], quarter["peak_rps"], strict=True))
        total = sum(peaks.values())
        for row in quarter.to_dict("records"):
            r = row["region"]
            own_rtt = loaded.regions[r].rtt_ms[r] / 1000.0
            cases = [("normal", network_from_clients([(r, row["peak_rps"], own_rtt)],
                                                     net.setup_round_trips, net.keepalive_reuse))]
            extra = 0.0
            if cfg.failover == "n_plus_one":
                for f, pf in peaks.items():
                    if f == r:
                        continue
                    moved = pf * row["peak_rps"] / (total - pf)
                    extra = max(extra, moved)
                    rtt_f = loaded.regions[f].rtt_ms[r] / 1000.0
                    cases.append((f"{f} down", network_from_clients(
                        [(r, row["peak_rps"], own_rtt), (f, moved, rtt_f)], net.setup_round_trips,
                        net.keepalive_reuse)))
            design = (row["peak_rps"] + extra) * (1.0 + cfg.headroom)
            for i, cand in enumerate(cfg.candidates):
                sc = cell_scenario(loaded.candidate_scenarios[cand.name], row, design, cfg, i)
                bound = capacity_bound(sc)
                tasks.append(SearchTask(
                    quarter=str(q), region=r, candidate=cand.name, scenario=sc, mixes=tuple(cases), slo=slo,
                    start=bound.replicas_for(design), max_replicas=cfg.simulation.max_replicas,
                    replications=cfg.simulation.replications, design_rps=design,
                    meta=_meta(loaded, sc, cand, row, design, extra, bound.max_rps_per_replica)))
    return tasks


def cell_scenario(base: Scenario, row: dict[str, Any], rate: float, cfg: PlanConfig, index: int) -> Scenario:
    """The candidate's scenario carrying the cell's traffic at ``rate`` requests/s."""
    if not isinstance(base.workload.arrival, (PoissonArrival, GammaArrival)):
        raise ScenarioError("scenario.workload.arrival.process", base.workload.arrival.process,
                            "the planner sizes for a steady peak: use poisson or gamma arrivals")
    sim = cfg.simulation
    data = base.model_dump(mode="python", exclude_none=True)
    wl = data["workload"]
    wl["arrival"]["rate_per_s"] = rate
    for key, col in (("prompt_tokens", "avg_prompt_tokens"), ("output_tokens", "avg_output_tokens")):
        mean = row.get(col)
        if mean is not None and not (isinstance(mean, float) and math.isnan(mean)):
            wl[key] = _rescaled(dict(wl[key]), float(mean), col)
    span = sim.num_requests / rate
    data.update(num_requests=sim.num_requests, seed=sim.seed, warmup_s=sim.warmup_fraction * span,
                cooldown_s=sim.cooldown_fraction * span, slo={},
                name=f"{row['quarter']}/{row['region']}/{cfg.candidates[index].name}")
    data.pop("duration_s", None)
    data.pop("network", None)        # the plan's regions give the client RTTs
    data.pop("fleet", None)          # one region per cell, sized at a steady peak
    data.get("deployment", {}).pop("autoscaler", None)
    data.pop("max_sim_time_s", None)
    try:
        return scenario_from_dict(data)
    except ScenarioError as exc:
        raise ScenarioError(f"forecast {row['quarter']} {row['region']}: {exc.field}", exc.value, exc.message) from None


def _rescaled(dist: dict[str, Any], mean: float, column: str) -> dict[str, Any]:
    kind = dist["dist"]
    if kind in ("lognormal", "geometric"):
        dist["mean"] = mean
    elif kind == "fixed":
        dist["value"] = max(1, int(round(mean)))
    else:
        raise ScenarioError(f"forecast {column}", mean, f"cannot rescale the base scenario's {kind} distribution; "
                            "use lognormal, geometric or fixed lengths in the base scenario, or leave the column empty")
    return dist


def _meta(loaded: LoadedPlan, sc: Scenario, cand: Any, row: dict[str, Any], design: float, extra: float,
          mu: float) -> dict[str, Any]:
    system = resolve(sc)
    price = cand.price_per_gpu_hour if cand.price_per_gpu_hour is not None else system.profile.price_per_gpu_hour
    assert price is not None   # load_plan checks every candidate has a price
    region = loaded.regions[row["region"]]
    prompt = make_length(sc.workload.prompt_tokens, sc, "workload.prompt_tokens").mean
    output = make_length(sc.workload.output_tokens, sc, "workload.output_tokens").mean
    return {
        "peak_rps": row["peak_rps"], "design_rps": design, "failover_rps": extra,
        "headroom": loaded.config.headroom, "avg_prompt_tokens": prompt, "avg_output_tokens": output,
        "hardware": system.profile.name, "tensor_parallel_size": sc.deployment.tensor_parallel_size,
        "quantization": getattr(sc, "quantization", None) or system.model.dtype,
        "max_num_seqs": sc.scheduler.max_num_seqs, "analytic_estimate_rps_per_replica": mu,
        "rtt_ms": region.rtt_ms[row["region"]], "price_per_gpu_hour": float(price),
        "price_multiplier": region.price_multiplier, "seed": sc.seed,
    }


# -- frames ------------------------------------------------------------------------------------------
WORKSHEET_COLUMNS = (
    "quarter", "region", "status", "peak_rps", "design_rps", "failover_rps", "headroom", "avg_prompt_tokens",
    "avg_output_tokens", "candidate", "hardware", "tensor_parallel_size", "quantization", "max_num_seqs",
    "replicas", "gpus", "analytic_estimate_replicas", "batching_factor", "ttft_p50_ms", "ttft_p99_ms", "tpot_p99_ms",
    "e2e_p99_ms", "slo_attainment", "dropped", "slo_worst_ratio", "stable", "backlog_growth_fraction", "utilization",
    "saturation_rps_per_replica", "rtt_ms", "worst_case", "price_per_gpu_hour",
    "price_multiplier", "cost_per_hour", "gpu_hours", "cost_per_quarter", "cost_per_million_tokens",
    "binding_constraint", "minus_one_check", "replications", "seed_spread", "simulations", "replicas_tried", "seed")


def _candidates_frame(loaded: LoadedPlan, rows: list[dict[str, Any]]) -> pd.DataFrame:
    keys = zip(loaded.forecast["quarter"], loaded.forecast["region"], strict=True)
    order = {(str(q), r): i for i, (q, r) in enumerate(keys)}
    cand_order = {c.name: i for i, c in enumerate(loaded.config.candidates)}
    df = pd.DataFrame(rows)
    df = df.iloc[sorted(range(len(df)), key=lambda i: (order[(df["quarter"].iat[i], df["region"].iat[i])],
                                                        cand_order[df["candidate"].iat[i]]))].reset_index(drop=True)
    ok = df["status"] == "ok"
    # An infeasible search has no verified count: its replica figures stay empty.
    df["replicas"] = df["replicas"].where(ok).astype("Int64")
    # Share of the simulated saturation throughput the design load uses (an engine with continuous
    # batching is "busy" at almost any load, so the busy fraction says nothing); the search never
    # accepts a count at 100% or more.
    df["utilization"] = df["design_rps"] / (df["replicas"].astype(float) * df["saturation_rps_per_replica"])
    df["gpus"] = (df["replicas"] * df["tensor_parallel_size"]).astype("Int64")
    df["cost_per_hour"] = (df["gpus"].astype(float) * df["price_per_gpu_hour"] * df["price_multiplier"])
    df["gpu_hours"] = df["gpus"].astype(float) * HOURS_PER_QUARTER
    df["cost_per_quarter"] = df["cost_per_hour"] * HOURS_PER_QUARTER
    tokens_per_hour = df["peak_rps"] * (df["avg_prompt_tokens"] + df["avg_output_tokens"]) * 3600.0
    df["cost_per_million_tokens"] = df["cost_per_hour"] / (tokens_per_hour / 1e6)
    return df[list(WORKSHEET_COLUMNS)]


def _worksheet(loaded: LoadedPlan, candidates: pd.DataFrame) -> pd.DataFrame:
    rank = {c.name: i for i, c in enumerate(loaded.config.candidates)}
    picked = []
    for _, cell in candidates.groupby(["quarter", "region"], sort=False):
        ok = cell[cell["status"] == "ok"]
        if len(ok):
            key = ok.assign(_r=ok["candidate"].map(rank)).sort_values(["cost_per_hour", "gpus", "_r"], kind="stable")
            picked.append(key.index[0])
        else:   # no candidate meets the SLO: show the one that came closest, marked infeasible
            picked.append(cell["slo_worst_ratio"].idxmin())
    return candidates.loc[picked].reset_index(drop=True)


def _totals(ws: pd.DataFrame) -> pd.DataFrame:
    g = ws.groupby("quarter", sort=False)
    out = pd.DataFrame({
        "regions": g.size(), "peak_rps": g["peak_rps"].sum(), "gpus": g["gpus"].sum(min_count=1),
        "replicas": g["replicas"].sum(min_count=1), "gpu_hours": g["gpu_hours"].sum(min_count=1),
        "cost_per_hour": g["cost_per_hour"].sum(min_count=1),
        "cost_per_quarter": g["cost_per_quarter"].sum(min_count=1),
        "infeasible_cells": g["status"].apply(lambda s: int((s != "ok").sum())),
    }).reset_index()
    return out
