"""``simulate(scenario)``: build a fresh serving system from a scenario, run it, return records.

Wiring (one region): an arrival process walks the pre-drawn workload and hands each request to
the router, which puts it in one replica's waiting queue; each replica runs its own engine loop
(:mod:`simulator.replica`). Randomness comes from one ``SeedSequence`` spawned into independent
streams (arrivals, prompt lengths, output lengths, routing), so the same seed gives the same
numbers bit for bit, and changing one stream's distribution leaves the others' draws unchanged.
"""
from __future__ import annotations

import dataclasses
import gc
import math
import time
from dataclasses import dataclass, field
from typing import Any, Callable

import numpy as np
import pandas as pd
import simpy

from .config import Scenario, SchedulerConfig
from .cost_model import CostModel, make_cost_model
from .errors import ScenarioError
from .kv_cache import KVCacheManager, KVCachePlan, plan_kv_cache
from .levers import Deadlines, apply_client_view, check_levers, queue_is_full
from .models import MODEL_PRESETS, ModelSpec
from .prefix_cache import PrefixCachingKVManager, prefix_cache_counters
from .profiles import GIB, HardwareProfile, load_profile
from .quantization import Precision, check_kv_head_split, resolve_precision
from .replica import Replica
from .request import RequestStatus, RequestTable
from .router import ROUTERS, make_router
from .policies import POLICIES  # the registry, with every policy registered
from .scheduler import PREFIX_CACHING_POLICIES, DecodeRun, SchedulerOutput, SwapSpace
from .disaggregated import DisaggregatedFleet
from .speculative import SpeculativeScheduler
from .workload import Workload, generate_workload

ProgressCallback = Callable[[int, int], None]
STREAMS = ("arrivals", "prompt", "output", "routing", "speculative", "tier", "prefix", "sessions", "network")
"""Appending a stream leaves the earlier streams' numbers unchanged (SeedSequence spawn keys)."""


# -- resolving a scenario ------------------------------------------------------------------------
@dataclass(frozen=True)
class ResolvedSystem:
    """A scenario's references made concrete: model dimensions, hardware, memory plan."""

    model: ModelSpec
    profile: HardwareProfile
    kv_plan: KVCachePlan
    max_model_len: int
    draft_model: ModelSpec | None = None
    precision: Precision | None = None
    """Weight quantization and KV-cache dtype as served (``deployment.quantization``, ``kv_cache_dtype``)."""
    pools: tuple = ()
    """With ``deployment.pools``: ``(pool scenario, ResolvedSystem)`` per pool; the fields above are
    the first pool's, except ``max_model_len`` (the smallest of the pools')."""


def resolve_model(ref: str | ModelSpec) -> ModelSpec:
    if isinstance(ref, ModelSpec):
        return ref
    spec = MODEL_PRESETS.get(ref)
    if spec is None:
        raise ScenarioError("model", ref, f"unknown model preset; known: {', '.join(sorted(MODEL_PRESETS))} "
                            "(or give an inline spec with num_layers, hidden_size, ...)")
    return spec


