"""Per-op kernel tables: the long-format measurements a ``table`` cost model interpolates.

A measured (or imported) profile keeps one tidy CSV beside its ``profile.yaml``: one row per op
and shape, with the median and spread of the kernel's time. Rows are keyed by op *shape* (GEMM
``tokens x n x k``, attention heads x chunk x context, elementwise width x tokens), not by model,
so one table serves any model: a shape that was not measured is scaled from the nearest measured
one by the roofline ratio of the two shapes.

Columns (schema 1; unused shape columns are 0):

==================  ============================================================================
``op``              ``qkv_proj``, ``o_proj``, ``gate_up_proj``, ``down_proj``, ``lm_head``, ``gemm``
                    (GEMMs; ``gemm`` for imported shape-keyed rows);
                    ``attn_prefill``, ``attn_decode``; ``rmsnorm``, ``rotary``, ``silu_mul``,
                    ``residual_add``, ``kv_write`` (elementwise); ``sampling``; ``all_reduce``;
                    ``moe`` (one MoE layer's routed experts: the fused grouped GEMMs over ``tokens`` tokens,
                    ``n`` = an expert's intermediate width, ``k`` = hidden width); ``mla_prefill``,
                    ``mla_decode`` (one multi-head-latent-attention block: its projections and attention,
                    ``num_heads`` per shard, ``head_dim`` = latent + rotary width); ``moe_dispatch``,
                    ``moe_combine`` (one MoE layer's expert-parallel all-to-all, one phase: ``tokens`` per
                    rank, ``width`` = hidden size, ``world_size`` = expert-parallel GPUs, ``num_experts``,
                    ``top_k``); ``all_to_all`` (a plain all-to-all collective of ``message_bytes`` per GPU
                    over ``world_size`` GPUs, ``tokens`` = the message's 16-bit elements)
``family``          ``gemm``, ``attn_prefill``, ``attn_decode``, ``elementwise``, ``sampling``, ``comm``, ``moe``,
                    ``mla_prefill``, ``mla_decode``, ``all_to_all`` (the three all-to-all ops)
``dtype``           compute dtype (``fp32``, ``bf16``, ...)
``tokens``          GEMM rows ``m`` / prefill chunk / elementwise tokens / sampled rows / decode batch
``n``, ``k``        GEMM output and reduction widths (per tensor-parallel shard)
``batch``           sequences (decode batch; 1 for a prefill chunk)
``context``         prefill: tokens already cached before the chunk; decode: KV length per sequence
``num_heads``, ``num_kv_heads``, ``head_dim``   attention shape per shard
``width``           elementwise row width (elements per token)
``message_bytes``, ``world_size``   collectives (``moe``: ``world_size`` is the tensor-parallel degree the
                    experts are split over; ``moe_dispatch``/``moe_combine``: the expert-parallel degree, and
                    ``message_bytes`` one rank's 16-bit hidden states, ``tokens x width x 2``)
``num_experts``, ``top_k``   ``moe``, ``moe_dispatch``, ``moe_combine``: routed experts and experts per token
                    (optional columns, 0 where absent)
``weight_bits``     ``mla_prefill``/``mla_decode``: bits per weight of the module's projections (16: bf16,
                    8: fp8 block-scaled; optional column, 0 where absent)
``median_s``, ``p10_s``, ``p90_s``, ``std_s``, ``repeats``   the timing
==================  ============================================================================

This module reads tables with pandas/numpy only (never torch), checks them against their
profile (schema version, columns, sha256), and provides the interpolants and the leave-one-out
fit report that ``llmplan profiles show`` prints.
"""
from __future__ import annotations

import bisect
import hashlib
import math
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from simulator.errors import ScenarioError
from simulator.scenario.files import read_csv, require_file

if TYPE_CHECKING:  # pragma: no cover
    import pandas as pd

