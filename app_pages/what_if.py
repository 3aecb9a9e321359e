"""What-if: change one knob of a serving system, run it, and see what happens to the tails."""
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
    restore_widgets,
    save_widgets,
    scenario_source,
    show_error,
)
from simulator import MODEL_PRESETS, ScenarioError, available_profiles, load_profile, resolve
from simulator.cluster.router import ROUTERS
from simulator.engine.policies import POLICIES
from simulator.report.analysis import (
    RunCancelled,
    compare_kpis,
    display_digits,
    kpi_change,
    num_gpus,
    tier_table,
    with_arrival_rate,
)
from simulator.scenario.config import ClosedLoopArrival, GammaArrival, PoissonArrival, TraceArrival
from simulator.scenario.engines import ENGINE_PRESETS, preset_scheduler
from simulator.scenario.io import scenario_diff, scenario_key, scenario_to_yaml
from simulator.scenario.quantization import KV_CACHE_DTYPES, QUANTIZATIONS

P = "wi"
FROM_FILE = "(as in the file)"
TP_SIZES = [1, 2, 4, 8]
QUANT_OPTIONS = ["none"] + [q for q in QUANTIZATIONS if q != "none"]
BLOCK_SIZES = [8, 16, 32]
SPEC_METHODS = ["off", "draft", "ngram", "mtp"]
DEFAULT_DRAFT = "llama-3.2-1b"
NO_ENGINE = "(none)"
# Scheduler field an engine preset sets -> the knob that shows it.
PRESET_KNOBS = {"policy": "policy", "enable_prefix_caching": "prefix_caching", "max_num_seqs": "max_num_seqs",
                "max_num_batched_tokens": "max_num_batched_tokens", "block_size": "block_size",
                "gpu_memory_utilization": "gmu", "preemption_mode": "preemption",
                "num_scheduler_steps": "num_scheduler_steps"}


def flag(raw: object) -> bool:
    """A boolean from a query string ("true"/"1"/"yes")."""
    return str(raw).strip().lower() in ("1", "true", "yes")


# knob -> (query parameter, type); the query string reproduces an example-based view.
KNOBS: dict[str, tuple[str, Any]] = {
    "rate": ("rate", float), "cv": ("cv", float), "speedup": ("speedup", float), "num_requests": ("n", int),
    "duration_s": ("dur", float), "clients": ("clients", int), "think_s": ("think", float),
    "seed": ("seed", int), "model": ("model", str), "quantization": ("quant", str), "kv_dtype": ("kvdtype", str),
    "hardware": ("hw", str), "tp": ("tp", int),
    "replicas": ("replicas", int), "router": ("router", str), "max_num_seqs": ("seqs", int),
    "max_num_batched_tokens": ("mbt", int), "block_size": ("bs", int), "gmu": ("gmu", float),
    "max_model_len": ("mml", int), "slo_ttft_ms": ("ttft", float), "slo_tpot_ms": ("tpot", float),
    "slo_e2e_ms": ("e2e", float), "policy": ("policy", str), "long_prefill": ("lpt", int),
    "max_wait_ms": ("wait", float), "adaptive": ("adaptive", flag), "spec_method": ("spec", str),
    "spec_k": ("k", int), "spec_alpha": ("alpha", float), "spec_draft": ("draft", str),
    "scheduling": ("sched", str), "preemption": ("preempt", str), "swap_gib": ("swap", float),
    "prefix_caching": ("prefix", flag), "timeout_s": ("timeout", float), "max_queue_len": ("qlen", int),
    "max_queue_delay_s": ("qdelay", float), "engine": ("engine", str), "async": ("async", flag),
    "num_scheduler_steps": ("steps", int),
}
WIDGET_KEYS = [f"{P}_mode", f"{P}_example", f"{P}_time_limit_s"] + [f"{P}_{k}" for k in KNOBS]


