"""Run a calibration: time the grid, keep partial results, write the measured profile.

The output folder holds, while a run is under way, ``calibration.json`` (its settings) and
``ops.partial.csv`` (one row appended and flushed per finished benchmark). Running the same
command again resumes from there. Only when every benchmark is done are ``ops.csv`` and then
``profile.yaml`` written (each to a temporary name, then renamed), so a folder without
``profile.yaml`` is never mistaken for a complete profile.
"""
from __future__ import annotations

import datetime as _dt
import json
import math
import os
import platform
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import torch
import yaml

from simulator.cost.op_table import (
    OPTIONAL_COLUMNS,
    TABLE_COLUMNS,
    TABLE_SCHEMA,
    file_sha256,
    fit_summary,
    leave_one_out,
    written_columns,
)
from simulator.errors import ScenarioError
from simulator.report.profile_report import TARGET_MEDIAN, TARGET_P90
from simulator.run.resolve import model_option
from simulator.scenario.models import ModelSpec
from simulator.scenario.profiles import PARTIAL_TABLE

from . import kernels
from .grid import BenchSpec, GridLimits, build_grid, grid_memory_bytes
from .noise import CalibrationError, NoiseBounds, NoiseMonitor
from .provenance import git_revision
from .timing import (
    GIB,
    GPU_PROBE_TIMING,
    GPU_QUICK_TIMING,
    GPU_TIMING,
    PROBE_TIMING,
    QUICK_TIMING,
    Timing,
    cache_bytes,
    cpu_model,
    default_dtype,
    default_noise_bounds,
    device_label,
    device_memory,
    fp8_supported,
    measure,
    nvidia_driver,
    resolve_clock,
    resolve_device,
    row_of,
)

SETTINGS_FILE = "calibration.json"
#: Columns of the partial table: one row per benchmark and pass.
PARTIAL_COLUMNS = [*TABLE_COLUMNS, "key", "pass"]
Progress = Callable[[int, int, str], None]



@dataclass(frozen=True)
class Settings:
    """What a run measures; a partial run resumes only under the same settings."""

    model: str
    tensor_parallel_size: int
    dtype: str
    device: str
    quick: bool
    max_tokens: int
    max_seqs: int
    max_context: int
    threads: int
    clock: str = "wall"


def _check_fits(specs: list[BenchSpec], device: torch.device, cache: int,
                limit_bytes: float | None) -> dict[str, float]:
    need, worst = grid_memory_bytes(specs, cache)
    need = int(need * 1.25)      # outputs and kernel workspaces
    total, avail = device_memory(device)
    limit = limit_bytes if limit_bytes is not None else 0.8 * avail
    if need > limit:
        what = f"--memory-limit-gib {limit / GIB:.3g}" if limit_bytes is not None else \
            f"80% of the {avail / GIB:.2f} GiB available on {device.type}"
        raise ScenarioError("shape grid", worst.label if worst else None,
                            f"needs {need / GIB:.3f} GiB at its largest benchmark but only {limit / GIB:.3f} GiB may "
                            f"be used ({what}); lower --max-tokens/--max-seqs/--max-context or use --quick")
    return {"largest_benchmark_bytes": need, "limit_bytes": float(limit), "available_bytes": float(avail),
            "total_bytes": float(total)}


