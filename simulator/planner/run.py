"""``plan(plan)``: GPUs per region per quarter under p99 SLOs, as DataFrames.

For each forecast cell (quarter x region) the design load is the forecast peak, plus (with N+1
failover) the largest share of any one other region's peak that would be redirected here if that
region went down, times ``1 + headroom``. Every candidate is searched for its minimum replica
count at that load (:mod:`simulator.planner.search`; with model pools, a count per pool:
:mod:`simulator.planner.pool_search`; one task per cell and candidate, run on the chosen executor)
and the cell takes the cheapest candidate that meets the SLO. The verified count is
the peak fleet; :mod:`simulator.planner.fleet_hours` turns it, the region's diurnal shape and the
candidate's autoscaler into the GPU-hours paid, which price the cell.
"""
from __future__ import annotations

import dataclasses
import math
import time
from collections.abc import Callable, Iterator
from concurrent.futures import FIRST_COMPLETED, Executor, Future, wait
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pandas as pd

from simulator.cluster.network import network_from_clients
from simulator.cluster.request_path import stage_workers_text
from simulator.errors import ScenarioError
from simulator.planner.backends import executor_slots, open_executor, start_workers
from simulator.planner.capacity import capacity_bound, saturation_key, saturation_rps
from simulator.planner.config import LoadedPlan, PlanConfig, load_plan
from simulator.planner.fleet_hours import autoscale_policy, fleet_day
from simulator.planner.periods import AVERAGE_QUARTER_HOURS
from simulator.planner.pool_search import search_pools
from simulator.planner.search import AUTO_REPLICATIONS, SearchTask, one_replica, pruned_row, search_replicas
from simulator.run.resolve import resolve
from simulator.scenario.config import GammaArrival, PoissonArrival, Scenario, check_span, scenario_from_dict
from simulator.workload.lengths import make_length
from simulator.workload.prefix import requests_per_session

HOURS_PER_QUARTER = AVERAGE_QUARTER_HOURS
"""The average quarter's hours (a quarter label that names no calendar quarter: :mod:`simulator.planner.periods`)."""


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
    """One row per quarter x region: the cheapest candidate meeting the SLO (or why none does), with
    every engineering column (the chosen rows of ``candidates``)."""
    candidates: pd.DataFrame
    """One row per quarter x region x candidate: every search's answer (``chosen`` marks the pick)."""
    totals: pd.DataFrame
    """Per quarter (all regions), per region (all quarters) and overall: GPUs, GPU-hours, cost, tokens."""
    wall_s: float
    summary: pd.DataFrame | None = None
    """The finance worksheet (``worksheet.csv``): one row per quarter x region, units in the headers."""
    assumptions: dict[str, Any] | None = None
    """What the numbers rest on (``worksheet-assumptions.yaml``): :func:`plan_assumptions`."""


def plan(plan_config: LoadedPlan | PlanConfig | str | Path | dict[str, Any], *,
         on_progress: Callable[[PlanProgress], None] | None = None, backend: str = "local",
         workers: int | None = None, address: str | None = None, timeout_s: float = 10.0) -> PlanResult:
    """Size every forecast cell; see the module docstring.

    Raises:
        ScenarioError: a bad plan (before anything runs) or an unreachable cluster.
    """
    wall0 = time.perf_counter()
    loaded = _as_loaded(plan_config)
    per_cell: dict[tuple[str, str], int] = {}
    rows: list[dict[str, Any]] = []
    searches = len(loaded.forecast) * len(loaded.config.candidates)   # no more workers than searches
    with open_executor(backend, workers=workers, address=address, timeout_s=timeout_s, max_tasks=searches) as ex:
        start_workers(ex, _ready)       # their imports overlap the building of the searches
        tasks = _with_saturations(ex, build_tasks(loaded))
        for done, row in enumerate(_longest_first(ex, tasks, CellCosts(loaded, tasks)), 1):
            rows.append(row)
            key = (row["quarter"], row["region"])
            per_cell[key] = per_cell.get(key, 0) + 1
            if on_progress is not None:
                on_progress(PlanProgress(row["quarter"], row["region"], row["candidate"], row["status"],
                                         row["replicas"] if row["status"] == "ok" else None,
                                         per_cell[key], len(loaded.config.candidates), done, len(tasks)))
    candidates = _candidates_frame(loaded, rows)
    worksheet = _worksheet(loaded, candidates)
    summary = _summary(loaded, worksheet)
    return PlanResult(worksheet, candidates, _totals(loaded, summary), time.perf_counter() - wall0, summary,
                      plan_assumptions(loaded, worksheet))


