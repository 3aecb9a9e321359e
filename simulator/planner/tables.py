"""The plan's tables from its searches' rows: every candidate priced by the GPU-hours its fleet runs
(:mod:`simulator.planner.fleet_hours`), the cheapest per cell (the worksheet), the finance worksheet
(``worksheet.csv``, rounded for money) and the totals per quarter, per region and overall."""
from __future__ import annotations

import math
from typing import Any

import pandas as pd

from simulator.planner.config import LoadedPlan
from simulator.planner.fleet_hours import autoscale_policy, fleet_day

WORKSHEET_COLUMNS = (
    "quarter", "region", "status", "peak_rps", "design_rps", "failover_rps", "headroom", "avg_prompt_tokens",
    "avg_output_tokens", "candidate", "hardware", "tensor_parallel_size", "quantization", "max_num_seqs",
    "replicas", "gpus", "pool_replicas", "pool_gpus", "analytic_estimate_replicas", "batching_factor", "ttft_p50_ms",
    "ttft_p99_ms", "tpot_p99_ms", "e2e_p99_ms", "ttua_p99_ms", "task_ttua_p99_ms", "stage_workers",
    "slo_attainment", "dropped", "slo_worst_ratio", "stable",
    "backlog_growth_fraction", "utilization", "saturation_rps_per_replica", "pool_share", "pool_utilization",
    "pool_saturation_rps_per_replica", "rtt_ms", "worst_case", "price_per_gpu_hour",
    "price_multiplier", "cost_per_hour", "gpu_hours", "cost_per_quarter", "cost_per_million_tokens",
    "binding_constraint", "minus_one_check", "replications", "replications_reason", "seed_spread", "simulations",
    "replicas_tried", "seed")


FLEET_COLUMNS = (
    "forecast_avg_prompt_tokens", "forecast_avg_output_tokens", "tokens_in_per_day", "tokens_out_per_day",
    "provisioning", "autoscaler", "replicas_needed_by_hour", "replicas_paid_by_hour", "replica_hours_per_day",
    "gpus_avg", "gpus_max_provisioned", "gpu_hours_at_peak", "cost_per_quarter_at_peak", "currency",
    "price_source", "period_hours", "gpus_reserved", "reserved_gpu_hours", "on_demand_gpu_hours",
    "reserved_price_per_gpu_hour", "reserved_cost_per_quarter", "on_demand_cost_per_quarter", "gpu_cost_per_quarter",
    "requests_per_quarter", "successful_requests_per_quarter", "cost_per_successful_request", "chosen")
"""Columns the candidates file has after :data:`WORKSHEET_COLUMNS` (fleet-hours, volumes, pricing); with
``pricing.hosts`` or ``pricing.egress``, ``host_hours, host_cost_per_quarter`` and ``egress_gb,
egress_cost_per_quarter`` follow; any further key of the search's rows follows them unchanged."""

COST_LINE_COLUMNS = ("host_hours", "host_cost_per_quarter", "egress_gb", "egress_cost_per_quarter")


