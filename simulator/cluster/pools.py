"""Model routing: several model pools in one deployment (``deployment.pools``).

Each pool is a set of replicas serving its own model on its own hardware, TP, quantization and
``max_num_seqs`` (unset pool fields take the scenario's). ``deployment.pool_routing`` picks a
request's pool from its prompt length (``by: prompt_tokens``: the first threshold whose
``max_prompt_tokens`` it does not exceed, else ``default``) or its tier (``by: tier``: ``map``,
else ``default``); within the pool, ``deployment.router`` picks the replica. Each replica keeps its
own engine loop (one SimPy process), cost model and KV plan.

Not combined (refused by :mod:`simulator.capabilities`): disaggregated pools, the autoscaler and
multi-region ``fleet``. The workload is drawn once against the smallest ``max_model_len`` of the pools (a
request longer than that is handled by ``workload.over_length`` even if it would fit its pool).
"""
from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

import numpy as np

from simulator.cluster.extension import MeasuredRun, Records, RunExtension, SummaryBlock, as_frame
from simulator.errors import ScenarioError, check_unique_names
from simulator.scenario.config import PoolConfig, Scenario

if TYPE_CHECKING:  # pragma: no cover
    import pandas as pd  # the run's frames; this module loads without pandas

POOL_FIELDS = {"model": "model", "hardware": "hardware", "deployment.tensor_parallel_size": "tensor_parallel_size",
               "deployment.quantization": "quantization", "deployment.kv_cache_dtype": "kv_cache_dtype",
               "scheduler.max_num_seqs": "max_num_seqs", "deployment.replicas": "replicas"}


def pool_tp(scenario: Scenario, pool: PoolConfig) -> int:
    return pool.tensor_parallel_size or scenario.deployment.tensor_parallel_size


def check_pools(scenario: Scenario) -> None:
    """Everything about ``deployment.pools`` / ``pool_routing`` that needs no model or profile
    (which other features combine with pools is :mod:`simulator.capabilities`' table)."""
    dep, wl = scenario.deployment, scenario.workload
    pools, routing = dep.pools, dep.pool_routing
    if pools is None:
        if routing is not None:
            raise ScenarioError("deployment.pool_routing", routing.by, "needs deployment.pools (the pools to route to)")
        return
    if not pools:
        raise ScenarioError("deployment.pools", [], "give at least one pool {name, model, replicas, ...}")
    if routing is None:
        raise ScenarioError("deployment.pool_routing", None, "required with deployment.pools: "
                            "{by: prompt_tokens, thresholds: [{max_prompt_tokens, pool}], default} "
                            "or {by: tier, map, default}")
    if dep.replicas != 1:
        raise ScenarioError("deployment.replicas", dep.replicas, "with deployment.pools the replicas are per pool "
                            "(deployment.pools[].replicas); leave deployment.replicas out")
    check_unique_names(pools, "deployment.pools", "pool")
    names = [p.name for p in pools]
    known = f"pools: {', '.join(names)}"

    def pool_ref(field: str, value: str | None) -> None:
        if value not in names:
            raise ScenarioError(field, value, f"unknown pool; {known}")

    if routing.default is not None:
        pool_ref("deployment.pool_routing.default", routing.default)
    if routing.by == "prompt_tokens":
        if routing.map:
            raise ScenarioError("deployment.pool_routing.map", dict(routing.map),
                                "applies to by: tier, not by: prompt_tokens")
        if not routing.thresholds:
            raise ScenarioError("deployment.pool_routing.thresholds", [], "by: prompt_tokens needs at least one "
                                "{max_prompt_tokens, pool}")
        prev = 0
        for i, t in enumerate(routing.thresholds):
            pool_ref(f"deployment.pool_routing.thresholds.{i}.pool", t.pool)
            if t.max_prompt_tokens <= prev:
                raise ScenarioError(f"deployment.pool_routing.thresholds.{i}.max_prompt_tokens", t.max_prompt_tokens,
                                    f"thresholds must be strictly increasing (previous: {prev}); each covers the "
                                    "prompts longer than the previous one")
            prev = t.max_prompt_tokens
        if routing.default is None:
            raise ScenarioError("deployment.pool_routing.default", None,
                                f"required: the pool for prompts longer than {prev} tokens; {known}")
    else:
        if routing.thresholds:
            raise ScenarioError("deployment.pool_routing.thresholds", "set",
                                "applies to by: prompt_tokens, not by: tier")
        tiers = [t.name for t in wl.tiers] if wl.tiers is not None else []
        if not tiers:
            raise ScenarioError("deployment.pool_routing.by", "tier", "needs workload.tiers (each request's tier)")
        for tier, pool in routing.map.items():
            if tier not in tiers:
                raise ScenarioError(f"deployment.pool_routing.map.{tier}", pool,
                                    f"unknown tier; tiers: {', '.join(tiers)}")
            pool_ref(f"deployment.pool_routing.map.{tier}", pool)
        unmapped = [t for t in tiers if t not in routing.map]
        if unmapped and routing.default is None:
            raise ScenarioError("deployment.pool_routing.default", None,
                                f"required: tier {unmapped[0]!r} is not in pool_routing.map; {known}")


