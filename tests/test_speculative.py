"""Speculative decoding: tokens per step against the closed form, TPOT direction against acceptance,
memory taken by a draft model, determinism and clear errors."""
from __future__ import annotations

import pytest
from conftest import make_scenario

from simulator import ScenarioError, load_scenario, simulate
from simulator.engine.speculative import expected_tokens_per_step


def spec(method="ngram", k=4, alpha=0.8, **extra):
    return {"speculative_config": {"method": method, "num_speculative_tokens": k, "acceptance_rate": alpha, **extra}}


def test_expected_tokens_per_step_closed_form():
    assert expected_tokens_per_step(0.8, 4) == pytest.approx((1 - 0.8 ** 5) / 0.2)
    assert expected_tokens_per_step(0.0, 4) == 1.0
    assert expected_tokens_per_step(1.0, 4) == 5.0


POLICIES = ["continuous", "chunked_prefill"]


@pytest.mark.parametrize("policy", POLICIES)
@pytest.mark.parametrize("alpha,k", [(0.6, 3), (0.9, 5), (0.3, 2)])
def test_tokens_per_step_match_theory(alpha, k, policy):
    """Long outputs (so the cap at max_tokens rarely truncates a step): the measured mean tokens per
    verification step is within 1.5% of (1 - alpha^(k+1)) / (1 - alpha), with continuous batching
    and with chunked prefill (verification tokens share the step's budget with prompt chunks)."""
    sc = make_scenario(**{"num_requests": 300, "workload.output_tokens": {"dist": "fixed", "value": 400},
                          "scheduler.policy": policy, **spec(alpha=alpha, k=k)})
    s = simulate(sc).summary["speculative"]
    assert s["mean_tokens_per_step"] == pytest.approx(s["expected_tokens_per_step"], rel=0.015)
    assert s["draft_acceptance_rate"] == pytest.approx((s["expected_tokens_per_step"] - 1) / k, rel=0.03)


@pytest.mark.parametrize("policy", POLICIES)
def test_tpot_with_a_free_proposer_is_step_time_over_tokens_per_step(policy):
    """Constant 10 ms steps, one request at a time, n-gram proposals (no draft cost): each output
    token after the first costs 10 ms / E[tokens per step] on average."""
    sc = make_scenario(**{"num_requests": 200, "scheduler.max_num_seqs": 1, "workload.arrival.rate_per_s": 1.0,
                          "scheduler.policy": policy,
                          "workload.output_tokens": {"dist": "fixed", "value": 301}, **spec(alpha=0.7, k=3)})
    tpot = simulate(sc).summary["tpot_s"]["mean"]
    assert tpot == pytest.approx(0.01 / expected_tokens_per_step(0.7, 3), rel=0.03)


def reference(**over):
    sc = load_scenario("examples/sharegpt-h100.yaml")
    return sc.with_overrides({"num_requests": 400, "warmup_s": 0, "workload.arrival.rate_per_s": 1.0, **over})


def test_draft_model_speculation_helps_at_high_acceptance_and_hurts_at_low():
    """llama-3-8b with a llama-3.2-1b draft on an H100, k=4: alpha=0.8 lowers TPOT (about 3.4
    tokens per step for one verification plus four cheap draft steps), alpha=0.1 raises it (1.1
    tokens per step still pays for the draft)."""
    base = simulate(reference()).summary["tpot_s"]["p50"]
    good = simulate(reference(**spec("draft", 4, 0.8, draft_model="llama-3.2-1b"))).summary["tpot_s"]["p50"]
    bad = simulate(reference(**spec("draft", 4, 0.1, draft_model="llama-3.2-1b"))).summary["tpot_s"]["p50"]
    assert good < 0.6 * base
    assert bad > 1.1 * base


