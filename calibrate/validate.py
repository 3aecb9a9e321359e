"""``llmplan validate``: run the reference engine and the simulator on the same requests, side by side.

Steps (:func:`run_validation`):

1. **Profile**: reuse a kernel profile (``--profile``) or calibrate one for the model.
2. **Engine overhead**: one saturated engine run (every request at t = 0, its own seed) times
   each step; the step's duration minus the profile's kernel prediction for that step's plan is
   the engine's CPU overhead, fitted as ``step_s + per_seq_s x seqs + per_token_s x tokens``
   (non-negative least squares) and written into a derived profile (``DIR/profile``) that the
   simulator then uses. This run is separate from everything compared below.
3. **Capacity**: another saturated run (the validation seed): measured requests/s vs the
   simulator's on the same burst.
4. **Loads**: for each fraction of the predicted capacity, Poisson arrivals at that rate (drawn by
   the simulator's workload code from the scenario and seed), served ``repeats`` times by the
   engine and once by the simulator; TTFT p50/p90/p99, TPOT p50/p99, E2E p50/p99 and throughput,
   with the relative error of each and the engine's own run-to-run spread (its noise).

Writes ``DIR/validation.csv`` (one row per load and metric), ``DIR/validation.json`` (settings,
overhead fit, capacity, rows, machine load), per-request records of the first repeat and, when
plotly is installed, ``DIR/validation.html`` (predicted vs measured).
"""
from __future__ import annotations

import json
import os
import platform
import shutil
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import torch
import yaml

from simulator.cost.factory import make_cost_model
from simulator.errors import ScenarioError
from simulator.output import output_folder, write_csv
from simulator.run.resolve import resolve, resolve_model, spawn_rngs
from simulator.run.simulate import simulate
from simulator.scenario.config import Scenario, scenario_from_dict
from simulator.scenario.models import MODEL_PRESETS, ModelSpec
from simulator.scenario.profiles import load_profile
from simulator.workload.traffic import Workload, generate_workload

from .engine import ENGINE_POLICIES, EngineRun, LlamaModel, ServingEngine
from .kernels import TORCH_DTYPES

#: (metric column, percentile) pairs compared, in table order.
METRICS: list[tuple[str, str, float]] = [
    ("ttft_p50", "ttft_s", 50), ("ttft_p90", "ttft_s", 90), ("ttft_p99", "ttft_s", 99),
    ("tpot_p50", "tpot_s", 50), ("tpot_p99", "tpot_s", 99),
    ("e2e_p50", "e2e_s", 50), ("e2e_p99", "e2e_s", 99)]
TARGETS = {"p50": 0.10, "p90": 0.15, "p99": 0.15, "throughput": 0.10}


@dataclass
class ValidateSettings:
    model: str = "tiny-llama"
    device: str = "cpu"
    loads: tuple[float, ...] = (0.2, 0.4, 0.6, 0.8)
    profile: str | None = None
    repeats: int = 3
    num_requests: int = 200
    capacity_requests: int = 64
    seed: int = 0
    policy: str = "continuous"
    max_num_seqs: int = 16
    max_num_batched_tokens: int = 1024
    max_model_len: int = 1024
    long_prefill_token_threshold: int | None = None
    prompt_mean: float = 128.0
    prompt_sigma: float = 0.5
    prompt_max: int = 512
    output_mean: float = 32.0
    output_max: int = 128
    clock: str = "wall"
    threads: int = 1
    dtype: str | None = None
    noise: dict[str, Any] | None = None
    """The calibration's noise bounds (fields of :class:`calibrate.noise.NoiseBounds`, as ``llmplan
    calibrate --max-drift/--max-spread/--max-load`` set them) when no ``profile`` is given; None: the
    defaults, which refuse a busy machine."""


def model_ref(s: ValidateSettings) -> str | dict[str, Any]:
    """The preset name, or an inline spec when ``--dtype`` differs from the preset's own dtype (the
    engine computes in ``--dtype``, so the simulator must look up that dtype's kernel rows)."""
    spec = resolve_model(s.model)
    if s.dtype and s.dtype != spec.dtype:
        return spec.model_dump(mode="json") | {"dtype": s.dtype}
    return s.model


