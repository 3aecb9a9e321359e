"""The scenario: a frozen, validated description of one serving system and its traffic.

A scenario is inert data (Ciw's "network", vLLM's configs): the model, the hardware profile, the
deployment, the scheduler limits, the workload and the SLO. :func:`load_scenario` reads YAML,
applies ``--set`` overrides and validates everything through one path, so the CLI, the UI and
Python callers see the same one-line errors naming the field, the value and what is allowed.
Nothing here simulates; :func:`simulator.simulate` takes a scenario and builds fresh objects.
"""
from __future__ import annotations

import difflib
import types
import typing
from pathlib import Path
from typing import Annotated, Any, Literal, Union

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from simulator.arguments import check_overrides, check_path
from simulator.errors import FieldError, ScenarioError, check_unique_names, field_error_of
from simulator.scenario.engines import ENGINE_PRESETS, preset_scheduler
from simulator.scenario.files import parse_yaml_value, read_yaml, require_file
from simulator.scenario.frozen import Frozen
from simulator.scenario.limits import (
    MAX_BLOCK_SIZE,
    MAX_MODEL_LEN,
    MAX_NAME_LENGTH,
    MAX_NUM_REQUESTS,
    MAX_NUM_SEQS,
    MAX_REPLICAS,
    MAX_SESSION_TURNS_DRAWN,
    MAX_SWAP_GIB,
    MAX_TIME_MS,
    MAX_TIME_S,
    MIN_DEVICE_RATE,
    FiniteFloat,
    Integer,
    Name,
    limit_message,
)
from simulator.scenario.models import MODEL_PRESETS, ModelSpec
from simulator.scenario.profiles import Overhead, load_profile


# -- workload ------------------------------------------------------------------------------------
class PoissonArrival(Frozen):
    """Poisson arrivals: exponential gaps with mean ``1 / rate_per_s``."""

    process: Literal["poisson"] = "poisson"
    rate_per_s: FiniteFloat = Field(gt=0)


class GammaArrival(Frozen):
    """Renewal arrivals with gamma gaps: ``cv`` > 1 is burstier than Poisson, < 1 smoother."""

    process: Literal["gamma"] = "gamma"
    rate_per_s: FiniteFloat = Field(gt=0)
    cv: FiniteFloat = Field(ge=0.01, le=100)
    """Coefficient of variation of the inter-arrival gaps (1 = Poisson)."""


class TraceArrival(Frozen):
    """Replay a request trace: arrival instants (and, unless overridden, lengths) from a file."""

    process: Literal["trace"] = "trace"
    path: str
    """The trace file; relative paths resolve against the scenario file."""
    format: str
    """``azure`` (CSV), ``mooncake`` (JSONL), ``requests`` (a request log, CSV or JSONL: timestamp,
    prompt_tokens, output_tokens, optional session_id, prefix_hash + prefix_tokens, tier) or ``openai``
    (JSONL completion responses: created, usage) or ``observation`` (an ``llmplan observe`` file or a ``vllm
    bench serve --save-detailed`` result, docs/calibration.md); see ``simulator.workload.traces.TRACE_FORMATS``."""
    speedup: FiniteFloat = Field(default=1.0, gt=0)
    """Divide every gap by this factor (2 = twice the trace's request rate)."""
    use_trace_lengths: bool = True
    """Take prompt/output lengths from the trace (else from ``prompt_tokens``/``output_tokens``)."""

    @field_validator("format")
    @classmethod
    def _known_format(cls, name: str) -> str:
        # Imported here: loading the scenario package imports no workload module.
        from simulator.workload.traces import TRACE_FORMATS
        if name not in TRACE_FORMATS:
            raise ValueError(f"unknown trace format; known: {', '.join(sorted(TRACE_FORMATS))}")
        return name


class Burst(Frozen):
    """A window in which the arrival rate is multiplied (a launch, a retry storm)."""

    start_s: FiniteFloat = Field(ge=0)
    duration_s: FiniteFloat = Field(gt=0)
    multiplier: FiniteFloat = Field(gt=0)


class DiurnalArrival(Frozen):
    """Non-homogeneous Poisson arrivals following a daily profile, drawn by thinning.

    Either ``peak_to_mean`` (a raised cosine peaking at ``peak_time_s``; at most 2, when the
    trough reaches zero) or ``hourly`` (24 relative rates, one per hour of the period, scaled so
    that their mean is ``mean_rate_per_s``). ``period_s`` compresses the day for quick runs.
    """

    process: Literal["diurnal"] = "diurnal"
    mean_rate_per_s: FiniteFloat = Field(gt=0)
    peak_to_mean: FiniteFloat | None = Field(default=None, ge=1, le=2)
    hourly: list[Annotated[FiniteFloat, Field(ge=0)]] | None = Field(default=None, min_length=24, max_length=24)
    period_s: FiniteFloat = Field(default=86400.0, gt=0)
    peak_time_s: FiniteFloat = Field(default=0.0, ge=0)
    """Instant of the cosine's peak within the period (``peak_to_mean`` profile only)."""
    bursts: list[Burst] = Field(default_factory=list)

    @model_validator(mode="after")
    def _one_profile(self) -> DiurnalArrival:
        if (self.peak_to_mean is None) == (self.hourly is None):
            raise ValueError("give exactly one of peak_to_mean or hourly")
        if self.hourly is not None and not any(self.hourly):
            raise ValueError("hourly needs at least one positive hour")
        return self


class ClosedLoopArrival(Frozen):
    """A benchmark's closed loop (``max-concurrency`` in vLLM's ``benchmark_serving``): ``concurrency``
    clients start at t=0 and each sends its next request when its last one ended, completed or
    dropped (shed, rejected, timed out), after a think time. Requests are sent in request-id order;
    needs ``num_requests`` (``duration_s`` may end the sending earlier)."""

    process: Literal["closed_loop"] = "closed_loop"
    concurrency: Integer = Field(ge=1, le=MAX_NUM_REQUESTS)
    """Clients, each with at most one request outstanding."""
    think_time_s: FiniteFloat = Field(default=0.0, ge=0, le=MAX_TIME_S)
    """Mean pause between an answer's end and the same client's next request (0: at once)."""
    think_time_dist: Literal["fixed", "exponential"] = "fixed"
    """``fixed``: every pause is ``think_time_s``; ``exponential``: pauses drawn with that mean."""


class OfflineArrival(Frozen):
    """Offline batch inference (vLLM's ``benchmark_throughput``): all ``num_requests`` requests
    arrive at t=0; throughput is measured over the makespan."""

    process: Literal["offline"] = "offline"


ArrivalConfig = Annotated[PoissonArrival | GammaArrival | TraceArrival | DiurnalArrival | ClosedLoopArrival
                          | OfflineArrival, Field(discriminator="process")]


class LognormalLength(Frozen):
    """Lognormal token counts with the given mean, truncated to [min, max] by resampling."""

    dist: Literal["lognormal"] = "lognormal"
    mean: FiniteFloat = Field(gt=0, le=MAX_MODEL_LEN)
    sigma: FiniteFloat = Field(gt=0, le=10)
    """Standard deviation of the underlying normal (0.8 is a typical chat prompt spread)."""
    min: Integer = Field(default=1, ge=1, le=MAX_MODEL_LEN)
    max: Integer | None = Field(default=None, ge=1, le=MAX_MODEL_LEN)


