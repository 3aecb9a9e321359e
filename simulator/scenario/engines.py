"""Engine presets (``engine:`` in the YAML): the scheduler defaults of the serving engines people run.

A preset fills in the ``scheduler`` fields a scenario leaves out with the values that engine uses
out of the box (``vllm serve``, ``python -m sglang.launch_server``, ``trtllm-serve``), so
``engine: vllm-v1`` alone simulates vLLM v1's defaults; every field the scenario sets wins. The
engine's CPU time per step belongs to the engine too: ``engine.overhead`` replaces the hardware
profile's ``overhead`` (a profile's overhead describes the engine it was measured with). No preset
carries an overhead figure of its own: the published traces we know give shares of step time, not
per-step costs we could cite for every GPU, so the profile's figure stays unless one is given.

Each preset states its sources and what it does not model (``docs/engines.md`` renders this).
"""
from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from simulator.registry import Registry

GIB = 2**30


@dataclass(frozen=True)
class EnginePreset:
    """One engine's defaults: ``scheduler(profile, max_model_len)`` -> scheduler fields (``profile``:
    the scenario's hardware profile, or None when it cannot be loaded yet; ``max_model_len``: the
    served context, or None when unknown), with the sources and the limits."""

    title: str
    scheduler: Callable[[Any, int | None], dict[str, Any]]
    summary: str
    sources: tuple[str, ...] = ()
    limits: tuple[str, ...] = ()
    fields: tuple[str, ...] = field(default=())
    """The scheduler fields the preset sets (for the docs)."""


ENGINE_PRESETS: Registry[EnginePreset] = Registry("engine preset", "engine.preset")


def _large_gpu(profile: Any) -> bool:
    """vLLM's test for its larger batch defaults: at least 70 GiB of device memory and not an A100."""
    if profile is None or profile.memory_bytes is None:
        return False
    name = f"{profile.name} {profile.device}".lower()
    return profile.memory_bytes >= 70 * GIB and "a100" not in name


def _vllm_v1(profile: Any, max_model_len: int | None) -> dict[str, Any]:
    large = _large_gpu(profile)
    return {"policy": "chunked_prefill", "enable_prefix_caching": True, "block_size": 16,
            "gpu_memory_utilization": 0.9, "preemption_mode": "recompute",
            "max_num_batched_tokens": 8192 if large else 2048, "max_num_seqs": 1024 if large else 256,
            "num_scheduler_steps": 1}


ENGINE_PRESETS.add("vllm-v1", EnginePreset(
    "vLLM v1 (0.8 and later, `vllm serve`)", _vllm_v1,
    "Chunked prefill and automatic prefix caching on; the token budget and the batch size follow "
    "the GPU: 8,192 tokens and 1,024 sequences on GPUs with at least 70 GiB that are not A100s "
    "(H100, H200, B200, MI300X), 2,048 tokens and 256 sequences otherwise (A100, L40S).",
    ("vLLM `EngineArgs` batch defaults for the OpenAI server usage context (`vllm/engine/arg_utils.py`, "
     "`get_batch_defaults`; the 70 GiB / A100 rule comes from vLLM PR #17885)",
     "vLLM V1 blog, 'vLLM V1: A Major Upgrade to vLLM's Core Architecture' (January 2025): chunked prefill "
     "and prefix caching on by default"),
    ("async scheduling (`--async-scheduling`) is not switched on by the preset: set "
     "`engine.async_scheduling: true` for deployments that run it",
     "CUDA-graph padding of batch sizes is not modelled"),
    ("policy", "enable_prefix_caching", "max_num_batched_tokens", "max_num_seqs", "block_size",
     "gpu_memory_utilization", "preemption_mode", "num_scheduler_steps")))

