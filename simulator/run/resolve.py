"""Resolving a scenario: model, hardware profile, KV-cache plan, precision, and the seeded random streams."""
from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass
from typing import Any

import numpy as np

from simulator.arguments import check_instance
from simulator.capabilities import check_capabilities
from simulator.cluster.routing import ROUTERS
from simulator.cost.cuda_graph import CudaGraphPadding
from simulator.engine.data_parallel import RANK_CHOICES
from simulator.engine.kv_cache import KVCachePlan, plan_kv_cache
from simulator.engine.policies import POLICIES  # the registry, with every policy registered
from simulator.errors import ScenarioError
from simulator.scenario.config import Scenario
from simulator.scenario.engines import ENGINE_PRESETS, resolve_cuda_graph
from simulator.scenario.models import MODEL_PRESETS, ModelSpec
from simulator.scenario.parallel import Parallelism, check_parallelism
from simulator.scenario.profiles import HardwareProfile, load_profile
from simulator.scenario.quantization import Precision, check_kv_head_split, resolve_precision

STREAMS = ("arrivals", "prompt", "output", "routing", "speculative", "tier", "prefix", "sessions", "network",
           "think", "pipeline", "popularity")
"""Appending a stream leaves the earlier streams' numbers unchanged (SeedSequence spawn keys)."""


# -- resolving a scenario ------------------------------------------------------------------------
@dataclass(frozen=True)
class ResolvedSystem:
    """A scenario's references made concrete: model dimensions, hardware, memory plan."""

    model: ModelSpec
    profile: HardwareProfile
    kv_plan: KVCachePlan
    max_model_len: int
    draft_model: ModelSpec | None = None
    precision: Precision | None = None
    """Weight quantization and KV-cache dtype as served (``deployment.quantization``, ``kv_cache_dtype``)."""
    pools: tuple = ()
    """With ``deployment.pools``: ``(pool scenario, ResolvedSystem)`` per pool; the fields above are
    the first pool's, except ``max_model_len`` (the smallest of the pools')."""
    cuda_graph: CudaGraphPadding | None = None
    """The engine's CUDA-graph padding (``engine.cuda_graph`` over the preset's capture); None: no
    step is padded (no ``engine:``, eager, or an engine that pads nothing by default)."""

    @property
    def frontend_s(self) -> float:
        """The front end's time per request (:mod:`simulator.cluster.frontend`): the overhead's
        ``frontend_s``, which :func:`resolve` filled from the engine preset where neither the
        profile nor ``engine.overhead`` gives one; 0 where none does."""
        return self.profile.overhead.frontend_s or 0.0

    def num_gpu_blocks_of(self, replica: np.ndarray) -> Any:
        """The KV-cache size (blocks) of each replica in ``replica`` (replica indices): with
        ``deployment.pools`` each its own pool's; otherwise the one plan's, as a scalar."""
        if not self.pools:
            return self.kv_plan.num_gpu_blocks
        return np.repeat([s.kv_plan.num_gpu_blocks for _, s in self.pools],
                         [sub.deployment.replicas for sub, _ in self.pools])[replica.astype(np.int64)]


def resolve_model(ref: str | ModelSpec) -> ModelSpec:
    if isinstance(ref, ModelSpec):
        return ref
    spec = MODEL_PRESETS.get(ref)
    if spec is None:
        raise ScenarioError("model", ref, f"unknown model preset; known: {', '.join(sorted(MODEL_PRESETS))} "
                            "(or give an inline spec with num_layers, hidden_size, ...)")
    return spec


def check_scenario(scenario: Any) -> Scenario:
    """``scenario`` if it is a :class:`Scenario`; a ScenarioError naming the argument otherwise (a path or
    a dict given where a validated scenario belongs)."""
    return check_instance("scenario", scenario, Scenario, "read one with load_scenario(path) or "
                          "scenario_from_dict(mapping)")
def model_option(ref: str | ModelSpec, option: str = "--model") -> ModelSpec:
    """A command's model option: a preset name, or a YAML/JSON file holding an inline spec, as a
    scenario's ``model:`` takes it (the mapping itself, or a scenario file whose ``model:`` is one).

    Raises:
        ScenarioError: neither a preset nor a readable file with a valid spec (field named).
    """
    from pathlib import Path

    from pydantic import ValidationError

    from simulator.errors import field_error_of
    from simulator.scenario.files import read_yaml

    if isinstance(ref, ModelSpec):
        return ref
    if ref in MODEL_PRESETS or not Path(ref).is_file():
        if ref not in MODEL_PRESETS:
            raise ScenarioError(option, ref, "unknown model preset and no such model file; known presets: "
                                f"{', '.join(sorted(MODEL_PRESETS))} (or give a YAML file with num_layers, "
                                "hidden_size, ...)")
        return MODEL_PRESETS[ref]
    data = read_yaml(ref, f"{option} {ref}", what="a model file")
    if isinstance(data, dict) and isinstance(data.get("model"), (dict, str)) and "num_layers" not in data:
        data = data["model"]           # a scenario file: its model
        if isinstance(data, str):
            return model_option(data, option)
    if not isinstance(data, dict):
        raise ScenarioError(option, ref, "a model file must hold a mapping (name, num_layers, hidden_size, ...)")
    try:
        return ModelSpec.model_validate(data)
    except ValidationError as exc:
        err = exc.errors(include_url=False)[0]
        named = field_error_of(err)
        if named is not None:
            raise ScenarioError(f"{option} {ref}: {named.field}", named.value, named.message) from None
        loc = ".".join(str(p) for p in err["loc"])
        value = err.get("input") if err["type"] != "missing" else None
        msg = err["msg"].removeprefix("Value error, ")
        if err["type"] == "extra_forbidden":
            msg = f"unknown field; allowed: {', '.join(ModelSpec.model_fields)}"
        raise ScenarioError(f"{option} {ref}: {loc}", value, msg) from None


