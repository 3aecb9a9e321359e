"""How good a table-backed profile is: leave-one-out fit error and roofline efficiency per op.

Used by ``llmplan profiles`` (one fit-error figure per profile) and ``llmplan profiles show``.
Pandas/numpy only; reads the same table the ``table`` cost model reads.
"""
from __future__ import annotations

import numpy as np
import pandas as pd

from simulator.cost.op_table import FAMILIES, fit_summary, leave_one_out, prefill_pairs, read_table
from simulator.scenario.models import DTYPE_BYTES
from simulator.scenario.profiles import HardwareProfile

#: The fit-quality targets of the calibration issue (per op family, held-out points).
TARGET_MEDIAN, TARGET_P90 = 0.05, 0.15
#: The columns of :func:`op_report` (an empty table still has them).
OP_REPORT_COLUMNS = ("op", "family", "points", "median_abs_error", "p90_abs_error", "max_abs_error", "best", "unit",
                     "efficiency")


def profile_table(profile: HardwareProfile) -> pd.DataFrame:
    assert profile.table is not None
    return read_table(profile.table, sha256=profile.table_sha256,
                      schema=profile.table_schema if profile.table_schema is not None else 1)


def _peaks(profile: HardwareProfile, dtype: str) -> tuple[float, float]:
    peak = profile.peak_flops_for(dtype) if profile.peak_flops else 1e12
    return float(peak), float(profile.memory_bandwidth_bytes_per_s or 1e11)


def achieved(df: pd.DataFrame) -> pd.Series:
    """Per row: FLOP/s (GEMMs, attention prefill, MoE experts, MLA prefill) or bytes/s (decode
    attention, MLA decode, elementwise, sampling, collectives) that the measured time implies."""
    eb = df["dtype"].map(lambda d: DTYPE_BYTES.get(d, 2.0)).astype(float)
    t = df["median_s"].astype(float)
    fam = df["family"]
    out = pd.Series(np.nan, index=df.index)
    g = fam == "gemm"
    out[g] = 2.0 * df["tokens"][g] * df["n"][g] * df["k"][g] / t[g]
    p = fam == "attn_prefill"
    out[p] = 4.0 * df["num_heads"][p] * df["head_dim"][p] * prefill_pairs(df["tokens"][p], df["context"][p]) / t[p]
    d = fam == "attn_decode"
    out[d] = 2.0 * df["batch"][d] * df["context"][d] * df["num_kv_heads"][d] * df["head_dim"][d] * eb[d] / t[d]
    e = fam.isin(["elementwise", "sampling"])
    out[e] = 2.0 * df["tokens"][e] * df["width"][e] * eb[e] / t[e]
    c = fam.isin(["comm", "all_to_all"])      # all-to-all: one rank's 16-bit hidden states (or message) per second
    out[c] = df["message_bytes"][c] / t[c]
    if "num_experts" in df:     # MoE: the routed pairs' gated-MLP FLOPs on one GPU's slice of each expert
        m = fam == "moe"
        out[m] = (6.0 * df["tokens"][m] * df["top_k"][m] * df["k"][m] * df["n"][m]
                  / df["world_size"][m].clip(lower=1) / t[m])
    mp = fam == "mla_prefill"      # MLA prefill attention: 2 x (192 + 128) FLOPs per head and causal pair
    out[mp] = 640.0 * df["num_heads"][mp] * prefill_pairs(df["tokens"][mp], df["context"][mp]) / t[mp]
    md = fam == "mla_decode"       # MLA decode: the latent cache read once per layer
    out[md] = df["batch"][md] * df["context"][md] * df["head_dim"][md] * eb[md] / t[md]
    return out


def op_report(profile: HardwareProfile) -> pd.DataFrame:
    """One row per op: points, leave-one-out median/p90/max |error|, best efficiency vs the
    profile's peak (FLOP/s for GEMMs and prefill attention, bandwidth for the rest); no rows for a
    table of a header alone."""
    df = profile_table(profile)
    dtype = str(df["dtype"].iloc[0]) if len(df) else "bf16"
    peak, bw = _peaks(profile, dtype)
    loo = leave_one_out(df, peak=peak, bw=bw, elem_bytes=DTYPE_BYTES.get(dtype, 2.0))
    loo["achieved"] = achieved(loo)
    rows = []
    for (fam, op), g in loo.groupby(["family", "op"], sort=False):
        e = g["rel_error"].abs().dropna().to_numpy()
        compute = fam in ("gemm", "attn_prefill", "moe", "mla_prefill")
        # A GEMM row against the peak of its own dtype (a kernel_table holds bf16 and fp8 GEMMs);
        # attention computes in 16 bits whatever its KV-cache dtype.
        roof = (g["dtype"].map(lambda d: _peaks(profile, str(d))[0]).astype(float) if fam == "gemm"
                else pd.Series(peak if compute else bw, index=g.index))
        eff = g["achieved"] / roof
        best = eff.idxmax()
        rows.append({"op": op, "family": fam, "points": len(g),
                     "median_abs_error": float(np.median(e)) if len(e) else np.nan,
                     "p90_abs_error": float(np.percentile(e, 90)) if len(e) else np.nan,
                     "max_abs_error": float(e.max()) if len(e) else np.nan,
                     "best": float(g.loc[best, "achieved"]), "unit": "FLOP/s" if compute else "B/s",
                     "efficiency": float(eff[best])})
    rep = pd.DataFrame(rows, columns=list(OP_REPORT_COLUMNS))
    order = {f: i for i, f in enumerate(FAMILIES)}
    return rep.sort_values("family", key=lambda s: s.map(order), kind="stable").reset_index(drop=True)


def family_report(profile: HardwareProfile) -> pd.DataFrame:
    df = profile_table(profile)
    dtype = str(df["dtype"].iloc[0]) if len(df) else "bf16"
    peak, bw = _peaks(profile, dtype)
    fam = fit_summary(leave_one_out(df, peak=peak, bw=bw, elem_bytes=DTYPE_BYTES.get(dtype, 2.0)))
    fam["meets_target"] = (fam["median_abs_error"] <= TARGET_MEDIAN) & (fam["p90_abs_error"] <= TARGET_P90)
    return fam


def fit_headline(profile: HardwareProfile) -> str:
    """One cell for the profile list: the worst family's held-out median/p90 error, or why none."""
    if profile.table is None:
        return "- (no measurements)"
    fam = family_report(profile)
    if fam.empty:
        return "- (too few points)"
    worst = fam.loc[fam["p90_abs_error"].idxmax()]
    return (f"median <= {100 * fam['median_abs_error'].max():.1f}%, p90 <= {100 * worst['p90_abs_error']:.0f}% "
            f"(worst: {worst['family']})")
