"""Validation: the simulator's predictions against a real engine (``llmplan validate`` results)."""
from __future__ import annotations

import os
from pathlib import Path

import streamlit as st

from app_pages.charts import validation_figure
from app_pages.common import ROOT, show_error
from simulator import ScenarioError
from simulator.output import csv_text
from simulator.report.validation_report import (
    MAX_VALIDATION_BYTES,
    error_matrix,
    load_validation,
    provenance,
    scatter_points,
    targets_summary,
    validation_folders,
    validation_from_json_bytes,
    validation_table,
)

P = "val"
RESULTS = Path(os.environ.get("LLMPLAN_FIDELITY_RESULTS", ROOT / "benchmarks" / "results"))  # fidelity-*/ under it

st.title("Validation")
st.caption("Predicted vs measured: `llmplan validate` serves the same requests on a real engine (the torch "
           "reference engine of `calibrate/engine.py`) and in the simulator, and compares their tails. Error = "
           "predicted / measured - 1 against the median of the engine runs; noise = the engine's run-to-run "
           "spread (half the range over the median). Targets: |error| <= 10% on p50s and throughput, <= 15% on "
           "p90s/p99s.")

folders = validation_folders(RESULTS)
modes = ["Results folder", "Upload validation.json"]
mode = st.sidebar.radio("Validation run", modes, key=f"{P}_mode", horizontal=True)
doc, label = None, None
if mode == modes[0]:
    if not folders:
        st.info("No benchmarks/results/fidelity-*/validation.json here; run `python benchmarks/fidelity.py` "
                "or upload a validation.json.", icon=":material/info:")
        st.stop()
    names = [p.name for p in folders]
    name = st.sidebar.selectbox("Results folder (newest first)", names, key=f"{P}_folder",
                                help="benchmarks/results/fidelity-*/ holding a validation.json")
    label = str(RESULTS / name)
    try:
        doc = load_validation(RESULTS / name)
    except ScenarioError as exc:
        show_error(exc)
else:
    upload = st.sidebar.file_uploader(
        "validation.json", type=["json"], key=f"{P}_upload",
        help=f"As written by `llmplan validate --out DIR`; at most {MAX_VALIDATION_BYTES // 1024} KiB, parsed as "
             "plain JSON.")
    if upload is None:
        st.info("Upload a validation.json in the sidebar, or choose a results folder.",
                icon=":material/upload_file:")
        st.stop()
    label = upload.name
    try:
        doc = validation_from_json_bytes(upload.getvalue(), source=upload.name)
    except ScenarioError as exc:
        show_error(exc)
if doc is None:
    st.stop()

info = provenance(doc)
counts = targets_summary(doc)
c = st.columns(4)
c[0].metric("Clock", str(info.get("clock", "?")))
c[1].metric("Targets met", f"{counts['met']} / {sum(counts.values())}")
c[2].metric("Within target + noise", str(counts["within noise"]))
c[3].metric("Missed", str(counts["missed"]))
st.caption(f"Source: {label}. Model {info.get('model', '?')} on {info.get('device', '?')}, policy "
           f"{info.get('policy', '?')}, {info.get('num_requests', '?')} requests per load, "
           f"{info.get('repeats', '?')} engine runs per load.")

st.subheader("Predicted vs measured")
points = scatter_points(doc)
st.plotly_chart(validation_figure(points), key=f"{P}_scatter")
st.caption("Each point: one latency percentile at one load (label). Shaded: ±10% and ±15% around y = x; "
           "horizontal bars: the engine's noise.")

st.subheader("Errors per load")
matrix = error_matrix(doc)
st.dataframe(matrix.style.format("{:+.1%}"), key=f"{P}_matrix")

st.subheader("Every row")
table = validation_table(doc)
st.dataframe(table, hide_index=True, key=f"{P}_table", column_config={
    "load": st.column_config.NumberColumn("load", format="percent"),
    "rate_per_s": st.column_config.NumberColumn("rate (req/s)", format="%.2f"),
    "measured": st.column_config.NumberColumn("measured", format="%.3f"),
    "predicted": st.column_config.NumberColumn("predicted", format="%.3f"),
    "error": st.column_config.NumberColumn("error", format="percent"),
    "noise": st.column_config.NumberColumn("noise (±)", format="percent"),
    "target": st.column_config.NumberColumn("target", format="percent"),
})
st.download_button("Download table CSV", csv_text(table), file_name="validation_table.csv",
                   key=f"{P}_download")

st.subheader("Provenance")
st.json(info, expanded=True)
st.caption("Thread-clock runs time each step by its thread CPU time (a dedicated core); wall-clock runs on a "
           "shared machine include other processes' time-slicing (see README \"Fidelity\").")
