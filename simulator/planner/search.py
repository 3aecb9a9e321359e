"""The minimum replica count of one candidate in one region and quarter, decided by simulation.

:func:`minimal_count` is the one replica search (the planner's and the studies'): it starts from a
first guess, gallops up from it (one more, then two, four, ... more than the last failure, or less
where the failures' worst ratios point nearer) until a count passes or the cap is reached, gallops
down the same way while counts below the start still pass, then bisects. The planner runs it on the
first seed alone, then again from that answer on every seed. The answer ``n`` is always a simulated
pass and ``n - 1`` a simulated failure (or ``n = 1``).

:func:`search_replicas` is one unit of work for the planner's executor (a picklable task in, a plain
dict out). A count passes when the one SLO judge (:func:`simulator.slo.judge`) passes it in every
one of ``replications`` independent runs, each of them stable (:func:`simulator.slo.stability`):
dropped requests count as misses, an unstable run fails whatever its percentiles. Replication ``k``
uses the seed ``seed + k`` at every count (common random numbers), which keeps the pass/fail
predicate monotone in practice; a count's first failing replication ends its evaluation.
:class:`Runs` simulates each (count, replication) once, so asking again costs nothing. A candidate
with model pools is searched by :mod:`simulator.planner.pool_search` on the same pieces.

**Replications chosen from the spread** (``simulation.replications: auto``): each count is judged on
:data:`AUTO_REPLICATIONS` seeds; where the decision is noisy, the search goes on with
:data:`MAX_AUTO_REPLICATIONS` seeds from its answer, which can only stay or rise. Noisy: the worst
ratio's seed-to-seed coefficient of variation at the chosen count is above :data:`SPREAD_BOUND` and a
seed two such spreads worse would miss (worst ratio x (1 + 2 x spread) > 1; a large spread far from
the limit cannot flip the verdict), or the count below passes on some seeds and fails on others (it
is judged on its seeds until one passes: the first pass decides).

A run is checked against each client mix the region must serve (its own clients; with N+1
failover, also each other region's clients redirected to it, with their longer RTT), on the
server latencies of the same run at the design load. With request tiers, each tier is judged
against its own SLO (the plan's where the tier has none).
"""
from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from simulator.cluster.network import ClientNetwork, with_client_latencies
from simulator.metrics import batch_summary, measurement_window, steady_window
from simulator.planner.capacity import saturation_rps
from simulator.run.records import FrozenStepLog, Records, SimulationResult, select_rows
from simulator.run.resolve import ResolvedSystem
from simulator.run.simulate import simulate
from simulator.scenario.config import Scenario, SLOConfig
from simulator.slo import COMPLETED, Verdict, judge, judged_latencies, quantile_with_drops, stability, tasks

Counts = int | Mapping[str, int]
"""One replica count, or (``deployment.pools``) one per pool by name."""

AUTO_REPLICATIONS = 3
"""Seeds each count is judged on under ``replications: auto``, unless the decision is noisy."""
MAX_AUTO_REPLICATIONS = 8
"""Seeds a noisy decision is judged on under ``replications: auto``."""
SPREAD_BOUND = 0.05
"""A decision is noisy when the worst ratio's seed-to-seed coefficient of variation exceeds this."""


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
    max_replicas: int                       # per pool with deployment.pools
    replications: int = 1                   # seeds per count (the first ones, under auto)
    design_rps: float | None = None         # the load the count must carry; counts at 100% utilization fail
    auto_replications: bool = False         # more seeds where the decision is noisy (module docstring)
    pool_prices: dict[str, float] = field(default_factory=dict)   # price per GPU-hour by pool (pools only)
    meta: dict[str, Any] = field(default_factory=dict)
    saturation_rps: float | None = None     # one replica's, when already simulated (else the search does)
    max_num_requests: int = 0               # longest run a check may take (0: the scenario's num_requests)


Guess = Callable[[int], int | None]
"""``guess(lo)``: where the least passing count probably is, given that ``lo`` is the highest count
that failed so far and none above it passed; None for no idea."""


