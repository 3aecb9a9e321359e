"""Published MoE results as a test set: each point's deployment simulated as published, the prediction
set beside the measurement. Nothing here is fitted: the profiles and presets are used as shipped, and
a miss is reported, not tuned away.

    python benchmarks/published_moe.py [--profile-suffix -datasheet] [--out benchmarks/results/published_moe.json]

Prints the markdown table of docs/hardware-profiles.md ("Published MoE points") and the median and
worst |error| per model family. ``--profile-suffix -datasheet`` runs the same points on the vendor-peak
rooflines instead of the measured defaults.

How each point is simulated (assumptions where the source is silent are marked in its ``notes``):

* ``tpot``: a closed loop of ``clients`` clients (no think time), fixed prompt and output lengths,
  ``requests`` requests; the metric is the median over **every** request of its time per output
  token (as ``vllm bench serve`` reports it, no warm-up window);
* ``output_tok_s``: every request sent at once (``vllm bench serve`` at an infinite rate), the
  metric is the output tokens over the time to the last completion, as that tool reports it.
"""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from simulator import load_scenario, simulate  # noqa: E402

BASE = ROOT / "examples" / "closed-loop-h100.yaml"
ISSUE = "issue 38 (InferenceMAX 1k/8k and 1k/1k sweeps as quoted there)"
GPUSTACK = ("GPUStack performance lab, gpt-oss-120b on H100 (vLLM 0.10.2, `vllm bench serve` ShareGPT, 1,000 "
            "prompts; github.com/gpustack/gpustack docs/performance-lab/gpt-oss-120b/h100.md @ 72aee9d)")
SHAREGPT = {"prompt_tokens": {"dist": "lognormal", "mean": 215, "sigma": 1.0, "max": 8000},
            "output_tokens": {"dist": "lognormal", "mean": 196, "sigma": 1.0, "max": 4000}}
"""The GPUStack run's lengths: 215,312 prompt and about 196,000 output tokens over 1,000 requests
(the means are published; the spread is assumed lognormal with sigma 1)."""

POINTS: list[dict[str, Any]] = [
    {"name": "deepseek-r1 8xB200 c4", "family": "deepseek", "model": "deepseek-v3", "gpu": "b200", "tp": 8,
     "quantization": "fp8", "engine_label": "as published (see source)", "metric": "tpot", "clients": 4,
     "requests": 12, "prompt": 1024, "output": 8192, "published": 10.0, "unit": "ms", "source": ISSUE,
     "notes": "DeepSeek-R1 has DeepSeek-V3's shapes; fp8 block weights, TP 8"},
    {"name": "gpt-oss-120b 2xH100 c4", "family": "gpt-oss", "model": "gpt-oss-120b", "gpu": "h100-sxm", "tp": 2,
     "quantization": "mxfp4", "engine_label": "vLLM", "metric": "tpot", "clients": 4, "requests": 16,
     "prompt": 1024, "output": 1024, "published": 5.7, "unit": "ms", "source": ISSUE,
     "notes": "1k/1k lengths assumed"},
    {"name": "gpt-oss-120b 1xH100 ShareGPT", "family": "gpt-oss", "model": "gpt-oss-120b", "gpu": "h100-sxm",
     "tp": 1, "quantization": "mxfp4", "engine_label": "vLLM 0.10.2", "metric": "output_tok_s", "requests": 1000,
     "lengths": SHAREGPT, "max_model_len": 32768, "published": 2901.05, "unit": "tok/s", "source": GPUSTACK,
     "notes": "ShareGPT length spread assumed"},
    {"name": "gpt-oss-120b 2xH100 ShareGPT", "family": "gpt-oss", "model": "gpt-oss-120b", "gpu": "h100-sxm",
     "tp": 2, "quantization": "mxfp4", "engine_label": "vLLM 0.10.2 --async-scheduling", "async": True,
     "metric": "output_tok_s", "requests": 1000, "lengths": SHAREGPT, "max_model_len": 32768,
     "published": 7648.67, "unit": "tok/s", "source": GPUSTACK, "notes": "ShareGPT length spread assumed"},
    {"name": "gpt-oss-120b 4xH100 ShareGPT", "family": "gpt-oss", "model": "gpt-oss-120b", "gpu": "h100-sxm",
     "tp": 4, "quantization": "mxfp4", "engine_label": "vLLM 0.10.2 --async-scheduling", "async": True,
     "metric": "output_tok_s", "requests": 1000, "lengths": SHAREGPT, "max_model_len": 32768,
     "published": 11327.22, "unit": "tok/s", "source": GPUSTACK, "notes": "ShareGPT length spread assumed"},
]