def resolve(scenario: Scenario) -> ResolvedSystem:
    """Resolve presets and profiles and size the KV cache; raises :class:`ScenarioError`.

    The scenario's combination of features is checked first, once, against the capability table
    (:func:`simulator.capabilities.check_capabilities`)."""
    check_scenario(scenario)
    POLICIES.lookup(scenario.scheduler.policy)
    check_capabilities(scenario)
    if scenario.deployment.pools is not None or scenario.deployment.pool_routing is not None:
        from simulator.cluster.pools import resolve_pools  # model routing: one resolved system per pool
        pools = resolve_pools(scenario, _resolve_system)
        first = pools[0][1]
        return dataclasses.replace(first, max_model_len=min(s.max_model_len for _, s in pools), pools=tuple(pools))
    return _resolve_system(scenario)


def _resolve_system(scenario: Scenario) -> ResolvedSystem:
    """One served system (the scenario's, or one pool's): model, profile, precision, KV plan."""
    model = resolve_model(scenario.model)
    profile = _engine_overhead(scenario, load_profile(scenario.hardware, base_dir=scenario.base_dir))
    sch, dep = scenario.scheduler, scenario.deployment
    ROUTERS.lookup(dep.router)
    if scenario.engine is not None and scenario.engine.data_parallel_routing is not None:
        RANK_CHOICES.lookup(scenario.engine.data_parallel_routing)
    max_model_len = sch.max_model_len or model.max_model_len
    if sch.max_model_len and sch.max_model_len > model.max_model_len:
        raise ScenarioError("scheduler.max_model_len", sch.max_model_len,
                            f"exceeds {model.name}'s context length {model.max_model_len}")
    policy = POLICIES[sch.policy]
    spec = scenario.speculative_config
    if sch.policy == "disaggregated":
        _check_disaggregated(dep, profile)
    if sch.preemption_mode == "swap" and profile.host_link_bandwidth_bytes_per_s is None:
        raise ScenarioError("hardware.host_link_bandwidth_bytes_per_s", None,
                            f"profile {profile.name!r} has no device-host bandwidth, which "
                            "preemption_mode: swap needs (PCIe Gen5 x16: about 5.5e10)")
    if sch.max_num_batched_tokens < max_model_len and policy.uses_token_budget and not policy.splits_prompts:
        raise ScenarioError(
            "scheduler.max_num_batched_tokens", sch.max_num_batched_tokens,
            f"must be >= max_model_len={max_model_len} for policy {sch.policy!r}, which never splits a prompt "
            "(as vLLM requires without chunked prefill); lower scheduler.max_model_len or raise the budget")
    if model.num_attention_heads % dep.tensor_parallel_size:
        raise ScenarioError("deployment.tensor_parallel_size", dep.tensor_parallel_size,
                            f"must divide num_attention_heads={model.num_attention_heads}")
    check_kv_head_split(model, dep.tensor_parallel_size)
    check_parallelism(model, profile, Parallelism.of(dep))
    precision = resolve_precision(model, profile, dep.quantization, dep.kv_cache_dtype)
    plan = plan_kv_cache(model, profile, tensor_parallel_size=dep.tensor_parallel_size,
                         block_size=sch.block_size, gpu_memory_utilization=sch.gpu_memory_utilization,
                         max_num_batched_tokens=sch.max_num_batched_tokens, max_num_seqs=sch.max_num_seqs,
                         max_model_len=max_model_len, num_gpu_blocks_override=sch.num_gpu_blocks_override,
                         precision=precision, pipeline_parallel_size=dep.pipeline_parallel_size,
                         data_parallel_size=dep.data_parallel_size)
    draft = None
    if spec is not None and spec.method == "draft":
        assert spec.draft_model is not None   # the config requires it for method draft
        draft = _resolve_field_model(spec.draft_model, "speculative_config.draft_model")
        plan = _plan_with_draft(plan, model, draft, dep.tensor_parallel_size, max_model_len, sch.block_size,
                                sch.num_gpu_blocks_override)
    cuda_graph = None
    if scenario.engine is not None:
        cuda_graph = resolve_cuda_graph(scenario.engine.preset, scenario.engine.cuda_graph, profile, sch,
                                        dep.tensor_parallel_size)
    return ResolvedSystem(model, profile, plan, max_model_len, draft, precision, cuda_graph=cuda_graph)


