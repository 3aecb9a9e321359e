"""Re-check a plan's answer: re-simulate every chosen cell with many more requests and a fresh seed.

    .venv/bin/python benchmarks/plan_recheck.py examples/plan-fy27.yaml [--num-requests 20000] [--out F.json]

For each ``ok`` cell of the worksheet, the chosen candidate at the chosen replica count (each pool's, with
``deployment.pools``) is run again
with ``--num-requests`` requests (warm-up and cool-down scaled like the plan's) and a seed the plan
never used (``seed + 1000``), against every client mix, and judged by the same judge as the search.
Prints one row per cell (pass, stable, the worst check's value / limit) and writes the table as JSON.
A plan the planner can defend passes every row.
"""
from __future__ import annotations

import argparse
import dataclasses
import json
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from simulator.planner import build_tasks, load_plan, plan
from simulator.planner.search import evaluate


def recheck(plan_path: str, num_requests: int, workers: int | None) -> list[dict]:
    loaded = load_plan(plan_path)
    t0 = time.perf_counter()
    result = plan(loaded, workers=workers)
    plan_wall = time.perf_counter() - t0
    tasks = {(t.quarter, t.region, t.candidate): t for t in build_tasks(loaded)}
    sim = loaded.config.simulation
    rows = []
    for _, cell in result.worksheet.iterrows():
        if cell["status"] != "ok":
            rows.append({"quarter": cell["quarter"], "region": cell["region"], "status": cell["status"]})
            continue
        task = tasks[(cell["quarter"], cell["region"], cell["candidate"])]
        span = num_requests / task.design_rps
        sc = task.scenario.with_overrides({"num_requests": num_requests, "seed": task.scenario.seed + 1000,
                                           "warmup_s": sim.warmup_fraction * span,
                                           "cooldown_s": sim.cooldown_fraction * span})
        long = dataclasses.replace(task, scenario=sc, replications=1)
        t1 = time.perf_counter()
        pools = str(cell["pool_replicas"]) if isinstance(cell["pool_replicas"], str) else ""
        counts = {p: int(n) for p, n in (x.split("=") for x in pools.split(";"))} if pools else int(cell["replicas"])
        check = evaluate(long, counts)
        rows.append({"quarter": cell["quarter"], "region": cell["region"], "candidate": cell["candidate"],
                     "replicas": int(cell["replicas"]), "status": "ok", "passed": bool(check["passed"]),
                     "stable": check["stable"], "worst_ratio": check["score"], "binding": check["binding"],
                     "ttft_p99_ms": 1000 * check["ttft_p99_s"], "tpot_p99_ms": 1000 * check["tpot_p99_s"],
                     "plan_ttft_p99_ms": float(cell["ttft_p99_ms"]), "plan_tpot_p99_ms": float(cell["tpot_p99_ms"]),
                     "failures": check["failures"], "num_requests": num_requests, "wall_s": time.perf_counter() - t1})
    for r in rows:
        r["plan_wall_s"] = plan_wall
    return rows


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("plan")
    ap.add_argument("--num-requests", type=int, default=20000)
    ap.add_argument("--workers", type=int, default=None)
    ap.add_argument("--out", default="benchmarks/results/plan_recheck.json")
    args = ap.parse_args()
    rows = recheck(args.plan, args.num_requests, args.workers)
    print(f"{'quarter':8} {'region':9} {'candidate':10} {'n':>3} {'pass':>5} {'stable':>6} {'worst':>6} "
          f"{'TTFT p99 plan/long ms':>22} {'TPOT p99 plan/long ms':>22}")
    for r in rows:
        if r["status"] != "ok":
            print(f"{r['quarter']:8} {r['region']:9} {r['status']}")
            continue
        print(f"{r['quarter']:8} {r['region']:9} {r['candidate']:10} {r['replicas']:>3} {r['passed']!s:>5} "
              f"{r['stable']!s:>6} {r['worst_ratio']:6.2f} {r['plan_ttft_p99_ms']:10.0f} / {r['ttft_p99_ms']:<9.0f} "
              f"{r['plan_tpot_p99_ms']:10.1f} / {r['tpot_p99_ms']:<9.1f}")
    ok = [r for r in rows if r["status"] == "ok"]
    print(f"{sum(r['passed'] for r in ok)} of {len(ok)} chosen cells hold at {args.num_requests:,} requests; "
          f"plan took {rows[0]['plan_wall_s'] if rows else 0:.0f} s")
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(rows, indent=1, default=str))
    print(f"wrote {out}")


if __name__ == "__main__":
    main()
