"""Studies: the sweeps, knees, burstiness statistics and profile cross-checks behind the analysis
notebooks (``notebooks/``); the replica search they use is the planner's
(:mod:`simulator.planner.replica_search`).

Each function takes a validated :class:`~simulator.scenario.config.Scenario` (or a profile) and returns a
pandas DataFrame or a small dict; the notebooks only call these and plot. Pandas/numpy only (never
plotly, streamlit or torch), so every number a notebook shows is computed here and unit-tested
(``tests/test_studies.py``).

Definitions used throughout:

* **Knee** of a latency-vs-load curve: the lowest offered load at which the metric reaches
  ``factor`` times its value at the lightest load swept (default 2x), interpolated linearly in
  load and in log(metric) between the two sweep points that bracket it. For an M/M/1 queue the
  mean sojourn time doubles at 50% utilisation, for M/D/1 at 2/3: the tests check both.
* **Sustainable rate** at an SLO: the highest swept load whose metric is within the limit,
  interpolated the same way to the crossing.
* **Burstiness** of an arrival stream: the coefficient of variation of the inter-arrival gaps
  (1 for Poisson) and, per window of ``window_s`` seconds, the peak-to-mean ratio and the index
  of dispersion (variance / mean of the counts; 1 for Poisson at every window).
"""
from __future__ import annotations

import json
import math
import os
import tempfile
from collections.abc import Callable, Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from simulator.errors import ScenarioError
from simulator.planner.capacity import saturation_rps
from simulator.planner.replica_search import meets_slo, min_replicas
from simulator.report.analysis import SWEEP_METRICS, load_sweep, summary_row  # noqa: F401  (studies.load_sweep)
from simulator.run.simulate import simulate
from simulator.scenario.config import Scenario, scenario_from_dict

#: Environment variable the notebooks read for their size; ``full`` (the default) or ``small`` (CI).
SCALE_ENV = "LLMPLAN_NOTEBOOK_SCALE"
SCALES = ("full", "small")

# -- notebook plumbing --------------------------------------------------------------------------------
def notebook_scale(environ: Mapping[str, str] | None = None) -> str:
    """The size a notebook runs at: ``$LLMPLAN_NOTEBOOK_SCALE`` (``full`` when unset).

    Raises:
        ScenarioError: any other value.
    """
    value = (environ if environ is not None else os.environ).get(SCALE_ENV, "full").strip().lower() or "full"
    if value not in SCALES:
        raise ScenarioError(SCALE_ENV, value, f"allowed: {', '.join(SCALES)}")
    return value


def find_repo_root(start: str | Path | None = None) -> Path:
    """The llmplan checkout holding ``start`` (default: the working directory): the first folder
    upwards with ``examples/sharegpt-h100.yaml`` and ``hwprofiles/``.

    Raises:
        ScenarioError: none found (the notebooks need the repository's examples and test data).
    """
    here = Path(start or Path.cwd()).resolve()
    for folder in (here, *here.parents):
        if (folder / "examples" / "sharegpt-h100.yaml").is_file() and (folder / "hwprofiles").is_dir():
            return folder
    raise ScenarioError("notebook folder", str(here),
                        "not inside an llmplan checkout (no examples/sharegpt-h100.yaml above it)")


#: The three public traces notebook 2 studies: name -> (full file in shared/data/llm_traces,
#: excerpt in tests/data or None, format).
TRACES = {
    "azure-conv": ("AzureLLMInferenceTrace_conv.csv", "azure_conv_excerpt.csv", "azure"),
    "azure-code": ("AzureLLMInferenceTrace_code.csv", "azure_code_excerpt.csv", "azure"),
    "mooncake-conv": ("mooncake_conversation_trace.jsonl", "mooncake_conversation_excerpt.jsonl", "mooncake"),
}


