"""The shipped GPU profiles (:func:`import_default`): a compact grid of the AIConfigurator tables plus
Vidur's elementwise tables where Vidur measured the GPU, with roofline efficiencies fitted to the
measured rows for what neither measured (``cost_model: kernel_table``); the GEMM compaction's error
and the spikes dropped from the tables are recorded in the provenance."""
from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from calibrate.importers.aiconfigurator import (
    AIC_MOE_DISTRIBUTION,
    AIC_SYSTEMS,
    COMPACT_GEMM_M,
    COMPACT_GEMM_NK,
    COMPACT_HEADS,
    COMPACT_MLA_HEADS,
    COMPACT_MOE_TOKENS,
    COMPACT_MOE_TP,
    COMPACT_TOKENS,
    AicDatabase,
    AicTables,
    aiconfigurator_tables,
)
from calibrate.importers.vidur import vidur_rows
from calibrate.importers.writing import dedupe_shapes, write_profile
from simulator.cost.op_table import TABLE_COLUMNS
from simulator.errors import ScenarioError
from simulator.scenario.profiles import load_profile

VIDUR_FOR_AIC = {"h100_sxm": "h100", "a100_sxm": "a100"}
"""AIConfigurator systems Vidur also measured (its elementwise tables join the defaults)."""
_FAMILY_ORDER = {"gemm": 0, "attn_prefill": 1, "attn_decode": 2, "elementwise": 3, "sampling": 4, "comm": 5,
                 "moe": 6, "mla_prefill": 7, "mla_decode": 8, "all_to_all": 9}


def vidur_elementwise_rows(data_dir: Path, gpu: str) -> tuple[list[dict[str, Any]], list[str]]:
    """Vidur's RMSNorm, rotary, SiLU-and-multiply and residual-add rows for ``gpu`` (fp16, every
    model and TP degree Vidur measured), at the token counts of :data:`COMPACT_TOKENS`."""
    files = sorted(Path(data_dir).glob(f"compute_{gpu}_*_mlp.csv"))
    rows = [r for f in files for r in vidur_rows(f) if r["family"] == "elementwise" and r["tokens"] in COMPACT_TOKENS]
    return rows, [f.name for f in files]


def import_default(system: str, out: Path, source: str | Path | None = None, vidur_dir: Path | None = None,
                   name: str | None = None, command: str | None = None) -> Path:
    """Build the shipped profile of one GPU: AIConfigurator's vLLM tables on the compact grid
    (bf16 and fp8 GEMMs, attention with 16-bit and fp8 KV, all-reduce), Vidur's elementwise rows
    where Vidur measured the GPU, and the ``efficiency`` block fitted to those rows
    (:mod:`calibrate.roofline_fit`) for whatever the ``kernel_table`` model must extrapolate.
    Provenance records the sources, versions, kernels, licences, what is measured and what is
    extrapolated, the held-out error of the table and what the compact grid costs."""
    from calibrate.roofline_fit import fit_efficiency, streaming_errors
    from simulator.cost.op_table import fit_summary, leave_one_out

    if system not in AIC_SYSTEMS:
        raise ScenarioError("--system", system, f"known: {', '.join(AIC_SYSTEMS)}")
    gpu = AIC_SYSTEMS[system]
    db = AicDatabase(source)
    t = aiconfigurator_tables(db, system, "vllm", compact=True)
    rows = list(t.rows)
    vidur_files: list[str] = []
    if vidur_dir is not None and system in VIDUR_FOR_AIC:
        extra, vidur_files = vidur_elementwise_rows(Path(vidur_dir), VIDUR_FOR_AIC[system])
        rows += extra
    table, spikes = drop_spikes(dedupe_shapes(pd.DataFrame(rows, columns=list(TABLE_COLUMNS))))
    table = table.sort_values(["family", "dtype", "op", "num_heads", "num_kv_heads", "head_dim", "n", "k", "width",
                               "world_size", "num_experts", "top_k", "weight_bits", "batch", "context", "tokens",
                               "message_bytes"],
                              key=lambda c: c.map(_FAMILY_ORDER) if c.name == "family" else c,
                              kind="stable").reset_index(drop=True)
    base_name = f"{gpu}-datasheet"
    base = load_profile(base_name)
    peak16 = float(base.peak_flops_for("bf16"))
    bw = float(base.memory_bandwidth_bytes_per_s or 0.0)
    eff, fit_report = fit_efficiency(table, peak16, bw)
    latency = float(((t.spec.get("gpu") or {}).get("mem_empirical_constant_latency")) or 3e-6)
    eff["kernel_latency_s"] = latency
    elem = table[table["family"] == "elementwise"]
    if len(elem):
        fit_report["elementwise_fallback_vs_vidur"] = streaming_errors(elem, bw, eff["memory"], latency)
    peaks = {d: float(base.peak_flops_for(d)) for d in ("bf16", "fp8")}
    full = t.full_gemm[(t.full_gemm["n"] >= 1024) & (t.full_gemm["k"] >= 1024)]
    compaction = gemm_compaction_errors(full, table, peaks, bw)
    loo = fit_summary(leave_one_out(table, peak=peak16, bw=bw))
    loo_report = {r["family"]: {"points": int(r["points"]), "median_abs_error": round(float(r["median_abs_error"]), 4),
                                "p90_abs_error": round(float(r["p90_abs_error"]), 4)}
                  for r in loo.to_dict("records")}
    if command and source is not None:      # the wheel by its file name (provenance has its sha256), not a local path
        command = command.replace(str(source), Path(source).name)
    prov = _default_provenance(db, t, vidur_files, eff, fit_report, compaction, loo_report, command)
    prov["dropped_spikes"] = {
        "rule": f"a point more than {SPIKE_FACTOR}x both neighbours on its curve (drop_spikes)",
        "rows": {f"{fam} {dt}": int(n) for (fam, dt), n in spikes.groupby(["family", "dtype"]).size().items()}}
    header = (f"# Default profile of the {base.device}: measured kernel tables (NVIDIA AIConfigurator"
              + (", Vidur" if vidur_files else "")
              + f"),\n# built by `llmplan import-profile default --system {system}`. The vendor-peak roofline of the "
              f"same GPU\n# is `{base_name}`. See provenance and hwprofiles/README.md.\n")
    return write_profile(out, name or gpu, base_name, table, prov, cost_model="kernel_table", efficiency=eff,
                         header=header, table_file="ops.csv.gz")