def _engine_overhead(scenario: Scenario, profile: HardwareProfile) -> HardwareProfile:
    """The profile with the engine's CPU overhead: ``engine.overhead`` when given (the engine's,
    not the GPU's), under multi-step scheduling the per-step part paid once per run of
    ``num_scheduler_steps`` steps (spread over the steps), overlapped with the GPU work under
    ``engine.async_scheduling`` (or the preset's overlap scheduler: ``sglang``, ``trtllm``); its
    front end the engine preset's measured one where the overhead gives none."""
    overhead = profile.overhead
    if scenario.engine is not None and scenario.engine.overhead is not None:
        overhead = scenario.engine.overhead
    if overhead.frontend_s is None and scenario.engine is not None:
        preset_frontend_s = ENGINE_PRESETS[scenario.engine.preset].frontend_s
        if preset_frontend_s is not None:
            overhead = overhead.model_copy(update={"frontend_s": preset_frontend_s})
    steps = scenario.scheduler.num_scheduler_steps
    if steps > 1:
        overhead = overhead.model_copy(update={"step_s": overhead.step_s / steps})
    if scenario.engine is not None and scenario.engine.runs_async:
        overhead = overhead.model_copy(update={"async_scheduling": True})
    return profile if overhead is profile.overhead else profile.model_copy(update={"overhead": overhead})


def _check_disaggregated(dep: Any, profile: HardwareProfile) -> None:
    for name in ("prefill_replicas", "decode_replicas"):
        if getattr(dep, name) is None:
            raise ScenarioError(f"deployment.{name}", None, "scheduler.policy: disaggregated needs both pool sizes "
                                "(deployment.prefill_replicas and deployment.decode_replicas)")
    total = dep.prefill_replicas + dep.decode_replicas
    if dep.replicas not in (1, total):
        raise ScenarioError("deployment.replicas", dep.replicas,
                            f"with disaggregated pools the replica count is prefill_replicas + decode_replicas = "
                            f"{total}; leave deployment.replicas out")
    if dep.kv_transfer_bandwidth_bytes_per_s is None and profile.interconnect is None:
        raise ScenarioError("deployment.kv_transfer_bandwidth_bytes_per_s", None,
                            f"profile {profile.name!r} has no interconnect to send KV from prefill to decode "
                            "replicas over; give the link's bandwidth")


def _resolve_field_model(ref: str | ModelSpec, field_name: str) -> ModelSpec:
    try:
        return resolve_model(ref)
    except ScenarioError as e:
        raise ScenarioError(field_name, ref, e.message) from None


def _plan_with_draft(plan: KVCachePlan, model: ModelSpec, draft: ModelSpec, tp: int, max_model_len: int,
                     block_size: int, num_gpu_blocks_override: int | None = None) -> KVCachePlan:
    """The target's KV plan once a draft model shares the GPU: its weights come off the budget and
    every cached token also holds the draft's KV. ``scheduler.num_gpu_blocks_override`` still sets
    the block count (as in vLLM, and as :func:`plan_kv_cache` already checked it against
    ``max_model_len``); the draft's weights and KV are accounted for all the same."""
    draft_weights = draft.weight_bytes() / tp
    draft_kv_per_block = block_size * draft.kv_bytes_per_token() / max(1, min(tp, draft.num_key_value_heads))
    per_block = plan.kv_bytes_per_block + draft_kv_per_block
    if num_gpu_blocks_override is not None:
        blocks = num_gpu_blocks_override
    elif math.isinf(plan.usable_bytes):   # a memory-less profile (constant cost model): sized by plan_kv_cache
        blocks = plan.num_gpu_blocks
    else:
        free = plan.usable_bytes - plan.weights_bytes - draft_weights - plan.activation_bytes
        blocks = int(free // per_block) if free > 0 else 0
        if blocks * block_size < max_model_len:
            raise ScenarioError("speculative_config.draft_model", draft.name,
                                f"with the draft's {draft_weights / 2**30:.1f} GiB of weights the KV cache holds "
                                f"{blocks * block_size} tokens, less than max_model_len={max_model_len}")
    return dataclasses.replace(plan, num_gpu_blocks=blocks, weights_bytes=plan.weights_bytes + draft_weights,
                               kv_bytes_per_block=per_block)


def spawn_rngs(seed: int) -> dict[str, np.random.Generator]:
    """Independent generators for each random stream, from one root seed."""
    children = np.random.SeedSequence(seed).spawn(len(STREAMS))
    return {name: np.random.default_rng(child) for name, child in zip(STREAMS, children, strict=True)}


