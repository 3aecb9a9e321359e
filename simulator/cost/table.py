"""The ``table`` cost model: predicts engine steps from per-op kernel tables (measured or imported).

One step is the sum, over the model's layers, of the ops a serving engine runs (per
tensor-parallel shard), each looked up in the profile's table (:mod:`simulator.cost.op_table`):

* GEMMs (QKV, O, gate/up, down; the LM head for the sampled rows): time vs token count for the
  shard's ``n x k``, interpolated in log-log space between measured token counts;
* prefill attention per request: chunk x cached context, log-log along the chunk within each
  measured context and log(1 + context) between contexts;
* decode attention: per measured batch, piecewise linear in the context sum between the measured
  contexts; between measured batches, linear in the batch at the same context sum
  (:class:`~simulator.cost.op_table.DecodeCurves`);
* RMSNorm (2 per layer + final), rotary, SiLU-and-multiply, residual adds (2 per layer), KV-cache
  writes, and sampling per sampled row: time vs tokens for the op's width;
* tensor-parallel all-reduces (2 per layer) from measured ``all_reduce`` rows at the TP degree,
  else from the profile's interconnect.

Outside the measured range a curve is extended from its edge by the roofline ratio (a roofline
whose efficiency is fitted at the edge). A shape that was not measured (another model, another TP
degree) is scaled from the nearest measured shape by the roofline ratio of the two shapes; an op
family with no rows at all falls back to the datasheet roofline of the profile (its peaks and
efficiencies), and :attr:`TableCostModel.sources` says which ops did. Engine overhead is explicit:
``overhead.step_s`` per step plus ``overhead.per_seq_s`` per request (kernel tables do not
measure the scheduler).
"""
from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import numpy as np

from simulator.cost.base import BatchShape, DecodeSteps, StepTime, VerifyStep, register, split_stages
from simulator.cost.derived import BaseCostModel
from simulator.cost.op_rows import load_rows
from simulator.cost.op_table import (
    TABLE_SCHEMA,
    DecodeCurves,
    LogCurve,
    OpRows,
    compatible_dtype,
    gemm_roof,
    points,
    prefill_pairs,
    prefill_roof,
)
from simulator.cost.piecewise_decode import PiecewiseDecode
from simulator.errors import ScenarioError
from simulator.scenario.models import DTYPE_BYTES, ModelSpec
from simulator.scenario.profiles import HardwareProfile

#: Elementwise ops per layer (the final RMSNorm adds one more per step).
PER_LAYER = {"rmsnorm": 2, "rotary": 1, "silu_mul": 1, "residual_add": 2, "kv_write": 1}

Fn = Callable[[float], float]

DECODE_QUERY_MAX = 8
"""A step entry of at most this many query tokens (a speculative verification's ``k + 1``, a prompt's
short last chunk) is priced as that many decode rows over its context, in the step's one decode
attention call: the engines run such requests through their decode kernels (vLLM's MLA and
FlashInfer backends treat a request of up to ``1 + num_speculative_tokens`` query tokens as a
decode; FlashMLA and FlashInfer's decode kernels take several query tokens per request). A
prefill kernel per request, as a longer chunk is priced, would pay one kernel's fixed time for
each."""


def _nearest(candidates: OpRows, cols: list[str], target: list[float]) -> np.void:
    """The row of ``candidates`` closest to ``target`` in log space over ``cols`` (the first of equals)."""
    vals = np.log(np.maximum(np.stack([candidates[c].astype(np.float64) for c in cols], axis=1), 1.0))
    dist = np.abs(vals - np.log(np.maximum(np.array(target, dtype=np.float64), 1.0))).sum(axis=1)
    return candidates[int(np.argmin(dist))]


def all_reduce_curve(rows: OpRows) -> Fn:
    """An all-reduce's time by message bytes from measured ``all_reduce`` rows of one world size
    (below the smallest message measured, the smallest's time)."""
    pts = points(rows, "message_bytes")
    x0 = float(pts[0].min())
    return LogCurve(*pts, lambda v: np.maximum(v, x0)).scalar