TABLE_SCHEMA = 1
SHAPE_COLUMNS = ("tokens", "n", "k", "batch", "context", "num_heads", "num_kv_heads", "head_dim", "width",
                 "message_bytes", "world_size", "num_experts", "top_k", "weight_bits")
OPTIONAL_COLUMNS = ("num_experts", "top_k", "weight_bits")
"""Shape columns a table may leave out (read as 0): a table of dense ops has no use for them."""
TIME_COLUMNS = ("median_s", "p10_s", "p90_s", "std_s", "repeats")
TABLE_COLUMNS = ("op", "family", "dtype", *SHAPE_COLUMNS, *TIME_COLUMNS)


def written_columns(table: pd.DataFrame) -> list[str]:
    """The columns a table is written with: :data:`TABLE_COLUMNS` less the optional ones it leaves at 0
    (so a table of dense ops keeps the columns, and the bytes, it had before MoE and MLA rows existed)."""
    return [c for c in TABLE_COLUMNS if c not in OPTIONAL_COLUMNS or (c in table and table[c].astype(bool).any())]


GEMM_OPS = ("qkv_proj", "o_proj", "gate_up_proj", "down_proj", "lm_head", "gemm")
ELEMENTWISE_OPS = ("rmsnorm", "rotary", "silu_mul", "residual_add", "kv_write")
OP_FAMILY: dict[str, str] = {
    **{op: "gemm" for op in GEMM_OPS},
    **{op: "elementwise" for op in ELEMENTWISE_OPS},
    "attn_prefill": "attn_prefill", "attn_decode": "attn_decode", "sampling": "sampling",
    "all_reduce": "comm", "moe": "moe", "mla_prefill": "mla_prefill", "mla_decode": "mla_decode",
    "moe_dispatch": "all_to_all", "moe_combine": "all_to_all", "all_to_all": "all_to_all",
}
FAMILIES = ("gemm", "attn_prefill", "attn_decode", "elementwise", "sampling", "comm", "moe", "mla_prefill",
            "mla_decode", "all_to_all")

#: Dtypes whose kernels run at the same width and rate: a table measured in one serves the other.
_DTYPE_CLASS = {"bf16": "16", "fp16": "16", "fp32": "32", "fp8": "8", "int8": "8"}

Roof = Callable[[np.ndarray], np.ndarray]


