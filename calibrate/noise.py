"""Machine noise during a calibration: measure it, re-measure through it, or refuse.

A calibration is only as good as the machine was quiet while it ran. A ``--quick`` CPU run at load
average 8 once wrote a profile whose TTFT predictions were 23-35x too high, and its provenance
recorded a reference-kernel drift of -98% without anyone being told. So the runner now times a
*reference kernel* (one small GEMM of the grid, repeated: a probe) before, during and after the
grid, and reads the load average with each probe:

* **before**: probes until two in a row agree (each with a small spread, the load within bound, and
  their medians within the drift bound of each other); the second is the baseline;
* **during**: a probe every ``check_every`` benchmarks (or ``check_every_s`` seconds): when it
  fails (its median is slower than the reference by more than the drift bound, its spread is
  large, or the load is high) the
  benchmarks timed since the last good probe are suspect: the runner waits until a probe is quiet
  again (at most ``retries`` waits), times them again, keeping the faster of each benchmark's two
  timings (noise only ever slows a kernel down), and probes once more;
* a quiet probe *faster* than the reference by more than the drift bound is no failure: noise
  only ever slows a kernel down, so the machine got quieter (other jobs ended) and the reference
  was taken on a busier machine. That probe becomes the **reference** later probes are judged
  against (a re-baseline, recorded in ``rebaselines``): from then on a return to the earlier,
  slower speed counts as a slowdown. Benchmarks timed before a re-baseline were within the bound
  of the reference of their time; the record keeps each re-baseline's speed-up so a reader can
  judge them;
* when the machine stays noisy, :class:`CalibrationError`: one line (exit status 2 from the CLI)
  saying which bound was exceeded, by how much, and what to do.

Each probe goes into the profile's ``provenance.noise``. No torch here: a probe is any callable
returning the reference kernel's table row (``median_s``, ``p10_s``, ``p90_s``), so tests can play a
noisy machine.
"""
from __future__ import annotations

import math
import os
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from typing import Any

from simulator.errors import ScenarioError


class CalibrationError(ScenarioError):
    """The machine was too noisy to calibrate on (the CLI prints one line and exits with status 2)."""

    def __init__(self, value: Any, message: str) -> None:
        super().__init__("calibration noise", value, message)


@dataclass(frozen=True)
class NoiseBounds:
    """When a probe of the reference kernel counts as noisy."""

    max_drift: float = 0.25
    """Largest slowdown, probe median / reference median - 1 (the machine slowed under the run); a
    probe faster than the reference by more than this becomes the new reference (module doc)."""
    max_spread: float = 0.5
    """Largest (p90 - p10) / median over one probe's repeats (the machine is jittery right now)."""
    max_load_per_cpu: float | None = 3.0
    """Largest 1-minute load average per CPU this process may use; None: not checked (GPU timing)."""
    retries: int = 3
    """Re-measurements of one stretch of benchmarks (and baseline attempts) before giving up."""
    wait_s: float = 10.0
    """Pause before each re-measurement, for a passing spell to pass."""
    check_every: int = 16
    """A probe after this many benchmarks ..."""
    check_every_s: float = 60.0
    """... or this many seconds, whichever comes first."""


@dataclass
class Probe:
    """One timing of the reference kernel and the load average at that moment."""

    elapsed_s: float
    median_s: float
    spread: float
    load_per_cpu: float
    drift: float | None = None
    """Median / the reference's median - 1, once a reference is set."""
    problems: list[str] = field(default_factory=list)
    rebaselined: bool = False
    """This probe, quiet and faster than the reference beyond the drift bound, became the reference."""

    @property
    def ok(self) -> bool:
        return not self.problems

    def record(self) -> dict[str, Any]:
        out = {k: (round(v, 4) if isinstance(v, float) else v) for k, v in asdict(self).items()}
        out["median_s"] = float(f"{self.median_s:.4g}")
        return out


def usable_cpus() -> int:
    try:
        return len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        return os.cpu_count() or 1


