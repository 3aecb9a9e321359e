"""Each serving lever's effect on one reference scenario: TTFT/TPOT tails, throughput, GPUs, wall time.

Reference: llama-3-8b on h100-sxm-datasheet (the vendor-peak roofline, pinned so the table in
docs/levers.md stays comparable; ``--hardware h100-sxm`` for the measured default), continuous
batching, Poisson arrivals at
4 req/s (about 60% of this deployment's capacity of 6.6 req/s), prompt/output lengths drawn
jointly from the ShareGPT statistics (examples/sharegpt-h100.yaml). Every variant is the reference
plus a few dotted-path overrides (:data:`VARIANTS`); add a row for a new lever by adding an entry.
Each variant runs with the same seed (common random numbers: the same arrivals and lengths), so
differences come from the lever, not from sampling. Deltas are relative to ``baseline`` (or to the
variant named in ``vs``). Wall time is the median of ``--repeats`` runs, taken round-robin over
the variants; ``CPU ×`` is the median process CPU time relative to the baseline's (the simulation
cost of the lever, including any change in how many engine events its dynamics need; CPU time is
less disturbed than wall time when the machine is shared). Compare figures from one invocation.

    python benchmarks/bench_levers.py [--repeats 3] [--num-requests 4000] [--only a,b] [--markdown]
"""
from __future__ import annotations

import argparse
import json
import platform
import statistics
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from simulator import load_scenario, simulate  # noqa: E402

REFERENCE = "examples/sharegpt-h100.yaml"
REFERENCE_RATE = 4.0
OVERLOAD_RATE = 8.6   # about 1.3x capacity

#: name -> {"set": dotted-path overrides of the reference, "vs": the row its deltas compare to}.
VARIANTS: dict[str, dict[str, Any]] = {
    "baseline": {"set": {}},
    # model-level levers
    "quantization=fp8": {"set": {"deployment.quantization": "fp8"}},
    "quantization=int8": {"set": {"deployment.quantization": "int8"}},
    "quantization=int4": {"set": {"deployment.quantization": "int4"}},
    "kv_cache_dtype=fp8": {"set": {"deployment.kv_cache_dtype": "fp8"}},
    "tensor_parallel_size=2": {"set": {"deployment.tensor_parallel_size": 2}},
    "replicas=2 (same 2 GPUs)": {"set": {"deployment.replicas": 2, "deployment.router": "least_outstanding"}},
    # batching policies (scheduler.policy)
    "policy=chunked_prefill (512-token chunks)": {"set": {"scheduler.policy": "chunked_prefill",
                                                         "scheduler.long_prefill_token_threshold": 512}},
    "policy=dynamic (max_wait_ms=50)": {"set": {"scheduler.policy": "dynamic"}},
    "policy=static (max_wait_ms=50)": {"set": {"scheduler.policy": "static"}},
    "policy=disaggregated 1 prefill + 1 decode": {"set": {"scheduler.policy": "disaggregated",
                                                         "deployment.prefill_replicas": 1,
                                                         "deployment.decode_replicas": 1},
                                                 "vs": "replicas=2 (same 2 GPUs)"},
    # speculative decoding
    "speculative draft llama-3.2-1b k=4 a=0.8": {"set": {"speculative_config": {
        "method": "draft", "draft_model": "llama-3.2-1b", "num_speculative_tokens": 4, "acceptance_rate": 0.8}}},
    "speculative draft llama-3.2-1b k=4 a=0.1": {"set": {"speculative_config": {
        "method": "draft", "draft_model": "llama-3.2-1b", "num_speculative_tokens": 4, "acceptance_rate": 0.1}}},
    "speculative ngram k=3 a=0.6": {"set": {"speculative_config": {
        "method": "ngram", "num_speculative_tokens": 3, "acceptance_rate": 0.6}}},
    # prefix caching: 80% of requests share one of 4 system prompts of 512 tokens
    "shared 512-token system prompts": {"set": {"workload.prefix": {
        "num_prefixes": 4, "prefix_tokens": 512, "share": 0.8, "short_prompt": "clip"}}},
    "shared prompts + enable_prefix_caching": {"set": {"workload.prefix": {
        "num_prefixes": 4, "prefix_tokens": 512, "share": 0.8, "short_prompt": "clip"},
        "scheduler.enable_prefix_caching": True}, "vs": "shared 512-token system prompts"},
    # preemption under KV pressure (a 6,000-block cache: 96k tokens instead of 450k)
    "kv pressure (6000 blocks)": {"set": {"scheduler.num_gpu_blocks_override": 6000}},
    "kv pressure + preemption_mode=swap": {"set": {"scheduler.num_gpu_blocks_override": 6000,
                                                  "scheduler.preemption_mode": "swap"},
                                          "vs": "kv pressure (6000 blocks)"},
    # request-level levers
    "stream=false": {"set": {"client.stream": False}},
    "max_tokens=256": {"set": {"client.max_tokens": 256}},
    "max_prompt_tokens=1024": {"set": {"client.max_prompt_tokens": 1024}},
    "timeout_s=20": {"set": {"client.timeout_s": 20}},
    # the same dynamics as the baseline: what the bookkeeping of these levers alone costs
    "timeout_s=1e6 (never fires)": {"set": {"client.timeout_s": 1e6}},
    "max_queue_len=1e6 (never full)": {"set": {"admission.max_queue_len": 1_000_000}},
    # load shedding needs overload to matter: compared with the overloaded run without it
    "overload 1.3x": {"set": {"workload.arrival.rate_per_s": OVERLOAD_RATE}},
    "overload + max_queue_len=16": {"set": {"workload.arrival.rate_per_s": OVERLOAD_RATE,
                                            "admission.max_queue_len": 16}, "vs": "overload 1.3x"},
    "overload + max_queue_delay_s=2": {"set": {"workload.arrival.rate_per_s": OVERLOAD_RATE,
                                               "admission.max_queue_delay_s": 2.0}, "vs": "overload 1.3x"},
}


