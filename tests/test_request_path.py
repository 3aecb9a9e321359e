"""The request path around the engine: processing stages, the response cache, coalescing, TTUA.

* a stage is a FCFS queue with ``workers`` servers: with Poisson arrivals and exponential service
  its mean wait is Erlang C (M/M/c); a fixed 40 ms stage with unlimited workers adds exactly 40 ms
  to every request's TTFT and leaves the engine's behaviour unchanged;
* a 50% semantic response cache halves the engine's busy time at light load (each request then
  costs the engine the same work) and the replicas a replica search needs for that traffic;
* an exact cache's hit rate is an outcome: every request that reaches the engine is the first of
  its prompt or finds its answer expired or evicted; coalesced requests end with their leader;
* TTUA is the whole answer by default, or the N-th streamed token plus the post stages.
"""
from __future__ import annotations

import math

import numpy as np
import pytest
from conftest import assert_same_run_to_1e9, make_scenario
from test_theory import erlang_c_wait

from simulator import ScenarioError, simulate
from simulator.cluster.request_path import fcfs_departures
from simulator.planner.replica_search import min_replicas
from simulator.scenario.config import PromptPopularityConfig
from simulator.workload.traffic import zipf_prompts

LIGHT = {"num_requests": 2000, "workload.arrival.rate_per_s": 1.0}