def trace_files(root: str | Path) -> pd.DataFrame:
    """Where each trace of :data:`TRACES` is read from: the full copy in ``<root>/../shared/data/
    llm_traces`` (as ``tests/test_traces.py`` finds it) when present, else the 300-request excerpt
    in ``<root>/tests/data``. Columns ``trace, path, format, full`` (``full``: the whole trace)."""
    root = Path(root)
    shared = root.parent / "shared" / "data" / "llm_traces"
    rows = []
    for name, (full, excerpt, fmt) in TRACES.items():
        if (shared / full).is_file():
            rows.append({"trace": name, "path": str(shared / full), "format": fmt, "full": True})
        elif excerpt and (root / "tests" / "data" / excerpt).is_file():
            rows.append({"trace": name, "path": str(root / "tests" / "data" / excerpt), "format": fmt, "full": False})
    return pd.DataFrame(rows, columns=["trace", "path", "format", "full"])


# -- load sweeps and knees ----------------------------------------------------------------------------
def saturation_capacity(scenario: Scenario, num_requests: int = 2000) -> float:
    """Requests per second the deployment completes with a full queue (every request at t=0, read
    in the steady middle of the run; :func:`simulator.planner.capacity.saturation_rps`): the load
    axis's 100%."""
    return saturation_rps(scenario, num_requests)


def _crossing(x: np.ndarray, y: np.ndarray, level: float) -> float:
    """The first x where y (positive) reaches ``level``, interpolated linearly in x and log y
    between the bracketing points; nan if y stays below ``level``; x[0] if y[0] is already there."""
    ok = np.isfinite(y) & (y > 0)
    x, y = x[ok], y[ok]
    above = np.flatnonzero(y >= level)
    if len(above) == 0:
        return math.nan
    i = int(above[0])
    if i == 0:
        return float(x[0])
    ly0, ly1, lv = math.log(y[i - 1]), math.log(y[i]), math.log(level)
    return float(x[i - 1] + (x[i] - x[i - 1]) * (lv - ly0) / (ly1 - ly0))


def knee(rates: Sequence[float], values: Sequence[float], factor: float = 2.0) -> float:
    """The load at which ``values`` first reaches ``factor`` x its value at the lightest load
    (see the module docstring); nan when it never does within the sweep.

    Raises:
        ValueError: ``factor <= 1`` or fewer than two points.
    """
    if factor <= 1:
        raise ValueError(f"factor must be > 1, got {factor}")
    x = np.asarray(rates, dtype=float)
    y = np.asarray(values, dtype=float)
    if len(x) < 2:
        raise ValueError("a knee needs at least two sweep points")
    order = np.argsort(x)
    x, y = x[order], y[order]
    return _crossing(x, y, factor * y[np.isfinite(y)][0])


def sustainable_rate(rates: Sequence[float], values: Sequence[float], limit: float) -> float:
    """The highest load whose metric stays within ``limit``: the crossing of ``limit`` (as in
    :func:`knee`); the last swept load if it never crosses; 0 if even the lightest load misses."""
    x = np.asarray(rates, dtype=float)
    y = np.asarray(values, dtype=float)
    order = np.argsort(x)
    x, y = x[order], y[order]
    c = _crossing(x, y, limit)
    if math.isnan(c):
        return float(x[-1])
    return 0.0 if c == x[0] and y[0] > limit else c


def knees(sweep: pd.DataFrame, metrics: Iterable[str] = ("ttft_p99_s", "tpot_p99_s"), factor: float = 2.0,
          limits: Mapping[str, float] | None = None) -> pd.DataFrame:
    """Per policy of a :func:`load_sweep` table: the highest completed throughput in the sweep
    (``max_throughput_rps``: where the policy saturates, if the sweep went that far), the knee of
    each metric (``<metric>_knee_rps``) and, for metrics with a limit in ``limits`` (seconds), the
    sustainable rate (``<metric>_max_rps``)."""
    rows = []
    for policy, g in sweep.groupby("policy", sort=False):
        row: dict[str, Any] = {"policy": policy, "max_throughput_rps": float(g["throughput_rps"].max())}
        for m in metrics:
            row[f"{m}_knee_rps"] = knee(g["rate_per_s"], g[m], factor)
            if limits and m in limits:
                row[f"{m}_max_rps"] = sustainable_rate(g["rate_per_s"], g[m], limits[m])
        rows.append(row)
    return pd.DataFrame(rows)


