"""Published MoE results as a test set: each point's deployment simulated as published, the prediction
set beside the measurement. Nothing here is fitted: the profiles and presets are used as shipped, and
a miss is reported, not tuned away.

    python benchmarks/published_moe.py [--profile-suffix -datasheet] [--out benchmarks/results/published_moe.json]

Prints the markdown table of docs/hardware-profiles.md ("Published MoE points") and the median and
worst |error| per model family. ``--profile-suffix -datasheet`` runs the same points on the vendor-peak
rooflines instead of the measured defaults.

How each point is simulated (assumptions where the source is silent are marked in its ``notes``):

* ``tpot``: a closed loop of ``clients`` clients (no think time), ``requests`` requests of fixed
  prompt and output lengths or of the run's ShareGPT lengths; the metric is the median over
  **every** request of its time per output token (as ``vllm bench serve`` reports it, no warm-up
  window);
* ``output_tok_s``: every request sent at once (``vllm bench serve`` at an infinite rate), the
  metric is the output tokens over the time to the last completion, as that tool reports it.

Every point runs the ``vllm-v1`` preset with chunked prefill and the preset's scheduler defaults for
its GPU (``max_num_seqs`` 1,024 and a token budget of 8,192 on GPUs of 70 GiB or more other than the
A100, 256 and 2,048 otherwise: what ``vllm serve`` 0.10-0.11 uses when, as in every source here, the
serve command does not set them). A model that is not a preset
carries its ``config.json`` dimensions inline (``model_spec``).
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
GPUSTACK_LAB = ("GPUStack performance lab (github.com/gpustack/gpustack docs/performance-lab/{} @ {}; "
                "`vllm bench serve`)")
GPUSTACK = ("GPUStack performance lab, gpt-oss-120b on H100 (vLLM 0.10.2, `vllm bench serve` ShareGPT, 1,000 "
            "prompts; github.com/gpustack/gpustack docs/performance-lab/gpt-oss-120b/h100.md @ 72aee9d)")
SHAREGPT = {"prompt_tokens": {"dist": "lognormal", "mean": 215, "sigma": 1.0, "max": 8000},
            "output_tokens": {"dist": "lognormal", "mean": 196, "sigma": 1.0, "max": 4000}}
"""The GPUStack run's lengths: 215,312 prompt and about 196,000 output tokens over 1,000 requests
(the means are published; the spread is assumed lognormal with sigma 1)."""


def sharegpt(prompt_tokens_total: int, output_tokens_total: int, requests: int) -> dict[str, Any]:
    """A ShareGPT run's lengths from its published totals (``vllm bench serve``'s "Total input
    tokens" and "Total generated tokens"): those means, the spread assumed lognormal with sigma 1."""
    return {"prompt_tokens": {"dist": "lognormal", "mean": round(prompt_tokens_total / requests), "sigma": 1.0,
                              "max": 8000},
            "output_tokens": {"dist": "lognormal", "mean": round(output_tokens_total / requests), "sigma": 1.0,
                              "max": 4000}}


# Models that are not presets: their config.json dimensions (field names as in ModelSpec).
QWEN3_235B_A22B: dict[str, Any] = {
    # Qwen/Qwen3-235B-A22B-Instruct-2507 config.json: 94 layers, 64 query / 4 KV heads of 128, 128
    # experts top-8, 1,536 wide, every layer MoE (decoder_sparse_step 1, mlp_only_layers []); 262,144
    # positions. The FP8 repository has the same shapes (block-wise fp8 linear layers).
    "name": "qwen3-235b-a22b", "num_layers": 94, "hidden_size": 4096, "num_attention_heads": 64,
    "num_key_value_heads": 4, "head_dim": 128, "intermediate_size": 12288, "vocab_size": 151936,
    "max_model_len": 262144, "num_experts": 128, "num_experts_per_tok": 8, "moe_intermediate_size": 1536}
GPT_OSS_20B: dict[str, Any] = {
    # openai/gpt-oss-20b config.json: gpt-oss-120b's layer with 24 layers and 32 experts (top-4);
    # layer_types alternate sliding (window 128) and full attention: 12 of 24. MXFP4 experts.
    "name": "gpt-oss-20b", "num_layers": 24, "hidden_size": 2880, "num_attention_heads": 64,
    "num_key_value_heads": 8, "head_dim": 64, "intermediate_size": 2880, "vocab_size": 201088,
    "max_model_len": 131072, "attention_bias": True, "num_experts": 32, "num_experts_per_tok": 4,
    "sliding_window": 128, "sliding_window_layers": 12}