def run_variants(base: Any, names: list[str], repeats: int) -> dict[str, dict[str, Any]]:
    """Run every variant ``repeats`` times, round-robin (variant inner loop), so that each
    variant's timings sample the same stretches of a shared machine's load."""
    scenarios = {n: base.with_overrides(VARIANTS[n]["set"]) if VARIANTS[n]["set"] else base for n in names}
    walls: dict[str, list[float]] = {n: [] for n in names}
    cpus: dict[str, list[float]] = {n: [] for n in names}
    results: dict[str, Any] = {}
    for _ in range(repeats):
        for name in names:
            t0, c0 = time.perf_counter(), time.process_time()
            results[name] = simulate(scenarios[name])
            walls[name].append(time.perf_counter() - t0)
            cpus[name].append(time.process_time() - c0)
    rows = {}
    for name in names:
        s = results[name].summary
        rows[name] = {
            "overrides": VARIANTS[name]["set"], "num_gpus": s["num_gpus"],
            "ttft_p50_s": s["ttft_s"]["p50"], "ttft_p99_s": s["ttft_s"]["p99"],
            "tpot_p50_s": s["tpot_s"]["p50"], "tpot_p99_s": s["tpot_s"]["p99"],
            "queue_delay_p99_s": s["queue_delay_s"]["p99"],
            "requests_per_s": s["throughput"]["requests_per_s"],
            "output_tokens_per_s": s["throughput"]["output_tokens_per_s"],
            "requests": s["requests"], "num_gpu_blocks": s["kv_cache"]["num_gpu_blocks"],
            "mean_num_seqs": s["batch"]["mean_num_seqs"], "num_steps": s["batch"]["num_steps"],
            "wall_s": walls[name], "wall_s_median": statistics.median(walls[name]),
            "cpu_s": cpus[name], "cpu_s_median": statistics.median(cpus[name]),
        }
    return rows