def candidates_frame(loaded: LoadedPlan, rows: list[dict[str, Any]]) -> pd.DataFrame:
    keys = zip(loaded.forecast["quarter"], loaded.forecast["region"], strict=True)
    order = {(str(q), r): i for i, (q, r) in enumerate(keys)}
    cand_order = {c.name: i for i, c in enumerate(loaded.config.candidates)}
    df = pd.DataFrame(rows)
    df = df.iloc[sorted(range(len(df)), key=lambda i: (order[(df["quarter"].iat[i], df["region"].iat[i])],
                                                        cand_order[df["candidate"].iat[i]]))].reset_index(drop=True)
    policies = {name: autoscale_policy(sc) for name, sc in loaded.candidate_scenarios.items()}
    for i in df.index:   # an autoscaler capped below the verified peak cannot serve it
        pol = policies[df.at[i, "candidate"]]
        if pol is not None and df.at[i, "status"] == "ok" and df.at[i, "replicas"] > pol.max_replicas:
            df.at[i, "status"] = "infeasible"
            df.at[i, "binding_constraint"] = (
                f"deployment.autoscaler.max_replicas={pol.max_replicas} is below the "
                f"{int(df.at[i, 'replicas'])} replicas verified at the design peak")
    ok = df["status"] == "ok"
    # An infeasible search has no verified count: its replica figures stay empty.
    df["replicas"] = df["replicas"].where(ok).astype("Int64")
    df["gpus"] = df["gpus"].where(ok).astype("Int64")          # with pools, the sum over the pools
    # Share of the simulated saturation throughput the design load uses (an engine with continuous
    # batching is "busy" at almost any load, so the busy fraction says nothing); the search never
    # accepts a count at 100% or more. With pools: the busiest pool's.
    df["utilization"] = df["utilization"].astype(float).where(ok)
    price = df["price_per_gpu_hour"] * df["price_multiplier"]
    df["cost_per_hour"] = df["gpus"].astype(float) * price           # the peak fleet's hourly rate
    days = [_fleet_day(loaded, policies, r) for r in df.to_dict("records")]
    hours = df["quarter"].map(lambda q: loaded.periods[str(q)].hours).astype(float)
    period_days = hours / 24.0
    df["period_hours"] = hours
    # The day's real volume: the forecast peak through the shape (flat at the peak without one), at the
    # forecast's mean lengths (the simulated distribution's mean where the forecast gives none).
    records = df.to_dict("records")
    traffic_h = pd.Series([_traffic_hours(loaded, r) for r in records], index=df.index, dtype=float)
    prompt = df["forecast_avg_prompt_tokens"].astype(float).fillna(df["avg_prompt_tokens"])
    output = df["forecast_avg_output_tokens"].astype(float).fillna(df["avg_output_tokens"])
    df["tokens_in_per_day"] = df["peak_rps"] * 3600.0 * traffic_h * prompt
    df["tokens_out_per_day"] = df["peak_rps"] * 3600.0 * traffic_h * output
    df["provisioning"] = [d[0].provisioning if d else _provisioning(loaded, policies, r)
                          for d, r in zip(days, records, strict=True)]
    df["autoscaler"] = [p.describe() if p is not None else "none" for p in (policies[c] for c in df["candidate"])]
    df["replicas_needed_by_hour"] = [" ".join(map(str, d[0].needed)) if d else "" for d in days]
    df["replicas_paid_by_hour"] = [" ".join(f"{x:.4g}" for x in d[0].hourly) if d else "" for d in days]
    df["replica_hours_per_day"] = [d[0].replica_hours if d else math.nan for d in days]
    gpu_hours_per_day = df["replica_hours_per_day"] * [d[1] if d else math.nan for d in days]
    df["gpu_hours"] = gpu_hours_per_day * period_days
    df["gpus_avg"] = gpu_hours_per_day / 24.0
    df["gpus_max_provisioned"] = pd.array([round(d[0].max_replicas * d[1]) if d else None for d in days],
                                          dtype="Int64")
    df["gpu_hours_at_peak"] = df["gpus"].astype(float) * hours
    df["cost_per_quarter_at_peak"] = df["cost_per_hour"] * hours
    _price_the_hours(loaded, df, days, period_days)
    df["requests_per_quarter"] = df["peak_rps"] * 3600.0 * traffic_h * period_days
    # Requests within every SLO: the share the design-peak runs met (dropped ones count as misses).
    df["successful_requests_per_quarter"] = df["requests_per_quarter"] * df["slo_attainment"].astype(float).where(ok)
    df["cost_per_successful_request"] = df["cost_per_quarter"] / df["successful_requests_per_quarter"]
    tokens_per_quarter = (df["tokens_in_per_day"] + df["tokens_out_per_day"]) * period_days
    df["cost_per_million_tokens"] = df["cost_per_quarter"] / (tokens_per_quarter / 1e6)
    df["chosen"] = False
    lines = [c for c in COST_LINE_COLUMNS if c in df.columns]
    extra = [c for c in df.columns if c not in WORKSHEET_COLUMNS and c not in FLEET_COLUMNS and c not in lines]
    return df[list(WORKSHEET_COLUMNS) + list(FLEET_COLUMNS) + lines + extra]


