"""Plotly figures for the pages: rendering only (the data comes from ``simulator.report.analysis``)."""
from __future__ import annotations

from typing import Any

import pandas as pd
import plotly.graph_objects as go
from plotly.colors import qualitative
from plotly.subplots import make_subplots

METRIC_LABELS = {"ttft_s": "TTFT", "tpot_s": "TPOT", "e2e_s": "E2E"}
COLORS = {"ttft_s": "#1f77b4", "tpot_s": "#ff7f0e", "e2e_s": "#2ca02c",
          "queue_depth": "#d62728", "running_batch": "#1f77b4", "kv_usage": "#9467bd"}
STAGE_COLORS = {"network": "#7f7f7f", "queue": "#d62728", "prefill": "#ff7f0e", "decode": "#1f77b4"}
_LAYOUT = dict(margin=dict(l=10, r=10, t=90, b=10), legend=dict(orientation="h", y=-0.2), height=400,
               title_y=0.97)
_SLO_LINE = dict(color="black", dash="dash", width=1.5)
LOG_AXIS = dict(type="log", dtick="D2", tickformat=",~g")
"""A log axis with ticks at 1, 2 and 5 times each power of ten, each showing its full value (plotly's
default writes the 2 and 5 between powers of ten as bare digits: "2, 10k, 5, 2, 1000")."""
PROFILE_COLORS = qualitative.Dark24
PROFILE_DASHES = ("solid", "dash", "dot")


def _line(x: list[float], y: list[float], name: str, line: dict[str, Any], show: bool) -> go.Scatter:
    """A straight reference line drawn as a trace (shapes on log axes need log coordinates)."""
    return go.Scatter(x=x, y=y, mode="lines", name=name, line=line, showlegend=show, hoverinfo="name")


def cdf_figure(cdf: pd.DataFrame, slo_s: dict[str, float], baseline: pd.DataFrame | None = None) -> go.Figure:
    """One panel per latency (TTFT, TPOT in ms; E2E in s), log x axis, SLO thresholds dotted."""
    metrics = [m for m in METRIC_LABELS if m in set(cdf["metric"])]
    fig = make_subplots(rows=1, cols=max(1, len(metrics)),
                        subplot_titles=[f"{METRIC_LABELS[m]} ({'s' if m == 'e2e_s' else 'ms'})" for m in metrics])
    for i, m in enumerate(metrics, start=1):
        scale = 1.0 if m == "e2e_s" else 1e3
        for frame, name, dash in ((cdf, "this run", "solid"), (baseline, "baseline", "dash")):
            if frame is None:
                continue
            d = frame[frame["metric"] == m]
            if d.empty:
                continue
            fig.add_trace(go.Scatter(x=d["value_s"] * scale, y=d["fraction"], mode="lines",
                                     name=f"{METRIC_LABELS[m]} {name}", line=dict(color=COLORS[m], dash=dash),
                                     hovertemplate="%{x:.3g} → %{y:.3f}<extra></extra>"), row=1, col=i)
        if m in slo_s:
            fig.add_trace(_line([slo_s[m] * scale] * 2, [0, 1], "SLO threshold (p99)", _SLO_LINE,
                                show=m == next(k for k in metrics if k in slo_s)), row=1, col=i)
        fig.add_hline(y=0.99, line=dict(color="grey", width=1, dash="dot"), row=1, col=i)
        fig.update_xaxes(**LOG_AXIS, title_text=f"latency ({'s' if m == 'e2e_s' else 'ms'})", row=1, col=i)
    fig.update_yaxes(title_text="fraction of requests ≤ x", range=[0, 1.02], row=1, col=1)
    fig.update_layout(title="Latency CDF of the measured requests (dotted: the 99th percentile)", **_LAYOUT)
    return fig