def minimal_count(ok: Callable[[int], bool], start: int, cap: int, guess: Guess | None = None) -> int | None:
    """The least ``n`` in ``1..cap`` with ``ok(n)`` (``ok`` taken as monotone), or None when even
    ``cap`` fails. Every count it returns was passed by ``ok`` and ``n - 1`` failed (or ``n = 1``).

    ``guess`` only moves the probes, never the answer: going up, it can bring the next probe nearer
    the last failure than the gallop's (never nearer than a quarter of the gallop's step)."""
    start = min(max(1, start), cap)
    if ok(start):
        hi, lo, step = start, start - 1, 1
        while lo >= 1 and ok(lo):        # the first guess was loose: gallop down
            hi = lo
            step *= 2
            lo = max(0, hi - step)
    else:
        lo, step = start, 1
        while True:                      # gallop up from the last failure: +1, +2, +4, ...
            if lo >= cap:
                return None
            n = min(cap, lo + step)
            g = guess(lo) if guess is not None else None
            if g is not None:
                n = min(n, max(lo + max(1, step // 4), g))
            if ok(n):
                hi = n
                break
            lo, step = n, step * 2
    while hi - lo > 1:                   # invariant: lo fails (or is 0), hi passes
        mid = (lo + hi) // 2
        if ok(mid):
            hi = mid
        else:
            lo = mid
    return hi


def with_counts(scenario: Scenario, counts: Counts) -> Scenario:
    """``scenario`` with ``counts`` replicas (``deployment.replicas``, or each pool's ``replicas``)."""
    dep = scenario.deployment
    if isinstance(counts, int):
        return scenario.model_copy(update={"deployment": dep.model_copy(update={"replicas": counts})})
    assert dep.pools is not None
    pools = [p.model_copy(update={"replicas": int(counts[p.name])}) for p in dep.pools]
    return scenario.model_copy(update={"deployment": dep.model_copy(update={"pools": pools})})


def counts_text(counts: Counts) -> str:
    """``4``, or ``small=3;large=2`` (the worksheet's ``pool_replicas``)."""
    return str(counts) if isinstance(counts, int) else ";".join(f"{p}={n}" for p, n in counts.items())


def judge_run(result: SimulationResult, slo: SLOConfig, frame: Records | None = None,
              pool: str | None = None) -> Verdict:
    """Judge one run with the one judge: overall, or tier by tier (each tier's own SLO, ``slo`` where
    it has none; the worst tier is returned). ``frame`` replaces the run's request frame (client
    latencies added); ``pool`` judges that model pool's requests only, with their own stability test."""
    return _judged(result, slo, frame, pool)[0]


def _run_stability(result: SimulationResult) -> dict[str, Any]:
    """The run's stability test over all its requests: the summary's ``stability``, without the rest
    of the summary."""
    sc, req = result.scenario, result.records
    window = measurement_window(req, sc.warmup_s, sc.cooldown_s, sc.workload.arrival, sc.workload.sessions)
    return stability(req, window, arrival=sc.workload.arrival)


def _judged(result: SimulationResult, slo: SLOConfig, frame: Records | None, pool: str | None,
            run_stability: dict[str, Any] | None = None
            ) -> tuple[Verdict, Records, tuple[float, float], dict[str, Any]]:
    """The verdict, the judged frame, the measurement window and the stability test it used
    (``run_stability``: the run's own test, when the caller has it already)."""
    sc = result.scenario
    req = result.records if frame is None else frame
    window = measurement_window(req, sc.warmup_s, sc.cooldown_s, sc.workload.arrival,   # the run's window,
                                sc.workload.sessions)                                 # also for one pool
    if pool is not None:
        req = select_rows(req, np.asarray(req["pool"] == pool))
        stable = stability(req, window)
    else:
        stable = run_stability if run_stability is not None else _run_stability(result)
    tiers = [t for t in sc.workload.tiers or () if pool is None or np.asarray(req["tier"] == t.name).any()]
    if not tiers:
        verdict = judge(req, slo, window, stable=stable["stable"])
    else:
        verdicts = [judge(select_rows(req, np.asarray(req["tier"] == t.name)), t.slo or slo, window,
                          stable=stable["stable"]) for t in tiers]
        verdict = max(verdicts, key=lambda v: (not v.passed, v.score))
    return verdict, req, window, stable


def _badness(passed: bool, score: float) -> tuple[bool, float]:
    """How bad a check or verdict is: a failure before a pass, then the larger worst ratio."""
    return not passed, score


def _worse(a: dict[str, Any], b: dict[str, Any]) -> bool:
    """Whether check ``a`` is worse than ``b`` (:func:`_badness`)."""
    return _badness(a["passed"], a["score"]) > _badness(b["passed"], b["score"])


def lengthened(scenario: Scenario, num_requests: int) -> Scenario:
    """``scenario`` run for ``num_requests`` requests, its ``warmup_s`` and ``cooldown_s`` (the plan's
    fractions of the run) scaled with it. The arrivals and lengths of the first requests are the same
    (one seeded stream), so a longer run continues the shorter one."""
    assert scenario.num_requests is not None      # a cell's scenario is sized in requests
    scale = num_requests / scenario.num_requests
    return scenario.model_copy(update={"num_requests": num_requests, "warmup_s": scenario.warmup_s * scale,
                                       "cooldown_s": scenario.cooldown_s * scale})


def settled(check: dict[str, Any]) -> bool:
    """Whether a replication's check is final at its run length (module docstring, *Run length*): a pass
    in steady state; or a failure of a latency, attainment or drop check beyond its noise (the warm-up
    only flatters latencies, so a longer run would fail too) or in steady state."""
    if check["steady_reached"]:
        return check["outcome"] != "marginal"
    return check["outcome"] == "fail" and any(
        ratio > 1.0 and name != "stability" and name not in check["uncertain"]
        for name, ratio in check["ratios"].items())


def _judge_replication(task: SearchTask, counts: Counts, k: int) -> dict[str | None, dict[str, Any]]:
    """Simulate replication ``k`` of ``counts`` and judge it against every client mix: the worst mix
    over all requests (key None) and, with pools, over each pool's own requests (key: its name).
    A check that is not :func:`settled` is simulated again twice as long, up to ``max_num_requests``."""
    sc = with_counts(task.scenario, counts)
    sc = sc.model_copy(update={"seed": sc.seed + k})
    while True:
        out = _judge_run(task, counts, k, sc)
        if settled(out[None]) or (sc.num_requests or 0) >= task.max_num_requests:
            return out
        out[None]["batching_factor"].release()
        sc = lengthened(sc, min(task.max_num_requests, 2 * (sc.num_requests or 0)))


def _judge_run(task: SearchTask, counts: Counts, k: int, sc: Scenario) -> dict[str | None, dict[str, Any]]:
    """One run of replication ``k`` (the scenario ``sc``) judged against every client mix."""
    result = simulate(sc)
    pools: list[str | None] = [None] + [p.name for p in sc.deployment.pools or ()]
    worst: dict[str | None, tuple[str, Verdict, Records, tuple[float, float], dict[str, Any]]] = {}
    run_stability = _run_stability(result)
    steady = steady_window(result.records, sc.warmup_s, sc.cooldown_s, sc.workload.arrival,
                           sc.workload.sessions)[1]
    batching_factor = BatchingFactor(result.step_log, result.system, task, counts, k, sc.num_requests or 0)
    for i, (case, mix) in enumerate(task.mixes):
        rng = np.random.default_rng(np.random.SeedSequence([sc.seed, 7919, i]))
        frame = with_client_latencies(result.records, mix, rng)
        for pool in pools:
            verdict, judged, window, stable = _judged(result, task.slo, frame, pool, run_stability)
            if pool not in worst or (_badness(verdict.passed, verdict.score)
                                     > _badness(worst[pool][1].passed, worst[pool][1].score)):
                worst[pool] = (case, verdict, judged, window, stable)
    out: dict[str | None, dict[str, Any]] = {}
    for pool, (case, verdict, judged, window, stable) in worst.items():   # the worksheet's figures: worst mix's
        out[pool] = _check_row(verdict, judged, window)
        out[pool].update(case=case, seed=sc.seed, stability=stable, batching_factor=batching_factor,
                         num_requests=sc.num_requests, sim_s=float(window[1] - window[0]),
                         steady_reached=bool(steady.reached), warmup_s=steady.warmup_s)
    if not out[None]["passed"]:     # a failed run is shown only as an infeasible cell's best
        batching_factor.release()
    return out


class BatchingFactor:
    """A run's mean running batch (the summary's ``batch.mean_num_seqs``), computed when read with
    ``float()``: it expands the run's whole step log, and a worksheet row shows one run's of the dozens
    a search simulates. :meth:`release` drops the log (a search keeps those of its current answer
    only); a released one simulates its run again when read (the same run, seeded)."""

    __slots__ = ("counts", "k", "num_requests", "step_log", "system", "task")

    def __init__(self, step_log: FrozenStepLog, system: ResolvedSystem, task: SearchTask, counts: Counts,
                 k: int, num_requests: int) -> None:
        self.step_log: FrozenStepLog | None = step_log
        self.system, self.task, self.counts, self.k, self.num_requests = system, task, counts, k, num_requests

    def release(self) -> None:
        self.step_log = None

    def __float__(self) -> float:
        step_log = self.step_log
        if step_log is None:
            sc = with_counts(self.task.scenario, self.counts)
            sc = lengthened(sc, self.num_requests) if self.num_requests else sc
            step_log = simulate(sc.model_copy(update={"seed": sc.seed + self.k})).step_log
        mean = batch_summary(step_log, self.system)["mean_num_seqs"]
        return math.nan if mean is None else float(mean)


class Runs:
    """The search's memory: each (count, replication) simulated once, judged over all requests and
    (with pools) over each pool's own requests. A pool's requests see only that pool's replicas, so
    a pool's own verdict at ``m`` replicas is read from any run with that pool at ``m``."""

    def __init__(self, task: SearchTask) -> None:
        self.task = task
        self._runs: dict[tuple[Any, int], dict[str | None, dict[str, Any]]] = {}
        self._by_pool: dict[tuple[str, int, int], dict[str, Any]] = {}

    @property
    def simulations(self) -> int:
        return len(self._runs)

    def release_all_but(self, counts: Counts) -> None:
        """Drop the step logs of every run but those of ``counts`` (see :class:`BatchingFactor`)."""
        for (key, _), checks in self._runs.items():
            if key != counts:
                for check in checks.values():
                    factor = check["batching_factor"]
                    if isinstance(factor, BatchingFactor):
                        factor.release()

    def check(self, counts: Counts, k: int, pool: str | None = None) -> dict[str, Any]:
        """Replication ``k``'s check of ``counts`` (over all requests, or ``pool``'s own)."""
        if pool is not None:
            assert not isinstance(counts, int)
            hit = self._by_pool.get((pool, counts[pool], k))
            if hit is not None:
                return hit
        key = (counts if isinstance(counts, int) else tuple(sorted(counts.items())), k)
        if key not in self._runs:
            self._runs[key] = _judge_replication(self.task, counts, k)
            if not isinstance(counts, int):
                for name, m in counts.items():
                    self._by_pool.setdefault((name, m, k), self._runs[key][name])
        return self._runs[key][pool]

    def evaluate(self, counts: Counts, replications: int, *, pool: str | None = None,
                 complete: bool = False, until_pass: bool = False) -> dict[str, Any]:
        """``counts`` judged in up to ``replications`` runs (seeds ``seed + k``); the worst run is
        reported, with ``runs``, ``seeds_passed`` and ``seed_spread`` (coefficient of variation of
        the worst ratio over the runs). Stops at the first failing run unless ``complete``, and at
        the first passing one with ``until_pass`` (with ``complete``: whether the count passes on
        some seed)."""
        worst: dict[str, Any] | None = None
        scores: list[float] = []
        passed = 0
        for k in range(replications):
            check = self.check(counts, k, pool)
            scores.append(check["score"])
            passed += bool(check["passed"])
            if worst is None or _worse(check, worst):
                worst = check
            if (until_pass if check["passed"] else not complete):
                break
        assert worst is not None
        finite = [v for v in scores if math.isfinite(v)]
        spread = (float(np.std(finite, ddof=1) / np.mean(finite)) if len(finite) > 1 and np.mean(finite) > 0
                  else math.nan)
        counts_copy: Counts = counts if isinstance(counts, int) else dict(counts)
        return {**worst, "replicas": counts_copy, "runs": len(scores), "seeds_passed": passed,
                "seed_spread": spread}


def evaluate(task: SearchTask, replicas: Counts) -> dict[str, Any]:
    """Simulate ``replicas`` replicas (or one count per pool) in up to ``task.replications`` runs and
    judge each against every client mix; the worst (mix, replication) is reported. Stops at the first
    failing run."""
    return Runs(task).evaluate(replicas, task.replications)


def _check_row(verdict: Verdict, frame: Records, window: tuple[float, float]) -> dict[str, Any]:
    """The verdict plus the percentiles the worksheet shows (over arrivals, dropped ones as +inf)."""
    arrival = np.asarray(frame["arrival_time"], dtype=float)
    judged = (arrival >= window[0]) & (arrival <= window[1])
    completed = np.asarray(frame["status"] == COMPLETED)[judged]
    lat = judged_latencies(frame)
    out: dict[str, Any] = {}
    for name in ("ttft", "tpot", "e2e", "ttua"):
        x = lat[name][judged].copy()
        x[~completed] = math.inf
        out[f"{name}_p50_s"] = quantile_with_drops(x, 0.5)
        out[f"{name}_p99_s"] = quantile_with_drops(x, 0.99)
    out["task_ttua_p99_s"] = math.nan   # sessions: the tasks started in the window, failed ones as +inf
    if "session" in frame:
        t = tasks(frame)
        started = ((t["start_s"] >= window[0]) & (t["start_s"] <= window[1])).to_numpy()
        out["task_ttua_p99_s"] = quantile_with_drops(t["ttua_s"].to_numpy()[started], 0.99)
    out.update(passed=verdict.passed, outcome=verdict.outcome, uncertain=verdict.uncertain,
               shares=dict(verdict.shares), score=verdict.score, binding=verdict.binding, ratios=dict(verdict.ratios),
               attainment=verdict.attainment if verdict.attainment is not None else 0.0,
               failures=verdict.failures(), measured=verdict.arrived, dropped=verdict.dropped,
               stable=verdict.stable)
    return out


def noisy_decision(chosen: dict[str, Any], below: list[dict[str, Any]]) -> str:
    """Why the decision between ``chosen`` (a pass on every seed) and the counts one below it (``below``:
    their evaluations on the seeds up to one they pass, if any) is noisy, or "" when it is not (see the
    module docstring)."""
    spread, worst = chosen["seed_spread"], chosen["score"]
    if spread > SPREAD_BOUND and worst * (1 + 2 * spread) > 1:
        return (f"seed spread {100 * spread:.1f}% > {100 * SPREAD_BOUND:g}% at {counts_text(chosen['replicas'])}, "
                f"worst ratio {worst:.2f}")
    for b in below:      # a count below the answer fails (on some seed): passing on another is noise
        if b["seeds_passed"]:
            return f"{counts_text(b['replicas'])} passed on a seed and failed on another"
    return ""


def replications_reason(task: SearchTask, replications: int, noise: str, chosen: dict[str, Any] | None) -> str:
    """The worksheet's ``replications_reason``: how the number of seeds was chosen."""
    if not task.auto_replications:
        return "set in the plan"
    if noise:
        return f"auto: {replications} seeds, as {noise}"
    if chosen is None:
        return f"auto: {replications} seeds (no count passed)"
    spread, worst, counts = chosen["seed_spread"], chosen["score"], chosen["replicas"]
    if not spread > SPREAD_BOUND:
        quiet = (f"seed spread {100 * spread:.1f}% <= {100 * SPREAD_BOUND:g}%" if math.isfinite(spread)
                 else "no seed spread")
    else:
        quiet = f"seed spread {100 * spread:.1f}%, but worst ratio {worst:.2f} x (1 + 2 x {spread:.3f}) <= 1"
    many = counts > 1 if isinstance(counts, int) else any(n > 1 for n in counts.values())
    below = ("one replica fewer" + ("" if isinstance(counts, int) else " in any pool") + " fails on every seed"
             if many else "no count below")
    return f"auto: {replications} seeds ({quiet}; {below})"


def one_replica(task: SearchTask) -> Scenario:
    """The scenario whose saturation throughput the search of ``task`` needs (one replica)."""
    return with_counts(task.scenario, 1)


def search_replicas(task: SearchTask) -> dict[str, Any]:
    """Minimum replicas meeting the SLO (see module docstring); infeasible ones report their best."""
    runs = Runs(task)
    tried: dict[int, dict[str, Any]] = {}
    one = one_replica(task)
    saturation = (task.saturation_rps if task.saturation_rps is not None else saturation_rps(one)) \
        if task.design_rps else math.inf
    replications = task.replications
    seeds = 1               # the runs ``ok`` judges a count on: first the first seed alone

    def overloaded(n: int) -> bool:       # 100% utilization or more: never a pass
        return bool(task.design_rps and task.design_rps >= n * saturation)

    def ok(n: int) -> bool:
        if overloaded(n):
            tried.setdefault(n, _overloaded(task, n, saturation))
            return False
        tried[n] = runs.evaluate(n, seeds)
        if tried[n]["passed"]:          # the search's answer so far: the only runs it may report
            runs.release_all_but(n)
        return bool(tried[n]["passed"])

    def guess(lo: int) -> int | None:
        """Where the log of the worst ratio reaches 0 on the line through the simulated failures ``lo``
        and the one below it nearest it (a check's worst ratio falls about geometrically as replicas
        are added, so the line finds the limit's neighbourhood in fewer probes than the gallop)."""
        def log_ratio(m: int) -> float | None:
            check = tried.get(m)
            score = check["score"] if check is not None and check["runs"] else math.nan
            return math.log(score) if 1 < score < math.inf else None
        y0 = log_ratio(lo)
        other = max((m for m in tried if m < lo and log_ratio(m) is not None), default=None)
        if y0 is None or other is None:
            return None
        y1 = log_ratio(other)
        assert y1 is not None
        slope = (y0 - y1) / (lo - other)
        return math.ceil(lo - y0 / slope) if slope < 0 else None

    # Bracket on the first seed (one run per count), then search again from its answer on every seed:
    # a count that fails the first seed fails them all, so the answer is the least count passing every
    # seed, and the counts far above it cost one run each instead of one per seed.
    n = minimal_count(ok, task.start, task.max_replicas, guess)
    if n is not None and replications > 1:
        seeds = replications
        n = minimal_count(ok, n, task.max_replicas, guess)
    noise = ""
    if n is not None and task.auto_replications:
        noise = noisy_decision(tried[n], [])      # the seed spread; else the count below, up to a seed it passes
        if not noise and n > 1 and not overloaded(n - 1):
            noise = noisy_decision(tried[n], [runs.evaluate(n - 1, replications, complete=True, until_pass=True)])
        if noise and replications < MAX_AUTO_REPLICATIONS:
            replications = seeds = MAX_AUTO_REPLICATIONS
            n = minimal_count(ok, n, task.max_replicas, guess)     # n - 1 failed on a seed it still has
    sims = runs.simulations + (1 if math.isfinite(saturation) else 0)
    extra = {"replications": replications, "simulations": sims,
             "replications_reason": replications_reason(task, replications, noise, tried[n] if n else None)}
    if n is None:
        best = min(tried.values(), key=lambda r: (r["score"], r["replicas"]))
        return _row(task, tried, best, status="infeasible", saturation=saturation, extra=extra,
                    binding=f"no count up to max_replicas={task.max_replicas} meets the SLO; "
                            f"best: {describe_failure(best)}", below="")
    if n > 1:
        below_run = tried[n - 1]
        binding, check = below_run["binding"], describe_failure(below_run)
    else:
        binding, check = "one replica suffices", ""
    return _row(task, tried, tried[n], status="ok", binding=binding, below=check, saturation=saturation,
                extra=extra)


def _overloaded(task: SearchTask, n: int, saturation: float) -> dict[str, Any]:
    """A count that cannot carry the design load even at saturation: failed without simulating."""
    assert task.design_rps is not None
    util = task.design_rps / (n * saturation)
    return overloaded_check(n, util, f"utilization {100 * util:.0f}% >= 100% of the simulated saturation "
                                     f"throughput ({n} x {saturation:.2f} req/s)")


def overloaded_check(counts: Counts, utilization: float, failure: str) -> dict[str, Any]:
    """The check of counts failed on utilization (at or above 100%) without a simulation."""
    nan = math.nan
    return {"replicas": counts, "passed": False, "score": utilization, "binding": "utilization",
            "ratios": {"utilization": utilization}, "attainment": 0.0, "measured": 0, "dropped": 0, "stable": False,
            "case": "design load", "seed": None, "failures": [failure], "stability": {"backlog_growth_fraction": nan},
            "batching_factor": nan, "runs": 0, "seeds_passed": 0, "seed_spread": nan,
            **{f"{m}_{q}_s": nan for m in ("ttft", "tpot", "e2e", "ttua") for q in ("p50", "p99")},
            "task_ttua_p99_s": nan, "outcome": "fail", "uncertain": (), "shares": {}, "num_requests": 0,
            "sim_s": nan, "steady_reached": False, "warmup_s": nan}


def describe_failure(run: dict[str, Any]) -> str:
    where = run["case"] if run["seed"] is None else f"{run['case']}, seed {run['seed']}"
    what = f"{run['replicas']} replicas" if isinstance(run["replicas"], int) else counts_text(run["replicas"])
    return f"{what} ({where}): " + ("; ".join(run["failures"]) or "no measured requests")


def _ms(x: float) -> float:
    return 1000 * x


def check_columns(chosen: dict[str, Any]) -> dict[str, Any]:
    """The worksheet's columns from the chosen count's evaluation."""
    return {
        "ttft_p50_ms": _ms(chosen["ttft_p50_s"]), "ttft_p99_ms": _ms(chosen["ttft_p99_s"]),
        "tpot_p99_ms": _ms(chosen["tpot_p99_s"]), "e2e_p99_ms": _ms(chosen["e2e_p99_s"]),
        "ttua_p99_ms": _ms(chosen["ttua_p99_s"]), "task_ttua_p99_ms": _ms(chosen["task_ttua_p99_s"]),
        "slo_attainment": chosen["attainment"], "dropped": chosen["dropped"],
        "stable": chosen["stable"], "backlog_growth_fraction": chosen["stability"]["backlog_growth_fraction"],
        "batching_factor": float(chosen["batching_factor"]), "worst_case": chosen["case"],
        "slo_worst_ratio": chosen["score"], "seed_spread": chosen["seed_spread"],
        **margin_columns(chosen),
    }


def margin_columns(chosen: dict[str, Any]) -> dict[str, Any]:
    """How sure the worksheet is of a count: its verdict, the binding check, its margin to the limit (the
    share of requests beyond the limit against the share allowed, with its batch-means interval) and the
    run behind it (its length, the warm-up found and whether it reached steady state)."""
    share, half, allowed = chosen["shares"].get(chosen["binding"], (math.nan, math.nan, math.nan))
    return {"verdict": chosen["outcome"], "binding_check": chosen["binding"],
            "margin_to_limit": 1.0 - chosen["score"] if math.isfinite(chosen["score"]) else -math.inf,
            "beyond_limit_share": share, "beyond_limit_ci95": half, "beyond_limit_allowed": allowed,
            "run_requests": chosen["num_requests"], "measured_s": chosen["sim_s"],
            "steady_warmup_s": chosen["warmup_s"], "steady_reached": chosen["steady_reached"]}


def _row(task: SearchTask, runs: dict[int, dict[str, Any]], chosen: dict[str, Any], status: str,
         binding: str, below: str, saturation: float, extra: dict[str, Any]) -> dict[str, Any]:
    n = chosen["replicas"]
    per_replica = task.scenario.deployment.gpus_per_replica
    return {
        "quarter": task.quarter, "region": task.region, "candidate": task.candidate, "status": status,
        "replicas": n, "gpus": n * per_replica, "pool_replicas": "", "pool_gpus": "", "pool_share": "",
        "pool_utilization": "", "pool_saturation_rps_per_replica": "",
        "analytic_estimate_replicas": task.start,
        "utilization": task.design_rps / (n * saturation) if task.design_rps else math.nan,
        **check_columns(chosen), "saturation_rps_per_replica": saturation,
        "binding_constraint": binding, "minus_one_check": below,
        "replicas_tried": " ".join(str(k) for k in sorted(runs)),
        **extra, **task.meta,
    }


def pruned_row(task: SearchTask, why: str) -> dict[str, Any]:
    """The row of a candidate the planner did not search in a cell (``status: pruned``; ``why`` says so)."""
    nan = math.nan
    check = overloaded_check(1, nan, why)
    row = _row(task, {}, check, status="pruned", binding=why, below="", saturation=task.saturation_rps or nan,
               extra={"replications": 0, "simulations": 0, "replications_reason": "not searched"})
    row.update(replicas=nan, gpus=nan, utilization=nan, slo_worst_ratio=nan, verdict="not searched",
               binding_check="", margin_to_limit=nan, run_requests=nan)
    return row