def _default_provenance(db: AicDatabase, t: AicTables, vidur_files: list[str], eff: dict[str, float],
                        fit_report: dict[str, Any], compaction: dict[str, Any], loo: dict[str, Any],
                        command: str | None) -> dict[str, Any]:
    measured = [f"GEMM {k.split()[1]}: m x n x k grid, m 1-32768, n and k 1024-65536 ({t.kernels[k]}, "
                f"{t.framework} {t.versions[k]})" for k in t.kernels if k.startswith("gemm")]
    measured += [f"{k.split()[0]} with a {k.split()[-1]} KV cache ({t.kernels[k]}, {t.framework} {t.versions[k]})"
                 for k in t.kernels if k.startswith("attn")]
    measured += [f"MoE routed experts, {k.split()[1]} weights: one layer's fused MoE by tokens x hidden x "
                 f"expert width x experts x top-k x TP (expert parallelism 1, {AIC_MOE_DISTRIBUTION} routing; "
                 f"{t.kernels[k]}, {t.framework} {t.versions[k]})" for k in t.kernels if k.startswith("moe ")]
    measured += [f"MLA block ({'prefill' if k.startswith('mla_prefill') else 'decode'}, {k.split()[1][1:]}-bit "
                 f"projections, {k.split()[-1]} KV cache): DeepSeek-V3's attention block per layer by heads x "
                 f"{'prompt' if k.startswith('mla_prefill') else 'batch x context'} ({t.kernels[k]}, "
                 f"{t.framework} {t.versions[k]})" for k in t.kernels if k.startswith("mla_")]
    if "all_reduce" in t.kernels:
        measured.append(f"all-reduce of 16-bit tensors on 2, 4 and 8 GPUs ({t.kernels['all_reduce']}, "
                        f"{t.versions['all_reduce']})")
    if "moe_dispatch" in t.kernels:
        a2a = t.all_to_all
        measured.append(f"expert-parallel all-to-all, dispatch and combine of one MoE layer by tokens per rank "
                        f"({a2a['tokens_per_rank']}) x hidden x top-k x experts on EP "
                        f"{'/'.join(map(str, a2a['ep_sizes']))} GPUs of one node ({t.kernels['moe_dispatch']}; "
                        f"{t.framework} {t.versions['moe_dispatch']})")
    elif "all_to_all" in t.kernels:
        measured.append(f"all-to-all of 16-bit tensors on {'/'.join(map(str, t.all_to_all['gpus']))} GPUs "
                        f"({t.kernels['all_to_all']}, {t.versions['all_to_all']}; no engine's expert-parallel "
                        "kernel was measured on this GPU)")
    if vidur_files:
        measured.append("RMSNorm, rotary, SiLU-and-multiply, residual add: Vidur (fp16, 20 runs each)")
    extrapolated = [
        "GEMM widths off the grid (e.g. Llama-3 MLP widths 14336/28672, the LM head's vocabulary): the nearest "
        "measured n x k scaled by the roofline ratio of the two shapes (compaction.scaled_shape is that method's "
        "error on AIConfigurator shapes left out of this table)",
        "GEMM rows between grid points: log-log interpolation (compaction.thinned_m: its error on the rows left out)",
        "prefill attention after cached tokens (chunked prefill, prefix-cache hits): the batch-1 no-prefix curve "
        "times the roofline ratio of the two shapes",
        "decode attention beyond the measured batch or context: the last segment continued",
        "quantization int8/int4 and fp8 where the table has no fp8 rows: 16-bit rows x roofline ratio of the "
        "precisions; fp8 KV without fp8 rows: 16-bit rows read at the same bytes",
        "ops with no rows (KV-cache write, sampling" + ("" if vidur_files else ", RMSNorm, rotary, SiLU, residual add")
        + "): kernel_latency_s + bytes / (bandwidth x efficiency.memory), efficiencies fitted to this table",
        "engine CPU overhead (overhead.step_s, overhead.per_seq_s): assumed, from the datasheet profile; no kernel "
        "table measures the scheduler (llmplan validate fits it on a real engine)",
        "TP degrees other than 2, 4, 8 and tensor sizes beyond the all-reduce table: the interconnect roofline / "
        "the table's last point",
        "MoE shapes, TP degrees or dtypes off the table: the nearest measured MoE shape scaled by the ratio of the "
        "two shapes' MoE rooflines; a dtype without rows: the bf16 rows x the roofline ratio of the precisions; "
        "beyond 16,384 tokens: the roofline ratio from the last point; expert parallelism: one GPU's experts "
        "scaled from the TP-1 rows by the MoE roofline (AIConfigurator's moe_ep_size > 1 rows are not kept)",
        ("expert-parallel all-to-all: "
         + ("the measured rows with attention data parallelism (DP > 1) inside one node; a shape or EP size off "
            "the table is read at the tokens that move the same bytes per rank (hidden x the expected remote "
            "ranks of a token's top-k experts) on the nearest measured shape; EP = TP without data parallelism "
            "and EP across nodes: the interconnect's bandwidth and latency" if "moe_dispatch" in t.kernels
            else "NCCL's all-to-all rows of the rank's 16-bit hidden states with attention data parallelism "
            "(DP > 1) inside one node, each phase one all-to-all; otherwise the interconnect's bandwidth and "
            "latency" if "all_to_all" in t.kernels
            else "the interconnect's bandwidth and latency (no all-to-all measured on this GPU)")),
        "MLA heads per shard off the grid: the nearest measured heads x the heads ratio; prefill after cached "
        "tokens: the no-prefix prompt of equal causal work",
    ]
    meta = db.read_bytes(t.files[0].rsplit("/", 1)[0] + "/collection_meta.yaml").decode() \
        if db.exists(t.files[0].rsplit("/", 1)[0] + "/collection_meta.yaml") else ""
    legacy = "provenance: legacy" in meta
    prov: dict[str, Any] = {
        "imported_from": f"NVIDIA AIConfigurator kernel database: aiconfigurator-core {db.version} (PyPI), {db.origin}",
        "license": "AIConfigurator data: Apache-2.0 (c) NVIDIA Corporation & affiliates; this table is a derived "
                   "subset (compact grid, ms -> s, elements -> bytes)"
                   + ("; Vidur rows: MIT (c) Microsoft, microsoft/vidur @ 7d47513 data/profiling/" if vidur_files
                      else ""),
        "system": t.system, "device_reported": t.device, "framework": t.framework,
        "versions": t.versions, "kernels": t.kernels, "files": t.files + vidur_files,
        "date_measured": ("not recorded: the database's collection metadata for these tables says 'provenance: "
                          "legacy' (no collection date); the measurements predate the package release"
                          if legacy else "see the collection_meta.yaml of each file"),
        "measured": measured, "extrapolated": extrapolated,
        "compact_grid": {"gemm_m": ", ".join(map(str, COMPACT_GEMM_M)),
                         "gemm_n_and_k": ", ".join(map(str, COMPACT_GEMM_NK)),
                         "attention_heads/kv_heads/head_dim": ", ".join("/".join(map(str, h)) for h in COMPACT_HEADS),
                         "elementwise_tokens": ", ".join(map(str, COMPACT_TOKENS)) if vidur_files else "-",
                         "moe_tokens": ", ".join(map(str, COMPACT_MOE_TOKENS)),
                         "moe_tp": ", ".join(map(str, COMPACT_MOE_TP)),
                         "mla_heads": ", ".join(map(str, COMPACT_MLA_HEADS))},
        "compaction": compaction,
        "fit_leave_one_out": loo,
        "roofline_fit": {"efficiency": eff, **fit_report,
                         "kernel_latency_note": "kernel_latency_s is AIConfigurator's mem_empirical_constant_latency "
                                                f"for {t.system} (its systems/{t.system}.yaml), not fitted here"},
    }
    if t.all_to_all:
        prov["all_to_all"] = t.all_to_all
    if command:
        prov["command"] = command
    return prov


