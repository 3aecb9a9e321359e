"""The study functions behind the notebooks (``simulator/report/studies.py``): knees against queueing
closed forms, burstiness statistics against Poisson and periodic streams, trace replay round trips,
the replica search (``simulator/planner/replica_search.py``) against a brute-force scan, speculative
sweeps against the closed form, and the profile cross-check against the README's table."""
from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from conftest import make_scenario

from simulator import ScenarioError, simulate
from simulator.planner.replica_search import meets_slo, min_replicas
from simulator.report import studies

REPO = Path(__file__).resolve().parents[1]


# -- plumbing -----------------------------------------------------------------------------------------
def test_notebook_scale_reads_the_environment_and_names_bad_values():
    assert studies.notebook_scale({}) == "full"
    assert studies.notebook_scale({"LLMPLAN_NOTEBOOK_SCALE": "small"}) == "small"
    with pytest.raises(ScenarioError, match=r"LLMPLAN_NOTEBOOK_SCALE.*allowed: full, small"):
        studies.notebook_scale({"LLMPLAN_NOTEBOOK_SCALE": "tiny"})


def test_repo_root_and_trace_fallback_to_excerpts(tmp_path):
    assert studies.find_repo_root(REPO / "notebooks") == REPO
    with pytest.raises(ScenarioError, match="not inside an llmplan checkout"):
        studies.find_repo_root(tmp_path)
    # A checkout without ../shared: the excerpts in tests/data, one per trace.
    fake = tmp_path / "repo"
    (fake / "tests" / "data").mkdir(parents=True)
    for _, excerpt, _ in studies.TRACES.values():
        (fake / "tests" / "data" / excerpt).write_bytes((REPO / "tests" / "data" / excerpt).read_bytes())
    files = studies.trace_files(fake)
    assert list(files["trace"]) == list(studies.TRACES) and not files["full"].any()
    # With ../shared/data/llm_traces holding a full trace, that one wins.
    shared = tmp_path / "shared" / "data" / "llm_traces"
    shared.mkdir(parents=True)
    (shared / "AzureLLMInferenceTrace_code.csv").write_bytes((REPO / "tests/data/azure_code_excerpt.csv").read_bytes())
    files = studies.trace_files(fake).set_index("trace")
    assert files.loc["azure-code", "full"] and not files.loc["azure-conv", "full"]


# -- knees --------------------------------------------------------------------------------------------
def test_knee_of_mm1_sojourn_is_half_load():
    """M/M/1 mean sojourn 1/(mu - lambda) doubles its zero-load value at rho = 0.5; swept from a
    near-zero load the knee lands there (interpolation in log y on a coarse grid)."""
    rho = np.array([0.001, 0.2, 0.4, 0.6, 0.8, 0.95])
    assert studies.knee(rho, 1.0 / (1.0 - rho)) == pytest.approx(0.5, abs=0.01)
    assert studies.knee(rho, 1.0 / (1.0 - rho), factor=5.0) == pytest.approx(0.8, abs=0.01)
    assert math.isnan(studies.knee(rho, np.ones_like(rho)))                # flat: no knee in the sweep
    with pytest.raises(ValueError):
        studies.knee(rho, rho, factor=1.0)


def test_sustainable_rate_interpolates_the_crossing():
    x, y = [1.0, 2.0, 3.0], [0.1, 0.1, 0.4]
    assert studies.sustainable_rate(x, y, 0.2) == pytest.approx(2.5)       # log-linear: 0.1 -> 0.4, half way at 0.2
    assert studies.sustainable_rate(x, y, 1.0) == 3.0                       # never crosses: the last load
    assert studies.sustainable_rate(x, y, 0.05) == 0.0                      # even the lightest misses


