"""GPU-hours as the fleet runs: an hour-level fluid model of a candidate's autoscaler over a day.

The search (:mod:`simulator.planner.search`) verifies ``N`` replicas at the design load (the forecast
peak, its failover share and headroom). A region's **diurnal shape** (24 hourly multipliers of the
peak, the busiest hour 1.0) says how the load runs through a representative day. This module turns
``N``, the shape and the candidate's ``deployment.autoscaler`` into the replicas paid for each hour:

1. **Need.** Hour ``h`` carries ``shape[h]`` x the design load; at the per-replica rate the search
   verified (``design_rps / N``) that needs ``need[h] = ceil(shape[h] x N)`` replicas.
2. **Clamp** to ``[min_replicas, max_replicas]`` (the floor is paid even at night; a
   ``max_replicas`` below ``N`` cannot serve the peak, which the planner reports as infeasible).
3. **Layers.** Replica ``k`` runs while ``need >= k``. Each such stretch is paid from
   ``lead`` before it starts (capacity is ordered ahead of the ramp: a cold start is the weights per GPU
   / ``load_bandwidth_bytes_per_s`` + ``engine_start_s``; the first ``warm_pool`` replicas of a step up
   come from the warm pool in ``warm_start_s``) until ``scale_down_delay_s`` after it ends (scale-down
   keeps the largest count wanted over the trailing window). The day repeats, so stretches wrap around
   midnight.
4. **Warm pool.** ``warm_pool`` standby replicas (weights loaded, no traffic) are paid all day: a used
   one is replaced in the background by a cold start.

Without an autoscaler the candidate runs its peak fleet all day (``static``); without a shape the day
is flat at the peak (``peak``, the planner's old costing). This is a fluid model at hour resolution,
not an event simulation of the day: see docs/planner.md, "GPU-hours as the fleet runs", for its limits.
"""

from __future__ import annotations

import difflib
import math
from dataclasses import dataclass
from typing import Any

from simulator.errors import ScenarioError

HOURS_PER_DAY = 24

NAMED_SHAPES: dict[str, tuple[float, ...]] = {
    "flat": (1.0,) * 24,
    # weekday office traffic: night trough at 20% of the peak, plateau 10:00-16:00 local time
    "office-hours": (
        0.25,
        0.2,
        0.2,
        0.2,
        0.2,
        0.25,
        0.35,
        0.55,
        0.8,
        0.95,
        1.0,
        1.0,
        0.95,
        1.0,
        1.0,
        0.95,
        0.85,
        0.7,
        0.55,
        0.45,
        0.4,
        0.35,
        0.3,
        0.28,
    ),
    # consumer chat: trough at 4-5 am, evening peak 20:00-22:00 local time
    "consumer": (
        0.55,
        0.4,
        0.3,
        0.25,
        0.22,
        0.22,
        0.28,
        0.38,
        0.5,
        0.6,
        0.65,
        0.7,
        0.75,
        0.75,
        0.72,
        0.72,
        0.75,
        0.8,
        0.88,
        0.95,
        1.0,
        1.0,
        0.9,
        0.72,
    ),
}
"""Named diurnal shapes: hourly multipliers of the peak, hour 0 = midnight in the region's local time."""


# -- the plan's shapes ------------------------------------------------------------------------------
def check_shape(field: str, value: Any) -> tuple[float, ...]:
    """A named shape or 24 finite multipliers in (0, 1] with at least one 1.0; else a ScenarioError."""
    names = ", ".join(NAMED_SHAPES)
    if isinstance(value, str):
        if value not in NAMED_SHAPES:
            hint = difflib.get_close_matches(value, list(NAMED_SHAPES), n=1)
            raise ScenarioError(
                field,
                value,
                "unknown diurnal shape"
                + (f" (did you mean {hint[0]!r}?)" if hint else "")
                + f"; named shapes: {names}, or give 24 hourly multipliers of the peak",
            )
        return NAMED_SHAPES[value]
    if not isinstance(value, (list, tuple)):
        raise ScenarioError(
            field, value, f"give 24 hourly multipliers of the peak (a list) or a named shape: {names}"
        )
    if len(value) != HOURS_PER_DAY:
        raise ScenarioError(
            field, value, f"needs 24 hourly multipliers (hours 0-23, local time), got {len(value)}"
        )
    out = []
    for i, v in enumerate(value):
        if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v):
            raise ScenarioError(
                f"{field}[{i}]",
                v,
                f"must be a finite number in (0, 1]: hour {i}'s load as a share of the forecast peak",
            )
        if not 0 < v <= 1:
            raise ScenarioError(
                f"{field}[{i}]",
                v,
                f"must be in (0, 1]: hour {i}'s load as a share of the forecast "
                "peak (the peak itself is 1.0)",
            )
        out.append(float(v))
    if max(out) != 1.0:
        raise ScenarioError(
            field,
            value,
            f"the busiest hour must be 1.0 (it is {max(out):g}): the multipliers are shares "
            "of the forecast peak_rps; divide them by the largest",
        )
    return tuple(out)