def file_sha256(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def read_table(path: str | Path, *, sha256: str | None = None, schema: int | None = TABLE_SCHEMA,
               field: str = "hardware.table") -> pd.DataFrame:
    """Read and check a per-op table.

    Raises:
        ScenarioError: a missing file, a schema version this code does not read, a checksum that
            does not match the profile's (the file was edited or truncated), missing columns,
            unknown ops, or times that are not positive finite numbers.
    """
    import pandas as pd
    path = Path(path)
    if schema is not None and schema != TABLE_SCHEMA:
        raise ScenarioError(f"{field}_schema", schema, f"this llmplan reads table schema {TABLE_SCHEMA} only; "
                            "re-run `llmplan calibrate` (or the import) with this version")
    require_file(path, field, str(path), "per-op table (CSV)",
                 missing="per-op table not found (the profile folder is incomplete)")
    if sha256 is not None and file_sha256(path) != sha256:
        raise ScenarioError(field, str(path), "table does not match the sha256 in its profile.yaml: the file "
                            "was edited, truncated or corrupted; re-run `llmplan calibrate`")
    df = read_csv(path, field)
    for c in OPTIONAL_COLUMNS:
        if c not in df.columns:
            df[c] = 0
    missing = [c for c in TABLE_COLUMNS if c not in df.columns]
    if missing:
        raise ScenarioError(field, str(path), f"table lacks columns {', '.join(missing)} (schema {TABLE_SCHEMA} "
                            f"needs {', '.join(TABLE_COLUMNS)})")
    unknown = sorted({str(op) for op in df["op"].tolist()} - set(OP_FAMILY))   # an empty cell: "nan"
    if unknown:
        raise ScenarioError(field, str(path), f"unknown ops {', '.join(unknown)}; known: {', '.join(OP_FAMILY)}")
    med = pd.to_numeric(df["median_s"], errors="coerce").to_numpy(dtype=float)
    bad = ~(np.isfinite(med) & (med > 0))
    if bad.any():
        row = int(np.flatnonzero(bad)[0])
        raise ScenarioError(f"{path} row {row + 2} column median_s", df["median_s"].iloc[row],
                            "median_s must be a positive number")
    family = df["op"].astype(str).map(OP_FAMILY).to_numpy()
    for c in SHAPE_COLUMNS:
        values = pd.to_numeric(df[c], errors="coerce").to_numpy(dtype=float)
        least = np.where(np.isin(family, USED_BY.get(c, ())), 1, 0)   # a column the op uses is >= 1, else 0
        with np.errstate(invalid="ignore"):
            bad = ~np.isfinite(values) | (values % 1 != 0) | (values < least) | (values >= 2**62)
        if bad.any():
            row = int(np.flatnonzero(bad)[0])
            allowed = f"an integer >= {least[row]}" + (f" ({family[row]} ops use it)" if least[row] else "")
            shown = int(values[row]) if np.isfinite(values[row]) and values[row] % 1 == 0 else df[c].iloc[row]
            raise ScenarioError(f"{path} row {row + 2} column {c}", shown, f"must be {allowed}")
        df[c] = values.astype(np.int64)
    return df


OpRows = np.ndarray
"""A checked table as the cost models read it: a numpy structured array with the text columns ``op``,
``family`` and ``dtype``, the :data:`SHAPE_COLUMNS` as int64 and ``median_s`` as float64 (the timing
spread is not used to price a step). ``rows["n"]`` is a column, ``rows[mask]`` the rows where ``mask``
holds, ``rows[i]`` one row."""

TEXT_COLUMNS = ("op", "family", "dtype")


def rows_dtype(text_width: int) -> np.dtype:
    """The :data:`OpRows` dtype whose text columns hold ``text_width`` characters."""
    return np.dtype([*((c, f"<U{max(text_width, 1)}") for c in TEXT_COLUMNS), *((c, np.int64) for c in SHAPE_COLUMNS),
                     ("median_s", np.float64)])


def to_rows(df: pd.DataFrame) -> OpRows:
    """The :data:`OpRows` of a table :func:`read_table` returned (the same values, to the bit)."""
    text = {c: df[c].astype(str).to_numpy(dtype=str) for c in TEXT_COLUMNS}
    rows = np.empty(len(df), dtype=rows_dtype(max((a.dtype.itemsize // 4 for a in text.values()), default=1)))
    for c, a in text.items():
        rows[c] = a
    for c in SHAPE_COLUMNS:
        rows[c] = df[c].to_numpy(np.int64)
    rows["median_s"] = df["median_s"].to_numpy(np.float64)
    return rows


def median_by(keys: np.ndarray, values: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The distinct ``keys`` in ascending order and the median of ``values`` at each: the middle
    value, or the mean of the two middle ones (pandas' ``groupby(keys).median()``, to the bit)."""
    values = np.asarray(values, dtype=np.float64)
    order = np.lexsort((values, keys))
    k, v = keys[order], values[order]
    new = np.ones(len(k), dtype=bool)
    new[1:] = k[1:] != k[:-1]
    start = np.flatnonzero(new)
    count = np.diff(np.append(start, len(k)))
    lo, hi = v[start + (count - 1) // 2], v[start + count // 2]
    return k[start], np.where(count % 2 == 1, lo, (lo + hi) / 2.0)


def points(rows: OpRows, size: str = "tokens") -> tuple[np.ndarray, np.ndarray]:
    """A curve's measured points: the distinct ``size`` values of ``rows`` (float64, ascending) and the
    median time at each."""
    x, t = median_by(rows[size], rows["median_s"])
    return x.astype(np.float64), t


#: The shape columns each op family needs (>= 1); the others are 0 or more.
USED_BY: dict[str, tuple[str, ...]] = {
    "tokens": FAMILIES,
    "n": ("gemm", "moe"), "k": ("gemm", "moe"),
    "batch": ("attn_prefill", "attn_decode", "mla_prefill", "mla_decode"), "context": ("attn_decode", "mla_decode"),
    "num_heads": ("attn_prefill", "attn_decode", "mla_prefill", "mla_decode"),
    "num_kv_heads": ("attn_prefill", "attn_decode", "mla_prefill", "mla_decode"),
    "head_dim": ("attn_prefill", "attn_decode", "mla_prefill", "mla_decode"),
    "width": ("elementwise", "sampling"),
    "message_bytes": ("comm", "all_to_all"), "world_size": ("comm", "moe", "all_to_all"),
    "num_experts": ("moe",), "top_k": ("moe",), "weight_bits": ("mla_prefill", "mla_decode"),
}


def compatible_dtype(table_dtype: str, model_dtype: str) -> bool:
    return table_dtype == model_dtype or _DTYPE_CLASS.get(table_dtype, table_dtype) == _DTYPE_CLASS.get(
        model_dtype, model_dtype)


# -- interpolation ------------------------------------------------------------------------------------
class LogCurve:
    """Time as a function of one size, interpolated linearly in log-log space between measured
    points; outside them, the nearest measured point scaled by the roofline ratio
    ``roof(x) / roof(x_edge)`` (a roofline whose efficiency is fitted at the edge)."""

    __slots__ = ("x", "_lx", "_ly", "roof", "_xs", "_lxs", "_lys")

    def __init__(self, x: np.ndarray, t: np.ndarray, roof: Roof) -> None:
        order = np.argsort(x)
        self.x = np.asarray(x, dtype=np.float64)[order]
        self._lx = np.log(self.x)
        self._ly = np.log(np.asarray(t, dtype=np.float64)[order])
        self.roof = roof
        self._xs, self._lxs, self._lys = self.x.tolist(), self._lx.tolist(), self._ly.tolist()

    def scalar(self, x: float) -> float:
        """``float(self(x))`` for one size, without numpy's per-call overhead (the engine's hot path)."""
        xs = self._xs
        if x <= xs[0] or x >= xs[-1]:
            edge = xs[0] if x <= xs[0] else xs[-1]
            t = math.exp(self._lys[0] if x <= xs[0] else self._lys[-1])
            return t if x == edge else t * float(self.roof(np.float64(x)) / self.roof(np.float64(edge)))
        i = bisect.bisect_right(xs, x) - 1
        lx, ly = self._lxs, self._lys
        w = (math.log(x) - lx[i]) / (lx[i + 1] - lx[i])
        return math.exp(ly[i] + w * (ly[i + 1] - ly[i]))

    def __call__(self, x: float | np.ndarray) -> np.ndarray:
        x = np.asarray(x, dtype=np.float64)
        xc = np.clip(x, self.x[0], self.x[-1])
        t = np.exp(np.interp(np.log(xc), self._lx, self._ly))
        outside = xc != x
        if np.any(outside):
            t = np.where(outside, t * self.roof(x) / self.roof(xc), t)
        return t


def _roof_linear(x: np.ndarray) -> np.ndarray:
    return np.asarray(x, dtype=np.float64)


@dataclass(frozen=True)
class DecodeCurves:
    """Decode attention time as a function of the batch and the context sum ``s`` (tokens attended
    over by all sequences together).

    For each measured batch: linear interpolation in ``s`` between the measured contexts (times made
    non-decreasing along ``s`` first, so measurement noise cannot make a longer context cheaper);
    beyond the largest, the last segment's slope; below the smallest, the first segment's slope but
    never less than in proportion to ``s``. Between measured batches: linear in the batch at the
    same context sum; outside them, in proportion to the batch at the same context per sequence.
    Piecewise affine in ``s``, so a CPU whose cost per context token changes with the KV working set
    is followed where a single affine fit would miss by 10-20%.
    """

    batches: tuple[float, ...]
    sums: tuple[np.ndarray, ...]
    times: tuple[np.ndarray, ...]

    @classmethod
    def fit(cls, rows: Any) -> DecodeCurves:
        """From decode rows: anything whose ``rows["batch"]``, ``rows["context"]`` and ``rows["median_s"]``
        are columns (:data:`OpRows`, a DataFrame)."""
        batch, context = np.asarray(rows["batch"]), np.asarray(rows["context"])
        median = np.asarray(rows["median_s"], dtype=np.float64)
        bs, xs, ts = [], [], []
        for b in sorted(set(batch.tolist())):
            sel = batch == b
            ctx, t = median_by(context[sel], median[sel])
            bs.append(float(b))
            xs.append(ctx.astype(np.float64) * float(b))
            ts.append(np.maximum.accumulate(t))
        return cls(tuple(bs), tuple(xs), tuple(ts))

    @staticmethod
    def curve(x: np.ndarray, t: np.ndarray, s: np.ndarray) -> np.ndarray:
        """One batch's time at context sums ``s`` from its measured ``(x, t)`` (see class doc)."""
        if len(x) == 1:
            return t[0] * s / x[0]
        y = np.interp(s, x, t)
        lo, hi = s < x[0], s > x[-1]
        if lo.any():
            slope = (t[1] - t[0]) / (x[1] - x[0])
            y = np.where(lo, np.maximum(t[0] - slope * (x[0] - s), t[0] * s / x[0]), y)
        if hi.any():
            slope = (t[-1] - t[-2]) / (x[-1] - x[-2])
            y = np.where(hi, t[-1] + slope * (s - x[-1]), y)
        return y

    def __call__(self, batch: float, s: float | np.ndarray) -> np.ndarray:
        s = np.asarray(s, dtype=np.float64)
        bs = self.batches
        if batch <= bs[0] or batch >= bs[-1]:
            i = 0 if batch <= bs[0] else len(bs) - 1
            if batch == bs[i]:
                return self.curve(self.sums[i], self.times[i], s)
            r = batch / bs[i]
            return self.curve(self.sums[i], self.times[i], s / r) * r
        i = bisect.bisect_right(bs, batch) - 1
        if batch == bs[i]:
            return self.curve(self.sums[i], self.times[i], s)
        w = (batch - bs[i]) / (bs[i + 1] - bs[i])
        return ((1.0 - w) * self.curve(self.sums[i], self.times[i], s)
                + w * self.curve(self.sums[i + 1], self.times[i + 1], s))


# -- leave-one-out fit report ---------------------------------------------------------------------------
def _loo_curve(x: np.ndarray, t: np.ndarray, roof: Roof) -> np.ndarray:
    """Relative error of predicting each point from a curve through all the others."""
    errs = np.full(len(x), np.nan)
    if len(x) < 2:
        return errs
    for i in range(len(x)):
        keep = np.arange(len(x)) != i
        errs[i] = float(LogCurve(x[keep], t[keep], roof)(x[i])) / t[i] - 1.0
    return errs


def gemm_roof(n: float, k: float, peak: float, bw: float, elem_bytes: float) -> Roof:
    return lambda m: np.maximum(2.0 * m * n * k / peak, (n * k + m * k + m * n) * elem_bytes / bw)


def prefill_pairs(q: np.ndarray | float, c: np.ndarray | float) -> np.ndarray:
    q = np.asarray(q, dtype=np.float64)
    return q * c + q * (q + 1) / 2.0


def prefill_roof(heads: float, kv_heads: float, head_dim: float, peak: float, bw: float,
                 elem_bytes: float) -> Callable[[np.ndarray | float, float], np.ndarray]:
    """Roofline of one prefill-attention call: ``max(FLOPs / peak, bytes / bandwidth)`` for a ``q``
    chunk after ``c`` cached tokens (4 FLOPs per head and dimension per causal pair; the chunk's
    queries and outputs plus the keys and values of all ``c + q`` tokens). Its ratios extend a
    measured curve beyond the grid: a short chunk after a long context streams the cache (bytes),
    a long chunk is compute bound (pairs)."""
    def roof(q: np.ndarray | float, c: float) -> np.ndarray:
        q = np.asarray(q, dtype=np.float64)
        flops = 4.0 * heads * head_dim * prefill_pairs(q, c)
        nbytes = (2.0 * heads * head_dim * q + 2.0 * kv_heads * head_dim * (c + q)) * elem_bytes
        return np.maximum(flops / peak, nbytes / bw)
    return roof


def leave_one_out(df: pd.DataFrame, peak: float = 1e12, bw: float = 1e11, elem_bytes: float = 2.0) -> pd.DataFrame:
    """Hold out each measured point, predict it from the rest the way the cost model does, and
    return one row per point: ``op, family, shape, measured_s, predicted_s, rel_error``.

    GEMMs, elementwise ops, sampling and collectives: 1-D log-log curves over the size (edges
    extrapolated by the roofline). Prefill attention: along the chunk axis within each context.
    Decode attention: within each batch, the piecewise-linear curve in the context sum without the point.
    """
    import pandas as pd
    out: list[pd.DataFrame] = []
    df = df.assign(**{c: 0 for c in OPTIONAL_COLUMNS if c not in df})
    for (op, _dtype), g in df.groupby(["op", "dtype"], sort=False):
        fam = OP_FAMILY[op]
        if fam == "gemm":
            keys = ["n", "k"]
        elif fam in ("elementwise", "sampling"):
            keys = ["width"]
        elif fam == "comm":
            keys = ["world_size"]
        elif fam == "all_to_all":
            keys = ["width", "num_experts", "top_k", "world_size"]
        elif fam == "moe":
            keys = ["n", "k", "num_experts", "top_k", "world_size"]
        elif fam in ("attn_prefill", "mla_prefill"):
            keys = ["num_heads", "num_kv_heads", "head_dim", "context", "weight_bits"]
            fam = "attn_prefill"
        else:
            keys = ["num_heads", "num_kv_heads", "head_dim", "batch", "weight_bits"]
            fam = "attn_decode"
        for _key, s in g.groupby(keys):
            s = s.copy()
            t = s["median_s"].to_numpy(dtype=np.float64)
            if fam == "attn_decode":
                x = s["context"].to_numpy(dtype=np.float64) * s["batch"].to_numpy(dtype=np.float64)
                err = np.full(len(x), np.nan)
                if len(x) >= 3:
                    order = np.argsort(x)
                    for i in range(len(x)):
                        keep = order[order != i]
                        tk = np.maximum.accumulate(t[keep])
                        err[i] = float(DecodeCurves.curve(x[keep], tk, np.array([x[i]]))[0]) / t[i] - 1.0
            elif fam == "gemm":
                n, k = float(s["n"].iloc[0]), float(s["k"].iloc[0])
                err = _loo_curve(s["tokens"].to_numpy(np.float64), t, gemm_roof(n, k, peak, bw, elem_bytes))
            elif fam == "attn_prefill":
                c = float(s["context"].iloc[0])
                roof = prefill_roof(float(s["num_heads"].iloc[0]), float(s["num_kv_heads"].iloc[0]),
                                    float(s["head_dim"].iloc[0]), peak, bw, elem_bytes)
                err = _loo_curve(s["tokens"].to_numpy(np.float64), t, lambda q, c=c, roof=roof: roof(q, c))  # type: ignore[misc]
            elif fam == "comm":
                x = s["message_bytes"].to_numpy(np.float64)
                err = _loo_curve(x, t, lambda v, x0=x.min(): np.maximum(v, x0))  # type: ignore[misc]
            else:
                err = _loo_curve(s["tokens"].to_numpy(np.float64), t, _roof_linear)
            s["rel_error"] = err
            out.append(s)
    if not out:
        return pd.DataFrame(columns=[*TABLE_COLUMNS, "rel_error"])
    return pd.concat(out, ignore_index=True)


def fit_summary(loo: pd.DataFrame) -> pd.DataFrame:
    """Per op family: points held out, median and p90 of |relative error|, worst case."""
    import pandas as pd
    rows = []
    for fam in FAMILIES:
        e = loo.loc[loo["family"] == fam, "rel_error"].abs().dropna().to_numpy()
        if len(e):
            rows.append({"family": fam, "points": len(e), "median_abs_error": float(np.median(e)),
                         "p90_abs_error": float(np.percentile(e, 90)), "max_abs_error": float(e.max())})
    return pd.DataFrame(rows, columns=["family", "points", "median_abs_error", "p90_abs_error", "max_abs_error"])


def _isotonic(y: np.ndarray) -> np.ndarray:
    """The non-decreasing sequence closest to ``y`` in least squares (pool adjacent violators)."""
    vals: list[float] = []
    counts: list[int] = []
    for v in y.tolist():
        vals.append(v)
        counts.append(1)
        while len(vals) > 1 and vals[-2] > vals[-1]:
            n = counts[-2] + counts[-1]
            vals[-2:] = [(vals[-2] * counts[-2] + vals[-1] * counts[-1]) / n]
            counts[-2:] = [n]
    return np.repeat(vals, counts)


#: The size each family's time must not fall along, and the shape columns that hold it fixed.
_MONOTONE = {"gemm": "tokens", "elementwise": "tokens", "sampling": "tokens", "attn_prefill": "tokens",
             "comm": "message_bytes", "moe": "tokens", "mla_prefill": "tokens", "all_to_all": "tokens"}


_CURVE_KEYS = ("op", "family", "dtype", "n", "k", "batch", "context", "num_heads", "num_kv_heads", "head_dim",
               "width", "world_size", "num_experts", "top_k", "weight_bits")
"""The shape columns that, less the family's size, pick out one curve."""


def monotone_rows(rows: OpRows) -> OpRows:
    """``rows`` with each curve made non-decreasing along its size (GEMM rows ``m``, elementwise and
    prefill tokens, all-reduce bytes) by isotonic regression of log time: a larger batch never
    runs faster because of measurement noise or a kernel-heuristic dip (the ``table`` model's decode
    curves get the same guarantee along the context). The pooled points average their neighbours,
    so a dip costs its neighbours a little instead of lifting the whole curve to a peak."""
    out = rows.copy()
    median = out["median_s"]
    for fam, size in _MONOTONE.items():
        idx = np.flatnonzero(out["family"] == fam)
        if not idx.size:
            continue
        idx = idx[np.argsort(out[size][idx], kind="stable")]        # the family's rows by size, ties in file order
        keys = [out[c][idx] for c in _CURVE_KEYS if c != size]
        order = np.lexsort(keys[::-1])                                  # stable: each curve's rows stay by size
        new = np.zeros(len(idx), dtype=bool)
        new[0] = True
        for col in keys:
            ordered = col[order]
            new[1:] |= ordered[1:] != ordered[:-1]
        starts = np.flatnonzero(new).tolist()
        log_s = np.log(median[idx])
        fitted = np.empty_like(log_s)
        for a, b in zip(starts, [*starts[1:], len(idx)], strict=True):
            curve = order[a:b]
            fitted[curve] = np.exp(_isotonic(log_s[curve]))
        median[idx] = fitted
    return out


def monotone_table(df: pd.DataFrame) -> pd.DataFrame:
    """:func:`monotone_rows` of a table read by :func:`read_table`, as a DataFrame."""
    out = df.copy()
    out["median_s"] = monotone_rows(to_rows(df))["median_s"]
    return out
