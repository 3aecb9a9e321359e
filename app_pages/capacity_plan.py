"""Capacity plan: GPUs per region per quarter for a forecast, from the planner (``llmplan plan``)."""
from __future__ import annotations

import json
from typing import Any

import pandas as pd
import streamlit as st

from app_pages.charts import plan_figure
from app_pages.common import EXAMPLES, fmt, interrupted_run, plan_files, restore_widgets, save_widgets, show_error
from simulator import ScenarioError
from simulator.output import csv_text
from simulator.planner.config import load_plan
from simulator.planner.run import plan
from simulator.report.analysis import RunCancelled
from simulator.scenario.io import MAX_FORECAST_BYTES, forecast_rows_from_csv_bytes

P = "cp"
WIDGET_KEYS = [f"{P}_plan", f"{P}_candidates", f"{P}_num_requests"]


@st.cache_data(max_entries=32, show_spinner=False)
def load_example_plan(name: str) -> dict[str, Any]:
    """The example plan's validated config as plain data, with its forecast inlined."""
    loaded = load_plan(EXAMPLES / name)
    data = loaded.config.model_dump(mode="json", exclude_none=True)
    data["forecast"] = _rows(loaded.forecast)
    return data


def _rows(frame: pd.DataFrame) -> list[dict[str, Any]]:
    return [{k: (None if pd.isna(v) else v) for k, v in r.items()} for r in frame.to_dict("records")]


@st.cache_data(max_entries=16, show_spinner=False)
def cached_plan(key: str) -> dict[str, pd.DataFrame]:
    """Run the planner once per plan (canonical JSON); searches run in this process so the
    progress bar updates and Stop interrupts them."""
    data = json.loads(key)
    bar = st.progress(0.0, text="planning")

    def on_progress(p: Any) -> None:
        what = f"{p.replicas} replicas" if p.replicas is not None else p.status
        bar.progress(p.done / p.total, text=f"{p.done} / {p.total} searches · {p.quarter} {p.region} "
                                            f"{p.candidate}: {what}")

    result = plan(load_plan(data, base_dir=data["base_dir"]), on_progress=on_progress, backend="local", workers=1)
    bar.empty()
    return {"worksheet": result.worksheet, "summary": result.summary, "totals": result.totals,
            "candidates": result.candidates, "wall_s": pd.DataFrame({"wall_s": [result.wall_s]})}


st.title("Capacity plan")
st.caption("For every quarter and region of the forecast, the planner searches the fewest replicas of each "
           "candidate deployment that hold the plan's SLO (simulated, with headroom, failover and network RTT), "
           "and keeps the cheapest. The same engine as `llmplan plan`.")

restore_widgets(P)
plans = plan_files()
if not plans:
    st.warning("No plan files (examples/plan-*.yaml) found.")
    st.stop()
if st.session_state.get(f"{P}_plan") not in plans:
    st.session_state[f"{P}_plan"] = plans[0]
name = st.sidebar.selectbox("Plan", plans, key=f"{P}_plan", help="Plan files in examples/ (see the README)")
try:
    base_plan = load_example_plan(name)
except ScenarioError as exc:
    show_error(exc)
    st.stop()

cands = [c["name"] for c in base_plan["candidates"]]
if st.session_state.get(f"{P}_base") != name:
    st.session_state[f"{P}_base"] = name
    st.session_state[f"{P}_candidates"] = cands
    st.session_state[f"{P}_num_requests"] = int(base_plan.get("simulation", {}).get("num_requests", 3000))
chosen = st.sidebar.multiselect("Candidates", cands, key=f"{P}_candidates",
                                help="Deployments the planner may choose from (each one a search per cell)")
n_req = st.sidebar.number_input("Requests per simulation", min_value=100, max_value=50_000, step=500,
                                key=f"{P}_num_requests", help="Fewer: faster, noisier tails")
upload = st.sidebar.file_uploader("Forecast CSV (replaces the table)", type=["csv"], key=f"{P}_upload",
                                  help=f"Columns quarter, region, peak_rps[, avg_prompt_tokens, avg_output_tokens]; "
                                       f"at most {MAX_FORECAST_BYTES // 1024} KiB")
save_widgets(P, WIDGET_KEYS)

rows, source = base_plan["forecast"], name
if upload is not None:
    try:
        rows, source = forecast_rows_from_csv_bytes(upload.getvalue(), source=upload.name), upload.name
    except ScenarioError as exc:
        show_error(exc)
st.markdown(f"**Forecast** (from {source}; edit cells, add or delete rows)")
columns = ["quarter", "region", "peak_rps", "avg_prompt_tokens", "avg_output_tokens"]
edited = st.data_editor(pd.DataFrame(rows).reindex(columns=[c for c in columns if c in pd.DataFrame(rows).columns]
                                                   or columns),
                        num_rows="dynamic", hide_index=True, key=f"{P}_editor_{source}",
                        column_config={"peak_rps": st.column_config.NumberColumn("peak_rps (req/s)", min_value=0.0)})

