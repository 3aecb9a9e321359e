"""``simulate(scenario)``: build a fresh serving system from a scenario, run it, return records.

Wiring (one region): an arrival process walks the pre-drawn workload and hands each request to
the router, which puts it in one replica's waiting queue; each replica runs its own engine loop
(:mod:`simulator.engine.replica`). Randomness comes from one ``SeedSequence`` spawned into independent
streams (arrivals, prompt lengths, output lengths, routing), so the same seed gives the same
numbers bit for bit, and changing one stream's distribution leaves the others' draws unchanged.
"""
from __future__ import annotations

import dataclasses
import gc
import math
import time
from collections.abc import Callable, Sequence
from functools import partial
from typing import Any

import numpy as np
import simpy

from simulator.arguments import check_callback, check_flag, check_seed
from simulator.cluster.request_path import RequestPath, plan_request_path
from simulator.cluster.routing import make_router
from simulator.cost.base import CostModel
from simulator.cost.factory import make_cost_model
from simulator.engine.deadlines import Deadlines, queue_is_full
from simulator.engine.disaggregated import DisaggregatedFleet
from simulator.engine.kv_cache import KVCacheManager
from simulator.engine.policies import POLICIES  # the registry, with every policy registered
from simulator.engine.prefix_cache import PrefixCachingKVManager, prefix_cache_counters
from simulator.engine.replica import OwnArrivals, Replica
from simulator.engine.request import RequestStatus, RequestTable
from simulator.engine.scheduler import SwapSpace
from simulator.engine.speculative import (
    ChunkedSpeculativeScheduler,
    SpeculativeScheduler,
    draft_proposal,
    mtp_proposal,
    no_proposal,
)
from simulator.engine.steplog import StepLog
from simulator.metrics import summarize  # noqa: F401  (imported with the engine: a run's summary needs it)
from simulator.run.clients import ClosedLoopClients, ClosedSessions
from simulator.run.records import FrozenStepLog, RequestColumns, SimulationResult, request_columns
from simulator.run.resolve import ResolvedSystem, check_scenario, resolve, spawn_rngs
from simulator.scenario.config import ClosedLoopArrival, Scenario
from simulator.scenario.parallel import Parallelism
from simulator.scenario.profiles import GIB
from simulator.workload.levers import apply_client_view
from simulator.workload.traffic import SEND_DELAY_S, Workload, generate_workload

ProgressCallback = Callable[[int, int], None]


# -- the run ---------------------------------------------------------------------------------------
def simulate(scenario: Scenario, *, on_progress: ProgressCallback | None = None, seed: int | None = None,
             fast_forward: bool = True) -> SimulationResult:
    """Run one seeded replication of ``scenario``.

    Args:
        scenario: a validated scenario (see :func:`simulator.scenario.config.load_scenario`).
        on_progress: called as ``on_progress(done, total)`` as requests finish (about 200 times a run).
        seed: overrides ``scenario.seed``.
        fast_forward: advance runs of identical decode steps in one event (same results; off only
            to verify exactly that).

    Raises:
        ScenarioError: a reference that does not resolve, a model that does not fit, bad traces.
    """
    wall0 = time.perf_counter()
    check_scenario(scenario)
    seed = check_seed("seed", seed)
    check_callback("on_progress", on_progress, "on_progress(done, total)")
    check_flag("fast_forward", fast_forward)
    if seed is not None:
        scenario = scenario.model_copy(update={"seed": seed})
    system = resolve(scenario)
    rngs = spawn_rngs(scenario.seed)
    workload = generate_workload(scenario, system.max_model_len, rngs)
    engine_arrival, path = plan_request_path(scenario, workload, rngs)   # stages, response cache, coalescing
    if path is not None:
        workload = dataclasses.replace(workload, arrival_time=engine_arrival)
    table = RequestTable(workload)
    if scenario.workload.tiers is not None:
        table.priority = np.array([t.priority for t in scenario.workload.tiers], dtype=np.int64)[table.tier]
    env = simpy.Environment()
    steps = StepLog(scenario.scheduler.block_size)
    # _Run registers the processes.
    run = _Run(env, scenario, system, workload, table, steps, rngs, on_progress, fast_forward, path)
    # The run allocates many small objects (step-log tuples, SimPy events) but no lasting reference
    # cycles, so the cyclic collector's repeated scans of the growing logs are pure overhead (12%
    # of a 100k-request run). Pause it for the run and restore the caller's setting.
    gc_was_enabled = gc.isenabled()
    gc.disable()
    try:
        env.run(until=scenario.max_sim_time_s)
        records: RequestColumns | Any = request_columns(table, scenario)
        if path is not None:
            records = records.to_frame()
            path.add_columns(records)
        result = SimulationResult(scenario, apply_client_view(records, scenario),
                                  FrozenStepLog(*steps.freeze()), system, float(env.now), time.perf_counter() - wall0)
        result.request_path = path
        result.prefix_cache = prefix_cache_counters(run.replicas)
        for source in [r.scheduler for r in run.replicas] + ([run.fleet] if run.fleet is not None else []):
            for name, value in source.stats().items():
                result.engine_stats[name] = result.engine_stats.get(name, 0) + value
        if scenario.network is not None:
            from simulator.cluster.network import add_client_latencies, network_from_config
            add_client_latencies(result.requests, network_from_config(scenario.network), rngs["network"])
        if run.geo is not None:
            run.geo.add_columns(result.requests)
        if run.pool_router is not None:
            run.pool_router.add_columns(result.requests)
        if isinstance(run.clients, ClosedLoopClients) and run.clients.sent < len(table):
            result.requests = result.requests.iloc[:run.clients.sent].copy()   # requests never sent are not
        elif isinstance(run.clients, ClosedSessions) and not run.clients.arrived.all():   # part of the run
            result.requests = result.requests[run.clients.arrived].copy()
    finally:
        if gc_was_enabled:
            gc.enable()
    routing = _routing_counters(run.routers)
    if routing is not None:
        result.summary_parts["routing"] = routing
    if run.autoscaler is not None:
        from simulator.metrics import in_measurement_window
        req = result.requests
        in_window = in_measurement_window(req, scenario.warmup_s, scenario.cooldown_s, scenario.workload.arrival,
                                          scenario.workload.sessions)
        measured = in_window & np.asarray(req["status"] == "finished_length_capped")
        result.summary_parts["autoscaler"] = run.autoscaler.summary(req, measured, result.sim_time_s)
    result.wall_s = time.perf_counter() - wall0
    result.summary_parts["wall_s"] = result.wall_s   # the summary itself is computed on first use
    return result


