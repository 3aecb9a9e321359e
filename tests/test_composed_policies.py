"""Features composed as vLLM v1 composes them: prefix caching with chunked prefill, prefix caching
with speculative decoding.

* chunked prefill + prefix caching: a hit skips whole cached blocks of the prompt and the rest is
  prefilled in chunks; each chunk's full blocks are cached as it is scheduled, so a request admitted
  while another is still prefilling the same prefix hits the chunks already computed; with nothing
  shared the feature changes no latency; under heavy preemption every block is accounted for and
  fast-forward equals step-by-step;
* speculative decoding + prefix caching: lookahead blocks are reserved and returned around each
  verification step without disturbing the shared blocks; hits cut TTFT as without speculation.
"""
from __future__ import annotations

import numpy as np
import pytest
from conftest import make_scenario

from simulator import simulate
from simulator.cost.base import BatchShape
from simulator.cost.factory import make_cost_model
from simulator.engine.prefix_cache import PrefixCachingKVManager
from simulator.run.resolve import resolve
from simulator.workload.block_hashes import BlockHashes

CHUNKED = {"scheduler.policy": "chunked_prefill", "scheduler.enable_prefix_caching": True}
SPEC = {"speculative_config": {"method": "ngram", "num_speculative_tokens": 3, "acceptance_rate": 0.6}}


def _shared(rows: int, blocks: int, bs: int) -> BlockHashes:
    """``rows`` requests whose first ``blocks`` full blocks are identical (ids 0..blocks-1)."""
    flat = np.tile(np.arange(blocks, dtype=np.int64), rows)
    return BlockHashes(flat, np.arange(rows + 1) * blocks, np.full(rows, blocks + 1), 1000, bs)


# -- the KV interface ------------------------------------------------------------------------------
def test_a_chunk_caches_its_full_blocks_for_requests_admitted_later():
    """Block size 4, two requests sharing 16 blocks (64 tokens, prompts of 66). Request 0 is admitted
    with a 20-token first chunk: blocks 0-4 are cached at once. Request 1, admitted next, hits those
    5 blocks (20 tokens); after request 0's next chunk (to 44 tokens) a third request hits 11."""
    kv = PrefixCachingKVManager(100, 4, _shared(3, 16, 4))
    assert kv.admit_chunk(0, 66, budget=20) == (0, 20)
    assert kv.num_used_blocks == 5
    assert kv.admit_chunk(1, 66, budget=8) == (20, 8)       # 5 shared blocks + 2 new
    assert kv.num_used_blocks == 7
    assert kv.allocate(6)                                    # request 0's second chunk: tokens 20..44
    kv.register(0, 44)
    assert kv.admit_chunk(2, 66, budget=100) == (44, 22)    # the rest of the prompt in one chunk
    for rid, c in ((0, 44), (1, 28), (2, 66)):
        kv.release(rid, c)
    assert kv.num_used_blocks == 0
    assert kv.num_evictable_blocks == 16                     # the 16 full blocks stay cached


def test_a_chunk_never_hits_the_last_prompt_token():
    kv = PrefixCachingKVManager(100, 4, _shared(2, 4, 4))
    assert kv.admit_chunk(0, 16, budget=100) == (0, 16)
    assert kv.admit_chunk(1, 16, budget=100) == (12, 4)     # 3 of the 4 cached blocks


def test_without_prefix_caching_admit_chunk_takes_the_chunks_blocks():
    from simulator.engine.kv_cache import KVCacheManager
    kv = KVCacheManager(10, 4)
    assert kv.admit_chunk(0, 30, budget=9) == (0, 9) and kv.num_used_blocks == 3
    assert kv.admit_chunk(1, 100, budget=100) == (-1, 0) and kv.num_used_blocks == 3


