"""An analytic bound on what one replica can serve, from the cost model alone (no simulation).

In steady state a replica runs a batch of ``B`` requests: ``B`` is ``max_num_seqs`` unless the KV
cache holds fewer requests of the mean size (prompt + half the output, the mean resident length
of a request while it decodes). Each request then needs one prefill and ``output - 1`` decode
steps shared with ``B - 1`` others, so the replica completes at most

    mu = B / ((output - 1) * t_decode(B) + B * t_prefill_marginal(prompt))

requests per second, where ``t_decode(B)`` is a pure-decode step over the mean context and
``t_prefill_marginal`` is what adding one prompt to such a step costs. Latency SLOs only lower the
usable rate, so ``ceil(rate / mu)`` replicas is where the planner's simulated search starts; the
search still checks by simulation whether fewer would do.
"""
from __future__ import annotations

import math
from dataclasses import dataclass

from simulator.cost.base import BatchShape
from simulator.scenario.config import Scenario
from simulator.cost.factory import make_cost_model
from simulator.run.resolve import resolve
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


def capacity_bound(scenario: Scenario) -> CapacityBound:
    """Max requests/s one replica of ``scenario`` can complete at its workload's mean lengths."""
    system = resolve(scenario)
    wl = scenario.workload
    prompt = make_length(wl.prompt_tokens, scenario, "workload.prompt_tokens").mean
    output = make_length(wl.output_tokens, scenario, "workload.output_tokens").mean
    cost = make_cost_model(system.profile, system.model, scenario.deployment.tensor_parallel_size)
    resident = prompt + output / 2.0
    kv_tokens = system.kv_plan.num_gpu_blocks * system.kv_plan.block_size
    batch = max(1, min(scenario.scheduler.max_num_seqs, int(kv_tokens // max(resident, 1.0))))
    ctx = int(round(batch * resident))
    decode = cost.decode_step_time_s(batch, ctx)
    p = int(round(prompt))
    others = batch - 1
    others_ctx = int(round(others * resident))
    with_prefill = cost.step_time_s(BatchShape([p], [0], others, others_ctx, batch))
    without = cost.step_time_s(BatchShape.decode(others, others_ctx)) if others else 0.0
    marginal = max(with_prefill - without, 1e-12)
    mu = batch / (max(output - 1.0, 0.0) * decode + batch * marginal)
    return CapacityBound(batch, decode, marginal, mu)
