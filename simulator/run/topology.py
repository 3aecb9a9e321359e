"""A run's topology: its replicas, the router in front of them, and what the deployment's shape adds.

One builder per deployment shape, chosen by :func:`build_topology`:

* :func:`single`: ``deployment.replicas`` replicas behind ``deployment.router``; with
  ``deployment.data_parallel_size`` DP > 1 each replica is DP ranks (its attention data-parallel
  engine cores) stepped in lockstep, the request going to the rank of the chosen replica with the
  the engine's rank choice (:class:`~simulator.engine.data_parallel.DataParallelGroup`).
* :func:`autoscaled`: ``deployment.autoscaler.max_replicas`` replicas, of which the autoscaler's
  active ones take requests (:mod:`simulator.cluster.autoscaler`).
* :func:`regions`: every region's replicas behind a geo router (``fleet``, :mod:`simulator.cluster.fleet`).
* :func:`pools`: every model pool's replicas, each with its own model, cost and KV plan, behind a
  pool router (``deployment.pools``, :mod:`simulator.cluster.pools`).
* :func:`disaggregated`: a prefill pool whose requests move to a decode pool
  (``scheduler.policy: disaggregated``, :mod:`simulator.engine.disaggregated`).

A builder gets a :class:`Wiring` (how to build a replica and a router for this run) and returns a
:class:`Topology`: the replicas, the ones arrivals go to, how a request picks one, and the
extensions the shape adds to the run (:class:`simulator.cluster.extension.RunExtension`: a region or
pool column, the autoscaler's ticks and summary, the routers' counters). Replicas are built in
index order, each registering its engine loop with the environment, so a shape's build order is
its event order.
"""
from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import simpy

from simulator.cluster.affinity import AffinityRouter
from simulator.cluster.autoscaler import Autoscaler
from simulator.cluster.extension import Fixed, RunExtension, SummaryBlock
from simulator.cluster.fleet import GeoRouter
from simulator.cluster.pools import PoolRouter, assign_pools
from simulator.cluster.routing import make_router
from simulator.cost.base import CostModel
from simulator.cost.factory import make_cost_model
from simulator.engine.data_parallel import RANK_CHOICES, DataParallelGroup
from simulator.engine.deadlines import Deadlines
from simulator.engine.disaggregated import DecodeScheduler, DisaggregatedFleet
from simulator.engine.kv_cache import KVCacheManager
from simulator.engine.pipeline import MicroBatches
from simulator.engine.policies import POLICIES  # the registry, with every policy registered
from simulator.engine.prefix_cache import PrefixCachingKVManager
from simulator.engine.replica import Replica
from simulator.engine.request import RequestTable
from simulator.engine.scheduler import SwapSpace
from simulator.engine.speculative import (
    ChunkedSpeculativeScheduler,
    SpeculativeScheduler,
    draft_proposal,
    mtp_proposal,
    no_proposal,
)
from simulator.engine.steplog import StepLog
from simulator.run.resolve import ResolvedSystem
from simulator.scenario.config import Scenario
from simulator.scenario.parallel import Parallelism
from simulator.scenario.profiles import GIB

Horizon = Callable[[], float]
Finish = Callable[[Sequence[int] | np.ndarray, float], None]


@dataclass
class Topology:
    """The replicas of a run and the way in to them."""

    replicas: list[Replica]
    """Every replica, by index (``Replica.index``, the ``replica`` column)."""
    entry: Sequence[Replica]
    """The replicas arrivals are routed over (the prefill pool when disaggregated)."""
    route: Callable[[int], int]
    """The index in :attr:`entry` of the replica request ``rid`` goes to, decided when it arrives."""
    extensions: list[RunExtension]
    """What the shape adds to the run, in call order."""
    counters: list[Any]
    """Objects whose ``stats()`` are summed into the result's ``engine_stats`` (schedulers first)."""
    num_gpus: int
    """GPUs provisioned: every replica's (the autoscaler's ceiling; each pool's own split)."""
    fixed: bool = False
    """Whether every request goes to one of a fixed set of replicas by the router alone (a single
    deployment): then round-robin routing of pre-drawn arrivals is known before the run."""

    def engine_stats(self) -> dict[str, float]:
        """The policies' counters (and the KV transfers'), summed over the run."""
        out: dict[str, float] = {}
        for source in self.counters:
            for name, value in source.stats().items():
                out[name] = out.get(name, 0) + value
        return out