def _with_saturations(ex: Executor, tasks: list[SearchTask]) -> list[SearchTask]:
    """The tasks with one replica's saturation throughput simulated once per distinct scenario, on the
    executor, before the searches (cells of one candidate often differ only in the arrival rate, which
    the saturated run overrides: 24 distinct of the FY27 example's 36 searches)."""
    keys: dict[str, Future] = {}
    per_task: list[str | None] = []
    for task in tasks:
        if task.scenario.deployment.pools or not task.design_rps or task.saturation_rps is not None:
            per_task.append(None)
            continue
        one = one_replica(task)
        key = saturation_key(one)
        if key not in keys:
            keys[key] = ex.submit(_in_cell, cell_where(task.quarter, task.region, task.candidate), saturation_rps, one)
        per_task.append(key)
    return [task if key is None else dataclasses.replace(task, saturation_rps=keys[key].result())
            for task, key in zip(tasks, per_task, strict=True)]


def _ready() -> None:
    """A local worker's first task: importing this module (to unpickle it) is the work."""


def _search(task: SearchTask) -> dict[str, Any]:
    return _in_cell(cell_where(task.quarter, task.region, task.candidate),
                    search_pools if task.scenario.deployment.pools else search_replicas, task)


def cell_where(quarter: str, region: str, candidate: str) -> str:
    """How an error names the cell and candidate it arose in."""
    return f"forecast (quarter {quarter}, region {region}), candidate {candidate}"


def _in_cell(where: str, fn: Callable[..., Any], *args: Any) -> Any:
    """``fn(*args)``, a refusal of the cell's simulation (a workload it cannot draw, say) naming the cell."""
    try:
        return fn(*args)
    except ScenarioError as exc:
        hint = ("; the planner sets warmup_s and cooldown_s to simulation.warmup_fraction and cooldown_fraction "
                "of the cell's run") if exc.field.startswith(("warmup_s", "cooldown_s")) else ""
        raise ScenarioError(f"{where}: {exc.field}", exc.value, exc.message + hint) from None