def test_draft_model_takes_memory_from_the_kv_cache():
    plain = simulate(reference(num_requests=20, cooldown_s=0)).summary["kv_cache"]   # 20 s of arrivals
    with_draft = simulate(reference(num_requests=20, cooldown_s=0, **spec("draft", 4, 0.8, draft_model="llama-3.2-1b"))
                          ).summary["kv_cache"]
    # 1.24B draft parameters in bf16 come off the budget, and each token also holds the draft's KV
    # (16 layers x 8 kv heads x 64 dims, against the target's 32 x 8 x 128: a quarter more).
    assert with_draft["weights_bytes_per_gpu"] - plain["weights_bytes_per_gpu"] == pytest.approx(2 * 1.236e9, rel=0.01)
    assert with_draft["kv_bytes_per_block"] == pytest.approx(1.25 * plain["kv_bytes_per_block"])
    assert with_draft["num_gpu_blocks"] < plain["num_gpu_blocks"]


def test_num_gpu_blocks_override_wins_over_the_draft_models_memory():
    """As vLLM's num_gpu_blocks_override replaces the profiled block count, the override is the
    cache's size with a draft model too; the draft's weights and KV are still accounted for."""
    over = {"num_requests": 20, "cooldown_s": 0, "scheduler.num_gpu_blocks_override": 3000}   # 20 s of arrivals
    plain = simulate(reference(**over)).summary["kv_cache"]
    r = simulate(reference(**over, **spec("draft", 4, 0.8, draft_model="llama-3.2-1b")))
    with_draft = r.summary["kv_cache"]
    assert r.system.kv_plan.num_gpu_blocks == with_draft["num_gpu_blocks"] == plain["num_gpu_blocks"] == 3000
    assert with_draft["weights_bytes_per_gpu"] - plain["weights_bytes_per_gpu"] == pytest.approx(2 * 1.236e9, rel=0.01)
    assert with_draft["kv_bytes_per_block"] == pytest.approx(1.25 * plain["kv_bytes_per_block"])
    assert r.summary["requests"]["completed"] == 20


def test_a_draft_model_on_a_memoryless_profile_keeps_its_block_count():
    """The constant cost model has no memory size: its cache is sized as without a draft model
    (or by the override), not from infinite free bytes."""
    draft = spec("draft", 3, 0.7, draft_model="tiny-llama")
    for over in ({}, {"scheduler.num_gpu_blocks_override": 300}):
        r = simulate(make_scenario(**{"num_requests": 20, **over, **draft}))
        assert r.system.kv_plan.num_gpu_blocks == simulate(make_scenario(**over)).system.kv_plan.num_gpu_blocks
        assert r.summary["requests"]["completed"] == 20


@pytest.mark.parametrize("policy", POLICIES)
def test_speculation_conserves_tokens_and_is_reproducible(policy):
    sc = make_scenario(**{"num_requests": 200, "scheduler.num_gpu_blocks_override": 160, "scheduler.policy": policy,
                          "workload.prompt_tokens": {"dist": "fixed", "value": 100},
                          **({"scheduler.max_num_batched_tokens": 64} if policy == "chunked_prefill" else {}),
                          "workload.arrival.rate_per_s": 100, "scheduler.max_num_seqs": 8,
                          "workload.output_tokens": {"dist": "geometric", "mean": 60}, **spec(alpha=0.5, k=3)})
    a, b = simulate(sc), simulate(sc)
    check_invariants_spec(a)
    assert a.requests["finish_time"].equals(b.requests["finish_time"])
    assert a.summary["speculative"] == b.summary["speculative"]


def check_invariants_spec(r):
    req = r.requests
    done = req[req["status"] == "finished_length_capped"]
    assert len(done) == len(req)
    assert (done["num_output_tokens"] == done["max_tokens"]).all()
    assert (r.steps["kv_blocks_used"] <= r.system.kv_plan.num_gpu_blocks).all()


