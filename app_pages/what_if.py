"""What-if: change one knob of a serving system, run it, and see what happens to the tails.

The knobs are the table in ``simulator.report.knobs`` (scenario path, label, widget, bounds, help
read from the scenario's field documentation); this page draws them and reads them back."""
from __future__ import annotations

from typing import Any

import pandas as pd
import streamlit as st

from app_pages.charts import cdf_figure, series_figure, stages_figure
from app_pages.common import (
    DEFAULT_EXAMPLE,
    DEFAULT_TIME_LIMIT_S,
    cached_report,
    fmt,
    interrupted_run,
    knob_widget,
    restore_widgets,
    save_widgets,
    scenario_source,
    show_error,
)
from simulator import MODEL_PRESETS, ScenarioError, load_profile, resolve
from simulator.report.analysis import RunCancelled, compare_kpis, display_digits, kpi_change, num_gpus, tier_table
from simulator.report.knobs import (
    FROM_FILE,
    GROUPS,
    KNOB_AT,
    KNOBS,
    NO_ENGINE,
    apply_knobs,
    knob_values,
    knobs_in,
    label_and_help,
    query_of,
    values_from_query,
)
from simulator.scenario.engines import ENGINE_PRESETS, preset_scheduler
from simulator.scenario.io import scenario_diff, scenario_key, scenario_to_yaml

P = "wi"
WIDGET_KEYS = [f"{P}_mode", f"{P}_example", f"{P}_time_limit_s"] + [f"{P}_{k.key}" for k in KNOBS]


def init_knobs(base: Any) -> None:
    """Reset the knobs to a newly chosen scenario's values (query parameters win on first load)."""
    values = knob_values(base)
    for warning in values_from_query(values, st.session_state.pop(f"{P}_pending_query", {})):
        st.warning(warning)
    for name, value in values.items():
        st.session_state[f"{P}_{name}"] = value


def _apply_engine_preset() -> None:
    """The engine preset just chosen sets the scheduler knobs it covers (they stay adjustable)."""
    name = st.session_state[f"{P}_engine"]
    if name == NO_ENGINE:
        return
    hardware = st.session_state[f"{P}_hardware"]
    try:
        profile = load_profile(hardware) if hardware != FROM_FILE else None
    except ScenarioError:
        profile = None
    model = MODEL_PRESETS.get(st.session_state[f"{P}_model"])
    context = st.session_state[f"{P}_max_model_len"] or (model.max_model_len if model is not None else None)
    for field, value in preset_scheduler(name, profile, context).items():
        if (knob := KNOB_AT.get(f"scheduler.{field}")) is not None:
            st.session_state[f"{P}_{knob.key}"] = value
    st.session_state[f"{P}_async"] = ENGINE_PRESETS[name].async_scheduling   # SGLang, TRT-LLM: overlap on


def knob_widgets(base: Any) -> dict[str, Any]:
    """Sidebar widgets for every knob that applies to the scenario; returns every knob's value.

    A knob that does not apply (a rate for a trace) is None; one hidden by another knob's choice (a
    chunk threshold under continuous batching) keeps its value."""
    applies = knob_values(base)
    state = st.session_state
    values: dict[str, Any] = {}
    inline = {"model": not isinstance(base.model, str), "hardware": not isinstance(base.hardware, str)}
    for group, expanded in GROUPS:
        with st.sidebar.expander(group, expanded=expanded):
            for knob in knobs_in(group):
                key = f"{P}_{knob.key}"
                if applies[knob.key] is None:
                    values[knob.key] = None
                elif knob.shown(values) or knob.disable_hidden:
                    label, help_text = label_and_help(knob, base)
                    options = knob.options(state[key], inline.get(knob.key, False)) if knob.widget == "select" else None
                    values[knob.key] = knob_widget(knob, key, label=label, help_text=help_text, options=options,
                                                   disabled=not knob.shown(values),
                                                   on_change=_apply_engine_preset if knob.key == "engine" else None)
                else:
                    values[knob.key] = state[key]
    with st.sidebar.expander("Run limits"):
        state.setdefault(f"{P}_time_limit_s", DEFAULT_TIME_LIMIT_S)
        st.number_input("Time limit (s of wall time)", min_value=0.001, max_value=3600.0, key=f"{P}_time_limit_s",
                        help="A run still going after this long is stopped (the Stop button stops it at once)")
    return values