def build_scenario(s: ValidateSettings, hardware: str | dict[str, Any], rate_per_s: float, num_requests: int,
                   seed: int) -> Scenario:
    """The scenario both sides serve: the engine's knobs, Poisson arrivals, lognormal/geometric lengths."""
    sched: dict[str, Any] = dict(policy=s.policy, max_num_seqs=s.max_num_seqs,
                                 max_num_batched_tokens=s.max_num_batched_tokens, max_model_len=s.max_model_len)
    if s.long_prefill_token_threshold:
        sched["long_prefill_token_threshold"] = s.long_prefill_token_threshold
    return scenario_from_dict(dict(
        name="validate", seed=seed, num_requests=num_requests, model=model_ref(s), hardware=hardware,
        scheduler=sched,
        workload=dict(arrival=dict(process="poisson", rate_per_s=rate_per_s),
                      prompt_tokens=dict(dist="lognormal", mean=s.prompt_mean, sigma=s.prompt_sigma, max=s.prompt_max),
                      output_tokens=dict(dist="geometric", mean=s.output_mean, max=s.output_max))))


#: The scenario fields :func:`build_scenario` fills from each command-line flag, to name the flag in errors.
_FLAGS = {"num_requests": "--num-requests", "seed": "--seed", "scheduler.policy": "--policy",
          "scheduler.max_num_seqs": "--max-num-seqs", "scheduler.max_num_batched_tokens": "--max-num-batched-tokens",
          "scheduler.max_model_len": "--max-model-len", "workload.prompt_tokens.mean": "--prompt-mean",
          "workload.prompt_tokens.max": "--prompt-max", "workload.output_tokens.mean": "--output-mean",
          "workload.output_tokens.max": "--output-max", "scheduler": "--max-num-batched-tokens"}


def check_settings(s: ValidateSettings) -> None:
    """Refuse bad settings before any work (the calibration alone takes minutes), each error naming its
    command-line flag: the device, model, dtype, policy and counts, then the scenario both sides will serve
    (built with a stand-in hardware profile, its workload drawn), then ``--profile``.

    Raises:
        ScenarioError: the first bad setting.
    """
    if s.device not in ("cpu", "cuda"):
        raise ScenarioError("--device", s.device, "allowed: cpu, cuda")
    if s.device == "cuda" and not torch.cuda.is_available():
        raise ScenarioError("--device", s.device, f"no CUDA device visible to torch {torch.__version__}")
    if s.model not in MODEL_PRESETS:
        raise ScenarioError("--model", s.model, f"unknown model preset; known: {', '.join(MODEL_PRESETS)}")
    if s.dtype is not None and s.dtype not in TORCH_DTYPES:
        raise ScenarioError("--dtype", s.dtype, f"allowed: {', '.join(TORCH_DTYPES)}")
    if s.policy not in ENGINE_POLICIES:
        raise ScenarioError("--policy", s.policy, f"the reference engine runs {', '.join(ENGINE_POLICIES)}")
    for flag, value in (("--repeats", s.repeats), ("--num-requests", s.num_requests),
                        ("--capacity-requests", s.capacity_requests), ("--threads", s.threads)):
        if value < 1:
            raise ScenarioError(flag, value, "must be >= 1")
    stand_in = {"cost_model": "constant", "step_time_s": 0.01}
    for count, flag in ((s.num_requests, "--num-requests"), (s.capacity_requests, "--capacity-requests")):
        try:
            workload_of(build_scenario(s, stand_in, 1.0, count, s.seed))
        except ScenarioError as exc:
            raise ScenarioError(flag if exc.field == "num_requests" else _FLAGS.get(exc.field, exc.field),
                                exc.value, exc.message) from None
    if s.profile is not None:
        load_profile(s.profile, field="--profile")


def workload_of(scenario: Scenario) -> Workload:
    """The requests ``simulate(scenario)`` will serve: same code, same seed, same numbers."""
    system = resolve(scenario)
    return generate_workload(scenario, system.max_model_len, spawn_rngs(scenario.seed))


#: Poisson rate of a "burst": every request arrives within a microsecond (a saturated engine).
BURST_RATE_PER_S = 1e9


