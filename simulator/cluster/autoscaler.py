"""An autoscaler: replicas added and removed during a run, with cold starts.

Every ``interval_s`` the autoscaler counts the requests waiting or running on the active replicas
and wants ``ceil(outstanding / target_outstanding_per_replica)`` replicas (clipped to
``[min_replicas, max_replicas]``), as Knative's concurrency-based autoscaler does.

* **Scale up** immediately: each missing replica (beyond those active and already starting)
  starts. A cold start takes ``weights bytes per GPU / load_bandwidth_bytes_per_s +
  engine_start_s``; a standby from the warm pool takes ``warm_start_s`` and is replaced in the
  background by a cold start. A replica receives requests only once it has started.
* **Scale down** to the largest count wanted over the trailing ``scale_down_delay_s``, never
  while replicas are starting. A removed replica gets no new requests and finishes those it has.
* **Ramps** are the intervals in which at least one replica is starting; the summary compares the
  TTFT p99 of requests arriving during ramps with the others (``autoscaler`` in the summary).

GPU time counts active and starting replicas (a starting replica holds its GPUs while loading);
draining replicas are not counted after their removal (an underestimate of a few seconds each).
Decisions read the replicas' state exactly at the tick (ticks are external events for the
engines' fast-forward, like arrivals).
"""
from __future__ import annotations

import math
from collections import deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, ClassVar

import numpy as np
import simpy

from simulator.cluster.extension import MeasuredRun, RunExtension, SummaryBlock
from simulator.scenario.config import AutoscalerConfig

if TYPE_CHECKING:  # pragma: no cover
    import pandas as pd  # the run's frames; this module loads without pandas


class Autoscaler(RunExtension):
    """The run's autoscaler (a :class:`~simulator.cluster.extension.RunExtension`): its ticks bound the
    replicas' decode runs, and it reports the ``autoscaler`` block of the summary."""

    timed: ClassVar[bool] = True
    """Its ticks read the replicas' state: they are events for the engines' decode runs, like arrivals."""

    def __init__(self, env: simpy.Environment, cfg: AutoscalerConfig, weights_bytes_per_gpu: float,
                 replicas: Sequence[Any], is_done: Callable[[], bool]) -> None:
        self.env, self.cfg, self.replicas, self.is_done = env, cfg, replicas, is_done
        self.active = cfg.initial_replicas or cfg.min_replicas
        self.starting = 0
        self.warm = cfg.warm_pool
        self.cold_start_s = weights_bytes_per_gpu / cfg.load_bandwidth_bytes_per_s + cfg.engine_start_s
        self.next_tick = cfg.interval_s
        self._wanted: deque[tuple[float, int]] = deque()
        self.timeline: list[tuple[float, int, int]] = [(0.0, self.active, 0)]
        """(instant, active, starting) after every change."""
        self.ramps: list[list[Any]] = []
        env.process(self._loop())

    def _record(self) -> None:
        now = float(self.env.now)
        if self.starting and (not self.ramps or self.ramps[-1][1] is not None):
            self.ramps.append([now, None])
        if not self.starting and self.ramps and self.ramps[-1][1] is None:
            self.ramps[-1][1] = now
        self.timeline.append((now, self.active, self.starting))

    def _loop(self):  # SimPy process
        cfg, env = self.cfg, self.env
        while not self.is_done():
            yield env.timeout(max(0.0, self.next_tick - env.now))
            now = float(env.now)
            outstanding = sum(r.num_outstanding for r in self.replicas[: self.active])
            want = min(cfg.max_replicas,
                       max(cfg.min_replicas, math.ceil(outstanding / cfg.target_outstanding_per_replica)))
            self._wanted.append((now, want))
            while self._wanted and self._wanted[0][0] < now - cfg.scale_down_delay_s:
                self._wanted.popleft()
            if want > self.active + self.starting:
                for _ in range(want - self.active - self.starting):
                    self._start()
            elif self.starting == 0:
                keep = max(w for _, w in self._wanted)
                if keep < self.active:
                    self.active = keep
                    self._record()
            self.next_tick = now + cfg.interval_s

    def _start(self) -> None:
        if self.warm > 0:
            self.warm -= 1
            delay = self.cfg.warm_start_s
            self.env.process(self._refill())
        else:
            delay = self.cold_start_s
        self.starting += 1
        self._record()
        self.env.process(self._activate(delay))

    def _activate(self, delay: float):
        yield self.env.timeout(delay)
        self.starting -= 1
        self.active = min(self.active + 1, self.cfg.max_replicas)
        self._record()

    def _refill(self):
        yield self.env.timeout(self.cold_start_s)
        self.warm += 1

    # -- the run's hooks -------------------------------------------------------------------------
    def horizon(self) -> float:
        return self.next_tick

    def summary_blocks(self) -> Sequence[SummaryBlock]:
        return (SummaryBlock("autoscaler", "run", ScalingLog(self.cold_start_s, self.timeline, self.ramps)),)


@dataclass(frozen=True)
class ScalingLog:
    """What the autoscaler did (the summary's ``autoscaler`` block), kept without the run."""

    cold_start_s: float
    timeline: list[tuple[float, int, int]]
    """(instant, active, starting) after every change."""
    ramps: list[list[Any]]
    """[start, end] of each interval with a replica starting (end None: still starting at the end)."""

    def __call__(self, run: MeasuredRun) -> dict[str, Any]:
        return self.summary(run.requests, run.measured, run.sim_time_s)

    def summary(self, requests: pd.DataFrame, measured: np.ndarray, end_time: float) -> dict[str, Any]:
        t = np.array([e[0] for e in self.timeline] + [end_time])
        held = np.array([e[1] + e[2] for e in self.timeline], dtype=float)
        active = np.array([e[1] for e in self.timeline], dtype=float)
        dt = np.diff(t).clip(min=0)
        ramps = [(a, b if b is not None else end_time) for a, b in self.ramps]
        arr = requests["arrival_time"].to_numpy()
        in_ramp = np.zeros(len(requests), dtype=bool)
        for a, b in ramps:
            in_ramp |= (arr >= a) & (arr < b)
        ttft = requests["client_ttft_s" if "client_ttft_s" in requests else "ttft_s"].to_numpy()

        def p99(mask: np.ndarray) -> float | None:
            x = ttft[mask & measured]
            x = x[~np.isnan(x)]
            return float(np.quantile(x, 0.99)) if len(x) else None

        return {
            "cold_start_s": self.cold_start_s,
            "gpu_replica_seconds": float((held * dt).sum()),
            "mean_active_replicas": float((active * dt).sum() / dt.sum()) if dt.sum() > 0 else None,
            "max_active_replicas": int(active.max()),
            "scale_events": len(self.timeline) - 1,
            "ramp_s": float(sum(b - a for a, b in ramps)),
            "ramp_requests": int((in_ramp & measured).sum()),
            "ttft_p99_in_ramps_s": p99(in_ramp),
            "ttft_p99_outside_ramps_s": p99(~in_ramp),
            "timeline": [[float(a), int(b), int(c)] for a, b, c in self.timeline],
        }
