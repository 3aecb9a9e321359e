"""Paged KV-cache memory: how many blocks a replica has, and who holds them.

Like vLLM's ``KVCacheManager``, the cache is a pool of fixed-size blocks of ``block_size`` token
slots. A request holds ``ceil(slots / block_size)`` blocks for the tokens whose keys and values
are cached; the scheduler asks for blocks before a step and returns them when a request finishes
or is preempted. Blocks are counted, not named, here;
:class:`~simulator.engine.prefix_cache.PrefixCachingKVManager` adds block identities with vLLM's
ref-count and LRU semantics behind the same interface.

Sizing (per GPU of a tensor-parallel group; the formula the README documents)::

    usable_bytes   = memory_bytes x gpu_memory_utilization
    weights_bytes  = (linear_params x quantized_bytes + other_params x 16-bit bytes) / tp
    activation_bytes = non_torch_memory_bytes
                     + max_num_batched_tokens x (4 hidden + 2 intermediate / tp) x act_bytes
                     + max_num_seqs x vocab / tp x 4          (fp32 logits)
    kv_bytes_per_block = block_size x 2 x num_layers x max(1, kv_heads / tp) x head_dim x kv_bytes
    (weight and KV bytes from deployment.quantization / kv_cache_dtype; simulator.scenario.quantization)
    num_gpu_blocks = floor((usable_bytes - weights_bytes - activation_bytes) / kv_bytes_per_block)

Beyond a dense model on one tensor-parallel group (:func:`_extended_sizes`, ``docs/models.md``):
a pipeline stage holds ``ceil(num_layers / PP)`` layers' weights and KV (the heaviest stage, with the
embedding or the LM head, binds); MLA caches ``kv_lora_rank + qk_rope_head_dim`` elements per token
per layer, whole on every tensor-parallel rank; MoE weights count every expert. Sliding-window layers
keep at most a window of KV per request: when a model mixes them with full-attention layers, the
window of every one of ``max_num_seqs`` seats is set aside up front (``reserved_bytes``, vLLM's
hybrid allocator keeps ``ceil(window / block_size) + 1`` blocks per request for those layers) and
blocks count the full-attention layers only, provided the cache then still holds a full batch of
window-length requests; otherwise, and when every layer slides (Mistral 7B v0.1), sliding layers are
charged per token like full ones (exact while a context is within the window, more beyond it).
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import overload

import numpy as np

from simulator.errors import ScenarioError
from simulator.scenario.models import DTYPE_BYTES, ModelSpec
from simulator.scenario.profiles import GIB, HardwareProfile
from simulator.scenario.quantization import Precision


@dataclass(frozen=True, slots=True)
class KVCachePlan:
    """The memory budget of one GPU in a replica (bytes) and the resulting block count."""

    num_gpu_blocks: int
    block_size: int
    usable_bytes: float
    weights_bytes: float
    activation_bytes: float
    kv_bytes_per_block: float
    reserved_bytes: float = 0.0
    """KV of sliding-window layers set aside for every seat (``max_num_seqs`` windows); 0 without."""

    @property
    def num_token_slots(self) -> int:
        return self.num_gpu_blocks * self.block_size


def plan_kv_cache(model: ModelSpec, profile: HardwareProfile, *, tensor_parallel_size: int,
                  block_size: int, gpu_memory_utilization: float, max_num_batched_tokens: int,
                  max_num_seqs: int, max_model_len: int, num_gpu_blocks_override: int | None = None,
                  kv_dtype: str | None = None, precision: Precision | None = None,
                  pipeline_parallel_size: int = 1, data_parallel_size: int = 1) -> KVCachePlan:
    """Derive ``num_gpu_blocks`` (see the module docstring for the formula).

    ``precision`` (weight quantization, KV-cache dtype; :mod:`simulator.scenario.quantization`) overrides
    the model's own ``dtype`` for weight, activation and KV bytes. ``pipeline_parallel_size`` splits
    the layers over stages (the sizes are those of the heaviest stage's GPUs); ``data_parallel_size``
    (attention data-parallel ranks, with the routed experts split over ``TP x DP`` GPUs) leaves each
    GPU ``1 / DP`` of its share of the routed experts; the plan is one rank's (each has its own cache).

    Raises:
        ScenarioError: the weights do not fit, or the cache cannot hold one ``max_model_len``
            sequence (both sizes are named).
    """
    tp = tensor_parallel_size
    kv_heads = max(1.0, model.num_key_value_heads / tp)
    if precision is None:
        kv_bytes = DTYPE_BYTES[kv_dtype or model.dtype]
        act_bytes = 2.0 if model.dtype in ("fp8", "int8", "int4") else DTYPE_BYTES[model.dtype]
        weights = model.weight_bytes() / tp
    else:
        kv_bytes, act_bytes = precision.kv_bytes, precision.activation_bytes
        weights = precision.weight_bytes(model) / tp
    kv_bytes_per_block = block_size * 2 * model.num_layers * kv_heads * model.head_dim * kv_bytes
    activations = (profile.non_torch_memory_bytes
                   + max_num_batched_tokens * (4 * model.hidden_size + 2 * model.intermediate_size / tp) * act_bytes
                   + max_num_seqs * model.vocab_size / tp * 4.0)
    extended = _is_extended(model, pipeline_parallel_size)
    full_per_token = sliding_per_token = 0.0
    if extended:
        lin_b, other_b = ((DTYPE_BYTES[model.dtype], DTYPE_BYTES[model.dtype]) if precision is None
                          else (precision.linear_weight_bytes, precision.other_weight_bytes))
        weights = stage_weight_bytes(model, lin_b, other_b, tp, pipeline_parallel_size, data_parallel_size)
        full_per_token, sliding_per_token = stage_kv_bytes_per_token(model, kv_bytes, tp, pipeline_parallel_size)
        kv_bytes_per_block = block_size * (full_per_token + sliding_per_token)
        activations = (profile.non_torch_memory_bytes
                       + max_num_batched_tokens * (4 * model.hidden_size + 2 * _mlp_width(model) / tp) * act_bytes
                       + max_num_seqs * model.vocab_size / tp * 4.0)
    reserved = 0.0
    if profile.memory_bytes is None:
        # Memory-less profiles (the constant cost model) never run out of KV unless told to.
        usable = math.inf
        blocks = num_gpu_blocks_override or max_num_seqs * math.ceil(max_model_len / block_size)
    else:
        usable = profile.memory_bytes * gpu_memory_utilization
        free = usable - weights - activations
        if extended and sliding_per_token and full_per_token and free > 0:
            reserved = _window_reservation(model, block_size, max_num_seqs, max_model_len, sliding_per_token,
                                           full_per_token, free)
            if reserved:
                kv_bytes_per_block = block_size * full_per_token
        free -= reserved
        if free <= 0:
            on = (f"{usable / GIB:.1f} GiB usable on {profile.name} ({profile.memory_bytes / GIB:.1f} GiB x "
                  f"gpu_memory_utilization {gpu_memory_utilization})")
            non_torch = profile.non_torch_memory_bytes
            if non_torch >= usable:    # the profile's own figure leaves nothing, whatever the model
                raise ScenarioError("hardware.non_torch_memory_bytes", non_torch,
                                    f"{non_torch / GIB:.3g} GiB that the engine cannot use (CUDA context, NCCL "
                                    f"buffers, CUDA graphs) leaves nothing of the {on}; a GPU's is about 1 GiB")
            raise ScenarioError(
                "model", model.name,
                f"does not fit: weights {weights / GIB:.1f} GiB + activations {(activations - non_torch) / GIB:.1f} "
                f"GiB + non-torch memory {non_torch / GIB:.1f} GiB (hardware.non_torch_memory_bytes) per GPU exceed "
                f"{on}; raise deployment.tensor_parallel_size "
                "(or pipeline_parallel_size), quantize the weights (deployment.quantization) or choose a larger GPU")
        blocks = num_gpu_blocks_override or int(free // kv_bytes_per_block)
    plan = KVCachePlan(blocks, block_size, usable, weights, activations, kv_bytes_per_block, reserved)
    if plan.num_token_slots < max_model_len:
        raise ScenarioError(
            "scheduler.max_model_len", max_model_len,
            f"KV cache holds only {plan.num_token_slots} tokens ({blocks} blocks of {block_size}); "
            "lower max_model_len, raise gpu_memory_utilization or tensor_parallel_size, or shrink the KV "
            "(deployment.kv_cache_dtype: fp8) or the weights (deployment.quantization)")
    return plan


def _is_extended(model: ModelSpec, pipeline_parallel_size: int) -> bool:
    """Whether the sizes go beyond the dense single-stage formula of the module docstring (which
    stays as written, bit for bit, for the models it covers)."""
    return model.is_moe or model.is_mla or model.num_sliding_layers > 0 or pipeline_parallel_size > 1


def stage_weight_bytes(model: ModelSpec, linear_bytes: float, other_bytes: float, tp: int, pp: int,
                       dp: int = 1) -> float:
    """Weight bytes on one GPU of the heaviest pipeline stage: ``ceil(num_layers / pp)`` layers (MoE
    layers first, every expert counted, split over the TP ranks, the routed ones over ``TP x dp``
    with attention data parallelism; MLA's down-projections and the router whole on every rank)
    plus the embedding or LM head (both with ``pp`` 1), vocab-split."""
    h = model.hidden_size
    replicated = (model.mla_replicated_params if model.is_mla else 0)
    sharded_attention = model.attention_params - replicated
    norms = model.norm_params_per_layer * other_bytes
    dense_layer = ((sharded_attention + 3 * h * model.intermediate_size) * linear_bytes / tp
                   + replicated * linear_bytes + norms)
    moe_layer = ((sharded_attention + (model.num_experts / dp + model.num_shared_experts) * model.params_per_expert)
                 * linear_bytes / tp + (replicated + h * model.num_experts) * linear_bytes + norms)
    per_stage = -(-model.num_layers // pp)
    num_moe = min(per_stage, model.num_moe_layers)
    layers = num_moe * moe_layer + (per_stage - num_moe) * dense_layer
    head = 0 if model.tie_word_embeddings else model.lm_head_params
    ends = model.embedding_params + head if pp == 1 else max(model.embedding_params, model.lm_head_params)
    return layers + (ends / tp + h) * other_bytes


def stage_kv_bytes_per_token(model: ModelSpec, kv_bytes: float, tp: int, pp: int) -> tuple[float, float]:
    """KV bytes one token takes on one GPU of the heaviest stage: ``(full-attention layers,
    sliding-window layers)``. GQA splits KV heads over TP ranks (at least one per rank); MLA's latent
    is whole on every rank."""
    if model.is_mla:
        per_layer = float(model.kv_elements_per_token_per_layer)
    else:
        per_layer = 2.0 * max(1.0, model.num_key_value_heads / tp) * model.head_dim
    layers = -(-model.num_layers // pp)
    sliding_share = model.num_sliding_layers / model.num_layers
    return (layers * (1.0 - sliding_share) * per_layer * kv_bytes, layers * sliding_share * per_layer * kv_bytes)


def _window_reservation(model: ModelSpec, block_size: int, max_num_seqs: int, max_model_len: int,
                        sliding_per_token: float, full_per_token: float, free: float) -> float:
    """Bytes to set aside for the sliding-window layers of ``max_num_seqs`` requests, or 0 when
    charging them per token is the better bound (the reservation leaves less than a full batch of
    window-length requests' room for the full-attention layers)."""
    window = min(model.sliding_window, max_model_len)
    per_seat = (-(-window // block_size) + 1) * block_size * sliding_per_token
    reserved = max_num_seqs * per_seat
    if reserved >= free or (free - reserved) / full_per_token < max_num_seqs * window:
        return 0.0
    return reserved


def _mlp_width(model: ModelSpec) -> int:
    """Widest MLP activation per token: a dense layer's, or an MoE layer's experts and shared ones."""
    dense = model.intermediate_size if model.num_moe_layers < model.num_layers else 0
    moe = (model.num_experts_per_tok + model.num_shared_experts) * model.expert_intermediate_size if model.is_moe else 0
    return max(dense, moe)


class KVCacheManager:
    """Block accounting for one replica, without prefix caching.

    The scheduler is the only caller. Per request: ``admit`` a waiting request (its blocks, and
    the tokens found cached: none here), ``release`` one that finishes or leaves
    (``release_many`` for several), ``release_tail_until_fits`` to preempt running requests from
    the last until the others' next blocks are free. Per block count: ``blocks_for`` (token slots
    to blocks), ``allocate`` before a step, ``free`` what a step reserved but did not use.
    ``num_used_blocks`` never exceeds ``num_gpu_blocks`` (allocation refuses). A request holding
    ``c`` computed tokens holds ``blocks_for(c)`` blocks; the scheduler keeps ``c``, the cache only
    the count (:class:`~simulator.engine.prefix_cache.PrefixCachingKVManager` keeps identities).
    """

    __slots__ = ("num_gpu_blocks", "block_size", "num_used_blocks")

    def __init__(self, num_gpu_blocks: int, block_size: int) -> None:
        self.num_gpu_blocks = num_gpu_blocks
        self.block_size = block_size
        self.num_used_blocks = 0

    @property
    def num_free_blocks(self) -> int:
        return self.num_gpu_blocks - self.num_used_blocks

    @property
    def usage(self) -> float:
        """Fraction of blocks in use, in [0, 1]."""
        return self.num_used_blocks / self.num_gpu_blocks

    @overload
    def blocks_for(self, num_tokens: int) -> int: ...
    @overload
    def blocks_for(self, num_tokens: np.ndarray) -> np.ndarray: ...
    def blocks_for(self, num_tokens: int | np.ndarray) -> int | np.ndarray:
        """Blocks needed to hold ``num_tokens`` token slots (elementwise for an array)."""
        return -(-num_tokens // self.block_size)

    def can_allocate(self, num_blocks: int) -> bool:
        return num_blocks <= self.num_gpu_blocks - self.num_used_blocks

    def allocate(self, num_blocks: int) -> bool:
        """Take ``num_blocks`` blocks; returns False (and takes none) when they are not free."""
        if num_blocks > self.num_gpu_blocks - self.num_used_blocks:
            return False
        self.num_used_blocks += num_blocks
        return True

    def free(self, num_blocks: int) -> None:
        self.num_used_blocks -= num_blocks
        assert self.num_used_blocks >= 0, "freed more KV blocks than were allocated"

    # -- requests (``allocate``/``free`` inlined: the scheduler calls these per request) ----------
    def admit(self, rid: int, num_tokens: int, budget: int, num_computed_tokens: int | None = None) -> int:
        """Admit request ``rid``, which computes ``num_tokens`` tokens this step and holds the KV of
        ``num_computed_tokens`` (default ``num_tokens``) when the step ends (a swapped-in request
        computes one token over its restored context).

        Returns the tokens found in the cache (none without prefix caching), or -1 when the tokens
        to compute exceed ``budget`` or the blocks are not free (nothing changes then).
        """
        if num_tokens > budget:
            return -1
        blocks = -(-(num_tokens if num_computed_tokens is None else num_computed_tokens) // self.block_size)
        if blocks > self.num_gpu_blocks - self.num_used_blocks:
            return -1
        self.num_used_blocks += blocks
        return 0

    def admit_chunk(self, rid: int, num_tokens: int, budget: int) -> tuple[int, int]:
        """Admit request ``rid`` with ``num_tokens`` tokens to compute in chunks (chunked prefill).

        Finds the leading tokens already cached (none here), then takes the blocks of a first
        chunk: at most ``budget`` of the other tokens. Returns ``(cached tokens, chunk tokens)``, or
        ``(-1, 0)`` when the chunk's blocks are not free (nothing changes then).
        """
        t = min(num_tokens, budget)
        blocks = -(-t // self.block_size)
        if blocks > self.num_gpu_blocks - self.num_used_blocks:
            return -1, 0
        self.num_used_blocks += blocks
        return 0, t

    def register(self, rid: int, num_computed_tokens: int) -> None:
        """A chunk brings ``rid`` to ``num_computed_tokens`` tokens by the step's end (its blocks
        are allocated): offer its newly full blocks to the cache (nothing to do without one)."""

    def release(self, rid: int, num_computed_tokens: int) -> None:
        """Request ``rid`` finished or left holding the KV of ``num_computed_tokens`` tokens."""
        self.num_used_blocks -= -(-num_computed_tokens // self.block_size)
        assert self.num_used_blocks >= 0, "freed more KV blocks than were allocated"

    def release_many(self, req_ids: list[int], num_computed_tokens: list[int]) -> None:
        """:meth:`release` for each of ``req_ids`` (in order), with its ``num_computed_tokens``."""
        bs = self.block_size
        self.num_used_blocks -= sum(-(-c // bs) for c in num_computed_tokens)
        assert self.num_used_blocks >= 0, "freed more KV blocks than were allocated"

    def release_tail_until_fits(self, req_ids: list[int], num_computed_tokens: list[int], need: list[int]) -> int:
        """Release running requests from the last until the remaining ones' ``need`` new blocks are
        free; returns how many remain (the caller preempts the others).

        vLLM's loop (preempt the last running request until the current one fits) keeps exactly
        this prefix of rows: the largest whose new blocks fit once every later row is released,
        since feasibility of a prefix only improves as it shrinks.
        """
        bs, free = self.block_size, self.num_free_blocks
        keep, prefix_need, tail_free = len(need), sum(need), 0    # need of rows < keep, blocks held by rows >= keep
        while prefix_need > free + tail_free:
            keep -= 1
            prefix_need -= need[keep]
            tail_free += -(-num_computed_tokens[keep] // bs)
        self.free(tail_free)
        return keep
