"""What one replica can serve: an analytic estimate from the cost model alone, and the simulated
saturation throughput.

In steady state a replica runs a batch of ``B`` requests: ``B`` is ``max_num_seqs`` unless the KV
cache holds fewer requests of the mean size (prompt + half the output, the mean resident length
of a request while it decodes). Each request then needs one prefill and ``output - 1`` decode
steps shared with ``B - 1`` others, so the replica completes at most

    mu = B / ((output - 1) * t_decode(B) + B * t_prefill_marginal(prompt))

requests per second, where ``t_decode(B)`` is a pure-decode step over the mean context and
``t_prefill_marginal`` is what adding one prompt to such a step costs. It is an *estimate*, not a
bound: prefix-cache hits, speculative decoding and the spread of lengths move the real capacity
either way. ``ceil(rate / mu)`` replicas is where the planner's simulated search starts; the search
then checks by simulation which count passes. A pipelined replica (``pipeline_parallel_size`` PP)
splits ``B`` over PP micro-batches in flight: its round of tokens takes the larger of one
micro-batch's traversal and PP times its slowest stage (:func:`_pipelined_round`).

:func:`saturation_rps` measures instead: every request arrives at once and the replicas' completion
rate is read in the steady middle of the run (between 10% and 80% of the completions, leaving out
the ramp-up and the drain). The planner's utilization is the design load over this figure, and a
count at 100% or more never passes. :func:`pool_saturation` reads the same figure for each model pool of
a deployment with ``deployment.pools`` from one run.
"""
from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import pandas as pd

from simulator.cost.base import BatchShape, CostModel
from simulator.cost.factory import make_cost_model
from simulator.run.resolve import resolve
from simulator.run.simulate import simulate
from simulator.scenario.config import Scenario
from simulator.scenario.parallel import Parallelism
from simulator.workload.lengths import make_length


@dataclass(frozen=True)
class CapacityBound:
    batch_size: int
    """Steady-state running batch ``B`` (``max_num_seqs`` or the KV cache's limit)."""
    decode_step_s: float
    prefill_marginal_s: float
    max_rps_per_replica: float

    def replicas_for(self, rate_per_s: float) -> int:
        return max(1, math.ceil(rate_per_s / self.max_rps_per_replica - 1e-9))


def saturation_rps(scenario: Scenario, num_requests: int = 2000) -> float:
    """Requests/s ``scenario``'s deployment completes with a full queue (see the module docstring)."""
    saturated = _saturated(scenario, num_requests)
    key = _run_key(saturated)
    rate = _SATURATION.get(key)
    if rate is None:
        rate = _steady_rate(simulate(saturated).requests)
        _remember(_SATURATION, key, rate)
    return rate


def saturation_key(scenario: Scenario, num_requests: int = 2000) -> str:
    """What :func:`saturation_rps` of ``scenario`` depends on: equal keys, equal figures."""
    return _run_key(_saturated(scenario, num_requests))


_SATURATION: dict[str, float] = {}
_POOL_SATURATION: dict[str, dict[str, PoolLoad]] = {}
"""Saturation figures already simulated in this process, by :func:`_run_key`: the planner's cells
of one candidate often differ only in their arrival rate, which a saturated run overrides."""
_MAX_REMEMBERED = 256


def _run_key(scenario: Scenario) -> str:
    """Everything a run depends on: the scenario but its name (a label the requests never see)."""
    return scenario.model_copy(update={"name": ""}).model_dump_json()


def _remember(cache: dict, key: str, value: object) -> None:
    if len(cache) >= _MAX_REMEMBERED:
        cache.clear()
    cache[key] = value


@dataclass(frozen=True)
class PoolLoad:
    """One model pool's part of a deployment with ``deployment.pools``."""

    share: float
    """Fraction of the requests routed to the pool."""
    saturation_rps: float
    """Requests/s the pool's deployment completes on its own requests with a full queue."""


def pool_saturation(scenario: Scenario, num_requests_per_pool: int = 2000) -> dict[str, PoolLoad]:
    """Each pool's routing share and saturation throughput (at the pools' replica counts), from one run
    with every request queued at once: the pools drain side by side, each on its own requests, so each
    pool's steady completion rate is read as :func:`saturation_rps` reads one deployment's."""
    assert scenario.deployment.pools is not None
    names = [p.name for p in scenario.deployment.pools]
    saturated = _saturated(scenario, num_requests_per_pool * len(names))
    key = _run_key(saturated)
    loads = _POOL_SATURATION.get(key)
    if loads is None:
        req = simulate(saturated).requests
        pool = req["pool"].astype(str).to_numpy()
        loads = {name: PoolLoad(float((pool == name).mean()), _steady_rate(req[pool == name])) for name in names}
        _remember(_POOL_SATURATION, key, loads)
    return dict(loads)