def run_calibration(out: Path, model: str | ModelSpec = "llama-3-8b", *, device: str = "auto", tp: int = 1,
                    dtype: str | None = None, quick: bool = False, max_tokens: int | None = None,
                    max_seqs: int | None = None, max_context: int | None = None, threads: int | None = None,
                    memory_limit_bytes: float | None = None, fresh: bool = False, clock: str = "auto",
                    name: str | None = None, timing: Timing | None = None,
                    on_progress: Progress | None = None, on_start: Callable[[int, int], None] | None = None,
                    command: str | None = None, noise: NoiseBounds | dict[str, Any] | None = None,
                    sleep: Callable[[float], None] | None = None,
                    load: Callable[[], float] | None = None) -> Path:
    """Calibrate ``model`` (sharded ``tp`` ways) on ``device`` and write a measured profile to ``out``.

    The machine's noise is probed before, during and after the grid (:mod:`calibrate.noise`;
    ``noise`` sets the bounds, or overrides some of :func:`default_noise_bounds`; ``sleep`` and ``load`` are
    injectable for tests): benchmarks timed during a noisy stretch are timed again, and a machine
    that stays noisy is refused.

    Returns the path of the written ``profile.yaml``. Raises :class:`ScenarioError` for bad
    settings, a grid too big for memory, or a partial run in ``out`` made with other settings;
    :class:`~calibrate.noise.CalibrationError` (a ScenarioError) when the machine is too noisy
    (the suspect benchmarks are left out of the partial results, so a later run times them again).
    ``KeyboardInterrupt`` leaves the partial results in place for the next run to resume.
    """
    spec = _model(model)
    dev = resolve_device(device)
    dtype = dtype or default_dtype(dev)
    if dtype not in kernels.CALIBRATION_DTYPES:
        raise ScenarioError("--dtype", dtype, f"calibration supports {', '.join(kernels.CALIBRATION_DTYPES)}")
    if dtype == "fp8" and not fp8_supported(dev):
        raise ScenarioError("--dtype", dtype, f"torch {torch.__version__} cannot run float8 GEMMs "
                            f"(torch._scaled_mm) on {device_label(dev)}; fp8 needs a Hopper, Ada or newer GPU")
    if dev.type == "cpu" and dtype != "fp32":
        pass  # allowed, but bf16/fp16 on CPU are far slower than fp32: the README says so
    kv = spec.num_key_value_heads
    if tp < 1 or spec.num_attention_heads % tp or (kv % tp and tp % kv):
        raise ScenarioError("--tp", tp, f"must divide the model's {spec.num_attention_heads} attention heads")
    if tp > 1 and dev.type == "cuda" and torch.cuda.device_count() < tp:
        raise ScenarioError("--tp", tp, f"needs {tp} GPUs for the all-reduce benchmarks; "
                            f"{torch.cuda.device_count()} visible")
    if threads:
        torch.set_num_threads(threads)
    defaults = GridLimits() if dev.type == "cuda" else GridLimits(max_tokens=4096, max_seqs=256, max_context=4096)
    limits = GridLimits(quick=quick, max_tokens=max_tokens or (256 if quick else defaults.max_tokens),
                        max_seqs=max_seqs or (64 if quick else defaults.max_seqs),
                        max_context=max_context or (1024 if quick else defaults.max_context))
    clock = resolve_clock(clock, dev)
    settings = Settings(spec.name, tp, dtype, dev.type, quick, limits.max_tokens, limits.max_seqs,
                        limits.max_context, torch.get_num_threads(), clock)
    specs = build_grid(spec, tp, dtype, limits)
    cache = cache_bytes(dev)
    memory = _check_fits(specs, dev, cache, memory_limit_bytes)

    out = Path(out)
    if out.exists() and not out.is_dir():
        raise ScenarioError("--out", str(out), "exists and is not a directory")
    out.mkdir(parents=True, exist_ok=True)
    partial, settings_file = out / PARTIAL_TABLE, out / SETTINGS_FILE
    if fresh:
        partial.unlink(missing_ok=True)
        settings_file.unlink(missing_ok=True)
    done_rows = _resume(partial, settings_file, settings)
    settings_file.write_text(json.dumps({"settings": asdict(settings), "started": _now()}, indent=2) + "\n")
    if timing is None:
        if dev.type == "cuda":
            timing = GPU_QUICK_TIMING if quick else GPU_TIMING
        else:
            timing = QUICK_TIMING if quick else Timing()
    passes = max(1, timing.passes)
    done = {(r["key"], int(r["pass"])) for r in done_rows}
    kernel_specs = [s for s in specs if s.op != "all_reduce"]
    todo = [(p, s) for p in range(passes) for s in (kernel_specs if p % 2 == 0 else kernel_specs[::-1])
            if (s.key, p) not in done]
    comm = [s for s in specs if s.op == "all_reduce" and (s.key, 0) not in done]
    total = passes * len(kernel_specs) + len(specs) - len(kernel_specs)
    remaining = len(todo) + len(comm)
    if on_start:
        on_start(total - remaining, total)
    ref = max((s for s in specs if s.op == "gate_up_proj" and s.shape["tokens"] <= 64), key=lambda s: s.shape["tokens"])
    probe_timing = GPU_PROBE_TIMING if dev.type == "cuda" else PROBE_TIMING
    bounds = noise if isinstance(noise, NoiseBounds) else replace(default_noise_bounds(dev, clock), **(noise or {}))
    monitor = NoiseMonitor(lambda: measure(ref, dev, dtype, probe_timing, cache, clock), bounds,
                           label=f"reference kernel ({ref.label})", load=load or (lambda: os.getloadavg()[0]),
                           sleep=sleep or time.sleep)
    load_before = os.getloadavg()
    monitor.start()
    t0 = time.perf_counter()
    write_header = not partial.exists()
    suspect: list[tuple[int, BenchSpec, int]] = []
    """(pass, benchmark, progress index) timed since the last good probe."""
    rows: dict[tuple[str, int], dict[str, Any]] = {}
    """The suspect benchmarks' rows: a re-measurement keeps the faster of the two timings."""
    try:
        with open(partial, "a", newline="") as f:
            def keep(s: BenchSpec, row: dict[str, Any], p: int, i: int, again: bool = False) -> None:
                nonlocal write_header
                first = rows.get((s.key, p))
                if again and first is not None and first["median_s"] <= row["median_s"]:
                    row = first         # noise only slows a kernel: the faster timing is the truer one
                rows[(s.key, p)] = row
                row["key"], row["pass"] = s.key, p
                pd.DataFrame([row], columns=PARTIAL_COLUMNS).to_csv(f, header=write_header, index=False)
                write_header = False
                f.flush()
                os.fsync(f.fileno())
                if on_progress:
                    on_progress(total - remaining + i + 1, total,
                                s.label + (f" (pass {p + 1}/{passes})" if passes > 1 else "")
                                + (" (timed again: the machine was noisy)" if again else ""))

            def time_comm(specs_: list[BenchSpec]) -> list[np.ndarray]:
                from .comm import time_all_reduce

                return time_all_reduce([s.shape["message_bytes"] for s in specs_], tp, dev, dtype, timing)

            def remeasure() -> tuple[int, float]:
                # A later row of the same (benchmark, pass) replaces the earlier one (_finalize).
                change: list[float] = []

                def again(s: BenchSpec, row: dict[str, Any], p: int, i: int) -> None:
                    change.append(abs(math.log(row["median_s"] / rows[(s.key, p)]["median_s"])))
                    keep(s, row, p, i, again=True)

                for p, s, i in (x for x in suspect if x[1].op != "all_reduce"):
                    again(s, measure(s, dev, dtype, timing, cache, clock), p, i)
                comm_ = [(p, s, i) for p, s, i in suspect if s.op == "all_reduce"]
                if comm_:
                    for (p, s, i), t in zip(comm_, time_comm([s for _, s, _ in comm_]), strict=True):
                        again(s, row_of(s, dtype, t), p, i)
                return len(suspect), float(np.median(change)) if change else 0.0

            for i, (p, s) in enumerate(todo):
                keep(s, measure(s, dev, dtype, timing, cache, clock), p, i)
                suspect.append((p, s, i))
                if monitor.due(len(suspect)):
                    monitor.confirm(remeasure)
                    suspect.clear()
                    rows.clear()
            if comm:
                for j, (s, t) in enumerate(zip(comm, time_comm(comm), strict=True)):
                    keep(s, row_of(s, dtype, t), 0, len(todo) + j)
                    suspect.append((0, s, len(todo) + j))
            monitor.confirm(remeasure)
            suspect.clear()
    except CalibrationError:
        _forget(partial, {(s.key, p) for p, s, _ in suspect})
        raise
    base, last = monitor.baseline, monitor.probes[-1]
    assert base is not None
    noise_record = {"reference_kernel": ref.label, "reference_start_s": base.median_s,
                    "reference_end_s": last.median_s, "reference_drift": last.median_s / base.median_s - 1.0,
                    "load_average_before": list(load_before), "load_average_after": list(os.getloadavg()),
                    "wall_s_this_session": time.perf_counter() - t0, "monitor": monitor.record()}
    return _finalize(out, specs, settings, dev, memory, noise_record, timing, name, command)