def knob_values(sc: Any) -> dict[str, Any]:
    """The knobs' values as the scenario has them (what a fresh view starts from)."""
    arr, dep, sch, slo, spec = sc.workload.arrival, sc.deployment, sc.scheduler, sc.slo, sc.speculative_config
    rate_based = isinstance(arr, (PoissonArrival, GammaArrival))
    return {
        "rate": float(arr.rate_per_s) if rate_based else None,
        "cv": float(arr.cv) if isinstance(arr, GammaArrival) else 1.0,
        "speedup": float(arr.speedup) if isinstance(arr, TraceArrival) else None,
        "clients": arr.concurrency if isinstance(arr, ClosedLoopArrival) else None,
        "think_s": float(arr.think_time_s) if isinstance(arr, ClosedLoopArrival) else None,
        "num_requests": sc.num_requests, "duration_s": sc.duration_s, "seed": int(sc.seed),
        "model": sc.model if isinstance(sc.model, str) else FROM_FILE,
        "quantization": dep.quantization or "none", "kv_dtype": dep.kv_cache_dtype,
        "hardware": sc.hardware if isinstance(sc.hardware, str) else FROM_FILE,
        "tp": dep.tensor_parallel_size, "replicas": dep.replicas, "router": dep.router,
        "max_num_seqs": sch.max_num_seqs, "max_num_batched_tokens": sch.max_num_batched_tokens,
        "block_size": sch.block_size, "gmu": float(sch.gpu_memory_utilization),
        "max_model_len": sch.max_model_len or 0,
        "slo_ttft_ms": float(slo.ttft_p99_ms or 0.0), "slo_tpot_ms": float(slo.tpot_p99_ms or 0.0),
        "slo_e2e_ms": float(slo.e2e_p99_ms or 0.0),
        "policy": sch.policy, "scheduling": sch.scheduling_policy, "preemption": sch.preemption_mode,
        "swap_gib": float(sch.swap_space_gib), "prefix_caching": bool(sch.enable_prefix_caching),
        "timeout_s": float(sc.client.timeout_s or 0.0), "max_queue_len": int(sc.admission.max_queue_len or 0),
        "max_queue_delay_s": float(sc.admission.max_queue_delay_s or 0.0),
        "long_prefill": sch.long_prefill_token_threshold or 0,
        "max_wait_ms": float(sch.max_wait_ms), "adaptive": bool(sch.adaptive_batching),
        "spec_method": spec.method if spec is not None else "off",
        "spec_k": spec.num_speculative_tokens if spec is not None else 4,
        "spec_alpha": float(spec.acceptance_rate) if spec is not None else 0.8,
        "spec_draft": (spec.draft_model if isinstance(spec.draft_model, str) else FROM_FILE)
        if spec is not None and spec.draft_model is not None else DEFAULT_DRAFT,
        "engine": sc.engine.preset if sc.engine is not None else NO_ENGINE,
        "async": sc.engine.runs_async if sc.engine is not None else False,
        "num_scheduler_steps": sch.num_scheduler_steps,
    }