def resolve(scenario: Scenario) -> ResolvedSystem:
    """Resolve presets and profiles and size the KV cache; raises :class:`ScenarioError`."""
    if scenario.deployment.pools is not None or scenario.deployment.pool_routing is not None:
        from .pools import resolve_pools   # model routing: one resolved system per pool
        pools = resolve_pools(scenario, resolve)
        first = pools[0][1]
        return dataclasses.replace(first, max_model_len=min(s.max_model_len for _, s in pools), pools=tuple(pools))
    model = resolve_model(scenario.model)
    profile = load_profile(scenario.hardware, base_dir=scenario.base_dir)
    sch, dep = scenario.scheduler, scenario.deployment
    if sch.policy not in POLICIES:
        raise ScenarioError("scheduler.policy", sch.policy, f"unknown policy; known: {', '.join(sorted(POLICIES))}")
    if dep.router not in ROUTERS:
        raise ScenarioError("deployment.router", dep.router, f"unknown router; known: {', '.join(sorted(ROUTERS))}")
    if sch.enable_prefix_caching and sch.policy not in PREFIX_CACHING_POLICIES:
        raise ScenarioError("scheduler.enable_prefix_caching", True,
                            f"not modelled with policy {sch.policy!r}; policies with prefix caching: "
                            f"{', '.join(sorted(PREFIX_CACHING_POLICIES))}")
    if sch.enable_prefix_caching and scenario.speculative_config is not None:
        raise ScenarioError("scheduler.enable_prefix_caching", True,
                            "not modelled together with speculative_config (lookahead KV slots are not "
                            "tracked per block); turn one of them off")
    if sch.enable_prefix_caching and sch.preemption_mode == "swap":
        raise ScenarioError("scheduler.enable_prefix_caching", True,
                            "not modelled together with preemption_mode: swap (swapped blocks would lose their "
                            "identities); use preemption_mode: recompute, where re-admission hits the cache")
    max_model_len = sch.max_model_len or model.max_model_len
    if sch.max_model_len and sch.max_model_len > model.max_model_len:
        raise ScenarioError("scheduler.max_model_len", sch.max_model_len,
                            f"exceeds {model.name}'s context length {model.max_model_len}")
    policy = POLICIES[sch.policy]
    spec = scenario.speculative_config
    if sch.policy == "disaggregated":
        _check_disaggregated(dep, profile)
        if dep.autoscaler is not None or scenario.fleet is not None:
            raise ScenarioError("deployment.autoscaler" if dep.autoscaler is not None else "fleet", "set",
                                "is not modelled with disaggregated pools yet; size the pools by hand")
    elif dep.prefill_replicas is not None or dep.decode_replicas is not None:
        raise ScenarioError("deployment.prefill_replicas" if dep.prefill_replicas is not None else
                            "deployment.decode_replicas", dep.prefill_replicas or dep.decode_replicas,
                            f"pool sizes apply to scheduler.policy: disaggregated, not {sch.policy!r}")
    if sch.preemption_mode == "swap":
        if sch.policy == "chunked_prefill":
            raise ScenarioError("scheduler.preemption_mode", "swap",
                                "is modelled for continuous, dynamic and static batching (vLLM v1's chunked "
                                "prefill only recomputes); use recompute")
        if profile.host_link_bandwidth_bytes_per_s is None:
            raise ScenarioError("hardware.host_link_bandwidth_bytes_per_s", None,
                                f"profile {profile.name!r} has no device-host bandwidth, which "
                                "preemption_mode: swap needs (PCIe Gen5 x16: about 5.5e10)")
    if spec is not None and sch.policy != "continuous":
        raise ScenarioError("speculative_config", spec.method,
                            f"speculative decoding is modelled with policy 'continuous' only, not {sch.policy!r}")
    if sch.max_num_batched_tokens < max_model_len and policy.uses_token_budget and not policy.splits_prompts:
        raise ScenarioError(
            "scheduler.max_num_batched_tokens", sch.max_num_batched_tokens,
            f"must be >= max_model_len={max_model_len} for policy {sch.policy!r}, which never splits a prompt "
            "(as vLLM requires without chunked prefill); lower scheduler.max_model_len or raise the budget")
    if model.num_attention_heads % dep.tensor_parallel_size:
        raise ScenarioError("deployment.tensor_parallel_size", dep.tensor_parallel_size,
                            f"must divide num_attention_heads={model.num_attention_heads}")
    check_kv_head_split(model, dep.tensor_parallel_size)
    check_levers(scenario)
    precision = resolve_precision(model, profile, dep.quantization, dep.kv_cache_dtype)
    plan = plan_kv_cache(model, profile, tensor_parallel_size=dep.tensor_parallel_size,
                         block_size=sch.block_size, gpu_memory_utilization=sch.gpu_memory_utilization,
                         max_num_batched_tokens=sch.max_num_batched_tokens, max_num_seqs=sch.max_num_seqs,
                         max_model_len=max_model_len, num_gpu_blocks_override=sch.num_gpu_blocks_override,
                         precision=precision)
    draft = None
    if spec is not None and spec.method == "draft":
        draft = _resolve_field_model(spec.draft_model, "speculative_config.draft_model")
        plan = _plan_with_draft(plan, model, draft, dep.tensor_parallel_size, max_model_len, sch.block_size)
    return ResolvedSystem(model, profile, plan, max_model_len, draft, precision)