class GeometricLength(Frozen):
    """Geometric token counts on 1, 2, ... with the given mean (memoryless output lengths)."""

    dist: Literal["geometric"] = "geometric"
    mean: FiniteFloat = Field(ge=1, le=MAX_MODEL_LEN)
    max: Integer | None = Field(default=None, ge=1, le=MAX_MODEL_LEN)


class FixedLength(Frozen):
    dist: Literal["fixed"] = "fixed"
    value: Integer = Field(ge=1, le=MAX_MODEL_LEN)


class UniformLength(Frozen):
    """Integer uniform on [min, max] inclusive."""

    dist: Literal["uniform"] = "uniform"
    min: Integer = Field(ge=1, le=MAX_MODEL_LEN)
    max: Integer = Field(ge=1, le=MAX_MODEL_LEN)

    @model_validator(mode="after")
    def _order(self) -> UniformLength:
        if self.max < self.min:
            raise FieldError("max", self.max, f"is below min ({self.min})")
        return self


class EmpiricalLength(Frozen):
    """Resample a column of a CSV (for example the ShareGPT length statistics).

    When prompt and output lengths are both empirical from the same file, whole rows are drawn,
    which keeps the correlation between prompt and output lengths.
    """

    dist: Literal["empirical"] = "empirical"
    path: str
    column: str


LengthConfig = Annotated[
    LognormalLength | GeometricLength | FixedLength | UniformLength | EmpiricalLength,
    Field(discriminator="dist"),
]


class PrefixConfig(Frozen):
    """Shared system prompts: a fraction ``share`` of requests (of sessions' first turns) start
    with one of ``num_prefixes`` system prompts of ``prefix_tokens`` tokens (equally likely). The
    prefix is part of the drawn prompt length, not added to it."""

    num_prefixes: Integer = Field(default=1, ge=1, le=MAX_NUM_REQUESTS)
    prefix_tokens: Integer = Field(ge=1, le=MAX_MODEL_LEN)
    share: FiniteFloat = Field(default=1.0, ge=0, le=1)
    short_prompt: Literal["error", "clip"] = "error"
    """A prefixed request whose prompt is not longer than ``prefix_tokens``: stop with an error
    naming it, or clip its prefix to its first ``prompt - 1`` tokens."""


class SessionsConfig(Frozen):
    """Multi-turn conversations and agent tasks: the arrival process gives each session's first turn;
    turn k+1 comes ``turn_gap_s`` after turn k *arrived* (``loop: open``, a chat whose user types on)
    or after turn k's answer *ended* (``loop: closed``: an agent or a user who waits for the answer,
    then thinks or runs tools). Turn k+1's prompt is turn k's prompt + turn k's answer +
    ``followup_tokens`` new tokens (the user's message, or the tools' results)."""

    turns: LengthConfig
    """Turns per session: the calls of an agent task (``{dist: fixed, value: 4}``, geometric, ...;
    an integer means fixed)."""
    turn_gap_s: FiniteFloat = Field(ge=0, le=MAX_TIME_S)
    """Mean gap before each later turn: from the previous turn's arrival (open loop) or from the end
    of its answer (closed loop: the think or tool time). 0 only with ``loop: closed``."""
    turn_gap_dist: Literal["exponential", "fixed"] = "exponential"
    """``exponential``: gaps drawn with mean ``turn_gap_s``; ``fixed``: every gap is ``turn_gap_s``."""
    followup_tokens: LengthConfig | None = None
    """New tokens of each later turn (default: ``workload.prompt_tokens``)."""
    loop: Literal["open", "closed"] = "open"
    """``open``: later turns arrive on a schedule drawn before the run, answered or not; ``closed``:
    each later turn is sent once the previous answer ended, and a turn that is dropped (shed,
    rejected, timed out) ends its session: the task fails and its remaining turns are never sent."""
    parallel_tool_calls: Integer = Field(default=1, ge=1, le=64)
    """Tools run in parallel between two turns: the gap is the slowest of this many draws and the next
    turn carries all their results (this many ``followup_tokens`` draws, summed)."""

    @model_validator(mode="after")
    def _gap_for_open_loop(self) -> SessionsConfig:
        if self.loop == "open" and self.turn_gap_s == 0:
            raise FieldError("turn_gap_s", 0, "must be greater than 0 in an open loop, which spaces the turns' "
                             "arrivals by it (with loop: closed, 0 sends the next turn as the answer ends)")
        return self

    @model_validator(mode="before")
    @classmethod
    def _int_turns(cls, data: Any) -> Any:
        if isinstance(data, dict) and isinstance(data.get("turns"), int) and not isinstance(data["turns"], bool):
            data = {**data, "turns": {"dist": "fixed", "value": data["turns"]}}
        return data


class TierConfig(Frozen):
    """A class of requests (e.g. interactive vs batch) with its share of traffic, its priority and SLO."""

    name: Name = Field(min_length=1)
    share: FiniteFloat = Field(gt=0, le=1)
    """Fraction of requests in this tier (shares sum to 1)."""
    priority: Integer = Field(default=0, ge=-(2**31), le=2**31 - 1)
    """vLLM's request priority: lower is served first under ``scheduling_policy: priority``."""
    slo: SLOConfig | None = None
    """This tier's objectives (default: the scenario's ``slo``)."""


class PromptPopularityConfig(Frozen):
    """Prompts drawn from a fixed set of distinct prompts with Zipf popularity: prompt ``i`` (0 the
    most popular) is asked with probability proportional to ``1 / (i + 1) ** zipf_s``. Requests
    that ask the same prompt have the same prompt length (drawn once per distinct prompt)."""

    distinct_prompts: Integer = Field(ge=1, le=10 * MAX_NUM_REQUESTS)
    """How many different prompts there are."""
    zipf_s: FiniteFloat = Field(default=1.0, ge=0, le=10)
    """Zipf exponent: 0 = all equally popular; about 1 for web-like popularity."""


