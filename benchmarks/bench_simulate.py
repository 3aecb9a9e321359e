"""Simulator speed: simulated requests per wall-clock second, and memory per request.

Scenario: llama-3-8b on h100-sxm-datasheet (``--hardware``; the figures in docs/speed.md; the
measured default h100-sxm takes about 2x as long), continuous batching, Poisson arrivals,
prompt/output lengths drawn jointly from the ShareGPT statistics (examples/sharegpt-h100.yaml).
Capacity is measured first by simulation (every request arrives at t=0; capacity = completed
requests / makespan), then each load (50%, 90% of capacity) x size (10k, 100k requests) is run
``--repeats`` times; the table gives the median wall time and requests/s, and the peak traced
memory (tracemalloc, one extra run) in bytes per request.

    python benchmarks/bench_simulate.py [--repeats 3] [--sizes 10000,100000] [--out benchmarks/results/latest.json]
"""
from __future__ import annotations

import argparse
import json
import platform
import statistics
import sys
import time
import tracemalloc
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from simulator import load_scenario, simulate  # noqa: E402


def measure_capacity(base) -> float:
    sat = base.with_overrides({"num_requests": 4000, "warmup_s": 0, "cooldown_s": 0,
                               "workload.arrival.rate_per_s": 1e6})
    r = simulate(sat)
    return r.summary["requests"]["completed"] / r.sim_time_s


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--sizes", default="10000,100000")
    ap.add_argument("--loads", default="0.5,0.9")
    ap.add_argument("--out", default=str(ROOT / "benchmarks/results/latest.json"))
    ap.add_argument("--hardware", default="h100-sxm-datasheet", help="hardware profile of the scenario")
    args = ap.parse_args()
    base = load_scenario(ROOT / "examples/sharegpt-h100.yaml", {"hardware": args.hardware})
    simulate(base.with_overrides({"num_requests": 200}))   # warm imports and caches
    capacity = measure_capacity(base)
    rows = []
    print(f"capacity (saturated simulation): {capacity:.3f} req/s")
    header = (f"{'load':>5} {'requests':>9} {'wall_s (median)':>16} {'sim req/s':>10} {'steps':>9} {'peak MiB':>9} "
              f"{'B/request':>10}")
    print(header)
    print("-" * len(header))
    for size in (int(s) for s in args.sizes.split(",")):
        for load in (float(x) for x in args.loads.split(",")):
            sc = base.with_overrides({"num_requests": size, "workload.arrival.rate_per_s": load * capacity})
            walls, result = [], None
            for _ in range(args.repeats):
                t0 = time.perf_counter()
                result = simulate(sc)
                walls.append(time.perf_counter() - t0)
            tracemalloc.start()
            simulate(sc)
            _, peak = tracemalloc.get_traced_memory()
            tracemalloc.stop()
            wall = statistics.median(walls)
            row = {"load": load, "num_requests": size, "rate_per_s": load * capacity, "wall_s": walls,
                   "wall_s_median": wall, "requests_per_wall_s": size / wall, "num_steps": len(result.steps),
                   "peak_traced_bytes": peak, "bytes_per_request": peak / size,
                   "ttft_p99_s": result.summary["ttft_s"]["p99"],
                   "mean_num_seqs": result.summary["batch"]["mean_num_seqs"]}
            rows.append(row)
            print(f"{load:>5.0%} {size:>9,} {wall:>16.2f} {size / wall:>10,.0f} {len(result.steps):>9,} "
                  f"{peak / 2**20:>9.1f} {peak / size:>10,.0f}")
    payload = {"benchmark": "bench_simulate", "scenario": "examples/sharegpt-h100.yaml", "capacity_req_per_s": capacity,
               "repeats": args.repeats, "python": platform.python_version(), "machine": platform.machine(),
               "date": time.strftime("%Y-%m-%d"), "rows": rows}
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(payload, indent=2) + "\n")
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