def test_bad_speculative_configs_are_clear_errors():
    with pytest.raises(ScenarioError, match="num_speculative_tokens = 0"):
        make_scenario(**spec(k=0))
    with pytest.raises(ScenarioError, match="needs draft_model"):
        make_scenario(**spec("draft"))
    with pytest.raises(ScenarioError, match="continuous"):
        simulate(make_scenario(**{"scheduler.policy": "static", **spec()}))
    with pytest.raises(ScenarioError, match=r"speculative_config\.draft_model.*unknown model preset"):
        simulate(make_scenario(**spec("draft", draft_model="llama-9")))


@pytest.mark.parametrize("policy", POLICIES)
def test_several_replicas_fast_forward_equals_step_by_step(policy):
    """Each replica draws acceptances from its own stream: the draws do not depend on how the
    replicas' events interleave, so advancing decode runs at once changes nothing."""
    import numpy as np
    for seed in (0, 1, 2):
        sc = make_scenario(**{"seed": seed, "num_requests": 200, "deployment.replicas": 3, "scheduler.policy": policy,
                              "workload.arrival.rate_per_s": 60.0,
                              "workload.output_tokens": {"dist": "geometric", "mean": 30, "max": 200},
                              **spec(alpha=0.6, k=3)})
        a, b = simulate(sc), simulate(sc, fast_forward=False)
        np.testing.assert_allclose(a.requests["finish_time"], b.requests["finish_time"], atol=1e-9)


def requests_in_each_step(r):
    """Per logged step, the requests in its batch, counted from the request records: those on the
    step's replica scheduled before the step's midpoint and finished after it (with no preemption
    and prompts that fit one step, every request runs in every step from its admission to its end)."""
    import numpy as np
    steps, req = r.steps, r.requests
    mid = (steps["start_time"] + steps["duration_s"] / 2).to_numpy()
    rep = steps["replica"].to_numpy()
    counts = np.zeros(len(steps), dtype=np.int64)
    for replica, g in req.groupby("replica"):
        start = np.sort(g["first_scheduled_time"].to_numpy())
        end = np.sort(g["finish_time"].to_numpy())
        on = rep == replica
        counts[on] = np.searchsorted(start, mid[on]) - np.searchsorted(end, mid[on])
    return counts


@pytest.mark.parametrize("fast_forward", [True, False])
@pytest.mark.parametrize("policy", POLICIES)
@pytest.mark.parametrize("speculative", [True, False])
def test_step_log_counts_every_request_of_the_batch(speculative, policy, fast_forward):
    """Each logged step's num_seqs is the number of requests in its batch, verification steps
    included (the fast path's steps, with fast_forward, and the steps planned one at a time), so
    the summary's mean batch size is that of the batches that ran."""
    sc = make_scenario(**{"num_requests": 120, "deployment.replicas": 2, "scheduler.policy": policy,
                          "workload.arrival.rate_per_s": 80.0,
                          "workload.output_tokens": {"dist": "geometric", "mean": 40, "max": 200},
                          **(spec(alpha=0.6, k=3) if speculative else {})})
    r = simulate(sc, fast_forward=fast_forward)
    assert r.summary["requests"]["preemptions"] == 0
    expected = requests_in_each_step(r)
    assert expected.max() > 4                       # the batches really are batches
    assert (r.steps["num_seqs"].to_numpy() == expected).all()
    assert r.summary["batch"]["mean_num_seqs"] > 2


VERIFY_COST_CASES = {
    "roofline": {"hardware": "a100-80gb-datasheet"},
    "roofline, MHA model": {"hardware": "h100-sxm-datasheet", "model": "llama-2-7b"},
    "kernel tables": {"hardware": "a100-80gb"},
    "general roofline (MoE)": {"hardware": "h100-sxm-datasheet", "model": "mixtral-8x7b",
                               "deployment.tensor_parallel_size": 2},
    "CUDA graphs, every step": {"hardware": "h100-sxm-datasheet",
                                "engine": {"preset": "vllm-v1", "cuda_graph": {"capture_sizes": [8, 16, 32, 64]}}},
    "CUDA graphs, decode only": {"hardware": "h100-sxm-datasheet", "engine": {
        "preset": "vllm-v1", "cuda_graph": {"capture_sizes": [8, 16, 32, 64], "prefill_steps": False}}},
    "async scheduling": {"hardware": "h100-sxm-datasheet", "engine": {
        "preset": "vllm-v1", "async_scheduling": True, "overhead": {"step_s": 0.004, "per_seq_s": 2e-4}}},
}