def _price_the_hours(loaded: LoadedPlan, df: pd.DataFrame, days: list[Any], period_days: pd.Series) -> None:
    """The cost columns: GPU-hours split into reserved (``pricing.reserve``: the day's floor or the peak,
    paid all period) and on-demand (the hours the fleet runs above it), each at its price; hosts and egress
    when the plan prices them; ``cost_per_quarter`` their sum."""
    pricing = loaded.config.pricing
    cands = {c.name: c for c in loaded.config.candidates}
    mult = df["price_multiplier"].astype(float)
    on_demand = df["price_per_gpu_hour"].astype(float)
    quoted = df["candidate"].map(lambda c: cands[c].reserved_price_per_gpu_hour).astype(float)
    df["reserved_price_per_gpu_hour"] = quoted.fillna(on_demand * (1.0 - pricing.reserved_discount))
    gpus = df["gpus"].astype(float)
    if pricing.reserve == "peak":
        reserved = gpus
    else:   # the fewest replicas paid in any hour (whole replicas), in GPUs
        reserved = pd.Series([math.floor(min(d[0].hourly) + 1e-9) * d[1] if d else math.nan for d in days],
                             index=df.index, dtype=float)
    df["gpus_reserved"] = reserved.round().astype("Int64")
    hours = period_days * 24.0
    df["reserved_gpu_hours"] = reserved * hours
    df["on_demand_gpu_hours"] = (df["gpu_hours"] - df["reserved_gpu_hours"]).clip(lower=0.0)
    df["reserved_cost_per_quarter"] = df["reserved_gpu_hours"] * df["reserved_price_per_gpu_hour"] * mult
    df["on_demand_cost_per_quarter"] = df["on_demand_gpu_hours"] * on_demand * mult
    df["gpu_cost_per_quarter"] = df["reserved_cost_per_quarter"] + df["on_demand_cost_per_quarter"]
    cost = df["gpu_cost_per_quarter"].copy()
    ok = df["status"] == "ok"
    if pricing.hosts is not None:   # whole hosts each hour, for the GPUs held then (reserved ones included)
        per_host = pricing.hosts.gpus_per_host
        host_hours_per_day = [sum(math.ceil(max(x * d[1], r) / per_host - 1e-9) for x in d[0].hourly) if d else math.nan
                              for d, r in zip(days, reserved.fillna(0.0), strict=True)]
        df["host_hours"] = pd.Series(host_hours_per_day, index=df.index, dtype=float) * period_days
        df["host_cost_per_quarter"] = df["host_hours"] * pricing.hosts.price_per_host_hour
        cost = cost + df["host_cost_per_quarter"]
    if pricing.egress is not None:  # the responses' bytes, from the region's own output tokens
        gb = df["tokens_out_per_day"] * period_days * pricing.egress.bytes_per_output_token / 1e9
        df["egress_gb"] = gb.where(ok)
        df["egress_cost_per_quarter"] = df["egress_gb"] * pricing.egress.price_per_gb
        cost = cost + df["egress_cost_per_quarter"]
    df["cost_per_quarter"] = cost


def _fleet_day(loaded: LoadedPlan, policies: dict[str, Any], row: dict[str, Any]) -> tuple[Any, float] | None:
    """The row's representative day and its GPUs per replica (TP; with pools, which run a fixed fleet, the
    total GPUs over the total replicas), or None for a row without a verified count."""
    if row["status"] != "ok" or pd.isna(row["replicas"]):
        return None
    shape = loaded.diurnal.get((str(row["quarter"]), row["region"]))
    day = fleet_day(int(row["replicas"]), shape, policies[row["candidate"]])
    return day, int(row["gpus"]) / int(row["replicas"])


def _traffic_hours(loaded: LoadedPlan, row: dict[str, Any]) -> float:
    shape = loaded.diurnal.get((str(row["quarter"]), row["region"]))
    return 24.0 if shape is None else float(sum(shape))


def _provisioning(loaded: LoadedPlan, policies: dict[str, Any], row: dict[str, Any]) -> str:
    if loaded.diurnal.get((str(row["quarter"]), row["region"])) is None:
        return "peak"
    return "static" if policies[row["candidate"]] is None else "diurnal"


def worksheet_frame(loaded: LoadedPlan, candidates: pd.DataFrame) -> pd.DataFrame:
    """The cheapest candidate per cell: least cost paid per quarter (the provisioned GPU-hours), then fewest
    peak GPUs, then the candidate listed first; marks it ``chosen`` in ``candidates``."""
    rank = {c.name: i for i, c in enumerate(loaded.config.candidates)}
    picked = []
    for _, cell in candidates.groupby(["quarter", "region"], sort=False):
        ok = cell[cell["status"] == "ok"]
        if len(ok):
            key = ok.assign(_r=ok["candidate"].map(rank)).sort_values(["cost_per_quarter", "gpus", "_r"],
                                                                      kind="stable")
            picked.append(key.index[0])
        else:   # no candidate meets the SLO: show the one that came closest, marked infeasible
            picked.append(cell["slo_worst_ratio"].idxmin())
    candidates.loc[picked, "chosen"] = True
    return candidates.loc[picked].reset_index(drop=True)


