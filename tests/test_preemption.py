"""Swap preemption (vLLM v0): KV copied to host memory over PCIe and back instead of recomputed."""
from __future__ import annotations

import pytest
from conftest import make_scenario, make_scheduler

from simulator import ScenarioError, load_scenario, simulate
from simulator.engine.scheduler import SwapSpace


def pressure(**over):
    """llama-3-8b on an H100 with a 3,000-block cache (48k tokens) and 2-4k-token prompts at a
    rate the cache cannot hold: preemptions every few steps."""
    sc = load_scenario("examples/sharegpt-h100.yaml")
    return sc.with_overrides({"num_requests": 300, "warmup_s": 0, "cooldown_s": 0, "workload.arrival.rate_per_s": 20,
                              "scheduler.num_gpu_blocks_override": 3000,
                              "workload.prompt_tokens": {"dist": "uniform", "min": 2000, "max": 4000},
                              "workload.output_tokens": {"dist": "uniform", "min": 200, "max": 600}, **over})


def test_swap_out_and_in_cost_the_bytes_over_the_link():
    """Blocks of 4 tokens at 1000 bytes over a 1e6 B/s link: 1 ms per block each way."""
    sched = make_scheduler([8, 8], [10, 20], num_gpu_blocks=5, block_size=4)
    sched.swap = SwapSpace(capacity_blocks=100, bytes_per_block=1000.0, bandwidth_bytes_per_s=1e6)
    out = sched.schedule(0.0)
    sched.update_from_output(out, 1.0)
    out = sched.schedule(1.0)                      # both need a 3rd block, one is free: 1 preempted
    assert out.preempted == [1] and out.extra_s == pytest.approx(2 * 1e-3)   # 8 cached tokens, 2 blocks
    sched.update_from_output(out, 2.0)
    for t in range(2, 40):                         # request 0 finishes, request 1 swaps back in
        out = sched.schedule(float(t))
        if out.admitted:
            assert out.admitted == [1] and out.admitted_tokens == [1] and out.prefill_context == [8]
            assert out.extra_s == pytest.approx(2 * 1e-3)
            break
        sched.update_from_output(out, t + 1.0)
    else:
        pytest.fail("request 1 never came back")
    assert sched.stats() == {"swap_outs": 1, "swap_ins": 1, "swap_recompute_fallbacks": 0}


def test_swap_saves_recompute_under_kv_pressure():
    rec = simulate(pressure())
    swp = simulate(pressure(**{"scheduler.preemption_mode": "swap"}))
    assert rec.summary["requests"]["preemptions"] > 20
    assert swp.engine_stats["swap_outs"] > 20 and swp.engine_stats["swap_ins"] == swp.engine_stats["swap_outs"]
    # Recompute pays the prompt (and generated tokens) again; swap pays bytes over PCIe.
    assert swp.steps["num_prefill_tokens"].sum() < rec.steps["num_prefill_tokens"].sum()
    assert swp.summary["requests"]["completed"] == 300
    assert (swp.requests["num_output_tokens"] == swp.requests["max_tokens"]).all()


def test_no_swap_space_means_recompute_exactly():
    rec = simulate(pressure(num_requests=120))
    none = simulate(pressure(num_requests=120, **{"scheduler.preemption_mode": "swap", "scheduler.swap_space_gib": 0}))
    assert none.engine_stats["swap_outs"] == 0 and none.engine_stats["swap_recompute_fallbacks"] > 0
    assert (none.requests["finish_time"] == rec.requests["finish_time"]).all()


def test_swap_needs_a_host_link_and_a_policy_that_supports_it():
    with pytest.raises(ScenarioError, match="host_link_bandwidth_bytes_per_s"):
        simulate(make_scenario(**{"scheduler.preemption_mode": "swap"}))     # inline constant profile
    with pytest.raises(ScenarioError, match=r"preemption_mode.*chunked"):
        simulate(pressure(**{"scheduler.preemption_mode": "swap", "scheduler.policy": "chunked_prefill"}))
