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
import subprocess
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import Any, ClassVar

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
from .grid import BenchSpec, GridLimits, build_grid, grid_memory_bytes, rotation_copies
from .noise import CalibrationError, NoiseBounds, NoiseMonitor
from .provenance import git_revision

GIB = 1024**3
DEVICES = ("auto", "cpu", "cuda")
SETTINGS_FILE = "calibration.json"
#: Columns of the partial table: one row per benchmark and pass.
PARTIAL_COLUMNS = [*TABLE_COLUMNS, "key", "pass"]
Progress = Callable[[int, int, str], None]


@dataclass(frozen=True)
class Timing:
    """How each benchmark is timed. The whole grid is measured ``passes`` times, in alternating
    order (forward, backward, ...), each pass on freshly allocated inputs: ``warmup`` untimed calls,
    then at least ``min_repeats`` timed calls and more until ``min_time_s / passes`` of kernel time
    or ``max_repeats``. The row's median is the median of the passes' medians. One pass is one
    sample: on a CPU the same kernel runs 10-15% faster or slower depending on where its tensors
    landed, and a slow spell of the machine (other tenants, memory management) inflates every
    benchmark timed during it; passes minutes apart, in opposite orders, rarely share both."""

    warmup: int = 3
    min_repeats: int = 15
    max_repeats: int = 1000
    min_time_s: float = 0.1
    passes: int = 3
    max_copies: int = 4096
    group_s: float = 5e-4
    """GPU only: calls per timed sample, enough for about this much GPU time (at most ``max_group``)."""
    max_group: int = 64


QUICK_TIMING = Timing(warmup=2, min_repeats=5, max_repeats=10, min_time_s=0.005, passes=1, max_copies=8)
#: On a GPU each sample is a group of back-to-back calls timed by CUDA events (see
#: :func:`time_kernel`), so far fewer samples reach a stable median than on a CPU.
GPU_TIMING = Timing(warmup=3, min_repeats=10, max_repeats=200, min_time_s=0.03, passes=3, max_copies=256)
GPU_QUICK_TIMING = Timing(warmup=2, min_repeats=5, max_repeats=20, min_time_s=0.005, passes=1, max_copies=64)
#: The reference kernel's probes (:mod:`calibrate.noise`): enough repeats for a spread and a median
#: that mean something, even in a ``--quick`` run (a probe of a small GEMM costs milliseconds).
PROBE_TIMING = Timing(warmup=3, min_repeats=21, max_repeats=400, min_time_s=0.02, passes=1, max_copies=64)
GPU_PROBE_TIMING = Timing(warmup=3, min_repeats=15, max_repeats=100, min_time_s=0.01, passes=1, max_copies=64)


def default_noise_bounds(device: torch.device, clock: str) -> NoiseBounds:
    """The load average matters where it can reach the timings: a CPU on the wall clock (time
    slicing inflates every call) more than on the thread clock (only contention for caches and
    memory does); CUDA events time the GPU, so the load is recorded but not bounded there."""
    if device.type == "cuda":
        return NoiseBounds(max_load_per_cpu=None)
    return NoiseBounds(max_load_per_cpu=3.0 if clock == "thread" else 1.5)


def resolve_device(device: str) -> torch.device:
    if device not in DEVICES:
        raise ScenarioError("--device", device, f"unknown device; allowed: {', '.join(DEVICES)}")
    if device == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    if device == "cuda" and not torch.cuda.is_available():
        raise ScenarioError("--device", device, f"no CUDA device visible to torch {torch.__version__}; "
                            "use --device cpu (or install a CUDA build of torch on a GPU machine)")
    return torch.device(device)


def default_dtype(device: torch.device) -> str:
    return "bf16" if device.type == "cuda" else "fp32"


def cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def _meminfo(key: str) -> int | None:
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith(key + ":"):
                return int(line.split()[1]) * 1024
    except OSError:
        pass
    return None


def device_memory(device: torch.device) -> tuple[int, int]:
    """(total, available) bytes on the device."""
    if device.type == "cuda":
        free, total = torch.cuda.mem_get_info(device)
        return int(total), int(free)
    total = _meminfo("MemTotal") or 0
    avail = _meminfo("MemAvailable") or total
    return total, avail