def finance_decimals(currency: str) -> dict[str, int]:
    """Decimals of each number column of the finance files (``worksheet.csv`` and its totals): the values
    are rounded to them and written with exactly that many (``2160.0``, ``23232.30``); whole counts
    (GPUs, cells) are integers. Token and request volumes are in millions."""
    c = currency.lower()
    out = {"peak_rps": 2, "design_rps": 2, "avg_prompt_tokens": 1, "avg_output_tokens": 1,
           "requests_millions": 3, "successful_requests_millions": 3, "tokens_in_millions": 3,
           "tokens_out_millions": 3, "batching_factor": 1, "gpus_avg": 2, "period_hours": 1, "gpu_hours": 1,
           "reserved_gpu_hours": 1, "on_demand_gpu_hours": 1, "host_hours": 1, "egress_gb": 1,
           f"price_per_gpu_hour_{c}": 4, f"reserved_price_per_gpu_hour_{c}": 4, f"{c}_per_1m_tokens": 4,
           f"{c}_per_successful_request": 8, "slo_attainment_pct": 2, "utilization_pct": 2}
    for line in ("reserved_cost", "on_demand_cost", "host_cost", "egress_cost", "cost"):
        out[f"{line}_{c}"] = 2
    return out


def _rounded(frame: pd.DataFrame, decimals: dict[str, int]) -> pd.DataFrame:
    for col, d in decimals.items():
        if col in frame.columns:
            frame[col] = pd.to_numeric(frame[col], errors="coerce").astype(float).round(d)
    frame.attrs["decimals"] = {k: v for k, v in decimals.items() if k in frame.columns}
    return frame


def summary_frame(loaded: LoadedPlan, ws: pd.DataFrame) -> pd.DataFrame:
    """The finance worksheet: one row per quarter x region, units (and the plan's currency) in the headers,
    the forecast's own numbers, percents as percents, every number rounded to its column's decimals
    (:func:`finance_decimals`); ``cost`` is the sum of the rounded cost lines, so the row adds up."""
    cur = loaded.config.currency.lower()
    periods = [loaded.periods[str(q)] for q in ws["quarter"]]
    mult = ws["price_multiplier"].astype(float)
    out = pd.DataFrame({
        "quarter": ws["quarter"], "region": ws["region"], "status": ws["status"],
        "candidate": ws["candidate"], "hardware": ws["hardware"],
        "period_start": [p.start.isoformat() if p.start else "" for p in periods],
        "period_end": [p.end.isoformat() if p.end else "" for p in periods],
        "period_source": [p.source for p in periods], "period_hours": ws["period_hours"],
        "peak_rps": ws["peak_rps"], "design_rps": ws["design_rps"],
        "avg_prompt_tokens": _given(ws, "avg_prompt_tokens"),
        "avg_output_tokens": _given(ws, "avg_output_tokens"),
        "requests_millions": ws["requests_per_quarter"] / 1e6,
        "successful_requests_millions": ws["successful_requests_per_quarter"] / 1e6,
        "tokens_in_millions": ws["tokens_in_per_day"] * ws["period_hours"] / 24 / 1e6,
        "tokens_out_millions": ws["tokens_out_per_day"] * ws["period_hours"] / 24 / 1e6,
        "batching_factor": ws["batching_factor"].astype(float),
        "gpus_peak": ws["gpus"], "gpus_reserved": ws["gpus_reserved"], "provisioning": ws["provisioning"],
        "gpus_avg": ws["gpus_avg"], "gpu_hours": ws["gpu_hours"],
        "reserved_gpu_hours": ws["reserved_gpu_hours"], "on_demand_gpu_hours": ws["on_demand_gpu_hours"],
        f"price_per_gpu_hour_{cur}": ws["price_per_gpu_hour"] * mult,
        f"reserved_price_per_gpu_hour_{cur}": ws["reserved_price_per_gpu_hour"] * mult,
        "price_source": ws["price_source"],
        f"reserved_cost_{cur}": ws["reserved_cost_per_quarter"],
        f"on_demand_cost_{cur}": ws["on_demand_cost_per_quarter"],
    })
    lines = [f"reserved_cost_{cur}", f"on_demand_cost_{cur}"]
    if "host_cost_per_quarter" in ws:
        out["host_hours"], out[f"host_cost_{cur}"] = ws["host_hours"], ws["host_cost_per_quarter"]
        lines.append(f"host_cost_{cur}")
    if "egress_cost_per_quarter" in ws:
        out["egress_gb"], out[f"egress_cost_{cur}"] = ws["egress_gb"], ws["egress_cost_per_quarter"]
        lines.append(f"egress_cost_{cur}")
    decimals = finance_decimals(cur)
    _rounded(out, decimals)
    out[f"cost_{cur}"] = out[lines].sum(axis=1, min_count=len(lines))
    tokens = out["tokens_in_millions"] + out["tokens_out_millions"]
    out[f"{cur}_per_1m_tokens"] = out[f"cost_{cur}"] / tokens
    out[f"{cur}_per_successful_request"] = out[f"cost_{cur}"] / (out["successful_requests_millions"] * 1e6)
    out["slo_attainment_pct"] = 100 * ws["slo_attainment"].astype(float)
    out["utilization_pct"] = 100 * ws["utilization"].astype(float)
    return _rounded(out, decimals)