@pytest.mark.parametrize("overrides", VERIFY_COST_CASES.values(), ids=VERIFY_COST_CASES)
def test_verification_steps_cost_what_step_time_s_says_to_the_bit(overrides):
    """The engine prices a verification step (every request a (k+1)-token chunk over its context)
    with ``verify_step_fn``: the same float as ``step_time_s`` of that shape, for every cost model
    and wrapper, batch size and query length (memory- and compute-bound chunk attention alike)."""
    import numpy as np

    from simulator.cost.base import BatchShape, verify_step_fn
    from simulator.cost.factory import make_cost_model
    from simulator.run.resolve import resolve
    from simulator.scenario.parallel import Parallelism

    sc = make_scenario(**{"model": "llama-3-8b", "scheduler.max_model_len": 2048, **overrides})
    system = resolve(sc)
    cost = make_cost_model(system.profile, system.model, sc.deployment.tensor_parallel_size,
                           parallel=Parallelism.of(sc.deployment), cuda_graph=system.cuda_graph)
    rng = np.random.default_rng(0)
    checked = 0
    for n in (1, 3, 7, 16, 40):
        for q in (2, 5, 9, 64, 300):
            fn = verify_step_fn(cost, n, q)
            for computed in ([0] * n, rng.integers(0, 4000, n).tolist(), rng.integers(0, 30, n).tolist()):
                expected = cost.step_time_s(BatchShape([q] * n, list(computed), 0, 0, n * q))
                assert fn(computed) == expected, (n, q, computed)
                checked += 1
    assert checked == 75


SPEC_FAST_PATH_CASES = {
    "continuous": {},
    "chunked prefill (vLLM v1)": {"scheduler.policy": "chunked_prefill"},
    "chunked, a token budget that binds": {"scheduler.policy": "chunked_prefill", "scheduler.max_num_seqs": 16,
                                           "scheduler.max_num_batched_tokens": 48},
    "continuous, preemptions": {"scheduler.num_gpu_blocks_override": 40},
    "chunked, preemptions": {"scheduler.policy": "chunked_prefill", "scheduler.num_gpu_blocks_override": 40},
}


@pytest.mark.parametrize("overrides", SPEC_FAST_PATH_CASES.values(), ids=SPEC_FAST_PATH_CASES)
def test_the_speculative_fast_path_is_the_step_by_step_run_to_the_bit(overrides):
    """Steps in which every running request verifies are planned and applied on lists, and the
    one crossing the next arrival is planned at once and applied at its end: the requests, every
    logged step and the acceptance counters are those of the run planned one step at a time, bit
    for bit (outputs shorter than k + 1 near their end, a budget that binds, preemptions)."""
    import pandas as pd

    sc = make_scenario(**{"model": "llama-3-8b", "hardware": "a100-80gb-datasheet", "num_requests": 300,
                          "scheduler.max_model_len": 512, "workload.arrival.rate_per_s": 12.0,
                          "workload.prompt_tokens": {"dist": "uniform", "min": 16, "max": 300},
                          "workload.output_tokens": {"dist": "geometric", "mean": 40, "max": 200},
                          **spec("draft", k=4, alpha=0.7, draft_model="llama-3.2-1b"), **overrides})
    fast, slow = simulate(sc), simulate(sc, fast_forward=False)
    pd.testing.assert_frame_equal(fast.requests, slow.requests, check_exact=True)
    pd.testing.assert_frame_equal(fast.steps, slow.steps, check_exact=True)
    assert fast.engine_stats == slow.engine_stats
    assert fast.summary["speculative"] == slow.summary["speculative"]
    assert fast.summary["requests"]["completed"] == 300
    if "num_gpu_blocks_override" in str(overrides):
        assert fast.summary["requests"]["preemptions"] > 0