def plan_shapes(regions: list[Any], quarters: list[str]) -> dict[tuple[str, str], tuple[float, ...] | None]:
    """``(quarter, region) -> shape`` (None: no shape) from each region's ``diurnal``: a shape for every
    quarter, or a mapping ``{quarter: shape, ..., default: shape}``."""
    out: dict[tuple[str, str], tuple[float, ...] | None] = {}
    for j, region in enumerate(regions):
        field = f"regions[{j}] ({region.name}).diurnal"
        spec = region.diurnal
        if spec is None or not isinstance(spec, dict):
            shape = None if spec is None else check_shape(field, spec)
            out.update({(q, region.name): shape for q in quarters})
            continue
        unknown = [k for k in spec if k != "default" and k not in quarters]
        if unknown:
            raise ScenarioError(
                f"{field}.{unknown[0]}",
                spec[unknown[0]],
                f"not a quarter of the forecast; quarters: {', '.join(quarters)} (or default)",
            )
        for q in quarters:
            key = q if q in spec else "default"
            if key not in spec:
                raise ScenarioError(
                    field,
                    dict(spec),
                    f"no shape for quarter {q}: give one for every quarter of the forecast, or a default",
                )
            out[(q, region.name)] = check_shape(f"{field}.{key}", spec[key])
    return out


# -- the candidate's autoscaler ---------------------------------------------------------------------
@dataclass(frozen=True)
class AutoscalePolicy:
    """What the fluid model takes from ``deployment.autoscaler`` (counts in replicas, times in s)."""

    min_replicas: int
    max_replicas: int
    scale_down_delay_s: float
    cold_start_s: float
    """Weights per GPU / ``load_bandwidth_bytes_per_s`` + ``engine_start_s``, as in the simulator."""
    warm_pool: int
    warm_start_s: float

    def describe(self) -> str:
        return (
            f"min {self.min_replicas}, max {self.max_replicas}, "
            f"scale-down delay {self.scale_down_delay_s:g} s, cold start {self.cold_start_s:.1f} s, "
            f"warm pool {self.warm_pool}"
        )


def autoscale_policy(scenario: Any) -> AutoscalePolicy | None:
    """The candidate scenario's autoscaler as a policy (None without one)."""
    cfg = scenario.deployment.autoscaler
    if cfg is None:
        return None
    from simulator.run.resolve import resolve

    weights = resolve(scenario).kv_plan.weights_bytes  # per GPU (TP-sharded), as the simulator's autoscaler
    return AutoscalePolicy(
        cfg.min_replicas,
        cfg.max_replicas,
        cfg.scale_down_delay_s,
        weights / cfg.load_bandwidth_bytes_per_s + cfg.engine_start_s,
        cfg.warm_pool,
        cfg.warm_start_s,
    )


# -- the day -------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class FleetDay:
    provisioning: str
    """``peak`` (no shape: peak fleet all day), ``static`` (a shape, no autoscaler: peak fleet all day),
    ``diurnal`` (a shape and an autoscaler: hour by hour)."""
    peak_replicas: int
    needed: tuple[int, ...]
    """Replicas the load needs in each hour (after the autoscaler's clamp; a fixed fleet runs its peak
    count whatever these say)."""
    hourly: tuple[float, ...]
    """Replicas paid in each clock hour (mean over the hour: active, starting, kept by the scale-down
    delay, and the warm pool)."""
    traffic_hours: float
    """Sum of the shape: the day's volume in hours at the peak rate (24 without a shape)."""

    @property
    def replica_hours(self) -> float:
        return float(sum(self.hourly))

    @property
    def max_replicas(self) -> int:
        """Most replicas paid at once (peak need plus warm pool)."""
        return math.ceil(max(self.hourly) - 1e-9)


def fleet_day(
    peak_replicas: int, shape: tuple[float, ...] | None, policy: AutoscalePolicy | None
) -> FleetDay:
    """Replicas paid through a representative day (see the module docstring for the rules)."""
    n = int(peak_replicas)
    flat = shape is None
    s: tuple[float, ...] = NAMED_SHAPES["flat"] if shape is None else shape
    traffic = float(sum(s))
    load = tuple(math.ceil(n * x - 1e-9) for x in s)
    if policy is None:  # a fixed fleet: the peak count runs all day, whatever the load needs
        return FleetDay("peak" if flat else "static", n, load, (float(n),) * 24, traffic)
    need = tuple(min(policy.max_replicas, max(policy.min_replicas, x)) for x in load)
    delay_h = policy.scale_down_delay_s / 3600.0
    cold_h, warm_h = policy.cold_start_s / 3600.0, policy.warm_start_s / 3600.0
    hourly = [float(policy.warm_pool)] * 24
    for k in range(1, max(need) + 1):
        for h, c in enumerate(_layer_cover(need, k, policy.warm_pool, cold_h, warm_h, delay_h)):
            hourly[h] += c
    return FleetDay("peak" if flat else "diurnal", n, need, tuple(hourly), traffic)


def _layer_cover(
    need: tuple[int, ...], k: int, warm_pool: int, cold_h: float, warm_h: float, delay_h: float
) -> list[float]:
    """Share of each clock hour in which replica ``k`` is paid."""
    on = [x >= k for x in need]
    if all(on):
        return [1.0] * 24
    segments: list[tuple[float, float]] = []
    for a in range(24):
        if on[a] and not on[a - 1]:  # a ramp up to at least k at hour a
            b = a
            while on[b % 24]:
                b += 1
            lead = warm_h if k - need[a - 1] <= warm_pool else cold_h
            start, end = a - lead, b + delay_h
            if end - start >= 24:
                return [1.0] * 24
            s0 = start % 24
            e0 = s0 + (end - start)
            segments += [(s0, e0)] if e0 <= 24 else [(s0, 24.0), (0.0, e0 - 24)]
    merged: list[list[float]] = []
    for s0, e0 in sorted(segments):
        if merged and s0 <= merged[-1][1]:
            merged[-1][1] = max(merged[-1][1], e0)
        else:
            merged.append([s0, e0])
    cover = [0.0] * 24
    for s0, e0 in merged:
        for h in range(math.floor(s0), min(24, math.ceil(e0))):
            cover[h] += max(0.0, min(e0, h + 1) - max(s0, h))
    return cover