# -- traffic: burstiness and lengths ------------------------------------------------------------------
def burstiness(arrival_times: Sequence[float], window_s: float = 60.0) -> dict[str, float]:
    """Burstiness statistics of one arrival stream (seconds; see the module docstring):
    ``requests, span_s, mean_rate_per_s, interarrival_cv``, and for windows of ``window_s``:
    ``peak_to_mean`` (busiest window's count / mean count) and ``dispersion_index``.

    Raises:
        ValueError: fewer than two arrivals or ``window_s <= 0``.
    """
    t = np.sort(np.asarray(arrival_times, dtype=float))
    if len(t) < 2:
        raise ValueError("burstiness needs at least two arrivals")
    if window_s <= 0:
        raise ValueError(f"window_s must be > 0, got {window_s}")
    gaps = np.diff(t)
    span = float(t[-1] - t[0])
    nwin = max(1, int(span // window_s))
    idx = ((t - t[0]) // window_s).astype(np.int64)
    counts = np.bincount(np.minimum(idx, nwin - 1) if nwin == 1 else idx[idx < nwin], minlength=nwin)
    mean = float(counts.mean())
    return {"requests": len(t), "span_s": span, "mean_rate_per_s": (len(t) - 1) / span if span > 0 else math.inf,
            "interarrival_cv": float(gaps.std() / gaps.mean()) if gaps.mean() > 0 else math.inf,
            "window_s": float(window_s), "windows": int(nwin),
            "peak_to_mean": float(counts.max() / mean), "dispersion_index": float(counts.var() / mean)}


def rate_series(arrival_times: Sequence[float], window_s: float = 60.0) -> pd.DataFrame:
    """Requests per second in consecutive windows: columns ``t_s`` (window start), ``rate_per_s``."""
    t = np.sort(np.asarray(arrival_times, dtype=float))
    t = t - t[0]
    nwin = max(1, int(math.ceil((t[-1] + 1e-9) / window_s)))
    counts = np.bincount((t // window_s).astype(np.int64), minlength=nwin)
    return pd.DataFrame({"t_s": np.arange(nwin) * window_s, "rate_per_s": counts / window_s})


def dispersion_curve(arrival_times: Sequence[float], windows_s: Sequence[float]) -> pd.DataFrame:
    """Index of dispersion (variance / mean of the per-window counts) at each window size: 1 at
    every scale for Poisson arrivals; growing with the window for traffic whose rate drifts."""
    rows = [{"window_s": float(w), **{k: v for k, v in burstiness(arrival_times, w).items()
                                       if k in ("peak_to_mean", "dispersion_index", "windows")}}
            for w in windows_s]
    return pd.DataFrame(rows)


def length_stats(trace: pd.DataFrame) -> pd.DataFrame:
    """Prompt and output token percentiles of a loaded trace (``num_prompt_tokens``, ``max_tokens``)."""
    rows = []
    for col, label in (("num_prompt_tokens", "prompt_tokens"), ("max_tokens", "output_tokens")):
        v = trace[col].to_numpy(dtype=float)
        rows.append({"what": label, "mean": v.mean(), "p50": np.percentile(v, 50), "p90": np.percentile(v, 90),
                     "p99": np.percentile(v, 99), "max": v.max()})
    return pd.DataFrame(rows)


def head_trace(trace: pd.DataFrame, num_requests: int | None) -> pd.DataFrame:
    """The first ``num_requests`` requests of a loaded trace (all when None)."""
    return trace if num_requests is None else trace.iloc[:num_requests].reset_index(drop=True)


def write_trace(trace: pd.DataFrame, path: str | Path) -> Path:
    """Write a trace (``arrival_time`` s, ``num_prompt_tokens``, ``max_tokens``) as Mooncake JSONL
    (``timestamp`` in ms), the format the ``trace`` arrival process replays."""
    path = Path(path)
    with path.open("w") as fh:
        for t, p, o in zip(trace["arrival_time"].to_numpy(float), trace["num_prompt_tokens"].to_numpy(np.int64),
                           trace["max_tokens"].to_numpy(np.int64), strict=True):
            fh.write(json.dumps({"timestamp": round(float(t) * 1000.0, 6), "input_length": int(p),
                                 "output_length": int(o)}) + "\n")
    return path


def poisson_twin(trace: pd.DataFrame, seed: int = 0) -> pd.DataFrame:
    """The same requests (same lengths, same order) arriving as a Poisson stream of the trace's
    mean rate ((n - 1) / span, so the twin's expected span equals the trace's)."""
    t = trace["arrival_time"].to_numpy(dtype=float)
    n = len(t)
    if n < 2 or t[-1] <= t[0]:
        raise ValueError("a Poisson twin needs at least two arrivals over a positive span")
    rate = (n - 1) / (t[-1] - t[0])
    gaps = np.random.default_rng(seed).exponential(1.0 / rate, size=n - 1)
    twin = trace[["num_prompt_tokens", "max_tokens"]].copy()
    twin.insert(0, "arrival_time", np.concatenate([[0.0], np.cumsum(gaps)]))
    return twin.reset_index(drop=True)


def replay_scenario(base: Scenario | Mapping[str, Any], trace: pd.DataFrame, folder: str | Path,
                    name: str) -> Scenario:
    """``base`` (a scenario or its dict) driven by ``trace``: written to ``folder/name.jsonl`` and
    replayed at its own pace (``workload.arrival: trace``; prompt/output lengths from the trace)."""
    data = base.model_dump(mode="python", exclude_none=True) if isinstance(base, Scenario) else dict(base)
    path = write_trace(trace, Path(folder) / f"{name}.jsonl")
    workload = dict(data.get("workload", {}))
    workload.pop("prompt_tokens", None)
    workload.pop("output_tokens", None)
    workload["arrival"] = {"process": "trace", "path": str(path), "format": "mooncake"}
    data.update(name=name, workload=workload)
    data.pop("num_requests", None)
    data.pop("duration_s", None)
    return scenario_from_dict(data)


def burstiness_cost(base: Scenario | Mapping[str, Any], trace: pd.DataFrame, *, replicas: int | None = None,
                    seed: int = 0, max_replicas: int = 64) -> dict[str, Any]:
    """What burstiness costs: ``trace`` and its :func:`poisson_twin` (same requests, same mean rate)
    are each searched for the fewest replicas meeting the SLO (:func:`min_replicas`), then both are
    replayed against the same deployment: ``replicas`` engines, by default as many as the Poisson
    stream needs (a deployment sized for smooth traffic, facing the real one).

    Returns ``replicas_needed`` (``{"trace": n, "poisson": n}``, None where ``max_replicas`` did not
    suffice), ``same`` (one row per stream at the shared count: ``stream, replicas`` and
    :func:`summary_row`'s columns) and ``searches`` (stream -> :func:`min_replicas` table).
    """
    with tempfile.TemporaryDirectory(prefix="llmplan-replay-") as folder:
        streams = {"trace": replay_scenario(base, trace, folder, "trace"),
                   "poisson": replay_scenario(base, poisson_twin(trace, seed), folder, "poisson")}
        needed, searches = {}, {}
        for label, sc in streams.items():
            needed[label], searches[label] = min_replicas(sc.with_overrides({"deployment.replicas": 1}),
                                                          max_replicas=max_replicas)
        shared = replicas or needed["poisson"] or max_replicas
        same = []
        for label, sc in streams.items():
            done = searches[label].set_index("replicas")
            if shared in done.index:
                row = done.loc[shared].to_dict()
            else:
                result = simulate(sc.with_overrides({"deployment.replicas": shared}))
                row = {"meets_slo": meets_slo(result), **summary_row(result)}
            same.append({"stream": label, "replicas": shared, **row})
    return {"replicas_needed": needed, "same": pd.DataFrame(same), "searches": searches}


def speedup_sweep(base: Scenario | Mapping[str, Any], trace: pd.DataFrame, speedups: Sequence[float], *,
                  replicas: int = 1, seed: int = 0) -> pd.DataFrame:
    """Burstiness cost as load rises: ``trace`` and its :func:`poisson_twin`, both time-compressed
    by each ``speedup`` (arrival times / speedup: same requests, rate x speedup), replayed on
    ``replicas`` engines. One row per (speedup, stream): ``speedup, stream, rate_per_s, replicas``
    and :func:`summary_row`'s columns."""
    twin = poisson_twin(trace, seed)
    rows = []
    with tempfile.TemporaryDirectory(prefix="llmplan-speedup-") as folder:
        for speedup in speedups:
            if speedup <= 0:
                raise ValueError(f"speedup must be > 0, got {speedup}")
            for label, tr in (("trace", trace), ("poisson", twin)):
                fast = tr.assign(arrival_time=tr["arrival_time"] / float(speedup))
                sc = replay_scenario(base, fast, folder, f"{label}-x{speedup:g}").with_overrides(
                    {"deployment.replicas": replicas})
                t = fast["arrival_time"].to_numpy(float)
                rows.append({"speedup": float(speedup), "stream": label,
                             "rate_per_s": (len(t) - 1) / (t[-1] - t[0]) if t[-1] > t[0] else math.inf,
                             "replicas": replicas, **summary_row(simulate(sc))})
    return pd.DataFrame(rows)


# -- prefix caching ----------------------------------------------------------------------------------
def prefix_cache_sweep(scenario: Scenario, variants: Mapping[str, Mapping[str, Any]],
                       caching: Sequence[bool] = (False, True),
                       on_run: Callable[[str, bool], None] | None = None) -> pd.DataFrame:
    """The scenario under each variant (label -> dotted overrides, e.g. ``{"scheduler.
    num_gpu_blocks_override": 20000}`` or ``{"workload.prefix.share": 0.5}``), with
    ``scheduler.enable_prefix_caching`` off and on. One row per (variant, caching): ``variant,
    enable_prefix_caching, num_gpu_blocks`` (per replica, as simulated), ``hit_rate, hit_tokens,
    queries, evictions`` (NaN with caching off), ``ttft_mean_s``, :func:`summary_row`'s columns and
    ``ttft_mean_saving`` / ``ttft_p99_saving`` (1 - on / off for the same variant; on rows only)."""
    rows = []
    for label, overrides in variants.items():
        for on in caching:
            if on_run:
                on_run(str(label), bool(on))
            result = simulate(scenario.with_overrides({**overrides, "scheduler.enable_prefix_caching": bool(on)}))
            s = result.summary
            pc = s.get("prefix_cache") or {}
            rows.append({"variant": label, "enable_prefix_caching": bool(on),
                         "num_gpu_blocks": s.get("kv_cache", {}).get("num_gpu_blocks"),
                         "hit_rate": pc.get("hit_rate", math.nan) if on else math.nan,
                         "hit_tokens": pc.get("hit_tokens", math.nan) if on else math.nan,
                         "queries": pc.get("queries", math.nan) if on else math.nan,
                         "evictions": pc.get("evictions", math.nan) if on else math.nan,
                         "ttft_mean_s": s["ttft_s"]["mean"], **summary_row(result)})
    df = pd.DataFrame(rows)
    for metric in ("ttft_mean_s", "ttft_p99_s"):
        off = df[~df["enable_prefix_caching"]].set_index("variant")[metric]
        saving = 1 - df[metric] / df["variant"].map(off)
        df[metric.removesuffix("_s") + "_saving"] = saving.where(df["enable_prefix_caching"])
    return df


# -- speculative decoding -----------------------------------------------------------------------------
def speculative_sweep(scenario: Scenario, acceptance_rates: Sequence[float], ks: Sequence[int], *,
                      method: str = "draft", draft_model: str | None = "llama-3.2-1b",
                      on_run: Callable[[int, float], None] | None = None) -> pd.DataFrame:
    """TPOT with speculative decoding at each acceptance rate alpha and k, against the same
    scenario without it. One row per (k, alpha) plus the baseline (``k = 0``): ``k,
    acceptance_rate``, :func:`summary_row`'s columns, ``tokens_per_step`` (measured),
    ``expected_tokens_per_step`` (closed form) and ``tpot_p50_speedup`` (baseline p50 TPOT / this)."""
    from simulator.engine.speculative import expected_tokens_per_step

    base = scenario.model_copy(update={"speculative_config": None})
    rows = [{"k": 0, "acceptance_rate": math.nan, **summary_row(simulate(base)),
             "tokens_per_step": 1.0, "expected_tokens_per_step": 1.0}]
    for k in ks:
        for alpha in acceptance_rates:
            if on_run:
                on_run(int(k), float(alpha))
            spec = {"method": method, "num_speculative_tokens": int(k), "acceptance_rate": float(alpha)}
            if method == "draft":
                spec["draft_model"] = draft_model
            result = simulate(scenario.with_overrides({"speculative_config": spec}))
            measured = (result.summary.get("speculative") or {}).get("mean_tokens_per_step", math.nan)
            rows.append({"k": int(k), "acceptance_rate": float(alpha), **summary_row(result),
                         "tokens_per_step": measured,
                         "expected_tokens_per_step": expected_tokens_per_step(float(alpha), int(k))})
    df = pd.DataFrame(rows)
    df["tpot_p50_speedup"] = df["tpot_p50_s"].iloc[0] / df["tpot_p50_s"]
    return df


def break_even_acceptance(sweep: pd.DataFrame, column: str = "tpot_p50_speedup") -> pd.DataFrame:
    """Per k of a :func:`speculative_sweep`: the acceptance rate at which speculation starts to pay
    (``column`` crosses 1, linear interpolation; nan when it never does within the sweep, the
    lowest alpha swept when it already pays there) and the best speedup and its alpha."""
    rows = []
    for k, g in sweep[sweep["k"] > 0].groupby("k"):
        g = g.sort_values("acceptance_rate")
        a, s = g["acceptance_rate"].to_numpy(float), g[column].to_numpy(float)
        above = np.flatnonzero(s >= 1.0)
        if len(above) == 0:
            be = math.nan
        elif above[0] == 0:
            be = float(a[0])
        else:
            i = int(above[0])
            be = float(a[i - 1] + (a[i] - a[i - 1]) * (1.0 - s[i - 1]) / (s[i] - s[i - 1]))
        best = int(np.nanargmax(s))
        rows.append({"k": int(k), "break_even_acceptance": be, "best_speedup": float(s[best]),
                     "best_at_acceptance": float(a[best])})
    return pd.DataFrame(rows)


# -- calibration review -------------------------------------------------------------------------------
def fit_points(profile: Any) -> pd.DataFrame:
    """Every measured point of a table profile with its leave-one-out prediction: the table's
    columns plus ``measured_s``, ``predicted_s`` (from the other points, as the cost model
    interpolates), ``rel_error``, ``achieved`` (FLOP/s or B/s) and ``efficiency`` (achieved / the
    profile's peak FLOP/s for GEMMs and prefill attention, / peak bandwidth for the rest)."""
    from simulator.cost.op_table import leave_one_out
    from simulator.report.profile_report import _peaks, achieved, profile_table
    from simulator.scenario.models import DTYPE_BYTES
    from simulator.scenario.profiles import load_profile

    profile = load_profile(profile)
    df = profile_table(profile)
    dtype = str(df["dtype"].iloc[0]) if len(df) else "bf16"
    peak, bw = _peaks(profile, dtype)
    loo = leave_one_out(df, peak=peak, bw=bw, elem_bytes=DTYPE_BYTES.get(dtype, 2.0))
    loo["measured_s"] = loo["median_s"].astype(float)
    loo["predicted_s"] = loo["measured_s"] * (1.0 + loo["rel_error"])
    loo["achieved"] = achieved(loo)
    compute = loo["family"].isin(["gemm", "attn_prefill"])
    loo["efficiency"] = loo["achieved"] / np.where(compute, peak, bw)
    return loo


#: The ops and shapes the cross-check compares: (op, tokens or sequences, context).
CROSSCHECK_CASES = (("qkv_proj", 1, 0), ("qkv_proj", 128, 0), ("qkv_proj", 2048, 0),
                    ("o_proj", 1, 0), ("o_proj", 2048, 0),
                    ("gate_up_proj", 1, 0), ("gate_up_proj", 128, 0), ("gate_up_proj", 2048, 0),
                    ("down_proj", 1, 0), ("down_proj", 2048, 0), ("lm_head", 32, 0),
                    ("attn_prefill", 2048, 0), ("attn_decode", 32, 1024), ("attn_decode", 128, 4096),
                    ("rmsnorm", 2048, 0), ("silu_mul", 2048, 0))


def datasheet_cost_model(profile: Any, model: Any, tensor_parallel_size: int = 1):
    """The datasheet profile's per-op roofline as a table cost model over an empty table (every op
    falls back to the profile's peaks and assumed efficiencies: the ``roofline`` model's formulas)."""
    from simulator.cost.op_table import TABLE_COLUMNS
    from simulator.cost.table import TableCostModel
    from simulator.scenario.profiles import load_profile

    data = load_profile(profile).model_dump(exclude_none=True)
    with tempfile.TemporaryDirectory(prefix="llmplan-datasheet-") as folder:
        empty = Path(folder) / "empty.csv"
        empty.write_text(",".join(TABLE_COLUMNS) + "\n")
        data.update(cost_model="table", table=str(empty))
        data.pop("table_sha256", None)
        return TableCostModel(load_profile(data), model, tensor_parallel_size)


def crosscheck(model: Any, datasheet: Any, profiles: Mapping[str, Any],
               cases: Sequence[tuple[str, int, int]] = CROSSCHECK_CASES, tensor_parallel_size: int = 1) -> pd.DataFrame:
    """One layer's op time (microseconds) per case as each profile predicts it: ``datasheet`` (a
    profile whose peaks and efficiencies give the roofline) and each named table profile
    (imported or measured). Long format: ``op, shape, tokens, context, profile, time_us, source``
    (``source``: ``measured`` at that shape, ``scaled ...`` from the nearest measured shape, or
    ``roofline`` when the table has no rows for the op)."""
    from simulator.cost.factory import make_cost_model
    from simulator.scenario.models import MODEL_PRESETS
    from simulator.scenario.profiles import load_profile

    spec = MODEL_PRESETS[model] if isinstance(model, str) else model
    models = {"datasheet": datasheet_cost_model(datasheet, spec, tensor_parallel_size)}
    for label, ref in profiles.items():
        models[label] = make_cost_model(load_profile(ref), spec, tensor_parallel_size)
    rows = []
    for op, tokens, ctx in cases:
        shape = f"{tokens} tok" + (f" x {ctx} ctx" if ctx else "")
        for label, cm in models.items():
            src = "roofline" if label == "datasheet" else cm.sources.get(op, "")
            rows.append({"op": op, "shape": shape, "tokens": tokens, "context": ctx, "profile": label,
                         "time_us": cm.op_time_s(op, tokens, ctx) * 1e6, "source": src})
    return pd.DataFrame(rows)
