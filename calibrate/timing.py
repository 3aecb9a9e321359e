"""The device and how one kernel is timed on it: the timing settings (full, quick, GPU, the noise probe's),
the device, dtype and clock a run resolves to, the memory it may use, and :func:`measure`, which times
one benchmark (CUDA events around back-to-back calls on a GPU; the wall or thread CPU clock on a CPU)
and returns its table row."""
from __future__ import annotations

import math
import platform
import subprocess
import time
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, ClassVar

import numpy as np
import torch

from simulator.errors import ScenarioError

from . import kernels
from .grid import BenchSpec, rotation_copies
from .noise import NoiseBounds

GIB = 1024**3
DEVICES = ("auto", "cpu", "cuda")


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



def device_label(dev: torch.device) -> str:
    return torch.cuda.get_device_name(dev) if dev.type == "cuda" else f"this {dev.type}"


def fp8_supported(dev: torch.device) -> bool:
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



def nvidia_driver() -> str:
    try:
        return subprocess.run(["nvidia-smi", "--query-gpu=driver_version", "--format=csv,noheader"],
                              capture_output=True, text=True, timeout=20).stdout.strip().splitlines()[0]
    except (OSError, subprocess.SubprocessError, IndexError):
        return "unknown"