def stages_figure(stages: pd.DataFrame, baseline: pd.DataFrame | None = None) -> go.Figure:
    """Mean time per stage as stacked horizontal bars (this run and the baseline)."""
    fig = go.Figure()
    runs = [("this run", stages)] + ([("baseline", baseline)] if baseline is not None else [])
    for _, row in stages.iterrows():
        stage = row["stage"]
        xs, ys, texts = [], [], []
        for label, frame in runs:
            match = frame[frame["stage"] == stage]
            if match.empty:      # e.g. a baseline without a network stage
                continue
            r = match.iloc[0]
            xs.append(r["mean_s"] * 1e3)
            ys.append(label)
            texts.append(f"{r['mean_s'] * 1e3:,.0f} ms ({100 * r['share']:.0f}%)")
        fig.add_trace(go.Bar(x=xs, y=ys, orientation="h", name=stage, text=texts, textposition="inside",
                             marker_color=STAGE_COLORS.get(stage)))
    fig.update_layout(barmode="stack", title="Mean end-to-end time by stage", xaxis_title="mean time (ms)",
                      legend_traceorder="normal",
                      **{**_LAYOUT, "height": 260 if baseline is None else 320})
    return fig


def series_figure(series: pd.DataFrame) -> go.Figure:
    """Queue depth, running batch and KV usage over simulated time (bin averages)."""
    fig = make_subplots(rows=3, cols=1, shared_xaxes=True, vertical_spacing=0.06,
                        subplot_titles=["Waiting requests (queue depth)", "Running batch (requests)",
                                        "KV cache in use (%)"])
    for i, (col, scale) in enumerate((("queue_depth", 1.0), ("running_batch", 1.0), ("kv_usage", 100.0)), start=1):
        fig.add_trace(go.Scatter(x=series["time_s"], y=series[col] * scale, mode="lines", line_shape="hv",
                                 name=col.replace("_", " "), line=dict(color=COLORS[col])), row=i, col=1)
        fig.update_yaxes(rangemode="tozero", row=i, col=1)
    fig.update_xaxes(title_text="simulated time (s)", row=3, col=1)
    bin_s = float(series["bin_s"].iloc[0]) if len(series) else 0.0
    fig.update_layout(title=f"Engine state over time (time averages over {bin_s:.3g} s bins, all replicas)",
                      showlegend=False, **{**_LAYOUT, "height": 560})
    return fig


def load_curve_figure(sweep: pd.DataFrame, slo_s: dict[str, float], limit: dict[str, Any], per_gpu: bool) -> go.Figure:
    """p50/p99 TTFT and TPOT against offered load, SLO thresholds and the largest load meeting them
    (a concurrency sweep: against the throughput its clients achieved)."""
    x = sweep["rate_per_gpu"] if per_gpu else sweep["rate_per_s"]
    load = "throughput of the clients" if "concurrency" in sweep else "offered load"
    x_title = f"{load} (req/s per GPU)" if per_gpu else f"{load} (req/s)"
    fig = make_subplots(rows=1, cols=2, subplot_titles=["TTFT (ms)", "TPOT (ms)"])
    for i, metric in enumerate(("ttft", "tpot"), start=1):
        color = COLORS[f"{metric}_s"]
        for p, dash in (("p50", "dot"), ("p99", "solid")):
            fig.add_trace(go.Scatter(x=x, y=sweep[f"{metric}_{p}_s"] * 1e3, mode="lines+markers",
                                     name=f"{metric.upper()} {p}", line=dict(color=color, dash=dash)), row=1, col=i)
        if f"{metric}_s" in slo_s:
            fig.add_trace(_line([float(x.min()), float(x.max())], [slo_s[f"{metric}_s"] * 1e3] * 2,
                                f"{metric.upper()} SLO p99 {slo_s[f'{metric}_s'] * 1e3:g} ms",
                                {**_SLO_LINE, "color": color}, show=True), row=1, col=i)
        best = limit.get("max_rate_per_gpu" if per_gpu else "max_rate_per_s")
        if best is not None:
            fig.add_vline(x=best, line=dict(color="green", width=2), row=1, col=i,
                          annotation_text="max load meeting the SLO", annotation_position="top left")
        fig.update_xaxes(title_text=x_title, row=1, col=i)
        fig.update_yaxes(**LOG_AXIS, row=1, col=i)
    fig.update_layout(title="p50 (dotted) and p99 (solid) latency against load, log scale",
                      **{**_LAYOUT, "height": 460})
    return fig