def stats(requests: pd.DataFrame) -> dict[str, float]:
    """The compared statistics of one run's request records (same code for engine and simulator)."""
    done = requests[requests["finish_time"].notna()]
    out: dict[str, float] = {}
    for name, col, q in METRICS:
        vals = done[col].dropna().to_numpy()
        out[name] = float(np.percentile(vals, q)) if len(vals) else float("nan")
    span = float(done["finish_time"].max() - done["arrival_time"].min())
    out["throughput_rps"] = len(done) / span if span > 0 else float("nan")
    out["throughput_tok_s"] = float(done["num_output_tokens"].sum()) / span if span > 0 else float("nan")
    return out


def fit_overhead(runs: list[EngineRun], cost: Any) -> dict[str, Any]:
    """Engine CPU overhead per step: measured step time minus the predicted kernel time, fitted as
    ``step_s + per_seq_s x seqs + per_token_s x tokens`` by non-negative least squares on relative
    residuals, so that the many small decode steps count as much as the few long prefills. Each
    step is weighted by 1 / its *predicted kernel* time, not 1 / its measured duration: weights
    taken from the noisy response would favour the steps that happened to run fast and bias the
    fit (and every prediction) low."""
    from scipy.optimize import nnls

    rows, resid, kernel, dur = [], [], [], []
    for run in runs:
        for s in run.steps:
            shape = s.batch_shape()
            bd = cost.breakdown(shape)
            k = bd.total_s - bd.overhead_s
            seqs, tokens = shape.num_seqs, shape.num_tokens
            rows.append((1.0, float(seqs), float(tokens)))
            resid.append(s.duration_s - k)
            kernel.append(k)
            dur.append(s.duration_s)
    A, y = np.array(rows), np.array(resid)
    kernel_a, dur_a = np.array(kernel), np.array(dur)
    w = 1.0 / np.maximum(kernel_a, 1e-9)
    coef, _ = nnls(A * w[:, None], y * w)
    fitted = A @ coef
    return {"step_s": float(coef[0]), "per_seq_s": float(coef[1]), "per_token_s": float(coef[2]),
            "steps": len(y), "kernel_share": float(kernel_a.sum() / dur_a.sum()),
            "residual_median_abs_rel": float(np.median(np.abs(y - fitted) / dur_a)),
            "mean_step_s": float(dur_a.mean())}


def write_profile(base_ref: str, overhead: dict[str, float], out: Path, command: str) -> Path:
    """Copy profile ``base_ref`` into ``out`` with the measured engine overhead."""
    base = load_profile(base_ref)
    out.mkdir(parents=True, exist_ok=True)
    data = base.model_dump(mode="json", exclude_none=True)
    if base.table:
        shutil.copyfile(base.table, out / "ops.csv")
        data["table"] = "ops.csv"
    data["name"] = f"{base.name}-engine"
    data["overhead"] = {k: overhead[k] for k in ("step_s", "per_seq_s", "per_token_s")}
    prov = dict(data.get("provenance", {}))
    prov["engine_overhead"] = {"source": "measured on the reference engine (calibrate/engine.py)",
                               "base_profile": base.name, "command": command, **overhead}
    data["provenance"] = prov
    path = out / "profile.yaml"
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    return path


def step_errors(run: EngineRun, cost: Any) -> pd.DataFrame:
    """Every step of a run: measured duration, the cost model's prediction for its plan, and the
    summary (``attrs["summary"]``): summed predicted over measured busy time, and the median
    ratio for decode-only steps and for steps with a prefill."""
    df = run.steps_frame()
    df["predicted_s"] = [cost.step_time_s(st.batch_shape()) for st in run.steps]
    ratio = df["predicted_s"] / df["duration_s"]
    pf = df["num_prefill_tokens"] > 0
    df.attrs["summary"] = {
        "busy_ratio": float(df["predicted_s"].sum() / df["duration_s"].sum()),
        "decode_median_ratio": float(ratio[~pf].median()) if (~pf).any() else float("nan"),
        "prefill_median_ratio": float(ratio[pf].median()) if pf.any() else float("nan"),
        "steps": len(df)}
    return df


def _noise(values: list[float]) -> float:
    """Half the run-to-run range over the median (0 with one repeat)."""
    v = np.asarray(values, dtype=float)
    med = float(np.median(v))
    return float((v.max() - v.min()) / 2.0 / med) if len(v) > 1 and med > 0 else 0.0


def _target(metric: str) -> float:
    for key, tol in TARGETS.items():
        if metric.endswith(key) or metric.startswith(key):
            return tol
    return TARGETS["throughput"]