GLM_45_AIR: dict[str, Any] = {
    # zai-org/GLM-4.5-Air config.json: 46 layers, 96 query / 8 KV heads of 128 (QKV bias), 128 routed
    # experts top-8 + 1 shared, 1,408 wide, the first layer dense (10,944 wide). Its partial rotary
    # embedding and its multi-token-prediction layer (num_nextn_predict_layers 1, loaded only for MTP)
    # are left out.
    "name": "glm-4.5-air", "num_layers": 46, "hidden_size": 4096, "num_attention_heads": 96,
    "num_key_value_heads": 8, "head_dim": 128, "intermediate_size": 10944, "vocab_size": 151552,
    "max_model_len": 131072, "attention_bias": True, "num_experts": 128, "num_experts_per_tok": 8,
    "num_shared_experts": 1, "moe_intermediate_size": 1408, "first_k_dense_replace": 1}

DSR1_H200 = GPUSTACK_LAB.format("deepseek-r1/h200.md", "1f37f1b")
OSS120_H100 = GPUSTACK_LAB.format("gpt-oss-120b/h100.md", "1f37f1b")
OSS120_A100 = GPUSTACK_LAB.format("gpt-oss-120b/a100.md", "1f37f1b")
OSS20_H100 = GPUSTACK_LAB.format("gpt-oss-20b/h100.md", "1f37f1b")
QWEN235_H100 = GPUSTACK_LAB.format("qwen3-235b-a22b/h100.md", "1f37f1b")
GLM_AIR_H100 = GPUSTACK_LAB.format("glm-4.5-air/h100.md", "1f37f1b")
SPREAD = "ShareGPT spread assumed lognormal (sigma 1) about the published mean lengths"

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
    # -- held out since issue 38 item 4: vLLM baselines of GPUStack's performance lab ----------------------
    {"name": "deepseek-r1 8xH200 ShareGPT c4", "family": "deepseek", "model": "deepseek-v3", "gpu": "h200", "tp": 8,
     "quantization": "fp8", "engine_label": "vLLM 0.11.0", "metric": "tpot", "clients": 4, "requests": 100,
     "lengths": sharegpt(22836, 21338, 100), "published": 19.13, "unit": "ms", "source": DSR1_H200,
     "notes": "DeepSeek-R1-0528 (DeepSeek-V3's shapes, fp8 block weights); `vllm serve -tp 8`; " + SPREAD},
    {"name": "deepseek-r1 8xH200 ShareGPT", "family": "deepseek", "model": "deepseek-v3", "gpu": "h200", "tp": 8,
     "quantization": "fp8", "engine_label": "vLLM 0.11.0", "metric": "output_tok_s", "requests": 1000,
     "lengths": sharegpt(219171, 200752, 1000), "published": 2621.05, "unit": "tok/s", "source": DSR1_H200,
     "notes": "DeepSeek-R1-0528; `vllm serve -tp 8`; " + SPREAD},
    {"name": "deepseek-r1 8xH200 2000/100", "family": "deepseek", "model": "deepseek-v3", "gpu": "h200", "tp": 8,
     "quantization": "fp8", "engine_label": "vLLM 0.11.0", "metric": "output_tok_s", "requests": 500,
     "prompt": 2000, "output": 100, "published": 843.71, "unit": "tok/s", "source": DSR1_H200,
     "notes": "DeepSeek-R1-0528; random dataset, 500 prompts of 2,000 tokens, 100 out (50,000 generated: fixed)"},
    {"name": "gpt-oss-120b 1xH100 ShareGPT c4", "family": "gpt-oss", "model": "gpt-oss-120b", "gpu": "h100-sxm",
     "tp": 1, "quantization": "mxfp4", "engine_label": "vLLM 0.10.2", "metric": "tpot", "clients": 4,
     "requests": 100, "lengths": sharegpt(22946, 21691, 100), "max_model_len": 32768, "published": 8.24,
     "unit": "ms", "source": OSS120_H100, "notes": "`--max-model-len 32768`; " + SPREAD},
    {"name": "gpt-oss-120b 2xH100 ShareGPT c4", "family": "gpt-oss", "model": "gpt-oss-120b", "gpu": "h100-sxm",
     "tp": 2, "quantization": "mxfp4", "engine_label": "vLLM 0.10.2 --async-scheduling", "async": True,
     "metric": "tpot", "clients": 4, "requests": 100, "lengths": sharegpt(22946, 21691, 100),
     "published": 5.74, "unit": "ms", "source": OSS120_H100,
     "notes": "no --max-model-len (131,072; 16,384 simulated, which ShareGPT never reaches); " + SPREAD},
    {"name": "gpt-oss-120b 1xA100 ShareGPT c4", "family": "gpt-oss", "model": "gpt-oss-120b", "gpu": "a100-80gb",
     "tp": 1, "quantization": "mxfp4", "engine_label": "vLLM 0.11.0", "metric": "tpot", "clients": 4,
     "requests": 100, "lengths": sharegpt(22946, 21691, 100), "max_model_len": 32768, "published": 11.44,
     "unit": "ms", "source": OSS120_A100, "notes": "A100 SXM 80GB; `--max-model-len 32768`; " + SPREAD},
    {"name": "gpt-oss-120b 1xA100 ShareGPT", "family": "gpt-oss", "model": "gpt-oss-120b", "gpu": "a100-80gb",
     "tp": 1, "quantization": "mxfp4", "engine_label": "vLLM 0.11.0", "metric": "output_tok_s", "requests": 1000,
     "lengths": sharegpt(215312, 196656, 1000), "max_model_len": 32768, "published": 2276.40, "unit": "tok/s",
     "source": OSS120_A100, "notes": "A100 SXM 80GB; `--max-model-len 32768`; " + SPREAD},
    {"name": "gpt-oss-120b 2xA100 ShareGPT", "family": "gpt-oss", "model": "gpt-oss-120b", "gpu": "a100-80gb",
     "tp": 2, "quantization": "mxfp4", "engine_label": "vLLM 0.11.0 --async-scheduling", "async": True,
     "metric": "output_tok_s", "requests": 1000, "lengths": sharegpt(215312, 196156, 1000), "max_model_len": 32768,
     "published": 3765.02, "unit": "tok/s", "source": OSS120_A100,
     "notes": "A100 SXM 80GB; `--max-model-len 32768 --async-scheduling -tp 2`; " + SPREAD},
    {"name": "gpt-oss-20b 1xH100 ShareGPT", "family": "gpt-oss", "model": "gpt-oss-20b", "model_spec": GPT_OSS_20B,
     "gpu": "h100-sxm", "tp": 1, "quantization": "mxfp4", "engine_label": "vLLM 0.11.0", "metric": "output_tok_s",
     "requests": 1000, "lengths": sharegpt(215312, 193979, 1000), "published": 7817.03, "unit": "tok/s",
     "source": OSS20_H100, "notes": "inline spec (not a preset); `vllm serve openai/gpt-oss-20b`; " + SPREAD},
    {"name": "gpt-oss-20b 1xH100 ShareGPT async", "family": "gpt-oss", "model": "gpt-oss-20b",
     "model_spec": GPT_OSS_20B, "gpu": "h100-sxm", "tp": 1, "quantization": "mxfp4",
     "engine_label": "vLLM 0.11.0 --async-scheduling", "async": True, "metric": "output_tok_s", "requests": 1000,
     "lengths": sharegpt(215312, 193919, 1000), "published": 9064.40, "unit": "tok/s", "source": OSS20_H100,
     "notes": "inline spec (not a preset); " + SPREAD},
    {"name": "qwen3-235b-a22b 8xH100 bf16 ShareGPT", "family": "qwen3-moe", "model": "qwen3-235b-a22b",
     "model_spec": QWEN3_235B_A22B, "gpu": "h100-sxm", "tp": 8, "quantization": "bf16",
     "engine_label": "vLLM 0.11.0", "metric": "output_tok_s", "requests": 1000,
     "lengths": sharegpt(212894, 193865, 1000), "published": 4015.36, "unit": "tok/s", "source": QWEN235_H100,
     "notes": "Qwen3-235B-A22B-Instruct-2507, inline spec; `vllm serve ... -tp 8`; " + SPREAD},
    {"name": "qwen3-235b-a22b 4xH100 fp8 ShareGPT", "family": "qwen3-moe", "model": "qwen3-235b-a22b",
     "model_spec": QWEN3_235B_A22B, "gpu": "h100-sxm", "tp": 4, "quantization": "fp8",
     "engine_label": "vLLM 0.11.0", "metric": "output_tok_s", "requests": 1000,
     "lengths": sharegpt(212992, 194446, 1000), "published": 3592.57, "unit": "tok/s", "source": QWEN235_H100,
     "notes": "Qwen3-235B-A22B-Instruct-2507-FP8 (block fp8), inline spec; `-tp 4`; " + SPREAD},
    {"name": "glm-4.5-air 4xH100 bf16 ShareGPT", "family": "glm-moe", "model": "glm-4.5-air",
     "model_spec": GLM_45_AIR, "gpu": "h100-sxm", "tp": 4, "quantization": "bf16", "engine_label": "vLLM 0.11.0",
     "metric": "output_tok_s", "requests": 1000, "lengths": sharegpt(214465, 199895, 1000), "published": 3815.71,
     "unit": "tok/s", "source": GLM_AIR_H100, "notes": "inline spec (not a preset); `vllm serve ... -tp 4`; " + SPREAD},
]


