"""Load curve: latency tails against offered load, and the largest load that holds the SLO.

The load is an open-loop arrival rate, or (as serving benchmarks sweep) a closed loop's number of
clients, whose throughput is then the x axis."""
from __future__ import annotations

import numpy as np
import streamlit as st

from app_pages.charts import load_curve_figure
from app_pages.common import (
    DEFAULT_EXAMPLE,
    DEFAULT_TIME_LIMIT_S,
    cached_sweep,
    fmt,
    interrupted_run,
    knob_widget,
    restore_widgets,
    save_widgets,
    scenario_source,
    show_error,
)
from simulator import ScenarioError, resolve
from simulator.metrics import slo_thresholds_s
from simulator.output import csv_text
from simulator.report.analysis import (
    RunCancelled,
    max_load_meeting_slo,
    num_gpus,
    with_arrival_rate,
    with_concurrency,
)
from simulator.report.knobs import KNOB
from simulator.scenario.config import ClosedLoopArrival, GammaArrival, OfflineArrival, PoissonArrival
from simulator.scenario.io import scenario_key

P = "lc"
WIDGET_KEYS = [f"{P}_{k}" for k in ("mode", "example", "axis", "min_rate", "max_rate", "min_clients", "max_clients",
                                    "think_s", "points", "num_requests", "slo_ttft_ms", "slo_tpot_ms", "per_gpu",
                                    "time_limit_s")]
RATE, CLIENTS = "Arrival rate", "Clients (closed loop)"

st.title("Load curve")
st.caption("Simulate the scenario at a range of arrival rates, or of closed-loop clients as serving benchmarks "
           "do (same seed and lengths at every point), and find the largest load whose p99 latencies stay within "
           "the SLO.")

restore_widgets(P)
base, _ = scenario_source(P, default_example=DEFAULT_EXAMPLE, offer_what_if=True)
if base is None:
    save_widgets(P, WIDGET_KEYS)
    st.stop()
arrival = base.workload.arrival
if not isinstance(arrival, (PoissonArrival, GammaArrival, ClosedLoopArrival, OfflineArrival)):
    show_error(ScenarioError("workload.arrival.process", arrival.process,
                             "a load curve needs poisson or gamma arrivals, or a closed loop or offline batch "
                             "to sweep clients; a trace keeps its own rate"))
    save_widgets(P, WIDGET_KEYS)
    st.stop()

