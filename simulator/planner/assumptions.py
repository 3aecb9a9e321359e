"""What a plan's numbers rest on (``worksheet-assumptions.yaml``, read back by ``llmplan plan
--compare``): the SLO, headroom and failover rule, each cell's design rate, each candidate's prices and
autoscaler floor and a digest of its serving configuration, the periods and the pricing."""
from __future__ import annotations

from typing import Any

import pandas as pd

from simulator.planner.config import LoadedPlan
from simulator.run.resolve import resolve
from simulator.scenario.config import Scenario

FAILOVER_RULES = {
    "none": "no failover capacity: each region is sized for its own peak only",
    "n_plus_one": "N+1: each region also carries its share (by peak) of any one other region's peak, the "
                  "largest such share over the regions that could fail; one region down at a time",
}


ADDED_AT_DEFAULT: dict[tuple[str, str], object] = {("deployment", "data_parallel_size"): 1}
"""Scenario fields added after plans were first written, left out of :func:`serving_config_id` at
their default, so a candidate that does not use them keeps the id an earlier plan gave it."""


def serving_config_id(sc: Scenario) -> str:
    """A short digest of a candidate's serving scenario (traffic left out): equal when nothing a cell serves
    with changed, so a plan-to-plan comparison can tell a changed candidate from a renamed one. The folder
    the scenario was read from (``base_dir``) is left out too: the same plan in another checkout, or on
    another machine, serves with the same candidates."""
    import hashlib
    import json

    data = sc.model_dump(mode="json", exclude_none=True, exclude={"workload", "name", "seed", "num_requests",
                                                                "base_dir"})
    for (section, key), default in ADDED_AT_DEFAULT.items():
        if data.get(section, {}).get(key) == default:
            del data[section][key]
    return hashlib.sha256(json.dumps(data, sort_keys=True, default=str).encode()).hexdigest()[:12]


def _shape_name(spec: Any) -> Any:
    """A region's ``diurnal`` in words: a named shape, ``custom`` (24 values), None, or per quarter."""
    if isinstance(spec, dict):
        return {str(q): _shape_name(v) for q, v in spec.items()}
    return spec if isinstance(spec, (str, type(None))) else "custom (24 hourly multipliers)"


def plan_assumptions(loaded: LoadedPlan, ws: pd.DataFrame) -> dict[str, Any]:
    """What the worksheet's numbers rest on, as plain data (written as ``worksheet-assumptions.yaml`` and
    read back by ``llmplan plan --compare``): the SLO, headroom, failover rule, design rate of each cell,
    each candidate's prices (and where they come from) and autoscaler floor, the periods, which cells are
    costed flat at the peak, and the pricing of reserved and on-demand GPU-hours and the other cost lines."""
    cfg = loaded.config
    design: dict[str, dict[str, float]] = {}
    flat: dict[str, dict[str, str]] = {}
    for r in ws.to_dict("records"):
        q, region = str(r["quarter"]), str(r["region"])
        design.setdefault(q, {})[region] = round(float(r["design_rps"]), 4)
        if r["provisioning"] == "peak":
            flat.setdefault(q, {})[region] = "no diurnal shape: the peak fleet costed all day"
        elif r["provisioning"] == "static":
            flat.setdefault(q, {})[region] = (f"candidate {r['candidate']} has no autoscaler: its peak fleet "
                                              "runs all day")
    candidates: dict[str, Any] = {}
    for c in cfg.candidates:
        sc = loaded.candidate_scenarios[c.name]
        system = resolve(sc)
        auto = sc.deployment.autoscaler
        tp = sc.deployment.tensor_parallel_size
        pools = {p.name: sy.profile for p, (_, sy) in zip(sc.deployment.pools, system.pools, strict=True)} \
            if sc.deployment.pools else None
        candidates[c.name] = {
            "hardware": system.profile.name if pools is None else
            ";".join(f"{name}={prof.name}" for name, prof in pools.items()),
            "hardware_basis": system.profile.basis() if pools is None else
            {name: prof.basis() for name, prof in pools.items()},
            "price_per_gpu_hour": c.price_per_gpu_hour if c.price_per_gpu_hour is not None
            else system.profile.price_per_gpu_hour,
            "price_source": ("quoted in the plan" if c.price_per_gpu_hour is not None else
                             f"assumed: hardware profile {system.profile.name}'s list price (USD)"),
            "price_reference": c.price_reference,
            "reserved_price_per_gpu_hour": c.reserved_price_per_gpu_hour,
            "reserved_price_source": "quoted in the plan" if c.reserved_price_per_gpu_hour is not None else
            f"on-demand price less pricing.reserved_discount ({cfg.pricing.reserved_discount:g})",
            "autoscaler": "none: a fixed fleet, its peak count all day" if auto is None else
            {"min_replicas": auto.min_replicas, "max_replicas": auto.max_replicas,
             "floor_gpus": auto.min_replicas * tp, "warm_pool": auto.warm_pool,
             "scale_down_delay_s": auto.scale_down_delay_s},
            "serving_config_id": serving_config_id(sc),
        }
    pricing = cfg.pricing.model_dump(mode="json", exclude_none=True)
    return {
        "plan": cfg.name,
        "currency": cfg.currency,
        "slo": cfg.slo.model_dump(mode="json", exclude_none=True),
        "slo_note": "client-perceived (TTFT and E2E include the region's RTT), judged at the design rate on "
                    "every client mix; successful requests = requests x the attainment measured there",
        "headroom": cfg.headroom,
        "failover": cfg.failover,
        "failover_rule": FAILOVER_RULES[cfg.failover],
        "design_rate": "design_rps = (peak_rps + failover_rps) x (1 + headroom)",
        "design_rps": design,
        "periods": {q: {"start": p.start.isoformat() if p.start else None,
                        "end": p.end.isoformat() if p.end else None, "hours": p.hours, "source": p.source}
                    for q, p in loaded.periods.items()},
        "fiscal_year_start_month": cfg.fiscal_year_start_month,
        "costed_flat_at_peak": flat,
        "diurnal": {r.name: _shape_name(r.diurnal) for r in cfg.regions},
        "price_multipliers": {r.name: r.price_multiplier for r in cfg.regions},
        "candidates": candidates,
        "pricing": pricing,
        "reserve_rule": ("reserved GPUs: the fewest the fleet runs in any hour of the day (the autoscaler's "
                         "floor or the trough), paid all period; the hours above them on demand"
                         if cfg.pricing.reserve == "floor" else
                         "reserved GPUs: the peak fleet, paid all period whether used or not; hours above "
                         "it (a warm pool, a floor above the peak) on demand"),
        "simulation": cfg.simulation.model_dump(mode="json"),
    }