def test_simulated_md1_knee_matches_pollaczek_khinchine():
    """One seat, fixed 10-token outputs at 10 ms a step: an M/D/1 queue with S = 0.1 s. Mean sojourn
    T = S + rho S / (2 (1 - rho)); the knee (2x the value at rho = 0.05) is where
    rho / (2 (1 - rho)) = 1 + 2 * 0.05 / 1.9, rho = 0.678. The simulated sweep finds it within 0.03."""
    sc = make_scenario(num_requests=4000, **{"scheduler.max_num_seqs": 1})
    rhos = [0.05, 0.3, 0.5, 0.6, 0.7, 0.8]
    sweep = studies.load_sweep(sc, [10.0 * r for r in rhos])
    assert list(sweep["policy"]) == ["continuous"] * len(rhos)
    c = 1.0 + 2.0 * 0.05 / (2.0 * 0.95)
    expected = 2.0 * c / (1.0 + 2.0 * c)
    got = studies.knee(sweep["rate_per_s"] / 10.0, sweep["e2e_mean_s"])
    assert got == pytest.approx(expected, abs=0.03)
    table = studies.knees(sweep.assign(policy="p"), metrics=["e2e_mean_s"], limits={"e2e_mean_s": 0.2})
    # T = 0.2 s at rho / (2 (1 - rho)) = 1: rho = 2/3 -> 6.67 req/s.
    assert table.loc[0, "e2e_mean_s_max_rps"] == pytest.approx(20.0 / 3.0, rel=0.05)


def test_load_sweep_runs_each_policy_at_each_rate():
    sc = make_scenario(num_requests=100)
    sweep = studies.load_sweep(sc, [5.0, 20.0], {"cont": {}, "dyn": {"scheduler.policy": "dynamic",
                                                                      "scheduler.max_wait_ms": 20}})
    assert list(zip(sweep["policy"], sweep["rate_per_s"], strict=True)) == [("cont", 5.0), ("cont", 20.0),
                                                                            ("dyn", 5.0), ("dyn", 20.0)]
    assert (sweep["ttft_p99_s"] >= sweep["ttft_p50_s"]).all()
    k = studies.knees(sweep)
    assert list(k["policy"]) == ["cont", "dyn"]
    assert k.loc[0, "max_throughput_rps"] == sweep.loc[sweep["policy"] == "cont", "throughput_rps"].max()


def test_saturation_capacity_of_a_constant_cost_engine():
    """8 seats, 10 outputs of 10 ms each: at most 8 requests per 0.1 s = 80 req/s."""
    assert studies.saturation_capacity(make_scenario(), num_requests=800) == pytest.approx(80.0, rel=0.03)


# -- burstiness ---------------------------------------------------------------------------------------
def test_burstiness_of_poisson_periodic_and_bursty_streams():
    rng = np.random.default_rng(3)
    poisson = np.cumsum(rng.exponential(0.1, 200_000))
    b = studies.burstiness(poisson, window_s=10.0)
    assert b["interarrival_cv"] == pytest.approx(1.0, abs=0.01)
    assert b["dispersion_index"] == pytest.approx(1.0, abs=0.1)
    assert b["mean_rate_per_s"] == pytest.approx(10.0, rel=0.01)
    periodic = studies.burstiness(np.arange(1000) * 0.5, window_s=10.0)
    assert periodic["interarrival_cv"] == pytest.approx(0.0, abs=1e-9)
    assert periodic["peak_to_mean"] == pytest.approx(1.0, abs=0.01)
    # 100 requests at once, then one a second until t = 900: 9 whole windows of 100 s (the arrival
    # at 900 opens a 10th, partial one, left out); the first holds 199 of the 999 counted.
    bursty = np.concatenate([np.zeros(100), 1.0 + np.arange(900.0)])
    s = studies.burstiness(bursty, window_s=100.0)
    assert s["windows"] == 9
    assert s["peak_to_mean"] == pytest.approx(199 / (999 / 9))
    curve = studies.dispersion_curve(poisson, [1.0, 10.0, 100.0])
    assert np.allclose(curve["dispersion_index"], 1.0, atol=0.2)
    with pytest.raises(ValueError):
        studies.burstiness([1.0])


def test_rate_series_counts_every_arrival():
    t = np.array([0.0, 0.5, 1.0, 59.9, 60.0, 130.0])
    rs = studies.rate_series(t, window_s=60.0)
    assert list(rs["t_s"]) == [0.0, 60.0, 120.0]
    assert (rs["rate_per_s"] * 60).tolist() == [4, 1, 1]