class WorkloadConfig(Frozen):
    arrival: ArrivalConfig
    prompt_tokens: LengthConfig | None = None
    output_tokens: LengthConfig | None = None
    over_length: Literal["error", "reject", "clip"] = "error"
    """What to do with a request whose prompt + output exceeds ``max_model_len``: stop with an
    error naming it, reject it (counted in ``requests.rejected``), or clip its output length."""
    prefix: PrefixConfig | None = None
    """Shared system prompts (see :class:`PrefixConfig`); only prefix caching makes them matter."""
    sessions: SessionsConfig | None = None
    """Multi-turn sessions (see :class:`SessionsConfig`); not with trace arrivals."""
    tiers: list[TierConfig] | None = None
    """Request tiers, drawn independently per request with the given shares (None: one tier)."""
    prompt_popularity: PromptPopularityConfig | None = None
    """Repeated prompts (see :class:`PromptPopularityConfig`): what an exact response cache and
    request coalescing find identical. None: every prompt is distinct."""

    @model_validator(mode="after")
    def _tiers(self) -> WorkloadConfig:
        if self.tiers is not None:
            check_unique_names(self.tiers, "tiers", "tier")
            total = sum(t.share for t in self.tiers)
            if abs(total - 1.0) > 1e-6:
                raise FieldError("tiers", {t.name: t.share for t in self.tiers},
                                 f"tier shares must sum to 1, got {total:g}")
        return self

    @model_validator(mode="after")
    def _lengths_given(self) -> WorkloadConfig:
        from_trace = isinstance(self.arrival, TraceArrival) and self.arrival.use_trace_lengths
        for name in ("prompt_tokens", "output_tokens"):
            if not from_trace and getattr(self, name) is None:
                raise FieldError(name, None, "required unless a trace supplies the lengths: give a length "
                                 "distribution, e.g. {dist: lognormal, mean: 512, sigma: 0.8}")
        return self

    @model_validator(mode="after")
    def _prefix_not_on_hash_ids(self) -> WorkloadConfig:
        a = self.arrival
        if self.prefix is not None and isinstance(a, TraceArrival) and a.format == "mooncake" and a.use_trace_lengths:
            raise FieldError("prefix", self.prefix.model_dump(), "a mooncake trace's hash_ids already say which "
                             "prompt blocks are shared; drop workload.prefix or set "
                             "workload.arrival.use_trace_lengths: false")
        return self

    @model_validator(mode="after")
    def _sessions_need_synthetic_arrivals(self) -> WorkloadConfig:
        if self.sessions is not None and isinstance(self.arrival, TraceArrival):
            raise FieldError("sessions", self.sessions.model_dump(), "multi-turn sessions need a poisson or gamma "
                             "arrival process (a trace already fixes every request's arrival)")
        return self


# -- serving system -------------------------------------------------------------------------------
class AutoscalerConfig(Frozen):
    """Replicas added and removed during the run (see ``simulator.cluster.autoscaler``)."""

    min_replicas: Integer = Field(default=1, ge=1, le=MAX_REPLICAS)
    max_replicas: Integer = Field(ge=1, le=MAX_REPLICAS)
    initial_replicas: Integer | None = Field(default=None, ge=1, le=MAX_REPLICAS)
    """Active at t = 0 (default ``min_replicas``)."""
    target_outstanding_per_replica: FiniteFloat = Field(gt=0)
    """Desired requests waiting + running per active replica (Knative's concurrency target)."""
    interval_s: FiniteFloat = Field(default=10.0, ge=0.01)
    """How often the autoscaler looks at the load."""
    scale_down_delay_s: FiniteFloat = Field(default=60.0, ge=0)
    """Scale down only to the largest count wanted over this trailing window."""
    load_bandwidth_bytes_per_s: FiniteFloat = Field(default=1.5e9, ge=MIN_DEVICE_RATE)
    """Weights load rate of a cold start (storage/network to GPU); the weights per GPU divide by it."""
    engine_start_s: FiniteFloat = Field(default=20.0, ge=0)
    """Engine start on top of the weights load (process, CUDA graphs, warm-up)."""
    warm_pool: Integer = Field(default=0, ge=0, le=MAX_REPLICAS)
    """Standby replicas with weights loaded: they start in ``warm_start_s``; a used one is
    replaced in the background by a cold start."""
    warm_start_s: FiniteFloat = Field(default=2.0, ge=0)

    @model_validator(mode="after")
    def _bounds(self) -> AutoscalerConfig:
        if self.max_replicas < self.min_replicas:
            raise FieldError("max_replicas", self.max_replicas, f"is below min_replicas ({self.min_replicas})")
        init = self.initial_replicas
        if init is not None and not self.min_replicas <= init <= self.max_replicas:
            raise FieldError("initial_replicas", init, f"is outside [min_replicas, max_replicas] = "
                             f"[{self.min_replicas}, {self.max_replicas}]")
        return self


class AffinityConfig(Frozen):
    """Sticky routing (``session_affinity``, ``prefix_affinity``) and its load guard (see
    ``simulator.cluster.affinity``). The guard follows SGLang's cache-aware router: the sticky replica is
    skipped for the least-outstanding one when its outstanding requests exceed the least loaded
    replica's by more than ``balance_abs_threshold`` *and* by a factor over ``balance_rel_threshold``."""

    balance_abs_threshold: Integer = Field(default=32, ge=0)
    """Outstanding requests (waiting + running) the sticky replica may have beyond the least loaded one."""
    balance_rel_threshold: FiniteFloat = Field(default=1.5, ge=1)
    """... and the factor over the least loaded one's outstanding requests (both must be exceeded)."""
    cache_threshold: FiniteFloat = Field(default=0.3, ge=0, le=1)
    """prefix_affinity: follow the longest prefix match only when it covers more than this fraction
    of the prompt's full blocks (SGLang's ``cache_threshold``); else least outstanding."""


class PoolConfig(Frozen):
    """One model pool of a deployment with several (``deployment.pools``); unset fields take the
    scenario's values (``model``, ``hardware``, ``deployment.*``, ``scheduler.max_num_seqs``)."""

    name: Name = Field(min_length=1)
    model: str | ModelSpec | None = None
    hardware: str | dict[str, Any] | None = None
    replicas: Integer = Field(default=1, ge=1, le=MAX_REPLICAS)
    tensor_parallel_size: Integer | None = Field(default=None, ge=1)
    quantization: str | None = None
    kv_cache_dtype: str | None = None
    max_num_seqs: Integer | None = Field(default=None, ge=1, le=MAX_NUM_SEQS)


class PromptThreshold(Frozen):
    max_prompt_tokens: Integer = Field(ge=1, le=MAX_MODEL_LEN)
    """Requests with at most this many prompt tokens (and more than the previous threshold's) ..."""
    pool: str = Field(min_length=1)
    """... go to this pool."""


class PoolRoutingConfig(Frozen):
    """Which pool a request goes to (``deployment.pool_routing``); within the pool,
    ``deployment.router`` picks the replica."""

    by: Literal["prompt_tokens", "tier"]
    thresholds: list[PromptThreshold] = Field(default_factory=list)
    """by: prompt_tokens: ascending ``max_prompt_tokens``; longer prompts go to ``default``."""
    map: dict[str, str] = Field(default_factory=dict)
    """by: tier: tier name -> pool; unmapped tiers go to ``default``."""
    default: str | None = None