class Wiring:
    """How this run builds a replica (its scheduler, cost model, deadlines) and a router; what
    every builder shares. ``next_arrival`` is the run's horizon for open-loop arrivals,
    ``is_done`` whether every request has been sent and has ended."""

    def __init__(self, env: simpy.Environment, scenario: Scenario, system: ResolvedSystem, table: RequestTable,
                 steps: StepLog, rngs: dict[str, np.random.Generator], fast_forward: bool, finish: Finish,
                 next_arrival: Horizon, is_done: Callable[[], bool], client_sent: np.ndarray | None = None) -> None:
        self.env, self.scenario, self.system, self.table = env, scenario, system, table
        self.steps, self.rngs, self.fast_forward = steps, rngs, fast_forward
        self.finish, self.next_arrival, self.is_done = finish, next_arrival, is_done
        self.client_sent = client_sent
        """Each request's instant before the request path's stages (None without them): a client's
        timeout runs from its send, not from its engine arrival."""
        self.routers: list[Any] = []
        """Every router built for this run (affinity routers report counters)."""

    def router(self, rng: np.random.Generator) -> Any:
        dep = self.scenario.deployment
        router = make_router(dep.router, rng, self.table, dep.affinity)
        self.routers.append(router)
        return router

    def replicas(self, scenario: Scenario, system: ResolvedSystem, first: int, count: int) -> list[Replica]:
        """``count`` replicas serving ``scenario``'s model as ``system`` resolves it, from index ``first``."""
        cost = cost_model(scenario, system)
        proposal = _proposal_time(scenario, system, cost)
        return [self.replica(first + i, scenario, system, cost, proposal) for i in range(count)]

    def replica(self, index: int, scenario: Scenario, system: ResolvedSystem, cost: CostModel,
                proposal: Callable[[int, int], float] | None, cls: type | None = None,
                horizon: Horizon | None = None) -> Replica:
        """One replica (its engine loop registered), with the scenario's timeouts and shedding; with
        ``pipeline_parallel_size`` > 1 its scheduler is one per batch in flight
        (:class:`~simulator.engine.pipeline.MicroBatches`)."""
        stages = scenario.deployment.pipeline_parallel_size
        if stages == 1:
            scheduler = _make_scheduler(scenario, system, self.table, self.rngs, proposal, cls)
            replica = Replica(self.env, index, scheduler, cost, self.steps, horizon or self.next_arrival,
                              self.finish, self.fast_forward)
            replica.deadlines = Deadlines.for_scenario(self.scenario, scheduler, self.table, self.finish,
                                                       system.frontend_s, self.client_sent)
            replica.lagged_admission = scenario.engine is not None and scenario.engine.runs_async
            return replica
        first = _make_scheduler(scenario, system, self.table, self.rngs, proposal, cls)
        slots = [first, *(_make_scheduler(scenario, system, self.table, self.rngs, proposal, cls, first.kv)
                          for _ in range(stages - 1))]
        pipelined = MicroBatches(scenario.scheduler, first.kv, self.table, slots)
        replica = Replica(self.env, index, pipelined, cost, self.steps, horizon or self.next_arrival, self.finish,
                          self.fast_forward)
        replica.pipeline = pipelined      # timeouts and shedding: refused with pipelines (capabilities)
        return replica


def build_topology(w: Wiring) -> Topology:
    """The topology of ``w``'s scenario, by its deployment shape."""
    sc = w.scenario
    if sc.scheduler.policy == "disaggregated":
        return disaggregated(w)
    if sc.fleet is not None:
        return regions(w)
    if w.system.pools:
        return pools(w)
    if sc.deployment.autoscaler is not None:
        return autoscaled(w)
    return single(w)


def single(w: Wiring) -> Topology:
    dep = w.scenario.deployment
    router = w.router(w.rngs["routing"])
    dp = dep.data_parallel_size
    replicas = w.replicas(w.scenario, w.system, 0, dep.replicas * dp)
    num_gpus = dep.replicas * dep.gpus_per_replica
    if dp == 1:
        return Topology(replicas, replicas, _routed(router, replicas), [RoutingCounters(w.routers)],
                        _schedulers(replicas), num_gpus, fixed=True)
    choice = RANK_CHOICES[data_parallel_routing(w.scenario)]
    groups = [DataParallelGroup(w.env, replicas[i * dp:(i + 1) * dp], replicas[i * dp].cost, choice())
              for i in range(dep.replicas)]
    pick = _routed(router, groups)

    def route(rid: int) -> int:
        g = pick(rid)
        return g * dp + groups[g].choose_rank()
    return Topology(replicas, replicas, route, [RoutingCounters(w.routers)], _schedulers(replicas), num_gpus)


def autoscaled(w: Wiring) -> Topology:
    """Replicas ``[0, active)`` take requests; the rest start on demand."""
    dep = w.scenario.deployment
    assert dep.autoscaler is not None
    router = w.router(w.rngs["routing"])
    replicas = w.replicas(w.scenario, w.system, 0, dep.autoscaler.max_replicas)
    scaler = Autoscaler(w.env, dep.autoscaler, w.system.kv_plan.weights_bytes, replicas, w.is_done)

    def route(rid: int) -> int:
        return router.route(rid, replicas[: scaler.active]) if scaler.active > 1 else 0
    return Topology(replicas, replicas, route, [RoutingCounters(w.routers), scaler], _schedulers(replicas),
                    len(replicas) * dep.gpus_per_replica)