def cache_bytes(device: torch.device) -> int:
    """Last-level cache the rotation must defeat (L2 on a GPU, L3 on a CPU; 32 MiB if unknown)."""
    if device.type == "cuda":
        return int(getattr(torch.cuda.get_device_properties(device), "L2_cache_size", 50 * 2**20))
    for idx in (3, 2):
        p = Path(f"/sys/devices/system/cpu/cpu0/cache/index{idx}/size")
        try:
            text = p.read_text().strip()
            mult = {"K": 1024, "M": 2**20}.get(text[-1], 1)
            return int(text.rstrip("KM")) * mult
        except (OSError, ValueError):
            continue
    return 32 * 2**20


def _sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


CLOCKS = ("auto", "wall", "thread")


def resolve_clock(clock: str, device: torch.device) -> str:
    """``auto``: CUDA events on a GPU; on a CPU running torch single-threaded, the calling thread's
    CPU time (``time.thread_time``), which a shared machine's other processes cannot inflate by
    time-slicing; otherwise wall time (``time.perf_counter``)."""
    if clock not in CLOCKS:
        raise ScenarioError("--clock", clock, f"allowed: {', '.join(CLOCKS)}")
    if device.type == "cuda":
        return "cuda-events"
    if clock == "auto":
        return "thread" if torch.get_num_threads() == 1 else "wall"
    if clock == "thread" and torch.get_num_threads() != 1:
        raise ScenarioError("--clock", clock, "the thread CPU clock needs --threads 1 (torch's worker threads "
                            "would go uncounted)")
    return clock


def time_kernel(calls: list[kernels.Kernel], device: torch.device, timing: Timing, clock: str = "wall") -> np.ndarray:
    """Seconds per call; calls rotate through the input sets. On a GPU see :func:`_time_cuda`; on a
    CPU one call per sample, timed by ``perf_counter`` (wall) or the thread's CPU time (see
    :func:`resolve_clock`)."""
    if device.type == "cuda":
        return _time_cuda(calls, device, timing)
    n = len(calls)
    with torch.inference_mode():
        for i in range(timing.warmup):
            calls[i % n]()
        times: list[float] = []
        total, i = 0.0, 0
        while len(times) < timing.min_repeats or (total < timing.min_time_s and len(times) < timing.max_repeats):
            fn = calls[i % n]
            if clock == "thread":
                t0 = time.thread_time()
                fn()
                dt = time.thread_time() - t0
            else:
                t0 = time.perf_counter()
                fn()
                dt = time.perf_counter() - t0
            times.append(dt)
            total += dt
            i += 1
    return np.array(times)


class _GpuSpin:
    """Keeps the GPU busy (``torch.cuda._sleep``) while the CPU queues a timed group of calls, so
    that the CUDA events measure the kernels back to back, as a CUDA-graph replay runs them, and
    not the host's launch latency. Its cycles-per-second rate is measured once per device."""

    rate: ClassVar[dict[int, float]] = {}

    @classmethod
    def seconds(cls, device: torch.device, s: float) -> None:
        idx = device.index if device.index is not None else torch.cuda.current_device()
        if idx not in cls.rate:
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            torch.cuda._sleep(1_000_000)
            start.record()
            torch.cuda._sleep(10_000_000)
            end.record()
            end.synchronize()
            cls.rate[idx] = 10_000_000 / max(start.elapsed_time(end) / 1e3, 1e-6)
        torch.cuda._sleep(int(max(s, 0.0) * cls.rate[idx]))


