"""The replica count of each model pool of a candidate with ``deployment.pools``, decided by simulation.

Such a deployment routes each request to one pool (by prompt length or tier); each pool runs its own
model on its own hardware and GPUs per replica. A pool's requests run on that pool's replicas only,
so their latencies depend on that pool's replica count and not on the others'. The SLO is held over
ALL requests by the one judge, as for a single pool (:mod:`simulator.planner.search`: every client
mix, every seed, each run stable). :func:`search_pools` sizes the pools in four steps; every verdict
comes from a full-system run, and :class:`~simulator.planner.search.Runs` simulates each
(counts, replication) once:

1. **Shares and saturation.** One run with one replica per pool and every request queued at once
   gives each pool's share of the requests and its per-replica saturation throughput
   (:func:`~simulator.planner.capacity.pool_saturation`). A pool's design load is its share of the
   design rate. A combination in which any pool runs at 100% utilization or more fails without
   simulating, so each pool starts at its *floor*, the fewest replicas below 100%.
2. **Each pool on its own.** For each pool, :func:`~simulator.planner.search.minimal_count` from its
   floor finds the fewest replicas at which the judge passes that pool's own requests (with their own
   stability test) on every seed. All pools passing on their own is enough for all requests to pass:
   every threshold is a percentile and the attainment floor and drop budget are shares, and a share
   of requests that holds in each pool holds in their union.
3. **All requests.** The combination is judged over all requests; while it fails, the pool whose own
   requests fail worst in the failing run gets one more replica (up to ``max_replicas`` per pool;
   when every pool with traffic is there, the candidate is infeasible).
4. **Trim.** The judge over all requests is looser than each pool on its own (a pool with a small share
   may miss more often than the percentile allows), so each pool in turn, most GPUs per replica first,
   is cut to the fewest replicas that keep the combination passing, until no pool can give one up.

The answer passes over all requests on every seed, and one replica fewer in any pool fails (by
simulation or at 100% utilization): a minimum in every direction, not necessarily the fewest GPUs
over all combinations (one pool's replicas might be traded for another's). Under ``replications:
auto`` the counts one below are each pool's one fewer.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from simulator.cluster.pools import pool_tp
from simulator.planner.capacity import pool_saturation
from simulator.planner.search import (
    MAX_AUTO_REPLICATIONS,
    Runs,
    SearchTask,
    check_columns,
    counts_text,
    describe_failure,
    minimal_count,
    noisy_decision,
    overloaded_check,
    replications_reason,
    with_counts,
)

Counts = dict[str, int]


@dataclass(frozen=True)
class Pool:
    """What the search knows of one pool before it simulates at the design load."""

    name: str
    gpus_per_replica: int
    share: float
    saturation_rps: float
    """One replica's completion rate on the pool's requests with a full queue (requests/s)."""
    load_rps: float
    """The pool's share of the design load."""

    def utilization(self, replicas: int) -> float:
        if self.load_rps <= 0:
            return 0.0
        return self.load_rps / (replicas * self.saturation_rps) if self.saturation_rps > 0 else math.inf

    @property
    def floor(self) -> int:
        """The fewest replicas below 100% utilization (1 for a pool without traffic)."""
        if self.load_rps <= 0:
            return 1
        if not self.saturation_rps > 0:
            return 2**31
        return math.floor(self.load_rps / self.saturation_rps) + 1


class PoolSearch:
    """The search's state: the pools, the runs and every combination judged over all requests."""

    def __init__(self, task: SearchTask) -> None:
        sc = task.scenario
        assert sc.deployment.pools is not None
        self.task = task
        loads = pool_saturation(with_counts(sc, {p.name: 1 for p in sc.deployment.pools}))
        design = task.design_rps or 0.0
        self.pools = {p.name: Pool(p.name, pool_tp(sc, p), loads[p.name].share, loads[p.name].saturation_rps,
                                   design * loads[p.name].share) for p in sc.deployment.pools}
        self.runs = Runs(task)
        self.tried: dict[tuple[tuple[str, int], ...], dict[str, Any]] = {}
        self.replications = task.replications

    def overloaded(self, counts: Counts) -> dict[str, Any] | None:
        """The failed check of a combination in which some pool runs at 100% utilization or more."""
        util = {p: pool.utilization(counts[p]) for p, pool in self.pools.items()}
        hot = [p for p in self.pools if util[p] >= 1.0]
        if not hot:
            return None
        p = max(hot, key=lambda q: util[q])
        pool = self.pools[p]
        return overloaded_check(dict(counts), util[p], f"pool {p} at utilization {100 * util[p]:.0f}% >= 100% of the "
                                f"simulated saturation throughput ({counts[p]} x {pool.saturation_rps:.2f} req/s "
                                f"for its {100 * pool.share:.0f}% of the requests)")

    def passes(self, counts: Counts) -> bool:
        """Whether ``counts`` holds the SLO over all requests on every seed (recorded in ``tried``)."""
        key = tuple(counts.items())
        hot = self.overloaded(counts)
        if hot is not None:
            self.tried.setdefault(key, hot)
            return False
        self.tried[key] = self.runs.evaluate(counts, self.replications)
        return bool(self.tried[key]["passed"])

    def alone(self, counts: Counts, name: str) -> int | None:
        """The fewest replicas of pool ``name`` (from ``counts[name]``) at which its own requests pass."""
        pool = self.pools[name]

        def ok(m: int) -> bool:
            if pool.utilization(m) >= 1.0:
                return False
            return bool(self.runs.evaluate({**counts, name: m}, self.replications, pool=name)["passed"])
        return minimal_count(ok, counts[name], self.task.max_replicas)

    def settle(self, counts: Counts) -> Counts | None:
        """Steps 3 and 4 of the module docstring from ``counts``: the combination, or None (infeasible)."""
        c = dict(counts)
        cap = self.task.max_replicas
        while not self.passes(c):
            failed = self.tried[tuple(c.items())]
            grow = [p for p, pool in self.pools.items() if c[p] < cap and pool.load_rps > 0]
            if not grow:
                return None
            c[max(grow, key=lambda p: self._own_score(c, failed, p))] += 1
        order = sorted(self.pools, key=lambda p: -self.pools[p].gpus_per_replica)
        changed = True
        while changed:
            changed = False
            for p in order:
                m = self._fewest(c, p)
                if m < c[p]:
                    c[p], changed = m, True
        return c

    def _fewest(self, counts: Counts, name: str) -> int:
        """The fewest replicas of pool ``name`` that keep the (passing) combination ``counts`` passing."""
        def ok(m: int) -> bool:
            return self.passes({**counts, name: m})
        m = minimal_count(ok, counts[name], counts[name])
        assert m is not None      # counts passes
        return m

    def _own_score(self, counts: Counts, failed: dict[str, Any], name: str) -> float:
        """How badly pool ``name``'s own requests fared in the run that failed ``counts`` (its utilization
        when none was simulated)."""
        if failed["seed"] is None:
            return self.pools[name].utilization(counts[name])
        return float(self.runs.check(counts, failed["seed"] - self.task.scenario.seed, name)["score"])

    def one_fewer(self, counts: Counts) -> dict[str, Counts]:
        """Each pool's combination with one replica fewer (pools at one replica have none)."""
        return {p: {**counts, p: counts[p] - 1} for p in self.pools if counts[p] > 1}