plan_data, problem = None, None
try:
    if not chosen:
        raise ScenarioError("candidates", [], f"choose at least one of {', '.join(cands)}")
    forecast = [r for r in _rows(edited) if any(v is not None for v in r.values())]
    if not forecast:
        raise ScenarioError("forecast", [], "needs at least one row (quarter, region, peak_rps)")
    # Regions without a forecast row are left out (with their RTTs); a region missing in some quarter
    # only is an error (a forecast gap).
    in_forecast = {r.get("region") for r in forecast}
    kept = [r for r in base_plan["regions"] if r["name"] in in_forecast]
    regions = [{**r, "rtt_ms": {k: v for k, v in r["rtt_ms"].items() if k in in_forecast}} for r in kept] \
        if kept else base_plan["regions"]
    dropped = [r["name"] for r in base_plan["regions"] if r["name"] not in in_forecast] if kept else []
    failover = base_plan.get("failover", "n_plus_one")
    single = failover == "n_plus_one" and len(regions) < 2     # N+1 needs another region to fail over to
    if single:
        failover = "none"
    plan_data = {**base_plan, "forecast": forecast, "regions": regions, "failover": failover,
                 "candidates": [c for c in base_plan["candidates"] if c["name"] in chosen],
                 "simulation": {**base_plan.get("simulation", {}), "num_requests": int(n_req)}}
    loaded = load_plan(plan_data, base_dir=base_plan["base_dir"])    # validates every field, nothing runs
    slo = loaded.config.slo
    st.caption(f"{len(forecast)} forecast rows × {len(chosen)} candidates = {len(forecast) * len(chosen)} searches "
               f"of {int(n_req):,} requests per simulation · "
               f"SLO p99 TTFT {slo.ttft_p99_ms or '–'} ms, TPOT {slo.tpot_p99_ms or '–'} ms, attainment "
               f"{slo.attainment:.0%} · headroom {loaded.config.headroom:.0%} · "
               f"failover {loaded.config.failover}"
               + (f" · regions without forecast rows left out: {', '.join(dropped)}" if dropped else "")
               + (" (one region left: N+1 failover is off)" if single else ""))
except ScenarioError as exc:
    problem = exc
    show_error(exc)

c_run, c_stop, _ = st.columns([1.3, 0.8, 5])
run = c_run.button("Run planner", type="primary", disabled=problem is not None, key=f"{P}_run",
                   icon=":material/play_arrow:")
stop = c_stop.button("Stop", key=f"{P}_stop", icon=":material/stop:",
                     help="Stops planning in progress (nothing is cached); so does changing any widget")
interrupted_run(P, stop)
if run and plan_data is not None:
    st.session_state[f"{P}_running"] = True
    try:
        st.session_state[f"{P}_result"] = cached_plan(json.dumps(plan_data, sort_keys=True, default=str))
    except RunCancelled as exc:
        st.warning(f"Planning cancelled: {exc}", icon=":material/timer_off:")
    except Exception as exc:  # a failed plan must not take the page down
        show_error(exc)
    st.session_state[f"{P}_running"] = False

result = st.session_state.get(f"{P}_result")
if result is None:
    st.info("Press **Run planner**.", icon=":material/play_circle:")
    st.stop()
ws, summary, totals = result["worksheet"], result["summary"], result["totals"]
cost_col = next(c for c in totals.columns if c.startswith("cost_"))
currency = cost_col.removeprefix("cost_").upper()
per_quarter = totals[(totals["region"] == "all regions") & (totals["quarter"] != "all quarters")]
last = per_quarter.iloc[-1]
c1, c2, c3, c4, c5 = st.columns(5)
c1.metric(f"Peak GPUs in {last['quarter']}", fmt(last.get("gpus_peak"), 0), border=True,
          help="The fleet the search verified at each region's design peak, summed over regions: what "
               "must be bought or reserved")
c2.metric(f"GPU-hours in {last['quarter']} (provisioned)", fmt(last.get("gpu_hours"), 0), border=True,
          help="The hours the fleet runs: through each region's diurnal shape under the candidate's "
               "autoscaler (provisioning diurnal), else the peak fleet all day (peak, static)")
c3.metric(f"Cost in {last['quarter']} ({currency}, provisioned)", fmt(last.get(cost_col), 0), border=True)
c4.metric("Cells without a feasible candidate", fmt(float(per_quarter["infeasible_cells"].sum()), 0),
          border=True)
c5.metric("Planner wall time (s)", fmt(float(result["wall_s"]["wall_s"].iloc[0]), 1), border=True)
st.plotly_chart(plan_figure(ws, totals), key=f"{P}_chart")
st.markdown("**Worksheet** (one row per quarter and region: the cheapest candidate that holds the SLO; "
            "`gpus_peak` to buy, `gpu_hours` and cost as provisioned; the file `llmplan plan` writes as "
            "worksheet.csv)")
st.dataframe(summary, hide_index=True)
st.download_button("Download worksheet CSV", csv_text(summary), file_name="capacity-worksheet.csv",
                   mime="text/csv", key=f"{P}_download", icon=":material/download:")
st.markdown("**Totals** (per quarter, per region over all quarters, overall)")
st.dataframe(totals, hide_index=True)
with st.expander("Engineering detail of the chosen candidates"):
    st.dataframe(ws, hide_index=True)
with st.expander("Every candidate's search"):
    st.dataframe(result["candidates"], hide_index=True)
st.caption(f"Costs in {currency}: price_per_gpu_hour (price_source assumed: the hardware profile's; "
           "quoted: the plan's) × the region's price_multiplier × the GPU-hours provisioned. See docs/planner.md "
           "for the search, the failover rule, the fleet-hours model of the autoscaler and the limits.")
