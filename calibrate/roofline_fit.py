"""Roofline efficiencies fitted to measured kernel rows: what a profile's ``efficiency`` block says
when it comes from measurements instead of assumptions.

A kernel table never covers everything (another dtype, an op nobody timed); the ``kernel_table``
cost model falls back to the roofline of the same GPU there, and this module fits that roofline's
efficiencies to the GPU's own measured rows, so the fallback is the GPU's measured behaviour
extended, not the datasheet's assumption:

* ``memory``: bytes / (time x peak bandwidth) of weight-streaming GEMMs (``m <= 16`` rows, weights
  of 16 MB or more), the median over those rows;
* ``gemm_max`` and ``gemm_half_tokens``: the roofline GEMM ``max(2mnk / (peak x gemm_max x m / (m +
  half)), bytes / (bandwidth x memory))`` with the fitted ``memory``, by grid search minimising the
  median |log(predicted / measured)| over every 16-bit GEMM row;
* ``attention_compute``: FLOPs / (time x peak) of context attention at 2,048 tokens or more;
* ``attention_memory``: KV bytes / (time x bandwidth) of decode attention reading 32 MB or more.

Each fit reports the rows it used and the error of the fitted roofline on *all* the family's rows
(the roofline has no launch-latency floor, so short kernels are where it misses). No torch, no
scipy: numpy only.
"""
from __future__ import annotations

from typing import Any

import numpy as np
import pandas as pd

from simulator.cost.op_table import prefill_pairs

#: Bytes of one 16-bit element (the dtype the efficiencies are fitted in).
_B16 = 2.0


def _errors(pred: np.ndarray, measured: np.ndarray) -> dict[str, float]:
    e = np.abs(pred / measured - 1.0)
    return {"rows": len(e), "median_abs_error": round(float(np.median(e)), 4),
            "p90_abs_error": round(float(np.percentile(e, 90)), 4)}


def gemm_roofline(m: np.ndarray, n: np.ndarray, k: np.ndarray, peak: float, bandwidth: float, gemm_max: float,
                  gemm_half_tokens: float, memory: float, elem_bytes: float = _B16) -> np.ndarray:
    """The roofline cost model's GEMM time (seconds) with the given efficiencies."""
    m = np.asarray(m, dtype=np.float64)
    compute = 2.0 * m * n * k / (peak * gemm_max * m / (m + gemm_half_tokens))
    stream = (n * k + m * (n + k)) * elem_bytes / (bandwidth * memory)
    return np.maximum(compute, stream)


def fit_gemm(rows: pd.DataFrame, peak: float, bandwidth: float) -> tuple[dict[str, float], dict[str, Any]]:
    """``memory``, ``gemm_max``, ``gemm_half_tokens`` from 16-bit GEMM rows (see module docstring)."""
    m, n, k = (rows[c].to_numpy(np.float64) for c in ("tokens", "n", "k"))
    t = rows["median_s"].to_numpy(np.float64)
    stream = (m <= 16) & (n * k * _B16 >= 16e6)
    memory = float(np.clip(np.median((n * k + m * (n + k))[stream] * _B16 / (t[stream] * bandwidth)), 0.05, 1.0)) \
        if stream.any() else 0.8
    best = (np.inf, 0.75, 64.0)
    for gmax in np.linspace(0.30, 1.0, 71):
        for half in np.geomspace(1.0, 2048.0, 45):
            pred = gemm_roofline(m, n, k, peak, bandwidth, gmax, half, memory)
            score = float(np.median(np.abs(np.log(pred / t))))
            if score < best[0]:
                best = (score, float(gmax), float(half))
    _, gmax, half = best
    pred = gemm_roofline(m, n, k, peak, bandwidth, gmax, half, memory)
    eff = {"gemm_max": round(gmax, 3), "gemm_half_tokens": round(half, 1), "memory": round(memory, 3)}
    return eff, {"memory_rows": int(stream.sum()), **_errors(pred, t)}