class CellCosts:
    """Which searches a cell needs. A candidate's cost per quarter can only rise with its replica count
    (:func:`simulator.planner.fleet_hours.fleet_day`), and no count at or above 100% of its simulated
    saturation throughput passes, so ``floor(design / saturation) + 1`` replicas bound its cost from below.
    A cell's candidates are searched cheapest bound first, each once those before it have ended; one whose
    bound costs more than a candidate already verified in the cell is not searched (status ``pruned``),
    since it could not be chosen. The order and the decisions depend on the tasks alone, so every plan run
    gives the same rows."""

    def __init__(self, loaded: LoadedPlan, tasks: list[SearchTask]) -> None:
        self.loaded, self.tasks = loaded, tasks
        self.policies = {name: autoscale_policy(sc) for name, sc in loaded.candidate_scenarios.items()}
        self.bound = [self._bound(t) for t in tasks]
        cells: dict[tuple[str, str], list[int]] = {}
        for i, t in enumerate(tasks):
            cells.setdefault((t.quarter, t.region), []).append(i)
        self.queue = {cell: sorted(ix, key=lambda i: (self.bound[i][1], i)) for cell, ix in cells.items()}
        self.best: dict[tuple[str, str], tuple[float, str]] = {}

    def quarter_cost(self, task: SearchTask, replicas: int) -> float:
        """What ``replicas`` of the task's candidate cost in its cell per quarter (the candidates frame's
        ``cost_per_quarter``: the fleet-hours model's replica-hours at the GPU price)."""
        day = fleet_day(replicas, self.loaded.diurnal.get((task.quarter, task.region)), self.policies[task.candidate])
        price = task.meta["price_per_gpu_hour"] * task.meta["price_multiplier"]
        period_days = self.loaded.periods[task.quarter].hours / 24.0
        return day.replica_hours * task.scenario.deployment.gpus_per_replica * period_days * price

    def _exact(self) -> bool:
        """Whether :meth:`quarter_cost` is the worksheet's ``cost_per_quarter`` (GPU-hours at one price: no
        reserved discount, host or egress line); only then are candidates pruned."""
        pricing = self.loaded.config.pricing
        return (pricing.reserved_discount == 0 and pricing.hosts is None and pricing.egress is None
                and all(c.reserved_price_per_gpu_hour is None for c in self.loaded.config.candidates))

    def _bound(self, task: SearchTask) -> tuple[int, float]:
        sat = task.saturation_rps
        if (task.scenario.deployment.pools or not task.design_rps or not sat
                or self.loaded.config.simulation.search_all_candidates or not self._exact()):
            return 0, 0.0                       # model pools: no single count to bound (always searched)
        n = max(1, math.floor(task.design_rps / sat) + 1)
        return n, self.quarter_cost(task, n)

    def first(self) -> list[int]:
        """The first search of every cell."""
        return [ix[0] for ix in self.queue.values()]

    def done(self, i: int, row: dict[str, Any]) -> tuple[list[int], list[dict[str, Any]]]:
        """Search ``i`` ended with ``row``: the cell's next search to start (if any) and the rows of the
        candidates pruned before it."""
        task = self.tasks[i]
        cell = (task.quarter, task.region)
        pol = self.policies[task.candidate]
        if (row["status"] == "ok" and not task.scenario.deployment.pools
                and (pol is None or row["replicas"] <= pol.max_replicas)):
            cost = self.quarter_cost(task, row["replicas"])
            if cell not in self.best or cost < self.best[cell][0]:
                self.best[cell] = (cost, task.candidate)
        queue = self.queue[cell]
        queue.remove(i)
        pruned: list[dict[str, Any]] = []
        while queue:
            j = queue[0]
            n, bound = self.bound[j]
            if cell not in self.best or not bound > self.best[cell][0]:
                return [j], pruned
            queue.pop(0)
            cost, by = self.best[cell]
            currency = self.loaded.config.currency
            pruned.append(pruned_row(self.tasks[j], f"not searched: even {n} replicas (the fewest below 100% of the "
                                     f"simulated saturation throughput) cost {bound:,.0f} {currency} per quarter, "
                                     f"more than {by} verified at {cost:,.0f}"))
        return [], pruned


def _longest_first(ex: Executor, tasks: list[SearchTask], cells: CellCosts) -> Iterator[dict[str, Any]]:
    """Run the searches, yielding each row as it ends (and the rows of the candidates :class:`CellCosts`
    prunes). With a known number of workers, only that many run at once and the next one comes from the
    candidate whose searches have taken longest so far (those not seen yet first, in plan order): a plan's
    slowest searches, often one candidate's, then start early instead of ending it alone on one worker.
    Every search is a pure function of its task, so the rows are the same in any order."""
    slots = executor_slots(ex)
    pending = cells.first()
    took: dict[str, list[float]] = {}
    running: dict[Future, tuple[int, float]] = {}

    def start_next() -> None:
        def slowness(i: int) -> float:
            seen = took.get(tasks[i].candidate)
            return math.inf if not seen else sum(seen) / len(seen)
        i = max(pending, key=lambda j: (slowness(j), -j))
        pending.remove(i)
        running[ex.submit(_search, tasks[i])] = (i, time.perf_counter())

    while pending and (slots is None or len(running) < slots):
        start_next()
    while running:
        done, _ = wait(running, return_when=FIRST_COMPLETED)
        for fut in done:
            i, t0 = running.pop(fut)
            took.setdefault(tasks[i].candidate, []).append(time.perf_counter() - t0)
            row = fut.result()
            follow, pruned = cells.done(i, row)
            pending.extend(follow)
            while pending and (slots is None or len(running) < slots):
                start_next()
            yield row
            yield from pruned


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
                # With pools, each pool's search starts at its fewest replicas below saturation (pool_search.py).
                bound = capacity_bound(sc) if not sc.deployment.pools else None
                auto = cfg.simulation.replications == "auto"
                tasks.append(SearchTask(
                    quarter=str(q), region=r, candidate=cand.name, scenario=sc, mixes=tuple(cases), slo=slo,
                    start=bound.replicas_for(design) if bound else 1, max_replicas=cfg.simulation.max_replicas,
                    replications=AUTO_REPLICATIONS if auto else int(cfg.simulation.replications),
                    design_rps=design, auto_replications=auto, pool_prices=_pool_prices(sc, cand),
                    max_num_requests=cfg.simulation.run_cap,
                    meta=_meta(loaded, sc, cand, row, design, extra,
                               bound.max_rps_per_replica if bound else math.nan)))
    return tasks


