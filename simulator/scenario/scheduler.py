"""The scenario's engine sections: ``scheduler`` (one replica's batching limits, with vLLM's names),
``engine`` (a preset of those limits, CUDA-graph capture, CPU time per step) and
``speculative_config``.

Only the description lives here; :mod:`simulator.engine` runs the policies, and the preset's values
for the fields a scenario leaves out are filled in when it is loaded (:mod:`simulator.scenario.defaults`).
"""
from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import Field, field_validator, model_validator

from simulator.errors import FieldError
from simulator.scenario.engines import ENGINE_PRESETS
from simulator.scenario.frozen import Frozen
from simulator.scenario.limits import (
    MAX_BLOCK_SIZE,
    MAX_MODEL_LEN,
    MAX_NUM_SEQS,
    MAX_SWAP_GIB,
    MAX_TIME_MS,
    FiniteFloat,
    Integer,
)
from simulator.scenario.models import ModelSpec
from simulator.scenario.profiles import Overhead

#: The batching policies whose engine step has a token budget yet never splits a prompt (vLLM without
#: chunked prefill): a prompt longer than the budget could never be scheduled, so the budget a scenario
#: leaves out holds the longest one (:func:`simulator.scenario.defaults.scheduler_defaults`). The
#: scheduler classes of :data:`simulator.engine.policies.POLICIES` say the same with ``uses_token_budget``
#: and ``splits_prompts``; they are named here so that a scenario is loaded without importing the engine,
#: which sits above this package (tests/test_scenario_layers.py checks that the two agree).
WHOLE_PROMPT_POLICIES: frozenset[str] = frozenset({"continuous", "disaggregated"})


class SchedulerConfig(Frozen):
    """Per-replica engine limits, with vLLM's names and meanings."""

    policy: str = "continuous"
    """Batching policy (see ``simulator.engine.scheduler.POLICIES``)."""
    max_num_seqs: Integer = Field(default=256, ge=1, le=MAX_NUM_SEQS)
    """Most requests in the running batch."""
    max_num_batched_tokens: Integer = Field(default=8192, ge=1, le=MAX_MODEL_LEN)
    """Token budget of one engine step (prefill tokens + one per decoding request)."""
    block_size: Integer = Field(default=16, ge=1, le=MAX_BLOCK_SIZE)
    """Tokens per KV-cache block."""
    gpu_memory_utilization: FiniteFloat = Field(default=0.9, gt=0, le=1)
    """Fraction of device memory the engine may use for weights, activations and KV cache."""
    max_model_len: Integer | None = Field(default=None, ge=1, le=MAX_MODEL_LEN)
    """Longest prompt + output served; defaults to the model's context length."""
    num_gpu_blocks_override: Integer | None = Field(default=None, ge=1)
    """Use this many KV blocks instead of deriving them from memory (tests, what-ifs)."""
    long_prefill_token_threshold: Integer | None = Field(default=None, ge=1, le=MAX_MODEL_LEN)
    """chunked_prefill: most prompt tokens one request computes in a step (None: the budget)."""
    max_wait_ms: FiniteFloat = Field(default=50.0, ge=0, le=MAX_TIME_MS)
    """static/dynamic: longest an idle engine waits for a full batch after the oldest arrival."""
    preemption_mode: Literal["recompute", "swap"] = "recompute"
    """What a preempted request loses: its KV (recomputed on return), or nothing (its KV is copied to
    host memory over the device-host link and back; vLLM v0's swap)."""
    swap_space_gib: FiniteFloat = Field(default=4.0, ge=0, le=MAX_SWAP_GIB)
    """Host memory per GPU for swapped KV (vLLM's ``swap_space``); when full, preemption recomputes."""
    scheduling_policy: Literal["fcfs", "priority"] = "fcfs"
    """vLLM's queue order: arrival order, or (tier priority, arrival); under ``priority`` the
    lowest-priority running request is the one preempted when KV blocks run out."""
    adaptive_batching: bool = False
    """dynamic: start at once when requests queued during the previous batch (size to the queue)."""
    enable_prefix_caching: bool = False
    """vLLM's automatic prefix caching: reuse cached full KV blocks of identical prompt prefixes
    (block hashes, ref counts, LRU eviction; see ``simulator.engine.prefix_cache``)."""
    num_scheduler_steps: Integer = Field(default=1, ge=1, le=64)
    """vLLM 0.6's multi-step scheduling (``--num-scheduler-steps``, continuous policy): a decode
    batch runs this many steps per scheduling decision, so a new prompt waits for the run to end,
    and the engine's per-step CPU overhead is paid once per run. 1: schedule every step."""

    @model_validator(mode="after")
    def _budget(self) -> SchedulerConfig:
        if self.max_num_batched_tokens < self.max_num_seqs:
            raise FieldError("max_num_batched_tokens", self.max_num_batched_tokens,
                             f"is below max_num_seqs ({self.max_num_seqs}): every running request needs one token "
                             "per step")
        return self