def _forget(partial: Path, keys: set[tuple[str, int]]) -> None:
    """Drop the rows of ``(benchmark key, pass)`` from the partial table (timed while the machine was
    noisy), so that a later run times them again."""
    if not keys or not partial.exists():
        return
    df = pd.read_csv(partial)
    bad = [(k, int(p)) in keys for k, p in zip(df["key"], df["pass"], strict=True)]
    tmp = partial.with_suffix(".tmp")
    df[~np.array(bad, dtype=bool)].to_csv(tmp, index=False)
    os.replace(tmp, partial)


def _model(model: str | ModelSpec) -> ModelSpec:
    """``--model``: a preset name or a model file (:func:`simulator.run.resolve.model_option`)."""
    model = model_option(model)
    if model.beyond_dense:
        raise ScenarioError("--model", model.name, f"has {', '.join(model.beyond_dense)}: calibration times the "
                            "dense Llama-shaped operators only; use a datasheet (roofline) profile for this model")
    return model


def _now() -> str:
    return _dt.datetime.now(_dt.timezone.utc).replace(microsecond=0).isoformat()


def _resume(partial: Path, settings_file: Path, settings: Settings) -> list[dict[str, Any]]:
    if not partial.exists():
        return []
    try:
        old = json.loads(settings_file.read_text())["settings"]
    except (OSError, ValueError, KeyError):
        raise ScenarioError("--out", str(partial.parent), f"holds {PARTIAL_TABLE} without a readable "
                            f"{SETTINGS_FILE}; pass --fresh to start over") from None
    mine = asdict(settings)
    diff = {k: (old.get(k), v) for k, v in mine.items() if old.get(k) != v and k != "threads"}
    if diff:
        desc = ", ".join(f"{k}: {a!r} there vs {b!r} now" for k, (a, b) in diff.items())
        raise ScenarioError("--out", str(partial.parent), f"holds a partial calibration with other settings ({desc}); "
                            "use another --out, the same settings to resume, or --fresh to start over")
    try:
        df = pd.read_csv(partial, on_bad_lines="skip")
    except pd.errors.EmptyDataError:
        df = pd.DataFrame(columns=PARTIAL_COLUMNS)
    # A crash can cut the last row short: keep the complete rows and rewrite the file cleanly, so
    # the next appended row starts on a line of its own.
    df = df.dropna(subset=[c for c in PARTIAL_COLUMNS if c in df.columns])
    df = df.reindex(columns=PARTIAL_COLUMNS).dropna()
    tmp = partial.with_suffix(".tmp")
    df.to_csv(tmp, index=False)
    os.replace(tmp, partial)
    return df.to_dict("records")