def search_pools(task: SearchTask) -> dict[str, Any]:
    """Each pool's replica count meeting the SLO over all requests (see the module docstring); an
    infeasible candidate reports the combination that came closest."""
    s = PoolSearch(task)
    cap = task.max_replicas
    counts = {p: pool.floor for p, pool in s.pools.items()}
    result: Counts | None = None
    if all(n <= cap for n in counts.values()):
        for p, pool in s.pools.items():          # step 2: each pool on its own
            if pool.load_rps > 0:
                m = s.alone(counts, p)
                counts[p] = cap if m is None else m
        result = s.settle(counts)
    else:
        s.passes({p: min(n, cap) for p, n in counts.items()})
    noise = ""
    if result is not None and task.auto_replications:
        chosen_check = s.tried[tuple(result.items())]
        noise = noisy_decision(chosen_check, [])   # the seed spread; else each count below, up to a seed it passes
        for c in s.one_fewer(result).values():
            if noise:
                break
            if s.overloaded(c) is None:
                noise = noisy_decision(chosen_check, [s.runs.evaluate(c, s.replications, complete=True,
                                                                      until_pass=True)])
        if noise and s.replications < MAX_AUTO_REPLICATIONS:
            s.replications = MAX_AUTO_REPLICATIONS
            result = s.settle(result)
    chosen = s.tried[tuple(result.items())] if result is not None else None
    extra = {"replications": s.replications, "simulations": s.runs.simulations + 1,
             "replications_reason": replications_reason(task, s.replications, noise, chosen)}
    if result is None:
        best = min(s.tried.values(), key=lambda r: (r["score"], sum(r["replicas"].values())))
        return _row(s, best["replicas"], best, "infeasible", extra,
                    binding=f"no combination up to max_replicas={cap} per pool meets the SLO; "
                            f"best: {describe_failure(best)}", below="")
    assert chosen is not None
    bindings, checks = [], []
    for p in s.pools:
        if result[p] == 1:
            bindings.append(f"{p}: one replica suffices")
            continue
        below_run = s.tried[tuple({**result, p: result[p] - 1}.items())]
        bindings.append(f"{p}: {below_run['binding']}")
        checks.append(describe_failure(below_run))
    return _row(s, result, chosen, "ok", extra, binding="; ".join(bindings), below=" | ".join(checks))


def _row(s: PoolSearch, counts: Counts, chosen: dict[str, Any], status: str, extra: dict[str, Any],
         binding: str, below: str) -> dict[str, Any]:
    task, pools = s.task, s.pools
    gpus = {p: counts[p] * pool.gpus_per_replica for p, pool in pools.items()}
    util = {p: pool.utilization(counts[p]) for p, pool in pools.items()}
    total = sum(gpus.values())
    price = sum(gpus[p] * task.pool_prices[p] for p in pools) / total
    return {
        "quarter": task.quarter, "region": task.region, "candidate": task.candidate, "status": status,
        "replicas": sum(counts.values()), "gpus": total, "pool_replicas": counts_text(counts),
        "pool_gpus": counts_text(gpus), "pool_share": _text({p: pool.share for p, pool in pools.items()}),
        "pool_utilization": _text(util),
        "pool_saturation_rps_per_replica": _text({p: pool.saturation_rps for p, pool in pools.items()}),
        "analytic_estimate_replicas": math.nan, "utilization": max(util.values()),
        **check_columns(chosen), "saturation_rps_per_replica": math.nan,
        "binding_constraint": binding, "minus_one_check": below,
        "replicas_tried": " ".join(counts_text(dict(k)) for k in sorted(s.tried)),
        **extra, **task.meta, "price_per_gpu_hour": price,
    }


def _text(values: dict[str, float]) -> str:
    return ";".join(f"{p}={v:.4g}" for p, v in values.items())