class CudaGraphConfig(Frozen):
    """The engine's CUDA-graph capture: a step that replays a captured graph computes its linear
    layers, elementwise ops and all-reduces at the captured size, the next at or above its token count
    (attention, the LM head and the CPU overhead stay those of the real requests; see
    ``simulator.cost.cuda_graph`` and docs/engines.md). The fields left out take the preset's values.

    ``cuda_graph: false`` is short for ``{capture_sizes: []}`` (eager: vLLM ``--enforce-eager``, SGLang
    ``--disable-cuda-graph``); ``cuda_graph: true`` for ``{}`` (the preset's)."""

    capture_sizes: list[Annotated[Integer, Field(ge=1, le=MAX_MODEL_LEN)]] | None = Field(default=None,
                                                                                          max_length=8192)
    """Batch sizes, in tokens per step, with a captured graph (vLLM ``cudagraph_capture_sizes``, SGLang
    ``cuda_graph_bs``); [] pads nothing; None: the preset's list up to ``max_capture_size``."""
    max_capture_size: Integer | None = Field(default=None, ge=1, le=MAX_MODEL_LEN)
    """The largest captured size (vLLM ``max_cudagraph_capture_size``, SGLang ``cuda_graph_max_bs``,
    TensorRT-LLM ``max_batch_size``): with ``capture_sizes`` left out, the preset's list up to it; None:
    the preset's default (which may pad nothing: ``trtllm``)."""
    prefill_steps: bool | None = None
    """Steps with prompt tokens replay a graph too when their token count fits (vLLM v1's piecewise
    graphs); False: pure-decode steps only; None: the preset's (``vllm-v1``: true, the others: false)."""

    @model_validator(mode="before")
    @classmethod
    def _shorthand(cls, data: Any) -> Any:
        if isinstance(data, bool):
            return {} if data else {"capture_sizes": []}
        return data

    @model_validator(mode="after")
    def _consistent(self) -> CudaGraphConfig:
        sizes, top = self.capture_sizes, self.max_capture_size
        if sizes is not None and top is not None and top != (max(sizes) if sizes else None):
            raise FieldError("max_capture_size", top, f"must be the largest of capture_sizes {sizes}, or be left out")
        return self


class EngineConfig(Frozen):
    """The serving engine: a preset of scheduler defaults, its CUDA-graph capture and its CPU time per step.

    ``engine: vllm-v1`` is short for ``engine: {preset: vllm-v1}``. The preset fills in the
    ``scheduler`` fields the scenario leaves out (see ``simulator.scenario.engines`` and
    docs/engines.md) and the ``cuda_graph`` fields left out; ``overhead`` replaces the hardware
    profile's ``overhead``."""

    preset: str
    """One of ``simulator.scenario.engines.ENGINE_PRESETS``: vllm-v1, vllm-v0.6, sglang, trtllm."""
    overhead: Overhead | None = None
    """The engine's CPU time per step (None: the hardware profile's ``overhead``)."""
    cuda_graph: CudaGraphConfig | None = None
    """CUDA-graph padding of batch sizes (None: the preset's capture; ``false``: eager)."""
    async_scheduling: bool | None = None
    """The engine schedules step n+1 while the GPU runs step n (vLLM's ``--async-scheduling``,
    SGLang's and TensorRT-LLM's overlap schedulers): a step takes the longer of its GPU time and its
    CPU overhead instead of their sum, and a request that arrives while a step runs is first
    scheduled in the step after the next (docs/engines.md). None: the preset's (``sglang``,
    ``trtllm``: true, their default; ``vllm-v1``, ``vllm-v0.6``: false)."""

    data_parallel_routing: str | None = None
    """How a replica with attention data-parallel ranks (``deployment.data_parallel_size``) picks the
    rank of each request: ``least_outstanding`` (fewest waiting or running), ``vllm`` (vLLM's lowest
    ``4 x waiting + running``), ``round_robin`` (SGLang's default). None: the preset's (``vllm-v1``:
    vllm; ``sglang``: round_robin; ``trtllm``, ``vllm-v0.6``: least_outstanding). See
    ``simulator.engine.data_parallel``."""

    @model_validator(mode="before")
    @classmethod
    def _shorthand(cls, data: Any) -> Any:
        return {"preset": data} if isinstance(data, str) else data

    @field_validator("preset")
    @classmethod
    def _known(cls, name: str) -> str:
        if name not in ENGINE_PRESETS:
            raise ValueError(f"unknown engine preset; known: {', '.join(ENGINE_PRESETS)}")
        return name

    @property
    def rank_choice(self) -> str:
        """``data_parallel_routing`` as set, or the preset's default when left out."""
        if self.data_parallel_routing is not None:
            return self.data_parallel_routing
        return ENGINE_PRESETS[self.preset].data_parallel_routing

    @property
    def runs_async(self) -> bool:
        """``async_scheduling`` as set, or the preset's default when left out."""
        if self.async_scheduling is not None:
            return self.async_scheduling
        return ENGINE_PRESETS[self.preset].async_scheduling



class SpeculativeConfig(Frozen):
    """Speculative decoding (vLLM's ``speculative_config``): each decode step proposes
    ``num_speculative_tokens`` tokens per request and the target verifies them in one pass."""

    method: Literal["draft", "ngram", "mtp"] = "draft"
    """``draft``: a small model proposes; ``ngram``: prompt lookup (no model); ``mtp``: one extra
    decoder layer of the target per proposed token (multi-token prediction heads)."""
    num_speculative_tokens: Integer = Field(ge=1, le=16)
    """Tokens proposed per step, k."""
    acceptance_rate: FiniteFloat = Field(ge=0, le=1)
    """Per-token acceptance probability alpha (each proposal accepted independently, in order)."""
    draft_model: str | ModelSpec | None = None
    """The draft model (a preset or an inline spec); required for ``method: draft``."""

    @model_validator(mode="after")
    def _draft(self) -> SpeculativeConfig:
        if self.method == "draft" and self.draft_model is None:
            raise ValueError("method 'draft' needs draft_model (a preset such as llama-3.2-1b, or an inline spec)")
        if self.method != "draft" and self.draft_model is not None:
            raise ValueError(f"draft_model is only used by method 'draft', not {self.method!r}")
        return self