class DeploymentConfig(Frozen):
    replicas: Integer = Field(default=1, ge=1, le=MAX_REPLICAS)
    """Engine replicas behind the router; GPUs = replicas x tensor_parallel_size x pipeline_parallel_size."""
    tensor_parallel_size: Integer = Field(default=1, ge=1)
    pipeline_parallel_size: Integer = Field(default=1, ge=1)
    """Pipeline stages per replica (vLLM ``--pipeline-parallel-size``): the layers are split over
    the stages, each a tensor-parallel group; a step traverses every stage (one batch in flight,
    see ``docs/models.md``)."""
    expert_parallel_size: Integer = Field(default=1, ge=1)
    """GPUs the routed experts of an MoE model are split over, each expert whole on one GPU. As in
    vLLM (``--enable-expert-parallel``: EP = TP x DP), the expert-parallel ranks are the
    tensor-parallel ranks of a stage: 1 or ``tensor_parallel_size`` (attention data parallelism,
    which would make EP larger, is not modelled)."""
    router: str = "round_robin"
    """Request router across replicas (see ``simulator.cluster.router.ROUTERS``)."""
    quantization: str | None = None
    """Weight quantization of the linear layers (vLLM ``--quantization``): none, bf16, fp16, fp8,
    int8, int4, mxfp4 (see ``simulator.scenario.quantization.QUANTIZATIONS``); None serves the model's dtype."""
    kv_cache_dtype: str = "auto"
    """KV-cache element dtype (vLLM ``--kv-cache-dtype``): auto, bf16, fp16, fp8 (fp8_e4m3, fp8_e5m2)."""
    prefill_replicas: Integer | None = Field(default=None, ge=1, le=MAX_REPLICAS)
    decode_replicas: Integer | None = Field(default=None, ge=1, le=MAX_REPLICAS)
    """Pool sizes for ``scheduler.policy: disaggregated`` (GPUs = (prefill + decode) x TP x PP)."""
    kv_transfer_bandwidth_bytes_per_s: FiniteFloat | None = Field(default=None, ge=MIN_DEVICE_RATE)
    """Prefill-to-decode KV link per GPU, one direction (default: the profile's interconnect)."""
    kv_transfer_latency_s: FiniteFloat | None = Field(default=None, ge=0)
    """Fixed cost of one KV transfer (default: the interconnect's latency)."""
    autoscaler: AutoscalerConfig | None = None
    """Scale between ``min_replicas`` and ``max_replicas`` during the run (``replicas`` is then unused)."""
    affinity: AffinityConfig = AffinityConfig()
    """Load guard and match threshold of the affinity routers (``session_affinity``, ``prefix_affinity``)."""
    pools: list[PoolConfig] | None = None
    """Several model pools (model routing, see ``simulator.cluster.pools``); replaces ``replicas``."""
    pool_routing: PoolRoutingConfig | None = None
    """Which pool each request goes to (required with ``pools``)."""

    @property
    def gpus_per_replica(self) -> int:
        """GPUs one replica holds: ``tensor_parallel_size x pipeline_parallel_size`` (expert
        parallelism reuses the tensor-parallel ranks)."""
        return self.tensor_parallel_size * self.pipeline_parallel_size

    @model_validator(mode="after")
    def _expert_ranks(self) -> DeploymentConfig:
        ep, tp = self.expert_parallel_size, self.tensor_parallel_size
        if ep not in (1, tp):
            raise FieldError("expert_parallel_size", ep, f"must be 1 or tensor_parallel_size ({tp}): the experts are "
                             "split over a stage's tensor-parallel ranks, as vLLM's --enable-expert-parallel does "
                             "(a larger EP needs data-parallel attention, which is not modelled)")
        return self


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
    CPU overhead instead of their sum. None: the preset's (``sglang``, ``trtllm``: true, their
    default; ``vllm-v1``, ``vllm-v0.6``: false)."""

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
    def runs_async(self) -> bool:
        """``async_scheduling`` as set, or the preset's default when left out."""
        if self.async_scheduling is not None:
            return self.async_scheduling
        return ENGINE_PRESETS[self.preset].async_scheduling


class RequestClientConfig(Frozen):
    """What the callers ask for and how long they wait (request-level levers, ``simulator.workload.levers``)."""

    stream: bool = True
    """Streamed responses: the client sees the first token when the engine emits it. False: the
    whole response arrives at once, so the client's TTFT is the end-to-end latency."""
    timeout_s: FiniteFloat | None = Field(default=None, gt=0)
    """The client abandons a request this long after it arrived (waiting or running); the engine
    frees its seat and KV blocks at the next step boundary. Counted in ``requests.timed_out``."""
    max_tokens: Integer | None = Field(default=None, ge=1, le=MAX_MODEL_LEN)
    """Cap on output tokens per request (vLLM ``SamplingParams.max_tokens``)."""
    max_prompt_tokens: Integer | None = Field(default=None, ge=1, le=MAX_MODEL_LEN)
    """Trim longer prompts to their last this-many tokens (vLLM ``truncate_prompt_tokens``)."""
    usable_answer_tokens: Integer | None = Field(default=None, ge=1, le=MAX_MODEL_LEN)
    """When the client can use the answer (TTUA, ``ttua_s``): after this many streamed tokens
    (and the post-processing stages); None: the whole answer (and always without streaming)."""


class StageLatencyConfig(Frozen):
    """A stage's service time per request."""

    dist: Literal["fixed", "exponential", "lognormal"] = "fixed"
    mean_ms: FiniteFloat = Field(ge=0, le=3_600_000)
    cv: FiniteFloat = Field(default=1.0, gt=0, le=20)
    """lognormal: coefficient of variation of the service time."""

    @model_validator(mode="before")
    @classmethod
    def _number(cls, data: Any) -> Any:
        return {"mean_ms": data} if isinstance(data, (int, float)) and not isinstance(data, bool) else data


class StageConfig(Frozen):
    """One processing stage outside the engine (tokenization, retrieval, rerank, safety filter,
    detokenization, output filter): a FCFS queue with ``workers`` servers."""

    name: Name = Field(min_length=1, max_length=64)
    latency_ms: StageLatencyConfig
    """Service time per request: a number (fixed, ms) or ``{dist, mean_ms, cv}``."""
    workers: Integer | None = Field(default=None, ge=1, le=1_000_000)
    """Servers of the stage (it queues when they are all busy); None: unlimited (a pure delay)."""


class PipelineConfig(Frozen):
    """Stages before the engine (``pre``: their time is in TTFT) and after it (``post``: in E2E and
    TTUA), each a queue of its own (see ``simulator.cluster.request_path``)."""

    pre: list[StageConfig] = Field(default_factory=list, max_length=16)
    post: list[StageConfig] = Field(default_factory=list, max_length=16)

    @model_validator(mode="after")
    def _names(self) -> PipelineConfig:
        check_unique_names(self.pre, "pre", "stage")
        check_unique_names(self.post, "post", "stage")
        return self


#: The response-cache fields of one kind only: field -> (its kind, why the other kind has no use for it).
_CACHE_KIND_FIELDS = {
    "hit_rate": ("semantic", "finds its hits from repeated prompts (workload.prompt_popularity)"),
    "ttl_s": ("exact", "hits with probability hit_rate and stores no entries to expire"),
    "capacity_entries": ("exact", "hits with probability hit_rate and stores no entries to count"),
}