def cell_scenario(base: Scenario, row: dict[str, Any], rate: float, cfg: PlanConfig, index: int) -> Scenario:
    """The candidate's scenario carrying the cell's traffic at ``rate`` requests/s (with sessions, ``rate``
    divided by the mean turns per session sessions/s: the forecast counts requests)."""
    if not isinstance(base.workload.arrival, (PoissonArrival, GammaArrival)):
        raise ScenarioError("scenario.workload.arrival.process", base.workload.arrival.process,
                            "the planner sizes for a steady peak: use poisson or gamma arrivals (the daily "
                            "curve goes in the plan: regions[].diurnal)")
    sim = cfg.simulation
    data = base.model_dump(mode="python", exclude_none=True)
    wl = data["workload"]
    wl["arrival"]["rate_per_s"] = rate
    if base.workload.sessions is not None:   # the arrival process starts sessions of several requests each
        wl["arrival"]["rate_per_s"] = rate / requests_per_session(base)
    check_span(sim.num_requests, wl["arrival"]["rate_per_s"], f"forecast (quarter {row['quarter']}, region "
               f"{row['region']}).peak_rps", row["peak_rps"], f"the {sim.num_requests:,} requests "
               f"(simulation.num_requests) of the cell's design load, {rate:.3g} requests/s,",
               "raise peak_rps or lower simulation.num_requests")
    for key, col in (("prompt_tokens", "avg_prompt_tokens"), ("output_tokens", "avg_output_tokens")):
        mean = row.get(col)
        if mean is not None and not (isinstance(mean, float) and math.isnan(mean)):
            wl[key] = _rescaled(dict(wl[key]), float(mean))
    span = sim.num_requests / rate
    data.update(num_requests=sim.num_requests, seed=sim.seed, warmup_s=sim.warmup_fraction * span,
                cooldown_s=sim.cooldown_fraction * span, slo={},
                name=f"{row['quarter']}/{row['region']}/{cfg.candidates[index].name}")
    data.pop("duration_s", None)     # the run length is simulation.num_requests
    # The search verifies a fixed count at the steady peak; the candidate's autoscaler is honoured by the
    # fleet-hours model (fleet_hours.py: min/max, scale-down delay, cold start, warm pool) on that count.
    data.get("deployment", {}).pop("autoscaler", None)
    # network, fleet and max_sim_time_s, which a cell cannot honour, load_plan refused (config.REPLACED).
    return _in_cell(cell_where(row["quarter"], row["region"], cfg.candidates[index].name), scenario_from_dict, data)


def _rescaled(dist: dict[str, Any], mean: float) -> dict[str, Any]:
    """The distribution with the forecast's mean (which :func:`load_plan` checked it can take)."""
    if dist["dist"] == "fixed":
        dist["value"] = max(1, int(round(mean)))
    else:
        dist["mean"] = mean
    return dist


def _pool_prices(sc: Scenario, cand: Any) -> dict[str, float]:
    """Price per GPU-hour of each pool: the candidate's quote for every GPU, else each pool's profile's."""
    if not sc.deployment.pools:
        return {}
    out = {}
    for pool, (_, system) in zip(sc.deployment.pools, resolve(sc).pools, strict=True):
        price = cand.price_per_gpu_hour if cand.price_per_gpu_hour is not None else system.profile.price_per_gpu_hour
        assert price is not None   # load_plan checks every pool has a price
        out[pool.name] = float(price)
    return out


