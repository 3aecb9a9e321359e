"""The capability table (simulator/capabilities.py) is the one place that says what combines with
what. Every test here is driven by the table itself, so a new policy, cost model, feature or
exclusion is tested as soon as it is added: each refused entry raises a ScenarioError naming both
features, and each supported combination resolves and simulates."""
from __future__ import annotations

import inspect
import itertools
from typing import Any

import pytest
from conftest import CONSTANT_HW, make_scenario

from simulator import ScenarioError, resolve, simulate
from simulator.capabilities import (
    COST_MODEL_FEATURES,
    COST_MODEL_SUPPORT,
    EXCLUSIONS,
    FEATURES,
    POLICY_FEATURES,
    POLICY_SUPPORT,
    YES,
    No,
    markdown,
)
from simulator.cost.factory import COST_MODELS
from simulator.engine.policies import POLICIES

TINY = {"num_layers": 4, "hidden_size": 256, "num_attention_heads": 8, "num_key_value_heads": 8,
        "intermediate_size": 688, "vocab_size": 4096, "max_model_len": 2048, "dtype": "fp32"}
TINY_MOE = {**TINY, "name": "tiny-moe", "num_experts": 8, "num_experts_per_tok": 2, "num_shared_experts": 1,
            "moe_intermediate_size": 128, "first_k_dense_replace": 1}
TINY_MLA = {**TINY, "name": "tiny-mla", "kv_lora_rank": 64, "qk_nope_head_dim": 32, "qk_rope_head_dim": 16,
            "v_head_dim": 32}
TINY_SWA = {**TINY, "name": "tiny-swa", "sliding_window": 64, "sliding_window_layers": 2}
"""Tiny models with experts, latent attention, sliding-window layers (one feature each)."""

ON: dict[str, dict[str, Any]] = {
    "prefix_caching": {"scheduler.enable_prefix_caching": True},
    "speculative_decoding": {"speculative_config": {"method": "ngram", "num_speculative_tokens": 2,
                                                    "acceptance_rate": 0.5}},
    "swap_preemption": {"scheduler.preemption_mode": "swap"},
    "pool_sizes": {"deployment.prefill_replicas": 1, "deployment.decode_replicas": 1},
    "client_timeout": {"client.timeout_s": 5.0},
    "queue_delay_shedding": {"admission.max_queue_delay_s": 1.0},
    "autoscaler": {"deployment.autoscaler": {"max_replicas": 2, "target_outstanding_per_replica": 4}},
    "fleet": {"fleet": {"regions": [{"name": "east", "replicas": 1}, {"name": "west", "replicas": 1}],
                        "clients": [{"name": "c", "rtt_ms": {"east": 5, "west": 40}}]}},
    "model_pools": {"deployment.pools": [{"name": "short", "replicas": 1}, {"name": "long", "replicas": 1}],
                    "deployment.pool_routing": {"by": "prompt_tokens", "default": "long",
                                                "thresholds": [{"max_prompt_tokens": 16, "pool": "short"}]}},
    "network": {"network": {"clients": [{"rtt_ms": 20}]}},
    "output_cap": {"client.max_tokens": 6},
    "prompt_trimming": {"client.max_prompt_tokens": 24},
    "sessions": {"workload.sessions": {"turns": 2, "turn_gap_s": 1.0}},
    "shared_prefixes": {"workload.prefix": {"prefix_tokens": 16}},
    "quantization": {"deployment.quantization": "fp8"},
    "kv_cache_dtype": {"deployment.kv_cache_dtype": "fp8"},
    "multi_step": {"scheduler.num_scheduler_steps": 4},
    "closed_loop": {"workload.arrival": {"process": "closed_loop", "concurrency": 4, "think_time_s": 0.01}},
    "closed_sessions": {"workload.sessions": {"turns": 2, "turn_gap_s": 0.05, "loop": "closed"}},
    "offline": {"workload.arrival": {"process": "offline"}},
    "pipeline": {"pipeline": {"pre": [{"name": "tokenize", "latency_ms": 1.0}]}},
    "response_cache": {"response_cache": {"kind": "semantic", "hit_rate": 0.3}},
    "coalescing": {"coalescing": {"window_ms": 100}, "workload.prompt_popularity": {"distinct_prompts": 50}},
    "prompt_popularity": {"workload.prompt_popularity": {"distinct_prompts": 50}},
    "moe": {"model": TINY_MOE},
    "mla": {"model": TINY_MLA},
    "sliding_window": {"model": TINY_SWA},
    "expert_parallel": {"model": TINY_MOE, "deployment.tensor_parallel_size": 2,
                        "deployment.expert_parallel_size": 2},
    "pipeline_parallel": {"deployment.pipeline_parallel_size": 2},
    "data_parallel": {"model": TINY_MOE, "deployment.data_parallel_size": 2, "deployment.expert_parallel_size": 2},
}
"""Settings that turn each feature on in the small test scenario."""