# -- end to end --------------------------------------------------------------------------------------
def test_chunked_prefill_with_a_shared_prompt_cuts_ttft_by_the_prefill_time():
    """Llama-3-8B on an H100 (roofline), 2,048-token system prompt + 100 user tokens, 0.5 req/s, a
    token budget of 512 (the uncached prompt takes 5 chunks). With caching, a request computes its
    100 tokens in one chunk over the 2,048 cached ones; the mean TTFT falls by the difference of the
    cost model's step times (within 10%: the decodes sharing a step add a little either way)."""
    base = {"model": "llama-3-8b", "hardware": "h100-sxm", "num_requests": 300,
            "scheduler.policy": "chunked_prefill", "scheduler.max_num_seqs": 64,
            "scheduler.max_num_batched_tokens": 512, "workload.arrival.rate_per_s": 0.5,
            "workload.prompt_tokens": {"dist": "fixed", "value": 2148},
            "workload.output_tokens": {"dist": "fixed", "value": 50},
            "workload.prefix": {"num_prefixes": 1, "prefix_tokens": 2048, "share": 1.0}}
    off = simulate(make_scenario(**base))
    on = simulate(make_scenario(**base, **{"scheduler.enable_prefix_caching": True}))
    system = resolve(on.scenario)
    cost = make_cost_model(system.profile, system.model, 1)
    chunks = [(512, 0), (512, 512), (512, 1024), (512, 1536), (100, 2048)]
    full = sum(cost.step_time_s(BatchShape.prefill(n, c)) for n, c in chunks)
    rest = cost.step_time_s(BatchShape.prefill(100, 2048))
    saving = off.summary["ttft_s"]["mean"] - on.summary["ttft_s"]["mean"]
    assert saving == pytest.approx(full - rest, rel=0.10)
    assert on.summary["prefix_cache"]["hit_rate"] == pytest.approx(2048 / 2148, rel=0.01)
    assert (on.requests["num_cached_tokens"].iloc[1:] == 2048).all()
    # Cached requests prefill in one step; uncached ones in 5 chunks.
    assert on.summary["batch"]["num_steps"] < off.summary["batch"]["num_steps"]


def test_chunked_prefill_without_sharing_prefix_caching_changes_no_latency():
    over = {**CHUNKED, "num_requests": 300, "scheduler.max_num_batched_tokens": 64,
            "workload.arrival.rate_per_s": 20.0,
            "workload.prompt_tokens": {"dist": "uniform", "min": 1, "max": 500},
            "workload.output_tokens": {"dist": "geometric", "mean": 20, "max": 100}}
    on = simulate(make_scenario(**over))
    off = simulate(make_scenario(**{**over, "scheduler.enable_prefix_caching": False}))
    assert on.summary["prefix_cache"]["hit_tokens"] == 0
    cols = ["first_scheduled_time", "first_token_time", "finish_time"]
    np.testing.assert_array_equal(off.requests[cols].to_numpy(), on.requests[cols].to_numpy())
    np.testing.assert_array_equal(off.steps["kv_blocks_used"], on.steps["kv_blocks_used"])


def test_chunked_prefill_preemption_with_shared_blocks_is_conserved():
    """A tiny cache, every request sharing a 128-token prefix, chunks of 64 tokens: heavy
    preemption, all complete, blocks never over-committed, fast-forward equals step-by-step."""
    sc = make_scenario(**{**CHUNKED, "num_requests": 300, "scheduler.num_gpu_blocks_override": 140,
                          "scheduler.max_num_seqs": 32, "scheduler.max_num_batched_tokens": 64,
                          "workload.arrival.rate_per_s": 200,
                          "workload.prompt_tokens": {"dist": "fixed", "value": 300},
                          "workload.output_tokens": {"dist": "fixed", "value": 400},
                          "workload.prefix": {"prefix_tokens": 128, "num_prefixes": 2}})
    fast, slow = simulate(sc), simulate(sc, fast_forward=False)
    assert fast.summary["requests"]["preemptions"] > 0 and fast.summary["requests"]["completed"] == 300
    assert (fast.steps["kv_blocks_used"] <= 140).all()
    assert fast.summary["prefix_cache"] == slow.summary["prefix_cache"]
    assert fast.summary["prefix_cache"]["hit_rate"] > 0.3
    np.testing.assert_array_equal(fast.steps["kv_blocks_used"], slow.steps["kv_blocks_used"])
    np.testing.assert_allclose(fast.requests["finish_time"], slow.requests["finish_time"], rtol=0, atol=1e-9)


