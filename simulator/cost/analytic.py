"""Step-time cost models: how long one engine step takes for a given batch.

An engine step runs the model once over every token scheduled in it: whole or partial prompts
(prefill) and one token per decoding request. A cost model turns that batch shape into seconds.

* ``roofline``: every op family is bounded by compute (FLOPs / peak x efficiency) or memory
  traffic (bytes / bandwidth x efficiency), whichever is slower, summed over the step: the linear
  layers (QKV, O, gate/up, down), the LM head for the sampled rows, causal attention over each
  prefill chunk and its cached context, decode attention reading every decoding request's KV,
  the elementwise ops (RMSNorm, rotary, SiLU, residuals), tensor-parallel all-reduces, and a fixed
  plus per-request CPU overhead between steps. Weight, activation and KV bytes and the GEMM
  compute dtype come from the deployment's :class:`~simulator.scenario.quantization.Precision`
  (``quantization``, ``kv_cache_dtype``).
* ``constant``: ``step_time_s + prefill_time_per_token_s x prefill tokens``, whatever the batch;
  with it the simulator reduces to textbook queues (M/D/1, M/G/1, M/G/c) for theory checks.

Both expose ``decode_run_times`` so the engine can advance many decode steps in one event.
"""
from __future__ import annotations

import numpy as np

from simulator.cost.base import BatchShape, StepTime, register
from simulator.scenario.models import ModelSpec
from simulator.scenario.profiles import HardwareProfile
from simulator.scenario.quantization import Precision, resolve_precision


@register("constant")
class ConstantCostModel:
    """Every step costs ``step_time_s`` plus ``prefill_time_per_token_s`` per prompt token."""

    def __init__(self, profile: HardwareProfile, model: ModelSpec | None = None,
                 tensor_parallel_size: int = 1, precision: Precision | None = None) -> None:
        assert profile.step_time_s is not None
        self.step_s = float(profile.step_time_s)
        self.per_token_s = float(profile.prefill_time_per_token_s)

    def breakdown(self, shape: BatchShape) -> StepTime:
        return StepTime(linear_s=self.per_token_s * sum(shape.prefill_tokens), overhead_s=self.step_s)

    def step_time_s(self, shape: BatchShape) -> float:
        return self.step_s + self.per_token_s * sum(shape.prefill_tokens)

    def decode_run_times(self, num_decodes: int, decode_context_tokens: np.ndarray) -> np.ndarray:
        return np.full(len(decode_context_tokens), self.step_s)

    def decode_step_time_s(self, num_decodes: int, decode_context_tokens: int) -> float:
        return self.step_s

    def decode_affine(self, num_decodes: int) -> tuple[float, float]:
        return self.step_s, 0.0


