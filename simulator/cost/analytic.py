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
  (``quantization``, ``kv_cache_dtype``). Every kernel also costs a fixed
  ``efficiency.kernel_latency_s`` (launch and tail: the time a kernel takes whatever its size) on top
  of its roofline, times the kernels a step runs (:data:`DENSE_LAYER_KERNELS` per layer, plus the
  final norm and the LM head; :class:`GeneralRooflineCostModel` counts the MoE and MLA kernels), so
  a small-batch decode step is never faster than its kernel count allows.
* ``constant``: ``step_time_s + prefill_time_per_token_s x prefill tokens``, whatever the batch;
  with it the simulator reduces to textbook queues (M/D/1, M/G/1, M/G/c) for theory checks.

Both expose ``decode_run_times`` so the engine can advance many decode steps in one event.

Models beyond the dense Llama shape (mixture of experts, multi-head latent attention, sliding-window
layers) and replicas split over pipeline stages or expert-parallel ranks get the roofline's
:class:`GeneralRooflineCostModel`, which adds those terms as separate methods (``docs/models.md``);
:func:`roofline_cost_model` (the ``roofline`` cost model of a profile) picks the class the model and
the split need.
"""
from __future__ import annotations

from collections.abc import Callable, Sequence

import numpy as np

from simulator.cost.base import (
    BatchShape,
    DecodeSteps,
    StepTime,
    VerifyStep,
    lockstep_time_s,
    register,
    slowest_rank_s,
    split_stages,
)
from simulator.errors import ScenarioError
from simulator.scenario.models import ModelSpec
from simulator.scenario.parallel import Parallelism, collective_link, stage_layers, stage_links
from simulator.scenario.profiles import HardwareProfile
from simulator.scenario.quantization import Precision, resolve_precision

DENSE_LAYER_KERNELS = {"gemm": 4, "attention": 1, "elementwise": 5}
"""Kernels one dense (Llama-shaped) layer runs in vLLM under CUDA graphs, per kind: the QKV, O,
gate/up and down GEMMs; one attention kernel; two fused residual-add + RMSNorm, rotary, SiLU-and-
multiply and the KV-cache write. The tensor-parallel all-reduces carry their own
``interconnect.latency_s``. Each costs ``efficiency.kernel_latency_s`` on top of its roofline."""


MOE_LAYER_KERNELS = {"gemm": 7, "shared_gemm": 2}
"""Kernels of one MoE layer's MLP in vLLM's fused MoE path, counted with the GEMMs: the router GEMM,
top-k softmax, the expert-alignment sort, the two grouped GEMMs, the activation and the weighted
sum (7); shared experts add their gate/up and down GEMMs (2) and a SiLU-and-multiply."""
MLA_LAYER_KERNELS = {"gemm": 5, "elementwise": 6}
"""Kernels of one multi-head-latent-attention block besides the attention kernel: the fused q/kv
down-projection, the q up-projection, the two absorbed batched matmuls (decode form) and the output
projection (5 GEMMs); two residual-add + RMSNorm, the q and kv latent norms, rotary and the latent
cache write (6)."""


class ConstantCostModel:
    """Every step costs ``step_time_s`` plus ``prefill_time_per_token_s`` per prompt token."""

    def __init__(self, profile: HardwareProfile, model: ModelSpec | None = None,
                 tensor_parallel_size: int = 1, precision: Precision | None = None,
                 parallel: Parallelism | None = None) -> None:
        assert profile.step_time_s is not None
        self.step_s = float(profile.step_time_s)
        self.per_token_s = float(profile.prefill_time_per_token_s)
        self.num_stages = parallel.pipeline if parallel is not None else 1
        """Pipeline stages: each takes an equal share of every step (no sends between them)."""

    def breakdown(self, shape: BatchShape) -> StepTime:
        return StepTime(linear_s=self.per_token_s * sum(shape.prefill_tokens), overhead_s=self.step_s)

    def step_time_s(self, shape: BatchShape) -> float:
        return self.step_s + self.per_token_s * sum(shape.prefill_tokens)

    def stage_times_s(self, shape: BatchShape) -> list[float]:
        t = self.step_time_s(shape)
        return [t] if self.num_stages == 1 else [t / self.num_stages] * self.num_stages

    def decode_run_times(self, num_decodes: int, decode_context_tokens: np.ndarray) -> np.ndarray:
        return np.full(len(decode_context_tokens), self.step_s)

    def decode_step_time_s(self, num_decodes: int, decode_context_tokens: float) -> float:
        return self.step_s

    def decode_affine(self, num_decodes: int) -> tuple[float, float]:
        return self.step_s, 0.0

    def decode_step_fn(self, num_decodes: int) -> Callable[[float], float] | None:
        return None                     # runs are affine (decode_affine): no step-by-step pricing

    def decode_steps_fn(self, num_decodes: int) -> DecodeSteps | None:
        return None

    def decode_step_terms(self, num_decodes: int) -> tuple[float, float] | None:
        return None

    def verify_step_fn(self, num_seqs: int, num_query_tokens: int) -> VerifyStep | None:
        return None                     # step_time_s is already a few operations

    def group_step_time_s(self, shapes: Sequence[BatchShape]) -> float:
        return slowest_rank_s(self.step_time_s, shapes)


class RooflineCostModel:
    """Per-op roofline over one tensor-parallel shard of the model (see module docstring).

    All quantities are per GPU: weights, heads and MLP width are divided by the TP degree, and
    each layer adds two all-reduces of the step's activations (after attention and after the MLP).
    A model or split this class does not cover (:func:`needs_general_roofline`) needs a
    :class:`GeneralRooflineCostModel` (:func:`roofline_cost_model` picks it); this class refuses one.
    """

    def __init__(self, profile: HardwareProfile, model: ModelSpec, tensor_parallel_size: int = 1,
                 precision: Precision | None = None, parallel: Parallelism | None = None) -> None:
        if type(self) is RooflineCostModel and needs_general_roofline(model, parallel):
            raise TypeError(f"{model.name}{'' if parallel is None else f' on {parallel}'} needs "
                            "GeneralRooflineCostModel's terms: build it with roofline_cost_model()")
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
        # The per-kernel floor: kernel_latency_s per kernel of each kind (the LM head adds one).
        lat = eff.kernel_latency_s
        self._kernel_latency_s = lat
        self._lin_floor_s = lat * DENSE_LAYER_KERNELS["gemm"] * L
        self._attn_floor_s = lat * DENSE_LAYER_KERNELS["attention"] * L
        self._elem_floor_s = lat * (DENSE_LAYER_KERNELS["elementwise"] * L + 1)
        self._peak = peak
        self._gemm_max, self._gemm_half = eff.gemm_max, eff.gemm_half_tokens
        self._mem_bw = bw * eff.memory
        self._attn_c = attn_peak * eff.attention_compute
        self._attn_m = bw * eff.attention_memory
        ic = profile.interconnect
        if tp > 1 and ic is None:
            raise ScenarioError("hardware.interconnect", None,
                                f"tensor_parallel_size={tp} needs an interconnect in the profile")
        link = collective_link(profile, tp) if tp > 1 else None
        if tp > 1 and link is None:
            raise ScenarioError("hardware.inter_node", None, f"tensor_parallel_size={tp} spans more GPUs than the "
                                "interconnect joins (interconnect.domain_gpus): the profile needs an inter_node link")
        self._ar_count = 2 * L if tp > 1 else 0
        self._ar_latency = link.latency_s if link else 0.0
        self._ar_bytes_per_token = ((2.0 * (tp - 1) / tp) * h * abytes / link.bandwidth_bytes_per_s
                                    if link and tp > 1 else 0.0)
        self._overhead_step = profile.overhead.step_s
        self._overhead_seq = profile.overhead.per_seq_s
        self._overhead_tok = profile.overhead.per_token_s
        # Decode steps are affine in the context sum: cache the slope of decode attention.
        self._decode_fixed: dict[int, float] = {}
        self._verify_fns: dict[tuple[int, int], VerifyStep] = {}
        self._decode_attn_slope = max(self._attn_flops_per_pair / self._attn_c,
                                      self._kv_bytes_per_token / self._attn_m)

    def _gemm_rate(self, tokens: float) -> float:
        return self._peak * self._gemm_max * tokens / (tokens + self._gemm_half)

    def _linear_s(self, tokens: int, sampled: int) -> float:
        lin = max(self._lin_flops_per_token * tokens / self._gemm_rate(tokens),
                  (self._lin_weight_bytes + self._lin_act_bytes_per_token * tokens) / self._mem_bw)
        lin += self._lin_floor_s
        head = 0.0
        if sampled:
            head = max(self._head_flops_per_row * sampled / self._gemm_rate(sampled),
                       self._head_weight_bytes / self._mem_bw) + self._kernel_latency_s
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
        attn += self._decode_attn_slope * shape.decode_context_tokens + self._attn_floor_s
        comm = self._ar_count * (self._ar_latency + self._ar_bytes_per_token * tokens)
        seqs = len(prefill_tokens) + num_decodes
        return StepTime(linear_s=self._linear_s(tokens, shape.num_sampled_tokens), attention_s=attn,
                        elementwise_s=self._elem_bytes_per_token * tokens / self._mem_bw + self._elem_floor_s,
                        comm_s=comm,
                        overhead_s=self._overhead_step + self._overhead_seq * seqs + self._overhead_tok * tokens)

    def step_time_s(self, shape: BatchShape) -> float:
        # ``breakdown(shape).total_s`` without building the breakdown: the engine's hot path.
        prefill_tokens, num_decodes = shape.prefill_tokens, shape.num_decodes
        tokens = sum(prefill_tokens) + num_decodes
        if tokens == 0:
            return self._overhead_step
        attn = self._decode_attn_slope * shape.decode_context_tokens
        if prefill_tokens:   # _prefill_attention_s inlined (a verification step has one entry per request)
            flops, c_rate, kv, m_rate = self._attn_flops_per_pair, self._attn_c, self._kv_bytes_per_token, self._attn_m
            for n, c in zip(prefill_tokens, shape.prefill_computed_tokens, strict=False):
                pairs = n * c + n * (n + 1) / 2.0
                attn += max(flops * pairs / c_rate, kv * (c + n) / m_rate)
        return (self._linear_s(tokens, shape.num_sampled_tokens) + (attn + self._attn_floor_s)
                + (self._elem_bytes_per_token * tokens / self._mem_bw + self._elem_floor_s)
                + self._ar_count * (self._ar_latency + self._ar_bytes_per_token * tokens)
                + self._overhead_step + self._overhead_seq * (len(prefill_tokens) + num_decodes)
                + self._overhead_tok * tokens)

    def stage_times_s(self, shape: BatchShape) -> list[float]:
        return [self.step_time_s(shape)]          # one stage: GeneralRooflineCostModel splits pipelines

    def verify_step_fn(self, num_seqs: int, num_query_tokens: int) -> VerifyStep | None:
        """:meth:`step_time_s` of a verification step (:data:`~simulator.cost.base.VerifyStep`):
        the terms of ``num_seqs x num_query_tokens`` tokens once, the causal attention of each
        request's chunk over its context in the loop, added in :meth:`step_time_s`'s order."""
        got = self._verify_fns.get((num_seqs, num_query_tokens))
        if got is None:
            n, q = num_seqs, num_query_tokens
            tokens = n * q
            lin = self._linear_s(tokens, tokens)
            elem = self._elem_bytes_per_token * tokens / self._mem_bw + self._elem_floor_s
            comm = self._ar_count * (self._ar_latency + self._ar_bytes_per_token * tokens)
            o_step, o_seq, o_tok = self._overhead_step, self._overhead_seq * n, self._overhead_tok * tokens
            attn0, attn_floor = self._decode_attn_slope * 0, self._attn_floor_s
            flops, c_rate, kv, m_rate = self._attn_flops_per_pair, self._attn_c, self._kv_bytes_per_token, self._attn_m
            half = q * (q + 1) / 2.0
            # Each chunk's attention is max(compute, memory), both affine in its context c >= 0.
            # Where memory exceeds compute by a relative 1e-9 at c = 0 and as c grows (so at every
            # c between), the rounded terms compare the same way: the loop adds the memory term only.
            memory_bound = (kv * q / m_rate > (1 + 1e-9) * flops * half / c_rate
                            and kv / m_rate > (1 + 1e-9) * flops * q / c_rate)

            def step(computed: list[int]) -> float:
                attn = attn0
                if memory_bound:
                    for c in computed:
                        attn += kv * (c + q) / m_rate
                else:
                    for c in computed:
                        attn += max(flops * (q * c + half) / c_rate, kv * (c + q) / m_rate)
                return lin + (attn + attn_floor) + elem + comm + o_step + o_seq + o_tok
            got = self._verify_fns[(num_seqs, num_query_tokens)] = step
        return got

    def _decode_fixed_s(self, num_decodes: int) -> float:
        """Everything in a pure-decode step except attention (which grows with context)."""
        fixed = self._decode_fixed.get(num_decodes)
        if fixed is None:
            fixed = self.breakdown(BatchShape.decode(num_decodes, 0)).total_s
            self._decode_fixed[num_decodes] = fixed
        return fixed

    def decode_run_times(self, num_decodes: int, decode_context_tokens: np.ndarray) -> np.ndarray:
        return self._decode_fixed_s(num_decodes) + self._decode_attn_slope * decode_context_tokens

    def decode_step_time_s(self, num_decodes: int, decode_context_tokens: float) -> float:
        return self._decode_fixed_s(num_decodes) + self._decode_attn_slope * decode_context_tokens

    def decode_step_fn(self, num_decodes: int) -> Callable[[float], float] | None:
        """:meth:`decode_step_time_s` at ``num_decodes`` as a function of the context sum (None
        where a subclass's decode steps are not affine in it)."""
        fixed, slope = self.decode_step_terms(num_decodes)
        return lambda s: fixed + slope * s

    def decode_steps_fn(self, num_decodes: int) -> DecodeSteps | None:
        return None                     # built from decode_step_fn (runs are affine here anyway)

    def decode_step_terms(self, num_decodes: int) -> tuple[float, float]:
        """``(fixed, slope)``: :meth:`decode_step_fn` computes ``fixed + slope * s``, these float
        operations (a caller summing many steps may inline them)."""
        return self._decode_fixed_s(num_decodes), self._decode_attn_slope

    def decode_affine(self, num_decodes: int) -> tuple[float, float] | None:
        return self._decode_fixed_s(num_decodes), self._decode_attn_slope

    def group_step_time_s(self, shapes: Sequence[BatchShape]) -> float:
        return slowest_rank_s(self.step_time_s, shapes)




def needs_general_roofline(model: ModelSpec, parallel: Parallelism | None) -> bool:
    """Whether ``model`` on ``parallel`` needs :class:`GeneralRooflineCostModel`'s terms: experts,
    MLA, sliding-window layers, pipeline stages or expert-parallel ranks."""
    return (model.is_moe or model.is_mla or model.num_sliding_layers > 0
            or (parallel is not None and not parallel.is_tensor_only))


def expected_distinct_experts(num_tokens: float, num_experts: int, top_k: int) -> float:
    """Experts at least one of ``num_tokens`` tokens goes to, in expectation, when each token picks
    ``top_k`` distinct experts of ``num_experts`` uniformly: ``E (1 - (1 - k/E)^B)`` (each expert is
    missed by one token with probability ``1 - k/E``)."""
    return num_experts * (1.0 - (1.0 - top_k / num_experts) ** num_tokens)


def window_pairs(num_new: int, num_cached: int, window: int) -> float:
    """(query, key) pairs of a chunk of ``num_new`` tokens after ``num_cached`` cached ones under a
    causal sliding window: the query at position ``p`` (1-based) sees ``min(window, p)`` keys."""
    c, n, w = num_cached, num_new, window
    if c + n <= w:
        return n * c + n * (n + 1) / 2.0
    if c >= w:
        return float(n * w)
    m = w - c                       # queries still inside the first window
    return m * c + m * (m + 1) / 2.0 + (n - m) * w


class GeneralRooflineCostModel(RooflineCostModel):
    """The roofline of :class:`RooflineCostModel` with the terms the dense Llama shape lacks.

    * **Mixture of experts** (:meth:`_experts_s`): a step of ``T`` tokens computes ``T x top_k``
      (token, expert) pairs, grouped per expert (FLOPs: the active weights' only), and reads the
      weights of the experts some token goes to: ``E (1 - (1 - k/E)^T)`` per layer in expectation
      (:func:`expected_distinct_experts`). The grouped GEMM's efficiency follows the rows per touched
      expert, not the step's tokens. Without expert parallelism every GPU holds ``1/TP`` of every
      expert; with EP each holds ``E/EP`` whole experts and the busiest rank, with
      ``moe_load_imbalance`` times the mean share of pairs and of touched experts, sets the time.
      The shared experts, the router, the dense layers and attention stay in :meth:`_linear_s`.
    * **Attention data parallelism** (``data_parallel_size`` DP, EP = TP x DP): the model is one DP
      rank's: attention, dense layers, shared experts and router over its own ``T`` tokens, the routed
      experts over the ``DP x T`` tokens of every rank (each assumed as busy as this one), all-to-all
      over the ``TP x DP`` GPUs of the replica, each GPU sending its rank's ``T`` tokens. The engine
      runs the ranks in lockstep through :meth:`group_step_time_s`: the routed experts over the
      ranks' actual tokens, the all-to-all at the busiest rank's, the slowest rank's own part. With
      EP 1 (vLLM's ``--data-parallel-size`` alone, SGLang's ``--enable-dp-attention``) each GPU
      holds ``1/(TP x DP)`` of every expert's width, and each MoE layer's all-reduce becomes an
      all-gather of every rank's tokens and a reduce-scatter of the output over the ``TP x DP``
      GPUs (a ring all-reduce's bytes, of the group's tokens).
    * **MLA** (:meth:`_init_attention`; vLLM's two forms, ``vllm/v1/attention/backends/mla/common.py``):
      decode attention in the absorbed form vLLM's MLA decode kernels use: each head scores the
      query against the cached latent and rotary key (``2 (kv_lora_rank + qk_rope_head_dim)``
      FLOPs per pair) and sums the latent
      (``2 kv_lora_rank``), reading ``kv_lora_rank + qk_rope_head_dim`` elements per cached token and
      layer, shared by every head (not split over TP ranks); prefill in vLLM's compute-friendly form:
      the cached context's latents are up-projected to per-head keys and values (a GEMM over the
      cached tokens) and attention runs per head with ``qk_nope + qk_rope`` / ``v_head_dim`` widths.
    * **Sliding window**: the ``sliding_window_layers`` attend to at most ``sliding_window`` keys
      (:func:`window_pairs` in prefill; in decode ``min(context sum, decodes x window)``, exact when
      every context is on the same side of the window and an over-estimate otherwise). Decode steps
      are then not affine in the context (``decode_affine`` is None).
    * **Communication** (:meth:`_init_comm`): with EP the MoE block's all-reduce becomes an
      all-to-all dispatch and a combine, each moving ``T x hidden x act_bytes x (EP-1)/EP`` bytes per
      GPU over the stage's link (vLLM with one data-parallel rank keeps the all-reduce: the same
      bytes, one call fewer); each of the ``PP - 1`` stage boundaries sends the step's hidden
      states and residual (``2 T x hidden x act_bytes``, as vLLM's pipeline does) over its link
      (:func:`~simulator.scenario.parallel.stage_links`).
    * **Pipeline** (``PP`` stages): a step's time is its traversal of every stage: the compute terms
      are the whole model's on one TP group (the sum of the stages') plus the sends.
      :meth:`stage_times_s` splits it: each stage its layers' share
      (:func:`~simulator.scenario.parallel.stage_layers`, vLLM's split) of the per-layer terms and
      its send to the next stage; the first the CPU overhead, the last the final norm and the LM
      head. The engine keeps up to ``PP`` batches in flight over those stages
      (:mod:`simulator.engine.pipeline`).
    """

    def __init__(self, profile: HardwareProfile, model: ModelSpec, tensor_parallel_size: int = 1,
                 precision: Precision | None = None, parallel: Parallelism | None = None) -> None:
        super().__init__(profile, model, tensor_parallel_size, precision)
        self.parallel = parallel or Parallelism(tensor_parallel_size)
        self._init_linear()
        self._init_experts()
        self._init_attention()
        self._init_comm()
        self._init_floor()
        self._decode_fixed = {}

    # -- set-up, one method per term ---------------------------------------------------------------
    def _init_linear(self) -> None:
        """Linear layers outside the routed experts: attention (MLA's down-projections whole on
        every rank), dense MLPs, shared experts, the router."""
        m, p, tp = self.model, self.precision, self.tp
        L, h = m.num_layers, m.hidden_size
        dense_layers = L - m.num_moe_layers
        replicated = m.mla_replicated_params if m.is_mla else 0
        sharded = (L * (m.attention_params - replicated) + dense_layers * 3 * h * m.intermediate_size
                   + m.num_moe_layers * m.num_shared_experts * m.params_per_expert)
        params = sharded / tp + L * replicated + m.num_moe_layers * h * m.num_experts
        self._lin_flops_per_token = 2.0 * params
        self._lin_weight_bytes = params * p.linear_weight_bytes
        widths = (L * 4 * h + dense_layers * 3 * m.intermediate_size / tp
                  + m.num_moe_layers * m.num_shared_experts * 3 * m.expert_intermediate_size / tp)
        self._lin_act_bytes_per_token = widths * p.activation_bytes

    def _init_experts(self) -> None:
        """Per-GPU constants of the routed experts (see :meth:`_experts_s`)."""
        m, p, ep = self.model, self.precision, self.parallel.expert
        self._moe_layers = m.num_moe_layers
        if not m.is_moe:
            return
        whole = ep > 1                          # EP: whole experts; else a 1/(TP x DP) slice of each
        share = min(m.moe_load_imbalance, ep) / ep if whole else 1.0   # the busiest rank takes at most all
        split = 1 if whole else self.tp * self.parallel.data
        self._expert_params_gpu = m.params_per_expert / split
        self._experts_local = m.num_experts / ep
        self._expert_share = share              # of the (token, expert) pairs and of the touched experts
        width = m.expert_intermediate_size / split
        self._expert_act_bytes_per_pair = (2 * m.hidden_size + 3 * width) * p.activation_bytes

    def _init_attention(self) -> None:
        """MLA's and the sliding window's attention constants (whole model, per GPU)."""
        m, p = self.model, self.precision
        L, heads = m.num_layers, m.num_attention_heads / self.tp
        self._prefill_decompress_flops_per_token = 0.0
        if m.is_mla:
            latent = m.kv_lora_rank + m.qk_rope_head_dim
            self._attn_flops_per_pair = 2.0 * L * heads * (2 * m.kv_lora_rank + m.qk_rope_head_dim)   # absorbed
            self._kv_bytes_per_token = L * latent * p.kv_bytes                                     # whole latent
            self._prefill_flops_per_pair = 2.0 * L * heads * (m.qk_nope_head_dim + m.qk_rope_head_dim + m.v_head_dim)
            self._prefill_decompress_flops_per_token = 2.0 * L * m.mla_kv_up_params / self.tp
        else:
            self._prefill_flops_per_pair = self._attn_flops_per_pair
        self._window = m.sliding_window
        slide = m.num_sliding_layers / L
        full = 1.0 - slide
        self._decode_attn_slope = full * max(self._attn_flops_per_pair / self._attn_c,
                                             self._kv_bytes_per_token / self._attn_m)
        self._decode_window_slope = slide * max(self._attn_flops_per_pair / self._attn_c,
                                                self._kv_bytes_per_token / self._attn_m)
        self._attn_share = (full, slide)

    def _init_comm(self) -> None:
        """Collectives and sends: ``comm_s = _comm_fixed_s + _comm_s_per_token x tokens``."""
        m, p, par, profile = self.model, self.precision, self.parallel, self.profile
        h, abytes = m.hidden_size, p.activation_bytes
        fixed, per_token = self._ar_count * self._ar_latency, self._ar_count * self._ar_bytes_per_token
        self._a2a_fixed_s, self._a2a_s_per_token = 0.0, 0.0
        """The MoE layers' all-to-alls (in ``comm_s``): ``(fixed, per token)`` seconds."""
        self._gather_fixed_s, self._gather_s_per_token = 0.0, 0.0
        """With attention DP and tensor-parallel experts, the MoE layers' all-gather and reduce-scatter
        over every GPU of the replica (in ``comm_s``): ``(fixed, per token of the whole group)`` seconds."""
        if par.expert > 1:
            link = collective_link(profile, par.expert)
            assert link is not None        # the TP group's link, checked by the base class
            # The MoE block's all-reduce is replaced by a dispatch and a combine all-to-all.
            per_token -= m.num_moe_layers * self._ar_bytes_per_token
            fixed -= m.num_moe_layers * self._ar_latency
            a2a = 2 * m.num_moe_layers
            self._a2a_fixed_s = a2a * link.latency_s
            self._a2a_s_per_token = a2a * h * abytes * (par.expert - 1) / par.expert / link.bandwidth_bytes_per_s
            fixed += self._a2a_fixed_s
            per_token += self._a2a_s_per_token
        elif par.data > 1 and m.num_moe_layers:
            n = self.tp * par.data
            link = collective_link(profile, n)
            if link is None:
                raise ScenarioError("hardware.inter_node", None,
                                    f"tensor_parallel_size x data_parallel_size = {n} GPUs span more than profile "
                                    f"{profile.name!r}'s interconnect joins and the profile has no inter_node link")
            # The MoE block's all-reduce over the TP group becomes an all-gather of every rank's tokens
            # and a reduce-scatter of the experts' output over the TP x DP GPUs (a ring all-reduce's bytes).
            per_token -= m.num_moe_layers * self._ar_bytes_per_token
            fixed -= m.num_moe_layers * self._ar_latency
            self._gather_fixed_s = 2 * m.num_moe_layers * link.latency_s
            self._gather_s_per_token = (m.num_moe_layers * (2.0 * (n - 1) / n) * h * abytes
                                        / link.bandwidth_bytes_per_s)
            fixed += self._gather_fixed_s
            per_token += self._gather_s_per_token * par.data
        self._sends: list[tuple[float, float]] = []
        """Each stage boundary's send: ``(fixed, per token)`` seconds."""
        for i, link in enumerate(stage_links(profile, par)):
            if link is None:
                raise ScenarioError("hardware.inter_node", None,
                                    f"stage boundary {i + 1} of pipeline_parallel_size={par.pipeline} leaves the "
                                    "interconnect's domain and the profile has no inter_node link")
            send = (link.latency_s, 2 * h * abytes / link.bandwidth_bytes_per_s)   # hidden states + residual
            self._sends.append(send)
            fixed += send[0]
            per_token += send[1]
        self._comm_fixed_s, self._comm_s_per_token = fixed, per_token
        self._stage_layers = stage_layers(m.num_layers, par.pipeline)

    def _init_floor(self) -> None:
        """The per-kernel floor over the kernels this model's layers run (:data:`MOE_LAYER_KERNELS`,
        :data:`MLA_LAYER_KERNELS`; dense layers as :data:`DENSE_LAYER_KERNELS`)."""
        m, lat = self.model, self._kernel_latency_s
        L, moe = m.num_layers, m.num_moe_layers
        dense = L - moe
        shared = 1 if m.num_shared_experts else 0
        attn = MLA_LAYER_KERNELS if m.is_mla else {"gemm": 2, "elementwise": 4}
        gemms = (L * attn["gemm"] + dense * 2
                 + moe * (MOE_LAYER_KERNELS["gemm"] + shared * MOE_LAYER_KERNELS["shared_gemm"]))
        elementwise = L * attn["elementwise"] + dense + moe * shared + 1
        self._lin_floor_s = lat * gemms
        self._attn_floor_s = lat * L
        self._elem_floor_s = lat * elementwise

    # -- the terms ---------------------------------------------------------------------------------
    def _experts_s(self, tokens: int) -> float:
        """Routed experts of every MoE layer for a rank's ``tokens`` tokens, on the busiest GPU: every
        data-parallel rank's tokens reach the experts, each rank assumed as busy as this one."""
        return self._routed_s(tokens * self.parallel.data)

    def _routed_s(self, tokens: int) -> float:
        """Routed experts of every MoE layer over ``tokens`` tokens (all data-parallel ranks'), on
        the busiest GPU."""
        if not self._moe_layers or tokens == 0:
            return 0.0
        m = self.model
        touched = min(self._experts_local,
                      self._expert_share * expected_distinct_experts(tokens, m.num_experts, m.num_experts_per_tok))
        pairs = tokens * m.num_experts_per_tok * self._expert_share
        flops = 2.0 * self._moe_layers * pairs * self._expert_params_gpu
        nbytes = self._moe_layers * (touched * self._expert_params_gpu * self.precision.linear_weight_bytes
                                     + pairs * self._expert_act_bytes_per_pair)
        return max(flops / self._gemm_rate(pairs / touched), nbytes / self._mem_bw)

    def _linear_s(self, tokens: int, sampled: int) -> float:
        return super()._linear_s(tokens, sampled) + self._experts_s(tokens)

    def _prefill_attention_s(self, new: int, ctx: int) -> float:
        full, slide = self._attn_share
        pairs = new * ctx + new * (new + 1) / 2.0
        t = full * max(self._prefill_flops_per_pair * pairs / self._attn_c,
                       self._kv_bytes_per_token * (ctx + new) / self._attn_m)
        if slide:
            keys = min(ctx + new, self._window + new)
            t += slide * max(self._prefill_flops_per_pair * window_pairs(new, ctx, self._window) / self._attn_c,
                             self._kv_bytes_per_token * keys / self._attn_m)
        if ctx and self._prefill_decompress_flops_per_token:
            t += self._prefill_decompress_flops_per_token * ctx / self._gemm_rate(ctx)
        return t

    def _decode_attention_s(self, num_decodes: int, context: float) -> float:
        t = self._decode_attn_slope * context
        if self._decode_window_slope:
            t += self._decode_window_slope * min(context, num_decodes * self._window)
        return t

    # -- the cost-model protocol -------------------------------------------------------------------
    def breakdown(self, shape: BatchShape) -> StepTime:
        prefill_tokens, num_decodes = shape.prefill_tokens, shape.num_decodes
        tokens = sum(prefill_tokens) + num_decodes
        if tokens == 0:
            return StepTime(overhead_s=self._overhead_step)
        attn = sum(self._prefill_attention_s(n, c)
                   for n, c in zip(prefill_tokens, shape.prefill_computed_tokens, strict=False))
        attn += self._decode_attention_s(num_decodes, shape.decode_context_tokens) + self._attn_floor_s
        seqs = len(prefill_tokens) + num_decodes
        return StepTime(linear_s=self._linear_s(tokens, shape.num_sampled_tokens), attention_s=attn,
                        elementwise_s=self._elem_bytes_per_token * tokens / self._mem_bw + self._elem_floor_s,
                        comm_s=self._comm_fixed_s + self._comm_s_per_token * tokens,
                        overhead_s=self._overhead_step + self._overhead_seq * seqs + self._overhead_tok * tokens)

    def step_time_s(self, shape: BatchShape) -> float:
        return self.breakdown(shape).total_s

    def group_step_time_s(self, shapes: Sequence[BatchShape]) -> float:
        """Data-parallel ranks in lockstep (:func:`~simulator.cost.base.lockstep_time_s`): the routed
        experts over every rank's tokens, their collectives at the busiest rank's or the group's."""
        if self.parallel.data == 1:
            return slowest_rank_s(self.step_time_s, shapes)
        return lockstep_time_s(self.step_time_s, self._shared_s, shapes, self.parallel.data)

    def _shared_s(self, rank_tokens: int, group_tokens: int) -> float:
        """The part of a step the data-parallel ranks share: the routed experts over ``group_tokens``
        and the MoE layers' collectives: the all-to-all of ``rank_tokens`` per rank (EP), or the
        all-gather and reduce-scatter of ``group_tokens`` (EP 1)."""
        return (self._routed_s(group_tokens) + self._a2a_fixed_s + self._a2a_s_per_token * rank_tokens
                + self._gather_fixed_s + self._gather_s_per_token * group_tokens)

    def stage_times_s(self, shape: BatchShape) -> list[float]:
        """The step split over the pipeline's stages (class docstring): the per-layer terms by each
        stage's layers, each boundary's send to the stage before it, the CPU overhead to the first
        stage, the final norm and the LM head to the last."""
        bd = self.breakdown(shape)
        layers = self._stage_layers
        if len(layers) == 1:
            return [bd.total_s]
        tokens = shape.num_tokens
        if tokens == 0:
            return [bd.total_s] + [0.0] * (len(layers) - 1)
        sends = [fixed + per_token * tokens for fixed, per_token in self._sends]
        sampled = shape.num_sampled_tokens
        last = self._kernel_latency_s           # the final norm's kernel
        if sampled:
            last += max(self._head_flops_per_row * sampled / self._gemm_rate(sampled),
                        self._head_weight_bytes / self._mem_bw) + self._kernel_latency_s
        return split_stages(bd.total_s, bd.overhead_s, sends, last, layers)

    def decode_run_times(self, num_decodes: int, decode_context_tokens: np.ndarray) -> np.ndarray:
        ctx = np.asarray(decode_context_tokens, dtype=np.float64)
        t = self._decode_fixed_s(num_decodes) + self._decode_attn_slope * ctx
        if self._decode_window_slope:
            t = t + self._decode_window_slope * np.minimum(ctx, num_decodes * self._window)
        return t

    def decode_step_time_s(self, num_decodes: int, decode_context_tokens: float) -> float:
        return self._decode_fixed_s(num_decodes) + self._decode_attention_s(num_decodes, decode_context_tokens)

    def verify_step_fn(self, num_seqs: int, num_query_tokens: int) -> VerifyStep | None:
        return None                     # the general terms: verification goes through step_time_s

    def decode_step_fn(self, num_decodes: int) -> Callable[[float], float] | None:
        if self._decode_window_slope:
            return None                 # decode_run_times and decode_step_time_s add the window term apart
        return super().decode_step_fn(num_decodes)

    def decode_affine(self, num_decodes: int) -> tuple[float, float] | None:
        if self._decode_window_slope:
            return None                 # min(context, decodes x window) is not affine
        return self._decode_fixed_s(num_decodes), self._decode_attn_slope


def roofline_cost_model(profile: HardwareProfile, model: ModelSpec, tensor_parallel_size: int = 1,
                        precision: Precision | None = None, parallel: Parallelism | None = None) -> RooflineCostModel:
    """The roofline of ``model`` on ``profile``: a :class:`RooflineCostModel`, or the
    :class:`GeneralRooflineCostModel` when the model or the split needs its terms
    (:func:`needs_general_roofline`)."""
    cls = GeneralRooflineCostModel if needs_general_roofline(model, parallel) else RooflineCostModel
    return cls(profile, model, tensor_parallel_size, precision, parallel)


# Registered here rather than by class decorators: the compiled engine (setup.py) builds a
# decorated class as a plain Python class, with slower attribute access.
register("constant")(ConstantCostModel)
register("roofline")(roofline_cost_model)