class ResponseCacheConfig(Frozen):
    """A cache of whole answers in front of the engine: a hit is answered after the lookup without
    reaching the engine; a miss pays the lookup and goes on."""

    kind: Literal["exact", "semantic"]
    """exact: identical prompts (``workload.prompt_popularity``) hit an answer cached by an earlier
    request that completed, within ``ttl_s`` and ``capacity_entries`` (LRU); the hit rate is an
    outcome. semantic: each request hits with probability ``hit_rate`` (an input)."""
    hit_rate: FiniteFloat | None = Field(default=None, ge=0, le=1)
    """semantic: share of requests answered from the cache."""
    lookup_ms: FiniteFloat = Field(default=1.0, ge=0, le=60_000)
    """Time of a lookup, paid by hits and misses."""
    ttl_s: FiniteFloat | None = Field(default=None, gt=0)
    """exact: an entry expires this long after it was stored (None: never)."""
    capacity_entries: Integer | None = Field(default=None, ge=1)
    """exact: most answers held; the least recently used goes first (None: unbounded)."""

    @model_validator(mode="after")
    def _kind_fields(self) -> ResponseCacheConfig:
        if self.kind == "semantic" and self.hit_rate is None:
            raise FieldError("hit_rate", None, "required with kind: semantic (the share of requests answered from "
                             "the cache)")
        for name, (kind, why) in _CACHE_KIND_FIELDS.items():
            value = getattr(self, name)
            if value is not None and self.kind != kind:
                raise FieldError(name, value, f"applies to kind: {kind} only; kind {self.kind} {why}: drop {name}, "
                                 f"or use kind: {kind}")
        return self


class CoalescingConfig(Frozen):
    """Identical prompts (``workload.prompt_popularity``) in flight share one engine request: a
    request whose prompt was sent to the engine at most ``window_ms`` earlier and has not finished
    waits for that answer instead."""

    window_ms: FiniteFloat = Field(gt=0, le=3_600_000)


class AdmissionConfig(Frozen):
    """Load shedding in front of each replica: fast, counted rejection instead of unbounded queues."""

    max_queue_len: Integer | None = Field(default=None, ge=0)
    """Reject an arrival when its replica already has this many requests waiting."""
    max_queue_delay_s: FiniteFloat | None = Field(default=None, gt=0)
    """Reject a request still waiting for its first admission this long after arriving (checked at
    every step boundary, like Triton's queue-policy timeout with REJECT)."""


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


class SLOConfig(Frozen):
    """Latency objectives, judged over every request that arrived in the measurement window:
    a dropped request (shed, rejected, timed out, unfinished) misses every threshold. Each
    ``<metric>_p<N>_ms`` holds that percentile of the metric within the threshold; see
    ``simulator.slo`` for the judge."""

    ttft_p50_ms: FiniteFloat | None = Field(default=None, gt=0)
    """Time to first token (client-perceived when the scenario has a network), p50 threshold;
    ``_p90``, ``_p95``, ``_p99`` likewise."""
    ttft_p90_ms: FiniteFloat | None = Field(default=None, gt=0)
    ttft_p95_ms: FiniteFloat | None = Field(default=None, gt=0)
    ttft_p99_ms: FiniteFloat | None = Field(default=None, gt=0)
    tpot_p50_ms: FiniteFloat | None = Field(default=None, gt=0)
    """Time per output token after the first, p50 threshold;
    ``_p90``, ``_p95``, ``_p99`` likewise."""
    tpot_p90_ms: FiniteFloat | None = Field(default=None, gt=0)
    tpot_p95_ms: FiniteFloat | None = Field(default=None, gt=0)
    tpot_p99_ms: FiniteFloat | None = Field(default=None, gt=0)
    e2e_p50_ms: FiniteFloat | None = Field(default=None, gt=0)
    """End-to-end latency (client-perceived with a network), p50 threshold;
    ``_p90``, ``_p95``, ``_p99`` likewise."""
    e2e_p90_ms: FiniteFloat | None = Field(default=None, gt=0)
    e2e_p95_ms: FiniteFloat | None = Field(default=None, gt=0)
    e2e_p99_ms: FiniteFloat | None = Field(default=None, gt=0)
    queue_delay_p50_ms: FiniteFloat | None = Field(default=None, gt=0)
    """Wait before the first admission to a batch, p50 threshold;
    ``_p90``, ``_p95``, ``_p99`` likewise."""
    queue_delay_p90_ms: FiniteFloat | None = Field(default=None, gt=0)
    queue_delay_p95_ms: FiniteFloat | None = Field(default=None, gt=0)
    queue_delay_p99_ms: FiniteFloat | None = Field(default=None, gt=0)
    ttua_p50_ms: FiniteFloat | None = Field(default=None, gt=0)
    """Time to usable answer (``client.usable_answer_tokens``; client-perceived with a network),
    p50 threshold; ``_p90``, ``_p95``, ``_p99`` likewise."""
    ttua_p90_ms: FiniteFloat | None = Field(default=None, gt=0)
    ttua_p95_ms: FiniteFloat | None = Field(default=None, gt=0)
    ttua_p99_ms: FiniteFloat | None = Field(default=None, gt=0)
    task_ttua_p50_ms: FiniteFloat | None = Field(default=None, gt=0)
    """Time to usable answer of a whole session (an agent task: from its first turn's arrival to the
    usable answer of its last), over the sessions that started in the measurement window, failed
    and unfinished ones as +inf; needs ``workload.sessions``. p50 threshold; ``_p90``, ``_p95``,
    ``_p99`` likewise. Not part of ``attainment``, which counts requests."""
    task_ttua_p90_ms: FiniteFloat | None = Field(default=None, gt=0)
    task_ttua_p95_ms: FiniteFloat | None = Field(default=None, gt=0)
    task_ttua_p99_ms: FiniteFloat | None = Field(default=None, gt=0)
    attainment: FiniteFloat = Field(default=0.0, ge=0, le=1)
    """Least share of the judged requests that complete within every metric's per-request limit
    (the threshold of the highest percentile set for it); 0 = only the percentiles are held."""
    max_drop_fraction: FiniteFloat = Field(default=0.0, ge=0, le=1)
    """Error/timeout budget: the largest share of the judged requests that may be dropped (shed,
    rejected, timed out or unfinished). The default 0 allows none."""


class ClientConfig(Frozen):
    """A client population: its share of the requests and its round-trip time to the servers."""

    name: Name = "clients"
    share: FiniteFloat = Field(default=1.0, gt=0)
    rtt_ms: FiniteFloat = Field(ge=0)


class NetworkConfig(Frozen):
    """Client-side network (see ``simulator.cluster.network``): adds ``client_ttft_s``/``client_e2e_s``,
    which the SLO then judges instead of the server-side TTFT and E2E."""

    clients: list[ClientConfig] = Field(min_length=1)
    setup_round_trips: Integer = Field(default=2, ge=0)
    """Round trips a new connection pays first (TCP 1 + TLS 1.3 1; TLS 1.2 adds one more)."""
    keepalive_reuse: FiniteFloat = Field(default=1.0, ge=0, le=1)
    """Fraction of requests sent on an already open connection (no set-up)."""


class FleetRegionConfig(Frozen):
    name: Name = Field(min_length=1)
    replicas: Integer = Field(ge=1, le=MAX_REPLICAS)


class FleetClientConfig(Frozen):
    """A client population: its share of the requests and its RTT to every region."""

    name: Name = Field(min_length=1)
    share: FiniteFloat = Field(default=1.0, gt=0)
    rtt_ms: dict[str, Annotated[FiniteFloat, Field(ge=0)]]


class OutageConfig(Frozen):
    """A region marked down: no new request is routed to it in ``[start_s, start_s + duration_s)``."""

    region: str
    start_s: FiniteFloat = Field(ge=0)
    duration_s: FiniteFloat = Field(gt=0)