def gemm_compaction_errors(full: pd.DataFrame, table: pd.DataFrame, peaks: dict[str, float],
                           bandwidth: float) -> dict[str, dict[str, Any]]:
    """How much the compact grid costs: every GEMM row of ``full`` (AIConfigurator's whole grid)
    that ``table`` dropped, predicted from ``table`` the way the cost model predicts it: along
    ``m`` by the log-log curve of its own ``n x k`` when that shape was kept (``thinned_m``), else
    scaled from the nearest kept shape by the roofline ratio (``scaled_shape``: the error a model
    whose widths are not in the table sees). Per dtype: rows, median and p90 |relative error|."""
    from simulator.cost.op_table import LogCurve, gemm_roof
    from simulator.cost.table import _nearest

    out: dict[str, dict[str, Any]] = {}
    for dtype, f in full.groupby("dtype"):
        kept = table[(table["family"] == "gemm") & (table["dtype"] == dtype)]
        if kept.empty:
            continue
        eb = 1.0 if dtype == "fp8" else 2.0
        peak = peaks.get(dtype, peaks.get("bf16", 1e15))
        curves = {}
        for (n, k), g in kept.groupby(["n", "k"]):
            pts = g.groupby("tokens")["median_s"].median()
            curves[(n, k)] = LogCurve(pts.index.to_numpy(np.float64), pts.to_numpy(),
                                      gemm_roof(n, k, peak, bandwidth, eb))
        shapes = np.array(list(curves), dtype=[("n", np.int64), ("k", np.int64)])
        errs: dict[str, list[float]] = {"thinned_m": [], "scaled_shape": []}
        for (n, k), g in f.groupby(["n", "k"]):
            m, t = g["tokens"].to_numpy(np.float64), g["median_s"].to_numpy(np.float64)
            if (n, k) in curves:
                known = set(kept[(kept["n"] == n) & (kept["k"] == k)]["tokens"])
                drop = np.array([x not in known for x in m])
                pred = curves[(n, k)](m[drop])
                errs["thinned_m"] += list(pred / t[drop] - 1.0)
            else:
                near = _nearest(shapes, ["n", "k"], [n, k])
                n0, k0 = int(near["n"]), int(near["k"])
                ratio = gemm_roof(n, k, peak, bandwidth, eb)(m) / gemm_roof(n0, k0, peak, bandwidth, eb)(m)
                errs["scaled_shape"] += list(curves[(n0, k0)](m) * ratio / t - 1.0)
        out[dtype] = {}
        for what, e in errs.items():
            a = np.abs(np.array(e))
            if len(a):
                out[dtype][what] = {"rows": len(a), "median_abs_error": round(float(np.median(a)), 4),
                                    "p90_abs_error": round(float(np.percentile(a, 90)), 4)}
    return out


