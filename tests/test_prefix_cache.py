"""Prefix caching (``scheduler.enable_prefix_caching``) against what theory and the data say.

* a 2k-token shared system prompt cuts mean TTFT by the cost model's prefill time of those
  tokens (at low load, where TTFT is mostly prefill);
* the hit rate of a synthetic workload is the expected share of prompt tokens in prefixes;
* the last prompt token is always computed, even for a fully cached prompt;
* a tiny cache evicts (LRU), never holds more than ``num_gpu_blocks`` blocks, and hits less;
* replaying the Mooncake excerpt's ``hash_ids`` with an unbounded cache gives the hit rate computed
  directly from the trace (an independent tuple-set computation here);
* sessions: later turns find the earlier turns' prompt and answer blocks;
* with the feature off nothing changes; bad fields are one-line errors.
"""
from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from conftest import make_scenario
from test_errors import assert_one_error_line, minimal, run_cli

from simulator import ScenarioError, scenario_from_dict, simulate
from simulator.cost.base import BatchShape
from simulator.cost.factory import make_cost_model
from simulator.engine.prefix_cache import PrefixCachingKVManager
from simulator.run.resolve import resolve
from simulator.workload.block_hashes import BlockHashes

DATA = Path(__file__).parent / "data"
MOONCAKE = DATA / "mooncake_conversation_excerpt.jsonl"


def with_prefix(**over):
    return make_scenario(**{"scheduler.enable_prefix_caching": True, **over})


# -- theory ------------------------------------------------------------------------------------------
def test_shared_2k_system_prompt_cuts_mean_ttft_by_the_prefill_time():
    """Llama-3-8B on an H100 (roofline), 2,048-token system prompt + 100 user tokens, 0.5 req/s.

    Off, each prompt's prefill computes 2,148 tokens; on, 100 tokens attending over the 2,048
    cached ones. The mean TTFT must fall by that difference of the cost model's prefill times
    (within 10%: queueing and the decodes sharing a step add a little either way)."""
    base = {"model": "llama-3-8b", "hardware": "h100-sxm", "num_requests": 300,
            "scheduler.max_num_seqs": 64, "scheduler.max_num_batched_tokens": 8192,
            "workload.arrival.rate_per_s": 0.5,
            "workload.prompt_tokens": {"dist": "fixed", "value": 2148},
            "workload.output_tokens": {"dist": "fixed", "value": 50},
            "workload.prefix": {"num_prefixes": 1, "prefix_tokens": 2048, "share": 1.0}}
    off = simulate(make_scenario(**base))
    on = simulate(make_scenario(**base, **{"scheduler.enable_prefix_caching": True}))
    system = resolve(on.scenario)
    cost = make_cost_model(system.profile, system.model, 1)
    full = cost.step_time_s(BatchShape.prefill(2148))
    rest = cost.step_time_s(BatchShape.prefill(100, 2048))
    saving = off.summary["ttft_s"]["mean"] - on.summary["ttft_s"]["mean"]
    assert saving == pytest.approx(full - rest, rel=0.10)
    assert saving > 0.7 * off.summary["ttft_s"]["mean"]           # "most of" the TTFT at this load
    assert on.summary["prefix_cache"]["hit_rate"] == pytest.approx(2048 / 2148, rel=0.01)
    # Requests after the first hit all 128 prefix blocks and compute 100 tokens.
    assert (on.requests["num_cached_tokens"].iloc[1:] == 2048).all()
    assert off.summary["prefix_cache"] is None
    assert (off.requests["num_cached_tokens"] == 0).all()


def test_hit_rate_equals_the_prefixed_share_of_prompt_tokens():
    """share 0.5 of requests start with one of 4 prefixes of 512 tokens; prompts uniform 600..1400.
    With a cache that never evicts, every prefixed request but the first of each prefix hits 512
    tokens, so the hit rate is share x 512 / mean prompt (binomial spread of the share: 3 sigma)."""
    n, share, p = 4000, 0.5, 512
    r = simulate(with_prefix(**{
        "num_requests": n, "scheduler.num_gpu_blocks_override": 400_000,
        "workload.prompt_tokens": {"dist": "uniform", "min": 600, "max": 1400},
        "workload.prefix": {"num_prefixes": 4, "prefix_tokens": p, "share": share}}))
    mean_prompt = 1000.0
    expected = share * p / mean_prompt
    sigma = p / mean_prompt * np.sqrt(share * (1 - share) / n) + expected * 231 / mean_prompt / np.sqrt(n)
    pc = r.summary["prefix_cache"]
    assert abs(pc["hit_rate"] - expected) < 3 * sigma, (pc, expected, sigma)
    assert pc["evictions"] == 0
    cached = r.requests["num_cached_tokens"].to_numpy()
    assert set(np.unique(cached)) <= {0, p}
    # Exactly: hit tokens = prefixed requests x 512 minus the 4 cold misses.
    assert pc["hit_tokens"] == cached.sum()
    assert (cached == p).sum() == pytest.approx(share * n, abs=3 * np.sqrt(n * share * (1 - share)))