def kpi_cards(report: Any, baseline: Any | None) -> None:
    base = {k.key: k for k in baseline.kpis} if baseline is not None else {}
    per_row = 4        # 5 or 6 a row cut labels such as "Cost ($/1M output tok)" at a laptop's 1280 px
    for row in (report.kpis[i:i + per_row] for i in range(0, len(report.kpis), per_row)):
        cols = st.columns(per_row)
        for col, k in zip(cols, row, strict=False):
            digits = display_digits(k.unit)
            b = base.get(k.key)
            change = kpi_change(b.value, k.value, k.unit) if b is not None else None
            delta = None if change is None else f"{change:+,.{digits}f}" if change else f"{0:.{digits}f}"
            color = "off" if not change else "normal" if k.higher_is_better else "inverse"
            col.metric(f"{k.label} ({k.unit})", fmt(k.value, digits), delta=delta,   # the unit is in the label
                       delta_color=color, border=True)


def system_line(sc: Any) -> str:
    sysm = resolve(sc)
    if sysm.pools:   # model routing: one part per pool (the knobs set what a pool leaves unset)
        parts = []
        for pool, (sub, sub_sys) in zip(sc.deployment.pools, sysm.pools, strict=True):
            dep = sub.deployment
            parts.append(f"**{pool.name}**: {sub_sys.model.name} on {dep.replicas * dep.tensor_parallel_size} × "
                         f"{sub_sys.profile.name} ({dep.replicas} replica(s) × TP {dep.tensor_parallel_size})")
        return (f"Model pools ({num_gpus(sc)} GPUs; routing by {sc.deployment.pool_routing.by}): " + " · ".join(parts)
                + " · the System knobs set what a pool leaves unset; edit the pools in the scenario file")
    p = sysm.profile
    price = f"\\${p.price_per_gpu_hour:.2f}/GPU-h (assumed)" if p.price_per_gpu_hour is not None else "no price"
    dep = sc.deployment
    dp = dep.data_parallel_size
    split = (f" × PP {dep.pipeline_parallel_size}" if dep.pipeline_parallel_size > 1 else "") + (
        f" × DP {dp}" if dp > 1 else "") + (f", EP {dep.expert_parallel_size}" if dep.expert_parallel_size > 1 else "")
    where = "per replica" if dp == 1 else "per data-parallel rank"
    return (f"**{sysm.model.name}** on **{num_gpus(sc)} × {p.name}** ({p.source}; {dep.replicas} replica(s) "
            f"× TP {dep.tensor_parallel_size}{split}) · KV cache {sysm.kv_plan.num_gpu_blocks:,} blocks × "
            f"{sysm.kv_plan.block_size} = {sysm.kv_plan.num_token_slots:,} tokens {where} · "
            f"max_model_len {sysm.max_model_len:,} · {price}")


# -- page --------------------------------------------------------------------------------------------
st.title("What-if")
st.caption("Pick a scenario, change a knob, run it. Results are cached per scenario: re-running an "
           "unchanged scenario is instant. Pin a run as the baseline to see every change as a delta.")

restore_widgets(P)
if f"{P}_query_read" not in st.session_state:   # a shared link: example + knob values in the URL
    st.session_state[f"{P}_query_read"] = True
    query = {k: st.query_params[k] for k in st.query_params}
    if query.get("example"):
        st.session_state[f"{P}_mode"] = "Example"
        st.session_state[f"{P}_example"] = query.pop("example")
    st.session_state[f"{P}_pending_query"] = query

base, source_name = scenario_source(P, default_example=DEFAULT_EXAMPLE)
if base is None:
    save_widgets(P, WIDGET_KEYS)
    st.stop()
if st.session_state.get(f"{P}_base_id") != scenario_key(base):
    st.session_state[f"{P}_base_id"] = scenario_key(base)
    init_knobs(base)
knobs = knob_widgets(base)
save_widgets(P, WIDGET_KEYS)

scenario, problem = None, None
try:
    scenario = apply_knobs(base, knobs)
    st.markdown(system_line(scenario))      # resolves: a model that does not fit fails here
    st.session_state[f"{P}_current"] = scenario_key(scenario)
except ScenarioError as exc:
    problem = exc
    show_error(exc)

if st.session_state.get(f"{P}_mode") == "Example":
    st.query_params.from_dict({"example": source_name, **query_of(knobs)})

