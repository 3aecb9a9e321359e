"""The ``kernel_table`` cost model: the ``table`` model over a kernel database measured in several
precisions, with a roofline fitted to the same GPU's rows for what nobody measured.

The shipped GPU profiles (``hwprofiles/h100-sxm`` and the others built by ``llmplan
import-profile default``) hold NVIDIA AIConfigurator's kernel timings: GEMMs in bf16 and fp8,
attention with a 16-bit and an fp8 KV cache, all-reduce. The interpolation is the ``table``
model's (:mod:`simulator.cost.table`: log-log curves, decode curves per batch, nearest-shape
scaling by the roofline ratio); what this model adds is the choice of rows per op and precision
(:class:`~simulator.scenario.quantization.Precision`, i.e. ``deployment.quantization`` and
``deployment.kv_cache_dtype``):

* the layer GEMMs (QKV, O, gate/up, down) use the rows of their compute dtype: ``fp8`` W8A8 rows
  for ``quantization: fp8`` on a GPU with an fp8 peak, 16-bit rows otherwise; the LM head stays 16-bit;
* attention uses the rows of the KV-cache dtype (an attention row's ``dtype`` is the KV-cache dtype
  it was measured with; the kernels compute in 16 bits);
* elementwise ops, sampling and all-reduce use 16-bit rows.

Where the precision has no rows (``int4`` weights; fp8 on a GPU whose table has none), the 16-bit
measured curve is scaled by the roofline ratio of the two precisions (weight bytes, peak FLOP/s);
decode attention with an fp8 cache but only 16-bit rows reads the 16-bit curve at half the context
(the same bytes), which keeps its measured launch floor. An elementwise op without rows costs
``efficiency.kernel_latency_s + bytes / (bandwidth x efficiency.memory)``, the efficiencies fitted to
the GPU's measured rows when the profile was built (``provenance.roofline_fit``).
:attr:`~simulator.cost.table.TableCostModel.sources` names, per op, which of these applies.
"""
from __future__ import annotations

import functools
import math
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from simulator.cost.analytic import MOE_LAYER_KERNELS, window_pairs
from simulator.cost.base import BatchShape, DecodeSteps, lockstep_time_s, register, slowest_rank_s
from simulator.cost.op_rows import load_rows
from simulator.cost.op_table import (
    TABLE_SCHEMA,
    DecodeCurves,
    LogCurve,
    OpRows,
    compatible_dtype,
    points,
    prefill_roof,
)
from simulator.cost.piecewise_decode import PiecewiseDecode
from simulator.cost.table import Fn, TableCostModel, _nearest, all_reduce_curve
from simulator.errors import ScenarioError
from simulator.scenario.models import ModelSpec
from simulator.scenario.parallel import Link, Parallelism, collective_link, stage_layers, stage_links
from simulator.scenario.profiles import HardwareProfile
from simulator.scenario.quantization import Precision, resolve_precision

Roof = Callable[[Any], Any]
"""Roofline time of a GEMM as a function of its rows ``m`` (a float or an array of them)."""

#: 16-bit activations and outputs (bytes per element) of every GEMM the model scales.
_ACT = 2.0


def _gemm_roof(n: float, k: float, peak: float, bw: float, weight_bytes: float, input_bytes: float) -> Roof:
    """Roofline time of an ``m x n x k`` GEMM: FLOPs at ``peak`` or bytes (weights, inputs, 16-bit
    outputs) at ``bw``, whichever is slower."""
    return lambda m: np.maximum(2.0 * m * n * k / peak,
                                (n * k * weight_bytes + m * k * input_bytes + m * n * _ACT) / bw)


@functools.lru_cache(maxsize=8)
def _monotone_table(path: str, sha256: str | None, schema: int) -> OpRows:
    """A profile's table read, checked and made monotone once per process (the planner builds a
    cost model per simulation; the rows never change while the checksum does not), through the
    per-user cache of :mod:`simulator.cost.op_rows`."""
    return load_rows(path, sha256=sha256, schema=schema, monotone=True)


@functools.lru_cache(maxsize=64)
def _cached(profile_json: str, model_json: str, tensor_parallel_size: int,
            precision: Precision | None, parallel: Parallelism | None) -> KernelTableCostModel:
    model = ModelSpec.model_validate_json(model_json)
    profile = HardwareProfile.model_validate_json(profile_json)
    general = model.is_moe or model.is_mla or model.num_sliding_layers > 0
    if general:
        return GeneralKernelTableCostModel(profile, model, tensor_parallel_size, precision, parallel)
    return KernelTableCostModel(profile, model, tensor_parallel_size, precision, parallel)


@register("kernel_table")
def kernel_table_cost_model(profile: HardwareProfile, model: ModelSpec, tensor_parallel_size: int = 1,
                            precision: Precision | None = None,
                            parallel: Parallelism | None = None) -> KernelTableCostModel:
    """The ``kernel_table`` cost model of ``profile`` for ``model``: one instance per process for
    equal inputs (its lookups are pure functions of them, and building one reads the table).
    ``parallel``: pipeline stages (every model), expert and attention data parallelism (MoE models,
    the only ones that take them)."""
    return _cached(profile.model_dump_json(), model.model_dump_json(), tensor_parallel_size, precision, parallel)