def predict(point: dict[str, Any], suffix: str = "") -> float:
    """The point's metric in the simulator (module docstring), on ``point['gpu'] + suffix``."""
    clients = point.get("clients", point["requests"])
    lengths = point.get("lengths") or {"prompt_tokens": {"dist": "fixed", "value": point["prompt"]},
                                       "output_tokens": {"dist": "fixed", "value": point["output"]}}
    overrides: dict[str, Any] = {
        "name": point["name"], "model": point["model"], "hardware": point["gpu"] + suffix,
        "deployment.tensor_parallel_size": point["tp"], "deployment.quantization": point["quantization"],
        "num_requests": point["requests"], "warmup_s": 0, "cooldown_s": 0,
        "engine": {"preset": "vllm-v1", "async_scheduling": bool(point.get("async"))},
        "workload.arrival": {"process": "closed_loop", "concurrency": clients, "think_time_s": 0},
        "workload.prompt_tokens": lengths["prompt_tokens"], "workload.output_tokens": lengths["output_tokens"],
        "scheduler.max_model_len": point.get("max_model_len", 16384), "scheduler.max_num_seqs": 256,
        "scheduler.policy": "chunked_prefill",
        "slo": {"ttft_p99_ms": 1e7, "tpot_p99_ms": 1e7}}
    req = simulate(load_scenario(BASE, overrides)).requests
    req = req[req["finish_time"].notna()]
    if point["metric"] == "tpot":
        return float(np.median(req["tpot_s"].dropna())) * 1e3
    return float(req["num_output_tokens"].sum() / req["finish_time"].max())


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--profile-suffix", default="", help="e.g. -datasheet: the vendor-peak rooflines")
    ap.add_argument("--out", default=None, help="write the rows as JSON")
    args = ap.parse_args()
    rows = []
    for p in POINTS:
        pred = predict(p, args.profile_suffix)
        rows.append({**{k: v for k, v in p.items() if k != "lengths"}, "predicted": pred,
                     "error": pred / p["published"] - 1.0})
    print("| model | GPUs | engine | load | metric | published | predicted | error |")
    print("|---|---|---|---|---|---|---|---|")
    for r in rows:
        load = (f"{r['clients']} clients, {r['prompt']}/{r['output']} tokens" if r["metric"] == "tpot"
                else f"{r['requests']} ShareGPT requests at once")
        print(f"| {r['model']} ({r['quantization']}) | {r['tp']} x {r['gpu']}{args.profile_suffix} | "
              f"{r['engine_label']} | {load} | {'TPOT p50' if r['metric'] == 'tpot' else 'output tok/s'} | "
              f"{r['published']:,.1f} {r['unit']} | {r['predicted']:,.1f} | {r['error']:+.0%} |")
    print()
    for fam in sorted({r["family"] for r in rows}):
        err = np.abs([r["error"] for r in rows if r["family"] == fam])
        print(f"{fam}: {len(err)} points, median |error| {np.median(err):.0%}, worst {err.max():.0%}")
    if args.out:
        Path(args.out).write_text(json.dumps(rows, indent=1))


if __name__ == "__main__":
    main()