ENGINE_PRESETS.add("vllm-v0.6", EnginePreset(
    "vLLM 0.6 (v0 engine)", lambda profile, max_model_len: {
        "policy": "continuous", "enable_prefix_caching": False, "block_size": 16,
        "max_num_batched_tokens": max(max_model_len or 0, 2048),
        "gpu_memory_utilization": 0.9, "max_num_seqs": 256, "num_scheduler_steps": 1},
    "Continuous batching without chunked prefill (prompts are never split: the token budget is "
    "the larger of the context length and 2,048, as vLLM sets it), no prefix caching, 256 sequences. "
    "Multi-step scheduling (`--num-scheduler-steps N`, `scheduler.num_scheduler_steps`) is off by default, as in vLLM; "
    "set it to simulate the multi-step runs vLLM 0.6's release benchmarks used: a new prompt then "
    "waits for the running multi-step decode run to end, which raises TTFT.",
    ("vLLM v0.6.0 release blog, 'vLLM v0.6.0: 2.7x Throughput Improvement and 5x Latency Reduction' "
     "(September 2024): multi-step scheduling and its effect on TTFT",
     "vLLM 0.6 `EngineArgs` defaults (`max_num_seqs` 256, chunked prefill off below 32k context)"),
    ("chunked prefill, which vLLM 0.6 turned on by default for models with a context of 32k tokens or "
     "more, is not switched on by the preset: set scheduler.policy: chunked_prefill for those",
     "multi-step runs deliver every token as it is computed (vLLM 0.6 streams a run's tokens at its end)"),
    ("policy", "enable_prefix_caching", "max_num_batched_tokens", "max_num_seqs", "block_size",
     "gpu_memory_utilization", "num_scheduler_steps")))

ENGINE_PRESETS.add("sglang", EnginePreset(
    "SGLang", lambda profile, max_model_len: {
        "policy": "chunked_prefill", "enable_prefix_caching": True, "max_num_batched_tokens": 8192,
        "block_size": 1, "gpu_memory_utilization": 0.88, "num_scheduler_steps": 1},
    "Chunked prefill (`--chunked-prefill-size`, 8,192 tokens here) and the radix cache (prefix "
    "caching at token granularity: block size 1); static memory fraction 0.88.",
    ("SGLang server arguments (`python/sglang/srt/server_args.py`): `chunked_prefill_size`, "
     "`mem_fraction_static`, radix cache on unless `--disable-radix-cache`",),
    ("SGLang sizes the chunk and the memory fraction by GPU memory; the preset takes its large-GPU values",
     "the longest-prefix-match queue order (`--schedule-policy lpm`) is not modelled: the queue is FCFS",
     "the number of running requests is limited by memory (SGLang derives `max_running_requests`); set "
     "scheduler.max_num_seqs to bound it"),
    ("policy", "enable_prefix_caching", "max_num_batched_tokens", "block_size", "gpu_memory_utilization",
     "num_scheduler_steps")))

ENGINE_PRESETS.add("trtllm", EnginePreset(
    "TensorRT-LLM (`trtllm-serve`)", lambda profile, max_model_len: {
        "policy": "continuous", "enable_prefix_caching": False,
        "max_num_batched_tokens": max(max_model_len or 0, 8192),
        "max_num_seqs": 2048, "block_size": 32, "gpu_memory_utilization": 0.9, "num_scheduler_steps": 1},
    "In-flight batching with `max_num_tokens` 8,192 and `max_batch_size` 2,048, KV blocks of 32 "
    "tokens (`tokens_per_block`), chunked context and KV-cache reuse off.",
    ("TensorRT-LLM build and runtime defaults (`max_num_tokens`, `max_batch_size`, `tokens_per_block`, "
     "`free_gpu_memory_fraction` 0.9)",),
    ("the capacity scheduler's default policy (GUARANTEED_NO_EVICT: admit a request only when KV for its "
     "whole output is free) is not modelled: admission here is vLLM's, which preempts on shortage",
     "prompts are never split (as without chunked context): the token budget is raised to the context "
     "length where that exceeds 8,192"),
    ("policy", "enable_prefix_caching", "max_num_batched_tokens", "max_num_seqs", "block_size",
     "gpu_memory_utilization", "num_scheduler_steps")))


def preset_scheduler(name: str, profile: Any, max_model_len: int | None) -> dict[str, Any]:
    """The scheduler fields preset ``name`` sets for ``profile`` and ``max_model_len`` (raises
    ScenarioError naming ``engine.preset`` and the known presets when the name is unknown)."""
    return ENGINE_PRESETS.lookup(name).scheduler(profile, max_model_len)


def markdown() -> str:
    """The presets as Markdown (``docs/engines.md``)."""
    lines = []
    for name, p in ENGINE_PRESETS.items():
        lines += [f"### `{name}`: {p.title}", "", p.summary, "",
                  "Sets: " + ", ".join(f"`scheduler.{f}`" for f in p.fields) + ".", ""]
        lines += ["Sources:", ""] + [f"- {s}" for s in p.sources] + [""]
        if p.limits:
            lines += ["Not modelled:", ""] + [f"- {s}" for s in p.limits] + [""]
    return "\n".join(lines)