def pool_scenario(scenario: Scenario, pool: PoolConfig) -> Scenario:
    """The scenario one pool's replicas run: the pool's fields over the scenario's (unvalidated copy;
    :func:`simulator.run.resolve.resolve` checks it)."""
    dep, sch = scenario.deployment, scenario.scheduler
    max_num_seqs = pool.max_num_seqs or sch.max_num_seqs
    if max_num_seqs > sch.max_num_batched_tokens:
        raise ScenarioError(f"deployment.pools.{pool.name}.max_num_seqs", max_num_seqs,
                            f"is above scheduler.max_num_batched_tokens={sch.max_num_batched_tokens}: every running "
                            "request needs one token per step")
    new_dep = dep.model_copy(update={
        "replicas": pool.replicas, "tensor_parallel_size": pool_tp(scenario, pool),
        "quantization": pool.quantization if pool.quantization is not None else dep.quantization,
        "kv_cache_dtype": pool.kv_cache_dtype if pool.kv_cache_dtype is not None else dep.kv_cache_dtype,
        "pools": None, "pool_routing": None})
    return scenario.model_copy(update={
        "model": pool.model if pool.model is not None else scenario.model,
        "hardware": pool.hardware if pool.hardware is not None else scenario.hardware,
        "deployment": new_dep, "scheduler": sch.model_copy(update={"max_num_seqs": max_num_seqs})})


def resolve_pools(scenario: Scenario, resolve: Callable[[Scenario], Any]) -> list[tuple[Scenario, Any]]:
    """Each pool's scenario and resolved system; errors name the pool's field."""
    check_pools(scenario)
    assert scenario.deployment.pools is not None
    out = []
    for pool in scenario.deployment.pools:
        sub = pool_scenario(scenario, pool)
        try:
            out.append((sub, resolve(sub)))
        except ScenarioError as e:
            field = e.field
            for full, short in POOL_FIELDS.items():
                if field == full or field.startswith(full + "."):
                    field = f"deployment.pools.{pool.name}.{short}{field[len(full):]}"
                    break
            else:
                field = f"{field} (pool {pool.name})"
            raise ScenarioError(field, e.value, e.message) from None
    return out


def assign_pools(scenario: Scenario, num_prompt_tokens: np.ndarray, tier: np.ndarray) -> np.ndarray:
    """Index of each request's pool (in ``deployment.pools`` order), by the routing rules."""
    dep = scenario.deployment
    assert dep.pools is not None and dep.pool_routing is not None
    names = [p.name for p in dep.pools]
    routing = dep.pool_routing
    default = names.index(routing.default) if routing.default is not None else -1
    if routing.by == "prompt_tokens":
        bounds = np.array([t.max_prompt_tokens for t in routing.thresholds], dtype=np.int64)
        targets = np.array([names.index(t.pool) for t in routing.thresholds] + [default], dtype=np.int64)
        return targets[np.searchsorted(bounds, num_prompt_tokens, side="left")]
    assert scenario.workload.tiers is not None
    tiers = [t.name for t in scenario.workload.tiers]
    targets = np.array([names.index(routing.map[t]) if t in routing.map else default for t in tiers], dtype=np.int64)
    return targets[tier.astype(np.int64)]