def run_validation(s: ValidateSettings, out: Path, *, log: Callable[[str], None] = print,
                   command: str = "", force: bool = False) -> dict[str, Any]:
    """See the module docstring; returns the JSON document it writes. The folder ``out`` is written all
    or nothing (:func:`simulator.output.output_folder`): an error or Ctrl-C leaves what was there before;
    a folder already holding results is replaced only with ``force``."""
    with output_folder(Path(out), force=force) as stage:
        return _validate(s, stage, Path(out), log, command)


def _validate(s: ValidateSettings, out: Path, final: Path, log: Callable[[str], None], command: str) -> dict[str, Any]:
    """:func:`run_validation` writing into the staging folder ``out``; paths in the document name ``final``."""
    torch.set_num_threads(s.threads)
    ref = model_ref(s)
    spec: ModelSpec = resolve_model(s.model)
    if isinstance(ref, dict):
        spec = spec.model_copy(update={"dtype": ref["dtype"]})
    t_start = time.perf_counter()
    load_before = os.getloadavg()
    # 1. the kernel profile
    if s.profile is None:
        from .runner import run_calibration
        cal = out / "calibration"
        log(f"calibrating {s.model} on {s.device} into {cal} ...")
        run_calibration(cal, s.model, device=s.device, quick=True, threads=s.threads, dtype=s.dtype,
                        max_tokens=s.max_num_batched_tokens, max_seqs=s.max_num_seqs,
                        max_context=s.max_model_len, clock="auto", command=command or None, noise=s.noise)
        base_ref = str(cal)
    else:
        base_ref = s.profile
    base = load_profile(base_ref)
    model = LlamaModel(spec, device=s.device, dtype=s.dtype, seed=s.seed)

    def engine_for(scenario: Scenario) -> ServingEngine:
        system = resolve(scenario)
        eng = ServingEngine(scenario, model, system.kv_plan.num_gpu_blocks, clock=s.clock, seed=s.seed)
        return eng

    # 2. engine overhead, from a saturated run and a half-load run with their own seeds (repeated in
    # every round below and refitted on all of them at the end, so that the overhead is measured
    # over the same stretch of time as what it predicts)
    sc_oh = build_scenario(s, base_ref, BURST_RATE_PER_S, s.capacity_requests, s.seed + 10_000)
    eng = engine_for(sc_oh)
    eng.warmup()
    cost = make_cost_model(base, spec, 1)
    wl_oh = workload_of(sc_oh)
    oh_runs: list[EngineRun] = []

    def overhead_runs() -> None:
        burst_run = eng.run(wl_oh)
        rough = stats(burst_run.requests_frame())["throughput_rps"]
        sc_half = build_scenario(s, base_ref, 0.5 * rough, s.capacity_requests, s.seed + 10_001)
        oh_runs.extend([burst_run, engine_for(sc_half).run(workload_of(sc_half))])

    log("measuring the engine's per-step overhead (saturated run, then half load) ...")
    overhead_runs()
    overhead = fit_overhead(oh_runs, cost)
    log(f"  overhead: {overhead['step_s'] * 1e3:.3f} ms/step + {overhead['per_seq_s'] * 1e6:.1f} us/seq + "
        f"{overhead['per_token_s'] * 1e6:.2f} us/token; kernels are {overhead['kernel_share']:.0%} of step time")
    prof_path = write_profile(base_ref, overhead, out / "profile", command)
    hw = str(prof_path.parent)

    # 3. capacity (a saturated burst) and 4. the loads. The arrival rates are fixed from this first
    # estimate; the engine runs everything in rounds (overhead runs, capacity, every load; again), so
    # that the run-to-run spread spans the whole session and slow drift of a shared machine shows
    # up as noise rather than as error; the predictions come after the last round.
    sc_cap = build_scenario(s, hw, BURST_RATE_PER_S, s.capacity_requests, s.seed)
    wl_cap = workload_of(sc_cap)
    cap_first = stats(simulate(sc_cap).requests)["throughput_rps"]
    cases: list[tuple[Any, ...]] = []
    for load in s.loads:
        rate = load * cap_first
        sc = build_scenario(s, hw, rate, s.num_requests, s.seed)
        cases.append((load, rate, sc, workload_of(sc)))
    cap_meas: list[float] = []
    meas: dict[float, list[dict[str, float]]] = {load: [] for load in s.loads}
    engine_runs: dict[float, list[EngineRun]] = {load: [] for load in s.loads}
    for rep in range(s.repeats):
        if rep:
            log(f"round {rep + 1}/{s.repeats}: overhead runs ...")
            overhead_runs()
        run = eng.run(wl_cap)
        cap_meas.append(stats(run.requests_frame())["throughput_rps"])
        log(f"round {rep + 1}/{s.repeats}: saturated capacity {cap_meas[-1]:.2f} req/s")
        for load, rate, sc, wl in cases:
            log(f"round {rep + 1}/{s.repeats}: load {load:.0%} ({rate:.2f} req/s, {len(wl)} requests) ...")
            run = engine_for(sc).run(wl)
            frame = run.requests_frame()
            meas[load].append(stats(frame))
            engine_runs[load].append(run)
            if rep == 0:
                write_csv(frame, out / f"requests_load{load:g}.csv")
                _write_token_times(run, out / f"tokens_load{load:g}.csv")
    overhead = fit_overhead(oh_runs, cost)
    overhead["first_round"] = fit_overhead(oh_runs[:2], cost)
    log(f"overhead over all rounds: {overhead['step_s'] * 1e3:.3f} ms/step + {overhead['per_seq_s'] * 1e6:.1f} "
        f"us/seq + {overhead['per_token_s'] * 1e6:.2f} us/token")
    prof_path = write_profile(base_ref, overhead, out / "profile", command)
    cost_hw = make_cost_model(load_profile(hw), spec, 1)
    cap_pred = stats(simulate(sc_cap).requests)["throughput_rps"]
    preds: dict[float, dict[str, float]] = {}
    step_summary: dict[str, dict[str, float]] = {}
    for load, _rate, sc, wl in cases:
        pred_res = simulate(sc)
        if not np.array_equal(pred_res.requests["arrival_time"].to_numpy(), wl.arrival_time):
            raise RuntimeError("the simulator served other requests than the engine")
        write_csv(pred_res.requests, out / f"predicted_load{load:g}.csv")
        preds[load] = stats(pred_res.requests)
        errs = []
        for rep, run in enumerate(engine_runs[load]):
            steps = step_errors(run, cost_hw)
            errs.append(steps.attrs["summary"])
            if rep == 0:
                write_csv(steps, out / f"steps_load{load:g}.csv")
        step_summary[f"{load:g}"] = {k: float(np.median([e[k] for e in errs])) for k in errs[0]}
    cases = [(load, rate, sc, wl, preds[load]) for load, rate, sc, wl in cases]
    cap_m = float(np.median(cap_meas))
    capacity = {"measured_rps": cap_m, "predicted_rps": cap_pred, "error": cap_pred / cap_m - 1.0,
                "noise": _noise(cap_meas), "repeats": cap_meas, "first_estimate_rps": cap_first}
    log(f"capacity: measured {cap_m:.2f} req/s (noise ±{capacity['noise']:.1%}), predicted {cap_pred:.2f} "
        f"req/s, error {capacity['error']:+.1%}")
    rows: list[dict[str, Any]] = []
    for load, rate, _sc, _wl, pred in cases:
        for metric in [m[0] for m in METRICS] + ["throughput_rps", "throughput_tok_s"]:
            vals = [m[metric] for m in meas[load]]
            med = float(np.median(vals))
            err = pred[metric] / med - 1.0 if med > 0 else float("nan")
            noise = _noise(vals)
            tol = _target(metric)
            rows.append({"load": load, "rate_per_s": rate, "load_of_predicted_capacity": rate / cap_pred,
                         "metric": metric, "measured": med,
                         "predicted": pred[metric], "error": err, "noise": noise, "target": tol,
                         "within_target": bool(abs(err) <= tol),
                         "within_target_plus_noise": bool(abs(err) <= tol + noise),
                         "measured_runs": vals})
        log(_load_line(load, rows))
    doc = {
        "settings": asdict(s) | {"loads": list(s.loads)}, "command": command,
        "profile": str(final / prof_path.relative_to(out)),
        "base_profile": base.name, "overhead": overhead, "capacity": capacity, "rows": rows,
        "step_error": step_summary,
        "machine": {"platform": platform.platform(), "cpu_count": os.cpu_count(), "torch": torch.__version__,
                    "torch_threads": torch.get_num_threads(), "load_average_before": list(load_before),
                    "load_average_after": list(os.getloadavg())},
        "wall_s": time.perf_counter() - t_start,
    }
    write_csv(pd.DataFrame([{k: v for k, v in r.items() if k != "measured_runs"} for r in rows]),
              out / "validation.csv")
    (out / "validation.json").write_text(json.dumps(doc, indent=1))
    doc["plot"] = write_plot(rows, out / "validation.html").replace(str(out), str(final))
    return doc


