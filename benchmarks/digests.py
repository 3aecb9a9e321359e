"""SHA-256 digests of simulated runs: one per scenario over every request column, every step
column, the summary and the engine's counters, to show that two trees (or the compiled and the
pure-Python engine) give the same runs bit for bit.

    python benchmarks/digests.py [--only NAME,...] [--quick] [--out digests.json]

prints ``name digest`` lines (and writes them as JSON with ``--out``). Run it in two checkouts, or
with ``LLMPLAN_PURE_PYTHON=1`` and without, and compare the outputs (``diff``). The scenarios are
every example that runs on its own, variants that turn on one lever each of the engine, and a mix
of small random scenarios that combine them (``--quick``: the first 12 variants only).
"""
from __future__ import annotations

import argparse
import hashlib
import json
import random
import sys
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
EXAMPLES = ROOT / "examples"
SPEED = ROOT / "benchmarks" / "scenarios" / "speed-10k.yaml"
SPEC = {"method": "draft", "draft_model": "llama-3.2-1b", "num_speculative_tokens": 4, "acceptance_rate": 0.8}
NGRAM = {"method": "ngram", "num_speculative_tokens": 3, "acceptance_rate": 0.6}
PREFIX = {"num_prefixes": 4, "prefix_tokens": 256, "share": 0.8}

#: name -> (scenario file, overrides): one lever each on speed-10k (1,500 requests), then examples.
VARIANTS: dict[str, tuple[Path, dict[str, Any]]] = {
    "plain": (SPEED, {}),
    "plain-measured": (SPEED, {"hardware": "a100-80gb"}),
    "spec-draft": (SPEED, {"speculative_config": SPEC}),
    "spec-ngram-preempt": (SPEED, {"speculative_config": NGRAM, "scheduler.num_gpu_blocks_override": 300,
                                   "workload.arrival.rate_per_s": 20,
                                   "workload.output_tokens": {"dist": "geometric", "mean": 300, "max": 1000}}),
    "chunked": (SPEED, {"scheduler.policy": "chunked_prefill"}),
    "chunked-256": (SPEED, {"scheduler.policy": "chunked_prefill", "scheduler.long_prefill_token_threshold": 256}),
    "chunked-spec": (SPEED, {"scheduler.policy": "chunked_prefill", "speculative_config": SPEC}),
    "prefix": (SPEED, {"workload.prefix": PREFIX, "scheduler.enable_prefix_caching": True}),
    "preempt": (SPEED, {"scheduler.num_gpu_blocks_override": 400, "workload.arrival.rate_per_s": 12,
                        "workload.output_tokens": {"dist": "geometric", "mean": 300, "max": 1500}}),
    "swap": (SPEED, {"scheduler.num_gpu_blocks_override": 400, "scheduler.preemption_mode": "swap",
                     "workload.arrival.rate_per_s": 12,
                     "workload.output_tokens": {"dist": "geometric", "mean": 300, "max": 1500}}),
    "replicas-lo": (SPEED, {"deployment.replicas": 3, "deployment.router": "least_outstanding",
                            "workload.arrival.rate_per_s": 14}),
    "vllm-v1": (SPEED, {"engine": "vllm-v1"}),
    "async": (SPEED, {"engine": "sglang"}),
    "async-replicas": (SPEED, {"engine": "sglang", "deployment.replicas": 2, "deployment.router": "least_outstanding",
                               "client.timeout_s": 1.0, "workload.arrival.rate_per_s": 14}),
    "replicas-rr": (SPEED, {"deployment.replicas": 3, "deployment.router": "round_robin",
                            "workload.arrival.rate_per_s": 14}),
    "timeouts": (SPEED, {"client.timeout_s": 1.0, "admission.max_queue_delay_s": 0.5,
                         "workload.arrival.rate_per_s": 14}),
    "priority": (SPEED, {"scheduler.scheduling_policy": "priority", "workload.arrival.rate_per_s": 9,
                         "workload.tiers": [{"name": "a", "share": 0.3, "priority": 0},
                                            {"name": "b", "share": 0.7, "priority": 1}]}),
    "multi-step": (SPEED, {"scheduler.num_scheduler_steps": 8}),
    "dynamic": (SPEED, {"scheduler.policy": "dynamic"}),
    "static": (SPEED, {"scheduler.policy": "static"}),
    "shed-queue": (SPEED, {"admission.max_queue_len": 5, "workload.arrival.rate_per_s": 14}),
    "gamma": (SPEED, {"workload.arrival": {"process": "gamma", "rate_per_s": 6, "cv": 3.0}}),
    "ex-chat": (EXAMPLES / "chat-h100.yaml", {}),
    "ex-chat-prefix": (EXAMPLES / "chat-prefix-h100.yaml", {}),
    "ex-sharegpt": (EXAMPLES / "sharegpt-h100.yaml", {}),
    "ex-tiers": (EXAMPLES / "tiers-h100.yaml", {}),
    "ex-levers": (EXAMPLES / "levers-h100.yaml", {}),
    "ex-closed-loop": (EXAMPLES / "closed-loop-h100.yaml", {}),
    "ex-agent-loop": (EXAMPLES / "agent-loop-h100.yaml", {}),
    "ex-deepseek": (EXAMPLES / "deepseek-v3-h200.yaml", {}),
    "ex-deepseek-dep8": (EXAMPLES / "deepseek-v3-dep8-h200.yaml", {}),
    "ex-model-routing": (EXAMPLES / "model-routing.yaml", {}),
    "ex-cpu-tiny": (EXAMPLES / "cpu-tiny-llama.yaml", {}),
}
NUM_REQUESTS = 1500
NUM_RANDOM = 24