POLICY_BASE: dict[str, dict[str, Any]] = {"disaggregated": ON["pool_sizes"]}
"""What a policy needs to resolve at all (disaggregated: both pool sizes)."""

PROFILE = {"constant": dict(CONSTANT_HW, host_link_bandwidth_bytes_per_s=6.4e10), "roofline": "h100-sxm-datasheet",
           "table": "h100-sxm-vidur", "kernel_table": "h100-sxm"}
"""A hardware profile of each cost model (h100-sxm has the interconnect and host link the
disaggregated policy and swap preemption need)."""


def scenario(policy: str = "continuous", *features: str, cost_model: str = "roofline", **extra: Any):
    over: dict[str, Any] = {"hardware": PROFILE[cost_model], "scheduler.policy": policy, "num_requests": 30,
                            **POLICY_BASE.get(policy, {})}
    for f in features:
        over.update(ON[f])
    return make_scenario(**{**over, **extra})


def cells(table: dict[str, dict[str, Any]], keys: tuple[str, ...], supported: bool) -> list[tuple[str, str]]:
    return [(name, key) for name, row in table.items() for key in keys if (row[key] is YES) == supported]


# -- the table is complete -----------------------------------------------------------------------
def test_every_registered_policy_and_cost_model_has_a_full_row() -> None:
    assert set(POLICY_SUPPORT) == set(POLICIES)
    assert set(COST_MODEL_SUPPORT) == set(COST_MODELS)
    for row in POLICY_SUPPORT.values():
        assert tuple(row) == POLICY_FEATURES and all(v is YES or isinstance(v, No) for v in row.values())
    for row in COST_MODEL_SUPPORT.values():
        assert tuple(row) == COST_MODEL_FEATURES and all(v is YES or isinstance(v, No) for v in row.values())
    assert set(POLICY_FEATURES) | set(COST_MODEL_FEATURES) <= set(FEATURES)
    assert {k for ex in EXCLUSIONS for k in (ex.feature, ex.other)} <= set(FEATURES)
    assert set(ON) == set(FEATURES), "give every feature its settings in ON"
    assert set(PROFILE) == set(COST_MODELS), "give every cost model a profile in PROFILE"


def test_cost_model_support_matches_what_each_implementation_accepts() -> None:
    """A cost model said to model quantization takes the precision (make_cost_model passes it)."""
    for name, row in COST_MODEL_SUPPORT.items():
        takes = "precision" in inspect.signature(COST_MODELS[name]).parameters
        assert takes or all(v is not YES for v in row.values()), name


def test_each_feature_turns_on_with_its_settings() -> None:
    base = scenario()
    for key, feature in FEATURES.items():
        assert feature.on(base) is None, key
        assert feature.on(scenario("continuous", key)) is not None, key


# -- refused: an error naming both ----------------------------------------------------------------
@pytest.mark.parametrize("policy, key", cells(POLICY_SUPPORT, POLICY_FEATURES, supported=False))
def test_refused_policy_feature_is_an_error_naming_both(policy: str, key: str) -> None:
    sc = scenario(policy, key)
    with pytest.raises(ScenarioError) as info:
        resolve(sc)
    field, _ = FEATURES[key].on(sc)
    assert info.value.field == field
    assert f"scheduler.policy {policy!r}" in info.value.message and FEATURES[key].title in info.value.message
    no = POLICY_SUPPORT[policy][key]
    assert no.why in info.value.message and no.hint in info.value.message


