"""The minimum replica count of one candidate in one region and quarter, decided by simulation.

:func:`search_replicas` is one unit of work for the executor (a picklable task in, a plain dict
out). It starts from the analytic bound (:mod:`simulator.planner.capacity`), gallops up (doubling)
until a count meets every SLO or ``max_replicas`` is reached, gallops down while counts below the
start still pass, then bisects. The answer ``n`` is always a simulated pass and ``n - 1`` a
simulated failure (or ``n = 1``); both runs' p99s are recorded. Every run of the search uses the
same seed (common random numbers), which keeps the pass/fail predicate monotone in practice.

A run is checked against each client mix the region must serve (its own clients; with N+1
failover, also each other region's clients redirected to it, with their longer RTT), on the
server latencies of the same run at the design load.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from simulator.cluster.network import ClientNetwork, add_client_latencies
from simulator.metrics import in_measurement_window
from simulator.run.simulate import simulate
from simulator.scenario.config import Scenario


@dataclass(frozen=True)
class SLOSpec:
    ttft_s: float | None
    tpot_s: float | None
    e2e_s: float | None
    attainment: float

    def thresholds(self) -> dict[str, float]:
        return {k: v for k, v in (("ttft", self.ttft_s), ("tpot", self.tpot_s), ("e2e", self.e2e_s)) if v is not None}


@dataclass(frozen=True)
class SearchTask:
    """Everything one (quarter, region, candidate) search needs; pickled to the workers."""

    quarter: str
    region: str
    candidate: str
    scenario: Scenario                      # workload at the design rate; replicas set per run
    mixes: tuple[tuple[str, ClientNetwork], ...]   # (case name, clients) pairs to hold the SLO for
    slo: SLOSpec
    start: int                              # analytic lower bound on replicas
    max_replicas: int
    meta: dict[str, Any] = field(default_factory=dict)


def evaluate(task: SearchTask, replicas: int) -> dict[str, Any]:
    """Simulate ``replicas`` replicas and check the SLO against every client mix (worst one kept)."""
    sc = task.scenario.model_copy(update={"deployment": task.scenario.deployment.model_copy(
        update={"replicas": replicas})})
    result = simulate(sc)
    req = result.requests
    finished = req["status"].astype(str) == "finished_length_capped"
    measured = req[finished & in_measurement_window(req, sc.warmup_s, sc.cooldown_s)].copy()
    worst: dict[str, Any] | None = None
    for i, (case, mix) in enumerate(task.mixes):
        rng = np.random.default_rng(np.random.SeedSequence([sc.seed, 7919, i]))
        add_client_latencies(measured, mix, rng)
        check = _check(measured, task.slo)
        check["case"] = case
        if worst is None or check["score"] > worst["score"]:
            worst = check
    assert worst is not None
    batch = result.summary["batch"]
    worst.update(replicas=replicas, batching_factor=batch.get("mean_num_seqs"), measured=len(measured),
                 rejected=int(result.summary["requests"]["rejected"]))
    return worst


def _p(x: np.ndarray, q: float) -> float:
    x = x[~np.isnan(x)]
    return float(np.quantile(x, q)) if len(x) else math.nan


def _check(measured: Any, slo: SLOSpec) -> dict[str, Any]:
    cols = {"ttft": "client_ttft_s", "tpot": "tpot_s", "e2e": "client_e2e_s"}
    out: dict[str, Any] = {}
    for name, col in cols.items():
        x = measured[col].to_numpy(dtype=float)
        out[f"{name}_p50_s"] = _p(x, 0.5)
        out[f"{name}_p99_s"] = _p(x, 0.99)
    ok_all = np.ones(len(measured), dtype=bool)
    ratios: dict[str, float] = {}
    for name, limit in slo.thresholds().items():
        x = measured[cols[name]].to_numpy(dtype=float)
        ok_all &= np.isnan(x) | (x <= limit)
        p99 = out[f"{name}_p99_s"]
        ratios[f"{name}_p99"] = (p99 / limit) if not math.isnan(p99) else 0.0
    attainment = float(ok_all.mean()) if len(measured) else 0.0
    if slo.attainment > 0:
        ratios["attainment"] = (1 - attainment) / (1 - slo.attainment) if slo.attainment < 1 else \
            (math.inf if attainment < 1 else 0.0)
    failing = {k: v for k, v in ratios.items() if v > 1.0}
    out.update(attainment=attainment, ratios=ratios, passed=not failing and len(measured) > 0,
               binding=max(ratios, key=ratios.__getitem__) if ratios else "",
               score=max(ratios.values()) if ratios else 0.0)
    return out


def search_replicas(task: SearchTask) -> dict[str, Any]:
    """Minimum replicas meeting the SLO (see module docstring); infeasible ones report their best."""
    runs: dict[int, dict[str, Any]] = {}

    def ok(n: int) -> bool:
        if n not in runs:
            runs[n] = evaluate(task, n)
        return bool(runs[n]["passed"])

    cap = task.max_replicas
    start = min(max(1, task.start), cap)
    if ok(start):
        hi, lo, step = start, start - 1, 1
        while lo >= 1 and ok(lo):        # the bound was loose: gallop down
            hi = lo
            step *= 2
            lo = max(0, hi - step)
    else:
        lo, hi = start, None
        n = start
        while hi is None:
            if n >= cap:
                return _infeasible(task, runs)
            n = min(cap, n * 2)
            if ok(n):
                hi = n
            else:
                lo = n
    assert hi is not None
    while hi - lo > 1:                   # invariant: lo fails (or is 0), hi passes
        mid = (lo + hi) // 2
        if ok(mid):
            hi = mid
        else:
            lo = mid
    return _answer(task, runs, hi)


def _answer(task: SearchTask, runs: dict[int, dict[str, Any]], n: int) -> dict[str, Any]:
    below = runs.get(n - 1)
    if n > 1:
        assert below is not None and not below["passed"], "the search must have simulated n - 1 failing"
        binding = below["binding"]
        check = _describe_failure(below, task.slo)
    else:
        binding, check = "one replica suffices", ""
    return _row(task, runs, runs[n], status="ok", binding=binding, below=check)


def _infeasible(task: SearchTask, runs: dict[int, dict[str, Any]]) -> dict[str, Any]:
    best = min(runs.values(), key=lambda r: (r["score"], r["replicas"]))
    return _row(task, runs, best, status="infeasible",
                binding=f"no count up to max_replicas={task.max_replicas} meets the SLO; "
                        f"best: {_describe_failure(best, task.slo)}", below="")


def _describe_failure(run: dict[str, Any], slo: SLOSpec) -> str:
    parts = []
    limits = {f"{k}_p99": v for k, v in slo.thresholds().items()}
    for name, ratio in sorted(run["ratios"].items(), key=lambda kv: -kv[1]):
        if ratio <= 1.0:
            continue
        if name == "attainment":
            parts.append(f"attainment {100 * run['attainment']:.2f}% < {100 * slo.attainment:.2f}%")
        else:
            parts.append(f"{name} {1000 * run[f'{name}_s']:.1f} ms > {1000 * limits[name]:.0f} ms")
    return f"{run['replicas']} replicas ({run['case']}): " + ("; ".join(parts) or "no measured requests")


def _row(task: SearchTask, runs: dict[int, dict[str, Any]], chosen: dict[str, Any], status: str,
         binding: str, below: str) -> dict[str, Any]:
    return {
        "quarter": task.quarter, "region": task.region, "candidate": task.candidate, "status": status,
        "replicas": chosen["replicas"], "analytic_min_replicas": task.start,
        "ttft_p50_ms": 1000 * chosen["ttft_p50_s"], "ttft_p99_ms": 1000 * chosen["ttft_p99_s"],
        "tpot_p99_ms": 1000 * chosen["tpot_p99_s"], "e2e_p99_ms": 1000 * chosen["e2e_p99_s"],
        "slo_attainment": chosen["attainment"],
        "batching_factor": chosen["batching_factor"], "worst_case": chosen["case"],
        "slo_worst_ratio": chosen["score"],
        "binding_constraint": binding, "minus_one_check": below,
        "simulations": len(runs), "replicas_tried": " ".join(str(k) for k in sorted(runs)),
        **task.meta,
    }