# -- traces -------------------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def azure_excerpt() -> pd.DataFrame:
    from simulator.workload.traffic import load_trace

    return load_trace(REPO / "tests" / "data" / "azure_code_excerpt.csv", "azure")


def test_poisson_twin_keeps_requests_and_mean_rate(azure_excerpt):
    twin = studies.poisson_twin(azure_excerpt, seed=1)
    assert len(twin) == len(azure_excerpt)
    np.testing.assert_array_equal(twin["num_prompt_tokens"], azure_excerpt["num_prompt_tokens"])
    np.testing.assert_array_equal(twin["max_tokens"], azure_excerpt["max_tokens"])
    assert twin["arrival_time"].is_monotonic_increasing and twin["arrival_time"].iloc[0] == 0.0
    # The expected span is the trace's; over many twins the mean rate matches to 2%.
    spans = [studies.poisson_twin(azure_excerpt, seed=s)["arrival_time"].iloc[-1] for s in range(200)]
    assert np.mean(spans) == pytest.approx(azure_excerpt["arrival_time"].iloc[-1], rel=0.02)
    assert studies.poisson_twin(azure_excerpt, seed=1).equals(twin)           # seeded


def test_replay_scenario_round_trips_a_trace(azure_excerpt, tmp_path):
    base = make_scenario(model="llama-3-8b", hardware="h100-sxm",
                         **{"scheduler.max_num_batched_tokens": 8192, "scheduler.max_num_seqs": 64})
    sc = studies.replay_scenario(base, azure_excerpt, tmp_path, "t")
    r = simulate(sc).requests
    np.testing.assert_allclose(r["arrival_time"], azure_excerpt["arrival_time"], atol=1e-6)
    np.testing.assert_array_equal(r["num_prompt_tokens"], azure_excerpt["num_prompt_tokens"])
    np.testing.assert_array_equal(r["max_tokens"], azure_excerpt["max_tokens"])


def test_length_stats(azure_excerpt):
    st = studies.length_stats(azure_excerpt).set_index("what")
    assert st.loc["prompt_tokens", "max"] == azure_excerpt["num_prompt_tokens"].max()
    assert st.loc["output_tokens", "mean"] == pytest.approx(azure_excerpt["max_tokens"].mean())


# -- replica search -----------------------------------------------------------------------------------
def _overloaded():
    """Constant cost: 8 seats, 10 outputs x 10 ms -> 80 req/s per replica; offered 300 req/s."""
    return make_scenario(num_requests=1500, **{"workload.arrival.rate_per_s": 300.0, "slo.ttft_p99_ms": 50.0,
                                                "deployment.router": "least_outstanding"})


def test_min_replicas_agrees_with_a_linear_scan():
    sc = _overloaded()
    n, table = min_replicas(sc, max_replicas=16)
    scan = [meets_slo(simulate(sc.with_overrides({"deployment.replicas": k}))) for k in range(1, 9)]
    assert n == 1 + scan.index(True)
    assert table.set_index("replicas").loc[n, "meets_slo"] and n >= 4          # 300 / 80 -> at least 4
    none, _ = min_replicas(sc, max_replicas=2)
    assert none is None


def test_meets_slo_needs_thresholds():
    with pytest.raises(ScenarioError, match="no SLO thresholds"):
        meets_slo(simulate(make_scenario(num_requests=20)))


def test_burstiness_cost_compares_trace_and_twin_at_the_same_deployment():
    """A trace whose requests come in bursts of 40 needs more replicas for the same SLO than its
    Poisson twin, and at the twin's replica count its p99 TTFT is higher."""
    bursts = np.repeat(np.arange(30) * 2.0, 40)                           # 40 requests every 2 s: 20 req/s
    trace = pd.DataFrame({"arrival_time": bursts, "num_prompt_tokens": 32, "max_tokens": 10})
    base = make_scenario(**{"slo.ttft_p99_ms": 60.0, "deployment.router": "least_outstanding"})
    out = studies.burstiness_cost(base, trace, seed=2, max_replicas=16)
    need = out["replicas_needed"]
    assert need["trace"] is not None and need["poisson"] is not None and need["trace"] > need["poisson"]
    same = out["same"].set_index("stream")
    assert (same["replicas"] == need["poisson"]).all()
    assert same.loc["trace", "ttft_p99_s"] > same.loc["poisson", "ttft_p99_s"]
    assert not same.loc["trace", "meets_slo"] and same.loc["poisson", "meets_slo"]