def _levers_on(dep: Any) -> bool:
    return dep.quantization not in (None, "none") or dep.kv_cache_dtype != "auto"


def _routing_counters(routers: list[Any]) -> dict[str, int] | None:
    """Affinity routers' counters summed over the run's routers (None for stateless routers)."""
    out: dict[str, int] = {}
    for r in routers:
        if hasattr(r, "stats"):
            for k, v in r.stats().items():
                out[k] = out.get(k, 0) + v
    return out or None


class _Run:
    """The live objects of one simulation: arrivals, router, replicas and progress."""

    def __init__(self, env: simpy.Environment, scenario: Scenario, system: ResolvedSystem, workload: Workload,
                 table: RequestTable, steps: StepLog, rngs: dict[str, np.random.Generator],
                 on_progress: ProgressCallback | None, fast_forward: bool, path: RequestPath | None = None) -> None:
        self.env, self.table = env, table
        self.path = path
        times = workload.arrival_time
        self.order: list[int] | None = None
        """Request ids in the order they reach the engine, when processing stages reorder them."""
        if path is not None and len(times) > 1 and bool((np.diff(times) < 0).any()):
            order = np.argsort(times, kind="stable")
            self.order, times = order.tolist(), times[order]
        # Python floats, not numpy scalars: every SimPy and engine time sum derives from these.
        self.times: list[float] = times.tolist()
        self.total = len(workload)
        self.next_index = 0
        self.done = 0
        self.on_progress = on_progress
        self.progress_every = max(1, self.total // 200)
        self._next_report = self.progress_every
        self.stop_time = scenario.max_sim_time_s if scenario.max_sim_time_s is not None else np.inf
        dep, sch = scenario.deployment, scenario.scheduler
        self.scenario_deployment = dep
        cost: CostModel = make_cost_model(system.profile, system.model, dep.tensor_parallel_size,
                                          system.precision if _levers_on(dep) else None, Parallelism.of(dep),
                                          system.cuda_graph)
        proposal = _proposal_time(scenario, system, cost)
        self.fleet: DisaggregatedFleet | None = None
        self.pool_router = None
        self.routers: list[Any] = []
        """Every router built for this run (affinity routers report counters)."""
        self.geo = None
        self.autoscaler = None
        if sch.policy == "disaggregated":
            def make_replica(index: int, cls: type, horizon: Callable[[], float]) -> Replica:
                return Replica(env, index, _make_scheduler(scenario, system, table, rngs, proposal, cls), cost,
                               steps, horizon, self._finished, fast_forward)
            self.fleet = DisaggregatedFleet(env, scenario, system, table, make_replica,
                                            lambda: self._router(rngs["routing"]), self.next_event_time)
            self.replicas = self.fleet.replicas
            self.entry = self.fleet.prefill              # arrivals go to the prefill pool
            self.router = self.fleet.prefill_router
        else:
            self.router = self._router(rngs["routing"])
            num_replicas = dep.replicas
            if scenario.fleet is not None:   # several regions: a geo router over per-region routers
                from simulator.cluster.fleet import GeoRouter
                self.geo = GeoRouter(scenario.fleet, self._router, self.total, rngs["routing"], rngs["network"],
                                     lambda: float(env.now))
                self.router, num_replicas = self.geo, self.geo.num_replicas
            if dep.autoscaler is not None:
                num_replicas = dep.autoscaler.max_replicas
            if system.pools:   # model routing: each pool's replicas with its own model, cost and KV plan
                from simulator.cluster.pools import PoolRouter, assign_pools
                self.pool_router = PoolRouter(scenario, assign_pools(scenario, table.num_prompt_tokens, table.tier),
                                              self._router, rngs["routing"])
                self.router = self.pool_router
                self.replicas = []
                for sub, sub_system in system.pools:
                    sub_cost = make_cost_model(sub_system.profile, sub_system.model,
                                               sub.deployment.tensor_parallel_size,
                                               sub_system.precision if _levers_on(sub.deployment) else None,
                                               Parallelism.of(sub.deployment), sub_system.cuda_graph)
                    sub_proposal = _proposal_time(sub, sub_system, sub_cost)
                    self.replicas += [
                        Replica(env, len(self.replicas) + i,
                                _make_scheduler(sub, sub_system, table, rngs, sub_proposal), sub_cost, steps,
                                self.next_event_time, self._finished, fast_forward)
                        for i in range(sub.deployment.replicas)]
            else:
                self.replicas = [
                    Replica(env, i, _make_scheduler(scenario, system, table, rngs, proposal), cost, steps,
                            self.next_event_time, self._finished, fast_forward)
                    for i in range(num_replicas)]
            self.entry = self.replicas
            if dep.autoscaler is not None:   # replicas [0, active) take requests; the rest start on demand
                from simulator.cluster.autoscaler import Autoscaler
                self.autoscaler = Autoscaler(env, dep.autoscaler, system.kv_plan.weights_bytes, self.replicas,
                                             lambda: self.next_index >= self.total and self.done >= self.total)
        self.scenario = scenario
        self.shed_when_full = scenario.admission.max_queue_len is not None
        for r in self.replicas:
            r.deadlines = Deadlines.for_scenario(scenario, r.scheduler, table, self._finished)
        self.any_rejected = bool(table.rejected_at_arrival.any())
        self.clients: ClosedLoopClients | ClosedSessions | None = None
        arrival, sessions = scenario.workload.arrival, scenario.workload.sessions
        if isinstance(arrival, ClosedLoopArrival):   # requests are sent as earlier ones end
            assert workload.think_time is not None and workload.send_delay is not None   # drawn for a closed loop
            self.clients = ClosedLoopClients(env, arrival, table, workload.think_time, workload.send_delay,
                                             self._send, send_until_s=scenario.duration_s, stop_time=self.stop_time)
        elif workload.turn_gap is not None and sessions is not None:   # later turns are sent as answers end
            min_gap = (sessions.turn_gap_s if sessions.turn_gap_dist == "fixed" else 0.0) + SEND_DELAY_S[0]
            self.clients = ClosedSessions(env, table, workload.arrival_time.copy(), workload.turn_gap, min_gap,
                                          self._send, stop_time=self.stop_time, timeout_s=scenario.client.timeout_s)
        self._own_arrivals: list[OwnArrivals] | None = None
        if self.clients is not None:
            self.clients.replicas = self.replicas
            for r in self.replicas:
                r.next_event_time = partial(self.clients.horizon, r)
        elif fast_forward and self._replicas_take_arrivals(dep.router, path):
            self._plan_own_arrivals(workload.rejected, deliver=True)
        else:
            env.process(self.arrivals())
            if fast_forward and self._routes_ahead(dep.router, path):
                self._plan_own_arrivals(workload.rejected)

    def _routes_ahead(self, router: str, path: RequestPath | None) -> bool:
        """Whether every replica's arrivals are known before the run: round-robin routing of
        pre-drawn open-loop arrivals, with nothing that decides a request's fate on the way
        (request path) or reads or resizes the pool (fleets, pools, the autoscaler)."""
        return (router == "round_robin" and len(self.replicas) > 1 and path is None and self.fleet is None
                and self.geo is None and self.pool_router is None and self.autoscaler is None)

    def _replicas_take_arrivals(self, router: str, path: RequestPath | None) -> bool:
        """Whether each replica can take its own arrivals itself, with no arrival process: one replica,
        or round-robin routing (:meth:`_routes_ahead`), of open-loop arrivals that nothing refuses,
        sheds or cuts short (no rejected request, no ``admission.max_queue_len``, no
        ``max_sim_time_s``)."""
        return ((len(self.replicas) == 1 or self._routes_ahead(router, path)) and path is None
                and self.fleet is None and self.geo is None and self.pool_router is None
                and self.autoscaler is None and not self.any_rejected and not self.shed_when_full
                and self.stop_time == math.inf)

    def _plan_own_arrivals(self, rejected: np.ndarray, deliver: bool = False) -> None:
        """Give each replica the instants of its own arrivals as its decode runs' horizon.

        With round-robin routing the k-th request routed (rejected ones are not) goes to replica
        k mod N whatever the replicas' state, and no router reads that state, so an arrival sent
        to another replica cannot change what this one does: its decode runs need not end there.
        The step-by-step engine (``fast_forward=False``) and the runs it cuts at every arrival give
        the same requests and steps; the instants differ only in the last bits of their sums (a
        run's steps are summed from its start, not from the cuts).

        ``deliver``: the replicas also queue their arrivals themselves (``OwnArrivals.deliver``), each
        when it next wakes (the end of the step the arrival came during, or the arrival itself when
        idle), instead of an arrival process sending each at its instant. Nothing reads a waiting
        queue between an arrival and the end of the step it came during (the engine admits at step
        boundaries, and a timeout or queue delay counts from the request's arrival time), so the
        run is the same; it saves an event per request. One replica that does so is the only process
        in the environment: it keeps the clock itself (``Replica.solo``), the same instants without an
        event per arrival."""
        n = len(self.replicas)
        routed = [t for t, rej in zip(self.times, rejected.tolist(), strict=True) if not rej]
        self._own_arrivals = [OwnArrivals(routed[i::n], i, n, self.table, self.stop_time) for i in range(n)]
        for r, own in zip(self.replicas, self._own_arrivals, strict=True):
            r.next_event_time = own.next_time
            if deliver:
                r.arrivals = own
                r.solo = n == 1

    def _router(self, rng: np.random.Generator) -> Any:
        dep = self.scenario_deployment
        router = make_router(dep.router, rng, self.table, dep.affinity)
        self.routers.append(router)
        return router

    def next_event_time(self) -> float:
        """Instant of the next arrival not yet delivered (or the stop time), for decode runs."""
        if self.autoscaler is not None:   # its ticks read the replicas' state: they are events too
            nxt = self.times[self.next_index] if self.next_index < self.total else np.inf
            return min(float(nxt), self.stop_time, self.autoscaler.next_tick)
        if self.next_index < self.total:
            return min(float(self.times[self.next_index]), self.stop_time)
        return self.stop_time

    def arrivals(self):  # SimPy process
        """Walk the pre-drawn arrival instants (every process but the closed loop)."""
        env, times, order = self.env, self.times, self.order
        for i in range(self.total):
            delay = times[i] - env.now
            if delay > 0:
                yield env.timeout(delay)
            self.next_index = i + 1
            self._send(i if order is None else order[i])

    def _send(self, rid: int) -> None:
        """Request ``rid`` arrives now: refuse it, route it, shed it, or queue it at a replica."""
        env, table, replicas = self.env, self.table, self.entry
        if self.any_rejected and table.rejected_at_arrival[rid]:
            table.status[rid] = RequestStatus.FINISHED_REJECTED
            self._finished((rid,), env.now)
            return
        if self.path is not None:
            if self.path.cached(rid, env.now):       # answered by the response cache
                now = env.now
                table.status[rid] = RequestStatus.FINISHED_LENGTH_CAPPED
                table.first_scheduled_time[rid] = table.first_token_time[rid] = table.finish_time[rid] = now
                table.num_output_tokens[rid] = table.max_tokens[rid]
                table.replica[rid] = -1
                self._finished((rid,), now)
                return
            if self.path.leader_of(rid, env.now) is not None:   # shares an identical prompt in flight
                return
        if self.autoscaler is not None:
            i = self.router.route(rid, replicas[: self.autoscaler.active]) if self.autoscaler.active > 1 else 0
        else:
            i = self.router.route(rid, replicas) if len(replicas) > 1 or self.geo is not None else 0
        table.replica[rid] = i
        if self._own_arrivals is not None:
            self._own_arrivals[i].next += 1
        if self.shed_when_full and queue_is_full(self.scenario, replicas[i].scheduler):
            table.status[rid] = RequestStatus.FINISHED_SHED     # fast rejection, counted
            table.finish_time[rid] = env.now
            self._finished((rid,), env.now)
            return
        replicas[i].add_request(rid)

    def _finished(self, ids: Sequence[int] | np.ndarray, at: float) -> None:
        """Requests ``ids`` ended at instant ``at`` (>= now): progress, and closed-loop clients."""
        self.done += len(ids)
        if self.path is not None and self.path.prompt_id is not None:
            self._release_followers(ids, at)
        if self.clients is not None:
            self.done += self.clients.ended(ids, at)   # turns a failed session will never send
        if self.on_progress is not None and (self.done >= self._next_report or self.done == self.total):
            self._next_report = self.done + self.progress_every
            self.on_progress(self.done, self.total)


    def _release_followers(self, ids: Sequence[int] | np.ndarray, at: float) -> None:
        """Coalesced requests get their leader's answer (or its fate) when it ends; a completed
        answer is stored in an exact response cache."""
        table, path = self.table, self.path
        assert path is not None
        for rid in list(ids):
            rid = int(rid)
            completed = table.status[rid] == RequestStatus.FINISHED_LENGTH_CAPPED
            followers = path.ended(rid, bool(completed and table.replica[rid] >= 0), at)
            if not followers:
                continue
            f = np.asarray(followers, dtype=np.int64)
            table.status[f] = table.status[rid]
            table.replica[f] = table.replica[rid]
            table.num_output_tokens[f] = table.num_output_tokens[rid]
            table.first_scheduled_time[f] = table.arrival_time[f]
            table.first_token_time[f] = np.maximum(table.first_token_time[rid], table.arrival_time[f])
            table.finish_time[f] = table.finish_time[rid]
            self._finished(f, at)


def _make_scheduler(scenario: Scenario, system: ResolvedSystem, table: RequestTable,
                    rngs: dict[str, np.random.Generator], proposal_time_s: Callable[[int, int], float] | None,
                    cls: type | None = None):
    cfg = scenario.scheduler
    kv: KVCacheManager
    if cfg.enable_prefix_caching and not getattr(cls, "receives_kv", False):
        kv = PrefixCachingKVManager(system.kv_plan.num_gpu_blocks, cfg.block_size, table.block_hashes)
    else:
        kv = KVCacheManager(system.kv_plan.num_gpu_blocks, cfg.block_size)
    if scenario.speculative_config is not None:
        assert proposal_time_s is not None   # _proposal_time gives one whenever speculation is on
        spec_cls = ChunkedSpeculativeScheduler if cfg.policy == "chunked_prefill" else SpeculativeScheduler
        # Each replica draws acceptances from its own child stream (spawned in replica order), so
        # the draws do not depend on how the replicas' events interleave.
        sched = spec_cls(cfg, kv, table, spec=scenario.speculative_config, rng=rngs["speculative"].spawn(1)[0],
                         proposal_time_s=proposal_time_s)
    else:
        sched = (cls or POLICIES[cfg.policy])(cfg, kv, table)
    if cfg.preemption_mode == "swap":
        per_block = system.kv_plan.kv_bytes_per_block
        assert system.profile.host_link_bandwidth_bytes_per_s is not None   # resolve() checks it for swap
        sched.swap = SwapSpace(int(cfg.swap_space_gib * GIB // per_block), per_block,
                               float(system.profile.host_link_bandwidth_bytes_per_s))
    return sched


def _proposal_time(scenario: Scenario, system: ResolvedSystem, cost: CostModel) -> Callable[[int, int], float] | None:
    """Seconds one step spends proposing ``k`` tokens for ``n`` requests with context sum ``ctx``."""
    spec = scenario.speculative_config
    if spec is None:
        return None
    k, tp = spec.num_speculative_tokens, scenario.deployment.tensor_parallel_size
    if spec.method == "ngram":
        return no_proposal
    if spec.method == "mtp":
        return mtp_proposal(cost, k, system.model.num_layers)
    assert system.draft_model is not None   # resolved for method draft
    return draft_proposal(make_cost_model(system.profile, system.draft_model, tp), k)