class FleetConfig(Frozen):
    """Several regions in one simulation (see ``simulator.cluster.fleet``): each client goes to its nearest
    healthy region, or spills over to the next nearest when that region's queue is too long."""

    regions: list[FleetRegionConfig] = Field(min_length=1)
    clients: list[FleetClientConfig] = Field(min_length=1)
    spillover_waiting_per_replica: FiniteFloat | None = Field(default=None, gt=0)
    """Send a request to the next nearest healthy region while the nearest has at least this many
    requests waiting per replica (none: never spill over)."""
    outages: list[OutageConfig] = Field(default_factory=list)
    setup_round_trips: Integer = Field(default=2, ge=0)
    keepalive_reuse: FiniteFloat = Field(default=1.0, ge=0, le=1)

    @model_validator(mode="after")
    def _names(self) -> FleetConfig:
        check_unique_names(self.regions, "regions", "region")
        check_unique_names(self.clients, "clients", "client")
        names = [r.name for r in self.regions]
        for i, c in enumerate(self.clients):
            missing = [n for n in names if n not in c.rtt_ms]
            unknown = [k for k in c.rtt_ms if k not in names]
            if missing or unknown:
                wrong = f"missing {', '.join(missing)}" if missing else f"unknown {', '.join(unknown)}"
                raise FieldError(f"clients[{i}].rtt_ms", c.rtt_ms, f"client {c.name!r} needs an RTT to every region "
                                 f"exactly: {wrong}; regions: {', '.join(names)}")
        for i, o in enumerate(self.outages):
            if o.region not in names:
                raise FieldError(f"outages[{i}].region", o.region, f"unknown region; regions: {', '.join(names)}")
        return self


class InlineHardware(Frozen):
    """A hardware profile written inline in the scenario (see ``simulator.scenario.profiles``)."""

    model_config = ConfigDict(extra="allow", frozen=True)
    cost_model: str


class Scenario(Frozen):
    """One serving system under one workload; the input of :func:`simulator.simulate`."""

    name: Name = Field(default="scenario", max_length=MAX_NAME_LENGTH)
    seed: Integer = Field(default=0, ge=0)
    num_requests: Integer | None = Field(default=None, ge=1, le=MAX_NUM_REQUESTS)
    duration_s: FiniteFloat | None = Field(default=None, gt=0, le=MAX_TIME_S)
    """Generate arrivals for this long (instead of ``num_requests``); the run then drains."""
    warmup_s: FiniteFloat = Field(default=0.0, ge=0, le=MAX_TIME_S)
    """Requests arriving before this instant are left out of the statistics."""
    cooldown_s: FiniteFloat = Field(default=0.0, ge=0, le=MAX_TIME_S)
    """Requests arriving within this long of the last arrival are left out of the statistics."""
    max_sim_time_s: FiniteFloat | None = Field(default=None, gt=0, le=MAX_TIME_S)
    """Stop the clock here even if requests are still in flight (they are counted ``in_flight``)."""
    model: str | ModelSpec
    hardware: str | dict[str, Any]
    deployment: DeploymentConfig = DeploymentConfig()
    scheduler: SchedulerConfig = SchedulerConfig()
    workload: WorkloadConfig
    slo: SLOConfig = SLOConfig()
    client: RequestClientConfig = RequestClientConfig()
    admission: AdmissionConfig = AdmissionConfig()
    pipeline: PipelineConfig | None = None
    """Pre- and post-processing stages around the engine (None: none)."""
    response_cache: ResponseCacheConfig | None = None
    """A cache of whole answers in front of the engine (None: none)."""
    coalescing: CoalescingConfig | None = None
    """Identical prompts in flight share one engine request (None: off)."""
    engine: EngineConfig | None = None
    """Engine preset (``vllm-v1``, ``vllm-v0.6``, ``sglang``, ``trtllm``): fills in the scheduler
    fields left out; None: the scheduler fields' own defaults."""
    speculative_config: SpeculativeConfig | None = None
    """Speculative decoding (with the continuous or chunked_prefill policy); None: off."""
    network: NetworkConfig | None = None
    """Client RTTs and connection set-up added to client-perceived TTFT and E2E (none: server-side only)."""
    fleet: FleetConfig | None = None
    """Several regions with geo routing, spillover and outages (replaces ``deployment.replicas``)."""
    base_dir: str = "."
    """Directory relative paths resolve against (the scenario file's folder when loaded)."""

    @model_validator(mode="after")
    def _size(self) -> Scenario:
        is_trace = isinstance(self.workload.arrival, TraceArrival)
        if self.num_requests is None and self.duration_s is None and not is_trace:
            raise FieldError("num_requests", None, "the run needs a length: give num_requests (requests to send) "
                             "or duration_s (seconds of arrivals); neither is set")
        return self

    @model_validator(mode="after")
    def _window(self) -> Scenario:
        """Every request arrives before ``duration_s`` (without sessions, whose later turns may not): when
        ``warmup_s`` and ``cooldown_s`` cover it, the measurement window is sure to be empty."""
        offline = isinstance(self.workload.arrival, OfflineArrival)
        trimmed = self.warmup_s + self.cooldown_s
        if self.duration_s is not None and self.workload.sessions is None and not offline and trimmed > 0 \
                and trimmed >= self.duration_s:
            field, value = ("warmup_s", self.warmup_s) if self.warmup_s else ("cooldown_s", self.cooldown_s)
            raise FieldError(field, value, f"warmup_s + cooldown_s = {trimmed:g} s cover the whole duration_s "
                             f"({self.duration_s:g} s; every request arrives within it): no request is left in the "
                             "measurement window [warmup_s, last arrival - cooldown_s]; lower them or lengthen "
                             "duration_s")
        return self

    @model_validator(mode="after")
    def _task_slo_needs_sessions(self) -> Scenario:
        if self.workload.sessions is None:
            slos = [("slo", self.slo)] + [(f"workload.tiers.{i}.slo", t.slo)
                                          for i, t in enumerate(self.workload.tiers or ())]
            for where, slo in slos:
                for p in (50, 90, 95, 99):
                    value = getattr(slo, f"task_ttua_p{p}_ms") if slo is not None else None
                    if value is not None:
                        raise FieldError(f"{where}.task_ttua_p{p}_ms", value, "judges whole sessions (agent tasks): "
                                         f"give workload.sessions, or use {where}.ttua_p{p}_ms for single requests")
        return self

    @model_validator(mode="after")
    def _prompt_identity(self) -> Scenario:
        arrival = self.workload.arrival
        popularity = self.workload.prompt_popularity
        if popularity is not None and getattr(arrival, "use_trace_lengths", False):
            raise FieldError("workload.prompt_popularity", popularity.model_dump(), "draws prompt lengths per "
                             "distinct prompt, but the trace gives every request's length: set "
                             "workload.arrival.use_trace_lengths: false")
        if popularity is None:
            if self.response_cache is not None and self.response_cache.kind == "exact":
                raise FieldError("response_cache.kind", "exact", "hits repeated prompts: give "
                                 "workload.prompt_popularity (distinct_prompts, zipf_s), or use kind: semantic with "
                                 "a hit_rate")
            if self.coalescing is not None:
                raise FieldError("coalescing", self.coalescing.model_dump(), "merges identical prompts: give "
                                 "workload.prompt_popularity (distinct_prompts, zipf_s)")
        return self

    @model_validator(mode="after")
    def _engine_defaults(self) -> Scenario:
        """Fill the scheduler fields the scenario left out from the engine preset; the fields the
        scenario set stay marked as set, so a later override of ``engine`` re-applies a preset."""
        if self.engine is None:
            return self
        user = self.scheduler.model_fields_set
        try:
            profile = load_profile(self.hardware, base_dir=self.base_dir)
        except ScenarioError:
            profile = None          # resolve() reports the bad hardware reference
        model_len = self.scheduler.max_model_len or (
            self.model.max_model_len if isinstance(self.model, ModelSpec) else _preset_context(self.model))
        preset = preset_scheduler(self.engine.preset, profile, model_len)
        values = {k: v for k, v in preset.items() if k not in user}
        if values:
            merged = SchedulerConfig.model_validate({**self.scheduler.model_dump(include=user), **values})
            object.__setattr__(merged, "__pydantic_fields_set__", set(user))
            self.__dict__["scheduler"] = merged
        return self

    @model_validator(mode="after")
    def _budget_for_context(self) -> Scenario:
        """Without an engine preset, a policy that never splits a prompt gets a step budget that
        holds the longest prompt when the scenario leaves ``max_num_batched_tokens`` out: the larger
        of the field's default (8,192) and ``max_model_len`` (vLLM's rule without chunked prefill),
        so that changing the model never needs a second edit. The field stays marked as not set."""
        user = self.scheduler.model_fields_set
        if self.engine is not None or "max_num_batched_tokens" in user:
            return self
        from simulator.engine.policies import POLICIES  # the policies import this module
        policy = POLICIES.get(self.scheduler.policy)
        if policy is None or not policy.uses_token_budget or policy.splits_prompts:
            return self                                  # resolve() reports an unknown policy
        model_len = self.scheduler.max_model_len or (
            self.model.max_model_len if isinstance(self.model, ModelSpec) else _preset_context(self.model))
        budget = max(self.scheduler.max_num_batched_tokens, model_len or 0)
        if budget != self.scheduler.max_num_batched_tokens:
            merged = self.scheduler.model_copy(update={"max_num_batched_tokens": budget})
            object.__setattr__(merged, "__pydantic_fields_set__", set(user))
            self.__dict__["scheduler"] = merged
        return self

    def resolve_path(self, path: str) -> Path:
        p = Path(path).expanduser()
        if p.is_absolute():
            return p
        here = Path(self.base_dir) / p
        return here if here.exists() or not p.exists() else p

    def with_overrides(self, overrides: dict[str, Any]) -> Scenario:
        """A new validated scenario with dotted-path overrides applied (``{"seed": 3}``)."""
        data = self.model_dump(mode="python", exclude_none=True)
        # Only the scheduler fields the scenario set: an engine preset (perhaps a new one) fills the rest.
        data["scheduler"] = self.scheduler.model_dump(mode="python", include=self.scheduler.model_fields_set)
        for key, value in overrides.items():
            _set_dotted(data, key, value)
        return scenario_from_dict(data)