def test_speculative_decoding_with_prefix_caching_hits_and_conserves_blocks():
    """ngram speculation (k=3, alpha 0.6) with a shared 256-token prefix: hits as without
    speculation, every request completes under preemption, blocks never over-committed."""
    over = {"num_requests": 300, "scheduler.enable_prefix_caching": True, "scheduler.max_num_seqs": 16,
            "workload.arrival.rate_per_s": 50.0,
            "workload.prompt_tokens": {"dist": "fixed", "value": 300},
            "workload.output_tokens": {"dist": "fixed", "value": 60},
            "workload.prefix": {"prefix_tokens": 256, "num_prefixes": 1}}
    plain = simulate(make_scenario(**over))
    spec = simulate(make_scenario(**over, **SPEC))
    assert spec.summary["requests"]["completed"] == 300
    assert (spec.requests["num_cached_tokens"].iloc[1:] == 256).all()
    assert spec.summary["prefix_cache"]["hit_tokens"] == plain.summary["prefix_cache"]["hit_tokens"]
    tight = simulate(make_scenario(**over, **SPEC, **{"scheduler.num_gpu_blocks_override": 60,
                                                        "scheduler.max_model_len": 512}))
    assert tight.summary["requests"]["preemptions"] > 0 and tight.summary["requests"]["completed"] == 300
    assert (tight.steps["kv_blocks_used"] <= 60).all()


def test_chunked_prefill_speculation_and_prefix_caching_together():
    """vLLM v1 with all three: chunks of 64 tokens, ngram speculation, a shared 128-token prefix,
    a small cache. Everything completes, blocks are never over-committed, the prefix hits, the
    verification steps emit the closed-form tokens per step, and the same seed repeats exactly."""
    sc = make_scenario(**{**CHUNKED, **SPEC, "num_requests": 300, "scheduler.num_gpu_blocks_override": 200,
                          "scheduler.max_num_seqs": 16, "scheduler.max_num_batched_tokens": 64,
                          "workload.arrival.rate_per_s": 100,
                          "workload.prompt_tokens": {"dist": "fixed", "value": 300},
                          "workload.output_tokens": {"dist": "fixed", "value": 120},
                          "workload.prefix": {"prefix_tokens": 128, "num_prefixes": 2}})
    a, b = simulate(sc), simulate(sc)
    assert a.summary["requests"]["completed"] == 300 and a.summary["requests"]["preemptions"] > 0
    assert (a.steps["kv_blocks_used"] <= 200).all()
    assert a.summary["prefix_cache"]["hit_rate"] > 0.2
    s = a.summary["speculative"]
    assert s["mean_tokens_per_step"] == pytest.approx(s["expected_tokens_per_step"], rel=0.05)
    assert a.requests["finish_time"].equals(b.requests["finish_time"])


def test_prefix_caching_on_a_disaggregated_prefill_pool():
    """Constant steps of 10 ms + 0.1 ms per prompt token, a shared 256-token prefix in prompts of
    300: with caching the prefill pool computes 44 tokens of a prompt instead of 300, so TTFT falls
    by 256 x 0.1 ms = 25.6 ms (within 10%: queueing); the decode pool still receives the whole
    prompt's KV, so the transfer time total is the same with and without caching."""
    over = {"num_requests": 200, "workload.arrival.rate_per_s": 2.0,
            "scheduler.policy": "disaggregated", "deployment.prefill_replicas": 1, "deployment.decode_replicas": 1,
            "deployment.kv_transfer_bandwidth_bytes_per_s": 1e9, "deployment.kv_transfer_latency_s": 0.001,
            "hardware.prefill_time_per_token_s": 1e-4,
            "workload.prompt_tokens": {"dist": "fixed", "value": 300},
            "workload.output_tokens": {"dist": "fixed", "value": 20},
            "workload.prefix": {"prefix_tokens": 256, "num_prefixes": 1}}
    off = simulate(make_scenario(**over))
    on = simulate(make_scenario(**over, **{"scheduler.enable_prefix_caching": True}))
    assert on.summary["requests"]["completed"] == 200
    assert (on.requests["num_cached_tokens"].iloc[1:] == 256).all()
    saving = off.summary["ttft_s"]["mean"] - on.summary["ttft_s"]["mean"]
    assert saving == pytest.approx(256e-4, rel=0.1)
    assert on.engine_stats["kv_transfer_s_total"] == pytest.approx(off.engine_stats["kv_transfer_s_total"])
    assert on.engine_stats["kv_transfer_s_total"] > 0