class NoiseMonitor:
    """Probes the reference kernel and judges each probe against :class:`NoiseBounds` (module doc).

    ``probe`` times the reference kernel and returns its table row; ``load`` returns the 1-minute
    load average; ``sleep`` waits. All three are injectable (tests play a noisy machine with them).
    """

    def __init__(self, probe: Callable[[], dict[str, Any]], bounds: NoiseBounds, *, label: str = "reference",
                 load: Callable[[], float] = lambda: os.getloadavg()[0], cpus: int | None = None,
                 sleep: Callable[[float], None] = time.sleep, clock: Callable[[], float] = time.perf_counter) -> None:
        self._probe, self.bounds, self.label = probe, bounds, label
        self._load, self._sleep, self._clock = load, sleep, clock
        self.cpus = cpus or usable_cpus()
        self._t0 = clock()
        self._last = self._t0
        self.baseline: Probe | None = None
        """The probe that settled the start of the run."""
        self.reference: Probe | None = None
        """The probe later ones are judged against: the baseline, or the last re-baseline."""
        self.probes: list[Probe] = []
        self.remeasured = 0
        """Benchmarks timed again because a probe after them failed."""

    # -- probing -------------------------------------------------------------------------------------
    def probe(self) -> Probe:
        """Time the reference kernel now and judge it (drift against the baseline, once set)."""
        row = self._probe()
        med = float(row["median_s"])
        p = Probe(elapsed_s=self._clock() - self._t0, median_s=med,
                  spread=float((row["p90_s"] - row["p10_s"]) / med) if med > 0 else float("inf"),
                  load_per_cpu=float(self._load()) / self.cpus)
        b = self.bounds
        ref = self.reference
        if ref is not None:
            p.drift = med / ref.median_s - 1.0
            if p.drift > b.max_drift:
                since = ("the start of the run" if ref is self.baseline
                         else f"the reference probe at {ref.elapsed_s:.0f} s")
                p.problems.append(f"drifted {p.drift:+.0%} from {since} (bound +{b.max_drift:.0%})")
        if p.spread > b.max_spread:
            p.problems.append(f"p90-p10 spread {p.spread:.0%} of its median (bound {b.max_spread:.0%})")
        if b.max_load_per_cpu is not None and p.load_per_cpu > b.max_load_per_cpu:
            p.problems.append(f"load average {p.load_per_cpu * self.cpus:.1f} on {self.cpus} CPUs "
                              f"(bound {b.max_load_per_cpu:g} per CPU)")
        if ref is not None and p.ok and p.drift is not None and p.drift < -b.max_drift:
            p.rebaselined = True        # the machine got quieter: judge later probes against this one
            self.reference = p
        self.probes.append(p)
        self._last = self._clock()
        return p

    def start(self) -> Probe:
        """Settle the baseline: probe until two in a row are quiet and agree within the drift bound
        (a wait after each noisy probe).

        Raises:
            CalibrationError: no such pair within ``retries + 2`` probes.
        """
        prev: Probe | None = None
        for _ in range(self.bounds.retries + 2):
            p = self.probe()
            if p.ok and prev is not None and prev.ok and abs(p.median_s / prev.median_s - 1.0) <= self.bounds.max_drift:
                self.baseline = self.reference = p
                return p
            if not p.ok:
                self._sleep(self.bounds.wait_s)
            prev = p
        last = self.probes[-1]
        why = "; ".join(last.problems) or (
            f"two probes in a row differed by more than {self.bounds.max_drift:.0%} "
            f"({self.probes[-2].median_s * 1e3:.3g} vs {last.median_s * 1e3:.3g} ms)")
        raise CalibrationError(round(last.median_s, 6), f"the machine is too noisy to start: the {self.label} "
                               f"{why}, {len(self.probes)} probes {self.bounds.wait_s:g} s apart; {self.hint(last)}")

    def due(self, benchmarks_since: int) -> bool:
        b = self.bounds
        return benchmarks_since >= b.check_every or (benchmarks_since > 0 and
                                                     self._clock() - self._last >= b.check_every_s)

    def confirm(self, remeasure: Callable[[], tuple[int, float]]) -> Probe:
        """Probe; while the probe fails: wait, probe until the machine is quiet again, call
        ``remeasure`` and probe again. ``remeasure`` times the suspect benchmarks again and returns
        how many and the median |log(new / previous time)| over them: a stretch whose timings keep
        changing by more than the drift bound is noise the probes happened to miss, and fails too.
        Every wait counts against ``retries``.

        Raises:
            CalibrationError: still noisy after ``retries`` waits.
        """
        p = self.probe()
        tries = 0
        while not p.ok:
            if tries == self.bounds.retries:
                raise CalibrationError(round(p.drift if p.drift is not None else p.spread, 3),
                                       f"the {self.label} {'; '.join(p.problems)} after {tries} waits of "
                                       f"{self.bounds.wait_s:g} s to time the benchmarks since the last quiet probe "
                                       f"again ({p.elapsed_s:.0f} s into the run); none of them was kept; "
                                       f"{self.hint(p)}")
            tries += 1
            self._sleep(self.bounds.wait_s)
            p = self.probe()
            if p.ok:        # quiet again: time the suspect stretch again, then check it stayed quiet
                n, change = remeasure()
                self.remeasured += n
                p = self.probe()
                if math.expm1(change) > self.bounds.max_drift:
                    p.problems.append(f"(its benchmarks timed again changed by {math.expm1(change):.0%} at the "
                                      f"median, bound {self.bounds.max_drift:.0%})")
        return p

    def hint(self, p: Probe) -> str:
        """What to do about the probe that refused, naming the options that lift *its* problems: a load
        over the bound is lifted only by ``--max-load`` (a quieter clock does not lower the load
        average), a drift or spread by a quieter machine, the thread clock or looser bounds."""
        loaded = self.bounds.max_load_per_cpu is not None and p.load_per_cpu > self.bounds.max_load_per_cpu
        timing = not loaded or any(not problem.startswith("load average") for problem in p.problems)
        parts = []
        if loaded:
            needed = math.ceil(p.load_per_cpu * 10 + 1e-9) / 10   # one decimal above the measured load
            parts.append(f"pass --max-load {needed:g} or more (the load per CPU is {p.load_per_cpu:.2f}) if a busy "
                         "machine's timings are acceptable, or calibrate when the load is lower")
        if timing:
            parts.append(HINT)
        return "; ".join(parts)

    def record(self) -> dict[str, Any]:
        """What ``provenance.noise`` keeps: the bounds, the baseline, every probe, re-measurements."""
        drifts = [p.drift for p in self.probes if p.drift is not None]
        return {"bounds": asdict(self.bounds), "cpus": self.cpus,
                "baseline": self.baseline.record() if self.baseline else None,
                "probes": [p.record() for p in self.probes],
                "failed_probes": sum(not p.ok for p in self.probes),
                "benchmarks_remeasured": self.remeasured,
                "rebaselines": [{"elapsed_s": round(p.elapsed_s, 3), "speedup": round(-(p.drift or 0.0), 4)}
                                for p in self.probes if p.rebaselined],
                "max_abs_drift": round(max((abs(d) for d in drifts), default=0.0), 4)}


HINT = ("calibrate on a quieter machine (on a CPU: --clock thread --threads 1), or loosen --max-drift/"
        "--max-spread if this noise is acceptable")