def test_speedup_sweep_compresses_both_streams_and_burst_cost_grows_with_load():
    """Bursts of 20 requests every 0.5 s (40 req/s on an 80 req/s engine), then 1.8x faster (72 req/s):
    the trace's p99 TTFT is above its twin's at both, and both grow with the load."""
    bursts = np.repeat(np.arange(100) * 0.5, 20)
    trace = pd.DataFrame({"arrival_time": bursts, "num_prompt_tokens": 32, "max_tokens": 10})
    base = make_scenario(**{"slo.ttft_p99_ms": 60.0})
    sw = studies.speedup_sweep(base, trace, [1.0, 1.8], seed=1)
    assert list(zip(sw["speedup"], sw["stream"], strict=True)) == [(1.0, "trace"), (1.0, "poisson"),
                                                                   (1.8, "trace"), (1.8, "poisson")]
    r = sw.set_index(["speedup", "stream"])
    assert r.loc[(1.8, "trace"), "rate_per_s"] == pytest.approx(1.8 * r.loc[(1.0, "trace"), "rate_per_s"])
    for k in (1.0, 1.8):
        assert r.loc[(k, "trace"), "ttft_p99_s"] > r.loc[(k, "poisson"), "ttft_p99_s"]
    for stream in ("trace", "poisson"):
        assert r.loc[(1.8, stream), "ttft_p99_s"] > r.loc[(1.0, stream), "ttft_p99_s"]
    with pytest.raises(ValueError):
        studies.speedup_sweep(base, trace, [0.0])


# -- speculative decoding -----------------------------------------------------------------------------
def test_speculative_sweep_follows_the_closed_form():
    # The datasheet roofline: the speedup bounds below are its closed form (measured kernels of the
    # small draft model are slower relative to the target: 1.85x at acceptance 0.9 on h100-sxm).
    sc = make_scenario(num_requests=60, model="llama-3-8b", hardware="h100-sxm-datasheet",
                       **{"workload.arrival.rate_per_s": 1.0, "workload.output_tokens": {"dist": "fixed", "value": 200},
                          "scheduler.max_num_batched_tokens": 8192})
    sw = studies.speculative_sweep(sc, [0.1, 0.9], [4])                  # a llama-3.2-1b draft
    assert list(sw["k"]) == [0, 4, 4]
    spec = sw[sw["k"] > 0]
    np.testing.assert_allclose(spec["tokens_per_step"], spec["expected_tokens_per_step"], rtol=0.05)
    hi = spec.set_index("acceptance_rate")
    assert hi.loc[0.9, "tpot_p50_speedup"] > 2.0 and hi.loc[0.1, "tpot_p50_speedup"] < 1.0
    be = studies.break_even_acceptance(sw)
    assert 0.1 < be.loc[0, "break_even_acceptance"] < 0.9 and be.loc[0, "best_at_acceptance"] == 0.9


def test_break_even_acceptance_interpolates():
    sw = pd.DataFrame({"k": [0, 2, 2, 2, 3, 3], "acceptance_rate": [np.nan, 0.2, 0.4, 0.6, 0.2, 0.4],
                       "tpot_p50_speedup": [1.0, 0.8, 1.2, 1.5, 0.5, 0.9]})
    be = studies.break_even_acceptance(sw).set_index("k")
    assert be.loc[2, "break_even_acceptance"] == pytest.approx(0.3)
    assert math.isnan(be.loc[3, "break_even_acceptance"]) and be.loc[3, "best_at_acceptance"] == 0.4


