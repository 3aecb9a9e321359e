"""Model routing to several model pools (simulator.cluster.pools): the routing rules, conservation, what a
small-model pool buys short prompts, determinism and the one-line errors."""
from __future__ import annotations

from pathlib import Path

import pytest
from test_cli import run_cli

from simulator import load_scenario, simulate

REPO = Path(__file__).resolve().parents[1]
EXAMPLE = REPO / "examples" / "model-routing.yaml"
SMALL = ["num_requests=2000"]


def _run(*sets: str):
    return simulate(load_scenario(EXAMPLE, SMALL + list(sets)))


@pytest.fixture(scope="module")
def routed():
    return _run()


def test_prompt_length_routing_obeys_the_threshold_exactly(routed):
    req = routed.requests
    short = req["num_prompt_tokens"] <= 512
    assert (req.loc[short, "pool"] == "small").all() and (req.loc[~short, "pool"] == "big").all()
    assert short.any() and (~short).any()
    # Replicas 0 is the small pool, 1-2 the big one (deployment.pools order).
    assert set(req.loc[short, "replica"]) == {0} and set(req.loc[~short, "replica"]) == {1, 2}


def test_requests_are_conserved_across_pools(routed):
    s = routed.summary
    pools = s["pools"]
    assert sum(p["requests"]["arrived"] for p in pools.values()) == s["requests"]["arrived"] == 2000
    assert sum(p["requests"]["completed"] for p in pools.values()) == s["requests"]["completed"]
    assert sum(p["requests"]["measured"] for p in pools.values()) == s["requests"]["measured"]
    assert s["num_gpus"] == 3 == sum(p["num_gpus"] for p in pools.values())
    assert pools["small"]["model"] == "llama-3.2-1b" and pools["big"]["model"] == "llama-3-8b"


def test_small_model_pool_gives_short_prompts_lower_ttft(routed):
    # Same routing and replica counts, but the short prompts' pool serves the big model.
    sc = load_scenario(EXAMPLE, SMALL)
    pools = [p.model_copy(update={"model": "llama-3-8b"}) if p.name == "small" else p for p in sc.deployment.pools]
    big_only = simulate(sc.model_copy(update={"deployment": sc.deployment.model_copy(update={"pools": pools})}))
    small_p50 = routed.summary["pools"]["small"]["ttft_s"]["p50"]
    big_p50 = big_only.summary["pools"]["small"]["ttft_s"]["p50"]
    # Measured (2,000 requests, seed 7): about 4 ms with Llama 3.2 1B vs about 11 ms with Llama 3 8B.
    assert small_p50 < 0.6 * big_p50, (small_p50, big_p50)
    # The big pool's requests are untouched by what the small pool serves (own replicas, same routing).
    assert routed.requests["replica"].equals(big_only.requests["replica"])


def test_tier_routing_obeys_the_map():
    tiers = [{"name": "free", "share": 0.6}, {"name": "premium", "share": 0.4}]
    r = _run(f"workload.tiers={tiers}", "deployment.pool_routing={by: tier, map: {free: small}, default: big}")
    req = r.requests
    assert ((req["tier"] == "free") == (req["pool"] == "small")).all()
    assert set(r.summary["pools"]) == {"small", "big"}


def test_pools_are_seeded():
    a, b = _run("seed=3"), _run("seed=3")
    assert a.requests.equals(b.requests)
    sa, sb = dict(a.summary), dict(b.summary)
    sa.pop("wall_s"), sb.pop("wall_s")
    assert sa == sb


@pytest.mark.parametrize("sets, expected", [
    (["deployment.pool_routing.default=huge"],
     "deployment.pool_routing.default = 'huge': unknown pool; pools: small, big"),
    (["deployment.pool_routing.thresholds=[{max_prompt_tokens: 512, pool: small}, "
      "{max_prompt_tokens: 256, pool: big}]"],
     "deployment.pool_routing.thresholds.1.max_prompt_tokens = 256: thresholds must be strictly increasing"),
    (["deployment.pools=[{name: small, model: llama-9}, {name: big}]"],
     "deployment.pools.small.model = 'llama-9': unknown model preset"),
    (["deployment.pools=[{name: small, model: llama-3-70b}, {name: big}]"],
     "deployment.pools.small.model = 'llama-3-70b': does not fit"),
    (["workload.tiers=[{name: free, share: 0.5}, {name: pro, share: 0.5}]",
      "deployment.pool_routing={by: tier, map: {free: small}}"],
     "deployment.pool_routing.default = None: required: tier 'pro' is not in pool_routing.map"),
    (["deployment.pool_routing={by: tier, map: {free: small}}"],
     "deployment.pool_routing.by = 'tier': needs workload.tiers"),
    (["deployment.autoscaler={max_replicas: 4, target_outstanding_per_replica: 4}"],
     "deployment.autoscaler = 'set': is not modelled together with deployment.pools"),
    (["deployment.pools=[{name: a}, {name: a}]"],
     "deployment.pools[1].name = 'a': deployment.pools[0] has this name too"),
    (["deployment.replicas=4"], "deployment.replicas = 4: with deployment.pools the replicas are per pool"),
    (["deployment.pool_routing.thresholds=[]"],
     "deployment.pool_routing.thresholds = []: by: prompt_tokens needs at least one"),
    (["deployment.pool_routing.default=null"],
     "deployment.pool_routing.default = None: required: the pool for prompts longer than 512"),
    (["deployment.pools=[{name: small, max_num_seqs: 9000}, {name: big}]"],
     "deployment.pools.small.max_num_seqs = 9000: is above scheduler.max_num_batched_tokens=8192"),
])
def test_bad_pool_config_is_a_one_line_cli_error(tmp_path, sets, expected):
    proc = run_cli("simulate", str(EXAMPLE), *[a for s in sets for a in ("--set", s)])
    assert proc.returncode == 2, proc.stdout + proc.stderr
    lines = [line for line in proc.stderr.strip().splitlines() if line.strip()]
    assert len(lines) == 1 and expected in lines[0], lines


def test_example_runs_from_the_cli():
    proc = run_cli("simulate", str(EXAMPLE), "--set", "num_requests=500")
    assert proc.returncode == 0, proc.stderr
    assert "pool small: llama-3.2-1b" in proc.stdout and "pool big: llama-3-8b" in proc.stdout


def test_out_folder_keeps_the_pool_column(tmp_path):
    import pandas as pd
    proc = run_cli("simulate", str(EXAMPLE), "--set", "num_requests=300", "--set", "warmup_s=0",   # 21 s of arrivals
                   "--out", str(tmp_path / "run"))
    assert proc.returncode == 0, proc.stderr
    req = pd.read_csv(tmp_path / "run" / "requests.csv")
    assert set(req["pool"]) == {"small", "big"}
    again = load_scenario(tmp_path / "run" / "scenario.yaml")      # the saved scenario loads back
    assert [p.name for p in again.deployment.pools] == ["small", "big"]


def test_dashboard_report_counts_every_pool(routed):
    from simulator.report.analysis import num_gpus, run_report
    rep = run_report(routed)
    assert num_gpus(routed.scenario) == 3 == rep.system["num_gpus"]
    # KV usage over all pools' blocks: below the busiest replica's own usage, above zero.
    assert 0 < rep.series["kv_usage"].max() <= routed.summary["kv_cache"]["max_usage"]
