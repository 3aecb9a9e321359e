"""The scenario's ``deployment`` and ``fleet`` sections: how many replicas serve, on how many GPUs each,
how requests are routed among them and among model pools, how the count changes during the run, and
the regions of a fleet.

Only the description lives here; :mod:`simulator.cluster` builds the routers, pools, autoscaler and
regions from it.
"""
from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import Field, model_validator

from simulator.errors import FieldError, check_unique_names
from simulator.scenario.frozen import Frozen
from simulator.scenario.limits import (
    MAX_MODEL_LEN,
    MAX_NUM_SEQS,
    MAX_REPLICAS,
    MIN_DEVICE_RATE,
    FiniteFloat,
    Integer,
    Name,
)
from simulator.scenario.models import ModelSpec


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
    """Engine replicas behind the router; GPUs = replicas x tensor_parallel_size x pipeline_parallel_size
    x data_parallel_size."""
    tensor_parallel_size: Integer = Field(default=1, ge=1)
    pipeline_parallel_size: Integer = Field(default=1, ge=1)
    """Pipeline stages per replica (vLLM ``--pipeline-parallel-size``): the layers are split over
    the stages, each a tensor-parallel group; up to this many batches are in flight, each traversing
    every stage (see ``docs/models.md``)."""
    expert_parallel_size: Integer = Field(default=1, ge=1)
    """GPUs the routed experts of an MoE model are split over, each expert whole on one GPU. As in
    vLLM (``--enable-expert-parallel``: EP = TP x DP), the expert-parallel ranks are every GPU of a
    stage: 1 or ``tensor_parallel_size x data_parallel_size``. With 1 each GPU holds a slice of every
    expert's width: ``1/tensor_parallel_size``, or ``1/(TP x DP)`` with attention data parallelism."""
    data_parallel_size: Integer = Field(default=1, ge=1)
    """Attention data-parallel ranks per replica (vLLM ``--data-parallel-size``, SGLang
    ``--enable-dp-attention``; with expert parallelism "DEP"), MoE models only: each rank is a
    ``tensor_parallel_size`` group with its own scheduler, batch (``max_num_seqs``) and KV cache that
    runs attention and the dense layers; the routed experts are split over all ``TP x DP`` GPUs,
    whole (``expert_parallel_size`` ``TP x DP``) or by width (``expert_parallel_size`` 1). Requests
    go to the rank with the fewest outstanding; the ranks step in lockstep, so one rank's prefill
    holds up the others' decodes. See docs/models.md, "Attention data parallelism (DEP)", for what is
    modelled."""
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
        """GPUs one replica holds: ``tensor_parallel_size x pipeline_parallel_size x
        data_parallel_size`` (expert parallelism reuses those GPUs)."""
        return self.tensor_parallel_size * self.pipeline_parallel_size * self.data_parallel_size

    @model_validator(mode="after")
    def _expert_ranks(self) -> DeploymentConfig:
        ep, tp, dp = self.expert_parallel_size, self.tensor_parallel_size, self.data_parallel_size
        if dp > 1:
            if ep not in (1, tp * dp):
                raise FieldError("expert_parallel_size", ep, f"must be 1 or tensor_parallel_size x data_parallel_size "
                                 f"({tp} x {dp} = {tp * dp}) with data_parallel_size {dp}: with attention data "
                                 "parallelism the experts are split over every GPU of the replica, whole experts "
                                 "(vLLM's --enable-expert-parallel) or every expert's width (1: vLLM's default, "
                                 "SGLang's --enable-dp-attention)")
        elif ep not in (1, tp):
            raise FieldError("expert_parallel_size", ep, f"must be 1 or tensor_parallel_size ({tp}): the experts are "
                             "split over a stage's tensor-parallel ranks, as vLLM's --enable-expert-parallel does; "
                             "a larger EP needs attention data parallelism: data_parallel_size = "
                             "expert_parallel_size / tensor_parallel_size")
        return self



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