c_run, c_stop, c_pin, c_clear, _ = st.columns([1.3, 0.8, 1.2, 1.2, 3])
run = c_run.button("Run simulation", type="primary", disabled=problem is not None, key=f"{P}_run",
                   icon=":material/play_arrow:")
stop = c_stop.button("Stop", key=f"{P}_stop", icon=":material/stop:",
                     help="Stops a simulation in progress (nothing is cached); so does changing any widget")
interrupted_run(P, stop)
if run and scenario is not None:
    st.session_state[f"{P}_running"] = True     # still set on the next rerun if this one is interrupted
    try:
        report = cached_report(scenario_key(scenario), float(st.session_state[f"{P}_time_limit_s"]))
        st.session_state[f"{P}_report"] = report
    except RunCancelled as exc:
        st.warning(f"Run cancelled: {exc}", icon=":material/timer_off:")
    except Exception as exc:
        show_error(exc)
    st.session_state[f"{P}_running"] = False

report = st.session_state.get(f"{P}_report")
if c_pin.button("Pin as baseline", key=f"{P}_pin", disabled=report is None, icon=":material/push_pin:"):
    st.session_state[f"{P}_baseline"] = report
if c_clear.button("Clear baseline", key=f"{P}_clear", disabled=f"{P}_baseline" not in st.session_state):
    st.session_state.pop(f"{P}_baseline", None)
baseline = st.session_state.get(f"{P}_baseline")

if report is None:
    st.info("Press **Run simulation** to simulate the scenario above.", icon=":material/play_circle:")
    st.stop()
if scenario is not None and scenario_key(report.scenario) != scenario_key(scenario):
    st.caption(":orange[The knobs changed since this run: press Run simulation to update the results.]")

s = report.summary
rq = s["requests"]
st.subheader(f"Results: {report.scenario.name}"
             + (" (deltas against the pinned baseline)" if baseline is not None else ""))
kpi_cards(report, baseline)
slo_txt = "no SLO set"
slo = s.get("slo") or {}
if "passed" in slo:
    checks = ", ".join(f"{name.upper()} {'met' if ok else 'MISSED'}" for name, ok in slo["met"].items())
    verdict = {"pass": "met", "marginal": "MARGINAL (within its noise of a limit)"}.get(slo.get("outcome", ""),
                                                                                         "NOT MET")
    slo_txt = (f"SLO {verdict}: {checks}{', ' if checks else ''}"
               f"{slo['dropped']:,} dropped of {slo['judged']:,} judged")
stability = s.get("stability") or {}
if stability.get("stable") is False:
    st.error(f"Unstable run: the requests in system grow by {stability['backlog_growth_per_s']:.2f} requests/s "
             f"({100 * stability['backlog_growth_fraction']:.1f}% of arrivals; offered/served "
             f"{stability['offered_load_ratio']:.2f}). Its percentiles keep growing with the run length: "
             "add replicas or lower the load before reading them.")
steady = s.get("steady_state") or {}
if steady.get("reached") is False:
    st.warning(f"The run never reached steady state ({steady['reason']}): its latencies are warm-up numbers, lower "
               "than the deployment's steady ones. Raise the number of requests.")
spec_txt = ""
if s.get("speculative"):
    sp = s["speculative"]
    spec_txt = (f" · speculative ({sp['method']}, k={sp['num_speculative_tokens']}): "
                f"{sp.get('mean_tokens_per_step') or 0:.2f} tokens per step "
                f"(expected {sp['expected_tokens_per_step']:.2f})")
bench = s.get("benchmark")
if bench:   # a closed loop or an offline batch: what load it put on the engine
    batch = bench["mean_running_batch"]
    load = (f"closed loop of {bench['concurrency']} clients (think time {bench['think_time_s']:g} s)"
            if bench["mode"] == "closed_loop" else
            f"offline batch of {bench['concurrency']:,} requests, makespan {bench['makespan_s']:,.1f} s")
    st.caption(f"Benchmark mode: {load}; mean running batch {fmt(batch)} sequences; throughput measured over "
               f"{s['throughput']['window_s'][0]:,.1f}-{s['throughput']['window_s'][1]:,.1f} s.")