def _check_disaggregated(dep: Any, profile: HardwareProfile) -> None:
    for name in ("prefill_replicas", "decode_replicas"):
        if getattr(dep, name) is None:
            raise ScenarioError(f"deployment.{name}", None, "scheduler.policy: disaggregated needs both pool sizes "
                                "(deployment.prefill_replicas and deployment.decode_replicas)")
    total = dep.prefill_replicas + dep.decode_replicas
    if dep.replicas not in (1, total):
        raise ScenarioError("deployment.replicas", dep.replicas,
                            f"with disaggregated pools the replica count is prefill_replicas + decode_replicas = "
                            f"{total}; leave deployment.replicas out")
    if dep.kv_transfer_bandwidth_bytes_per_s is None and profile.interconnect is None:
        raise ScenarioError("deployment.kv_transfer_bandwidth_bytes_per_s", None,
                            f"profile {profile.name!r} has no interconnect to send KV from prefill to decode "
                            "replicas over; give the link's bandwidth")


def _resolve_field_model(ref: str | ModelSpec, field_name: str) -> ModelSpec:
    try:
        return resolve_model(ref)
    except ScenarioError as e:
        raise ScenarioError(field_name, ref, e.message) from None


def _plan_with_draft(plan: KVCachePlan, model: ModelSpec, draft: ModelSpec, tp: int, max_model_len: int,
                     block_size: int) -> KVCachePlan:
    """The target's KV plan once a draft model shares the GPU: its weights come off the budget and
    every cached token also holds the draft's KV."""
    draft_weights = draft.weight_bytes() / tp
    draft_kv_per_block = block_size * draft.kv_bytes_per_token() / max(1, min(tp, draft.num_key_value_heads))
    per_block = plan.kv_bytes_per_block + draft_kv_per_block
    free = plan.usable_bytes - plan.weights_bytes - draft_weights - plan.activation_bytes
    blocks = int(free // per_block) if free > 0 else 0
    if blocks * block_size < max_model_len:
        raise ScenarioError("speculative_config.draft_model", draft.name,
                            f"with the draft's {draft_weights / 2**30:.1f} GiB of weights the KV cache holds "
                            f"{blocks * block_size} tokens, less than max_model_len={max_model_len}")
    return dataclasses.replace(plan, num_gpu_blocks=blocks, weights_bytes=plan.weights_bytes + draft_weights,
                               kv_bytes_per_block=per_block)


def spawn_rngs(seed: int) -> dict[str, np.random.Generator]:
    """Independent generators for each random stream, from one root seed."""
    children = np.random.SeedSequence(seed).spawn(len(STREAMS))
    return {name: np.random.default_rng(child) for name, child in zip(STREAMS, children)}


# -- records ---------------------------------------------------------------------------------------
STEP_COLUMNS = ("start_time", "duration_s", "replica", "num_seqs", "num_prefill_tokens",
                "num_decode_tokens", "num_waiting", "kv_blocks_used", "num_preempted")


class StepLog:
    """Every engine step of a run, appended in time order per replica.

    A single step and a decode run are both one entry; runs are expanded into one row per step
    only when the frame is built, for all runs at once (vectorised).
    """

    def __init__(self, block_size: int) -> None:
        self._entries: list[tuple] = []
        self._residues: list[np.ndarray] = []   # decode runs of more than one step only
        self._tabulated: list[np.ndarray] = []
        self._block_size = block_size
        self._replicas: set[int] = set()

    def add_step(self, replica: int, start: float, duration: float, out: SchedulerOutput,
                 kv_used: int, num_waiting: int) -> None:
        slots = out.num_decode if out.cost_num_decode is None else out.cost_num_decode
        self._entries.append((start, 1, replica, slots + len(out.admitted), out.num_prefill_tokens,
                              out.num_decode, num_waiting, kv_used, len(out.preempted), 0, duration, 0.0))
        self._replicas.add(replica)

    def add_run(self, replica: int, start: float, run: DecodeRun, num_waiting: int) -> None:
        a, b = run.affine if run.affine is not None else (math.nan, math.nan)
        self._entries.append((start, run.num_steps, replica, run.num_seqs, 0, run.num_seqs - run.num_padded, num_waiting,
                              run.kv_used_first, 0, run.context_sum, a, b))
        if run.num_steps > 1:
            self._residues.append(run.residues)
        if run.durations is not None:
            self._tabulated.append(run.durations)
        self._replicas.add(replica)

    def freeze(self) -> "FrozenStepLog":
        """The log as compact per-entry arrays (one row per step or decode run); drops the list."""
        frozen = FrozenStepLog(self._entries, self._residues, self._tabulated, len(self._replicas) > 1,
                               self._block_size)
        self._entries, self._residues, self._tabulated = [], [], []
        return frozen


class FrozenStepLog:
    """A finished run's step log: per-entry arrays, expanded to one row per step on demand.

    Expansion is vectorised over all entries; ``columns()`` gives numpy arrays (what the summary
    reads) and ``to_frame()`` the DataFrame (built only when a caller asks for ``result.steps``).
    """

    def __init__(self, entries: list[tuple], residues: list[np.ndarray], tabulated: list[np.ndarray],
                 interleave: bool, block_size: int) -> None:
        self.num_entries = len(entries)
        self._interleave = interleave
        self._tabulated = np.concatenate(tabulated) if tabulated else np.zeros(0)
        # Residue histograms of the multi-step runs, in entry order, one row each.
        self._residues = (np.concatenate(residues) if residues else np.zeros(0, dtype=np.int64)).reshape(-1, block_size)
        # Every field is an int or a float well inside float64's exact integer range.
        cols = [np.ascontiguousarray(c) for c in np.array(entries, dtype=np.float64).reshape(-1, 12).T]
        (self._start, k, self._replica, self._seqs, self._prefill, self._decode, self._waiting,
         self._kv_first, self._preempted, self._ctx, self._a, self._b) = cols
        self._k = k.astype(np.int64)
        self._columns: dict[str, np.ndarray] | None = None

    @property
    def num_steps(self) -> int:
        return int(self._k.sum())

    def columns(self) -> dict[str, np.ndarray]:
        """One array per column of :data:`STEP_COLUMNS`, one element per engine step, in time order."""
        if self._columns is not None:
            return self._columns
        k = self._k
        if len(k) == 0:
            self._columns = {c: np.zeros(0) for c in STEP_COLUMNS}
            return self._columns
        total = int(k.sum())
        first_row = np.cumsum(k) - k
        j = np.arange(total) - np.repeat(first_row, k)               # step index within its entry
        seqs_per_step = np.repeat(self._seqs.astype(np.int32), k)
        a, b = self._a, self._b
        durs = np.repeat(a, k) + np.repeat(b, k) * (np.repeat(self._ctx.astype(np.float64), k) + seqs_per_step * j)
        tabulated = np.isnan(a)
        if tabulated.any():
            durs[np.repeat(tabulated, k)] = self._tabulated
        before = np.cumsum(durs) - durs                              # time of all earlier steps
        offsets = before - np.repeat(before[first_row], k)
        # Blocks allocated by each step of a run: the residue histogram read in step order.
        residues = self._residues
        bs = residues.shape[1]
        multi = np.flatnonzero(k > 1)
        new_blocks = np.zeros(total, dtype=np.int64)
        if len(multi):
            rows = np.concatenate([np.arange(f + 1, f + n) for f, n in zip(first_row[multi], k[multi])]) \
                if len(multi) < 64 else np.flatnonzero(j)
            position = np.zeros(len(k), dtype=np.int64)    # entry -> its row in ``residues``
            position[multi] = np.arange(len(multi))
            entry_of_row = np.repeat(np.arange(len(k)), k)[rows]
            new_blocks[rows] = residues.ravel()[position[entry_of_row] * bs + (-j[rows]) % bs]
        cum_blocks = np.cumsum(new_blocks)
        kv = np.repeat(self._kv_first - cum_blocks[first_row], k) + cum_blocks
        cols = {
            "start_time": np.repeat(self._start, k) + offsets, "duration_s": durs,
            "replica": np.repeat(self._replica.astype(np.int16), k), "num_seqs": seqs_per_step,
            "num_prefill_tokens": np.repeat(self._prefill.astype(np.int32), k),
            "num_decode_tokens": np.repeat(self._decode.astype(np.int32), k),
            "num_waiting": np.repeat(self._waiting.astype(np.int32), k),
            "kv_blocks_used": kv.astype(np.int32),
            "num_preempted": np.repeat(self._preempted.astype(np.int32), k)}
        if self._interleave:   # interleave the replicas' logs by time
            order = np.argsort(cols["start_time"], kind="stable")
            cols = {name: col[order] for name, col in cols.items()}
        self._columns = cols
        return cols

    def to_frame(self) -> pd.DataFrame:
        return pd.DataFrame(self.columns())


@dataclass
class SimulationResult:
    """What a run produced: one row per request, one row per engine step, and the summary.

    ``steps`` is built on first access from the compact step log (a 100k-request run has millions
    of steps; the summary and the planner never need the DataFrame).
    """

    scenario: Scenario
    requests: pd.DataFrame
    step_log: FrozenStepLog
    system: ResolvedSystem
    sim_time_s: float
    wall_s: float
    summary: dict[str, Any] = field(default_factory=dict)
    engine_stats: dict[str, int] = field(default_factory=dict)
    """Policy counters summed over replicas (speculative decoding's proposals and acceptances)."""
    prefix_cache: dict[str, int] | None = None
    """Prefix-cache counters summed over replicas (None when prefix caching is off)."""

    @property
    def steps(self) -> pd.DataFrame:
        frame = self.__dict__.get("_steps_frame")
        if frame is None:
            frame = self.step_log.to_frame()
            self.__dict__["_steps_frame"] = frame
        return frame


def _requests_frame(table: RequestTable, scenario: Scenario) -> pd.DataFrame:
    status = pd.Categorical.from_codes(table.status.astype(np.int64), [s.name.lower() for s in RequestStatus])
    df = pd.DataFrame({
        "request_id": np.arange(len(table), dtype=np.int64),
        "arrival_time": table.arrival_time,
        "num_prompt_tokens": table.num_prompt_tokens,
        "max_tokens": table.max_tokens,
        "num_output_tokens": table.num_output_tokens,
        "first_scheduled_time": table.first_scheduled_time,
        "first_token_time": table.first_token_time,
        "finish_time": table.finish_time,
        "replica": table.replica,
        "num_preemptions": table.num_preemptions,
        "num_cached_tokens": table.num_cached_tokens,
        "status": status,
    })
    tiers = scenario.workload.tiers
    if tiers is not None:
        df["tier"] = pd.Categorical.from_codes(table.tier.astype(np.int64), [t.name for t in tiers])
        df["priority"] = table.priority
    df["queue_delay_s"] = df["first_scheduled_time"] - df["arrival_time"]
    df["ttft_s"] = df["first_token_time"] - df["arrival_time"]
    df["e2e_s"] = df["finish_time"] - df["arrival_time"]
    decode_tokens = (df["num_output_tokens"] - 1).where(df["num_output_tokens"] > 1)
    df["tpot_s"] = (df["finish_time"] - df["first_token_time"]) / decode_tokens
    return df


# -- the run ---------------------------------------------------------------------------------------
def simulate(scenario: Scenario, *, on_progress: ProgressCallback | None = None, seed: int | None = None,
             fast_forward: bool = True) -> SimulationResult:
    """Run one seeded replication of ``scenario``.

    Args:
        scenario: a validated scenario (see :func:`simulator.config.load_scenario`).
        on_progress: called as ``on_progress(done, total)`` as requests finish (about 200 times a run).
        seed: overrides ``scenario.seed``.
        fast_forward: advance runs of identical decode steps in one event (same results; off only
            to verify exactly that).

    Raises:
        ScenarioError: a reference that does not resolve, a model that does not fit, bad traces.
    """
    wall0 = time.perf_counter()
    if seed is not None:
        scenario = scenario.model_copy(update={"seed": seed})
    system = resolve(scenario)
    rngs = spawn_rngs(scenario.seed)
    workload = generate_workload(scenario, system.max_model_len, rngs)
    table = RequestTable(workload)
    if scenario.workload.tiers is not None:
        table.priority = np.array([t.priority for t in scenario.workload.tiers], dtype=np.int64)[table.tier]
    env = simpy.Environment()
    steps = StepLog(scenario.scheduler.block_size)
    run = _Run(env, scenario, system, workload, table, steps, rngs, on_progress, fast_forward)  # registers processes
    # The run allocates many small objects (step-log tuples, SimPy events) but no lasting reference
    # cycles, so the cyclic collector's repeated scans of the growing logs are pure overhead (12%
    # of a 100k-request run). Pause it for the run and restore the caller's setting.
    gc_was_enabled = gc.isenabled()
    gc.disable()
    try:
        env.run(until=scenario.max_sim_time_s)
        result = SimulationResult(scenario, apply_client_view(_requests_frame(table, scenario), scenario),
                                  steps.freeze(), system, float(env.now), time.perf_counter() - wall0)
        result.prefix_cache = prefix_cache_counters(run.replicas)
        for source in [r.scheduler for r in run.replicas] + ([run.fleet] if run.fleet is not None else []):
            for name, value in source.stats().items():
                result.engine_stats[name] = result.engine_stats.get(name, 0) + value
        if scenario.network is not None:
            from .network import add_client_latencies, network_from_config
            add_client_latencies(result.requests, network_from_config(scenario.network), rngs["network"])
        if run.geo is not None:
            run.geo.add_columns(result.requests)
        if run.pool_router is not None:
            run.pool_router.add_columns(result.requests)
    finally:
        if gc_was_enabled:
            gc.enable()
    from .metrics import summarize  # local import: metrics depends on this module's result type
    result.summary = summarize(result)
    routing = _routing_counters(run.routers)
    if routing is not None:
        result.summary["routing"] = routing
    if run.autoscaler is not None:
        from .metrics import measurement_window
        req = result.requests
        start, end = measurement_window(req, scenario.warmup_s, scenario.cooldown_s)
        measured = ((req["arrival_time"] >= start) & (req["arrival_time"] <= end)
                    & (req["status"].astype(str) == "finished_length_capped")).to_numpy()
        result.summary["autoscaler"] = run.autoscaler.summary(req, measured, result.sim_time_s)
    result.wall_s = time.perf_counter() - wall0
    result.summary["wall_s"] = result.wall_s
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
                 on_progress: ProgressCallback | None, fast_forward: bool) -> None:
        self.env, self.table = env, table
        self.times = workload.arrival_time
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
                                          system.precision if _levers_on(dep) else None)
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
                from .fleet import GeoRouter
                self.geo = GeoRouter(scenario.fleet, self._router, self.total, rngs["routing"], rngs["network"],
                                     lambda: float(env.now))
                self.router, num_replicas = self.geo, self.geo.num_replicas
            if dep.autoscaler is not None:
                num_replicas = dep.autoscaler.max_replicas
            if system.pools:   # model routing: each pool's replicas with its own model, cost and KV plan
                from .pools import PoolRouter, assign_pools
                self.pool_router = PoolRouter(scenario, assign_pools(scenario, table.num_prompt_tokens, table.tier),
                                              self._router, rngs["routing"])
                self.router = self.pool_router
                self.replicas = []
                for sub, sub_system in system.pools:
                    sub_cost = make_cost_model(sub_system.profile, sub_system.model, sub.deployment.tensor_parallel_size,
                                               sub_system.precision if _levers_on(sub.deployment) else None)
                    sub_proposal = _proposal_time(sub, sub_system, sub_cost)
                    self.replicas += [
                        Replica(env, len(self.replicas) + i, _make_scheduler(sub, sub_system, table, rngs, sub_proposal),
                                sub_cost, steps, self.next_event_time, self._finished, fast_forward)
                        for i in range(sub.deployment.replicas)]
            else:
                self.replicas = [
                    Replica(env, i, _make_scheduler(scenario, system, table, rngs, proposal), cost, steps,
                            self.next_event_time, self._finished, fast_forward)
                    for i in range(num_replicas)]
            self.entry = self.replicas
            if dep.autoscaler is not None:   # replicas [0, active) take requests; the rest start on demand
                from .autoscaler import Autoscaler
                self.autoscaler = Autoscaler(env, dep.autoscaler, system.kv_plan.weights_bytes, self.replicas,
                                             lambda: self.next_index >= self.total and self.done >= self.total)
        self.scenario = scenario
        self.shed_when_full = scenario.admission.max_queue_len is not None
        for r in self.replicas:
            r.deadlines = Deadlines.for_scenario(scenario, r.scheduler, table, self._finished)
        env.process(self.arrivals())

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

    def arrivals(self):  # noqa: ANN201 - SimPy process
        env, table, times, replicas = self.env, self.table, self.times, self.entry
        rejected = table.rejected_at_arrival
        any_rejected = bool(rejected.any())
        for rid in range(self.total):
            delay = times[rid] - env.now
            if delay > 0:
                yield env.timeout(delay)
            self.next_index = rid + 1
            if any_rejected and rejected[rid]:
                table.status[rid] = RequestStatus.FINISHED_REJECTED
                self._finished(1)
                continue
            if self.autoscaler is not None:
                i = self.router.route(rid, replicas[: self.autoscaler.active]) if self.autoscaler.active > 1 else 0
            else:
                i = self.router.route(rid, replicas) if len(replicas) > 1 or self.geo is not None else 0
            table.replica[rid] = i
            if self.shed_when_full and queue_is_full(self.scenario, replicas[i].scheduler):
                table.status[rid] = RequestStatus.FINISHED_SHED     # fast rejection, counted
                table.finish_time[rid] = env.now
                self._finished(1)
                continue
            replicas[i].add_request(rid)

    def _finished(self, count: int) -> None:
        self.done += count
        if self.on_progress is not None and (self.done >= self._next_report or self.done == self.total):
            self._next_report = self.done + self.progress_every
            self.on_progress(self.done, self.total)