def predict(point: dict[str, Any], suffix: str = "") -> float:
    """The point's metric in the simulator (module docstring), on ``point['gpu'] + suffix``."""
    clients = point.get("clients", point["requests"])
    lengths = point.get("lengths") or {"prompt_tokens": {"dist": "fixed", "value": point["prompt"]},
                                       "output_tokens": {"dist": "fixed", "value": point["output"]}}
    overrides: dict[str, Any] = {
        "name": point["name"], "model": point.get("model_spec", point["model"]), "hardware": point["gpu"] + suffix,
        "deployment.tensor_parallel_size": point["tp"], "deployment.quantization": point["quantization"],
        "num_requests": point["requests"], "warmup_s": 0, "cooldown_s": 0,
        "engine": {"preset": "vllm-v1", "async_scheduling": bool(point.get("async"))},
        "workload.arrival": {"process": "closed_loop", "concurrency": clients, "think_time_s": 0},
        "workload.prompt_tokens": lengths["prompt_tokens"], "workload.output_tokens": lengths["output_tokens"],
        # the scheduler as `vllm serve` sets it: the preset's batch limits for this GPU, chunked prefill
        "scheduler": {"policy": "chunked_prefill", "max_model_len": point.get("max_model_len", 16384)},
        "slo": {"ttft_p99_ms": 1e7, "tpot_p99_ms": 1e7}}
    req = simulate(load_scenario(BASE, overrides)).requests
    req = req[req["finish_time"].notna()]
    if point["metric"] == "tpot":
        return float(np.median(req["tpot_s"].dropna())) * 1e3
    return float(req["num_output_tokens"].sum() / req["finish_time"].max())