class KernelTableCostModel(TableCostModel):
    """:class:`TableCostModel` with rows chosen per op family and precision (module docstring).

    Raises:
        ScenarioError: the table is missing or corrupted, has no 16-bit rows for a 16-bit model,
            or an op family is absent and the profile has no peaks to fall back on.
    """

    def __init__(self, profile: HardwareProfile, model: ModelSpec, tensor_parallel_size: int = 1,
                 precision: Precision | None = None, parallel: Parallelism | None = None) -> None:
        assert profile.table is not None
        df = _monotone_table(profile.table, profile.table_sha256,
                             profile.table_schema if profile.table_schema is not None else TABLE_SCHEMA)
        p = precision or resolve_precision(model, profile)
        self.precision = p
        act = self._activation_dtype(df, model, p)
        self.dtype = act
        tp = tensor_parallel_size
        self.model, self.profile, self.tp = model, profile, tp
        self.L = model.num_layers
        self.abytes = p.activation_bytes
        self.peak = float(profile.peak_flops_for(act) if profile.peak_flops else 1e12)
        self.bw = float(profile.memory_bandwidth_bytes_per_s or 1e11)
        self._decode_slope: float | None = None
        self.sources: dict[str, str] = {}
        layer, widths = self._layer_widths(model, tp)
        gemm = df[df["family"] == "gemm"]
        self._gemm: dict[str, Fn] = {op: self._layer_gemm(gemm, op, n, k) for op, (n, k) in layer.items()}
        self._gemm["lm_head"] = self._sixteen_bit_gemm(gemm, "lm_head", model.vocab_size / tp, model.hidden_size)
        sixteen = df[df["dtype"] == act]
        self._elem: dict[str, Fn] = {op: self._elementwise_fn(self._rows(df, op=op), op, w)
                                     for op, w in widths.items()}
        kv_dtype = "fp8" if p.kv_bytes == 1.0 else act
        self._prefill = self._prefill_for(df, kv_dtype)
        self._decode = self._decode_for(df, kv_dtype)
        self._comm_rows = sixteen[sixteen["family"] == "comm"]
        self._comm = self._comm_fn(self._comm_rows)
        self._init_caches(profile)
        if parallel is not None and parallel.pipeline > 1:
            self._init_stages(parallel)

    def _init_stages(self, parallel: Parallelism) -> None:
        """Pipeline stages: vLLM's split of the layers, and each boundary's send of the hidden states
        and residual (``2 x hidden x activation bytes`` per token) over the profile's link, as the
        roofline prices it (:func:`~simulator.scenario.parallel.stage_links`)."""
        self._stage_layers = stage_layers(self.L, parallel.pipeline)
        for i, link in enumerate(stage_links(self.profile, parallel)):
            if link is None:
                raise ScenarioError("hardware.inter_node", None,
                                    f"stage boundary {i + 1} of pipeline_parallel_size={parallel.pipeline} leaves "
                                    "the interconnect's domain and the profile has no inter_node link")
            self._sends.append((link.latency_s, 2 * self.model.hidden_size * self.abytes / link.bandwidth_bytes_per_s))

    # -- row selection --------------------------------------------------------------------------------
    @staticmethod
    def _activation_dtype(df: OpRows, model: ModelSpec, p: Precision) -> str:
        """The table's dtype for 16-bit (activation) rows: the model's own, else one of its width."""
        want = p.attention_dtype if p.attention_dtype in ("bf16", "fp16", "fp32") else "bf16"
        dtypes = sorted(set(df["dtype"].tolist()))
        usable = [d for d in dtypes if d == want] or [d for d in dtypes if compatible_dtype(d, want)]
        if not dtypes:
            return want
        if not usable:
            raise ScenarioError("hardware.table", dtypes, f"no rows for the model's dtype {want!r}; "
                                f"serve the model in one of {', '.join(dtypes)}")
        return usable[0]

    def _rows(self, df: OpRows, *, op: str | None = None, family: str | None = None,
              dtype: str | None = None) -> OpRows:
        """Rows of ``op`` (or ``family``) in ``dtype`` (default: the activation dtype), else in a
        dtype of the same width (an fp16 elementwise table serves a bf16 model)."""
        match = df["op"] == op if op is not None else df["family"] == family
        want = dtype or self.dtype
        exact = df[match & (df["dtype"] == want)]
        if exact.size:
            return exact
        sel = df[match]
        alike = sel[np.array([compatible_dtype(str(d), want) for d in sel["dtype"]], dtype=bool)]
        return alike[alike["dtype"] == alike["dtype"][0]] if alike.size else exact

    # -- GEMMs ----------------------------------------------------------------------------------------
    def _curve(self, rows: OpRows, n: float, k: float,
               roof_of: Callable[[float, float], Roof]) -> tuple[Fn, str]:
        """A measured GEMM curve over ``m`` for ``n x k``: the shape's own rows, else the nearest
        measured shape's scaled by the roofline ratio of the two shapes."""
        exact = rows[(rows["n"] == round(n)) & (rows["k"] == round(k))]
        label = "measured"
        n0, k0 = n, k
        if exact.size == 0:
            near = _nearest(rows, ["n", "k"], [n, k])
            n0, k0 = float(near["n"]), float(near["k"])
            exact = rows[(rows["n"] == near["n"]) & (rows["k"] == near["k"])]
            label = f"scaled from {int(n0)}x{int(k0)}"
        pts = points(exact)
        base = roof_of(n0, k0)
        curve = LogCurve(*pts, base)
        if (n0, k0) == (n, k):
            return curve.scalar, label
        target = roof_of(n, k)
        return (lambda m: curve.scalar(m) * float(target(m) / base(m))), label

    def _sixteen_bit_gemm(self, gemm: OpRows, op: str, n: float, k: float) -> Fn:
        rows = self._rows(gemm, family="gemm")
        if rows.size == 0:
            self._need_roofline("gemm")
            eff = self.profile.efficiency
            self.sources[op] = "roofline (profile efficiencies)"
            peak, bw = self.peak * eff.gemm_max, self.bw * eff.memory
            half, lat = eff.gemm_half_tokens, eff.kernel_latency_s
            return lambda m: lat + max(2.0 * m * n * k / (peak * m / (m + half)), (n * k + m * (n + k)) * _ACT / bw)
        fn, label = self._curve(rows, n, k, lambda a, b: _gemm_roof(a, b, self.peak, self.bw, _ACT, _ACT))
        self.sources[op] = label
        return fn

    def _layer_gemm(self, gemm: OpRows, op: str, n: float, k: float) -> Fn:
        """A layer GEMM at the deployment's precision (module docstring)."""
        p = self.precision
        if p.linear_weight_bytes == _ACT:
            return self._sixteen_bit_gemm(gemm, op, n, k)
        w8a8 = p.compute_dtype in ("fp8", "int8")
        peak = float(self.profile.peak_flops_for(p.compute_dtype)) if self.profile.peak_flops else self.peak
        in_bytes = 1.0 if w8a8 else _ACT
        if w8a8:
            own = gemm[gemm["dtype"] == p.compute_dtype]
            if own.size:
                fn, label = self._curve(own, n, k, lambda a, b: _gemm_roof(a, b, peak, self.bw, 1.0, 1.0))
                self.sources[op] = f"{label} ({p.compute_dtype})"
                return fn
        fn16 = self._sixteen_bit_gemm(gemm, op, n, k)
        roof16 = _gemm_roof(n, k, self.peak, self.bw, _ACT, _ACT)
        roofq = _gemm_roof(n, k, peak, self.bw, p.linear_weight_bytes, in_bytes)
        self.sources[op] = f"{self.dtype} rows x roofline ratio ({p.quantization}): " + self.sources[op]
        return lambda m: fn16(m) * float(roofq(m) / roof16(m))

    # -- elementwise: a fixed kernel latency where the table has no rows --------------------------------
    def _elementwise_fn(self, rows: OpRows, op: str, width: float) -> Fn:
        if rows.size:
            return super()._elementwise_fn(rows, op, width)
        self._need_roofline(op)
        eff = self.profile.efficiency
        self.sources[op] = "roofline (fitted memory efficiency + kernel latency)"
        lat, rate = eff.kernel_latency_s, 3.0 * width * self.abytes / (self.bw * eff.memory)
        return lambda t: lat + rate * t

    # -- attention at the KV-cache dtype ----------------------------------------------------------------
    def _prefill_fn(self, rows: OpRows) -> Callable[[int, int], float]:
        """Prefill attention per layer. A table measured without cached prefixes (AIConfigurator's,
        context 0 only) times a chunk of ``q`` tokens after ``c`` cached ones as the no-prefix
        prompt with the same causal work (``L (L + 1) / 2 = q c + q (q + 1) / 2`` pairs), at that
        prompt's measured efficiency, and never less than reading the ``c + q`` tokens' KV at the
        profile's fitted ``attention_memory`` bandwidth. (The roofline ratio from ``c = 0``, the
        ``table`` model's rule, would carry a short chunk's low efficiency to a long context: 5x
        too slow for a 512-token chunk after 5,000 cached tokens.)"""
        if rows.size == 0 or set(rows["context"].tolist()) != {0}:
            return super()._prefill_fn(rows)
        rows = rows[rows["batch"] == 1] if (rows["batch"] == 1).any() else rows
        sel, ratio, label = self._head_rows(rows, "q")
        self.sources["attn_prefill"] = f"{label} (after cached tokens: the no-prefix length of equal work)"
        first = sel[0]
        roof = prefill_roof(float(first["num_heads"]), float(first["num_kv_heads"]), float(first["head_dim"]),
                            self.peak, self.bw, self.abytes)
        pts = points(sel)
        curve = LogCurve(*pts, lambda q: roof(q, 0.0))
        kv_s = (2.0 * self.kv_heads * self.model.head_dim * self.precision.kv_bytes
                / (self.bw * self.profile.efficiency.attention_memory))

        def fn(q: int, c: int) -> float:
            if c <= 0:
                return curve.scalar(q) * ratio
            length = (math.sqrt(8.0 * (q * c + q * (q + 1) / 2.0) + 1.0) - 1.0) / 2.0
            return max(curve.scalar(length) * ratio, kv_s * (c + q))
        return fn

    def _prefill_for(self, df: OpRows, kv_dtype: str) -> Callable[[int, int], float]:
        rows = self._rows(df, family="attn_prefill", dtype=kv_dtype)
        if rows.size == 0 and kv_dtype != self.dtype:
            rows = self._rows(df, family="attn_prefill")
            fn = self._prefill_fn(rows)
            self.sources["attn_prefill"] += f" ({self.dtype} KV rows; {kv_dtype} KV not measured)"
            return fn
        return self._prefill_fn(rows)

    def _decode_fn(self, rows: OpRows) -> Callable[[int, float | np.ndarray], np.ndarray]:
        """The ``table`` model's decode curves, through :class:`PiecewiseDecode`."""
        if rows.size == 0:
            return super()._decode_fn(rows)
        sel, ratio, label = self._head_rows(rows, "kv")
        self.sources["attn_decode"] = label
        return PiecewiseDecode(DecodeCurves.fit(sel), ratio)

    def _decode_for(self, df: OpRows, kv_dtype: str) -> Callable[[int, float | np.ndarray], np.ndarray]:
        rows = self._rows(df, family="attn_decode", dtype=kv_dtype)
        if rows.size or kv_dtype == self.dtype:
            return self._decode_fn(rows)
        ratio = self.precision.kv_bytes / self.abytes
        rows = self._rows(df, family="attn_decode")
        fn = self._decode_fn(rows)
        if self._decode_slope is not None:      # no decode rows at all: the roofline, exactly affine
            self._decode_slope *= ratio
            slope, lat = self._decode_slope, self.profile.efficiency.kernel_latency_s
            return lambda n, s: lat + slope * np.asarray(s, dtype=np.float64)
        self.sources["attn_decode"] += f" ({self.dtype} KV rows at the same bytes; {kv_dtype} KV not measured)"
        return lambda n, s: fn(n, np.asarray(s, dtype=np.float64) * ratio)


