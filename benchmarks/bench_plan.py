"""Planner speed: a whole worksheet of 4 quarters x 5 regions x 3 candidates for a chat workload.

Base scenario examples/chat-h100.yaml (llama-3-8b, lognormal prompts mean 1000, geometric outputs
mean 200); candidates h100-sxm, h200 and l40s (TP 1); SLO TTFT p99 800 ms, TPOT p99 60 ms, 98%
attainment; 20% headroom; N+1 failover across the 5 regions; 3,000 simulated requests per
verification. ``--plan FILE`` times a plan file instead (e.g. examples/plan-fy27.yaml). Runs the plan
``--repeat`` times per worker count (``--workers 1,2``: in-process, then a process pool), checks that the
worksheets are identical, and prints the median wall time, searches and simulations, with the load
average before the runs (JSON: every run's wall time and the load averages).

    python benchmarks/bench_plan.py [--plan examples/plan-fy27.yaml] [--workers 1,2] [--repeat 3]
                                    [--out benchmarks/results/plan.json]
"""
from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
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
    ap.add_argument("--plan", default=None, help="a plan file to time instead of the built-in worksheet")
    ap.add_argument("--repeat", type=int, default=1, help="runs per worker count; the median is printed")
    ap.add_argument("--out", default=str(ROOT / "benchmarks/results/plan.json"))
    args = ap.parse_args()
    loaded = load_plan(args.plan) if args.plan else load_plan(plan_data(), base_dir=ROOT)
    load_before = os.getloadavg()
    rows, frames = [], []
    print(f"load average before: {load_before[0]:.2f} {load_before[1]:.2f} {load_before[2]:.2f}")
    print(f"{'workers':>7} {'cells':>6} {'searches':>9} {'simulations':>12} {'median_s':>9} {'runs_s':>18} "
          f"{'GPUs (all quarters)':>20}")
    for w in (int(x) for x in args.workers.split(",")):
        walls = []
        for _ in range(args.repeat):
            t0 = time.perf_counter()
            res = plan(loaded, workers=w)
            walls.append(time.perf_counter() - t0)
            frames.append(res.candidates)
        sims = int(res.candidates["simulations"].sum())
        gpus = int(res.worksheet["gpus"].sum())
        per_quarter = res.worksheet.groupby("quarter")["gpus"].sum().astype(int).to_dict()
        wall = statistics.median(walls)
        print(f"{w:>7} {len(res.worksheet):>6} {len(res.candidates):>9} {sims:>12} {wall:>9.1f} "
              f"{' '.join(f'{x:.1f}' for x in walls):>18} {gpus:>20}")
        rows.append({"workers": w, "cells": len(res.worksheet), "searches": len(res.candidates),
                     "simulations": sims, "wall_s": wall, "runs_wall_s": walls, "gpus_total": gpus,
                     "gpus_per_quarter": per_quarter})
    identical = all(f.equals(frames[0]) for f in frames[1:])
    print(f"worksheets identical across runs and worker counts: {identical}")
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps({"plan": args.plan or "built-in", "rows": rows, "identical": identical,
                                          "load_average_before": load_before, "load_average_after": os.getloadavg(),
                                          "cpu_count": os.cpu_count(),
                                          "python": platform.python_version(), "machine": platform.machine(),
                                          "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())}, indent=2) + "\n")


if __name__ == "__main__":
    from simulator.errors import ScenarioError

    try:
        main()
    except ScenarioError as exc:       # a bad plan or --set: one line, as the CLI prints it
        sys.exit(f"error: {exc}")