# -- loading and errors ---------------------------------------------------------------------------
def scenario_from_dict(data: dict[str, Any], base_dir: str | Path | None = None) -> Scenario:
    """Validate a plain dict (from YAML, the UI or Python) into a :class:`Scenario`.

    Raises:
        ScenarioError: naming the first bad field, its value and what is allowed.
    """
    if not isinstance(data, dict):
        raise ScenarioError("scenario", data, "must be a mapping of fields (YAML key: value)")
    data = dict(data)
    if base_dir is not None:
        base_dir = check_path("base_dir", base_dir, "a folder path")
        data.setdefault("base_dir", str(base_dir))
    try:
        scenario = Scenario.model_validate(data)
    except ValidationError as exc:
        raise _to_scenario_error(exc, data) from None
    check_run_size(scenario)
    return scenario


def check_run_size(scenario: Scenario) -> None:
    """Refuse a run whose arrivals would not fit the limits of :mod:`simulator.scenario.limits`: more
    than ``MAX_NUM_REQUESTS`` requests (turns of sessions included), or arrivals spread over more than
    ``MAX_TIME_S``. Trace arrivals are checked when the trace is read.

    Raises:
        ScenarioError: naming the rate, ``duration_s``, the think time or the session turns.
    """
    arrival, first = scenario.workload.arrival, scenario.num_requests
    if isinstance(arrival, (PoissonArrival, GammaArrival, DiurnalArrival)):
        first = _check_rate(scenario, arrival)
    elif isinstance(arrival, ClosedLoopArrival) and first is not None:
        # Each client sends one request per think time at least: the sending spans about this long.
        span = first / arrival.concurrency * arrival.think_time_s
        if span > MAX_TIME_S:
            raise ScenarioError("workload.arrival.think_time_s", arrival.think_time_s,
                                f"{first:,} requests from {arrival.concurrency:,} clients pausing this long span "
                                f"about {span:.3g} s; the longest simulated span is {MAX_TIME_S:.0e} s")
    sessions = scenario.workload.sessions
    if sessions is not None and first is not None:
        turns = _mean_of(sessions.turns)
        if first * turns > MAX_SESSION_TURNS_DRAWN:
            raise ScenarioError("workload.sessions.turns", sessions.turns.model_dump(exclude_none=True),
                                f"{first:,} sessions of about {turns:,.3g} turns each would draw "
                                f"{first * turns:,.0f} turns; at most {MAX_SESSION_TURNS_DRAWN:,}: fewer turns "
                                "per session or fewer requests")


def _check_rate(scenario: Scenario, arrival: PoissonArrival | GammaArrival | DiurnalArrival) -> int:
    """The first turns a renewal or diurnal process draws (``num_requests``, or the expected count over
    ``duration_s``), refusing a span over ``MAX_TIME_S`` or a count over ``MAX_NUM_REQUESTS``."""
    if isinstance(arrival, DiurnalArrival):
        name, rate = "mean_rate_per_s", arrival.mean_rate_per_s
        peak = max(arrival.hourly) * 24 / sum(arrival.hourly) if arrival.hourly else arrival.peak_to_mean or 1.0
        window = scenario.duration_s or MAX_TIME_S
        # Bursts add arrivals on top of the daily profile (at most its peak times the multiplier).
        extra = sum((b.multiplier - 1) * peak * min(b.duration_s, window) for b in arrival.bursts if b.multiplier > 1)
        per_s = rate * (1 + extra / window)
    else:
        name, rate, per_s = "rate_per_s", arrival.rate_per_s, arrival.rate_per_s
    if scenario.num_requests is not None:
        check_span(scenario.num_requests, rate, f"workload.arrival.{name}", rate,
                   f"{scenario.num_requests:,} requests at this rate", "raise the rate or lower num_requests")
        return scenario.num_requests
    assert scenario.duration_s is not None   # the model requires one of the two
    expected = per_s * scenario.duration_s
    if expected > MAX_NUM_REQUESTS:
        raise ScenarioError("duration_s", scenario.duration_s,
                            f"about {expected:,.0f} requests arrive in it at {name}={rate:g}; a run holds at most "
                            f"{MAX_NUM_REQUESTS:,}: shorten duration_s, lower the rate or give num_requests")
    return int(expected)


