"""``simulate(scenario)``: build a fresh serving system from a scenario, run it, return records.

Wiring (one region): an arrival process walks the pre-drawn workload and hands each request to
the router, which puts it in one replica's waiting queue; each replica runs its own engine loop
(:mod:`simulator.replica`). Randomness comes from one ``SeedSequence`` spawned into independent
streams (arrivals, prompt lengths, output lengths, routing), so the same seed gives the same
numbers bit for bit, and changing one stream's distribution leaves the others' draws unchanged.
"""
from __future__ import annotations

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
from .levers import Deadlines, apply_client_view, queue_is_full
from .models import MODEL_PRESETS, ModelSpec
from .profiles import HardwareProfile, load_profile
from .quantization import Precision, check_kv_head_split, resolve_precision
from .replica import Replica
from .request import RequestStatus, RequestTable
from .router import ROUTERS
from .scheduler import POLICIES, DecodeRun, SchedulerOutput
from .workload import Workload, generate_workload

ProgressCallback = Callable[[int, int], None]
STREAMS = ("arrivals", "prompt", "output", "routing")


# -- resolving a scenario ------------------------------------------------------------------------
@dataclass(frozen=True)
class ResolvedSystem:
    """A scenario's references made concrete: model dimensions, hardware, memory plan."""

    model: ModelSpec
    profile: HardwareProfile
    kv_plan: KVCachePlan
    max_model_len: int
    precision: Precision | None = None
    """Weight quantization and KV-cache dtype as served (``deployment.quantization``, ``kv_cache_dtype``)."""


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
    model = resolve_model(scenario.model)
    profile = load_profile(scenario.hardware, base_dir=scenario.base_dir)
    sch, dep = scenario.scheduler, scenario.deployment
    if sch.policy not in POLICIES:
        raise ScenarioError("scheduler.policy", sch.policy, f"unknown policy; known: {', '.join(sorted(POLICIES))}")
    if dep.router not in ROUTERS:
        raise ScenarioError("deployment.router", dep.router, f"unknown router; known: {', '.join(sorted(ROUTERS))}")
    max_model_len = sch.max_model_len or model.max_model_len
    if sch.max_model_len and sch.max_model_len > model.max_model_len:
        raise ScenarioError("scheduler.max_model_len", sch.max_model_len,
                            f"exceeds {model.name}'s context length {model.max_model_len}")
    if sch.max_num_batched_tokens < max_model_len:
        raise ScenarioError(
            "scheduler.max_num_batched_tokens", sch.max_num_batched_tokens,
            f"must be >= max_model_len={max_model_len} for policy {sch.policy!r}, which never splits a prompt "
            "(as vLLM requires without chunked prefill); lower scheduler.max_model_len or raise the budget")
    if model.num_attention_heads % dep.tensor_parallel_size:
        raise ScenarioError("deployment.tensor_parallel_size", dep.tensor_parallel_size,
                            f"must divide num_attention_heads={model.num_attention_heads}")
    check_kv_head_split(model, dep.tensor_parallel_size)
    precision = resolve_precision(model, profile, dep.quantization, dep.kv_cache_dtype)
    plan = plan_kv_cache(model, profile, tensor_parallel_size=dep.tensor_parallel_size,
                         block_size=sch.block_size, gpu_memory_utilization=sch.gpu_memory_utilization,
                         max_num_batched_tokens=sch.max_num_batched_tokens, max_num_seqs=sch.max_num_seqs,
                         max_model_len=max_model_len, num_gpu_blocks_override=sch.num_gpu_blocks_override,
                         precision=precision)
    return ResolvedSystem(model, profile, plan, max_model_len, precision)


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
        self._residues: list[np.ndarray] = []
        self._tabulated: list[np.ndarray] = []
        self._no_residues = np.zeros(block_size, dtype=np.int64)
        self._replicas: set[int] = set()

    def add_step(self, replica: int, start: float, duration: float, out: SchedulerOutput,
                 kv_used: int, num_waiting: int) -> None:
        self._entries.append((start, 1, replica, out.num_decode + len(out.admitted), out.num_prefill_tokens,
                              out.num_decode, num_waiting, kv_used, len(out.preempted), 0, duration, 0.0))
        self._residues.append(self._no_residues)
        self._replicas.add(replica)

    def add_run(self, replica: int, start: float, run: DecodeRun, num_waiting: int) -> None:
        a, b = run.affine if run.affine is not None else (math.nan, math.nan)
        self._entries.append((start, run.num_steps, replica, run.num_seqs, 0, run.num_seqs, num_waiting,
                              run.kv_used_first, 0, run.context_sum, a, b))
        self._residues.append(run.residues)
        if run.durations is not None:
            self._tabulated.append(run.durations)
        self._replicas.add(replica)

    def to_frame(self) -> pd.DataFrame:
        if not self._entries:
            return pd.DataFrame({c: np.zeros(0) for c in STEP_COLUMNS})
        (start, k, replica, seqs, prefill, decode, waiting, kv_first, preempted, ctx, a, b) = (
            np.asarray(v) for v in zip(*self._entries))
        k = k.astype(np.int64)
        total = int(k.sum())
        first_row = np.cumsum(k) - k
        j = np.arange(total) - np.repeat(first_row, k)               # step index within its entry
        seqs_per_step = np.repeat(seqs.astype(np.int32), k)
        durs = np.repeat(a, k) + np.repeat(b, k) * (np.repeat(ctx.astype(np.float64), k) + seqs_per_step * j)
        tabulated = np.isnan(a)
        if tabulated.any():
            durs[np.repeat(tabulated, k)] = np.concatenate(self._tabulated)
        before = np.cumsum(durs) - durs                              # time of all earlier steps
        offsets = before - np.repeat(before[first_row], k)
        # Blocks allocated by each step of a run: the residue histogram read in step order.
        residues = np.stack(self._residues)
        bs = residues.shape[1]
        multi = np.flatnonzero(k > 1)
        new_blocks = np.zeros(total, dtype=np.int64)
        if len(multi):
            rows = np.concatenate([np.arange(f + 1, f + n) for f, n in zip(first_row[multi], k[multi])]) \
                if len(multi) < 64 else np.flatnonzero(j)
            new_blocks[rows] = residues.ravel()[np.repeat(np.arange(len(k)), k)[rows] * bs + (-j[rows]) % bs]
        cum_blocks = np.cumsum(new_blocks)
        kv = np.repeat(kv_first - cum_blocks[first_row], k) + cum_blocks
        frame = pd.DataFrame({
            "start_time": np.repeat(start, k) + offsets, "duration_s": durs,
            "replica": np.repeat(replica.astype(np.int16), k), "num_seqs": seqs_per_step,
            "num_prefill_tokens": np.repeat(prefill.astype(np.int32), k),
            "num_decode_tokens": np.repeat(decode.astype(np.int32), k),
            "num_waiting": np.repeat(waiting.astype(np.int32), k),
            "kv_blocks_used": kv.astype(np.int32),
            "num_preempted": np.repeat(preempted.astype(np.int32), k)})
        if len(self._replicas) > 1:   # interleave the replicas' logs by time
            frame = frame.iloc[np.argsort(frame["start_time"].to_numpy(), kind="stable")].reset_index(drop=True)
        return frame