if st.session_state.get(f"{P}_base_id") != scenario_key(base):   # a new scenario: defaults from it
    st.session_state[f"{P}_base_id"] = scenario_key(base)
    rate = getattr(arrival, "rate_per_s", 4.0)
    # Enough requests that at the highest rate (4x) the measured part outlasts warm-up and cool-down together
    # (a window they leave empty is an error).
    n = max(min(base.num_requests or 2000, 3000), int(np.ceil(2 * 4.0 * rate * (base.warmup_s + base.cooldown_s))))
    clients = arrival.concurrency if isinstance(arrival, ClosedLoopArrival) else base.scheduler.max_num_seqs
    st.session_state.update({
        f"{P}_axis": CLIENTS if isinstance(arrival, ClosedLoopArrival | OfflineArrival) else RATE,
        f"{P}_min_rate": round(rate * 0.25, 3), f"{P}_max_rate": round(rate * 4.0, 3),
        f"{P}_min_clients": max(1, clients // 8), f"{P}_max_clients": max(2, min(clients * 2, 4096)),
        f"{P}_think_s": float(arrival.think_time_s) if isinstance(arrival, ClosedLoopArrival) else 0.0,
        f"{P}_points": 8, f"{P}_num_requests": int(min(n, 100_000)),
        f"{P}_slo_ttft_ms": float(base.slo.ttft_p99_ms or 0.0), f"{P}_slo_tpot_ms": float(base.slo.tpot_p99_ms or 0.0)})
st.session_state.setdefault(f"{P}_per_gpu", False)
st.session_state.setdefault(f"{P}_time_limit_s", 2 * DEFAULT_TIME_LIMIT_S)

with st.sidebar.expander("Sweep", expanded=True):
    axis = st.radio("Load", [RATE, CLIENTS], key=f"{P}_axis", horizontal=True,
                    help="Arrival rate: open-loop arrivals (poisson, or gamma as in the scenario). Clients: a "
                         "closed loop, each client sending its next request when its last one ended (after the "
                         "think time); its load is the throughput it achieves.")
    closed = axis == CLIENTS
    if closed:
        lo = st.number_input("Fewest clients", min_value=1, max_value=100_000, step=1, key=f"{P}_min_clients")
        hi = st.number_input("Most clients", min_value=1, max_value=100_000, step=1, key=f"{P}_max_clients")
        think = knob_widget(KNOB["think_s"], f"{P}_think_s")
    else:
        lo = st.number_input("Lowest rate (req/s)", min_value=0.001, max_value=1e5, key=f"{P}_min_rate")
        hi = st.number_input("Highest rate (req/s)", min_value=0.001, max_value=1e5, key=f"{P}_max_rate")
    points = st.slider("Loads" if closed else "Rates", min_value=2, max_value=20, key=f"{P}_points",
                       help="Evenly spaced from lowest to highest")
    n_req = st.number_input("Requests per rate", min_value=100, max_value=100_000, step=500, key=f"{P}_num_requests",
                            help="More requests: steadier tails, longer sweep")
with st.sidebar.expander("SLO (p99 thresholds; 0 = none)", expanded=True):
    ttft = knob_widget(KNOB["slo_ttft_ms"], f"{P}_slo_ttft_ms")
    tpot = knob_widget(KNOB["slo_tpot_ms"], f"{P}_slo_tpot_ms")
with st.sidebar.expander("Run limits"):
    st.number_input("Time limit (s of wall time)", min_value=0.001, max_value=3600.0, key=f"{P}_time_limit_s")
per_gpu = st.sidebar.toggle("x axis per GPU", key=f"{P}_per_gpu")
save_widgets(P, WIDGET_KEYS)

scenario = None
try:
    if hi <= lo:
        raise ScenarioError("most clients" if closed else "highest rate", hi,
                            f"must be above the {'fewest clients' if closed else 'lowest rate'} {lo:g}")
    scenario = base.with_overrides({"num_requests": int(n_req), "duration_s": None, "slo.ttft_p99_ms": ttft or None,
                                    "slo.tpot_p99_ms": tpot or None})
    if closed:
        scenario = with_concurrency(scenario, int(lo)).with_overrides({"workload.arrival.think_time_s": think})
    else:
        scenario = with_arrival_rate(scenario, lo)
    system = resolve(scenario)
    load = (f"closed loop, think time {think:g} s" if closed
            else f"{scenario.workload.arrival.process} arrivals")
    st.markdown(f"**{system.model.name}** on **{num_gpus(scenario)} × {system.profile.name}** "
                f"({system.profile.source}) · {load} · "
                f"{int(n_req):,} requests per {'load' if closed else 'rate'} · seed {scenario.seed}")
except ScenarioError as exc:
    show_error(exc)
    scenario = None
if closed:
    rates = tuple(float(c) for c in sorted({int(round(c)) for c in np.linspace(lo, hi, int(points))}))
else:
    rates = tuple(float(r) for r in np.round(np.linspace(lo, hi, int(points)), 6))
if scenario is not None and not slo_thresholds_s(scenario.slo):
    st.warning("No SLO set: the sweep shows latency, but there is no load limit to mark. Set a TTFT or TPOT "
               "threshold in the sidebar.", icon=":material/flag:")

c_run, c_stop, _ = st.columns([1.3, 0.8, 5])
run = c_run.button("Run sweep", type="primary", disabled=scenario is None, key=f"{P}_run", icon=":material/play_arrow:")
stop = c_stop.button("Stop", key=f"{P}_stop", icon=":material/stop:",
                     help="Stops a sweep in progress (nothing is cached); so does changing any widget")
interrupted_run(P, stop)
if run and scenario is not None:
    st.session_state[f"{P}_running"] = True
    try:
        sweep = cached_sweep(scenario_key(scenario), rates, float(st.session_state[f"{P}_time_limit_s"]),
                             "concurrency" if closed else "rate")
        st.session_state[f"{P}_result"] = (scenario, sweep)
    except RunCancelled as exc:
        st.warning(f"Sweep cancelled: {exc}", icon=":material/timer_off:")
    except Exception as exc:
        show_error(exc)
    st.session_state[f"{P}_running"] = False

if f"{P}_result" not in st.session_state:
    st.info("Press **Run sweep**.", icon=":material/play_circle:")
    st.stop()
done_scenario, sweep = st.session_state[f"{P}_result"]
limit = max_load_meeting_slo(sweep)
slo_s = slo_thresholds_s(done_scenario.slo)
gpus = num_gpus(done_scenario)

swept_clients = "concurrency" in sweep
c1, c2, c3 = st.columns(3)
if swept_clients:
    c1.metric("Most clients meeting the SLO", fmt(limit["max_concurrency"], 0), border=True)
    c2.metric("Throughput there (req/s)", fmt(limit["max_rate_per_s"], 2), border=True)
    c3.metric("First swept clients missing it", fmt(limit["first_failing_concurrency"], 0), border=True)
else:
    c1.metric("Max load meeting the SLO (req/s)", fmt(limit["max_rate_per_s"], 2), border=True)
    c2.metric(f"Per GPU (req/s, {gpus} GPU{'s' if gpus > 1 else ''})", fmt(limit["max_rate_per_gpu"], 2),
              border=True)
    c3.metric("First swept rate missing it (req/s)", fmt(limit["first_failing_rate_per_s"], 2), border=True)
reason = limit["reason"]
if swept_clients:
    st.caption(f"{reason[:1].upper()}{reason[1:]}. The limit is only as fine as the grid of loads. A closed loop "
               "cannot overload the engine: past its capacity more clients only wait longer, so throughput (the "
               "x axis, measured in each run's steady window) flattens while latency grows.")
else:
    st.caption(f"{reason[:1].upper()}{reason[1:]}. The limit is only as fine as the grid of rates; narrow the range "
               "around it for "
               "a sharper answer. Above capacity the queue grows for the whole run (the `stable` column is false): "
               "the tails there depend on the number of requests, and the SLO judge fails such a rate.")
st.plotly_chart(load_curve_figure(sweep, slo_s, limit, per_gpu), key=f"{P}_chart")
table = sweep.drop(columns=["policy", "wall_s"]).rename(columns={
    "concurrency": "clients", "mean_running_batch": "mean running batch",
    "rate_per_s": "rate (req/s)", "rate_per_gpu": "rate per GPU (req/s)", "throughput_rps": "throughput (req/s)",
    "slo_attainment": "SLO attainment", "slo_met": "SLO met", "stable": "stable", "completed": "completed"})
for col in [c for c in table.columns if c.endswith(("_p50_s", "_p99_s", "_mean_s"))]:
    metric, p, _ = col.rsplit("_", 2)
    table[f"{metric.replace('_', ' ').upper()} {p} (ms)"] = table.pop(col) * 1e3
flags = ("SLO met", "stable", "completed", "rejected", "dropped", "preemptions", "clients")
st.dataframe(table, hide_index=True, column_config={c: st.column_config.NumberColumn(format="%.3g")
                                                   for c in table.columns if c not in flags})
st.download_button("Download sweep CSV", csv_text(sweep), file_name="load_curve.csv", mime="text/csv",
                   key=f"{P}_download", icon=":material/download:")