@register("table")
class TableCostModel(BaseCostModel):
    """Per-op table interpolation over one tensor-parallel shard (see module docstring).

    Raises:
        ScenarioError: the table is missing, corrupted or of another schema; it has no rows for
            the model's dtype; or an op family is absent and the profile has no peaks to fall
            back on.
    """

    def __init__(self, profile: HardwareProfile, model: ModelSpec, tensor_parallel_size: int = 1) -> None:
        assert profile.table is not None
        df = load_rows(profile.table, sha256=profile.table_sha256,
                       schema=profile.table_schema if profile.table_schema is not None else TABLE_SCHEMA)
        dtypes = sorted(set(df["dtype"].tolist()))
        usable = [d for d in dtypes if d == model.dtype] or [d for d in dtypes if compatible_dtype(d, model.dtype)]
        if not dtypes:
            usable = [model.dtype]      # an empty table: every op falls back to the roofline
        if not usable:
            raise ScenarioError("hardware.table", dtypes, f"no rows for the model's dtype {model.dtype!r}; "
                                f"calibrate with --dtype {model.dtype} or serve the model in {dtypes[0]}")
        df = df[df["dtype"] == usable[0]]
        self.dtype = usable[0]
        tp = tensor_parallel_size
        self.model, self.profile, self.tp = model, profile, tp
        self.L = model.num_layers
        self.abytes = 2.0 if model.dtype in ("fp8", "int8", "int4") else DTYPE_BYTES[model.dtype]
        self.peak, self.bw = self._peaks(df)
        self._decode_slope: float | None = None
        """Decode attention per layer per context token when it is the roofline (exactly affine)."""
        self.sources: dict[str, str] = {}
        """Op -> how it is predicted: ``measured``, ``scaled from <shape>``, or ``roofline``."""
        shapes, widths = self._layer_widths(model, tp)
        shapes["lm_head"] = (model.vocab_size / tp, model.hidden_size)
        gemm_rows = df[df["family"] == "gemm"]
        self._gemm: dict[str, Fn] = {op: self._gemm_fn(gemm_rows, op, n, k) for op, (n, k) in shapes.items()}
        self._elem: dict[str, Fn] = {op: self._elementwise_fn(df, op, w) for op, w in widths.items()}
        self._prefill = self._prefill_fn(df[df["family"] == "attn_prefill"])
        self._decode = self._decode_fn(df[df["family"] == "attn_decode"])
        self._comm = self._comm_fn(df[df["family"] == "comm"])
        self._init_caches(profile)

    def _layer_widths(self, model: ModelSpec, tp: int) -> tuple[dict[str, tuple[float, float]], dict[str, float]]:
        """One tensor-parallel rank's share of a layer: sets ``heads`` and ``kv_heads`` (a KV head is
        replicated, never split, past as many ranks as KV heads) and returns the (n, k) of the layer's
        four GEMMs and the width of each elementwise op."""
        h, hd = model.hidden_size, model.head_dim
        self.heads = model.num_attention_heads / tp
        self.kv_heads = max(1.0, model.num_key_value_heads / tp)
        q, kv, inter = self.heads * hd, self.kv_heads * hd, model.intermediate_size / tp
        shapes = {"qkv_proj": (q + 2 * kv, h), "o_proj": (h, q), "gate_up_proj": (2 * inter, h),
                  "down_proj": (h, inter)}
        widths = {"rmsnorm": h, "rotary": q + kv, "silu_mul": inter, "residual_add": h, "kv_write": 2 * kv,
                  "sampling": model.vocab_size}
        return shapes, widths

    def _init_caches(self, profile: HardwareProfile) -> None:
        """The profile's CPU overhead terms, and empty caches of the per-step pieces."""
        self._step_s, self._seq_s = profile.overhead.step_s, profile.overhead.per_seq_s
        self._tok_s = profile.overhead.per_token_s
        self._tok_cache: dict[int, tuple[float, float, float]] = {}
        self._samp_cache: dict[int, tuple[float, float]] = {}
        self._pf_cache: dict[tuple[int, int], float] = {}
        self._fixed_cache: dict[int, tuple[float, float, float, float]] = {}
        self._affine_cache: dict[int, tuple[float, float]] = {}
        self._step_fns: dict[int, Callable[[float], float]] = {}
        self._steps_fns: dict[int, DecodeSteps] = {}
        self._attn_fns: dict[int, Callable[[Any], float]] = {}
        self._stage_layers: list[int] = []
        """Layers of each pipeline stage (empty: one stage; :meth:`stage_times_s`)."""
        self._sends: list[tuple[float, float]] = []
        """Each stage boundary's send of the hidden states: ``(fixed, per token)`` seconds, in ``comm``."""

    def _sends_s(self, tokens: int) -> float:
        """Every stage boundary's send of ``tokens`` tokens' hidden states and residual."""
        return sum(fixed + per_token * tokens for fixed, per_token in self._sends)

    # -- construction -------------------------------------------------------------------------------
    def _peaks(self, df: OpRows) -> tuple[float, float]:
        """Peak FLOP/s and bandwidth for roofline ratios and fallbacks: the profile's, else the best
        the table itself shows."""
        p = self.profile
        peak = p.peak_flops_for(self.model.dtype) if p.peak_flops else None
        bw = p.memory_bandwidth_bytes_per_s
        g = df[df["family"] == "gemm"]
        if peak is None and len(g):
            peak = float((2.0 * g["tokens"] * g["n"] * g["k"] / g["median_s"]).max())
        e = df[df["family"] == "elementwise"]
        if bw is None and len(e):
            bw = float((3.0 * e["tokens"] * e["width"] * self.abytes / e["median_s"]).max())
        return float(peak or 1e12), float(bw or 1e11)

    def _need_roofline(self, what: str) -> None:
        p = self.profile
        if not p.peak_flops or p.memory_bandwidth_bytes_per_s is None:
            raise ScenarioError("hardware.table", p.table, f"has no {what} rows and the profile has no "
                                "peak_flops/memory_bandwidth_bytes_per_s to fall back on")

    def _gemm_fn(self, rows: OpRows, op: str, n: float, k: float) -> Fn:
        roof = gemm_roof(n, k, self.peak, self.bw, self.abytes)
        if rows.size == 0:
            self._need_roofline("gemm")
            eff = self.profile.efficiency
            self.sources[op] = "roofline"
            lat = eff.kernel_latency_s
            return lambda m: lat + max(2.0 * m * n * k / (self.peak * eff.gemm_max * m / (m + eff.gemm_half_tokens)),
                                       (n * k + m * (n + k)) * self.abytes / (self.bw * eff.memory))
        exact = rows[(rows["n"] == round(n)) & (rows["k"] == round(k))]
        if exact.size == 0:
            near = _nearest(rows, ["n", "k"], [n, k])
            exact = rows[(rows["n"] == near["n"]) & (rows["k"] == near["k"])]
            n0, k0 = float(near["n"]), float(near["k"])
            self.sources[op] = f"scaled from {int(n0)}x{int(k0)}"
            base_roof = gemm_roof(n0, k0, self.peak, self.bw, self.abytes)
        else:
            self.sources[op] = "measured"
            base_roof = roof
        pts = points(exact)
        curve = LogCurve(*pts, base_roof)
        if base_roof is roof:
            return curve.scalar
        return lambda m: curve.scalar(m) * float(roof(np.float64(m)) / base_roof(np.float64(m)))

    def _elementwise_fn(self, df: OpRows, op: str, width: float) -> Fn:
        rows = df[df["op"] == op]
        if rows.size == 0:
            self._need_roofline(op)
            self.sources[op] = "roofline"
            rate = 3.0 * width * self.abytes / (self.bw * self.profile.efficiency.memory)
            lat = self.profile.efficiency.kernel_latency_s
            return (lambda t: lat + rate * t) if lat else (lambda t: rate * t)
        exact = rows[rows["width"] == round(width)]
        scale = 1.0
        if exact.size == 0:
            w0 = float(_nearest(rows, ["width"], [width])["width"])
            exact, scale = rows[rows["width"] == w0], width / w0
            self.sources[op] = f"scaled from width {int(w0)}"
        else:
            self.sources[op] = "measured"
        pts = points(exact)
        curve = LogCurve(*pts, lambda x: np.asarray(x, np.float64))
        return (lambda t: curve.scalar(t) * scale) if scale != 1.0 else curve.scalar

    def _head_rows(self, rows: OpRows, per: str) -> tuple[OpRows, float, str]:
        """Rows for this shard's heads, or the nearest measured heads and the ratio to scale by."""
        hd = self.model.head_dim
        exact = rows[(rows["num_heads"] == round(self.heads)) & (rows["num_kv_heads"] == round(self.kv_heads))
                     & (rows["head_dim"] == hd)]
        if exact.size:
            return exact, 1.0, "measured"
        near = _nearest(rows, ["num_heads", "num_kv_heads", "head_dim"], [self.heads, self.kv_heads, hd])
        sel = rows[(rows["num_heads"] == near["num_heads"]) & (rows["num_kv_heads"] == near["num_kv_heads"])
                   & (rows["head_dim"] == near["head_dim"])]
        if per == "q":
            ratio = self.heads * hd / float(near["num_heads"] * near["head_dim"])
        else:
            ratio = self.kv_heads * hd / float(near["num_kv_heads"] * near["head_dim"])
        label = f"scaled from {int(near['num_heads'])}/{int(near['num_kv_heads'])} heads x {int(near['head_dim'])}"
        return sel, ratio, label

    def _prefill_fn(self, rows: OpRows) -> Callable[[int, int], float]:
        hd, L = self.model.head_dim, 1
        if rows.size == 0:
            self._need_roofline("attn_prefill")
            eff = self.profile.efficiency
            self.sources["attn_prefill"] = "roofline"
            flops, kvb = 4.0 * self.heads * hd, 2.0 * self.kv_heads * hd * self.abytes
            lat = eff.kernel_latency_s
            return lambda q, c: lat + L * max(flops * float(prefill_pairs(q, c)) / (self.peak * eff.attention_compute),
                                        kvb * (c + q) / (self.bw * eff.attention_memory))
        rows = rows[rows["batch"] == 1] if (rows["batch"] == 1).any() else rows
        sel, ratio, label = self._head_rows(rows, "q")
        self.sources["attn_prefill"] = label
        contexts = np.array(sorted(set(sel["context"].tolist())), dtype=np.float64)
        first = sel[0]
        roof = prefill_roof(float(first["num_heads"]), float(first["num_kv_heads"]), float(first["head_dim"]),
                            self.peak, self.bw, self.abytes)

        def ctx_ratio(q: int, c: float, c0: float) -> float:
            return float(roof(q, c) / roof(q, c0))

        cols = []
        for c in contexts:
            pts = points(sel[sel["context"] == c])
            cols.append(LogCurve(*pts,
                                 lambda q, c=c: roof(q, c)))  # type: ignore[misc]
        lc = np.log1p(contexts)

        def fn(q: int, c: int) -> float:
            if c >= contexts[-1] or len(contexts) == 1:
                j = len(contexts) - 1 if c >= contexts[-1] else 0
                t = cols[j].scalar(q) * ctx_ratio(q, c, contexts[j])
            elif c <= contexts[0]:
                t = cols[0].scalar(q) * ctx_ratio(q, c, contexts[0])
            else:
                i = int(np.searchsorted(contexts, c, side="right")) - 1
                w = (math.log1p(c) - lc[i]) / (lc[i + 1] - lc[i])
                t = math.exp((1 - w) * math.log(cols[i].scalar(q)) + w * math.log(cols[i + 1].scalar(q)))
            return t * ratio
        return fn

    def _decode_fn(self, rows: OpRows) -> Callable[[int, float | np.ndarray], np.ndarray]:
        """One layer's decode attention over ``n`` sequences at context sums ``s`` (an array)."""
        hd = self.model.head_dim
        if rows.size == 0:
            self._need_roofline("attn_decode")
            eff = self.profile.efficiency
            self.sources["attn_decode"] = "roofline"
            slope = max(4.0 * self.heads * hd / (self.peak * eff.attention_compute),
                        2.0 * self.kv_heads * hd * self.abytes / (self.bw * eff.attention_memory))
            self._decode_slope = slope
            lat = eff.kernel_latency_s
            return lambda n, s: lat + slope * np.asarray(s, dtype=np.float64)
        sel, ratio, label = self._head_rows(rows, "kv")
        self.sources["attn_decode"] = label
        curves = DecodeCurves.fit(sel)
        return lambda n, s: curves(n, s) * ratio

    def _comm_fn(self, rows: OpRows) -> Fn:
        tp = self.tp
        if tp == 1:
            return lambda nbytes: 0.0
        sel = rows[rows["world_size"] == tp]
        if sel.size:
            self.sources["all_reduce"] = "measured"
            return all_reduce_curve(sel)
        ic = self.profile.interconnect
        if ic is None:
            raise ScenarioError("hardware.interconnect", None, f"tensor_parallel_size={tp} needs measured "
                                f"all_reduce rows for {tp} devices in the table or an interconnect in the profile")
        self.sources["all_reduce"] = "interconnect (datasheet)"
        return lambda nbytes: ic.latency_s + 2.0 * (tp - 1) / tp * nbytes / ic.bandwidth_bytes_per_s

    # -- per-step pieces (cached: a run sees few distinct shapes) -----------------------------------
    def _per_tokens(self, tokens: int) -> tuple[float, float, float]:
        got = self._tok_cache.get(tokens)
        if got is None:
            g, e = self._gemm, self._elem
            lin = self.L * (g["qkv_proj"](tokens) + g["o_proj"](tokens) + g["gate_up_proj"](tokens)
                            + g["down_proj"](tokens))
            elem = self.L * sum(count * e[op](tokens) for op, count in PER_LAYER.items()) + e["rmsnorm"](tokens)
            comm = 2 * self.L * self._comm(tokens * self.model.hidden_size * self.abytes)
            if self._sends:
                comm += self._sends_s(tokens)
            got = self._tok_cache[tokens] = (lin, elem, comm)
        return got

    def _per_sampled(self, rows: int) -> tuple[float, float]:
        got = self._samp_cache.get(rows)
        if got is None:
            got = self._samp_cache[rows] = (self._gemm["lm_head"](rows), self._elem["sampling"](rows))
        return got

    def _prefill_s(self, q: int, c: int) -> float:
        got = self._pf_cache.get((q, c))
        if got is None:
            got = self._pf_cache[(q, c)] = self.L * self._prefill(q, c)
        return got

    def _decode_attn(self, n: int, s: float | np.ndarray) -> np.ndarray:
        return self.L * self._decode(n, s)

    def _decode_attn_fn(self, n: int) -> Callable[[Any], float]:
        """One step's decode attention over ``n`` sequences (all layers) as a function of its context
        sum: ``float(self._decode_attn(n, s))``, through the table's scalar function where it has one
        (the same float, tested)."""
        got = self._attn_fns.get(n)
        if got is None:
            decode, layers = self._decode, self.L
            if isinstance(decode, PiecewiseDecode):
                attn = decode.scalar_fn(n)
                got = self._attn_fns[n] = lambda s: layers * attn(float(s))
            else:
                got = self._attn_fns[n] = lambda s: float(self._decode_attn(n, s))
        return got

    # -- the CostModel interface --------------------------------------------------------------------
    def _terms(self, shape: BatchShape, tokens: int) -> tuple[float, float, float, float, float]:
        """(linear, attention, elementwise, comm, overhead) seconds of a step of ``tokens`` > 0 tokens."""
        # The caches are read here before the methods that fill them are called (the engine's hot path).
        lin, elem, comm = self._tok_cache.get(tokens) or self._per_tokens(tokens)
        num_sampled, num_decodes = shape.num_sampled_tokens, shape.num_decodes
        if num_sampled:
            head, sample = self._samp_cache.get(num_sampled) or self._per_sampled(num_sampled)
            lin, elem = lin + head, elem + sample
        attn = 0.0
        pf_cache = self._pf_cache
        rows, rows_ctx = num_decodes, shape.decode_context_tokens
        for q, c in zip(shape.prefill_tokens, shape.prefill_computed_tokens, strict=False):
            if q > DECODE_QUERY_MAX:
                t = pf_cache.get((q, c))
                attn += self._prefill_s(q, c) if t is None else t
            elif q:                          # a few query tokens: decode rows (module docstring)
                rows += q
                rows_ctx += q * c + q * (q + 1) // 2
        if rows:
            attn += (self._attn_fns.get(rows) or self._decode_attn_fn(rows))(rows_ctx)
        seqs = len(shape.prefill_tokens) + num_decodes
        overhead = self._step_s + self._seq_s * seqs + self._tok_s * tokens
        return lin, attn, elem, comm, overhead

    def breakdown(self, shape: BatchShape) -> StepTime:
        tokens = sum(shape.prefill_tokens) + shape.num_decodes
        if tokens == 0:
            return StepTime(overhead_s=self._step_s)
        lin, attn, elem, comm, overhead = self._terms(shape, tokens)
        return StepTime(linear_s=lin, attention_s=attn, elementwise_s=elem, comm_s=comm, overhead_s=overhead)

    def step_time_s(self, shape: BatchShape) -> float:
        # ``breakdown(shape).total_s`` without building the StepTime (the engine's hot path); the
        # terms are summed in StepTime.total_s's order, so both give the same float.
        tokens = sum(shape.prefill_tokens) + shape.num_decodes
        if tokens == 0:
            return self._step_s
        lin, attn, elem, comm, overhead = self._terms(shape, tokens)
        return lin + attn + elem + comm + overhead

    def stage_times_s(self, shape: BatchShape) -> list[float]:
        """The step split over the pipeline's stages (:func:`~simulator.cost.base.split_stages`): the
        per-layer ops by each stage's layers, the sends between stages, the CPU overhead to the first,
        the final norm, the LM head and sampling to the last."""
        layers = self._stage_layers
        if len(layers) <= 1:
            return [self.step_time_s(shape)]
        bd = self.breakdown(shape)
        tokens = shape.num_tokens
        if tokens == 0:
            return [bd.total_s] + [0.0] * (len(layers) - 1)
        last = self._elem["rmsnorm"](tokens)
        if shape.num_sampled_tokens:
            head, sample = self._per_sampled(shape.num_sampled_tokens)
            last += head + sample
        sends = [fixed + per_token * tokens for fixed, per_token in self._sends]
        return split_stages(bd.total_s, bd.overhead_s, sends, last, layers)

    def verify_step_fn(self, num_seqs: int, num_query_tokens: int) -> VerifyStep | None:
        """:meth:`step_time_s` of a verification step (:data:`~simulator.cost.base.VerifyStep`):
        :meth:`_terms` of ``num_seqs x num_query_tokens`` tokens once, the chunks' attention in the loop."""
        n, q = num_seqs, num_query_tokens
        tokens = n * q
        if not tokens:
            return None
        lin, elem, comm = self._per_tokens(tokens)
        head, sample = self._per_sampled(tokens)
        lin, elem = lin + head, elem + sample
        overhead = self._step_s + self._seq_s * n + self._tok_s * tokens
        if q <= DECODE_QUERY_MAX:           # the n x q query tokens as decode rows (module docstring)
            rows_fn, own = self._attn_fns.get(tokens) or self._decode_attn_fn(tokens), n * (q * (q + 1) // 2)

            def step(computed: list[int]) -> float:
                return lin + rows_fn(q * sum(computed) + own) + elem + comm + overhead
            return step
        prefill_s = self._prefill_s

        def step_chunks(computed: list[int]) -> float:
            attn = 0.0
            for c in computed:
                attn += prefill_s(q, c)
            return lin + attn + elem + comm + overhead
        return step_chunks

    def _decode_fixed(self, n: int) -> tuple[float, float, float, float]:
        """(linear, elementwise, comm, overhead) of a pure-decode step of ``n`` requests."""
        got = self._fixed_cache.get(n)
        if got is None:
            lin, _, elem, comm, overhead = self._terms(BatchShape.decode(n, 0), n)
            got = self._fixed_cache[n] = (lin, elem, comm, overhead)
        return got

    def decode_affine(self, num_decodes: int) -> tuple[float, float] | None:
        """``(a, b)`` with a pure-decode step taking ``a + b x decode_context_tokens`` when decode
        attention is the roofline fallback (then the engine plans decode runs in closed form); None
        for measured decode attention, which is only piecewise affine."""
        if self._decode_slope is None:
            return None
        got = self._affine_cache.get(num_decodes)
        if got is None:
            got = self._affine_cache[num_decodes] = (self.step_time_s(BatchShape.decode(num_decodes, 0)),
                                                     self.L * self._decode_slope)
        return got

    def decode_step_fn(self, num_decodes: int) -> Callable[[float], float] | None:
        """A pure-decode step's duration as a function of its context sum, in plain floats: the
        same float operations as :meth:`decode_run_times` for one entry (None when the decode
        attention has no such scalar form)."""
        got = self._step_fns.get(num_decodes)
        if got is None:
            decode = self._decode
            if not isinstance(decode, PiecewiseDecode):
                return None
            lin, elem, comm, overhead = self._decode_fixed(num_decodes)
            attn, layers = decode.scalar_fn(num_decodes), self.L
            got = self._step_fns[num_decodes] = lambda s: lin + layers * attn(s) + elem + comm + overhead
        return got

    def decode_steps_fn(self, num_decodes: int) -> DecodeSteps | None:
        """:meth:`decode_step_fn`'s steps in one function (:data:`~simulator.cost.base.DecodeSteps`),
        where the decode attention inlines its own (measured tables); None elsewhere."""
        got = self._steps_fns.get(num_decodes)
        if got is None:
            decode = self._decode
            if not isinstance(decode, PiecewiseDecode):
                return None
            lin, elem, comm, overhead = self._decode_fixed(num_decodes)
            got = self._steps_fns[num_decodes] = decode.steps_fn(num_decodes, self.L, lin, elem, comm, overhead)
        return got

    def decode_run_times(self, num_decodes: int, decode_context_tokens: np.ndarray) -> np.ndarray:
        # Element for element the same float operations as step_time_s(BatchShape.decode(n, s)).
        lin, elem, comm, overhead = self._decode_fixed(num_decodes)
        attn = self._decode_attn(num_decodes, np.asarray(decode_context_tokens, dtype=np.float64))
        return lin + attn + elem + comm + overhead

    def decode_step_time_s(self, num_decodes: int, decode_context_tokens: int) -> float:
        return self.step_time_s(BatchShape.decode(num_decodes, decode_context_tokens))

    # -- reporting ------------------------------------------------------------------------------------
    def op_time_s(self, op: str, tokens: int, context: int = 0) -> float:
        """One op's time for one layer (LM head and sampling: once), as the model predicts it: GEMMs
        and elementwise ops over ``tokens`` rows, prefill attention over a ``tokens`` chunk after
        ``context`` cached tokens, decode attention over ``tokens`` sequences of ``context`` each."""
        if op in self._gemm:
            return self._gemm[op](tokens)
        if op in self._elem:
            return self._elem[op](tokens)
        if op == "attn_prefill":
            return self._prefill(tokens, context)
        if op == "attn_decode":
            return float(self._decode(tokens, float(tokens * context)))
        if op == "all_reduce":
            return self._comm(tokens * self.model.hidden_size * self.abytes)
        raise KeyError(op)