def check_span(count: int, rate: float, field: str, value: Any, what: str, advice: str) -> None:
    """Refuse ``count`` arrivals at ``rate`` per second: they would spread over more than ``MAX_TIME_S``.

    Raises:
        ScenarioError: naming ``field`` and ``value``; ``what`` arrive over the span, ``advice`` ends it.
    """
    span = count / rate
    if span > MAX_TIME_S:
        raise ScenarioError(field, value, f"{what} arrive over about {span:.3g} s; the longest simulated span is "
                                          f"{MAX_TIME_S:.0e} s (about 3 years): {advice}")


def _mean_of(dist: Any) -> float:
    """A length distribution's mean before truncation (an upper bound with it); 1 for an empirical file."""
    if isinstance(dist, FixedLength):
        return float(dist.value)
    if isinstance(dist, UniformLength):
        return (dist.min + dist.max) / 2
    if isinstance(dist, (LognormalLength, GeometricLength)):
        return dist.mean if dist.max is None else min(dist.mean, dist.max)
    return 1.0


def load_scenario(path: str | Path, overrides: list[str] | dict[str, Any] | None = None) -> Scenario:
    """Read a YAML scenario file, apply overrides (a list of ``"key.path=value"`` strings, as ``--set``
    takes, or a dict ``{"key.path": value}``) and validate it.

    Raises:
        ScenarioError: a bad argument, an unreadable file, or the first bad field.
    """
    p = check_path("path", path, "a scenario file path")
    check_overrides("overrides", overrides)
    require_file(p, "scenario", str(path), "scenario file", missing="file not found")
    data = read_yaml(p, str(path), what="a scenario file")
    if not isinstance(data, dict):
        raise ScenarioError(str(path), data, "a scenario file must be a YAML mapping")
    for key, value in parse_overrides(overrides).items():
        _set_dotted(data, key, value)
    return scenario_from_dict(data, base_dir=p.resolve().parent)


def parse_overrides(overrides: list[str] | dict[str, Any] | None) -> dict[str, Any]:
    """Turn ``["a.b=1", "c=x"]`` into ``{"a.b": 1, "c": "x"}``; values are parsed as YAML."""
    if overrides is None:
        return {}
    if isinstance(overrides, dict):
        return dict(overrides)
    out: dict[str, Any] = {}
    for item in overrides:
        key, sep, raw = item.partition("=")
        if not sep:
            raise ScenarioError("--set", item, "expected key.path=value, e.g. workload.arrival.rate_per_s=12")
        key = key.strip()
        _key_path(key, "--set", item)
        out[key] = parse_yaml_value(raw, f"--set {key}") if raw.strip() else None
    return out


def _key_path(key: str, field: str, value: Any) -> list[str]:
    """The field names of a dotted override key, refusing an empty key or an empty name in it (``.``,
    ``a..b``, ``a.``), which would set a field named ``''``."""
    parts = key.split(".")
    if not all(part.strip() for part in parts):
        what = "is empty" if not key.strip() else "has an empty name (a dot at either end, or two dots in a row)"
        raise ScenarioError(field, value, f"the key path {key!r} {what}; give field names joined by dots, "
                            "e.g. workload.arrival.rate_per_s=12")
    return parts


def _preset_context(name: str) -> int | None:
    spec = MODEL_PRESETS.get(name)
    return spec.max_model_len if spec is not None else None


def _set_dotted(data: dict[str, Any], key: str, value: Any) -> None:
    parts = _key_path(key, key or "key path", value)
    node = data
    for i, part in enumerate(parts[:-1]):
        child = node.get(part)
        if isinstance(child, str) and part in ("model", "hardware"):
            raise ScenarioError(key, value, f"{'.'.join(parts[:i + 1])} is the preset name {child!r}; "
                                "replace it with an inline mapping to set its fields")
        if not isinstance(child, dict):
            child = {}
            node[part] = child
        node = child
    node[parts[-1]] = value


_UNION_TAGS = {"poisson", "gamma", "trace", "diurnal", "lognormal", "geometric", "fixed", "uniform", "empirical",
               "closed_loop", "offline", "str", "ModelSpec", "dict[str,any]", "function-after[_order(), UniformLength]"}


def _to_scenario_error(exc: ValidationError, data: dict[str, Any]) -> ScenarioError:
    errors = exc.errors(include_url=False)
    # For "str | ModelSpec" unions pydantic reports every branch; prefer the structured one.
    errors.sort(key=lambda e: (e["loc"][-1:] == ("str",), len(e["loc"])), reverse=False)
    err = errors[0]
    loc = [str(p) for p in err["loc"] if not _is_tag(p)]
    field = ".".join(loc) or "scenario"
    value = err.get("input")
    msg = err["msg"]
    named = field_error_of(err)
    if named is not None:    # a check across fields named the one at fault, relative to its model
        return ScenarioError(".".join([*loc, named.field]), named.value, named.message)
    if err["type"] == "extra_forbidden":
        parent_model = _model_at(loc[:-1])
        allowed = sorted(parent_model.model_fields) if parent_model else []
        hint = difflib.get_close_matches(loc[-1], allowed, n=1)
        msg = "unknown field" + (f" (did you mean {hint[0]!r}?)" if hint else "")
        if allowed:
            msg += f"; allowed: {', '.join(a for a in allowed if a != 'base_dir')}"
    elif err["type"] == "missing":
        value = None
        msg = "required field is missing"
    elif err["type"] == "union_tag_invalid":
        ctx = err.get("ctx", {})
        value = ctx.get("tag", value)
        msg = f"unknown kind; allowed: {ctx.get('expected_tags', '')}"
    elif limit_message(err, Scenario):
        msg = str(limit_message(err, Scenario))
    elif err["type"] == "value_error":
        msg = msg.removeprefix("Value error, ")
    return ScenarioError(field, value, msg)


def _is_tag(part: Any) -> bool:
    return isinstance(part, str) and (part in _UNION_TAGS or part.startswith("function-"))


def _model_at(loc: list[str]) -> type[BaseModel] | None:
    """The pydantic model class found by walking field names from :class:`Scenario`."""
    model: Any = Scenario
    for part in loc:
        field = model.model_fields.get(part) if isinstance(model, type) and issubclass(model, BaseModel) else None
        if field is None:
            return None
        ann = field.annotation
        candidates = [a for a in _flatten(ann) if isinstance(a, type) and issubclass(a, BaseModel)]
        if not candidates:
            return None
        model = candidates[0]
        if len(candidates) > 1:  # discriminated unions: cannot tell which branch; list none
            return None
    return model if isinstance(model, type) and issubclass(model, BaseModel) else None


def _flatten(ann: Any) -> list[Any]:
    origin = typing.get_origin(ann)
    if origin is Annotated:
        return _flatten(typing.get_args(ann)[0])
    if origin is Union or origin is types.UnionType:   # Optional[X] and X | None
        out: list[Any] = []
        for a in typing.get_args(ann):
            out.extend(_flatten(a))
        return out
    return [ann]