class PoolRouter(RunExtension):
    """A router over all replicas of all pools (the :class:`simulator.cluster.router.Router` protocol):
    the request's pool by the rules, then the pool's own router over that pool's replicas. As the
    run's extension for pools, it adds the ``pool`` column and the summary's ``pools`` block
    (``systems``: each pool's resolved system)."""

    def __init__(self, scenario: Scenario, pool_of: np.ndarray, make_router: Callable[[np.random.Generator], Any],
                 routing_rng: np.random.Generator, systems: Sequence[Any]) -> None:
        assert scenario.deployment.pools is not None
        self.scenario, self.systems = scenario, list(systems)
        self.names = [p.name for p in scenario.deployment.pools]
        sizes = [p.replicas for p in scenario.deployment.pools]
        self.offsets = np.concatenate([[0], np.cumsum(sizes)]).astype(int)
        self.routers = [make_router(g) for g in routing_rng.spawn(len(sizes))]
        self.pool_of = pool_of

    def route(self, rid: int, replicas: Sequence[Any]) -> int:
        p = int(self.pool_of[rid])
        a, b = self.offsets[p], self.offsets[p + 1]
        return int(a + (self.routers[p].route(rid, replicas[a:b]) if b - a > 1 else 0))

    def add_columns(self, records: Records) -> pd.DataFrame:
        import pandas as pd

        requests = as_frame(records)
        requests["pool"] = pd.Categorical.from_codes(self.pool_of, self.names)
        return requests

    def summary_blocks(self) -> Sequence[SummaryBlock]:
        return (SummaryBlock("pools", "requests", PoolsBlock(self.scenario, self.systems)),)


class PoolsBlock:
    """The summary's ``pools`` block: :func:`pools_summary` of the measured requests."""

    def __init__(self, scenario: Scenario, systems: Sequence[Any]) -> None:
        self.scenario, self.systems = scenario, systems

    def __call__(self, run: MeasuredRun) -> dict[str, Any]:
        return pools_summary(self.scenario, self.systems, run.requests, run.measured)


def pools_summary(scenario: Scenario, systems: Sequence[Any], requests: pd.DataFrame,
                  measured_mask: np.ndarray) -> dict[str, Any]:
    """Per pool: model, hardware, replicas, GPUs, requests, p50/p99 TTFT, TPOT and E2E."""
    out: dict[str, Any] = {}
    finished = (requests["status"] == "finished_length_capped").to_numpy()
    assert scenario.deployment.pools is not None
    for pool, system in zip(scenario.deployment.pools, systems, strict=True):
        in_pool = (requests["pool"] == pool.name).to_numpy()
        m = requests[in_pool & measured_mask]
        entry: dict[str, Any] = {
            "model": system.model.name, "hardware": system.profile.name, "replicas": pool.replicas,
            "tensor_parallel_size": pool_tp(scenario, pool), "num_gpus": pool.replicas * pool_tp(scenario, pool),
            "num_gpu_blocks": system.kv_plan.num_gpu_blocks, "max_model_len": system.max_model_len,
            "requests": {"arrived": int(in_pool.sum()), "completed": int((in_pool & finished).sum()),
                         "measured": len(m)}}
        for metric in ("ttft_s", "tpot_s", "e2e_s"):
            col = m[metric].to_numpy(dtype=float)
            col = col[~np.isnan(col)]
            entry[metric] = {"p50": float(np.quantile(col, 0.5)) if len(col) else None,
                             "p99": float(np.quantile(col, 0.99)) if len(col) else None}
        out[pool.name] = entry
    return out