@dataclass
class SimulationResult:
    """What a run produced: one row per request, one row per engine step, and the summary."""

    scenario: Scenario
    requests: pd.DataFrame
    steps: pd.DataFrame
    system: ResolvedSystem
    sim_time_s: float
    wall_s: float
    summary: dict[str, Any] = field(default_factory=dict)


def _requests_frame(table: RequestTable) -> pd.DataFrame:
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
        "status": status,
    })
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
    env = simpy.Environment()
    steps = StepLog(scenario.scheduler.block_size)
    _Run(env, scenario, system, workload, table, steps, rngs, on_progress, fast_forward)  # registers processes
    # The run allocates many small objects (step-log tuples, SimPy events) but no lasting reference
    # cycles, so the cyclic collector's repeated scans of the growing logs are pure overhead (12%
    # of a 100k-request run). Pause it for the run and restore the caller's setting.
    gc_was_enabled = gc.isenabled()
    gc.disable()
    try:
        env.run(until=scenario.max_sim_time_s)
        result = SimulationResult(scenario, apply_client_view(_requests_frame(table), scenario), steps.to_frame(),
                                  system, float(env.now), time.perf_counter() - wall0)
    finally:
        if gc_was_enabled:
            gc.enable()
    from .metrics import summarize  # local import: metrics depends on this module's result type
    result.summary = summarize(result)
    result.wall_s = time.perf_counter() - wall0
    result.summary["wall_s"] = result.wall_s
    return result


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
        self.router = ROUTERS[dep.router](rngs["routing"])
        levers_on = dep.quantization not in (None, "none") or dep.kv_cache_dtype != "auto"
        cost: CostModel = make_cost_model(system.profile, system.model, dep.tensor_parallel_size,
                                          system.precision if levers_on else None)
        self.replicas = [
            Replica(env, i, _make_scheduler(sch, system, table), cost, steps, self.next_event_time,
                    self._finished, fast_forward)
            for i in range(dep.replicas)]
        self.scenario = scenario
        self.shed_when_full = scenario.admission.max_queue_len is not None
        for r in self.replicas:
            r.deadlines = Deadlines.for_scenario(scenario, r.scheduler, table, self._finished)
        env.process(self.arrivals())

    def next_event_time(self) -> float:
        """Instant of the next arrival not yet delivered (or the stop time), for decode runs."""
        if self.next_index < self.total:
            return min(float(self.times[self.next_index]), self.stop_time)
        return self.stop_time

    def arrivals(self):  # noqa: ANN201 - SimPy process
        env, table, times, replicas = self.env, self.table, self.times, self.replicas
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
            i = self.router.route(rid, replicas) if len(replicas) > 1 else 0
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


def _make_scheduler(cfg: SchedulerConfig, system: ResolvedSystem, table: RequestTable):  # noqa: ANN202
    kv = KVCacheManager(system.kv_plan.num_gpu_blocks, cfg.block_size)
    return POLICIES[cfg.policy](cfg, kv, table)