@pytest.mark.parametrize("cost_model, key", cells(COST_MODEL_SUPPORT, COST_MODEL_FEATURES, supported=False))
def test_refused_cost_model_feature_is_an_error_naming_both(cost_model: str, key: str) -> None:
    sc = scenario("continuous", key, cost_model=cost_model)
    with pytest.raises(ScenarioError) as info:
        resolve(sc)
    assert info.value.field == FEATURES[key].on(sc)[0]
    assert f"cost model {cost_model!r}" in info.value.message and FEATURES[key].title in info.value.message


@pytest.mark.parametrize("ex", EXCLUSIONS, ids=lambda ex: f"{ex.feature}-{ex.other}")
def test_excluded_pair_is_an_error_naming_both(ex) -> None:
    sc = scenario("continuous", ex.feature, ex.other)
    with pytest.raises(ScenarioError) as info:
        resolve(sc)
    assert info.value.field == FEATURES[ex.feature].on(sc)[0]
    assert f"together with {FEATURES[ex.other].yaml}" in info.value.message


def test_a_pool_is_checked_against_its_own_cost_model() -> None:
    short = {"name": "short", "hardware": "h100-sxm-vidur", "quantization": "int4"}
    with pytest.raises(ScenarioError) as info:
        resolve(scenario("continuous", "model_pools", **{"deployment.pools": [short, {"name": "long"}]}))
    assert info.value.field == "deployment.pools.short.quantization"
    assert "h100-sxm-vidur" in info.value.message
    roofline = {**short, "hardware": "h100-sxm-datasheet"}
    resolve(scenario("continuous", "model_pools", **{"deployment.pools": [roofline, {"name": "long"}]}))


# -- supported: it resolves and runs --------------------------------------------------------------
@pytest.mark.parametrize("policy, key", cells(POLICY_SUPPORT, POLICY_FEATURES, supported=True))
def test_supported_policy_feature_runs(policy: str, key: str) -> None:
    result = simulate(scenario(policy, key))
    assert result.summary["requests"]["arrived"] > 0


@pytest.mark.parametrize("cost_model, key", cells(COST_MODEL_SUPPORT, COST_MODEL_FEATURES, supported=True))
def test_supported_cost_model_feature_resolves(cost_model: str, key: str) -> None:
    resolve(scenario("continuous", key, cost_model=cost_model))


def _policy_for(*keys: str) -> str | None:
    """A policy supporting every policy-dependent feature among ``keys`` (None: none does)."""
    for name, row in POLICY_SUPPORT.items():
        if all(row[k] is YES for k in keys if k in POLICY_FEATURES):
            return name
    return None


def _with_implied(key: str) -> set[str]:
    return {key, *FEATURES[key].implies}


PAIRS = [(a, b) for a, b in itertools.combinations(FEATURES, 2)
         if not any(ex.feature in _with_implied(x) and ex.other in _with_implied(y)
                    for ex in EXCLUSIONS for x, y in ((a, b), (b, a)))
         and b not in FEATURES[a].implies and a not in FEATURES[b].implies and _policy_for(a, b) is not None]


@pytest.mark.parametrize("a, b", PAIRS)
def test_features_not_excluded_resolve_together(a: str, b: str) -> None:
    resolve(scenario(_policy_for(a, b), a, b))


# -- the docs are the table -------------------------------------------------------------------------
def test_docs_show_every_cell() -> None:
    text = markdown()
    for name in [*POLICY_SUPPORT, *COST_MODEL_SUPPORT]:
        assert f"| `{name}` |" in text
    for ex in EXCLUSIONS:
        a, b = FEATURES[ex.feature], FEATURES[ex.other]
        assert f"| {a.title} (`{a.yaml}`) | {b.title} (`{b.yaml}`) |" in text


def test_a_row_written_without_the_architecture_features_refuses_them() -> None:
    """A cost model's row that does not name experts, MLA, sliding windows, EP or PP in ``also``
    refuses them: a new cost model cannot time an MoE model as a dense one by omission."""
    from simulator.capabilities import ARCHITECTURE_FEATURES, _all_but

    row = _all_but(COST_MODEL_FEATURES)
    assert all(row[k] is not YES for k in ARCHITECTURE_FEATURES)
    assert all(row[k] is YES for k in COST_MODEL_FEATURES if k not in ARCHITECTURE_FEATURES)
