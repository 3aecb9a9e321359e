"""The minimum replica count of one candidate in one region and quarter, decided by simulation.

:func:`minimal_count` is the one replica search (the planner's and the studies'): it starts from a
first guess, gallops up (doubling) until a count passes or the cap is reached, gallops down while
counts below the start still pass, then bisects. The answer ``n`` is always a simulated pass and
``n - 1`` a simulated failure (or ``n = 1``).

:func:`search_replicas` is one unit of work for the planner's executor (a picklable task in, a plain
dict out). A count passes when the one SLO judge (:func:`simulator.slo.judge`) passes it in every
one of ``replications`` independent runs, each of them stable (:func:`simulator.slo.stability`):
dropped requests count as misses, an unstable run fails whatever its percentiles. Replication ``k``
uses the seed ``seed + k`` at every count (common random numbers), which keeps the pass/fail
predicate monotone in practice; a count's first failing replication ends its evaluation.

A run is checked against each client mix the region must serve (its own clients; with N+1
failover, also each other region's clients redirected to it, with their longer RTT), on the
server latencies of the same run at the design load. With request tiers, each tier is judged
against its own SLO (the plan's where the tier has none).
"""
from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from simulator.cluster.network import ClientNetwork, add_client_latencies
from simulator.metrics import measurement_window
from simulator.planner.capacity import saturation_rps
from simulator.run.simulate import simulate
from simulator.scenario.config import Scenario, SLOConfig
from simulator.slo import COMPLETED, Verdict, judge, judged_latencies, quantile_with_drops


@dataclass(frozen=True)
class SearchTask:
    """Everything one (quarter, region, candidate) search needs; pickled to the workers."""

    quarter: str
    region: str
    candidate: str
    scenario: Scenario                      # workload at the design rate; replicas set per run
    mixes: tuple[tuple[str, ClientNetwork], ...]   # (case name, clients) pairs to hold the SLO for
    slo: SLOConfig
    start: int                              # first guess (the analytic estimate)
    max_replicas: int
    replications: int = 1
    design_rps: float | None = None         # the load the count must carry; counts at 100% utilization fail
    meta: dict[str, Any] = field(default_factory=dict)


def minimal_count(ok: Callable[[int], bool], start: int, cap: int) -> int | None:
    """The least ``n`` in ``1..cap`` with ``ok(n)`` (``ok`` taken as monotone), or None when even
    ``cap`` fails. Every count it returns was passed by ``ok`` and ``n - 1`` failed (or ``n = 1``)."""
    start = min(max(1, start), cap)
    if ok(start):
        hi, lo, step = start, start - 1, 1
        while lo >= 1 and ok(lo):        # the first guess was loose: gallop down
            hi = lo
            step *= 2
            lo = max(0, hi - step)
    else:
        lo, n, found = start, start, None
        while found is None:
            if n >= cap:
                return None
            n = min(cap, n * 2)
            if ok(n):
                found = n
            else:
                lo = n
        hi = found
    while hi - lo > 1:                   # invariant: lo fails (or is 0), hi passes
        mid = (lo + hi) // 2
        if ok(mid):
            hi = mid
        else:
            lo = mid
    return hi


def judge_run(result: Any, slo: SLOConfig, frame: Any = None) -> Verdict:
    """Judge one run with the one judge: overall, or tier by tier (each tier's own SLO, ``slo`` where
    it has none; the worst tier is returned). ``frame`` replaces the run's request frame (client
    latencies added)."""
    sc = result.scenario
    req = result.requests if frame is None else frame
    window = measurement_window(req, sc.warmup_s, sc.cooldown_s)
    stable = result.summary["stability"]["stable"]
    tiers = sc.workload.tiers
    if not tiers:
        return judge(req, slo, window, stable=stable)
    verdicts = [judge(req[req["tier"] == t.name], t.slo or slo, window, stable=stable) for t in tiers]
    return max(verdicts, key=lambda v: (not v.passed, v.score))


def evaluate(task: SearchTask, replicas: int) -> dict[str, Any]:
    """Simulate ``replicas`` replicas in up to ``task.replications`` runs and judge each against
    every client mix; the worst (mix, replication) is reported. Stops at the first failing run."""
    base = task.scenario.model_copy(update={"deployment": task.scenario.deployment.model_copy(
        update={"replicas": replicas})})
    worst: dict[str, Any] | None = None
    binding_values: list[float] = []
    runs = 0
    for k in range(task.replications):
        sc = base.model_copy(update={"seed": base.seed + k})
        result = simulate(sc)
        runs += 1
        run_worst: dict[str, Any] | None = None
        for i, (case, mix) in enumerate(task.mixes):
            frame = result.requests.copy()
            rng = np.random.default_rng(np.random.SeedSequence([sc.seed, 7919, i]))
            add_client_latencies(frame, mix, rng)
            verdict = judge_run(result, task.slo, frame)
            check = _check_row(verdict, frame, sc)
            check.update(case=case, seed=sc.seed, stability=result.summary["stability"],
                         batching_factor=result.summary["batch"].get("mean_num_seqs"))
            if run_worst is None or (not check["passed"], check["score"]) > (not run_worst["passed"],
                                                                              run_worst["score"]):
                run_worst = check
        assert run_worst is not None
        binding_values.append(run_worst["score"])
        if worst is None or (not run_worst["passed"], run_worst["score"]) > (not worst["passed"], worst["score"]):
            worst = run_worst
        if not run_worst["passed"]:
            break
    assert worst is not None
    finite = [v for v in binding_values if math.isfinite(v)]
    spread = (float(np.std(finite, ddof=1) / np.mean(finite)) if len(finite) > 1 and np.mean(finite) > 0
              else math.nan)
    worst.update(replicas=replicas, runs=runs, seed_spread=spread)
    return worst