# -- stages ------------------------------------------------------------------------------------------
@pytest.mark.parametrize("c,rho", [(1, 0.7), (4, 0.85)])
def test_a_stage_queues_like_m_m_c(c, rho):
    rng = np.random.default_rng(3)
    n, service = 200_000, 0.04
    rate = rho * c / service
    arrival = np.cumsum(rng.exponential(1 / rate, n))
    work = rng.exponential(service, n)
    wait = fcfs_departures(arrival, work, c) - arrival - work
    assert wait[n // 10:].mean() == pytest.approx(erlang_c_wait(c, rate, service), rel=0.06)


def test_unlimited_workers_are_a_pure_delay_and_order_is_fcfs():
    arrival = np.array([0.0, 0.0, 0.5, 0.1])
    assert fcfs_departures(arrival, np.array([1.0, 1.0, 1.0, 1.0]), None).tolist() == [1.0, 1.0, 1.5, 1.1]
    # One server: jobs start in arrival order (ties by index).
    assert fcfs_departures(arrival, np.array([1.0, 1.0, 1.0, 1.0]), 1).tolist() == [1.0, 2.0, 4.0, 3.0]


def test_a_40_ms_retrieval_stage_adds_40_ms_to_every_ttft():
    base = simulate(make_scenario(**LIGHT))
    rag = simulate(make_scenario(**LIGHT, pipeline={"pre": [{"name": "retrieval", "latency_ms": 40}]}))
    np.testing.assert_allclose(rag.requests["ttft_s"] - base.requests["ttft_s"], 0.040, atol=1e-9)
    np.testing.assert_allclose(rag.requests["queue_delay_s"], base.requests["queue_delay_s"], atol=1e-9)
    assert rag.summary["ttft_s"]["p50"] == pytest.approx(base.summary["ttft_s"]["p50"] + 0.040, abs=1e-9)
    np.testing.assert_allclose(rag.requests["pre_s"], 0.040)


def test_too_few_workers_queue_in_the_stage_as_m_m_c():
    """An exponential 40 ms safety filter with 2 workers at 40 req/s (80% busy): the mean time in
    the stage is the M/M/2 sojourn, 40 ms + Erlang-C wait (within 8%)."""
    sc = make_scenario(**{"num_requests": 20000, "workload.arrival.rate_per_s": 40.0, "scheduler.max_num_seqs": 64,
                          "pipeline": {"pre": [{"name": "safety", "workers": 2,
                                                "latency_ms": {"dist": "exponential", "mean_ms": 40}}]}})
    r = simulate(sc)
    expected = 0.040 + erlang_c_wait(2, 40.0, 0.040)
    assert r.requests["pre_s"].iloc[2000:].mean() == pytest.approx(expected, rel=0.08)
    assert r.summary["request_path"]["stages"]["pre_s"] == pytest.approx(expected, rel=0.08)


def test_post_stages_add_to_e2e_and_ttua_not_to_ttft():
    base = simulate(make_scenario(**LIGHT))
    post = simulate(make_scenario(**LIGHT, pipeline={"post": [{"name": "output filter", "latency_ms": 25}]}))
    np.testing.assert_allclose(post.requests["ttft_s"], base.requests["ttft_s"], atol=1e-9)
    np.testing.assert_allclose(post.requests["e2e_s"] - base.requests["e2e_s"], 0.025, atol=1e-9)
    np.testing.assert_allclose(post.requests["ttua_s"], post.requests["e2e_s"])


# -- TTUA ----------------------------------------------------------------------------------------------
def test_ttua_is_the_whole_answer_or_the_nth_token():
    whole = simulate(make_scenario(**LIGHT))
    np.testing.assert_allclose(whole.requests["ttua_s"], whole.requests["e2e_s"])
    assert whole.summary["ttua_s"]["p50"] == pytest.approx(whole.summary["e2e_s"]["p50"])
    part = simulate(make_scenario(**LIGHT, **{"client.usable_answer_tokens": 4}))
    req = part.requests
    np.testing.assert_allclose(req["ttua_s"], req["ttft_s"] + 3 * req["tpot_s"], atol=1e-12)
    assert (req["ttua_s"] < req["e2e_s"]).all()
    non_stream = simulate(make_scenario(**LIGHT, **{"client.usable_answer_tokens": 4, "client.stream": False}))
    np.testing.assert_allclose(non_stream.requests["ttua_s"], non_stream.requests["e2e_s"])


def test_a_ttua_slo_is_judged():
    r = simulate(make_scenario(**LIGHT, **{"slo.ttua_p99_ms": 50.0}))
    check = {c["name"]: c for c in r.summary["slo"]["checks"]}["ttua_p99"]
    assert check["value_s"] == pytest.approx(r.summary["ttua_s"]["p99"], rel=0.02)
    assert not check["met"] and not r.summary["slo"]["passed"]      # 10 steps of 10 ms: ~100 ms
    assert simulate(make_scenario(**LIGHT, **{"slo.ttua_p99_ms": 500.0})).summary["slo"]["passed"]


# -- response cache ------------------------------------------------------------------------------------
def test_a_50_percent_cache_halves_the_engine_work_at_light_load():
    off = simulate(make_scenario(**LIGHT))
    on = simulate(make_scenario(**LIGHT, response_cache={"kind": "semantic", "hit_rate": 0.5, "lookup_ms": 2}))
    rc = on.summary["request_path"]["response_cache"]
    n = rc["hits"] + rc["engine_requests"]        # the arrivals in the measured window (after the warm-up)
    assert n > LIGHT["num_requests"] / 2 and abs(rc["hits"] - n / 2) < 3 * math.sqrt(n / 4)
    assert on.summary["batch"]["busy_s"] / off.summary["batch"]["busy_s"] == pytest.approx(   # the whole run's
        1 - float(on.requests["response_cache_hit"].mean()), rel=0.03)                        # busy time and hits
    hits = on.requests[on.requests["response_cache_hit"]]
    np.testing.assert_allclose(hits["ttft_s"], 0.002)
    assert hits["tpot_s"].isna().all() and (hits["status"] == "finished_length_capped").all()
    assert on.summary["requests"]["completed"] == LIGHT["num_requests"]


def test_a_50_percent_cache_halves_the_replicas_for_that_traffic():
    over = {"num_requests": 1500, "workload.arrival.rate_per_s": 60.0, "scheduler.max_num_seqs": 2,
            "slo.ttft_p99_ms": 200.0}
    plain, _ = min_replicas(make_scenario(**over), max_replicas=16)
    cached, _ = min_replicas(make_scenario(**over, response_cache={"kind": "semantic", "hit_rate": 0.5}),
                             max_replicas=16)
    assert plain is not None and cached is not None
    assert cached == pytest.approx(plain / 2, abs=1)
    assert cached < plain


def test_a_cache_hit_after_its_client_gave_up_is_a_timeout_not_an_answer():
    """An offline burst through a two-worker stage queues for longer than the clients wait: a request
    the cache answers after its client's timeout (counted from its send) is timed out, on no replica,
    not completed (it was counted as answered); every completed request ended within the timeout."""
    sc = make_scenario(**{"num_requests": 190, "workload.arrival": {"process": "offline"}, "client.timeout_s": 0.5,
                          "pipeline": {"pre": [{"name": "auth", "workers": 2,
                                                "latency_ms": {"dist": "exponential", "mean_ms": 8}}]},
                          "response_cache": {"kind": "semantic", "hit_rate": 0.3, "lookup_ms": 2}})
    req = simulate(sc).requests
    hit = req["response_cache_hit"].to_numpy()
    aborted = (req["status"] == "finished_aborted").to_numpy()
    done = (req["status"] == "finished_length_capped").to_numpy()
    e2e = (req["finish_time"] - req["arrival_time"]).to_numpy()
    assert (hit & aborted).sum() > 0 and (hit & done).sum() > 0
    assert (e2e[done] <= 0.5 + 1e-9).all()
    assert (req["replica"].to_numpy()[hit & aborted] == -1).all()


def test_an_exact_cache_hit_rate_is_an_outcome():
    """100 distinct prompts at light load: every answer is back before its prompt is asked again,
    so the engine serves each distinct prompt asked once and every other request hits. An entry
    that expires at once never hits; a 5-entry LRU cache hits less than an unbounded one."""
    pop = {"workload.prompt_popularity": {"distinct_prompts": 100, "zipf_s": 1.0}}
    r = simulate(make_scenario(**LIGHT, **pop, response_cache={"kind": "exact"}))
    rc = r.summary["request_path"]["response_cache"]
    assert int((~r.requests["response_cache_hit"]).sum()) <= 100      # each distinct prompt served once
    start, end = r.summary["throughput"]["window_s"]                  # the summary counts the measured window
    in_window = r.requests[r.requests["arrival_time"].between(start, end)]
    assert rc["engine_requests"] == int((~in_window["response_cache_hit"]).sum())
    assert rc["hits"] + rc["engine_requests"] == len(in_window) and rc["hit_rate"] > 0.9
    expired = simulate(make_scenario(**LIGHT, **pop, response_cache={"kind": "exact", "ttl_s": 1e-6}))
    assert expired.summary["request_path"]["response_cache"]["hits"] == 0
    small = simulate(make_scenario(**LIGHT, **pop, response_cache={"kind": "exact", "capacity_entries": 5}))
    assert 0 < small.summary["request_path"]["response_cache"]["hit_rate"] < rc["hit_rate"]


def test_an_exact_cache_stores_ends_reported_out_of_time_order_as_if_in_order():
    """Replicas run steps ahead of the clock and report their ends out of time order: the request ending
    at 0.265 s was reported before the one ending at 0.184 s with the same prompt, the entry kept
    0.184 s, and its 0.2 s TTL ran out before a lookup at 0.389 s that the step-by-step run answered
    from the cache (found by a random-scenario hunt over caches, shedding and pools). The entry keeps
    its latest instant and the LRU order follows the instants: fast-forward equals step-by-step."""
    over = {"seed": 23, "num_requests": 6, "deployment.replicas": 3, "scheduler.max_num_seqs": 1,
            "hardware.prefill_time_per_token_s": 1e-4, "scheduler.max_model_len": 1024, "client.stream": False,
            "workload.arrival": {"process": "gamma", "rate_per_s": 80, "cv": 3.0},
            "workload.prompt_tokens": {"dist": "uniform", "min": 40, "max": 600},
            "workload.output_tokens": {"dist": "geometric", "mean": 30, "max": 300},
            "workload.prompt_popularity": {"distinct_prompts": 7, "zipf_s": 1.0},
            "response_cache": {"kind": "exact", "ttl_s": 0.2, "capacity_entries": 3},
            "admission.max_queue_delay_s": 0.05}
    sc = make_scenario(**over)
    fast = simulate(sc)
    assert fast.requests["response_cache_hit"].tolist() == [False] * 5 + [True]
    assert_same_run_to_1e9(fast, simulate(sc, fast_forward=False))
    for seed in range(6):           # LRU eviction under out-of-order ends: many prompts, two entries
        sc = make_scenario(**{**over, "seed": seed, "num_requests": 120, "admission.max_queue_delay_s": None,
                              "response_cache": {"kind": "exact", "ttl_s": 0.5, "capacity_entries": 2}})
        assert_same_run_to_1e9(simulate(sc), simulate(sc, fast_forward=False))


def test_zipf_popularity_matches_its_law():
    """P(prompt i) = (i + 1)^-s / H(N, s): the most popular of 100 prompts at s = 1 is asked
    1 / H(100) = 19.3% of the time, the tenth a tenth of that."""
    ids = zipf_prompts(PromptPopularityConfig(distinct_prompts=100, zipf_s=1.0), 200_000, np.random.default_rng(0))
    h = sum(1 / k for k in range(1, 101))
    share = np.bincount(ids, minlength=100) / len(ids)
    assert share[0] == pytest.approx(1 / h, rel=0.02) and share[9] == pytest.approx(0.1 / h, rel=0.06)
    assert ids.min() == 0 and ids.max() == 99


def test_identical_prompts_share_one_length():
    r = simulate(make_scenario(**LIGHT, **{"workload.prompt_popularity": {"distinct_prompts": 3},
                                           "workload.prompt_tokens": {"dist": "uniform", "min": 10, "max": 500}}))
    assert r.requests["num_prompt_tokens"].nunique() <= 3


def test_coalesced_requests_end_with_their_leader():
    sc = make_scenario(**{"num_requests": 2000, "workload.arrival.rate_per_s": 200.0, "scheduler.max_num_seqs": 4,
                          "workload.prompt_popularity": {"distinct_prompts": 20, "zipf_s": 1.0},
                          "coalescing": {"window_ms": 5000}})
    r = simulate(sc)
    req = r.requests
    merged = req[req["coalesced_into"] >= 0]
    start, end = r.summary["throughput"]["window_s"]           # the summary counts the measured window
    assert int(merged["arrival_time"].between(start, end).sum()) == r.summary["request_path"]["coalescing"][
        "merged"] > 100
    leaders = req.loc[merged["coalesced_into"].to_numpy()]
    np.testing.assert_allclose(merged["finish_time"].to_numpy(), leaders["finish_time"].to_numpy())
    assert r.summary["requests"]["completed"] == 2000
    off = simulate(sc.with_overrides({"coalescing": None}))
    assert r.summary["batch"]["num_steps"] < off.summary["batch"]["num_steps"]


# -- errors -----------------------------------------------------------------------------------------------
@pytest.mark.parametrize("over,needle", [
    ({"response_cache": {"kind": "exact"}}, "prompt_popularity"),
    ({"response_cache": {"kind": "semantic"}}, "hit_rate"),
    ({"coalescing": {"window_ms": 10}}, "prompt_popularity"),
    ({"response_cache": {"kind": "semantic", "hit_rate": 0.2},
      "workload.arrival": {"process": "closed_loop", "concurrency": 4}}, "closed"),
    ({"pipeline": {"pre": [{"name": "x", "latency_ms": -1}]}}, "latency_ms"),
])
def test_bad_request_path_settings_are_clear_errors(over, needle):
    from simulator.run.resolve import resolve
    with pytest.raises(ScenarioError) as info:
        resolve(make_scenario(**over))
    assert needle in str(info.value)


# -- sizing the stages ---------------------------------------------------------------------------------
def test_erlang_c_and_the_stage_sizing_rule():
    from simulator.cluster.request_path import erlang_c_wait_s, stage_workers_needed
    for c, rate, service in ((1, 10.0, 0.05), (4, 80.0, 0.04), (30, 600.0, 0.04)):
        assert erlang_c_wait_s(c, rate, service) == pytest.approx(erlang_c_wait(c, rate, service), rel=1e-9)
    # 100 req/s of 40 ms retrievals: 4 erlangs of work; at most 80% busy needs 5 workers, and the
    # M/M/c wait must stay within 4 ms: 5 workers wait 22 ms on average, 6 wait 5.9 ms, 7 wait 1.8 ms.
    assert stage_workers_needed(100.0, 0.040) == 7
    assert erlang_c_wait(6, 100.0, 0.04) > 0.004 >= erlang_c_wait(7, 100.0, 0.04)
    assert stage_workers_needed(0.0, 0.04) == 1


def test_the_planner_reports_the_workers_each_stage_needs():
    from test_planner import base_plan

    from simulator.planner.config import load_plan
    from simulator.planner.run import build_tasks, search_replicas
    plan = base_plan()
    plan["scenario"]["pipeline"] = {"pre": [{"name": "retrieval", "latency_ms": 40}],
                                    "post": [{"name": "filter", "latency_ms": 5}]}
    task = build_tasks(load_plan(plan))[0]
    row = search_replicas(task)
    assert row["stage_workers"] == (f"retrieval={stage_workers_needed_at(task.design_rps, 0.040)};"
                                    f"filter={stage_workers_needed_at(task.design_rps, 0.005)}")


def stage_workers_needed_at(rate: float, service: float) -> int:
    from simulator.cluster.request_path import stage_workers_needed
    return stage_workers_needed(rate, service)