def _finalize(out: Path, specs: list[BenchSpec], settings: Settings, dev: torch.device, memory: dict[str, float],
              noise: dict[str, Any], timing: Timing, name: str | None, command: str | None) -> Path:
    partial = out / PARTIAL_TABLE
    df = pd.read_csv(partial).drop_duplicates(["key", "pass"], keep="last")
    order = {s.key: i for i, s in enumerate(specs)}
    df = df[df["key"].isin(order)]
    passes = max(1, timing.passes)
    need = {s.key: (1 if s.op == "all_reduce" else passes) for s in specs}
    have = df.groupby("key").size()
    missing = sum(max(0, n - int(have.get(k, 0))) for k, n in need.items())
    if missing:
        raise ScenarioError("--out", str(out), f"{missing} benchmark passes have no result; run again to resume")
    # One row per benchmark: the median over passes of each statistic, every call counted.
    stats = {"median_s": "median", "p10_s": "median", "p90_s": "median", "std_s": "median", "repeats": "sum"}
    for c in OPTIONAL_COLUMNS:          # partial results written before these columns existed
        if c not in df:
            df[c] = 0
    shape = [c for c in TABLE_COLUMNS if c not in stats]
    agg = df.groupby("key", sort=False).agg({**{c: "first" for c in shape}, **stats})
    agg = agg.loc[sorted(agg.index, key=order.__getitem__)]
    table = agg[list(TABLE_COLUMNS)].reset_index(drop=True)
    tmp = out / "ops.csv.tmp"
    table[written_columns(table)].to_csv(tmp, index=False, float_format="%.6g")
    os.replace(tmp, out / "ops.csv")
    table = pd.read_csv(out / "ops.csv")

    spread = ((table["p90_s"] - table["p10_s"]) / table["median_s"]).to_numpy()
    noise.update({"median_rel_spread_p90_p10": float(np.median(spread)),
                  "p90_rel_spread_p90_p10": float(np.percentile(spread, 90))})
    gemm = table[table["family"] == "gemm"]
    peak = _round_up(float((2.0 * gemm["tokens"] * gemm["n"] * gemm["k"] / gemm["median_s"]).max()))
    eb = {"fp32": 4.0, "fp8": 1.0}.get(settings.dtype, 2.0)
    stream = table[table["op"].isin(["residual_add"])]
    if len(stream):
        bw = _round_up(float((3.0 * stream["tokens"] * stream["width"] * eb / stream["median_s"]).max()))
    else:       # an fp8 (GEMM-only) grid: the best weight-streaming rate of the one-token GEMMs
        one = gemm[gemm["tokens"] == gemm["tokens"].min()]
        bw = _round_up(float(((one["n"] * one["k"] * eb) / one["median_s"]).max()))
    loo = leave_one_out(table, peak=peak, bw=bw, elem_bytes=eb)
    fit = {r["family"]: {"points": int(r["points"]), "median_abs_error": round(float(r["median_abs_error"]), 4),
                         "p90_abs_error": round(float(r["p90_abs_error"]), 4),
                         "meets_target": bool(r["median_abs_error"] <= TARGET_MEDIAN
                                              and r["p90_abs_error"] <= TARGET_P90)}
           for r in fit_summary(loo).to_dict("records")}
    fit_warnings = [f"{fam}: held-out error median {100 * v['median_abs_error']:.1f}%, p90 "
                    f"{100 * v['p90_abs_error']:.0f}% misses the target ({100 * TARGET_MEDIAN:.0f}% / "
                    f"{100 * TARGET_P90:.0f}%)" for fam, v in fit.items() if not v["meets_target"]]
    total_mem = memory["total_bytes"]
    if dev.type == "cuda":
        props = torch.cuda.get_device_properties(dev)
        device_name = props.name
        env = {"device_name": props.name, "cuda_version": str(torch.version.cuda),
               "driver": nvidia_driver(), "device_count": torch.cuda.device_count()}
    else:
        device_name = f"{cpu_model()} ({settings.threads} torch threads)"
        env = {}
    profile = {
        "name": name or out.resolve().name,
        "source": "measured",
        "device": device_name,
        "cost_model": "table",
        "table": "ops.csv",
        "table_sha256": file_sha256(out / "ops.csv"),
        "table_schema": TABLE_SCHEMA,
        "memory_bytes": total_mem,
        "memory_bandwidth_bytes_per_s": bw,
        "peak_flops": {settings.dtype: peak},
        "non_torch_memory_bytes": GIB if dev.type == "cuda" else 0,
        "provenance": {
            "tool": "llmplan calibrate",
            "command": command or "",
            "date": _now(),
            "model": settings.model, "tensor_parallel_size": settings.tensor_parallel_size,
            "dtype": settings.dtype, "quick": settings.quick,
            "grid": {"benchmarks": len(table), "max_tokens": settings.max_tokens, "max_seqs": settings.max_seqs,
                     "max_context": settings.max_context},
            "device": device_name, "device_type": dev.type, "device_memory_bytes": total_mem,
            **env,
            "cpu_model": cpu_model(), "cpu_count": os.cpu_count(), "torch_threads": settings.threads,
            "torch_version": str(torch.__version__), "python": platform.python_version(),
            "platform": platform.platform(), "git_revision": git_revision(),
            "timing": {**asdict(timing), "clock": {"cuda-events": "CUDA events around groups of back-to-back calls "
                       "queued behind a spin kernel (GPU time per call, without host launch gaps)",
                       "thread": "time.thread_time (the "
                       "calling thread's CPU time; torch single-threaded)",
                       "wall": "time.perf_counter"}[settings.clock],
                       "rotation_cache_bytes": cache_bytes(dev), "statistic": "median of repeats; p10/p90/std kept"},
            "memory_check": memory,
            "noise": {k: (float(f"{v:.4g}") if isinstance(v, float) else v) for k, v in noise.items()},
            "fit_leave_one_out": fit,
            "fit_targets": {"median_abs_error": TARGET_MEDIAN, "p90_abs_error": TARGET_P90},
            "fit_warnings": fit_warnings,
            "peaks_note": "peak_flops and memory_bandwidth_bytes_per_s are the best this run measured (GEMM "
                          "FLOP/s, residual-add streaming), not vendor figures; they only shape extrapolation",
            "overhead_note": "overhead.step_s/per_seq_s are not measured by kernel benchmarks: the defaults "
                             "(1.5 ms per step, 10 us per request) are assumptions",
        },
    }
    tmp = out / "profile.yaml.tmp"
    tmp.write_text("# Measured by `llmplan calibrate`; the per-op table is ops.csv (see hwprofiles/README.md).\n"
                   + yaml.safe_dump(profile, sort_keys=False, width=110))
    os.replace(tmp, out / "profile.yaml")
    partial.unlink(missing_ok=True)
    (out / SETTINGS_FILE).unlink(missing_ok=True)
    return out / "profile.yaml"


def _round_up(x: float, digits: int = 4) -> float:
    """``x`` rounded up to ``digits`` significant digits: a peak written to the profile is never
    below the best rate measured, so no op reports more than 100% of it."""
    if x <= 0 or not math.isfinite(x):
        return x
    scale = 10.0 ** (math.floor(math.log10(x)) - digits + 1)
    return float(f"{math.ceil(x / scale) * scale:.{digits}g}")