def fit_prefill(rows: pd.DataFrame, peak: float, bandwidth: float) -> tuple[float, dict[str, Any]]:
    """``attention_compute`` from context-attention rows at batch 1 (16-bit KV)."""
    q, c = rows["tokens"].to_numpy(np.float64), rows["context"].to_numpy(np.float64)
    heads, hd = rows["num_heads"].to_numpy(np.float64), rows["head_dim"].to_numpy(np.float64)
    flops = 4.0 * heads * hd * prefill_pairs(q, c)
    t = rows["median_s"].to_numpy(np.float64)
    big = q + c >= 2048
    eff = float(np.clip(np.median(flops[big] / (t[big] * peak)), 0.01, 1.0)) if big.any() else 0.5
    kv_bytes = 2.0 * rows["num_kv_heads"].to_numpy(np.float64) * hd * _B16 * (c + q)
    pred = np.maximum(flops / (peak * eff), kv_bytes / bandwidth)
    return round(eff, 3), {"rows_fitted": int(big.sum()), **_errors(pred, t),
                           "large_rows": _errors(pred[big], t[big]) if big.any() else {}}


def fit_decode(rows: pd.DataFrame, bandwidth: float, kv_bytes: float = _B16) -> tuple[float, dict[str, Any]]:
    """``attention_memory`` from decode-attention rows (KV bytes read per step over the time)."""
    nbytes = (2.0 * rows["batch"] * rows["context"] * rows["num_kv_heads"] * rows["head_dim"]).to_numpy(
        np.float64) * kv_bytes
    t = rows["median_s"].to_numpy(np.float64)
    big = nbytes >= 32e6
    eff = float(np.clip(np.median(nbytes[big] / (t[big] * bandwidth)), 0.05, 1.0)) if big.any() else 0.7
    pred = nbytes / (bandwidth * eff)
    return round(eff, 3), {"rows_fitted": int(big.sum()), **_errors(pred, t),
                           "large_rows": _errors(pred[big], t[big]) if big.any() else {}}


def streaming_errors(rows: pd.DataFrame, bandwidth: float, memory: float, latency_s: float) -> dict[str, Any]:
    """How well ``latency_s + 3 x width x tokens x 2 bytes / (bandwidth x memory)`` (the fallback for
    elementwise ops without rows) predicts measured elementwise rows."""
    nbytes = 3.0 * (rows["width"] * rows["tokens"]).to_numpy(np.float64) * _B16
    pred = latency_s + nbytes / (bandwidth * memory)
    return _errors(pred, rows["median_s"].to_numpy(np.float64))


def fit_efficiency(table: pd.DataFrame, peak_flops: float, bandwidth: float,
                   dtype: str = "bf16") -> tuple[dict[str, float], dict[str, Any]]:
    """The ``efficiency`` block fitted to ``table``'s 16-bit rows, and a report per family.

    Families without rows keep the :class:`~simulator.scenario.profiles.Efficiency` defaults (the
    report says so). ``peak_flops`` is the 16-bit dense peak, ``bandwidth`` the memory bandwidth.
    """
    sixteen = table[table["dtype"].isin([dtype, "bf16", "fp16"])]
    eff: dict[str, float] = {}
    report: dict[str, Any] = {}
    g = sixteen[sixteen["family"] == "gemm"]
    if len(g):
        got, report["gemm"] = fit_gemm(g, peak_flops, bandwidth)
        eff.update(got)
    p = sixteen[(sixteen["family"] == "attn_prefill") & (sixteen["batch"] <= 1)]
    if len(p):
        eff["attention_compute"], report["attn_prefill"] = fit_prefill(p, peak_flops, bandwidth)
    d = sixteen[sixteen["family"] == "attn_decode"]
    if len(d):
        eff["attention_memory"], report["attn_decode"] = fit_decode(d, bandwidth)
    missing = [f for f in ("gemm", "attn_prefill", "attn_decode") if f not in report]
    if missing:
        report["not_fitted"] = f"no 16-bit rows for {', '.join(missing)}: assumed defaults kept"
    return eff, report