@register("roofline")
class RooflineCostModel:
    """Per-op roofline over one tensor-parallel shard of the model (see module docstring).

    All quantities are per GPU: weights, heads and MLP width are divided by the TP degree, and
    each layer adds two all-reduces of the step's activations (after attention and after the MLP).
    """

    def __init__(self, profile: HardwareProfile, model: ModelSpec, tensor_parallel_size: int = 1,
                 precision: Precision | None = None) -> None:
        tp = tensor_parallel_size
        eff = profile.efficiency
        p = precision or resolve_precision(model, profile)
        self.model, self.profile, self.tp, self.precision = model, profile, tp, p
        # Quantized linear weights stream fewer bytes per decode step; the LM head stays 16-bit.
        wbytes, head_wbytes, abytes = p.linear_weight_bytes, p.other_weight_bytes, p.activation_bytes
        peak = profile.peak_flops_for(p.compute_dtype)
        attn_peak = profile.peak_flops_for(p.attention_dtype)
        bw = float(profile.memory_bandwidth_bytes_per_s or 0.0)
        L, h = model.num_layers, model.hidden_size
        linear_params = L * (model.params_per_layer - 2 * h) / tp
        # Linear layers: 2 FLOPs per weight per token; weights streamed once per step.
        self._lin_flops_per_token = 2.0 * linear_params
        self._lin_weight_bytes = linear_params * wbytes
        self._lin_act_bytes_per_token = L * (4 * h + 3 * model.intermediate_size / tp) * abytes
        # LM head for each sampled row.
        self._head_flops_per_row = 2.0 * h * model.vocab_size / tp
        self._head_weight_bytes = h * model.vocab_size * head_wbytes / tp
        # Attention: QK^T and PV are 2 FLOPs each per (query, key) pair per head dim.
        heads = model.num_attention_heads / tp
        self._attn_flops_per_pair = 4.0 * L * heads * model.head_dim
        kv_heads = max(1.0, model.num_key_value_heads / tp)
        self._kv_bytes_per_token = 2.0 * L * kv_heads * model.head_dim * p.kv_bytes
        # Elementwise: ~12 reads/writes of the hidden vector per token per layer.
        self._elem_bytes_per_token = 12.0 * L * h * abytes
        self._peak = peak
        self._gemm_max, self._gemm_half = eff.gemm_max, eff.gemm_half_tokens
        self._mem_bw = bw * eff.memory
        self._attn_c = attn_peak * eff.attention_compute
        self._attn_m = bw * eff.attention_memory
        ic = profile.interconnect
        if tp > 1 and ic is None:
            from simulator.errors import ScenarioError
            raise ScenarioError("hardware.interconnect", None,
                                f"tensor_parallel_size={tp} needs an interconnect in the profile")
        self._ar_count = 2 * L if tp > 1 else 0
        self._ar_latency = ic.latency_s if ic else 0.0
        self._ar_bytes_per_token = ((2.0 * (tp - 1) / tp) * h * abytes / ic.bandwidth_bytes_per_s
                                    if ic and tp > 1 else 0.0)
        self._overhead_step = profile.overhead.step_s
        self._overhead_seq = profile.overhead.per_seq_s
        self._overhead_tok = profile.overhead.per_token_s
        # Decode steps are affine in the context sum: cache the slope of decode attention.
        self._decode_fixed: dict[int, float] = {}
        self._decode_attn_slope = max(self._attn_flops_per_pair / self._attn_c,
                                      self._kv_bytes_per_token / self._attn_m)

    def _gemm_rate(self, tokens: float) -> float:
        return self._peak * self._gemm_max * tokens / (tokens + self._gemm_half)

    def _linear_s(self, tokens: int, sampled: int) -> float:
        lin = max(self._lin_flops_per_token * tokens / self._gemm_rate(tokens),
                  (self._lin_weight_bytes + self._lin_act_bytes_per_token * tokens) / self._mem_bw)
        head = 0.0
        if sampled:
            head = max(self._head_flops_per_row * sampled / self._gemm_rate(sampled),
                       self._head_weight_bytes / self._mem_bw)
        return lin + head

    def _prefill_attention_s(self, new: int, ctx: int) -> float:
        pairs = new * ctx + new * (new + 1) / 2.0
        return max(self._attn_flops_per_pair * pairs / self._attn_c,
                   self._kv_bytes_per_token * (ctx + new) / self._attn_m)

    def breakdown(self, shape: BatchShape) -> StepTime:
        prefill_tokens, num_decodes = shape.prefill_tokens, shape.num_decodes
        tokens = sum(prefill_tokens) + num_decodes
        if tokens == 0:
            return StepTime(overhead_s=self._overhead_step)
        attn = sum(self._prefill_attention_s(n, c)
                   for n, c in zip(prefill_tokens, shape.prefill_computed_tokens, strict=False))
        attn += self._decode_attn_slope * shape.decode_context_tokens
        comm = self._ar_count * (self._ar_latency + self._ar_bytes_per_token * tokens)
        seqs = len(prefill_tokens) + num_decodes
        return StepTime(linear_s=self._linear_s(tokens, shape.num_sampled_tokens), attention_s=attn,
                        elementwise_s=self._elem_bytes_per_token * tokens / self._mem_bw, comm_s=comm,
                        overhead_s=self._overhead_step + self._overhead_seq * seqs + self._overhead_tok * tokens)

    def step_time_s(self, shape: BatchShape) -> float:
        # ``breakdown(shape).total_s`` without building the breakdown: the engine's hot path.
        prefill_tokens, num_decodes = shape.prefill_tokens, shape.num_decodes
        tokens = sum(prefill_tokens) + num_decodes
        if tokens == 0:
            return self._overhead_step
        attn = self._decode_attn_slope * shape.decode_context_tokens
        for n, c in zip(prefill_tokens, shape.prefill_computed_tokens, strict=False):
            attn += self._prefill_attention_s(n, c)
        return (self._linear_s(tokens, shape.num_sampled_tokens) + attn
                + self._elem_bytes_per_token * tokens / self._mem_bw
                + self._ar_count * (self._ar_latency + self._ar_bytes_per_token * tokens)
                + self._overhead_step + self._overhead_seq * (len(prefill_tokens) + num_decodes)
                + self._overhead_tok * tokens)

    def _decode_fixed_s(self, num_decodes: int) -> float:
        """Everything in a pure-decode step except attention (which grows with context)."""
        fixed = self._decode_fixed.get(num_decodes)
        if fixed is None:
            fixed = self.breakdown(BatchShape.decode(num_decodes, 0)).total_s
            self._decode_fixed[num_decodes] = fixed
        return fixed

    def decode_run_times(self, num_decodes: int, decode_context_tokens: np.ndarray) -> np.ndarray:
        return self._decode_fixed_s(num_decodes) + self._decode_attn_slope * decode_context_tokens

    def decode_step_time_s(self, num_decodes: int, decode_context_tokens: int) -> float:
        return self._decode_fixed_s(num_decodes) + self._decode_attn_slope * decode_context_tokens

    def decode_affine(self, num_decodes: int) -> tuple[float, float]:
        return self._decode_fixed_s(num_decodes), self._decode_attn_slope