def test_verification_on_the_kernel_tables_is_decode_attention():
    """On a measured table a verification step's k+1 query tokens per request are decode rows in one
    decode attention call (as vLLM's MLA and FlashInfer backends run them), not one prefill kernel per
    request: DeepSeek-V3 on 8 x H200 verifying 2 tokens for 16 requests costs the decode step plus
    the extra rows' share, and MTP at alpha 0.8 lowers TPOT as it does on real engines (it used to
    triple it)."""
    from simulator import resolve
    from simulator.cost.base import BatchShape, verify_step_fn
    from simulator.cost.table import DECODE_QUERY_MAX
    from simulator.run.topology import cost_model
    over = {"deployment.data_parallel_size": 1, "deployment.tensor_parallel_size": 8, "num_requests": 400}
    sc = load_scenario("examples/deepseek-v3-dep8-h200.yaml", over)
    cm = cost_model(sc, resolve(sc))
    n, ctx = 16, 2000
    decode = cm.step_time_s(BatchShape.decode(n, n * ctx))
    verify = cm.step_time_s(BatchShape([2] * n, [ctx] * n, 0, 0, 2 * n))
    assert verify == verify_step_fn(cm, n, 2)([ctx] * n)
    rows = BatchShape([], [], 2 * n, 2 * n * ctx + 3 * n, 2 * n)        # the same query rows as decodes
    attention = cm.breakdown(BatchShape([2] * n, [ctx] * n, 0, 0, 2 * n)).attention_s
    assert attention == pytest.approx(cm.breakdown(rows).attention_s, rel=1e-12)
    assert decode < verify < 1.5 * decode
    assert DECODE_QUERY_MAX >= 2
    plain = simulate(sc).summary["tpot_s"]["p50"]
    mtp = simulate(sc.with_overrides({"speculative_config": {"method": "mtp", "num_speculative_tokens": 1,
                                                             "acceptance_rate": 0.8}})).summary["tpot_s"]["p50"]
    assert mtp < 0.8 * plain


def test_fast_verification_steps_evict_from_the_prefix_cache_as_planned_steps_do() -> None:
    """Closed sessions on a small prefix-cached KV pool with n-gram speculation: the verification
    steps run on the fast path take their lookahead blocks through the cache's ``allocate``, which
    evicts its least recently used blocks when no other block is free, as a step planned the usual
    way does (they used to take them as a bare count: nothing was evicted, so a later turn found
    blocks cached that the step-by-step engine had evicted and computed fewer prompt tokens)."""
    from conftest import assert_same_run_to_1e9
    sc = make_scenario(**{
        "seed": 0, "num_requests": 24, "hardware": "h100-sxm-datasheet",
        "speculative_config": {"method": "ngram", "num_speculative_tokens": 3, "acceptance_rate": 0.6},
        "scheduler.max_num_seqs": 1, "scheduler.enable_prefix_caching": True,
        "scheduler.num_gpu_blocks_override": 200, "scheduler.max_model_len": 1024, "workload.over_length": "clip",
        "workload.arrival": {"process": "poisson", "rate_per_s": 20},
        "workload.sessions": {"turns": 3, "turn_gap_s": 0.2, "turn_gap_dist": "fixed", "loop": "closed"},
        "workload.prompt_tokens": {"dist": "uniform", "min": 1, "max": 600},
        "workload.output_tokens": {"dist": "geometric", "mean": 30, "max": 300}})
    fast = simulate(sc)
    assert fast.summary["prefix_cache"]["evictions"] > 0
    assert_same_run_to_1e9(fast, simulate(sc, fast_forward=False))