def _saturated(scenario: Scenario, num_requests: int) -> Scenario:
    """``scenario`` with every request arriving at once and nothing shed, timed out or cut short."""
    return scenario.with_overrides({"num_requests": num_requests, "duration_s": None, "warmup_s": 0,
                                    "cooldown_s": 0, "max_sim_time_s": None, "client.timeout_s": None,
                                    "admission.max_queue_len": None, "admission.max_queue_delay_s": None,
                                    "workload.arrival": {"process": "poisson", "rate_per_s": 1e7}})


def _steady_rate(req: pd.DataFrame) -> float:
    """Completions per second between 10% and 80% of the completions (0 without any)."""
    done = np.sort(req.loc[req["status"] == "finished_length_capped", "finish_time"].to_numpy(dtype=float))
    if len(done) < 20:
        return len(done) / float(done[-1]) if len(done) and done[-1] > 0 else 0.0
    i, j = int(0.1 * len(done)), int(0.8 * len(done))
    return (j - i) / float(done[j] - done[i]) if done[j] > done[i] else math.inf


def capacity_bound(scenario: Scenario) -> CapacityBound:
    """Max requests/s one replica of ``scenario`` can complete at its workload's mean lengths (all
    its attention data-parallel ranks, each a batch of its own: the cost model is one rank's; an
    upper bound for them, as in lockstep a rank's prefill also holds up the others' decodes)."""
    system = resolve(scenario)
    wl = scenario.workload
    prompt = make_length(wl.prompt_tokens, scenario, "workload.prompt_tokens").mean
    output = make_length(wl.output_tokens, scenario, "workload.output_tokens").mean
    cost = make_cost_model(system.profile, system.model, scenario.deployment.tensor_parallel_size,
                           parallel=Parallelism.of(scenario.deployment), cuda_graph=system.cuda_graph)
    resident = prompt + output / 2.0
    kv_tokens = system.kv_plan.num_gpu_blocks * system.kv_plan.block_size
    batch = max(1, min(scenario.scheduler.max_num_seqs, int(kv_tokens // max(resident, 1.0))))
    stages = scenario.deployment.pipeline_parallel_size
    if stages > 1:
        decode, marginal = _pipelined_round(cost, batch, stages, resident, int(round(prompt)))
    else:
        ctx = int(round(batch * resident))
        decode = cost.decode_step_time_s(batch, ctx)
        p = int(round(prompt))
        others = batch - 1
        others_ctx = int(round(others * resident))
        with_prefill = cost.step_time_s(BatchShape([p], [0], others, others_ctx, batch))
        without = cost.step_time_s(BatchShape.decode(others, others_ctx)) if others else 0.0
        marginal = max(with_prefill - without, 1e-12)
    mu = scenario.deployment.data_parallel_size * batch / (max(output - 1.0, 0.0) * decode + batch * marginal)
    return CapacityBound(batch, decode, marginal, mu)


def _pipelined_round(cost: CostModel, batch: int, stages: int, resident: float, prompt: int) -> tuple[float, float]:
    """A pipelined replica's ``(round, marginal)``: the ``batch`` requests split over ``stages``
    micro-batches, each request's token waits for its micro-batch to traverse the stages, and the
    slowest stage takes the micro-batches one after another, so a round of tokens takes the larger of
    the traversal and ``stages`` times the slowest stage; a prompt added to a micro-batch lengthens
    the round by what it adds to the slowest stage (:mod:`simulator.engine.pipeline`)."""
    micro = max(1, -(-batch // stages))
    decode = cost.stage_times_s(BatchShape.decode(micro, int(round(micro * resident))))
    round_s = max(sum(decode), stages * max(decode))
    others = micro - 1
    others_ctx = int(round(others * resident))
    with_prefill = cost.stage_times_s(BatchShape([prompt], [0], others, others_ctx, micro))
    without = cost.stage_times_s(BatchShape.decode(others, others_ctx)) if others else [0.0] * len(decode)
    slowest = max(range(len(decode)), key=lambda s: decode[s])
    return round_s, max(with_prefill[slowest] - without[slowest], 1e-12)