def regions(w: Wiring) -> Topology:
    """Every region's replicas, in region order, behind one geo router."""
    sc, env = w.scenario, w.env
    assert sc.fleet is not None
    geo = GeoRouter(sc.fleet, w.router, len(w.table), w.rngs["routing"], w.rngs["network"], lambda: float(env.now))
    replicas = w.replicas(sc, w.system, 0, geo.num_replicas)
    return Topology(replicas, replicas, lambda rid: geo.route(rid, replicas), [geo, RoutingCounters(w.routers)],
                    _schedulers(replicas), len(replicas) * sc.deployment.gpus_per_replica)


def pools(w: Wiring) -> Topology:
    """Every pool's replicas, in pool order, each pool with its own model, cost and KV plan."""
    sc, table = w.scenario, w.table
    pool_router = PoolRouter(sc, assign_pools(sc, table.num_prompt_tokens, table.tier), w.router, w.rngs["routing"],
                             [system for _, system in w.system.pools])
    replicas: list[Replica] = []
    for sub, sub_system in w.system.pools:
        replicas += w.replicas(sub, sub_system, len(replicas), sub.deployment.replicas)
    num_gpus = sum(sub.deployment.replicas * sub.deployment.gpus_per_replica for sub, _ in w.system.pools)
    return Topology(replicas, replicas, _routed(pool_router, replicas), [pool_router, RoutingCounters(w.routers)],
                    _schedulers(replicas), num_gpus)


def disaggregated(w: Wiring) -> Topology:
    """A prefill pool (where arrivals go) and a decode pool, one router each."""
    sc, system = w.scenario, w.system
    cost = cost_model(sc, system)
    proposal = _proposal_time(sc, system, cost)

    def make_replica(index: int, cls: type, horizon: Horizon) -> Replica:
        return w.replica(index, sc, system, cost, proposal, cls, horizon)
    fleet = DisaggregatedFleet(w.env, sc, system, w.table, make_replica, lambda: w.router(w.rngs["routing"]),
                               w.next_arrival)
    replicas = fleet.replicas
    return Topology(replicas, fleet.prefill, _routed(fleet.prefill_router, fleet.prefill),
                    [RoutingCounters(w.routers)], [*_schedulers(replicas), fleet],
                    len(replicas) * sc.deployment.gpus_per_replica)


def _routed(router: Any, replicas: Sequence[Any]) -> Callable[[int], int]:
    """``rid -> replica index`` by ``router`` (no routing decision with one replica)."""
    if len(replicas) == 1:
        return lambda rid: 0
    route = router.route
    return lambda rid: route(rid, replicas)


def _schedulers(replicas: Sequence[Replica]) -> list[Any]:
    return [r.scheduler for r in replicas]


class RoutingCounters(RunExtension):
    """The affinity routers' decisions (``sticky``, ``guard_fallbacks``, ``unmatched``), summed over
    the run's routers, as the summary's ``routing`` block (none for stateless routers)."""

    def __init__(self, routers: list[Any]) -> None:
        self.routers = routers

    def summary_blocks(self) -> Sequence[SummaryBlock]:
        out: dict[str, int] = {}
        for r in self.routers:
            if isinstance(r, AffinityRouter):       # the stateless routers decide nothing worth counting
                for k, v in r.stats().items():
                    out[k] = out.get(k, 0) + v
        return (SummaryBlock("routing", "run", Fixed(out)),) if out else ()


# -- one replica's engine --------------------------------------------------------------------------
def data_parallel_routing(scenario: Scenario) -> str:
    """How a DP replica's requests pick their rank: ``engine.data_parallel_routing``, else the engine
    preset's, else ``least_outstanding`` (:data:`~simulator.engine.data_parallel.RANK_CHOICES`)."""
    engine = scenario.engine
    return engine.rank_choice if engine is not None else "least_outstanding"


def cost_model(scenario: Scenario, system: ResolvedSystem) -> CostModel:
    """The step-time model of ``scenario``'s replicas (quantization and KV dtype as served when set)."""
    dep = scenario.deployment
    levers = dep.quantization not in (None, "none") or dep.kv_cache_dtype != "auto"
    return make_cost_model(system.profile, system.model, dep.tensor_parallel_size,
                           system.precision if levers else None, Parallelism.of(dep), system.cuda_graph)


def _make_scheduler(scenario: Scenario, system: ResolvedSystem, table: RequestTable,
                    rngs: dict[str, np.random.Generator], proposal_time_s: Callable[[int, int], float] | None,
                    cls: type | None = None, kv: KVCacheManager | None = None) -> Any:
    """A replica's scheduler, on a new KV cache, or on ``kv`` (another micro-batch's of a pipeline)."""
    cfg = scenario.scheduler
    # a disaggregated decode replica receives its requests' KV: with prefix caching on, the cache is the
    # prefill pool's
    receives_kv = cls is not None and issubclass(cls, DecodeScheduler)
    if kv is None:
        kv = (PrefixCachingKVManager(system.kv_plan.num_gpu_blocks, cfg.block_size, table.block_hashes)
              if cfg.enable_prefix_caching and not receives_kv else
              KVCacheManager(system.kv_plan.num_gpu_blocks, cfg.block_size))
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