def apply_knobs(base: Any, k: dict[str, Any]) -> Any:
    """The base scenario with the knobs' values (validated; raises ScenarioError)."""
    ov: dict[str, Any] = {
        "seed": k["seed"], "deployment.tensor_parallel_size": k["tp"], "deployment.replicas": k["replicas"],
        "deployment.router": k["router"], "scheduler.max_num_seqs": k["max_num_seqs"],
        "scheduler.max_num_batched_tokens": k["max_num_batched_tokens"], "scheduler.block_size": k["block_size"],
        "scheduler.gpu_memory_utilization": k["gmu"], "scheduler.max_model_len": k["max_model_len"] or None,
        "slo.ttft_p99_ms": k["slo_ttft_ms"] or None, "slo.tpot_p99_ms": k["slo_tpot_ms"] or None,
        "slo.e2e_p99_ms": k["slo_e2e_ms"] or None, "scheduler.policy": k["policy"],
        "scheduler.scheduling_policy": k["scheduling"], "scheduler.preemption_mode": k["preemption"],
        "scheduler.swap_space_gib": k["swap_gib"], "scheduler.enable_prefix_caching": k["prefix_caching"],
        "client.timeout_s": k["timeout_s"] or None, "admission.max_queue_len": k["max_queue_len"] or None,
        "admission.max_queue_delay_s": k["max_queue_delay_s"] or None,
        "scheduler.long_prefill_token_threshold": k["long_prefill"] or None,
        "scheduler.max_wait_ms": k["max_wait_ms"], "scheduler.adaptive_batching": k["adaptive"],
        "scheduler.num_scheduler_steps": k["num_scheduler_steps"],
    }
    if k["engine"] == NO_ENGINE:
        ov["engine"] = None
    else:
        # The file's engine settings without a knob (CPU overhead, CUDA-graph capture) are kept.
        kept = {name: value.model_dump(exclude_unset=True) for name in ("overhead", "cuda_graph")
                if base.engine is not None and (value := getattr(base.engine, name)) is not None}
        ov["engine"] = {"preset": k["engine"], "async_scheduling": k["async"], **kept}
    if k["spec_method"] == "off":
        ov["speculative_config"] = None
    else:
        spec: dict[str, Any] = {"method": k["spec_method"], "num_speculative_tokens": k["spec_k"],
                                "acceptance_rate": k["spec_alpha"]}
        if k["spec_method"] == "draft":
            kept = base.speculative_config.draft_model if base.speculative_config is not None else None
            spec["draft_model"] = kept if k["spec_draft"] == FROM_FILE else k["spec_draft"]
        ov["speculative_config"] = spec
    if k.get("speedup") is not None:
        ov["workload.arrival.speedup"] = k["speedup"]
    if k.get("clients") is not None:
        ov["workload.arrival.concurrency"] = k["clients"]
        ov["workload.arrival.think_time_s"] = k["think_s"]
    if base.num_requests is not None:
        ov["num_requests"] = k["num_requests"]
    elif base.duration_s is not None:
        ov["duration_s"] = k["duration_s"]
    if k["model"] != FROM_FILE:
        ov["model"] = k["model"]
    ov["deployment.quantization"] = None if k["quantization"] == "none" else k["quantization"]
    ov["deployment.kv_cache_dtype"] = k["kv_dtype"]
    if k["hardware"] != FROM_FILE:
        ov["hardware"] = k["hardware"]
    sc = base.with_overrides(ov)
    if k["rate"] is not None:
        sc = with_arrival_rate(sc, k["rate"], k["cv"])
    return sc


def init_knobs(base: Any) -> None:
    """Reset the knobs to a newly chosen scenario's values (query parameters win on first load)."""
    values = knob_values(base)
    for knob, raw in st.session_state.pop(f"{P}_pending_query", {}).items():
        name = next((n for n, (q, _) in KNOBS.items() if q == knob), None)
        if name is None or values.get(name) is None:
            continue
        try:
            values[name] = KNOBS[name][1](raw)
        except (TypeError, ValueError):
            st.warning(f"Ignored query parameter {knob}={raw!r}: not a {KNOBS[name][1].__name__}.")
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
        st.session_state[f"{P}_{PRESET_KNOBS[field]}"] = value
    st.session_state[f"{P}_async"] = ENGINE_PRESETS[name].async_scheduling   # SGLang, TRT-LLM: overlap on


