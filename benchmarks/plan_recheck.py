"""Re-check a plan's answer: re-simulate every chosen cell with many more requests and a fresh seed.

    .venv/bin/python benchmarks/plan_recheck.py examples/plan-fy27.yaml [--num-requests 20000] [--out F.json]
        [--set slo.tpot_p99_ms=45 ...] [--one-fewer]

For each ``ok`` cell of the worksheet, the chosen candidate at the chosen replica count (each pool's, with
``deployment.pools``) is run again
with ``--num-requests`` requests (warm-up and cool-down scaled like the plan's) and a seed the plan
never used (``seed + 1000``), against every client mix, and judged by the same judge as the search.
Prints one row per cell (pass, stable, the worst check's value / limit) and writes the table as JSON.
A row *holds* when the long run's verdict is a pass, or marginal (its interval straddles the allowed
share) with the point estimate within every limit: a long run that cannot tell is no evidence against
the plan, and the row says ``marginal``. A plan the planner can defend holds in every row.

``--set`` changes the plan file's fields before planning (dotted keys, YAML values, as ``simulate --set``).
``--one-fewer`` also re-simulates one replica fewer on the same long run and seed (cells of one pool):
the plan is minimal where that count is not a clear pass (a fail, or marginal: the planner takes the
next count when a verdict is within its noise).
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
from simulator.scenario.files import read_yaml
from simulator.scenario.overrides import parse_overrides, set_dotted


def load(plan_path: str, overrides: list[str]):
    """The plan file with ``--set`` overrides applied (paths in it stay relative to the file)."""
    path = Path(plan_path)
    data = read_yaml(path, plan_path, what="a plan file")
    for key, value in parse_overrides(overrides).items():
        set_dotted(data, key, value)
    return load_plan(data, base_dir=path.resolve().parent)


def holds(check: dict) -> bool:
    """A pass, or a marginal verdict whose point estimates are all within their limits."""
    return check["outcome"] == "pass" or (check["outcome"] == "marginal" and check["score"] <= 1.0)


def recheck(plan_path: str, num_requests: int, workers: int | None, overrides: list[str] = (),
            one_fewer: bool = False) -> list[dict]:
    loaded = load(plan_path, list(overrides))
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
                     "outcome": check["outcome"], "holds": holds(check),
                     "stable": check["stable"], "worst_ratio": check["score"], "binding": check["binding"],
                     "ttft_p99_ms": 1000 * check["ttft_p99_s"], "tpot_p99_ms": 1000 * check["tpot_p99_s"],
                     "plan_ttft_p99_ms": float(cell["ttft_p99_ms"]), "plan_tpot_p99_ms": float(cell["tpot_p99_ms"]),
                     "failures": check["failures"], "num_requests": num_requests, "wall_s": time.perf_counter() - t1})
        if one_fewer and isinstance(counts, int) and counts > 1:
            fewer = evaluate(long, counts - 1)
            rows[-1].update(fewer_passed=bool(fewer["passed"]), fewer_holds=holds(fewer),
                            fewer_outcome=fewer["outcome"], fewer_worst_ratio=fewer["score"],
                            fewer_binding=fewer["binding"], fewer_stable=fewer["stable"])
    for r in rows:
        r["plan_wall_s"] = plan_wall
    return rows


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("plan")
    ap.add_argument("--num-requests", type=int, default=20000)
    ap.add_argument("--workers", type=int, default=None)
    ap.add_argument("--out", default="benchmarks/results/plan_recheck.json")
    ap.add_argument("--set", action="append", default=[], metavar="KEY=VALUE", help="change a plan field")
    ap.add_argument("--one-fewer", action="store_true", help="also judge one replica fewer per cell")
    args = ap.parse_args()
    rows = recheck(args.plan, args.num_requests, args.workers, args.set, args.one_fewer)
    print(f"{'quarter':8} {'region':9} {'candidate':10} {'n':>3} {'outcome':>8} {'holds':>5} {'worst':>6} "
          f"{'TTFT p99 plan/long ms':>22} {'TPOT p99 plan/long ms':>22} {'n-1 outcome/worst':>18}")
    for r in rows:
        if r["status"] != "ok":
            print(f"{r['quarter']:8} {r['region']:9} {r['status']}")
            continue
        print(f"{r['quarter']:8} {r['region']:9} {r['candidate']:10} {r['replicas']:>3} {r['outcome']:>8} "
              f"{r['holds']!s:>5} {r['worst_ratio']:6.2f} {r['plan_ttft_p99_ms']:10.0f} / {r['ttft_p99_ms']:<9.0f} "
              f"{r['plan_tpot_p99_ms']:10.1f} / {r['tpot_p99_ms']:<9.1f}"
              + (f" {r['fewer_outcome']:>10} / {r['fewer_worst_ratio']:<5.2f}" if "fewer_holds" in r else ""))
    ok = [r for r in rows if r["status"] == "ok"]
    marginal = sum(r["holds"] and r["outcome"] == "marginal" for r in ok)
    print(f"{sum(r['holds'] for r in ok)} of {len(ok)} chosen cells hold at {args.num_requests:,} requests "
          f"({marginal} of them marginal); "
          f"plan took {rows[0]['plan_wall_s'] if rows else 0:.0f} s")
    fewer = [r for r in ok if "fewer_holds" in r]
    if fewer:
        print(f"one replica fewer is not a clear pass in {sum(r['fewer_outcome'] != 'pass' for r in fewer)} of "
              f"{len(fewer)} cells ({sum(r['fewer_outcome'] == 'fail' for r in fewer)} fail, "
              f"{sum(r['fewer_outcome'] == 'marginal' for r in fewer)} marginal)")
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(rows, indent=1, default=str))
    print(f"wrote {out}")


if __name__ == "__main__":
    from simulator.errors import ScenarioError

    try:
        main()
    except ScenarioError as exc:       # a bad plan or --set: one line, as the CLI prints it
        sys.exit(f"error: {exc}")