# -- calibration review -------------------------------------------------------------------------------
def test_fit_points_predict_each_point_from_the_others():
    fp = studies.fit_points("cpu-amd-epyc-tiny-llama")
    ok = fp["rel_error"].notna()
    np.testing.assert_allclose(fp.loc[ok, "predicted_s"] / fp.loc[ok, "measured_s"] - 1, fp.loc[ok, "rel_error"])
    gemm = fp[fp["family"] == "gemm"]
    assert (gemm["efficiency"] > 0).all() and gemm["efficiency"].max() < 1.5


def test_crosscheck_reproduces_the_readme_table():
    """The README's cross-check: Vidur's qkv_proj at 2048 tokens 152.0 us (measured), the datasheet
    146.3 us (143.3 of roofline plus the 3 us kernel latency); llama-3-8b's MLP widths are scaled from the
    nearest measured shape."""
    cc = studies.crosscheck("llama-3-8b", "h100-sxm-datasheet", {"vidur": "h100-sxm-vidur"})
    t = cc.set_index(["op", "shape", "profile"])
    assert t.loc[("qkv_proj", "2048 tok", "vidur"), "time_us"] == pytest.approx(152.0, abs=0.05)
    assert t.loc[("qkv_proj", "2048 tok", "vidur"), "source"] == "measured"
    assert t.loc[("qkv_proj", "2048 tok", "datasheet"), "time_us"] == pytest.approx(146.3, abs=0.05)
    assert t.loc[("gate_up_proj", "1 tok", "vidur"), "source"].startswith("scaled")
    assert len(cc) == 2 * len(studies.CROSSCHECK_CASES)


def test_prefix_cache_sweep_hit_rate_is_the_shared_fraction_and_shrinks_with_the_cache():
    """One of 4 system prompts of 512 tokens on every 640-token prompt (block size 16): with a
    cache that holds them all, every request but the first of each prompt hits exactly its 512
    tokens, so the hit rate is (N - 4) * 512 / (N * 640); the saving shows in TTFT (llama-3-8b on
    H100, light load). A cache of 64 blocks (the 1,024-token max_model_len) cannot keep four
    32-block prompts besides the running requests: fewer hits, and evictions."""
    n = 80
    sc = make_scenario(num_requests=n, model="llama-3-8b", hardware="h100-sxm",
                       **{"workload.arrival.rate_per_s": 2.0, "workload.prompt_tokens": {"dist": "fixed", "value": 640},
                          "workload.prefix": {"num_prefixes": 4, "prefix_tokens": 512, "share": 1.0},
                          "scheduler.max_num_batched_tokens": 8192, "scheduler.max_model_len": 1024})
    sw = studies.prefix_cache_sweep(sc, {"big": {"scheduler.num_gpu_blocks_override": 100_000},
                                         "tiny": {"scheduler.num_gpu_blocks_override": 64}})
    assert list(zip(sw["variant"], sw["enable_prefix_caching"], strict=True)) == [("big", False), ("big", True),
                                                                     ("tiny", False), ("tiny", True)]
    assert list(sw["num_gpu_blocks"]) == [100_000, 100_000, 64, 64]
    off, on = sw[~sw["enable_prefix_caching"]], sw[sw["enable_prefix_caching"]].set_index("variant")
    assert off["hit_rate"].isna().all() and off["ttft_mean_saving"].isna().all()
    assert on.loc["big", "queries"] == n * 640 and on.loc["big", "evictions"] == 0
    assert on.loc["big", "hit_rate"] == pytest.approx((n - 4) * 512 / (n * 640))
    assert on.loc["tiny", "hit_rate"] < on.loc["big", "hit_rate"] and on.loc["tiny", "evictions"] > 0
    assert 0.3 < on.loc["big", "ttft_mean_saving"] < 1.0
    big_off = sw[(sw["variant"] == "big") & ~sw["enable_prefix_caching"]].iloc[0]
    assert on.loc["big", "ttft_mean_saving"] == pytest.approx(1 - on.loc["big", "ttft_mean_s"] / big_off["ttft_mean_s"])
