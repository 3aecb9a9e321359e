"""Switching the model of an example with ``--set model=<preset>`` needs no scheduler edit.

Without an engine preset, a policy that never splits a prompt (``continuous``) gets a step budget
that holds the longest prompt when the scenario leaves ``max_num_batched_tokens`` out: the larger
of 8,192 and ``max_model_len`` (vLLM's rule without chunked prefill). What a model may still need
is hardware: more GPUs when its weights do not fit one H100, a roofline profile when the measured
kernel tables do not time its kind (MoE, sliding window), the CPU profile for the fp32 tiny model.
Those overrides are listed per preset below and never touch ``scheduler.*``.
"""
from __future__ import annotations

from pathlib import Path

import pytest

from simulator import load_scenario, simulate
from simulator.errors import ScenarioError
from simulator.scenario.models import MODEL_PRESETS

CHAT = Path(__file__).resolve().parent.parent / "examples" / "chat-h100.yaml"

#: What each preset needs besides ``model=`` on the chat example: hardware and parallelism only.
HARDWARE_NEEDS: dict[str, dict[str, object]] = {
    "llama-3-70b": {"deployment.tensor_parallel_size": 4},
    "llama-3.1-70b": {"deployment.tensor_parallel_size": 4},
    "llama-2-70b": {"deployment.tensor_parallel_size": 4},
    "mistral-7b": {"hardware": "h100-sxm-datasheet"},
    "mixtral-8x7b": {"hardware": "h100-sxm-datasheet", "deployment.tensor_parallel_size": 2},
    "qwen3-30b-a3b": {"hardware": "h100-sxm-datasheet"},
    "deepseek-v3": {"hardware": "h200-datasheet", "deployment.tensor_parallel_size": 8,
                    "deployment.quantization": "fp8"},
    "gpt-oss-120b": {"hardware": "h100-sxm-datasheet", "deployment.tensor_parallel_size": 2,
                     "deployment.quantization": "mxfp4"},
    "tiny-llama": {"hardware": "cpu-amd-epyc-tiny-llama"},
}
#: Presets whose context is shorter than the example's longest prompt + output (6,000 + 2,000):
#: the workload, not the scheduler, is what does not fit; those requests are rejected and counted.
SHORT_CONTEXT = {"llama-2-7b", "llama-2-70b", "tiny-llama"}


@pytest.mark.parametrize("preset", sorted(MODEL_PRESETS))
def test_every_preset_runs_on_the_chat_example_without_a_scheduler_edit(preset: str) -> None:
    overrides = {"model": preset, "num_requests": 40, "warmup_s": 0, **HARDWARE_NEEDS.get(preset, {})}
    if preset in SHORT_CONTEXT:
        overrides["workload.over_length"] = "reject"
    assert not any(key.startswith("scheduler.") for key in overrides)
    sc = load_scenario(CHAT, overrides)
    context = MODEL_PRESETS[preset].max_model_len
    assert sc.scheduler.max_num_batched_tokens == max(8192, context)
    assert "max_num_batched_tokens" not in sc.scheduler.model_fields_set   # derived, not set
    result = simulate(sc)
    assert result.summary["requests"]["completed"] + result.summary["requests"]["rejected"] == 40


def test_an_explicit_budget_is_kept_and_still_checked() -> None:
    sc = load_scenario(CHAT, {"model": "llama-3.1-8b", "scheduler.max_num_batched_tokens": 8192})
    assert sc.scheduler.max_num_batched_tokens == 8192
    with pytest.raises(ScenarioError, match="max_num_batched_tokens = 8192: must be >= max_model_len=131072"):
        simulate(sc)


def test_chunked_prefill_and_engine_presets_keep_their_budget() -> None:
    chunked = load_scenario(CHAT, {"model": "llama-3.1-8b", "scheduler.policy": "chunked_prefill"})
    assert chunked.scheduler.max_num_batched_tokens == 8192          # chunks split long prompts
    capped = load_scenario(CHAT, {"model": "llama-3.1-8b", "scheduler.max_model_len": 16384})
    assert capped.scheduler.max_num_batched_tokens == 16384          # the served context, not the model's
    v06 = load_scenario(CHAT, {"model": "llama-3.1-8b", "engine": "vllm-v0.6"})
    assert v06.scheduler.max_num_batched_tokens == 131072            # the preset's own rule