def _per_pool(sc: Scenario, system: Any, value: Callable[[Scenario, Any], Any]) -> Any:
    """``value(scenario, system)``; with pools, the one value all pools share or ``small=x;large=y``."""
    if not sc.deployment.pools:
        return value(sc, system)
    values = {p.name: value(sub, sub_system) for p, (sub, sub_system) in zip(sc.deployment.pools, system.pools,
                                                                           strict=True)}
    if len(set(values.values())) == 1:
        return next(iter(values.values()))
    return ";".join(f"{name}={v}" for name, v in values.items())


def _meta(loaded: LoadedPlan, sc: Scenario, cand: Any, row: dict[str, Any], design: float, extra: float,
          mu: float) -> dict[str, Any]:
    system = resolve(sc)
    price = cand.price_per_gpu_hour if cand.price_per_gpu_hour is not None else system.profile.price_per_gpu_hour
    assert price is not None   # load_plan checks every candidate has a price (pools: pool_search sets the mean)
    region = loaded.regions[row["region"]]
    given = {col: (None if v is None or (isinstance(v, float) and math.isnan(v)) else float(v))
             for col in ("avg_prompt_tokens", "avg_output_tokens") for v in [row.get(col)]}
    prompt = make_length(sc.workload.prompt_tokens, sc, "workload.prompt_tokens").mean
    output = make_length(sc.workload.output_tokens, sc, "workload.output_tokens").mean
    return {
        "peak_rps": row["peak_rps"], "design_rps": design, "failover_rps": extra,
        "headroom": loaded.config.headroom, "avg_prompt_tokens": prompt, "avg_output_tokens": output,
        "hardware": _per_pool(sc, system, lambda _, sy: sy.profile.name),
        "tensor_parallel_size": _per_pool(sc, system, lambda s, _: s.deployment.tensor_parallel_size),
        "quantization": _per_pool(sc, system, lambda _, sy: sy.precision.quantization if sy.precision else "none"),
        "max_num_seqs": _per_pool(sc, system, lambda s, _: s.scheduler.max_num_seqs),
        "analytic_estimate_rps_per_replica": mu,
        "rtt_ms": region.rtt_ms[row["region"]], "price_per_gpu_hour": float(price),
        "price_multiplier": region.price_multiplier, "seed": sc.seed,
        "forecast_avg_prompt_tokens": given["avg_prompt_tokens"],
        "forecast_avg_output_tokens": given["avg_output_tokens"],
        "currency": loaded.config.currency,
        "price_source": "quoted" if cand.price_per_gpu_hour is not None else "assumed",
        "stage_workers": stage_workers_text(sc, design),
    }


# -- frames ------------------------------------------------------------------------------------------
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


def _candidates_frame(loaded: LoadedPlan, rows: list[dict[str, Any]]) -> pd.DataFrame:
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


def _worksheet(loaded: LoadedPlan, candidates: pd.DataFrame) -> pd.DataFrame:
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


def _summary(loaded: LoadedPlan, ws: pd.DataFrame) -> pd.DataFrame:
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


def _totals(loaded: LoadedPlan, summary: pd.DataFrame) -> pd.DataFrame:
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


# -- assumptions -------------------------------------------------------------------------------------
FAILOVER_RULES = {
    "none": "no failover capacity: each region is sized for its own peak only",
    "n_plus_one": "N+1: each region also carries its share (by peak) of any one other region's peak, the "
                  "largest such share over the regions that could fail; one region down at a time",
}


def serving_config_id(sc: Scenario) -> str:
    """A short digest of a candidate's serving scenario (traffic left out): equal when nothing a cell serves
    with changed, so a plan-to-plan comparison can tell a changed candidate from a renamed one."""
    import hashlib
    import json

    data = sc.model_dump(mode="json", exclude_none=True, exclude={"workload", "name", "seed", "num_requests"})
    return hashlib.sha256(json.dumps(data, sort_keys=True, default=str).encode()).hexdigest()[:12]


def _shape_name(spec: Any) -> Any:
    """A region's ``diurnal`` in words: a named shape, ``custom`` (24 values), None, or per quarter."""
    if isinstance(spec, dict):
        return {str(q): _shape_name(v) for q, v in spec.items()}
    return spec if isinstance(spec, (str, type(None))) else "custom (24 hourly multipliers)"