def _write_token_times(run: EngineRun, path: Path) -> None:
    rid = np.repeat(np.arange(len(run.token_times)), [len(t) for t in run.token_times])
    idx = np.concatenate([np.arange(len(t)) for t in run.token_times]) if len(rid) else np.zeros(0)
    times = np.concatenate([np.asarray(t) for t in run.token_times]) if len(rid) else np.zeros(0)
    write_csv(pd.DataFrame({"request_id": rid, "token_index": idx, "time_s": times}), path)


def _load_line(load: float, rows: list[dict[str, Any]]) -> str:
    mine = [r for r in rows if r["load"] == load]
    return "  " + ", ".join(f"{r['metric']} {r['error']:+.0%}" for r in mine if r["metric"] != "throughput_tok_s")


def format_table(doc: dict[str, Any]) -> str:
    """Markdown table of measured vs predicted (ms, relative error, noise)."""
    lines = ["| load | metric | measured | predicted | error | noise (±) | target |",
             "|---|---|---|---|---|---|---|"]
    for r in doc["rows"]:
        m = r["metric"]
        scale, unit = ((1e3, " ms") if not m.startswith("throughput")
                       else (1.0, " req/s" if m.endswith("rps") else " tok/s"))
        ok = "met" if r["within_target"] else ("within noise" if r["within_target_plus_noise"] else "missed")
        lines.append(f"| {r['load']:.0%} | {m} | {r['measured'] * scale:.2f}{unit} "
                     f"| {r['predicted'] * scale:.2f}{unit} | "
                     f"{r['error']:+.1%} | {r['noise']:.1%} | {ok} |")
    c = doc["capacity"]
    lines.append(f"| saturated | capacity | {c['measured_rps']:.2f} req/s | {c['predicted_rps']:.2f} req/s | "
                 f"{c['error']:+.1%} | {c['noise']:.1%} | {'met' if abs(c['error']) <= 0.10 else 'missed'} |")
    for load, e in doc.get("step_error", {}).items():
        lines.append(f"step model at load {float(load):.0%}: predicted/measured busy time {e['busy_ratio']:.3f}, "
                     f"median step ratio decode {e['decode_median_ratio']:.3f}, "
                     f"prefill {e['prefill_median_ratio']:.3f}")
    return "\n".join(lines)