def _time_cuda(calls: list[kernels.Kernel], device: torch.device, timing: Timing) -> np.ndarray:
    """GPU time per call. Each sample is a group of ``g`` calls launched back to back between two
    CUDA events (``g`` sized for ``timing.group_s`` of GPU time, at most ``timing.max_group``); a
    spin kernel queued first covers the host's time to launch the group (measured, and lengthened
    when a launch outlasted it), so the events see the kernels run back to back, not launch gaps.
    Calls rotate through the input sets across samples."""
    n = len(calls)
    ev = lambda: torch.cuda.Event(enable_timing=True)  # noqa: E731
    with torch.inference_mode():
        for i in range(max(1, timing.warmup)):
            calls[i % n]()
        torch.cuda.synchronize(device)
        i = 0
        # Host launch time per call, then a first estimate of GPU time per call.
        t0 = time.perf_counter()
        for _ in range(min(n, 4)):
            calls[i % n]()
            i += 1
        launch_s = (time.perf_counter() - t0) / min(n, 4)
        torch.cuda.synchronize(device)
        start, end = ev(), ev()
        _GpuSpin.seconds(device, 4 * launch_s + 5e-5)
        start.record()
        calls[i % n]()
        i += 1
        end.record()
        end.synchronize()
        est = max(start.elapsed_time(end) / 1e3, 1e-7)
        group = int(max(1, min(timing.max_group, math.ceil(timing.group_s / est))))
        spin = 2.0 * launch_s * group + 5e-5
        times: list[float] = []
        total = 0.0
        while len(times) < timing.min_repeats or (total < timing.min_time_s and len(times) < timing.max_repeats):
            start, end = ev(), ev()
            _GpuSpin.seconds(device, spin)
            start.record()
            h0 = time.perf_counter()
            for _ in range(group):
                calls[i % n]()
                i += 1
            end.record()
            host_s = time.perf_counter() - h0
            end.synchronize()
            gpu_s = start.elapsed_time(end) / 1e3
            if host_s > 0.9 * spin:         # the spin ran out before the group was queued: retime
                spin = 2.0 * host_s + 5e-5
                continue
            times.append(gpu_s / group)
            total += gpu_s
    return np.array(times)


def measure(spec: BenchSpec, device: torch.device, dtype: str, timing: Timing, cache: int,
            clock: str = "wall") -> dict[str, Any]:
    """Time one benchmark; returns its table row."""
    each = replace(timing, min_time_s=timing.min_time_s / max(1, timing.passes))
    calls = kernels.build(spec, rotation_copies(spec, cache, timing.max_copies), device, dtype)
    t = time_kernel(calls, device, each, clock)
    del calls
    return row_of(spec, dtype, t)


def row_of(spec: BenchSpec, dtype: str, t: np.ndarray) -> dict[str, Any]:
    return {"op": spec.op, "family": spec.family, "dtype": dtype, **spec.shape,
            "median_s": float(np.median(t)), "p10_s": float(np.percentile(t, 10)),
            "p90_s": float(np.percentile(t, 90)), "std_s": float(np.std(t)), "repeats": len(t)}


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
    if dtype == "fp8" and not _fp8_supported(dev):
        raise ScenarioError("--dtype", dtype, f"torch {torch.__version__} cannot run float8 GEMMs "
                            f"(torch._scaled_mm) on {_device_label(dev)}; fp8 needs a Hopper, Ada or newer GPU")
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


def _device_label(dev: torch.device) -> str:
    return torch.cuda.get_device_name(dev) if dev.type == "cuda" else f"this {dev.type}"


def _fp8_supported(dev: torch.device) -> bool:
    """Whether a small float8 ``_scaled_mm`` runs here (Hopper/Ada GPUs; some CPU builds)."""
    if not hasattr(torch, "float8_e4m3fn") or not hasattr(torch, "_scaled_mm"):
        return False
    try:
        f8 = torch.float8_e4m3fn
        x = torch.ones(16, 32, device=dev).to(f8)
        w = torch.ones(16, 32, device=dev).to(f8)
        one = torch.ones((), device=dev)
        torch._scaled_mm(x, w.t(), scale_a=one, scale_b=one, out_dtype=torch.bfloat16)
        return True
    except (RuntimeError, NotImplementedError, TypeError):
        return False


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
               "driver": _nvidia_driver(), "device_count": torch.cuda.device_count()}
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


def _nvidia_driver() -> str:
    try:
        return subprocess.run(["nvidia-smi", "--query-gpu=driver_version", "--format=csv,noheader"],
                              capture_output=True, text=True, timeout=20).stdout.strip().splitlines()[0]
    except (OSError, subprocess.SubprocessError, IndexError):
        return "unknown"