def plan_assumptions(loaded: LoadedPlan, ws: pd.DataFrame) -> dict[str, Any]:
    """What the worksheet's numbers rest on, as plain data (written as ``worksheet-assumptions.yaml`` and
    read back by ``llmplan plan --compare``): the SLO, headroom, failover rule, design rate of each cell,
    each candidate's prices (and where they come from) and autoscaler floor, the periods, which cells are
    costed flat at the peak, and the pricing of reserved and on-demand GPU-hours and the other cost lines."""
    cfg = loaded.config
    design: dict[str, dict[str, float]] = {}
    flat: dict[str, dict[str, str]] = {}
    for r in ws.to_dict("records"):
        q, region = str(r["quarter"]), str(r["region"])
        design.setdefault(q, {})[region] = round(float(r["design_rps"]), 4)
        if r["provisioning"] == "peak":
            flat.setdefault(q, {})[region] = "no diurnal shape: the peak fleet costed all day"
        elif r["provisioning"] == "static":
            flat.setdefault(q, {})[region] = (f"candidate {r['candidate']} has no autoscaler: its peak fleet "
                                              "runs all day")
    candidates: dict[str, Any] = {}
    for c in cfg.candidates:
        sc = loaded.candidate_scenarios[c.name]
        system = resolve(sc)
        auto = sc.deployment.autoscaler
        tp = sc.deployment.tensor_parallel_size
        candidates[c.name] = {
            "hardware": system.profile.name if not sc.deployment.pools else
            ";".join(f"{p.name}={sy.profile.name}" for p, (_, sy) in zip(sc.deployment.pools, system.pools,
                                                                         strict=True)),
            "price_per_gpu_hour": c.price_per_gpu_hour if c.price_per_gpu_hour is not None
            else system.profile.price_per_gpu_hour,
            "price_source": ("quoted in the plan" if c.price_per_gpu_hour is not None else
                             f"assumed: hardware profile {system.profile.name}'s list price (USD)"),
            "price_reference": c.price_reference,
            "reserved_price_per_gpu_hour": c.reserved_price_per_gpu_hour,
            "reserved_price_source": "quoted in the plan" if c.reserved_price_per_gpu_hour is not None else
            f"on-demand price less pricing.reserved_discount ({cfg.pricing.reserved_discount:g})",
            "autoscaler": "none: a fixed fleet, its peak count all day" if auto is None else
            {"min_replicas": auto.min_replicas, "max_replicas": auto.max_replicas,
             "floor_gpus": auto.min_replicas * tp, "warm_pool": auto.warm_pool,
             "scale_down_delay_s": auto.scale_down_delay_s},
            "serving_config_id": serving_config_id(sc),
        }
    pricing = cfg.pricing.model_dump(mode="json", exclude_none=True)
    return {
        "plan": cfg.name,
        "currency": cfg.currency,
        "slo": cfg.slo.model_dump(mode="json", exclude_none=True),
        "slo_note": "client-perceived (TTFT and E2E include the region's RTT), judged at the design rate on "
                    "every client mix; successful requests = requests x the attainment measured there",
        "headroom": cfg.headroom,
        "failover": cfg.failover,
        "failover_rule": FAILOVER_RULES[cfg.failover],
        "design_rate": "design_rps = (peak_rps + failover_rps) x (1 + headroom)",
        "design_rps": design,
        "periods": {q: {"start": p.start.isoformat() if p.start else None,
                        "end": p.end.isoformat() if p.end else None, "hours": p.hours, "source": p.source}
                    for q, p in loaded.periods.items()},
        "fiscal_year_start_month": cfg.fiscal_year_start_month,
        "costed_flat_at_peak": flat,
        "diurnal": {r.name: _shape_name(r.diurnal) for r in cfg.regions},
        "price_multipliers": {r.name: r.price_multiplier for r in cfg.regions},
        "candidates": candidates,
        "pricing": pricing,
        "reserve_rule": ("reserved GPUs: the fewest the fleet runs in any hour of the day (the autoscaler's "
                         "floor or the trough), paid all period; the hours above them on demand"
                         if cfg.pricing.reserve == "floor" else
                         "reserved GPUs: the peak fleet, paid all period whether used or not; hours above "
                         "it (a warm pool, a floor above the peak) on demand"),
        "simulation": cfg.simulation.model_dump(mode="json"),
    }