def _make_scheduler(scenario: Scenario, system: ResolvedSystem, table: RequestTable,
                    rngs: dict[str, np.random.Generator], proposal_time_s: Callable[[int, int], float] | None,
                    cls: type | None = None):  # noqa: ANN202
    cfg = scenario.scheduler
    if cfg.enable_prefix_caching:
        kv = PrefixCachingKVManager(system.kv_plan.num_gpu_blocks, cfg.block_size, table.block_hashes)
    else:
        kv = KVCacheManager(system.kv_plan.num_gpu_blocks, cfg.block_size)
    if scenario.speculative_config is not None:
        sched = SpeculativeScheduler(cfg, kv, table, spec=scenario.speculative_config, rng=rngs["speculative"],
                                     proposal_time_s=proposal_time_s)
    else:
        sched = (cls or POLICIES[cfg.policy])(cfg, kv, table)
    if cfg.preemption_mode == "swap":
        per_block = system.kv_plan.kv_bytes_per_block
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
        return lambda n, ctx: 0.0
    if spec.method == "mtp":
        layers = system.model.num_layers

        def mtp(n: int, ctx: int) -> float:   # k extra decoder layers of the target
            bd = cost.breakdown([], [], n, ctx, n)
            return k * (bd.total_s - bd.overhead_s) / layers
        return mtp
    draft_cost = make_cost_model(system.profile, system.draft_model, tp)

    def draft(n: int, ctx: int) -> float:     # k sequential draft decode steps, no second CPU overhead
        overhead = draft_cost.breakdown([], [], n, 0, n).overhead_s
        return sum(draft_cost.decode_step_time_s(n, ctx + n * j) - overhead for j in range(k))
    return draft