#: Row dtypes of the MoE table for each ``deployment.quantization``, in order of preference: fp8
#: block-scaled (DeepSeek-V3's and Qwen3's FP8 checkpoints) before per-tensor fp8; an empty tuple
#: (int8) reads the 16-bit rows scaled by the roofline ratio of the precisions. NVFP4 falls back to the
#: MXFP4 rows where a GPU has none of its own (Hopper, Ada: vLLM runs both 4-bit formats through the
#: same W4A16 Marlin FP4 kernels there; NVFP4's scales make its weights 6% larger, not counted).
MOE_ROW_DTYPES: dict[str, tuple[str, ...]] = {
    "none": ("bf16",), "bf16": ("bf16",), "fp16": ("bf16",), "fp8": ("fp8_block", "fp8"), "int8": (),
    "int4": ("int4",), "mxfp4": ("mxfp4",), "nvfp4": ("nvfp4", "mxfp4"),
}
_MOE_SHAPE = ["n", "k", "num_experts", "top_k", "world_size"]
#: Kernels of one ``moe`` row (vLLM's fused MoE without the router GEMM, a GEMM row of its own).
_FUSED_MOE_KERNELS = MOE_LAYER_KERNELS["gemm"] - 1


def _moe_roof(shape: list[float], peak: float, bw: float, weight_bytes: float) -> Roof:
    """Roofline time of one MoE layer's routed experts over ``T`` tokens for ``shape`` (expert width,
    hidden, experts, top-k, TP: the :data:`_MOE_SHAPE` columns): the FLOPs of ``T x top_k`` (token,
    expert) pairs through a gated MLP of width ``inter / tp``, or the weights of the experts some token
    goes to (``E (1 - (1 - k/E)^T)`` in expectation) plus the activations, whichever is slower."""
    inter, hidden, experts, top_k, tp = shape
    width = inter / tp
    params = 3.0 * hidden * width

    def roof(t: Any) -> Any:
        t = np.asarray(t, dtype=np.float64)
        touched = experts * (1.0 - (1.0 - top_k / experts) ** t)
        flops = 2.0 * t * top_k * params
        nbytes = touched * params * weight_bytes + t * top_k * (2.0 * hidden + 3.0 * width) * _ACT
        return np.maximum(flops / peak, nbytes / bw)
    return roof


