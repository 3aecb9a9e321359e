"""Candidates with model pools are planned: each pool's replicas sized, the SLO held over all requests when
re-simulated, one replica fewer in any pool failing, and GPUs, GPU-hours and cost summed over the pools."""
from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest

from simulator import simulate
from simulator.errors import ScenarioError
from simulator.planner import build_tasks, load_plan, plan
from simulator.planner.run import HOURS_PER_QUARTER
from simulator.planner.search import evaluate, judge_run, with_counts

SMALL = {"cost_model": "constant", "step_time_s": 0.01, "prefill_time_per_token_s": 0.0,
         "price_per_gpu_hour": 2.0, "memory_bytes": 80 * 2**30}
LARGE = dict(SMALL, step_time_s=0.02, price_per_gpu_hour=3.0)       # a slower model on 2 GPUs per replica
TP = {"small": 1, "large": 2}
PRICE = {"small": 2.0, "large": 3.0}


def pooled(threshold=24):
    return {"deployment.router": "least_outstanding",
            "deployment.pools": [{"name": "small"}, {"name": "large", "hardware": dict(LARGE),
                                                     "tensor_parallel_size": 2}],
            "deployment.pool_routing": {"by": "prompt_tokens", "default": "large",
                                        "thresholds": [{"max_prompt_tokens": threshold, "pool": "small"}]}}


def pools_plan(candidates, prompt=None, multiplier=1.0):
    return {
        "name": "pools",
        "scenario": {"model": "tiny-llama", "hardware": dict(SMALL), "num_requests": 100,
                     "scheduler": {"max_num_seqs": 8, "max_num_batched_tokens": 2048},
                     "workload": {"arrival": {"process": "poisson", "rate_per_s": 1.0},
                                  "prompt_tokens": prompt or {"dist": "geometric", "mean": 32, "max": 400},
                                  "output_tokens": {"dist": "geometric", "mean": 20, "max": 400}}},
        "candidates": candidates,
        "slo": {"ttft_p99_ms": 300, "tpot_p99_ms": 25}, "failover": "none",
        "regions": [{"name": "east", "rtt_ms": {"east": 5}, "price_multiplier": multiplier}],
        "forecast": [{"quarter": "Q1", "region": "east", "peak_rps": 60.0}],
        "simulation": {"num_requests": 1500, "max_replicas": 32},
    }


def _pairs(text: str) -> dict[str, float]:
    return {k: float(v) for k, v in (part.split("=") for part in text.split(";"))}


@pytest.fixture(scope="module")
def routed():
    loaded = load_plan(pools_plan([{"name": "routed", "set": pooled()}], multiplier=1.5))
    result = plan(loaded, workers=1)
    return build_tasks(loaded)[0], result.candidates.iloc[0], result


def test_a_pooled_candidate_is_planned(routed):
    _, row, _ = routed
    assert row["status"] == "ok" and row["chosen"]
    counts = {p: int(n) for p, n in _pairs(row["pool_replicas"]).items()}
    assert set(counts) == {"small", "large"} and row["replicas"] == sum(counts.values())
    share = _pairs(row["pool_share"])
    assert sum(share.values()) == pytest.approx(1.0, abs=1e-3) and 0.3 < share["small"] < 0.7
    assert 0 < row["utilization"] < 1
    assert row["utilization"] == pytest.approx(max(_pairs(row["pool_utilization"]).values()), rel=1e-3)
    assert row["tensor_parallel_size"] == "small=1;large=2" and row["replications"] in (3, 8)


def test_gpus_gpu_hours_and_cost_are_sums_over_the_pools(routed):
    _, row, result = routed
    counts, gpus = _pairs(row["pool_replicas"]), _pairs(row["pool_gpus"])
    assert gpus == {p: counts[p] * TP[p] for p in counts}
    assert row["gpus"] == sum(gpus.values()) == result.summary["gpus_peak"].iloc[0]
    assert row["gpu_hours"] == pytest.approx(row["gpus"] * HOURS_PER_QUARTER)     # a fixed fleet, costed at peak
    assert row["cost_per_hour"] == pytest.approx(1.5 * sum(gpus[p] * PRICE[p] for p in gpus))
    assert row["cost_per_quarter"] == pytest.approx(row["cost_per_hour"] * HOURS_PER_QUARTER)
    assert result.totals["gpus_peak"].iloc[-1] == row["gpus"]


def test_the_chosen_counts_hold_when_resimulated(routed):
    task, row, _ = routed
    counts = {p: int(n) for p, n in _pairs(row["pool_replicas"]).items()}
    span = 10000 / task.design_rps
    long = with_counts(task.scenario, counts).with_overrides(
        {"num_requests": 10000, "warmup_s": 0.1 * span, "cooldown_s": 0.05 * span})
    for seed in (11, 12):
        verdict = judge_run(simulate(long, seed=seed), task.slo)
        assert verdict.passed and verdict.stable, verdict.failures()


def test_one_replica_fewer_in_any_pool_fails(routed):
    """On the seeds the search used; a pool's one fewer fails by simulation or at 100% utilization."""
    task, row, _ = routed
    counts = {p: int(n) for p, n in _pairs(row["pool_replicas"]).items()}
    seeds = dataclasses.replace(task, replications=int(row["replications"]))
    assert evaluate(seeds, counts)["passed"]
    share, saturation = _pairs(row["pool_share"]), _pairs(row["pool_saturation_rps_per_replica"])
    simulated = 0
    for p, n in counts.items():
        assert n > 1
        if task.design_rps * share[p] >= (n - 1) * saturation[p]:
            assert f"pool {p} at utilization" in row["minus_one_check"]
            continue
        assert not evaluate(seeds, {**counts, p: n - 1})["passed"]
        simulated += 1
    assert simulated >= 1          # the SLO, not only the saturation rule, binds a pool


def test_a_pool_without_traffic_keeps_one_replica():
    """Every prompt is 16 tokens: the large pool gets no request, keeps the one replica a pool needs, and is paid."""
    loaded = load_plan(pools_plan([{"name": "routed", "set": pooled()}], prompt={"dist": "fixed", "value": 16}))
    row = plan(loaded, workers=1).candidates.iloc[0]
    assert row["status"] == "ok"
    assert _pairs(row["pool_share"])["large"] == 0 and _pairs(row["pool_replicas"])["large"] == 1
    assert row["gpus"] == _pairs(row["pool_replicas"])["small"] + 2
    assert "large: one replica suffices" in row["binding_constraint"]


def test_pools_with_an_autoscaler_stay_an_error_naming_it():
    cand = {"name": "routed", "set": {**pooled(), "deployment.autoscaler": {"max_replicas": 8,
                                                                            "target_outstanding_per_replica": 4}}}
    with pytest.raises(ScenarioError, match=r"candidates\[0\] \(routed\): deployment.autoscaler = 'set': is not "
                                            r"modelled together with deployment.pools"):
        load_plan(pools_plan([cand]))


def test_the_example_plan_has_a_pooled_candidate():
    loaded = load_plan(Path(__file__).resolve().parents[1] / "examples" / "plan-routing.yaml")
    routed = loaded.candidate_scenarios["routed"]
    assert [p.name for p in routed.deployment.pools] == ["small", "big"]
    assert [t.candidate for t in build_tasks(loaded)] == ["h100-8b", "routed"] * 2