def summary(rows: list[dict[str, Any]], label: str) -> str:
    """``label``: how many points, the median and the worst |error| of ``rows``."""
    if not rows:
        return f"{label} 0 points"
    err = np.abs([r["error"] for r in rows])
    return (f"{label} {len(err)} point{'s' if len(err) > 1 else ''}, median |error| {np.median(err):.0%}, "
            f"worst {err.max():.0%}")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--profile-suffix", default="", help="e.g. -datasheet: the vendor-peak rooflines")
    ap.add_argument("--out", default=None, help="write the rows as JSON")
    args = ap.parse_args()
    rows = []
    for p in POINTS:
        pred = predict(p, args.profile_suffix)
        rows.append({**{k: v for k, v in p.items() if k not in ("lengths", "model_spec")}, "predicted": pred,
                     "error": pred / p["published"] - 1.0})
    print("| model | GPUs | engine | load | metric | published | predicted | error |")
    print("|---|---|---|---|---|---|---|---|")
    for r in rows:
        lengths = f"{r['prompt']}/{r['output']} tokens" if "prompt" in r else "ShareGPT"
        load = (f"{r['clients']} clients, {lengths}" if r["metric"] == "tpot"
                else f"{r['requests']} ShareGPT requests at once" if "prompt" not in r
                else f"{r['requests']} requests at once, {lengths}")
        print(f"| {r['model']} ({r['quantization']}) | {r['tp']} x {r['gpu']}{args.profile_suffix} | "
              f"{r['engine_label']} | {load} | {'TPOT p50' if r['metric'] == 'tpot' else 'output tok/s'} | "
              f"{r['published']:,.2f} {r['unit']} | {r['predicted']:,.2f} | {r['error']:+.0%} |")
    print()
    for fam in [*sorted({r["family"] for r in rows}), "all"]:
        print(f"{fam}: " + "; ".join(summary([r for r in rows if fam in ("all", r["family"]) and r["metric"] == m],
                                             label) for m, label in (("tpot", "TPOT"), ("output_tok_s", "throughput"))))
    if args.out:
        Path(args.out).write_text(json.dumps(rows, indent=1))


if __name__ == "__main__":
    main()