st.caption(f"{rq['measured']:,} measured of {rq['arrived']:,} requests ({rq['completed']:,} completed, "
           f"{rq['rejected']:,} rejected (shed: {rq.get('shed', 0):,}), {rq.get('timed_out', 0):,} timed out, "
           f"{rq['in_flight']:,} in flight, {rq['preemptions']:,} preemptions) · "
           f"{slo_txt} · simulated {s['sim_time_s']:,.0f} s in {s['wall_s']:.2f} s wall · seed {s['seed']} · "
           f"cost = GPUs × price ÷ output tokens/s{spec_txt}")

tiers = tier_table(s)
tab_names = ["Latency CDF", "Stage breakdown", "Time series", "Compare with baseline", "Scenario"]
tabs = st.tabs(tab_names + (["Tiers"] if not tiers.empty else []))
with tabs[0]:
    st.plotly_chart(cdf_figure(report.cdf, report.system["slo_thresholds_s"],
                               baseline.cdf if baseline is not None else None), key=f"{P}_cdf")
with tabs[1]:
    st.plotly_chart(stages_figure(report.stages, baseline.stages if baseline is not None else None),
                    key=f"{P}_stages")
    table = report.stages.assign(**{c: report.stages[c] * 1e3 for c in ("mean_s", "p50_s", "p99_s")},
                                 share=report.stages["share"] * 100)
    st.dataframe(table.rename(columns={"mean_s": "mean (ms)", "p50_s": "p50 (ms)", "p99_s": "p99 (ms)",
                                       "share": "share of mean E2E (%)"}),
                 hide_index=True, column_config={c: st.column_config.NumberColumn(format="%.1f")
                                                 for c in ("mean (ms)", "p50 (ms)", "p99 (ms)",
                                                           "share of mean E2E (%)")})
    st.caption("network = client-perceived − server E2E (only with a `network` in the scenario); queue = "
               "admission − arrival; prefill = first token − admission; decode = finish − first token (includes "
               "preemption and recompute).")
with tabs[2]:
    st.plotly_chart(series_figure(report.series), key=f"{P}_series")
    st.caption("Queue depth is the waiting queue after each step's scheduling decision; idle time counts as zero.")
with tabs[3]:
    if baseline is None:
        st.info("Pin a run as the baseline (button above), change knobs and run again to compare.")
    else:
        cmp = compare_kpis(baseline.kpis, report.kpis)
        cmp["better"] = cmp["better"].map({True: "better", False: "worse"}).fillna("same")
        st.dataframe(cmp.rename(columns={"delta_pct": "delta (%)"}), hide_index=True,
                     column_config={c: st.column_config.NumberColumn(format="%.3g")
                                    for c in ("baseline", "current", "delta", "delta (%)")})
        diff = scenario_diff(baseline.scenario, report.scenario)
        st.markdown("**Scenario changes from the baseline**")
        if diff:
            st.dataframe(pd.DataFrame(diff, columns=["field", "baseline", "this run"]).astype(str), hide_index=True)
        else:
            st.caption("Same scenario as the baseline.")
with tabs[4]:
    text = scenario_to_yaml(report.scenario)
    st.download_button("Download scenario YAML", text, file_name=f"{report.scenario.name}.yaml",
                       mime="application/x-yaml", key=f"{P}_download", icon=":material/download:")
    st.code(text, language="yaml")
    if st.session_state.get(f"{P}_mode") == "Example":
        st.caption("This page's URL holds the example and every knob: share it to reproduce this view.")
if not tiers.empty:
    with tabs[5]:
        st.dataframe(tiers.rename(columns={
            "share": "share", "ttft_p50_ms": "TTFT p50 (ms)", "ttft_p99_ms": "TTFT p99 (ms)",
            "tpot_p50_ms": "TPOT p50 (ms)", "tpot_p99_ms": "TPOT p99 (ms)", "e2e_p99_s": "E2E p99 (s)",
            "slo_attainment_pct": "SLO attainment (%)", "slo_met": "tier's SLO met",
            "slo_failures": "why not met"}),
            hide_index=True, column_config={c: st.column_config.NumberColumn(format="%.3g") for c in
                                            ("TTFT p50 (ms)", "TTFT p99 (ms)", "TPOT p50 (ms)", "TPOT p99 (ms)",
                                             "E2E p99 (s)", "SLO attainment (%)")})
        st.caption("Each tier against its own SLO (the scenario's when the tier has none). Tiers, shares and "
                   "priorities come from the scenario file; scheduling_policy (Batching) decides whether "
                   "priority orders the queue.")
