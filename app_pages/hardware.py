"""Hardware profiles: what each device can do according to its profile, where the numbers came
from, and for measured/imported profiles how well the cost model fits the measurements."""
from __future__ import annotations

import pandas as pd
import streamlit as st

from app_pages.charts import fit_figure, step_time_figure
from app_pages.common import show_error
from simulator import MODEL_PRESETS, ScenarioError, available_profiles, load_profile
from simulator.report.analysis import measured_vs_fitted, profiles_overview, step_time_curves
from simulator.report.profile_report import TARGET_MEDIAN, TARGET_P90, family_report

P = "hw"


@st.cache_data(max_entries=16, show_spinner="Fitting the measurements (leave one out)...")
def fit_data(name: str, table_sha256: str | None) -> tuple[pd.DataFrame, pd.DataFrame]:
    """Held-out fit of one table profile (keyed by name and table checksum)."""
    prof = load_profile(name)
    return family_report(prof), measured_vs_fitted(prof)


st.title("Hardware profiles")
st.caption("Profiles found in $LLMPLAN_PROFILES, ./hwprofiles and the installed package (first match wins). "
           "`source` says where the numbers come from: datasheet (vendor peaks, assumed efficiencies), "
           "measured (calibration on the device), imported (others' measurements), fitted (costs fitted to a "
           "real engine's observed runs).")

profiles = {}
for name, path in available_profiles().items():
    try:
        profiles[name] = load_profile(str(path))
    except ScenarioError as exc:   # one broken profile file must not hide the others
        show_error(exc)
if not profiles:
    st.warning("No hardware profiles found.")
    st.stop()

table = profiles_overview(profiles)
st.dataframe(table, hide_index=True, column_config={
    "memory_gib": st.column_config.NumberColumn("memory (GiB)", format="%.1f"),
    "bandwidth_tb_s": st.column_config.NumberColumn("HBM bandwidth (TB/s)", format="%.2f"),
    "bf16_tflops": st.column_config.NumberColumn("bf16 dense (TFLOP/s)", format="%.0f"),
    "fp8_tflops": st.column_config.NumberColumn("fp8 dense (TFLOP/s)", format="%.0f"),
    "interconnect_gb_s": st.column_config.NumberColumn("link (GB/s per direction)", format="%.0f"),
    "usd_per_gpu_hour": st.column_config.NumberColumn("$/GPU-hour (assumed)", format="%.2f"),
})
sources = table["source"].value_counts().to_dict()
st.caption("Sources: " + ", ".join(f"{n} {s}" for s, n in sources.items()) + ". Datasheet efficiencies, overheads "
           "and prices are assumptions; `table` profiles time each op from their measurements.")

st.subheader("Predicted step time")
c1, c2, c3, c4 = st.columns([3, 2, 1, 1])
chosen = c1.multiselect("Profiles", list(profiles), default=list(profiles), key=f"{P}_profiles")
model_name = c2.selectbox("Model", list(MODEL_PRESETS), key=f"{P}_model")
tp = c3.selectbox("TP", [1, 2, 4, 8], key=f"{P}_tp")
context = c4.number_input("Context (tokens)", min_value=1, max_value=1_000_000, value=1024, step=512, key=f"{P}_ctx",
                          help="Tokens each decoding request attends over")
frames, skipped = [], []
for name in chosen:
    try:
        frames.append(step_time_curves(profiles[name], MODEL_PRESETS[model_name], int(tp),
                                       context_tokens=int(context)).assign(profile=name))
    except ScenarioError as exc:    # e.g. a CPU table measured in fp32 cannot time a bf16 model
        skipped.append(f"{name} ({exc})")
if frames:
    curves = pd.concat(frames, ignore_index=True)
    shown = [n for n in chosen if n in set(curves["profile"])]
    st.plotly_chart(step_time_figure(curves, shown), key=f"{P}_chart")
    st.caption("What the simulator's cost model predicts for one engine step from each profile: decode steps of N "
               "requests, and prefill steps of one prompt. This chart does not check that the weights fit.")
if skipped:
    st.caption("Not shown: " + "; ".join(skipped))

st.subheader("Measured vs fitted")
measured = [n for n, p in profiles.items() if p.table is not None]
if not measured:
    st.caption("No profile here carries measurements (cost_model: table or kernel_table); calibrate one with "
               "`python -m calibrate`.")
else:
    name = st.selectbox("Profile with measurements", measured, key=f"{P}_fit_profile")
    try:
        fam, points = fit_data(name, profiles[name].table_sha256)
    except ScenarioError as exc:
        show_error(exc)
    else:
        st.plotly_chart(fit_figure(points, name), key=f"{P}_fit_chart")
        fam = fam.assign(**{c: fam[c] * 100 for c in ("median_abs_error", "p90_abs_error", "max_abs_error")})
        st.dataframe(fam.rename(columns={"median_abs_error": "median |error| (%)", "p90_abs_error": "p90 |error| (%)",
                                         "max_abs_error": "max |error| (%)", "meets_target": "meets target"}),
                     hide_index=True, column_config={c: st.column_config.NumberColumn(format="%.1f") for c in
                                                     ("median |error| (%)", "p90 |error| (%)", "max |error| (%)")})
        st.caption(f"Each measured op time against the cost model's prediction with that point held out (leave one "
                   f"out). Target per op family: median |error| ≤ {100 * TARGET_MEDIAN:g}%, "
                   f"p90 ≤ {100 * TARGET_P90:g}%. "
                   "Ops without measurements in a profile (e.g. attention in Vidur's tables) come from its datasheet "
                   "numbers and are not shown.")

st.subheader("Provenance")
name = st.selectbox("Profile", list(profiles), key=f"{P}_detail")
prof = profiles[name]
left, right = st.columns(2)
with left:
    st.markdown(f"**{prof.device or name}** · source **{prof.source}** · cost model `{prof.cost_model}`")
    prov = pd.DataFrame([(k, str(v)) for k, v in prof.provenance.items()], columns=["field", "value"])
    st.dataframe(prov, hide_index=True, width="stretch")
with right:
    assumed = [("efficiency." + k, v) for k, v in prof.efficiency.model_dump().items()]
    assumed += [("overhead." + k, v) for k, v in prof.overhead.model_dump().items()]
    assumed += [("non_torch_memory_bytes", prof.non_torch_memory_bytes),
                ("price_per_gpu_hour", prof.price_per_gpu_hour)]
    st.dataframe(pd.DataFrame([(k, str(v)) for k, v in assumed], columns=["parameter", "value"]), hide_index=True,
                 width="stretch")
with st.expander("Whole profile (YAML fields)"):
    st.json(prof.model_dump(mode="json"))
