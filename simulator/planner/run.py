"""``plan(plan)``: GPUs per region per quarter under p99 SLOs, as DataFrames.

For each forecast cell (quarter x region) the design load is the forecast peak, plus (with N+1
failover) the largest share of any one other region's peak that would be redirected here if that
region went down, times ``1 + headroom``. Every candidate is searched for its minimum replica
count at that load (:mod:`simulator.planner.search`; with model pools, a count per pool:
:mod:`simulator.planner.pool_search`; one task per cell and candidate, run on the chosen executor)
and the cell takes the cheapest candidate that meets the SLO. The verified count is
the peak fleet; :mod:`simulator.planner.fleet_hours` turns it, the region's diurnal shape and the
candidate's autoscaler into the GPU-hours paid, which price the cell (:mod:`simulator.planner.tables`:
the candidates, worksheet, finance and totals frames; :mod:`simulator.planner.assumptions`: what they
rest on).
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
from simulator.planner.assumptions import plan_assumptions
from simulator.planner.backends import executor_slots, open_executor, start_workers
from simulator.planner.capacity import capacity_bound, saturation_key, saturation_rps
from simulator.planner.config import LoadedPlan, PlanConfig, load_plan
from simulator.planner.fleet_hours import autoscale_policy, fleet_day
from simulator.planner.periods import AVERAGE_QUARTER_HOURS
from simulator.planner.pool_search import search_pools
from simulator.planner.search import AUTO_REPLICATIONS, SearchTask, one_replica, pruned_row, search_replicas
from simulator.planner.tables import candidates_frame, summary_frame, totals_frame, worksheet_frame
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
    candidates = candidates_frame(loaded, rows)
    worksheet = worksheet_frame(loaded, candidates)
    summary = summary_frame(loaded, worksheet)
    return PlanResult(worksheet, candidates, totals_frame(loaded, summary), time.perf_counter() - wall0, summary,
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
