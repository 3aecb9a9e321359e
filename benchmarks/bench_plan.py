"""Planner speed: a whole worksheet of 4 quarters x 5 regions x 3 candidates for a chat workload.

Base scenario examples/chat-h100.yaml (llama-3-8b, lognormal prompts mean 1000, geometric outputs
mean 200); candidates h100-sxm, h200 and l40s (TP 1); SLO TTFT p99 800 ms, TPOT p99 60 ms, 98%
attainment; 20% headroom; N+1 failover across the 5 regions; 3,000 simulated requests per
verification. Runs the plan once per worker count (``--workers 1,2``: in-process, then a process
pool), checks that the worksheets are identical, and prints wall time, searches and simulations.

    python benchmarks/bench_plan.py [--workers 1,2] [--out benchmarks/results/plan.json]
"""
from __future__ import annotations

import argparse
import json
import os
import platform
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from simulator.planner import load_plan, plan  # noqa: E402

REGIONS = {  # name: (price multiplier, Q1 peak rps)
    "us-east": (1.00, 60), "us-west": (1.05, 35), "eu-west": (1.15, 25), "eu-central": (1.20, 20),
    "ap-south": (0.95, 15)}
RTT_MS = {"us": 70, "eu": 25, "ap": 130}


def plan_data() -> dict:
    regions = []
    for name, (mult, _) in REGIONS.items():
        rtt = {other: (20.0 if other == name else
                       (35.0 if other[:2] == name[:2] else 60.0 + RTT_MS[other[:2]] + RTT_MS[name[:2]] / 2))
               for other in REGIONS}
        regions.append({"name": name, "price_multiplier": mult, "rtt_ms": rtt})
    forecast = [{"quarter": f"FY27Q{q}", "region": name, "peak_rps": round(peak * (1 + 0.25 * (q - 1)), 1)}
                for q in range(1, 5) for name, (_, peak) in REGIONS.items()]
    return {
        "name": "bench", "scenario": str(ROOT / "examples/chat-h100.yaml"),
        "candidates": [{"name": "h100", "set": {"hardware": "h100-sxm"}},
                       {"name": "h200", "set": {"hardware": "h200"}},
                       {"name": "l40s", "set": {"hardware": "l40s", "scheduler.max_num_seqs": 128}}],
        "slo": {"ttft_p99_ms": 800, "tpot_p99_ms": 60, "attainment": 0.98},
        "headroom": 0.2, "failover": "n_plus_one", "regions": regions, "forecast": forecast,
        "simulation": {"num_requests": 3000, "seed": 0, "max_replicas": 64},
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--workers", default="1,2")
    ap.add_argument("--out", default=str(ROOT / "benchmarks/results/plan.json"))
    args = ap.parse_args()
    loaded = load_plan(plan_data(), base_dir=ROOT)
    rows, frames = [], []
    print(f"{'workers':>7} {'cells':>6} {'searches':>9} {'simulations':>12} {'wall_s':>8} {'GPUs (all quarters)':>20}")
    for w in (int(x) for x in args.workers.split(",")):
        t0 = time.perf_counter()
        res = plan(loaded, workers=w)
        wall = time.perf_counter() - t0
        sims = int(res.candidates["simulations"].sum())
        gpus = int(res.worksheet["gpus"].sum())
        print(f"{w:>7} {len(res.worksheet):>6} {len(res.candidates):>9} {sims:>12} {wall:>8.1f} {gpus:>20}")
        rows.append({"workers": w, "cells": len(res.worksheet), "searches": len(res.candidates),
                     "simulations": sims, "wall_s": wall, "gpus_total": gpus})
        frames.append(res.candidates)
    identical = all(f.equals(frames[0]) for f in frames[1:])
    print(f"worksheets identical across worker counts: {identical}")
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps({"rows": rows, "identical": identical, "cpu_count": os.cpu_count(),
                                          "python": platform.python_version(), "machine": platform.machine(),
                                          "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())}, indent=2) + "\n")


if __name__ == "__main__":
    main()