def step_time_figure(curves: pd.DataFrame, profile_names: list[str]) -> go.Figure:
    """Predicted decode and prefill step times per profile (from the cost model)."""
    fig = make_subplots(rows=1, cols=2, subplot_titles=["Decode step (ms) vs batch size",
                                                        "Prefill step (ms) vs prompt tokens"])
    for j, name in enumerate(profile_names):   # 24 colours, then again dashed: every profile its own line
        line = dict(color=PROFILE_COLORS[j % len(PROFILE_COLORS)],
                    dash=PROFILE_DASHES[j // len(PROFILE_COLORS) % len(PROFILE_DASHES)])
        d = curves[curves["profile"] == name]
        for i, kind in enumerate(("decode", "prefill"), start=1):
            k = d[d["kind"] == kind]
            fig.add_trace(go.Scatter(x=k["x"], y=k["step_ms"], mode="lines+markers", name=name,
                                     legendgroup=name, showlegend=i == 1,
                                     line=line), row=1, col=i)
    fig.update_xaxes(**LOG_AXIS, title_text="requests in the batch", row=1, col=1)
    fig.update_xaxes(**LOG_AXIS, title_text="prompt tokens in the step", row=1, col=2)
    fig.update_yaxes(**LOG_AXIS, title_text="step time (ms)", row=1, col=1)
    fig.update_yaxes(**LOG_AXIS, row=1, col=2)
    fig.update_layout(title="Predicted engine step time (each profile's cost model: roofline or measured table)",
                      **{**_LAYOUT, "height": 420})
    return fig


def fit_figure(points: pd.DataFrame, profile_name: str, max_points_per_family: int = 1500) -> go.Figure:
    """Measured op time against the held-out prediction (log-log), one colour per op family,
    with the y = x line and a ±15% band."""
    palette = {"gemm": "#1f77b4", "elementwise": "#ff7f0e", "sampling": "#2ca02c", "attn_prefill": "#d62728",
               "attn_decode": "#9467bd", "comm": "#8c564b"}
    fig = go.Figure()
    ok = points.dropna(subset=["fitted_ms"])
    for fam, g in ok.groupby("family", sort=False):
        if len(g) > max_points_per_family:                     # evenly thinned for the browser
            g = g.iloc[:: -(-len(g) // max_points_per_family)]
        fig.add_trace(go.Scattergl(
            x=g["measured_ms"], y=g["fitted_ms"], mode="markers", name=fam, marker=dict(size=5, opacity=0.6,
                                                                                         color=palette.get(fam)),
            customdata=g[["op", "size", "size_unit", "rel_error"]].to_numpy(),
            hovertemplate="%{customdata[0]} at %{customdata[1]:,.0f} %{customdata[2]}<br>measured %{x:.4g} ms, "
                          "fitted %{y:.4g} ms (%{customdata[3]:+.1%})<extra></extra>"))
    if len(ok):
        lo = float(min(ok["measured_ms"].min(), ok["fitted_ms"].min()))
        hi = float(max(ok["measured_ms"].max(), ok["fitted_ms"].max()))
        for factor, name, dash in ((1.0, "fitted = measured", "solid"), (1.15, "±15%", "dot"),
                                   (1 / 1.15, "±15%", "dot")):
            fig.add_trace(_line([lo, hi], [lo * factor, hi * factor], name, dict(color="grey", dash=dash, width=1),
                                show=factor >= 1.0))
    fig.update_xaxes(**LOG_AXIS, title_text="measured (ms)")
    fig.update_yaxes(**LOG_AXIS, title_text="fitted, point held out (ms)")
    fig.update_layout(title=f"{profile_name}: measured op times vs the cost model's held-out fit",
                      **{**_LAYOUT, "height": 480})
    return fig


def plan_figure(worksheet: pd.DataFrame, totals: pd.DataFrame) -> go.Figure:
    """Peak GPUs per region per quarter (stacked bars), the GPUs provisioned on average (dotted line) and
    the quarter's provisioned cost (line, right axis)."""
    fig = make_subplots(specs=[[{"secondary_y": True}]])
    ws = worksheet.copy()
    ws["gpus"] = pd.to_numeric(ws["gpus"], errors="coerce").fillna(0)
    for region, g in ws.groupby("region", sort=False):
        fig.add_trace(go.Bar(x=g["quarter"], y=g["gpus"], name=f"{region} GPUs (peak)",
                             customdata=g[["candidate", "replicas", "provisioning"]].to_numpy(),
                             hovertemplate="%{x} " + str(region) + ": %{y} GPUs at the peak "
                                           "(%{customdata[0]}, %{customdata[1]} replicas, provisioning "
                                           "%{customdata[2]})<extra></extra>"),
                      secondary_y=False)
    quarters = totals[(totals["region"] == "all regions") & (totals["quarter"] != "all quarters")]
    cost = next(c for c in totals.columns if c.startswith("cost_"))
    currency = cost.removeprefix("cost_").upper()
    fig.add_trace(go.Scatter(x=quarters["quarter"], y=quarters["gpu_hours"] / quarters["period_hours"],
                             mode="lines+markers", name="GPUs provisioned (average)",
                             line=dict(color="gray", dash="dot")), secondary_y=False)
    fig.add_trace(go.Scatter(x=quarters["quarter"], y=quarters[cost], mode="lines+markers",
                             name=f"cost ({currency}/quarter, provisioned)", line=dict(color="black")),
                  secondary_y=True)
    fig.update_yaxes(title_text="GPUs", secondary_y=False, rangemode="tozero")
    fig.update_yaxes(title_text=f"cost ({currency} per quarter)", secondary_y=True, rangemode="tozero")
    fig.update_xaxes(title_text="quarter")
    fig.update_layout(barmode="stack", title="Peak GPUs per region per quarter, GPUs provisioned on average, "
                                             "and the cost of the provisioned GPU-hours", **_LAYOUT)
    return fig


def validation_figure(points: pd.DataFrame, bands: tuple[float, ...] = (0.10, 0.15)) -> go.Figure:
    """Predicted vs measured latency (ms, log-log) per metric, labels the load, x error bars the
    engine's run-to-run noise; the y = x line and shaded ±bands (relative error)."""
    fig = go.Figure()
    if points.empty:
        return fig
    lo = float(min(points["measured_ms"].min(), points["predicted_ms"].min())) / 1.3
    hi = float(max(points["measured_ms"].max(), points["predicted_ms"].max())) * 1.3
    xs = [lo, hi]
    for band, alpha in zip(sorted(bands, reverse=True), (0.10, 0.18, 0.26), strict=False):
        fig.add_trace(go.Scatter(x=xs + xs[::-1], y=[x * (1 + band) for x in xs] + [x * (1 - band) for x in xs[::-1]],
                                 fill="toself", fillcolor=f"rgba(44,160,44,{alpha})", line=dict(width=0),
                                 name=f"±{band:.0%}", hoverinfo="skip"))
    fig.add_trace(go.Scatter(x=xs, y=xs, mode="lines", name="y = x", line=dict(color="black", dash="dash")))
    for metric, grp in points.groupby("metric", sort=False):
        fig.add_trace(go.Scatter(
            x=grp["measured_ms"], y=grp["predicted_ms"], mode="markers+text", name=str(metric),
            text=[f"{v:.0%}" for v in grp["load"]], textposition="top center",
            error_x=dict(type="data", array=grp["noise_ms"].tolist()),
            customdata=grp["error"], hovertemplate="measured %{x:.2f} ms<br>predicted %{y:.2f} ms<br>"
                                                   "error %{customdata:+.1%}<extra>%{fullData.name}</extra>"))
    fig.update_layout(xaxis=dict(title="measured on the engine (ms)", **LOG_AXIS),
                      yaxis=dict(title="predicted by the simulator (ms)", **LOG_AXIS),
                      height=520, margin=dict(t=30), legend=dict(orientation="v"))
    return fig
