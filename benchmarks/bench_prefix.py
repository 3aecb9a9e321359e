"""Prefix caching: what it costs the simulator, and the hit rates of the Mooncake traces.

1. Simulation cost: examples/sharegpt-h100.yaml (llama-3-8b, h100-sxm, ShareGPT lengths) at 50% and
   90% of capacity, ``--requests`` requests, median wall time of ``--repeats`` runs for: prefix
   caching off; on with nothing shared (pure bookkeeping); on with 4 system prompts of 512 tokens
   in half the requests (short prompts clipped). Peak traced memory of one more run.
2. Mooncake ``hash_ids`` replay (block_size 16): hit rate with an unbounded cache and with a
   cache of 28,116 blocks (Llama 3 8B on one H100 at 0.9) and ten times that, a long-context inline
   model and the constant cost model (hit rates only: these runs say nothing about latency).

    python benchmarks/bench_prefix.py [--repeats 3] [--requests 10000] [--out benchmarks/results/prefix.json]
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
sys.path.insert(0, str(ROOT / "benchmarks"))

from bench_simulate import measure_capacity  # noqa: E402

from simulator import load_scenario, scenario_from_dict, simulate  # noqa: E402

VARIANTS = {
    "off": {},
    "on, nothing shared": {"scheduler.enable_prefix_caching": True},
    "on, 4 x 512-token prefixes, share 0.5": {
        "scheduler.enable_prefix_caching": True,
        "workload.prefix": {"num_prefixes": 4, "prefix_tokens": 512, "share": 0.5, "short_prompt": "clip"}},
}
TRACES = {
    "excerpt (tests/data, 300 requests)": ROOT / "tests/data/mooncake_conversation_excerpt.jsonl",
    "conversation (12,031 requests)": Path("/work/shared/data/llm_traces/mooncake_conversation_trace.jsonl"),
    "synthetic (3,993 requests)": Path("/work/shared/data/llm_traces/mooncake_synthetic_trace.jsonl"),
}


def mooncake_scenario(path: Path, num_gpu_blocks: int) -> dict:
    return {
        "name": "mooncake-replay",
        "model": {"name": "long-context", "num_layers": 2, "hidden_size": 256, "num_attention_heads": 4,
                  "num_key_value_heads": 4, "intermediate_size": 512, "vocab_size": 1000, "max_model_len": 131072},
        "hardware": {"cost_model": "constant", "step_time_s": 0.01, "prefill_time_per_token_s": 1e-6},
        "scheduler": {"max_num_seqs": 256, "max_num_batched_tokens": 131072, "block_size": 16,
                      "enable_prefix_caching": True, "num_gpu_blocks_override": num_gpu_blocks},
        "workload": {"arrival": {"process": "trace", "path": str(path), "format": "mooncake"},
                     "over_length": "reject"},   # 10 synthetic-trace prompts exceed 131,072 tokens
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--requests", type=int, default=10000)
    ap.add_argument("--loads", default="0.5,0.9")
    ap.add_argument("--out", default=str(ROOT / "benchmarks/results/prefix.json"))
    args = ap.parse_args()
    base = load_scenario(ROOT / "examples/sharegpt-h100.yaml")
    simulate(base.with_overrides({"num_requests": 200, "scheduler.enable_prefix_caching": True}))   # warm up
    capacity = measure_capacity(base)
    print(f"capacity (saturated simulation, caching off): {capacity:.3f} req/s")
    header = (f"{'load':>5} {'variant':<40} {'wall_s (median)':>16} {'sim req/s':>10} {'peak MiB':>9} "
              f"{'hit rate':>9} {'ttft mean ms':>13}")
    print(header)
    print("-" * len(header))
    rows = []
    for load in (float(x) for x in args.loads.split(",")):
        for name, over in VARIANTS.items():
            sc = base.with_overrides({"num_requests": args.requests, "workload.arrival.rate_per_s": load * capacity,
                                      **over})
            walls = []
            for _ in range(args.repeats):
                t0 = time.perf_counter()
                result = simulate(sc)
                walls.append(time.perf_counter() - t0)
            tracemalloc.start()
            simulate(sc)
            _, peak = tracemalloc.get_traced_memory()
            tracemalloc.stop()
            wall = statistics.median(walls)
            pc = result.summary["prefix_cache"]
            rate = pc["hit_rate"] if pc else None
            ttft = result.summary["ttft_s"]["mean"]
            rows.append({"load": load, "variant": name, "num_requests": args.requests, "wall_s": walls,
                         "wall_s_median": wall, "requests_per_wall_s": args.requests / wall, "peak_traced_bytes": peak,
                         "hit_rate": rate, "ttft_mean_s": ttft, "prefix_cache": pc})
            print(f"{load:>5.0%} {name:<40} {wall:>16.2f} {args.requests / wall:>10,.0f} {peak / 2**20:>9.1f} "
                  f"{'-' if rate is None else f'{rate:.3f}':>9} {1000 * ttft:>13.1f}")
    print()
    print(f"{'Mooncake trace':<36} {'cache':>22} {'hit rate':>9} {'evictions':>10} {'wall s':>7}")
    traces = []
    for name, path in TRACES.items():
        if not path.is_file():
            print(f"{name:<36} (not found: {path})")
            continue
        for label, blocks in (("unbounded", 50_000_000), ("281,160 blocks (4.5M tok)", 281_160),
                              ("28,116 blocks (450k tok)", 28_116)):
            t0 = time.perf_counter()
            r = simulate(scenario_from_dict(mooncake_scenario(path, blocks)))
            wall = time.perf_counter() - t0
            pc = r.summary["prefix_cache"]
            traces.append({"trace": name, "cache": label, "num_gpu_blocks": blocks, "wall_s": wall, **pc})
            print(f"{name:<36} {label:>22} {pc['hit_rate']:>9.3f} {pc['evictions']:>10,} {wall:>7.1f}")
    payload = {"benchmark": "bench_prefix", "scenario": "examples/sharegpt-h100.yaml", "capacity_req_per_s": capacity,
               "repeats": args.repeats, "python": platform.python_version(), "machine": platform.machine(),
               "date": time.strftime("%Y-%m-%d"), "rows": rows, "mooncake": traces}
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(payload, indent=2) + "\n")
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