def _given(ws: pd.DataFrame, column: str) -> pd.Series:
    """The forecast's mean as given; the simulated distribution's where it gives none."""
    return ws[f"forecast_{column}"].astype(float).fillna(ws[column])


def totals_frame(loaded: LoadedPlan, summary: pd.DataFrame) -> pd.DataFrame:
    """Rows per quarter (all regions), per region (all quarters) and overall, from the worksheet's rounded
    figures (so they add up to what it shows). Sums of GPU-hours, costs, requests and tokens; ``gpus_peak``,
    ``gpus_reserved`` and ``peak_rps`` add up over regions within a quarter and take the largest quarter
    across quarters (the fleet to buy); cost per 1M tokens and per successful request are the total cost
    over the feasible cells' totals."""
    cur = loaded.config.currency.lower()
    s = summary.assign(bad=(summary["status"] != "ok").astype(int))
    costs = [c for c in (f"reserved_cost_{cur}", f"on_demand_cost_{cur}", f"host_cost_{cur}",
                         f"egress_cost_{cur}", f"cost_{cur}") if c in s]
    sums = ["gpu_hours", "reserved_gpu_hours", "on_demand_gpu_hours",
            *(c for c in ("host_hours", "egress_gb") if c in s), *costs,
            "requests_millions", "successful_requests_millions", "tokens_in_millions", "tokens_out_millions"]
    hours = {str(q): p.hours for q, p in loaded.periods.items()}

    def row(quarter: str, region: str, part: pd.DataFrame, by_quarter: pd.DataFrame) -> dict[str, Any]:
        ok = part[part["status"] == "ok"]
        out: dict[str, Any] = {
            "quarter": quarter, "region": region, "cells": len(part), "infeasible_cells": int(part["bad"].sum()),
            "period_hours": sum(hours[str(q)] for q in part["quarter"].unique()),
            "peak_rps": by_quarter["peak_rps"].max(), "gpus_peak": by_quarter["gpus_peak"].max(),
            "gpus_reserved": by_quarter["gpus_reserved"].max()}
        out.update({c: part[c].sum(min_count=1) for c in sums})
        cost, tokens = out[f"cost_{cur}"], ok["tokens_in_millions"].sum() + ok["tokens_out_millions"].sum()
        good = ok["successful_requests_millions"].sum()
        out[f"{cur}_per_1m_tokens"] = cost / tokens if tokens > 0 else math.nan
        out[f"{cur}_per_successful_request"] = cost / (good * 1e6) if good > 0 else math.nan
        return out

    def per_quarter(part: pd.DataFrame) -> pd.DataFrame:
        return part.groupby("quarter", sort=False)[["peak_rps", "gpus_peak", "gpus_reserved"]].sum(min_count=1)

    rows = [row(str(q), "all regions", part, per_quarter(part)) for q, part in s.groupby("quarter", sort=False)]
    for r, part in s.groupby("region", sort=False):
        rows.append(row("all quarters", str(r), part, part))
    rows.append(row("all quarters", "all regions", s, per_quarter(s)))
    out = pd.DataFrame(rows)
    for col in ("gpus_peak", "gpus_reserved"):
        out[col] = pd.to_numeric(out[col], errors="coerce").round(0).astype("Int64")
    return _rounded(out, finance_decimals(cur))