def test_hit_rate_falls_as_the_cache_shrinks_and_blocks_stay_within_the_cache():
    """16 prefixes of 1,024 tokens shared by all requests; LRU keeps the hot prefixes while the
    cache is large and loses them as it shrinks (plenty of evictions), never over-committing."""
    rates, evictions = [], []
    for blocks in (100_000, 2_000, 700, 300):
        r = simulate(with_prefix(**{
            "num_requests": 600, "workload.arrival.rate_per_s": 40.0,
            "scheduler.num_gpu_blocks_override": blocks, "scheduler.max_num_batched_tokens": 4096,
            "workload.prompt_tokens": {"dist": "uniform", "min": 1100, "max": 1500},
            "workload.output_tokens": {"dist": "geometric", "mean": 30, "max": 200},
            "workload.prefix": {"num_prefixes": 16, "prefix_tokens": 1024, "share": 1.0}}))
        assert (r.steps["kv_blocks_used"] <= blocks).all()
        assert r.summary["requests"]["completed"] == 600
        rates.append(r.summary["prefix_cache"]["hit_rate"])
        evictions.append(r.summary["prefix_cache"]["evictions"])
    assert rates == sorted(rates, reverse=True), rates
    assert rates[0] > 0.6 and rates[-1] < rates[0] - 0.2, rates
    assert evictions[0] == 0 and evictions[-1] > 0, evictions


# -- the last token ------------------------------------------------------------------------------------
def _hashes(rows: list[list[int]], num_blocks: list[int], bs: int) -> BlockHashes:
    lengths = [len(x) for x in rows]
    flat = np.array([i for x in rows for i in x], dtype=np.int64)
    return BlockHashes(flat, np.concatenate(([0], np.cumsum(lengths))), np.array(num_blocks), 100, bs)


def test_last_prompt_token_is_always_computed():
    """Three requests with identical first 4 blocks (bs 4). Request 1's 16-token prompt is fully
    cached, yet only 3 blocks hit (12 tokens): the last block, which holds the last token, is
    computed again (vLLM caps hits at num_tokens - 1). Request 2 (17 tokens) hits all 4 blocks."""
    kv = PrefixCachingKVManager(64, 4, _hashes([[1, 2, 3, 4]] * 3, [5, 5, 5], 4))
    assert kv.admit(0, 16, budget=100) == 0
    assert kv.admit(1, 16, budget=100) == 12
    assert kv.admit(2, 17, budget=100) == 16
    # Blocks: request 0 allocated 4, request 1 one more (its private last block), request 2 one.
    assert kv.num_used_blocks == 6
    for rid, c in ((0, 16), (1, 16), (2, 17)):
        kv.release(rid, c)
    assert kv.num_used_blocks == 0
    # Request 2's partial 5th block (1 token) was private; 4 shared blocks remain cached.
    assert kv.num_evictable_blocks == 4 and kv.num_free_blocks == 64


def test_lru_eviction_order_and_counts():
    """Cached free blocks are evicted least recently freed first, a request's tail block first;
    unhashed free blocks go before any cached block."""
    kv = PrefixCachingKVManager(6, 1, _hashes([[0, 1, 2], [3, 4, 5]], [6, 6], 1))
    assert kv.admit(0, 4, budget=10) == 0            # 4 full blocks (bs 1): ids 0, 1, 2 and fresh 100
    kv.release(0, 4)
    assert (kv.num_used_blocks, kv.num_evictable_blocks) == (0, 4)
    assert kv.allocate(2) and kv.evictions == 0      # the 2 unhashed free blocks go first
    assert kv.allocate(1) and kv.evictions == 1      # then the LRU cached block: the tail, 100
    assert kv.ref[100] == -1 and list(kv.ref[:3]) == [0, 0, 0]
    assert kv.allocate(1) and kv.evictions == 2 and list(kv.ref[:3]) == [0, 0, -1]
    kv.free(4)
    assert kv.admit(0, 3, budget=10) == 2            # blocks 0, 1 still cached; block 2 recomputed
    assert kv.num_used_blocks == 3 and kv.num_evictable_blocks == 0
    assert not kv.allocate(4)                         # 6 - 3 held
    assert kv.allocate(3) and kv.evictions == 2