def _ep_moe_roof(shape: list[float], peak: float, bw: float, weight_bytes: float, ep: int, share: float) -> Roof:
    """Roofline time of one MoE layer's routed experts over ``T`` tokens on the busiest of ``ep``
    expert-parallel GPUs: ``shape``'s whole experts (width ``inter``), ``E / ep`` of them on each GPU,
    which takes ``share`` of the ``T x top_k`` (token, expert) pairs and of the experts some token
    goes to (at most its own ``E / ep``)."""
    inter, hidden, experts, top_k, _ = shape
    params = 3.0 * hidden * inter
    local = experts / ep

    def roof(t: Any) -> Any:
        t = np.asarray(t, dtype=np.float64)
        touched = np.minimum(local, share * experts * (1.0 - (1.0 - top_k / experts) ** t))
        pairs = t * top_k * share
        flops = 2.0 * pairs * params
        nbytes = touched * params * weight_bytes + pairs * (2.0 * hidden + 3.0 * inter) * _ACT
        return np.maximum(flops / peak, nbytes / bw)
    return roof


def _floored_curve(rows: OpRows, size: str) -> LogCurve:
    """A collective's time by ``size``: log-log between the measured points, the first point's time
    below them (a call's fixed cost), in proportion to the size beyond the last."""
    x, t = points(rows, size)
    x0 = float(x[0])
    return LogCurve(x, t, lambda v: np.maximum(v, x0))


def _a2a_remote_bytes(hidden: int, top_k: int, experts: int, ep: int) -> float:
    """Relative bytes one rank's all-to-all sends per token: its hidden width times the expected number
    of *other* ranks that hold at least one of its ``top_k`` experts (``E / EP`` experts per rank,
    experts chosen uniformly without replacement), the count a DeepEP-style dispatch sends copies to."""
    local = experts / ep
    miss = 1.0
    for i in range(top_k):                  # P(no chosen expert on a given rank)
        miss *= max(experts - local - i, 0.0) / (experts - i)
    return hidden * (ep - 1) * (1.0 - miss)


def _length_of_pairs(pairs: float) -> float:
    """The no-prefix prompt length whose causal attention has ``pairs`` (query, key) pairs."""
    return (math.sqrt(8.0 * pairs + 1.0) - 1.0) / 2.0