def write_plot(rows: list[dict[str, Any]], path: Path) -> str:
    """Predicted vs measured scatter (plotly HTML); a message instead when plotly is missing."""
    try:
        import plotly.graph_objects as go
    except ImportError:
        return "plot skipped: plotly is not installed (pip install plotly, or the [app] extra)"
    fig = go.Figure()
    lat = [r for r in rows if not r["metric"].startswith("throughput")]
    for metric in dict.fromkeys(r["metric"] for r in lat):
        pts = [r for r in lat if r["metric"] == metric]
        fig.add_trace(go.Scatter(
            x=[r["measured"] * 1e3 for r in pts], y=[r["predicted"] * 1e3 for r in pts], mode="markers+text",
            name=metric, text=[f"{r['load']:.0%}" for r in pts], textposition="top center",
            error_x=dict(type="data", array=[r["noise"] * r["measured"] * 1e3 for r in pts])))
    hi = max([max(r["measured"], r["predicted"]) * 1e3 for r in lat] + [1.0])
    lo = min([min(r["measured"], r["predicted"]) * 1e3 for r in lat if r["measured"] > 0] + [hi])
    fig.add_trace(go.Scatter(x=[lo, hi], y=[lo, hi], mode="lines", name="y = x", line=dict(dash="dash")))
    fig.update_layout(title="Simulator vs reference engine (ms; labels: load; bars: engine noise)",
                      xaxis=dict(title="measured (ms)", type="log"), yaxis=dict(title="predicted (ms)", type="log"))
    fig.write_html(str(path), include_plotlyjs="cdn")
    return str(path)