def knob_widgets(base: Any) -> dict[str, Any]:
    """Sidebar widgets for every knob the scenario has; returns their values."""
    sb = st.sidebar
    k: dict[str, Any] = {}
    with sb.expander("Traffic", expanded=True):
        if st.session_state[f"{P}_rate"] is not None:
            # With sessions the arrival process starts sessions (agent tasks, conversations) of several requests.
            label, what = (("Sessions started (per s)", "Mean sessions (conversations or agent tasks) started per "
                            "second; each sends workload.sessions.turns requests")
                           if base.workload.sessions is not None else
                           ("Arrival rate (req/s)", "Mean requests per second over all replicas"))
            k["rate"] = st.number_input(label, min_value=0.001, max_value=1e5, step=1.0, key=f"{P}_rate", help=what)
            k["cv"] = st.number_input("Burstiness: CV of gaps", min_value=0.05, max_value=20.0, step=0.25,
                                      key=f"{P}_cv", help="1 = Poisson; >1 burstier (gamma gaps); <1 smoother")
        else:
            k["rate"], k["cv"] = None, 1.0
        if st.session_state.get(f"{P}_speedup") is not None:
            k["speedup"] = st.number_input("Trace speedup", min_value=0.01, max_value=1000.0, step=0.5,
                                           key=f"{P}_speedup",
                                           help="Arrivals replay a trace; every gap is divided by this "
                                                "(2 = twice the rate)")
        if st.session_state.get(f"{P}_clients") is not None:
            k["clients"] = st.number_input("Clients (closed loop)", min_value=1, max_value=100_000, step=1,
                                           key=f"{P}_clients",
                                           help="Each client sends its next request when its last one ended")
            k["think_s"] = st.number_input("Think time (s)", min_value=0.0, max_value=3600.0,
                                           key=f"{P}_think_s",
                                           help="Pause between an answer's end and the client's next request")
        if base.num_requests is not None:
            k["num_requests"] = st.number_input("Requests", min_value=10, max_value=200_000, step=1000,
                                                key=f"{P}_num_requests")
        elif base.duration_s is not None:
            k["duration_s"] = st.number_input("Duration (s)", min_value=1.0, max_value=36_000.0,
                                              key=f"{P}_duration_s")
        k["seed"] = st.number_input("Seed", min_value=0, max_value=2**31 - 1, step=1, key=f"{P}_seed")
    with sb.expander("System", expanded=True):
        models = list(MODEL_PRESETS) + ([FROM_FILE] if not isinstance(base.model, str) else [])
        if st.session_state[f"{P}_model"] not in models:
            models.append(st.session_state[f"{P}_model"])
        k["model"] = st.selectbox("Model", models, key=f"{P}_model")
        k["quantization"] = st.selectbox("Weight quantization", QUANT_OPTIONS, key=f"{P}_quantization",
                                         help="vLLM --quantization: weight dtype of the linear layers (see the "
                                              "README, \"Levers\")")
        k["kv_dtype"] = st.selectbox("KV cache dtype", list(KV_CACHE_DTYPES), key=f"{P}_kv_dtype",
                                     help="vLLM --kv-cache-dtype: auto = the activation dtype; fp8 halves KV bytes")
        profiles = list(available_profiles()) + ([FROM_FILE] if not isinstance(base.hardware, str) else [])
        if st.session_state[f"{P}_hardware"] not in profiles:
            profiles.append(st.session_state[f"{P}_hardware"])
        k["hardware"] = st.selectbox("Hardware profile", profiles, key=f"{P}_hardware")
        tps = sorted(set(TP_SIZES) | {st.session_state[f"{P}_tp"]})
        k["tp"] = st.selectbox("Tensor parallel (GPUs per replica)", tps, key=f"{P}_tp")
        k["replicas"] = st.number_input("Replicas", min_value=1, max_value=256, step=1, key=f"{P}_replicas")
        k["router"] = st.selectbox("Router", sorted(ROUTERS), key=f"{P}_router")
    with sb.expander("Batching (per replica)"):
        engines = [NO_ENGINE, *ENGINE_PRESETS]
        k["engine"] = st.selectbox("Engine preset", engines, key=f"{P}_engine", on_change=_apply_engine_preset,
                                   help="Choosing one sets the scheduler knobs below to that engine's defaults "
                                        "(docs/engines.md); each stays adjustable")
        k["async"] = st.toggle("async scheduling", key=f"{P}_async", disabled=k["engine"] == NO_ENGINE,
                               help="engine.async_scheduling: a step takes the longer of its GPU time and the "
                                    "engine's CPU overhead instead of their sum (needs an engine preset; on by "
                                    "default for SGLang and TensorRT-LLM, whose overlap schedulers are)")
        policies = sorted(POLICIES)
        k["policy"] = st.selectbox("Batching policy", policies, key=f"{P}_policy",
                                   help="continuous: vLLM iteration-level; chunked_prefill: prompts split into chunks; "
                                        "dynamic/static: request-level batches (see the README)")
        k["scheduling"] = st.selectbox("scheduling_policy", ["fcfs", "priority"], key=f"{P}_scheduling",
                                       help="Waiting-queue order: arrival, or (tier priority, arrival) with the "
                                            "lowest-priority request preempted first (tiers are set in the file)")
        if k["policy"] == "chunked_prefill":
            st.number_input(
                "long_prefill_token_threshold (0 = the budget)", min_value=0, max_value=1_048_576, step=256,
                key=f"{P}_long_prefill", help="Most prompt tokens one request computes in a step")
        if k["policy"] in ("dynamic", "static"):
            st.number_input("max_wait_ms", min_value=0.0, max_value=600_000.0, step=10.0, key=f"{P}_max_wait_ms",
                            help="Longest an idle engine waits for a full batch after the oldest arrival")
        if k["policy"] == "dynamic":
            st.toggle("adaptive_batching", key=f"{P}_adaptive",
                      help="Start at once when requests queued during the previous batch")
        if k["policy"] == "continuous":
            st.number_input("num_scheduler_steps (multi-step)", min_value=1, max_value=64, step=1,
                            key=f"{P}_num_scheduler_steps",
                            help="vLLM 0.6 multi-step: decode steps per scheduling decision; a new prompt "
                                 "waits for the run to end")
        k["prefix_caching"] = st.toggle("enable_prefix_caching", key=f"{P}_prefix_caching",
                                        help="Reuse cached KV blocks of shared prompt prefixes (system prompts, "
                                             "earlier turns); continuous or chunked_prefill, "
                                             "and disaggregated prefill pools")
        k["preemption"] = st.selectbox("preemption_mode", ["recompute", "swap"], key=f"{P}_preemption",
                                       help="What a preempted request loses: its KV (recomputed later), or nothing "
                                            "(KV copied to host memory over the profile's host link and back)")
        if k["preemption"] == "swap":
            st.number_input("swap_space_gib (host memory per GPU)", min_value=0.0, max_value=4096.0, step=1.0,
                            key=f"{P}_swap_gib")
        # Hidden knobs keep their values (they matter only for the choices that show them).
        for name in ("long_prefill", "max_wait_ms", "adaptive", "swap_gib", "num_scheduler_steps"):
            k[name] = st.session_state[f"{P}_{name}"]
        k["max_num_seqs"] = st.number_input("max_num_seqs", min_value=1, max_value=4096, step=16,
                                            key=f"{P}_max_num_seqs", help="Most requests in the running batch")
        k["max_num_batched_tokens"] = st.number_input(
            "max_num_batched_tokens", min_value=1, max_value=1_048_576, step=1024, key=f"{P}_max_num_batched_tokens",
            help="Token budget of one step; must cover max_model_len unless the policy is chunked_prefill")
        sizes = sorted(set(BLOCK_SIZES) | {st.session_state[f"{P}_block_size"]})
        k["block_size"] = st.selectbox("block_size (tokens per KV block)", sizes, key=f"{P}_block_size")
        k["gmu"] = st.slider("gpu_memory_utilization", min_value=0.30, max_value=0.99, step=0.01, key=f"{P}_gmu")
        k["max_model_len"] = st.number_input("max_model_len (0 = the model's context)", min_value=0,
                                             max_value=1_048_576, step=1024, key=f"{P}_max_model_len")
    with sb.expander("Speculative decoding"):
        k["spec_method"] = st.selectbox("Method", SPEC_METHODS, key=f"{P}_spec_method",
                                        help="draft: a small model proposes; ngram: prompt lookup; mtp: extra "
                                             "decoder layers of the target. Continuous or chunked_prefill.")
        if k["spec_method"] != "off":
            st.number_input("num_speculative_tokens (k)", min_value=1, max_value=16, step=1, key=f"{P}_spec_k")
            st.slider("acceptance_rate (alpha)", min_value=0.0, max_value=1.0, step=0.05, key=f"{P}_spec_alpha",
                      help="Probability that each proposed token is accepted (independently, in order)")
        if k["spec_method"] == "draft":
            drafts = list(MODEL_PRESETS)
            if st.session_state[f"{P}_spec_draft"] not in drafts:
                drafts.append(st.session_state[f"{P}_spec_draft"])
            st.selectbox("Draft model", drafts, key=f"{P}_spec_draft")
        k["spec_k"] = st.session_state[f"{P}_spec_k"]
        k["spec_alpha"] = st.session_state[f"{P}_spec_alpha"]
        k["spec_draft"] = st.session_state[f"{P}_spec_draft"]
    with sb.expander("Timeouts and load shedding (0 = off)"):
        k["timeout_s"] = st.number_input("Client timeout (s)", min_value=0.0, max_value=36_000.0, step=5.0,
                                         key=f"{P}_timeout_s", help="Clients abandon a request this long after "
                                                                    "sending it (client.timeout_s)")
        k["max_queue_len"] = st.number_input("Shed when this many wait (per replica)", min_value=0, max_value=1_000_000,
                                             step=10, key=f"{P}_max_queue_len", help="admission.max_queue_len")
        k["max_queue_delay_s"] = st.number_input("Shed after waiting (s)", min_value=0.0, max_value=36_000.0,
                                                 step=1.0, key=f"{P}_max_queue_delay_s",
                                                 help="admission.max_queue_delay_s: reject a request not admitted "
                                                      "this long after arriving")
    with sb.expander("SLO (p99 thresholds; 0 = none)"):
        k["slo_ttft_ms"] = st.number_input("TTFT p99 (ms)", min_value=0.0, step=50.0, key=f"{P}_slo_ttft_ms")
        k["slo_tpot_ms"] = st.number_input("TPOT p99 (ms)", min_value=0.0, step=5.0, key=f"{P}_slo_tpot_ms")
        k["slo_e2e_ms"] = st.number_input("E2E p99 (ms)", min_value=0.0, step=1000.0, key=f"{P}_slo_e2e_ms")
    with sb.expander("Run limits"):
        st.session_state.setdefault(f"{P}_time_limit_s", DEFAULT_TIME_LIMIT_S)
        st.number_input("Time limit (s of wall time)", min_value=0.001, max_value=3600.0, key=f"{P}_time_limit_s",
                        help="A run still going after this long is stopped (the Stop button stops it at once)")
    return k


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
    split = (f" × PP {dep.pipeline_parallel_size}" if dep.pipeline_parallel_size > 1 else "") + (
        f", EP {dep.expert_parallel_size}" if dep.expert_parallel_size > 1 else "")
    return (f"**{sysm.model.name}** on **{num_gpus(sc)} × {p.name}** ({p.source}; {dep.replicas} replica(s) "
            f"× TP {dep.tensor_parallel_size}{split}) · KV cache {sysm.kv_plan.num_gpu_blocks:,} blocks × "
            f"{sysm.kv_plan.block_size} = {sysm.kv_plan.num_token_slots:,} tokens per replica · "
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
    st.query_params.from_dict({"example": source_name, **{q: str(knobs[n]) for n, (q, _) in KNOBS.items()
                                                           if knobs.get(n) is not None}})

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