class GeneralKernelTableCostModel(KernelTableCostModel):
    """:class:`KernelTableCostModel` for the models beyond the dense Llama shape, from measured rows:

    * **Mixture of experts**: each MoE layer's routed experts are one ``moe`` row curve (vLLM's fused
      MoE: routing, the two grouped GEMMs, the activation and the weighted sum, measured per layer on
      one GPU under AIConfigurator's power-law routing) over the step's tokens, for the model's
      ``hidden x expert width x experts x top-k`` at its tensor-parallel degree and weight dtype
      (:data:`MOE_ROW_DTYPES`). Another shape or TP degree is scaled from the nearest measured one by
      the ratio of the two shapes' MoE rooflines; a dtype without rows reads the 16-bit rows times the
      roofline ratio of the precisions; beyond the measured tokens the curve follows the roofline.
      The router and the shared experts are GEMM rows; dense layers (DeepSeek's first three) are the
      dense model's MLP.
    * **Multi-head latent attention**: the ``mla_prefill`` / ``mla_decode`` rows time the whole
      attention block of one layer (down- and up-projections, norms, rotary, attention over the latent
      cache, output projection), so MLA layers have no separate QKV/O GEMMs, rotary or KV write.
      Rows are chosen by the projections' weight bits (8 under ``quantization: fp8``, else 16) and
      the KV-cache dtype; heads per shard off the grid are scaled in proportion. Prefill after cached
      tokens is the no-prefix prompt of equal causal work (as for dense attention); decode is the
      measured batch x context curves.
    * **Sliding-window layers** (gpt-oss, Mistral): the dense attention rows, in prefill at the
      no-prefix length with the window's (query, key) pairs, in decode at the context sum capped at
      ``decodes x window`` (exact when every context is past the window or none is).

    **Expert parallelism** (``expert_parallel_size`` EP = TP, or TP x DP with ``data_parallel_size``
    DP): the table's MoE rows are measured with the experts' widths split over TP GPUs
    (AIConfigurator's ``moe_tp_size``; its ``moe_ep_size`` > 1 rows are not in the shipped tables),
    so a GPU holding ``E / EP`` whole experts is the measured whole-width curve (TP 1) scaled by the
    ratio of the busiest rank's MoE roofline (:func:`_ep_moe_roof`: ``moe_load_imbalance`` times the
    mean share of the pairs and of the touched experts) to the measured shape's, never below the
    fused MoE's six kernels at the profile's ``kernel_latency_s`` (the scaling would shrink the
    launches too). Each MoE layer's all-reduce becomes an all-to-all dispatch and a combine
    (:meth:`_all_to_all_fn`): with attention data parallelism (DP > 1) inside one interconnect domain,
    the table's measured ``moe_dispatch`` + ``moe_combine`` rows (DeepEP under vLLM, by tokens per
    rank) of the model's hidden size, top-k, experts and EP, else those of the nearest measured ones
    read at the tokens that move the same bytes per rank (:func:`_a2a_remote_bytes`); without them,
    two NCCL ``all_to_all`` rows of the rank's hidden states at EP GPUs. Otherwise (one DP rank, where
    vLLM, SGLang and TensorRT-LLM keep the MoE block's all-reduce and run no all-to-all kernel; EP
    across domains; a table without the rows) each moves ``T x hidden x act_bytes x (EP - 1) / EP``
    bytes per GPU over the interconnect (:func:`~simulator.scenario.parallel.collective_link`, as the
    roofline prices it). ``sources["all_to_all"]`` names which. With DP attention ranks the cost model is one rank's:
    attention, the dense layers, the router and the shared experts over its own ``T`` tokens, the
    routed experts' curve read at ``DP x T`` (every rank assumed as busy as this one); the engine
    runs the ranks in lockstep through :meth:`group_step_time_s`, the curve read at the ranks' actual
    tokens, the all-to-all at the busiest rank's, the slowest rank's own part. With DP ranks and EP 1
    each GPU holds ``1/(TP x DP)`` of every expert's width (the measured rows at that TP) and each
    MoE layer's all-reduce becomes an all-gather and a reduce-scatter of every rank's tokens over the
    ``TP x DP`` GPUs (:meth:`_gather_fn`).

    Pipeline stages are :class:`KernelTableCostModel`'s; an MLA model on a table without MLA rows is
    refused with the datasheet profile as the way out.
    """

    def __init__(self, profile: HardwareProfile, model: ModelSpec, tensor_parallel_size: int = 1,
                 precision: Precision | None = None, parallel: Parallelism | None = None) -> None:
        super().__init__(profile, model, tensor_parallel_size, precision, parallel)
        self.parallel = parallel or Parallelism(tensor_parallel_size)
        self._a2a_link: Link | None = None
        self._shared_cache: dict[tuple[int, int], float] = {}
        if self.parallel.expert > 1:
            self._a2a_link = collective_link(profile, self.parallel.expert)
            if self._a2a_link is None:
                raise ScenarioError("hardware.inter_node", None,
                                    f"expert_parallel_size={self.parallel.expert} spans more GPUs than profile "
                                    f"{profile.name!r}'s interconnect joins and the profile has no inter_node link")
            self.sources["all_to_all"] = f"{self._a2a_link.name or 'link'} bandwidth and latency (not measured)"
        assert profile.table is not None
        df = _monotone_table(profile.table, profile.table_sha256,
                             profile.table_schema if profile.table_schema is not None else TABLE_SCHEMA)
        self._a2a: Fn | None = self._all_to_all_fn(df[df["family"] == "all_to_all"]) if self._a2a_link else None
        self._gather: Fn | None = None
        """With attention DP and tensor-parallel experts (EP 1): one MoE layer's all-gather of every
        rank's tokens and reduce-scatter of the output over the ``TP x DP`` GPUs, by the group's message bytes."""
        if self.parallel.expert == 1 and self.parallel.data > 1 and model.num_moe_layers:
            self._gather = self._gather_fn()
        m, tp, L = model, self.tp, self.L
        h = m.hidden_size
        self._moe_layers = m.num_moe_layers
        self._dense_layers = L - self._moe_layers
        self._mla = m.is_mla
        self._shared = m.num_shared_experts > 0 and self._moe_layers > 0
        self._window = float(m.sliding_window or 0)
        self._slide_layers = m.num_sliding_layers
        self._full_layers = L - self._slide_layers
        gemm = df[df["family"] == "gemm"]
        if self._moe_layers:
            self._moe = self._moe_fn(df[df["family"] == "moe"])
            self._gemm["router"] = self._sixteen_bit_gemm(gemm, "router", m.num_experts, h)
            if self._shared:
                w = m.num_shared_experts * m.expert_intermediate_size / tp
                self._gemm["shared_gate_up"] = self._layer_gemm(gemm, "shared_gate_up", 2 * w, h)
                self._gemm["shared_down"] = self._layer_gemm(gemm, "shared_down", h, w)
                own = self.sources["silu_mul"]
                self._shared_silu = self._elementwise_fn(self._rows(df, op="silu_mul"), "silu_mul", w)
                self.sources["silu_mul (shared experts)"], self.sources["silu_mul"] = self.sources["silu_mul"], own
        if self._mla:
            self._prefill = self._mla_prefill_fn(df)
            self._decode = self._mla_decode_fn(df)
            self._decode_slope = None
            for op in ("qkv_proj", "o_proj", "rotary", "kv_write"):
                self.sources.pop(op, None)
        per_layer = {"rmsnorm": 2 * L, "residual_add": 2 * L, "silu_mul": self._dense_layers}
        if not self._mla:
            per_layer.update(rotary=L, kv_write=L)
        self._elem_counts = {op: float(n) for op, n in per_layer.items() if n}

    # -- the experts ----------------------------------------------------------------------------------
    def _moe_fn(self, rows: OpRows) -> Fn:
        """One MoE layer's routed experts over a step's ``T`` tokens; with ``DP`` attention
        data-parallel ranks, the layer's kernel runs over every rank's tokens, ``DP x T``."""
        layer = self._moe_layer_fn(rows)
        if self.parallel.expert == 1:
            self._moe_group = layer
            if self.parallel.data == 1:
                return layer
            dp1 = float(self.parallel.data)
            return lambda t: layer(t * dp1)
        # The scaled curve shrinks with the rank's share of the weights and pairs; its kernels do not.
        floor = _FUSED_MOE_KERNELS * self.profile.efficiency.kernel_latency_s
        group = self._moe_group = lambda t: max(layer(t), floor)
        dp = float(self.parallel.data)
        return lambda t: group(t * dp)

    def _moe_layer_fn(self, rows: OpRows) -> Fn:
        m, p, tp, par = self.model, self.precision, self.tp, self.parallel
        ep = par.expert
        # With EP the curve to scale is the whole-width one (TP 1) of the model's shape.
        target = [float(m.expert_intermediate_size), float(m.hidden_size), float(m.num_experts),
                  float(m.num_experts_per_tok), float(tp * par.data if ep == 1 else 1)]
        peak_q = float(self.profile.peak_flops_for(p.compute_dtype)) if self.profile.peak_flops else self.peak
        share = min(m.moe_load_imbalance, ep) / ep

        def roof(shape: list[float], peak: float, wbytes: float) -> Roof:
            if ep > 1 and shape is target:      # the goal: one GPU of the expert-parallel group
                return _ep_moe_roof(shape, peak, self.bw, wbytes, ep, share)
            return _moe_roof(shape, peak, self.bw, wbytes)

        def curve_of(sel: OpRows, peak: float, wbytes: float) -> tuple[Fn, str]:
            exact = sel
            for col, v in zip(_MOE_SHAPE, target, strict=True):
                exact = exact[exact[col] == round(v)]
            label, shape = "measured", target
            if exact.size == 0:
                near = _nearest(sel, _MOE_SHAPE, target)
                shape = [float(near[c]) for c in _MOE_SHAPE]
                exact = sel
                for col, v in zip(_MOE_SHAPE, shape, strict=True):
                    exact = exact[exact[col] == v]
                label = ("scaled from {}x{}, {} experts top-{}, TP {}".format(*(int(v) for v in (
                    shape[1], shape[0], shape[2], shape[3], shape[4]))))
            pts = points(exact)
            base = _moe_roof(shape, peak, self.bw, wbytes)
            curve = LogCurve(*pts, base)
            if ep > 1:
                local = m.num_experts // ep
                label += f", one of EP {ep} GPUs ({local} whole expert{'s' if local > 1 else ''}" + (
                    f", {par.data} data-parallel ranks' tokens)" if par.data > 1 else ")")
            elif par.data > 1:
                label += f", widths split TP {tp} x DP {par.data} ways, {par.data} data-parallel ranks' tokens"
                if shape == target:
                    return curve.scalar, label
            elif shape == target:
                return curve.scalar, label
            goal = roof(target, peak, wbytes)
            return (lambda t: curve.scalar(t) * float(goal(t) / base(t))), label

        for dtype in MOE_ROW_DTYPES.get(p.quantization, ()):
            sel = rows[rows["dtype"] == dtype]
            if sel.size:
                fn, label = curve_of(sel, peak_q, p.linear_weight_bytes)
                self.sources["moe"] = f"{label} ({dtype})"
                return fn
        sixteen = rows[rows["dtype"] == "bf16"]
        if sixteen.size == 0:
            self._need_roofline("moe")
            eff = self.profile.efficiency
            lat = eff.kernel_latency_s
            if ep == 1:
                r = _moe_roof(target, peak_q * eff.gemm_max, self.bw * eff.memory, p.linear_weight_bytes)
            else:
                r = _ep_moe_roof(target, peak_q * eff.gemm_max, self.bw * eff.memory, p.linear_weight_bytes, ep, share)
            self.sources["moe"] = "roofline (profile efficiencies + kernel latency)"
            return lambda t: _FUSED_MOE_KERNELS * lat + float(r(t))
        fn16, label = curve_of(sixteen, self.peak, _ACT)
        if p.linear_weight_bytes == _ACT:
            self.sources["moe"] = label
            return fn16
        r16, rq = roof(target, self.peak, _ACT), roof(target, peak_q, p.linear_weight_bytes)
        self.sources["moe"] = f"bf16 rows x roofline ratio ({p.quantization}): {label}"
        return lambda t: fn16(t) * float(rq(t) / r16(t))

    # -- the all-to-all --------------------------------------------------------------------------------
    def _gather_fn(self) -> Fn:
        """An all-gather plus a reduce-scatter over the replica's ``TP x DP`` GPUs, which move a ring
        all-reduce's bytes: the table's measured ``all_reduce`` rows at that many GPUs inside one
        interconnect domain, else the link's bandwidth and latency."""
        n, ic = self.tp * self.parallel.data, self.profile.interconnect
        sel = self._comm_rows[self._comm_rows["world_size"] == n]
        if ic is not None and n <= ic.domain_gpus and sel.size:
            self.sources["moe_gather"] = (f"measured all_reduce rows at {n} GPUs (all-gather and reduce-scatter of "
                                          "every data-parallel rank's tokens)")
            return all_reduce_curve(sel)
        link = collective_link(self.profile, n)
        if link is None:
            raise ScenarioError("hardware.inter_node", None,
                                f"tensor_parallel_size x data_parallel_size = {n} GPUs span more than profile "
                                f"{self.profile.name!r}'s interconnect joins and the profile has no inter_node link")
        self.sources["moe_gather"] = f"{link.name or 'link'} bandwidth and latency over {n} GPUs (not measured)"
        return lambda nbytes: 2.0 * link.latency_s + 2.0 * (n - 1) / n * nbytes / link.bandwidth_bytes_per_s

    def _all_to_all_fn(self, rows: OpRows) -> Fn | None:
        """One MoE layer's dispatch plus combine over a rank's ``T`` tokens from the measured rows, or
        None where the link prices it (class doc); ``sources["all_to_all"]`` says which and why."""
        m, par, ic = self.model, self.parallel, self.profile.interconnect
        ep = par.expert
        link = self.sources["all_to_all"]
        if par.data == 1:
            self.sources["all_to_all"] = (f"{link}: one data-parallel rank, where the engines keep the MoE "
                                          "all-reduce and run no all-to-all kernel")
            return None
        if ic is None or ep > ic.domain_gpus:
            self.sources["all_to_all"] = f"{link}: EP {ep} spans more than one node; the measured rows are one node's"
            return None
        deepep = rows[(rows["op"] == "moe_dispatch") | (rows["op"] == "moe_combine")]
        if deepep.size:
            return self._deepep_fn(deepep)
        nccl = rows[(rows["op"] == "all_to_all") & (rows["world_size"] == ep)]
        if nccl.size == 0:
            return None
        curve = _floored_curve(nccl, "message_bytes")
        per_token = float(m.hidden_size * self.abytes)
        self.sources["all_to_all"] = f"measured NCCL all-to-all on {ep} GPUs, one per dispatch and one per combine"
        return lambda t: 2.0 * curve.scalar(t * per_token)

    def _deepep_fn(self, rows: OpRows) -> Fn:
        """The dispatch and combine curves by tokens per rank at the measured EP size nearest this one,
        of this hidden size, top-k and experts, else of the nearest shape read at ``T x r`` tokens, ``r``
        the ratio of the bytes a rank sends per token (:func:`_a2a_remote_bytes`) here and there."""
        m, ep = self.model, self.parallel.expert
        sizes = np.unique(rows["world_size"]).astype(np.float64)
        ep0 = int(sizes[np.argmin(np.abs(np.log(sizes) - math.log(ep)))])
        rows = rows[rows["world_size"] == ep0]
        target = [float(m.hidden_size), float(m.num_experts_per_tok), float(m.num_experts)]
        near = _nearest(rows, ["width", "top_k", "num_experts"], target)
        h0, k0, e0 = int(near["width"]), int(near["top_k"]), int(near["num_experts"])
        rows = rows[(rows["width"] == h0) & (rows["top_k"] == k0) & (rows["num_experts"] == e0)]
        ratio = (_a2a_remote_bytes(m.hidden_size, m.num_experts_per_tok, m.num_experts, ep)
                 / _a2a_remote_bytes(h0, k0, e0, ep0))
        curves = []
        for op in ("moe_dispatch", "moe_combine"):
            curves.append(_floored_curve(rows[rows["op"] == op], "tokens"))
        dispatch, combine = curves[0].scalar, curves[1].scalar
        label = f"measured all-to-all rows (moe_dispatch + moe_combine), EP {ep0}"
        if (h0, k0, e0, ep0) == (m.hidden_size, m.num_experts_per_tok, m.num_experts, ep):
            self.sources["all_to_all"] = f"{label}, hidden {h0}, top-{k0} of {e0} experts"
            return lambda t: dispatch(t) + combine(t)
        self.sources["all_to_all"] = (f"{label}, scaled from hidden {h0}, top-{k0} of {e0} experts: read at "
                                      f"{ratio:.3g}x the tokens (equal bytes per rank)")
        return lambda t: dispatch(t * ratio) + combine(t * ratio)

    # -- multi-head latent attention ------------------------------------------------------------------
    def _mla_rows(self, df: OpRows, family: str) -> tuple[OpRows, float, str]:
        """The rows of ``family`` for this deployment's projection bits and KV dtype (else the other
        KV dtype, else the other bits), at this shard's heads (else the nearest, and the ratio)."""
        rows = df[df["family"] == family]
        if rows.size == 0:
            raise ScenarioError("hardware", self.profile.name, f"its table has no {family} rows, so "
                                f"{self.model.name}'s multi-head latent attention is not measured on it; use "
                                f"the GPU's datasheet profile ({self.profile.name}-datasheet)")
        p = self.precision
        bits = 8 if p.linear_weight_bytes == 1.0 else 16
        kv = "fp8" if p.kv_bytes == 1.0 else "bf16"
        notes = []
        sel = rows[rows["weight_bits"] == bits]
        if sel.size == 0:
            sel = rows[rows["weight_bits"] == rows["weight_bits"].max()]
            notes.append(f"{int(sel['weight_bits'][0])}-bit projections; {bits}-bit not measured")
        own = sel[sel["dtype"] == kv]
        if own.size == 0:
            own = sel[sel["dtype"] == sel["dtype"][0]]
            notes.append(f"{own['dtype'][0]} KV rows; {kv} KV not measured")
        heads = self.model.num_attention_heads / self.tp
        exact = own[own["num_heads"] == round(heads)]
        ratio, label = 1.0, "measured (MLA block)"
        if exact.size == 0:
            h0 = float(_nearest(own, ["num_heads"], [heads])["num_heads"])
            exact, ratio = own[own["num_heads"] == h0], heads / h0
            label = f"scaled from {int(h0)} heads (MLA block)"
        return exact, ratio, label + (f" ({'; '.join(notes)})" if notes else "")

    def _mla_prefill_fn(self, df: OpRows) -> Callable[[int, int], float]:
        sel, ratio, label = self._mla_rows(df, "mla_prefill")
        self.sources["attn_prefill"] = label + " (after cached tokens: the no-prefix length of equal work)"
        m = self.model
        heads = float(sel["num_heads"][0])
        width = (m.qk_nope_head_dim + m.qk_rope_head_dim + m.v_head_dim) / 2.0
        roof = prefill_roof(heads, heads, width, self.peak, self.bw, self.abytes)
        pts = points(sel)
        curve = LogCurve(*pts, lambda q: roof(q, 0.0))
        kv_s = ((m.kv_lora_rank + m.qk_rope_head_dim) * self.precision.kv_bytes
                / (self.bw * self.profile.efficiency.attention_memory))

        def fn(q: int, c: int) -> float:
            if c <= 0:
                return curve.scalar(q) * ratio
            length = _length_of_pairs(q * c + q * (q + 1) / 2.0)
            return max(curve.scalar(length) * ratio, kv_s * (c + q))
        return fn

    def _mla_decode_fn(self, df: OpRows) -> PiecewiseDecode:
        sel, ratio, label = self._mla_rows(df, "mla_decode")
        self.sources["attn_decode"] = label
        return PiecewiseDecode(DecodeCurves.fit(sel), ratio)

    # -- per-step pieces --------------------------------------------------------------------------------
    def _per_tokens(self, tokens: int) -> tuple[float, float, float]:
        got = self._tok_cache.get(tokens)
        if got is None:
            g, e = self._gemm, self._elem
            lin = 0.0
            if not self._mla:
                lin += self.L * (g["qkv_proj"](tokens) + g["o_proj"](tokens))
            if self._dense_layers:
                lin += self._dense_layers * (g["gate_up_proj"](tokens) + g["down_proj"](tokens))
            elem = sum(n * e[op](tokens) for op, n in self._elem_counts.items()) + e["rmsnorm"](tokens)
            if self._moe_layers:
                moe = self._moe(tokens) + g["router"](tokens)
                if self._shared:
                    moe += g["shared_gate_up"](tokens) + g["shared_down"](tokens)
                    elem += self._moe_layers * self._shared_silu(tokens)
                lin += self._moe_layers * moe
            comm = self._comm_s(tokens)
            if self._sends:
                comm += self._sends_s(tokens)
            got = self._tok_cache[tokens] = (lin, elem, comm)
        return got

    def _comm_s(self, tokens: int) -> float:
        """Two all-reduces per layer over the TP group; with EP, each MoE layer's second one an
        all-to-all dispatch and a combine over the expert-parallel group instead; with attention DP
        and EP 1, an all-gather and a reduce-scatter of every rank's tokens over the ``TP x DP`` GPUs."""
        nbytes = tokens * self.model.hidden_size * self.abytes
        if self._a2a_link is None and self._gather is None:
            return 2 * self.L * self._comm(nbytes)
        return (2 * self.L - self._moe_layers) * self._comm(nbytes) + self._moe_comm_s(tokens,
                                                                                       tokens * self.parallel.data)

    def _moe_comm_s(self, rank_tokens: int, group_tokens: int) -> float:
        """Every MoE layer's collectives where they replace its all-reduce: the all-to-all of a rank's
        tokens (EP), or the all-gather and reduce-scatter of the group's (attention DP, EP 1)."""
        if self._gather is not None:
            return self._moe_layers * self._gather(group_tokens * self.model.hidden_size * self.abytes)
        return self._a2a_s(rank_tokens)

    def _a2a_s(self, tokens: int) -> float:
        """Every MoE layer's dispatch and combine of a rank's ``tokens`` tokens (0 without EP)."""
        link = self._a2a_link
        if link is None:
            return 0.0
        if self._a2a is not None:
            return self._moe_layers * self._a2a(tokens)
        ep = self.parallel.expert
        nbytes = tokens * self.model.hidden_size * self.abytes
        a2a = link.latency_s + nbytes * (ep - 1) / ep / link.bandwidth_bytes_per_s
        return 2 * self._moe_layers * a2a

    def group_step_time_s(self, shapes: Sequence[BatchShape]) -> float:
        """Data-parallel ranks in lockstep (:func:`~simulator.cost.base.lockstep_time_s`): the routed
        experts over every rank's tokens, the all-to-all at the busiest rank's."""
        if self.parallel.data == 1 or not self._moe_layers:
            return slowest_rank_s(self.step_time_s, shapes)
        return lockstep_time_s(self.step_time_s, self._shared_s, shapes, self.parallel.data)

    def _shared_s(self, rank_tokens: int, group_tokens: int) -> float:
        """The part of a step the data-parallel ranks share: every MoE layer's routed experts over
        ``group_tokens`` and its collectives (:meth:`_moe_comm_s`)."""
        key = (rank_tokens, group_tokens)
        got = self._shared_cache.get(key)
        if got is None:
            got = self._shared_cache[key] = (self._moe_layers * self._moe_group(group_tokens)
                                             + self._moe_comm_s(rank_tokens, group_tokens))
        return got

    def _prefill_s(self, q: int, c: int) -> float:
        got = self._pf_cache.get((q, c))
        if got is None:
            t = self._full_layers * self._prefill(q, c)
            if self._slide_layers:
                pairs = window_pairs(q, c, int(self._window))
                t += self._slide_layers * self._prefill(_length_of_pairs(pairs), 0)    # type: ignore[arg-type]
            got = self._pf_cache[(q, c)] = t
        return got

    def _decode_attn(self, n: int, s: float | np.ndarray) -> np.ndarray:
        s = np.asarray(s, dtype=np.float64)
        t = self._full_layers * self._decode(n, s)
        if self._slide_layers:
            t = t + self._slide_layers * self._decode(n, np.minimum(s, float(n * self._window)))
        return t

    def _decode_attn_fn(self, n: int) -> Callable[[Any], float]:
        got = self._attn_fns.get(n)
        if got is None:
            decode = self._decode
            attn = decode.scalar_fn(n) if isinstance(decode, PiecewiseDecode) else (lambda s: float(decode(n, s)))
            full, slide, cap = float(self._full_layers), float(self._slide_layers), float(n * self._window)
            if slide:
                got = self._attn_fns[n] = lambda s: full * attn(float(s)) + slide * attn(min(float(s), cap))
            else:
                got = self._attn_fns[n] = lambda s: full * attn(float(s))
        return got

    def decode_step_fn(self, num_decodes: int) -> Callable[[float], float] | None:
        got = self._step_fns.get(num_decodes)
        if got is None:
            lin, elem, comm, overhead = self._decode_fixed(num_decodes)
            attn = self._decode_attn_fn(num_decodes)
            got = self._step_fns[num_decodes] = lambda s: lin + attn(s) + elem + comm + overhead
        return got

    def decode_steps_fn(self, num_decodes: int) -> DecodeSteps | None:
        return None                     # the engine builds them from decode_step_fn

    def decode_affine(self, num_decodes: int) -> tuple[float, float] | None:
        if self._slide_layers:
            return None                 # min(context, decodes x window) is not affine
        return super().decode_affine(num_decodes)