def random_overrides(seed: int) -> dict[str, Any]:
    """A small random scenario on speed-10k mixing the levers: policies, speculation, KV pressure,
    prefix caching, replicas and routers, timeouts, shedding, tiers, engine presets."""
    rnd = random.Random(seed)
    chunked = rnd.random() < 0.5
    ov: dict[str, Any] = {
        "num_requests": 300, "seed": seed, "hardware": rnd.choice(["a100-80gb-datasheet", "h100-sxm"]),
        "scheduler.max_model_len": 1600,
        "scheduler.policy": "chunked_prefill" if chunked else rnd.choice(["continuous", "continuous", "dynamic"]),
        "scheduler.max_num_seqs": rnd.choice([4, 16, 64]),
        "scheduler.max_num_batched_tokens": rnd.choice([64, 256, 4096]) if chunked else 4096,
        "workload.arrival.rate_per_s": rnd.choice([2.0, 8.0, 20.0, 40.0]),
        "workload.prompt_tokens": {"dist": "uniform", "min": 8, "max": rnd.choice([200, 1200])},
        "workload.output_tokens": {"dist": "geometric", "mean": rnd.choice([5, 30, 100]), "max": 400}}
    if ov["scheduler.policy"] != "dynamic" and rnd.random() < 0.4:
        method = rnd.choice(["draft", "ngram", "mtp"])
        ov["speculative_config"] = {"method": method, "num_speculative_tokens": rnd.choice([1, 3, 6]),
                                    "acceptance_rate": rnd.choice([0.0, 0.5, 0.9, 1.0]),
                                    **({"draft_model": "llama-3.2-1b"} if method == "draft" else {})}
    if rnd.random() < 0.3:
        ov["scheduler.num_gpu_blocks_override"] = rnd.choice([120, 300])
    if ov["scheduler.policy"] != "dynamic" and rnd.random() < 0.3:
        ov.update({"scheduler.enable_prefix_caching": True, "workload.prefix": {
            "num_prefixes": 2, "prefix_tokens": 64, "share": 0.7, "short_prompt": "clip"}})
    if rnd.random() < 0.3:
        ov.update({"deployment.replicas": rnd.choice([2, 3]),
                   "deployment.router": rnd.choice(["round_robin", "least_outstanding", "least_outstanding_tokens"])})
    if rnd.random() < 0.2:
        ov["client.timeout_s"] = rnd.choice([0.5, 3.0])
    if rnd.random() < 0.2:
        ov["admission.max_queue_delay_s"] = rnd.choice([0.2, 1.0])
    if rnd.random() < 0.2:
        ov["engine"] = rnd.choice(["vllm-v1", "sglang"])
    return ov


def scenarios(quick: bool = False) -> dict[str, Any]:
    """name -> scenario: the variants (capped at :data:`NUM_REQUESTS` requests) and the random mix
    (invalid random draws are skipped: the same ones in every tree)."""
    from simulator import ScenarioError, load_scenario

    out: dict[str, Any] = {}
    for name, (path, overrides) in list(VARIANTS.items())[:12 if quick else None]:
        sc = load_scenario(path, overrides)
        if sc.workload.arrival.process != "closed_loop" and sc.num_requests > NUM_REQUESTS:
            sc = sc.with_overrides({"num_requests": NUM_REQUESTS})
        out[name] = sc
    if not quick:
        for seed in range(NUM_RANDOM):
            try:
                out[f"random-{seed}"] = load_scenario(SPEED, random_overrides(seed))
            except ScenarioError:
                continue
    return out


def _hash_array(h: Any, values: Any) -> None:
    import numpy as np

    arr = np.asarray(values)
    if arr.dtype == object:
        h.update(repr(arr.tolist()).encode())
    else:
        h.update(str(arr.dtype).encode())
        h.update(np.ascontiguousarray(arr).tobytes())


def digest(result: Any) -> str:
    """SHA-256 over a run's request frame, step frame, summary (less its wall time) and counters."""
    h = hashlib.sha256()
    for frame in (result.requests, result.steps):
        for name in frame.columns:
            h.update(name.encode())
            col = frame[name]
            _hash_array(h, col.astype(str) if str(col.dtype) == "category" else col.to_numpy())
    summary = {k: v for k, v in result.summary.items() if k != "wall_s"}
    h.update(json.dumps(summary, sort_keys=True, default=repr).encode())
    h.update(json.dumps([result.engine_stats, result.prefix_cache, result.sim_time_s], sort_keys=True).encode())
    return h.hexdigest()


def run(only: list[str] | None = None, quick: bool = False) -> dict[str, str]:
    """name -> digest (or the error a scenario's run raised, which must be the same too)."""
    from simulator import ScenarioError, simulate

    out = {}
    for name, sc in scenarios(quick).items():
        if only is None or name in only:
            try:
                out[name] = digest(simulate(sc))
            except ScenarioError as e:
                out[name] = f"error: {e}"
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--only", help="comma-separated scenario names")
    ap.add_argument("--quick", action="store_true", help="the first 12 variants only")
    ap.add_argument("--out", type=Path, help="write the digests as JSON here")
    args = ap.parse_args(argv)
    sys.path.insert(0, str(ROOT))
    got = run(args.only.split(",") if args.only else None, args.quick)
    for name, value in got.items():
        print(f"{name:24s} {value}")
    if args.out:
        args.out.write_text(json.dumps(got, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