def _check_row(verdict: Verdict, frame: Any, sc: Scenario) -> dict[str, Any]:
    """The verdict plus the percentiles the worksheet shows (over arrivals, dropped ones as +inf)."""
    window = measurement_window(frame, sc.warmup_s, sc.cooldown_s)
    arrival = frame["arrival_time"].to_numpy(dtype=float)
    judged = (arrival >= window[0]) & (arrival <= window[1])
    completed = (frame["status"].astype(str) == COMPLETED).to_numpy()[judged]
    lat = judged_latencies(frame)
    out: dict[str, Any] = {}
    for name in ("ttft", "tpot", "e2e"):
        x = lat[name][judged].copy()
        x[~completed] = math.inf
        out[f"{name}_p50_s"] = quantile_with_drops(x, 0.5)
        out[f"{name}_p99_s"] = quantile_with_drops(x, 0.99)
    out.update(passed=verdict.passed, score=verdict.score, binding=verdict.binding, ratios=dict(verdict.ratios),
               attainment=verdict.attainment if verdict.attainment is not None else 0.0,
               failures=verdict.failures(), measured=verdict.arrived, dropped=verdict.dropped,
               stable=verdict.stable)
    return out


def search_replicas(task: SearchTask) -> dict[str, Any]:
    """Minimum replicas meeting the SLO (see module docstring); infeasible ones report their best."""
    runs: dict[int, dict[str, Any]] = {}
    one = task.scenario.model_copy(update={"deployment": task.scenario.deployment.model_copy(update={"replicas": 1})})
    saturation = saturation_rps(one) if task.design_rps else math.inf

    def ok(n: int) -> bool:
        if task.design_rps and task.design_rps >= n * saturation:   # 100% utilization or more: never a pass
            runs.setdefault(n, _overloaded(task, n, saturation))
            return False
        if n not in runs:
            runs[n] = evaluate(task, n)
        return bool(runs[n]["passed"])

    n = minimal_count(ok, task.start, task.max_replicas)
    if n is None:
        best = min(runs.values(), key=lambda r: (r["score"], r["replicas"]))
        return _row(task, runs, best, status="infeasible", saturation=saturation,
                    binding=f"no count up to max_replicas={task.max_replicas} meets the SLO; "
                            f"best: {_describe_failure(best)}", below="")
    if n > 1:
        below = runs[n - 1]
        binding, check = below["binding"], _describe_failure(below)
    else:
        binding, check = "one replica suffices", ""
    return _row(task, runs, runs[n], status="ok", binding=binding, below=check, saturation=saturation)


def _overloaded(task: SearchTask, n: int, saturation: float) -> dict[str, Any]:
    """A count that cannot carry the design load even at saturation: failed without simulating."""
    assert task.design_rps is not None
    util = task.design_rps / (n * saturation)
    nan = math.nan
    return {"replicas": n, "passed": False, "score": util, "binding": "utilization", "ratios": {"utilization": util},
            "attainment": 0.0, "measured": 0, "dropped": 0, "stable": False, "case": "design load", "seed": None,
            "failures": [f"utilization {100 * util:.0f}% >= 100% of the simulated saturation throughput "
                         f"({n} x {saturation:.2f} req/s)"],
            "stability": {"backlog_growth_fraction": nan}, "batching_factor": nan, "runs": 0, "seed_spread": nan,
            **{f"{m}_{q}_s": nan for m in ("ttft", "tpot", "e2e") for q in ("p50", "p99")}}


def _describe_failure(run: dict[str, Any]) -> str:
    where = run["case"] if run["seed"] is None else f"{run['case']}, seed {run['seed']}"
    return f"{run['replicas']} replicas ({where}): " + ("; ".join(run["failures"]) or "no measured requests")


def _ms(x: float) -> float:
    return 1000 * x


def _row(task: SearchTask, runs: dict[int, dict[str, Any]], chosen: dict[str, Any], status: str,
         binding: str, below: str, saturation: float) -> dict[str, Any]:
    st = chosen["stability"]
    return {
        "quarter": task.quarter, "region": task.region, "candidate": task.candidate, "status": status,
        "replicas": chosen["replicas"], "analytic_estimate_replicas": task.start,
        "ttft_p50_ms": _ms(chosen["ttft_p50_s"]), "ttft_p99_ms": _ms(chosen["ttft_p99_s"]),
        "tpot_p99_ms": _ms(chosen["tpot_p99_s"]), "e2e_p99_ms": _ms(chosen["e2e_p99_s"]),
        "slo_attainment": chosen["attainment"], "dropped": chosen["dropped"],
        "stable": chosen["stable"], "backlog_growth_fraction": st["backlog_growth_fraction"],
        "batching_factor": chosen["batching_factor"], "worst_case": chosen["case"],
        "slo_worst_ratio": chosen["score"], "replications": task.replications,
        "seed_spread": chosen["seed_spread"], "saturation_rps_per_replica": saturation,
        "binding_constraint": binding, "minus_one_check": below,
        "simulations": sum(r["runs"] for r in runs.values()) + (1 if math.isfinite(saturation) else 0),
        "replicas_tried": " ".join(str(k) for k in sorted(runs)),
        **task.meta,
    }