def test_without_sharing_prefix_caching_changes_no_latency():
    """No prefixes, no sessions: nothing can hit, so every latency equals the run without it."""
    over = {"num_requests": 300, "workload.prompt_tokens": {"dist": "uniform", "min": 1, "max": 500},
            "workload.output_tokens": {"dist": "geometric", "mean": 20, "max": 100}}
    off, on = simulate(make_scenario(**over)), simulate(with_prefix(**over))
    assert on.summary["prefix_cache"]["hit_tokens"] == 0
    cols = ["first_scheduled_time", "first_token_time", "finish_time"]
    np.testing.assert_array_equal(off.requests[cols].to_numpy(), on.requests[cols].to_numpy())
    np.testing.assert_array_equal(off.steps["kv_blocks_used"], on.steps["kv_blocks_used"])


# -- Mooncake hash_ids --------------------------------------------------------------------------------
def mooncake_expected_hits(path: Path, block_size: int) -> tuple[int, int]:
    """Hit tokens and prompt tokens of replaying ``path`` in arrival order through an unbounded
    cache, computed from the hash_ids alone: a block of ``block_size`` tokens ending at token e is
    cached when an earlier request's prompt held the same hash-id chain up to hash block
    (e - 1) // 512 and covered token e; hits are the leading cached blocks, at most
    (input_length - 1) // block_size of them."""
    rows = [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
    rows.sort(key=lambda r: r["timestamp"])          # stable: file order within a timestamp
    seen: set[tuple] = set()
    hits = prompts = 0
    for row in rows:
        ids, length = row["hash_ids"], row["input_length"]
        covered = min(length, 512 * len(ids)) // block_size
        keys = [(tuple(ids[: (e - 1) // 512 + 1]), e - 512 * ((e - 1) // 512))
                for e in ((i + 1) * block_size for i in range(covered))]
        n = 0
        for key in keys[: (length - 1) // block_size]:
            if key not in seen:
                break
            n += 1
        hits += n * block_size
        prompts += length
        seen.update(keys)
    return hits, prompts


@pytest.mark.parametrize("block_size", [16, 512, 48])
def test_mooncake_hash_ids_replay_matches_the_trace(block_size):
    hits, prompts = mooncake_expected_hits(MOONCAKE, block_size)
    sc = scenario_from_dict({
        "name": "mooncake", "model": {"name": "long", "num_layers": 2, "hidden_size": 256,
                                      "num_attention_heads": 4, "num_key_value_heads": 4,
                                      "intermediate_size": 512, "vocab_size": 1000, "max_model_len": 131072},
        "hardware": {"cost_model": "constant", "step_time_s": 0.01, "prefill_time_per_token_s": 1e-6},
        "scheduler": {"max_num_seqs": 64, "max_num_batched_tokens": 131072, "block_size": block_size,
                      "enable_prefix_caching": True, "num_gpu_blocks_override": 10_000_000 // block_size},
        "workload": {"arrival": {"process": "trace", "path": str(MOONCAKE), "format": "mooncake"}}})
    r = simulate(sc)
    pc = r.summary["prefix_cache"]
    assert r.summary["requests"]["preemptions"] == 0 and pc["evictions"] == 0
    assert pc["queries"] == prompts
    assert pc["hit_tokens"] == hits
    assert pc["hit_rate"] == pytest.approx(hits / prompts)
    assert 0.02 < pc["hit_rate"] < 0.5


def test_mooncake_identical_prompts_recompute_the_last_block(tmp_path):
    """Two requests with the same hash_ids and a 1,024-token prompt (two full hash blocks): the
    second finds 1,008 tokens cached and computes the last 16-token block."""
    rec = '{{"timestamp": {t}, "input_length": 1024, "output_length": 5, "hash_ids": [7, 8]}}\n'
    path = tmp_path / "t.jsonl"
    path.write_text(rec.format(t=0) + rec.format(t=1000))
    sc = with_prefix(**{"workload": {"arrival": {"process": "trace", "path": str(path), "format": "mooncake"}}})
    r = simulate(sc)
    assert list(r.requests["num_cached_tokens"]) == [0, 1008]


# -- sessions -----------------------------------------------------------------------------------------
def test_sessions_later_turns_hit_the_previous_prompt_and_answer():
    """3-turn sessions, fixed lengths (prompt 100, answers 40, follow-ups 30), turns 20 s apart
    on average while a request lasts well under a second: turn 2's prompt is 170 tokens and finds
    the full blocks of turn 1's 139 computed tokens (8 blocks of 16 = 128); turn 3 (240 tokens)
    finds turn 2's 209 computed tokens' 13 blocks (208). A turn that arrives before the previous
    answer is done (open loop: exponential gaps can be short) finds only the previous prompt's
    blocks (96, 160)."""
    r = simulate(with_prefix(**{
        "num_requests": 90, "workload.arrival.rate_per_s": 0.2,
        "workload.prompt_tokens": {"dist": "fixed", "value": 100},
        "workload.output_tokens": {"dist": "fixed", "value": 40},
        "workload.sessions": {"turns": 3, "turn_gap_s": 20.0, "followup_tokens": {"dist": "fixed", "value": 30}}}))
    req = r.requests
    by_prompt = req.groupby("num_prompt_tokens")["num_cached_tokens"]
    assert set(req["num_prompt_tokens"]) == {100, 170, 240}
    assert by_prompt.max().to_dict() == {100: 0, 170: 128, 240: 208}
    assert by_prompt.min().to_dict()[170] >= 96 and by_prompt.min().to_dict()[240] >= 160
    assert by_prompt.median().to_dict() == {100: 0, 170: 128, 240: 208}


def test_sessions_shape_arrivals_and_counts():
    sc = make_scenario(**{"num_requests": 500, "workload.arrival.rate_per_s": 1.0,
                          "workload.sessions": {"turns": {"dist": "uniform", "min": 1, "max": 5}, "turn_gap_s": 3.0}})
    r = simulate(sc)
    assert len(r.requests) == 500
    assert np.all(np.diff(r.requests["arrival_time"]) >= 0)
    # Prompts grow: later turns carry earlier turns (prompt 32, answers 10, follow-ups 32).
    assert r.requests["num_prompt_tokens"].max() > 32 and (r.requests["num_prompt_tokens"] - 32) .min() >= 0
    assert ((r.requests["num_prompt_tokens"] - 32) % 42 == 0).all()


# -- invariants with the feature on -------------------------------------------------------------------
def test_preemption_with_shared_blocks_is_conserved():
    """A tiny cache, every request sharing a 128-token prefix: heavy preemption, all complete,
    re-admitted requests find their own blocks again, fast-forward equals step-by-step."""
    sc = with_prefix(**{"num_requests": 300, "scheduler.num_gpu_blocks_override": 140,
                        "scheduler.max_num_seqs": 32, "workload.arrival.rate_per_s": 200,
                        "workload.prompt_tokens": {"dist": "fixed", "value": 300},
                        "workload.output_tokens": {"dist": "fixed", "value": 400},
                        "workload.prefix": {"prefix_tokens": 128, "num_prefixes": 2}})
    fast, slow = simulate(sc), simulate(sc, fast_forward=False)
    assert fast.summary["requests"]["preemptions"] > 0 and fast.summary["requests"]["completed"] == 300
    assert fast.summary["prefix_cache"] == slow.summary["prefix_cache"]
    assert fast.summary["prefix_cache"]["queries"] > 300 * 300          # re-admissions query again
    np.testing.assert_array_equal(fast.steps["kv_blocks_used"], slow.steps["kv_blocks_used"])
    np.testing.assert_allclose(fast.requests["finish_time"], slow.requests["finish_time"], rtol=0, atol=1e-9)


# -- errors -------------------------------------------------------------------------------------------
def _prefix_case(**prefix):
    data = minimal()
    data["workload"]["prefix"] = prefix
    return data


@pytest.mark.parametrize("data,field,needles", [
    (_prefix_case(prefix_tokens=100), "workload.prefix.prefix_tokens",
     ("prefix_tokens = 100", "request 0's prompt of 100 tokens", "short_prompt: clip")),
    (_prefix_case(prefix_tokens=50, share=1.5), "workload.prefix.share", ("1.5", "less than or equal to 1")),
    (_prefix_case(prefix_tokens=50, num_prefixes=0), "workload.prefix.num_prefixes", ("greater than or equal to 1",)),
    (_prefix_case(prefix_tokens=50, short_prompt="drop"), "workload.prefix.short_prompt", ("'error' or 'clip'",)),
    ({**minimal(), "workload": {"arrival": {"process": "trace", "path": str(MOONCAKE), "format": "mooncake"},
                                "prefix": {"prefix_tokens": 10}}}, "workload.prefix", ("hash_ids",)),
    ({**minimal(), "workload": {**minimal()["workload"], "arrival": {"process": "trace", "path": str(MOONCAKE),
                                                                     "format": "mooncake"},
                                "sessions": {"turns": 2, "turn_gap_s": 1}}},
     "workload.sessions", ("poisson or gamma",)),
    ({**minimal(), "workload": {**minimal()["workload"], "sessions": {"turns": 0, "turn_gap_s": 1}}},
     "workload.sessions.turns.value", ("greater than or equal to 1",)),
    ({**minimal(), "workload": {**minimal()["workload"], "sessions": {"turns": 2, "turn_gap_s": 0}}},
     "workload.sessions.turn_gap_s", ("greater than 0",)),
    ({**minimal(), "scheduler": {"enable_prefix_caching": "sometimes"}}, "scheduler.enable_prefix_caching",
     ("sometimes", "boolean")),
])
def test_bad_prefix_fields_are_clear_errors(data, field, needles):
    with pytest.raises(ScenarioError) as info:
        simulate(scenario_from_dict(data))
    assert info.value.field == field, str(info.value)
    for needle in needles:
        assert needle in str(info.value), str(info.value)


def test_short_prompt_clip_shares_all_but_the_last_token():
    r = simulate(with_prefix(**{"num_requests": 50, "workload.prompt_tokens": {"dist": "uniform", "min": 40, "max": 80},
                                "workload.prefix": {"prefix_tokens": 64, "short_prompt": "clip"}}))
    req = r.requests.iloc[5:]
    # Prompts <= 64 tokens share their first prompt - 1 tokens; hits are whole 16-token blocks.
    expect = np.minimum(np.where(req["num_prompt_tokens"] <= 64, req["num_prompt_tokens"] - 1, 64) // 16,
                        (req["num_prompt_tokens"] - 1) // 16) * 16
    assert (req["num_cached_tokens"] <= expect).all() and (req["num_cached_tokens"] == expect).mean() > 0.9


def test_cli_prefix_error_is_one_line(tmp_path):
    path = tmp_path / "s.yaml"
    import yaml
    path.write_text(yaml.safe_dump(_prefix_case(prefix_tokens=100)))
    assert_one_error_line(run_cli("simulate", str(path)), "workload.prefix.prefix_tokens = 100", "short_prompt")


def test_cli_json_reports_prefix_cache(tmp_path):
    import yaml
    data = _prefix_case(prefix_tokens=64)
    data["scheduler"] = {"enable_prefix_caching": True}
    data["num_requests"] = 40
    path = tmp_path / "s.yaml"
    path.write_text(yaml.safe_dump(data))
    proc = run_cli("simulate", str(path), "--json")
    assert proc.returncode == 0, proc.stderr
    pc = json.loads(proc.stdout)["prefix_cache"]
    assert set(pc) >= {"hit_rate", "hit_tokens", "queries", "evictions"}
    assert pc["hit_tokens"] == 39 * 64   # every request but the first hits the 4 prefix blocks


def test_policy_without_prefix_caching_support_is_an_error(monkeypatch):
    from simulator.engine.scheduler import POLICIES, Scheduler
    monkeypatch.setitem(POLICIES, "other", Scheduler)
    with pytest.raises(ScenarioError) as info:
        resolve(with_prefix(**{"scheduler.policy": "other"}))
    assert info.value.field == "scheduler.enable_prefix_caching" and "'other'" in str(info.value)


@pytest.mark.parametrize("policy", ["dynamic", "static"])
def test_other_policies_refuse_prefix_caching(policy):
    with pytest.raises(ScenarioError) as info:
        resolve(with_prefix(**{"scheduler.policy": policy}))
    assert info.value.field == "scheduler.enable_prefix_caching" and repr(policy) in str(info.value)


def test_prefix_caching_with_swap_preemption_is_an_error():
    with pytest.raises(ScenarioError) as info:
        resolve(with_prefix(**{"scheduler.preemption_mode": "swap"}))
    assert info.value.field == "scheduler.enable_prefix_caching" and "swap" in str(info.value)