#: Per family: the size a curve runs along, and the factor by which a point must exceed both its
#: neighbours on that curve to be dropped as a spike (a measurement hiccup, not a kernel).
SPIKE_AXES = {"gemm": "tokens", "attn_prefill": "tokens", "attn_decode": "context", "comm": "message_bytes",
              "moe": "tokens", "mla_prefill": "tokens", "mla_decode": "context", "all_to_all": "tokens"}
SPIKE_FACTOR = 1.5


def drop_spikes(table: pd.DataFrame, factor: float = SPIKE_FACTOR) -> tuple[pd.DataFrame, pd.DataFrame]:
    """``table`` without isolated spikes, and the dropped rows: a point of a curve (one shape,
    along :data:`SPIKE_AXES`) more than ``factor`` times *both* its neighbours (the first point: both
    points after it). A real
    kernel change moves every later point; a spike moves one (A100 decode attention, batch 4 at
    512 tokens of context: 93.7 us between 22.6 and 27.4). The ``table`` models' decode curves
    are made non-decreasing along the context, so one spike would lift every longer context."""
    shape = ["op", "family", "dtype", "n", "k", "batch", "context", "num_heads", "num_kv_heads", "head_dim", "width",
             "world_size", "num_experts", "top_k", "weight_bits"]
    drop: list[int] = []
    for fam, axis in SPIKE_AXES.items():
        sel = table[table["family"] == fam]
        for _, g in sel.groupby([c for c in shape if c != axis], sort=False):
            if len(g) < 3:
                continue
            g = g.sort_values(axis)
            t = g["median_s"].to_numpy(np.float64)
            spike = t[1:-1] > factor * np.maximum(t[:-2], t[2:])
            drop += g.index[1:-1][spike].tolist()
            if t[0] > factor * max(t[1], t[2]):       # the smallest size costing more than the next two
                drop.append(g.index[0])
    return table.drop(index=drop), table.loc[drop]