def _delta(x: float | None, ref: float | None) -> str:
    if x is None or ref is None or ref == 0:
        return "-"
    return f"{100 * (x / ref - 1):+.0f}%"


def _ms(x: float | None) -> str:
    return "-" if x is None else f"{1000 * x:,.0f}" if x >= 0.1 else f"{1000 * x:.1f}"


COLUMNS = ("variant", "GPUs", "TTFT p50 ms", "TTFT p99 ms", "TPOT p50 ms", "TPOT p99 ms", "req/s", "out tok/s",
           "shed", "timed out", "Δ TTFT p99", "Δ TPOT p99", "Δ req/s", "wall s", "CPU ×")


def table_rows(rows: dict[str, dict[str, Any]]) -> list[list[str]]:
    out = []
    for name, r in rows.items():
        ref = rows.get(VARIANTS.get(name, {}).get("vs", "baseline"), rows.get("baseline", r))
        out.append([
            name, str(r["num_gpus"]), _ms(r["ttft_p50_s"]), _ms(r["ttft_p99_s"]), _ms(r["tpot_p50_s"]),
            _ms(r["tpot_p99_s"]), f"{r['requests_per_s']:.2f}", f"{r['output_tokens_per_s']:,.0f}",
            str(r["requests"]["shed"]), str(r["requests"]["timed_out"]),
            _delta(r["ttft_p99_s"], ref["ttft_p99_s"]), _delta(r["tpot_p99_s"], ref["tpot_p99_s"]),
            _delta(r["requests_per_s"], ref["requests_per_s"]), f"{r['wall_s_median']:.2f}",
            f"{r['cpu_s_median'] / rows['baseline']['cpu_s_median']:.2f}" if "baseline" in rows else "-"])
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--num-requests", type=int, default=4000)
    ap.add_argument("--only", default="", help="comma-separated variant names (baseline is always run)")
    ap.add_argument("--markdown", action="store_true", help="print the table as Markdown (for the README)")
    ap.add_argument("--out", default=str(ROOT / "benchmarks/results/levers.json"))
    ap.add_argument("--hardware", default="h100-sxm-datasheet", help="hardware profile of the reference")
    args = ap.parse_args()
    names = list(VARIANTS)
    if args.only:
        wanted = {n.strip() for n in args.only.split(",")}
        unknown = wanted - set(VARIANTS)
        if unknown:
            sys.exit(f"error: --only {', '.join(sorted(unknown))}: unknown variant; known: {', '.join(VARIANTS)}")
        names = [n for n in names if n in wanted or n == "baseline"
                 or any(VARIANTS[w].get("vs") == n for w in wanted)]
    base = load_scenario(ROOT / REFERENCE, {"num_requests": args.num_requests, "hardware": args.hardware,
                                            "workload.arrival.rate_per_s": REFERENCE_RATE})
    simulate(base.with_overrides({"num_requests": 200}))   # warm imports and caches
    rows = run_variants(base, names, args.repeats)
    table = table_rows(rows)
    if args.markdown:
        print("| " + " | ".join(COLUMNS) + " |")
        print("|" + "---|" * len(COLUMNS))
        for row in table:
            print("| " + " | ".join(row) + " |")
    else:
        widths = [max(len(c), *(len(r[i]) for r in table)) for i, c in enumerate(COLUMNS)]
        print("  ".join(c.rjust(w) if i else c.ljust(w) for i, (c, w) in enumerate(zip(COLUMNS, widths, strict=True))))
        for row in table:
            print("  ".join(v.rjust(w) if i else v.ljust(w) for i, (v, w) in enumerate(zip(row, widths, strict=True))))
    payload = {"benchmark": "bench_levers", "scenario": REFERENCE, "rate_per_s": REFERENCE_RATE,
               "overload_rate_per_s": OVERLOAD_RATE, "num_requests": args.num_requests, "repeats": args.repeats,
               "python": platform.python_version(), "machine": platform.machine(),
               "date": time.strftime("%Y-%m-%d"), "variants": rows}
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(payload, indent=2) + "\n")
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
