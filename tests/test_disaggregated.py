"""Disaggregated prefill/decode pools: KV transfer time exactly where it belongs, no prefill stalls
in the decode pool, and clear errors."""
from __future__ import annotations

import pytest
from conftest import make_scenario

from simulator import ScenarioError, load_scenario, simulate

POOLS = {"scheduler.policy": "disaggregated", "deployment.prefill_replicas": 1, "deployment.decode_replicas": 1}


def test_transfer_time_adds_to_e2e_not_ttft():
    """Constant 10 ms steps, one request at a time, prompts of 100 tokens whose KV (tiny-llama fp32:
    4 layers x 2 x 4 kv heads x 32 dims x 4 B = 4 KiB per token) crosses a 4.096e6 B/s link in
    exactly 0.1 s: TTFT is one prefill step, and E2E = prefill + transfer + 9 decode steps."""
    sc = make_scenario(**{"num_requests": 50, "workload.arrival.rate_per_s": 1.0, "scheduler.max_num_seqs": 1,
                          "workload.prompt_tokens": {"dist": "fixed", "value": 100},
                          "workload.output_tokens": {"dist": "fixed", "value": 10},
                          "deployment.kv_transfer_bandwidth_bytes_per_s": 4096e3, "deployment.kv_transfer_latency_s": 0,
                          "hardware.prefill_time_per_token_s": 0.0, **POOLS})
    req = simulate(sc).requests
    quiet = req[req["queue_delay_s"] == 0]
    assert len(quiet) > 30
    assert quiet["ttft_s"].to_numpy() == pytest.approx(0.01)
    e2e = quiet["e2e_s"].to_numpy()
    assert e2e.min() == pytest.approx(0.01 + 0.1 + 9 * 0.01)          # (others wait for the decode seat)
    assert (abs(e2e - 0.2) < 1e-9).mean() > 0.8


def long_prompts(**over):
    sc = load_scenario("examples/sharegpt-h100.yaml")
    return sc.with_overrides({"num_requests": 500, "warmup_s": 0, "workload.arrival.rate_per_s": 3.0,
                              "workload.prompt_tokens": {"dist": "uniform", "min": 2000, "max": 6000},
                              "workload.output_tokens": {"dist": "fixed", "value": 300}, **over})


def test_decode_pool_has_no_prefill_stalls():
    """DistServe's point: with the same two GPUs, colocated replicas stall their decodes behind
    multi-thousand-token prefills; a decode pool never does, so its inter-token tail is far lower."""
    colocated = simulate(long_prompts(**{"deployment.replicas": 2})).summary
    split = simulate(long_prompts(**POOLS)).summary
    assert split["itl_s"]["p99"] < 0.5 * colocated["itl_s"]["p99"]
    assert split["tpot_s"]["p99"] < colocated["tpot_s"]["p99"]
    assert split["requests"]["completed"] == 500


def test_bad_pool_configs_are_clear_errors():
    with pytest.raises(ScenarioError, match=r"deployment\.decode_replicas.*both pool sizes"):
        simulate(make_scenario(**{"scheduler.policy": "disaggregated", "deployment.prefill_replicas": 1}))
    with pytest.raises(ScenarioError, match="kv_transfer_bandwidth_bytes_per_s"):
        simulate(make_scenario(**POOLS))                    # the inline constant profile has no interconnect
    with pytest.raises(ScenarioError, match=r"deployment\.replicas.*= 2"):
        simulate(long_prompts(**POOLS, **{"deployment.replicas": 5}))
    with pytest.raises(ScenarioError, match=r"prefill_replicas.*disaggregated"):
        simulate(long_prompts(**{"deployment.prefill_replicas": 1}))
