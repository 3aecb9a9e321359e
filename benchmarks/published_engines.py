"""Published SGLang and TensorRT-LLM results as a test set: each point's deployment simulated with the
engine preset of the engine that ran it, the prediction set beside the measurement. Nothing here is
fitted: the profiles and presets are used as shipped, and a miss is reported, not tuned away.

    python benchmarks/published_engines.py [--only NAME] [--profile-suffix -datasheet]
                                           [--out benchmarks/results/published_engines.json]

Prints the markdown table of docs/hardware-profiles.md ("Published SGLang and TensorRT-LLM points"),
then the median and worst |error| per model family and per engine, and writes the rows as JSON with
the machine's load average (``--profile-suffix -datasheet``: the same points on the vendor-peak
rooflines instead of the measured defaults). It follows ``published_moe.py`` (vLLM points): same
metric, same lengths, same reading of a ShareGPT run's published totals; it also reruns that script's
points to print |error| per family and engine over both sets.

Two kinds of source:

* GPUStack's performance lab (``vllm bench serve`` against ``python -m sglang.launch_server`` or
  ``trtllm-serve``, ShareGPT, 1,000 prompts at an infinite rate): every request sent at once, the
  metric the output tokens over the time to the last completion (as that tool reports it);
* TensorRT-LLM's performance overview (``trtllm-bench throughput``, fixed input/output lengths, the
  published number of requests queued at once): the same metric ("Total Output Throughput").

Engines: the ``sglang`` and ``trtllm`` presets with their scheduler defaults and overlap scheduling,
plus what each source's command sets. The one setting a preset leaves open is set from the engine's
source, not fitted, and the other that matters here is the preset's:

* SGLang bounds the running batch by memory, not by a count: ``max_running_requests`` is
  ``min(max_total_num_tokens // 2, req_to_token_pool size)``, the pool at least 2,048 requests
  (``min(max(tokens / context_len x 512, 2048), 4096)``; sglang ``scheduler.py`` / ``model_runner.py``,
  v0.5): ``max_num_seqs`` 2,048 here, which a 1,000-request run never reaches (the KV cache binds);
* TensorRT-LLM's token budget is the preset's: ``max_num_tokens`` 8,192, raised to the served context
  where that is longer (the preset never splits a prompt). The ShareGPT points serve 16,384 tokens
  (32,768 where ``--max_seq_len`` says so), so their budget is that; the ``trtllm-bench`` points
  serve ``input + output`` tokens, so theirs is 8,192.

A point whose deployment the source does not state fully (attention data parallelism without its
expert split) or that cannot be built as printed (weights that do not fit) is listed with
``not_checked`` and its reason, and is not simulated. Expert parallelism runs on the measured
profiles; every point here has one data-parallel rank, so its all-to-all is priced from the profile's
NVLink figures (the measured DeepEP rows apply to attention data parallelism only).
"""
from __future__ import annotations

import argparse
import json
import os
import platform
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))

import published_moe  # noqa: E402
from published_moe import GLM_45_AIR, GPT_OSS_20B, QWEN3_235B_A22B, sharegpt  # noqa: E402

from simulator import load_scenario, simulate  # noqa: E402

BASE = ROOT / "examples" / "closed-loop-h100.yaml"

# -- models that are not presets: their config.json dimensions (field names as in ModelSpec) ----------
QWEN3_14B: dict[str, Any] = {
    # Qwen/Qwen3-14B config.json: 40 layers, 40 query / 8 KV heads of 128, 17,408 wide, 40,960 positions.
    # The FP8 repository (Qwen/Qwen3-14B-FP8) has the same shapes (block-wise fp8 linear layers).
    "name": "qwen3-14b", "num_layers": 40, "hidden_size": 5120, "num_attention_heads": 40,
    "num_key_value_heads": 8, "head_dim": 128, "intermediate_size": 17408, "vocab_size": 151936,
    "max_model_len": 40960}
QWEN3_32B: dict[str, Any] = {
    # Qwen/Qwen3-32B config.json: 64 layers, 64 query / 8 KV heads of 128, 25,600 wide, 40,960 positions.
    "name": "qwen3-32b", "num_layers": 64, "hidden_size": 5120, "num_attention_heads": 64,
    "num_key_value_heads": 8, "head_dim": 128, "intermediate_size": 25600, "vocab_size": 151936,
    "max_model_len": 40960}
LLAMA_31_405B: dict[str, Any] = {
    # meta-llama/Llama-3.1-405B-Instruct config.json: 126 layers, 128 query / 8 KV heads of 128,
    # 53,248 wide, 131,072 positions (NVIDIA's FP8/FP4 ModelOpt checkpoints keep the shapes).
    "name": "llama-3.1-405b", "num_layers": 126, "hidden_size": 16384, "num_attention_heads": 128,
    "num_key_value_heads": 8, "head_dim": 128, "intermediate_size": 53248, "vocab_size": 128256,
    "max_model_len": 131072}

# -- sources --------------------------------------------------------------------------------------------
GPUSTACK_URL = "https://github.com/gpustack/gpustack/blob/1f37f1b8/docs/performance-lab/{}.md"
GPUSTACK_DATE = "2026-01-06 (commit 1f37f1b8)"
TRT_OVERVIEW_URL = ("https://github.com/NVIDIA/TensorRT-LLM/blob/00f37686aa854010d68bcbd0f4ab000221541ca6/"
                    "docs/source/performance/perf-overview.md (nvidia.github.io/TensorRT-LLM/performance/"
                    "perf-overview.html)")
TRT_OVERVIEW_DATE = "TensorRT-LLM v1.0 tables (commit 00f37686)"
TRT_BENCH = ("`trtllm-bench throughput --backend pytorch`, requests queued at once, CUDA graphs padded to "
             "1, 2, 4, ..., 8,192 (the published options file); trtllm-bench's own batch limits and KV "
             "fraction (0.90 or 0.95 'in many cases') are not published: the preset's")
SGLANG_SEQS = {"max_num_seqs": 2048}
TRT_BENCH_GRAPHS = [1, 2, 4, 8, 16, 32, 64, 128, 256, 384, 512, 1024, 2048, 4096, 8192]
ADP = "attention data parallelism with an unpublished expert split (the rows do not say EP)"
SGLANG_DP1 = ("SGLang turns DP attention off when `--dp` is 1, as this command leaves it: the same deployment as "
              "the point above, checked there")
ADP_LIMITS = "the engine's batch limits with attention data parallelism are not published"
SOURCE_REASONS = (ADP, SGLANG_DP1, ADP_LIMITS)
"""Reasons a point is not checked that lie in the source (what it leaves unsaid or repeats), not in
the simulator: every other unchecked point is one the simulator refuses (its weights do not fit)."""
SPREAD = "ShareGPT spread assumed lognormal (sigma 1) about the published mean lengths"


def _gs(model_gpu: str, engine_version: str) -> dict[str, Any]:
    """The source fields of a GPUStack performance-lab point (``model/gpu`` page, engine release)."""
    return {"source_url": GPUSTACK_URL.format(model_gpu), "date": GPUSTACK_DATE,
            "source": f"GPUStack performance lab, {model_gpu} ({engine_version}; `vllm bench serve` ShareGPT, "
                      "1,000 prompts at an infinite rate)"}


def _trt(table: str) -> dict[str, Any]:
    return {"source_url": TRT_OVERVIEW_URL, "date": TRT_OVERVIEW_DATE,
            "source": f"TensorRT-LLM performance overview, {table} table ({TRT_BENCH})"}


def _sg(model: str, gpu: str, tp: int, quant: str, published: float, page: str, version: str, name: str,
        **kw: Any) -> dict[str, Any]:
    """A GPUStack SGLang ShareGPT point."""
    return {"name": name, "model": model, "gpu": gpu, "tp": tp, "quantization": quant, "engine": "sglang",
            "engine_label": f"SGLang {version}", "metric": "output_tok_s", "published": published,
            "unit": "tok/s", "scheduler": dict(SGLANG_SEQS), **_gs(page, f"SGLang {version}"), **kw}


def _tr(model: str, gpu: str, tp: int, quant: str, published: float, page: str, version: str, name: str,
        **kw: Any) -> dict[str, Any]:
    """A GPUStack TensorRT-LLM (``trtllm-serve``) ShareGPT point."""
    return {"name": name, "model": model, "gpu": gpu, "tp": tp, "quantization": quant, "engine": "trtllm",
            "engine_label": f"TensorRT-LLM {version} (trtllm-serve)", "metric": "output_tok_s",
            "published": published, "unit": "tok/s", **_gs(page, f"TensorRT-LLM {version}"), **kw}


def _bench(model: str, gpu: str, tp: int, quant: str, prompt: int, output: int, requests: int,
           published: float, table: str, name: str, **kw: Any) -> dict[str, Any]:
    """A TensorRT-LLM performance-overview point (``trtllm-bench``, fixed lengths, all queued at once)."""
    return {"name": name, "model": model, "gpu": gpu, "tp": tp, "quantization": quant, "engine": "trtllm",
            "engine_label": "TensorRT-LLM v1.0 (trtllm-bench)", "metric": "output_tok_s", "requests": requests,
            "prompt": prompt, "output": output, "published": published, "unit": "tok/s",
            "cuda_graph": {"capture_sizes": TRT_BENCH_GRAPHS},
            "max_model_len": prompt + output, **_trt(table), **kw}


DSR1 = "DeepSeek-R1-0528 (DeepSeek-V3's shapes, fp8 block weights)"
OSS_LEN = sharegpt(215312, 196000, 1000)

POINTS: list[dict[str, Any]] = [
    # -- GPUStack: SGLang --------------------------------------------------------------------------------
    _sg("deepseek-v3", "h200", 8, "fp8", 3172.46, "deepseek-r1/h200", "v0.5.3", "deepseek-r1 8xH200 SGLang",
        family="deepseek", requests=1000, lengths=sharegpt(219171, 200767, 1000),
        notes=f"{DSR1}; `sglang.launch_server --tp-size 8`; " + SPREAD),
    _sg("deepseek-v3", "h200", 8, "fp8", 3414.99, "deepseek-r1/h200", "v0.5.3",
        "deepseek-r1 8xH200 SGLang dp-attention", family="deepseek", requests=1000,
        lengths=sharegpt(219171, 200752, 1000), not_checked=SGLANG_DP1,
        notes=f"{DSR1}; `--tp-size 8 --enable-dp-attention`"),
    _sg("gpt-oss-120b", "h100-sxm", 1, "mxfp4", 865.81, "gpt-oss-120b/h100", "v0.5.3rc0",
        "gpt-oss-120b 1xH100 SGLang", family="gpt-oss", requests=1000, lengths=sharegpt(215312, 196540, 1000),
        notes="`sglang.launch_server --model-path openai/gpt-oss-120b` (one GPU, defaults); " + SPREAD),
    _sg("gpt-oss-120b", "a100-80gb", 1, "mxfp4", 329.69, "gpt-oss-120b/a100", "v0.5.3",
        "gpt-oss-120b 1xA100 SGLang", family="gpt-oss", requests=1000, lengths=sharegpt(215312, 197133, 1000),
        notes="A100 SXM 80GB; one GPU, defaults; " + SPREAD),
    _sg("gpt-oss-20b", "h100-sxm", 1, "mxfp4", 2679.49, "gpt-oss-20b/h100", "v0.5.4.post2",
        "gpt-oss-20b 1xH100 SGLang", family="gpt-oss", model_spec=GPT_OSS_20B, requests=1000,
        lengths=sharegpt(215312, 195734, 1000), notes="inline spec; defaults; " + SPREAD),
    _sg("gpt-oss-20b", "a100-80gb", 1, "mxfp4", 265.99, "gpt-oss-20b/a100", "v0.5.4.post2",
        "gpt-oss-20b 1xA100 SGLang", family="gpt-oss", model_spec=GPT_OSS_20B, requests=1000,
        lengths=sharegpt(215312, 195617, 1000), notes="A100 SXM 80GB; inline spec; defaults; " + SPREAD),
    _sg("qwen3-235b-a22b", "h100-sxm", 8, "bf16", 3644.72, "qwen3-235b-a22b/h100", "v0.5.5.post1",
        "qwen3-235b-a22b 8xH100 SGLang", family="qwen3-moe", model_spec=QWEN3_235B_A22B, requests=984,
        lengths=sharegpt(214137, 193829, 984),
        notes="Qwen3-235B-A22B-Instruct-2507, inline spec; `--tp-size 8`; 984 requests succeeded; " + SPREAD),
    _sg("qwen3-235b-a22b", "a100-80gb", 8, "bf16", 2202.21, "qwen3-235b-a22b/a100", "v0.5.5.post1",
        "qwen3-235b-a22b 8xA100 SGLang", family="qwen3-moe", model_spec=QWEN3_235B_A22B, requests=1000,
        lengths=sharegpt(217393, 196763, 1000), notes="A100 SXM 80GB; inline spec; `--tp-size 8`; " + SPREAD),
    _sg("glm-4.5-air", "h100-sxm", 4, "bf16", 4532.66, "glm-4.5-air/h100", "v0.5.4.post2",
        "glm-4.5-air 4xH100 SGLang", family="glm-moe", model_spec=GLM_45_AIR, requests=1000,
        lengths=sharegpt(214465, 199904, 1000), notes="inline spec; `--tp-size 4`; " + SPREAD),
    _sg("glm-4.5-air", "h100-sxm", 4, "fp8", 5787.27, "glm-4.5-air/h100", "v0.5.4.post2",
        "glm-4.5-air 4xH100 SGLang fp8", family="glm-moe", model_spec=GLM_45_AIR, requests=1000,
        lengths=sharegpt(214465, 199904, 1000),
        notes="GLM-4.5-Air-FP8 (block fp8), inline spec; `--tp-size 4`; " + SPREAD),
    _sg("glm-4.5-air", "h100-sxm", 4, "bf16", 5987.56, "glm-4.5-air/h100", "v0.5.4.post2",
        "glm-4.5-air 4xH100 SGLang ep4", family="glm-moe", model_spec=GLM_45_AIR, requests=1000,
        lengths=sharegpt(214465, 199904, 1000), ep=4,
        notes="inline spec; `--tp-size 4 --ep-size 4`; all-to-all priced from the NVLink figures; " + SPREAD),
    _sg("glm-4.5-air", "h100-sxm", 2, "bf16", 2985.45, "glm-4.5-air/h100", "v0.5.4.post2",
        "glm-4.5-air 2xH100 SGLang", family="glm-moe", model_spec=GLM_45_AIR, requests=1000,
        lengths=sharegpt(214465, 199824, 1000),
        not_checked="precision unclear: the command's bf16 weights (about 200 GiB) do not fit 2 x 80 GB",
        notes="`--model-path zai-org/GLM-4.5-Air --tp-size 2` as printed; the section follows the page's fp8 "
              "finding, so the run may have served the FP8 repository"),
    _sg("glm-4.5-air", "h100-sxm", 1, "bf16", 1686.89, "glm-4.5-air/h100", "v0.5.4.post2",
        "glm-4.5-air 4xH100 SGLang pp4", family="glm-moe", model_spec=GLM_45_AIR, requests=1000,
        lengths=sharegpt(214465, 199904, 1000), pp=4,
        notes="`--pp-size 4`; SGLang's own pipeline (micro-batches in flight) simulated as vLLM's"),
    _sg("glm-4.5-air", "a100-80gb", 4, "bf16", 2971.88, "glm-4.5-air/a100", "v0.5.4.post2",
        "glm-4.5-air 4xA100 SGLang", family="glm-moe", model_spec=GLM_45_AIR, requests=1000,
        lengths=sharegpt(214465, 199873, 1000), notes="A100 SXM 80GB; inline spec; `--tp-size 4`; " + SPREAD),
    _sg("qwen3-14b", "h100-sxm", 1, "bf16", 4043.89, "qwen3-14b/h100", "v0.5.5.post1", "qwen3-14b 1xH100 SGLang",
        family="qwen3-dense", model_spec=QWEN3_14B, requests=1000, lengths=sharegpt(217393, 201628, 1000),
        notes="inline spec; defaults; " + SPREAD),
    _sg("qwen3-14b", "h100-sxm", 1, "fp8", 5019.64, "qwen3-14b/h100", "v0.5.5.post1",
        "qwen3-14b 1xH100 SGLang fp8", family="qwen3-dense", model_spec=QWEN3_14B, requests=1000,
        lengths=sharegpt(217393, 201833, 1000), notes="Qwen3-14B-FP8 (block fp8), inline spec; " + SPREAD),
    _sg("qwen3-14b", "a100-80gb", 1, "bf16", 2542.06, "qwen3-14b/a100", "v0.5.5.post1", "qwen3-14b 1xA100 SGLang",
        family="qwen3-dense", model_spec=QWEN3_14B, requests=1000, lengths=sharegpt(217393, 201706, 1000),
        notes="A100 SXM 80GB; inline spec; defaults; " + SPREAD),
    _sg("qwen3-32b", "h100-sxm", 1, "bf16", 814.03, "qwen3-32b/h100", "v0.5.5.post1", "qwen3-32b 1xH100 SGLang",
        family="qwen3-dense", model_spec=QWEN3_32B, requests=1000, lengths=sharegpt(217393, 201826, 1000),
        notes="inline spec; defaults; " + SPREAD),
    _sg("qwen3-32b", "a100-80gb", 1, "bf16", 672.56, "qwen3-32b/a100", "v0.5.5.post1", "qwen3-32b 1xA100 SGLang",
        family="qwen3-dense", model_spec=QWEN3_32B, requests=1000, lengths=sharegpt(217393, 201439, 1000),
        notes="A100 SXM 80GB; inline spec; defaults; " + SPREAD),
    # -- GPUStack: TensorRT-LLM (trtllm-serve) -------------------------------------------------------------
    _tr("deepseek-v3", "h200", 8, "fp8", 1618.94, "deepseek-r1/h200", "v1.0.0", "deepseek-r1 8xH200 TensorRT-LLM",
        family="deepseek", requests=1000, lengths=sharegpt(219171, 200813, 1000), ep=8,
        notes=f"{DSR1}; `trtllm-serve --tp_size 8 --ep_size 8`; all-to-all priced from the NVLink figures; "
              + SPREAD),
    _tr("gpt-oss-120b", "h100-sxm", 1, "mxfp4", 1013.72, "gpt-oss-120b/h100", "v1.0.0",
        "gpt-oss-120b 1xH100 TensorRT-LLM", family="gpt-oss", requests=1000,
        lengths=sharegpt(215312, 193874, 1000), max_model_len=32768,
        notes="`trtllm-serve openai/gpt-oss-120b --max_seq_len 32768`; " + SPREAD),
    _tr("gpt-oss-20b", "h100-sxm", 1, "mxfp4", 3615.45, "gpt-oss-20b/h100", "v1.2.0rc1",
        "gpt-oss-20b 1xH100 TensorRT-LLM", family="gpt-oss", model_spec=GPT_OSS_20B, requests=1000,
        lengths=sharegpt(215312, 191726, 1000), notes="inline spec; `trtllm-serve openai/gpt-oss-20b`; " + SPREAD),
    _tr("qwen3-14b", "h100-sxm", 1, "bf16", 4000.99, "qwen3-14b/h100", "v1.2.0rc1", "qwen3-14b 1xH100 TensorRT-LLM",
        family="qwen3-dense", model_spec=QWEN3_14B, requests=1000, lengths=sharegpt(217393, 201612, 1000),
        notes="inline spec; `trtllm-serve Qwen/Qwen3-14B`; " + SPREAD),
    _tr("qwen3-14b", "a100-80gb", 1, "bf16", 2770.99, "qwen3-14b/a100", "v1.2.0rc1", "qwen3-14b 1xA100 TensorRT-LLM",
        family="qwen3-dense", model_spec=QWEN3_14B, requests=1000, lengths=sharegpt(217393, 201471, 1000),
        notes="A100 SXM 80GB; inline spec; defaults; " + SPREAD),
    _tr("qwen3-32b", "h100-sxm", 1, "bf16", 1280.04, "qwen3-32b/h100", "v1.2.0rc1", "qwen3-32b 1xH100 TensorRT-LLM",
        family="qwen3-dense", model_spec=QWEN3_32B, requests=1000, lengths=sharegpt(217393, 201723, 1000),
        notes="inline spec; defaults; " + SPREAD),
    _tr("qwen3-32b", "a100-80gb", 1, "bf16", 987.91, "qwen3-32b/a100", "v1.2.0rc1", "qwen3-32b 1xA100 TensorRT-LLM",
        family="qwen3-dense", model_spec=QWEN3_32B, requests=1000, lengths=sharegpt(217393, 201412, 1000),
        notes="A100 SXM 80GB; inline spec; defaults; " + SPREAD),
    # -- TensorRT-LLM performance overview (trtllm-bench) --------------------------------------------------
    _bench("llama-3.1-8b", "h100-sxm", 1, "fp8", 1000, 1000, 3000, 15220, "Llama 3.1 8B, H100 TP1 (FP8)",
           "llama-3.1-8b 1xH100 fp8 1000/1000", family="llama-dense",
           notes="nvidia/Llama-3.1-8B-Instruct-FP8 (ModelOpt fp8)"),
    _bench("llama-3.1-8b", "h100-sxm", 1, "fp8", 5000, 500, 1500, 3459, "Llama 3.1 8B, H100 TP1 (FP8)",
           "llama-3.1-8b 1xH100 fp8 5000/500", family="llama-dense",
           notes="nvidia/Llama-3.1-8B-Instruct-FP8 (ModelOpt fp8)"),
    _bench("llama-3.1-8b", "h200", 1, "fp8", 1000, 1000, 3000, 17744, "Llama 3.1 8B, H200 TP1 (FP8)",
           "llama-3.1-8b 1xH200 fp8 1000/1000", family="llama-dense",
           notes="nvidia/Llama-3.1-8B-Instruct-FP8 (ModelOpt fp8)"),
    _bench("llama-3.1-70b", "h100-sxm", 2, "fp8", 1000, 1000, 3000, 4205, "Llama 3.3 70B, H100 TP2 (FP8)",
           "llama-3.3-70b 2xH100 fp8 1000/1000", family="llama-dense",
           notes="nvidia/Llama-3.3-70B-Instruct-FP8 (Llama 3.1 70B's shapes: the preset)"),
    _bench("llama-3.1-70b", "h200", 1, "fp8", 1000, 1000, 3000, 2909, "Llama 3.3 70B, H200 TP1 (FP8)",
           "llama-3.3-70b 1xH200 fp8 1000/1000", family="llama-dense",
           notes="nvidia/Llama-3.3-70B-Instruct-FP8 (Llama 3.1 70B's shapes: the preset)"),
    _bench("llama-3.1-70b", "b200", 1, "nvfp4", 1000, 1000, 3000, 7007, "Llama 3.3 70B, B200 TP1 (FP4)",
           "llama-3.3-70b 1xB200 nvfp4 1000/1000", family="llama-dense",
           notes="nvidia/Llama-3.3-70B-Instruct-FP4 (ModelOpt NVFP4)"),
    _bench("llama-3.1-405b", "h100-sxm", 8, "fp8", 1000, 1000, 3000, 2919, "Llama 3.1 405B, H100 TP8 (FP8)",
           "llama-3.1-405b 8xH100 fp8 1000/1000", family="llama-dense", model_spec=LLAMA_31_405B,
           notes="nvidia/Llama-3.1-405B-Instruct-FP8; inline spec"),
    _bench("llama-3.1-405b", "h200", 8, "fp8", 1000, 1000, 3000, 3330, "Llama 3.1 405B, H200 TP8 (FP8)",
           "llama-3.1-405b 8xH200 fp8 1000/1000", family="llama-dense", model_spec=LLAMA_31_405B,
           notes="nvidia/Llama-3.1-405B-Instruct-FP8; inline spec"),
    _bench("llama-3.1-405b", "b200", 4, "nvfp4", 1000, 1000, 3000, 5209, "Llama 3.1 405B, B200 TP4 (FP4)",
           "llama-3.1-405b 4xB200 nvfp4 1000/1000", family="llama-dense", model_spec=LLAMA_31_405B,
           notes="nvidia/Llama-3.1-405B-Instruct-FP4 (ModelOpt NVFP4); inline spec"),
    _bench("qwen3-235b-a22b", "h100-sxm", 8, "fp8", 1000, 1000, 3000, 14898, "Qwen3-235B-A22B, H100 TP8 (FP8)",
           "qwen3-235b-a22b 8xH100 fp8 1000/1000", family="qwen3-moe", model_spec=QWEN3_235B_A22B,
           not_checked=ADP,
           notes="the overview's MoE options file enables attention data parallelism (`enable_attention_dp`)"),
    _bench("qwen3-235b-a22b", "b200", 8, "nvfp4", 1000, 1000, 3000, 42391, "Qwen3-235B-A22B, B200 TP8 (FP4)",
           "qwen3-235b-a22b 8xB200 nvfp4 1000/1000", family="qwen3-moe", model_spec=QWEN3_235B_A22B,
           not_checked=ADP,
           notes="the overview's MoE options file enables attention data parallelism (`enable_attention_dp`)"),
    _bench("qwen3-30b-a3b", "b200", 1, "nvfp4", 1000, 1000, 3000, 25828, "Qwen3-30B-A3B, B200 TP1 (FP4)",
           "qwen3-30b-a3b 1xB200 nvfp4 1000/1000", family="qwen3-moe",
           not_checked=ADP_LIMITS,
           notes="the overview's MoE options file enables attention data parallelism (`enable_attention_dp`; "
                 "at TP1 it changes nothing, but the engine's batch limits for it are not published)"),
]


def scenario(point: dict[str, Any], suffix: str = "") -> Any:
    """The point's deployment as a scenario: every request sent at once (a closed loop of as many
    clients as requests, no think time), on the point's engine preset with the point's scheduler
    settings, on ``point['gpu'] + suffix``."""
    lengths = point.get("lengths") or {"prompt_tokens": {"dist": "fixed", "value": point["prompt"]},
                                       "output_tokens": {"dist": "fixed", "value": point["output"]}}
    engine: dict[str, Any] = {"preset": point["engine"]}
    if "cuda_graph" in point:
        engine["cuda_graph"] = point["cuda_graph"]
    overrides: dict[str, Any] = {
        "name": point["name"], "model": point.get("model_spec", point["model"]), "hardware": point["gpu"] + suffix,
        "deployment.tensor_parallel_size": point["tp"], "deployment.quantization": point["quantization"],
        "deployment.expert_parallel_size": point.get("ep", 1),
        "deployment.pipeline_parallel_size": point.get("pp", 1),
        "num_requests": point["requests"], "warmup_s": 0, "cooldown_s": 0, "engine": engine,
        "workload.arrival": {"process": "closed_loop", "concurrency": point["requests"], "think_time_s": 0},
        "workload.prompt_tokens": lengths["prompt_tokens"], "workload.output_tokens": lengths["output_tokens"],
        "scheduler": {"max_model_len": point.get("max_model_len", 16384), **point.get("scheduler", {})},
        "slo": {"ttft_p99_ms": 1e7, "tpot_p99_ms": 1e7}}
    return load_scenario(BASE, overrides)


def predict(point: dict[str, Any], suffix: str = "") -> float:
    """The point's metric in the simulator (:func:`scenario`): output tokens over the time to the last
    completion."""
    req = simulate(scenario(point, suffix)).requests
    req = req[req["finish_time"].notna()]
    return float(req["num_output_tokens"].sum() / req["finish_time"].max())


def summary(rows: list[dict[str, Any]]) -> str:
    """How many points, the median and the worst |error| of ``rows`` (checked points only)."""
    err = np.abs([r["error"] for r in rows if r.get("error") is not None])
    if not len(err):
        return "0 checked"
    return f"{len(err)} checked, median |error| {np.median(err):.0%}, worst {err.max():.0%}"


def combined_table(rows: list[dict[str, Any]]) -> str:
    """|error| per model family and engine over ``rows`` (these points and ``published_moe.py``'s
    vLLM points, every metric), as a markdown table: in each cell the points checked, the median and
    the worst |error|; then the points not checked."""
    engines = ["vllm-v1", "sglang", "trtllm"]
    lines = ["| family | " + " | ".join(f"`{e}`" for e in engines) + " | all engines | not checked |",
             "|---" * (len(engines) + 3) + "|"]
    for fam in [*sorted({r["family"] for r in rows}), "all"]:
        cells = []
        for eng in [*engines, None]:
            err = [abs(r["error"]) for r in rows if fam in ("all", r["family"]) and eng in (None, r["engine"])
                   and r.get("error") is not None]
            cells.append("—" if not err else f"{len(err)}, {np.median(err):.0%} / {max(err):.0%}")
        skipped = sum(1 for r in rows if fam in ("all", r["family"]) and r.get("not_checked"))
        lines.append(f"| {fam} | " + " | ".join(cells) + f" | {skipped} |")
    return "\n".join(lines)


def load(r: dict[str, Any]) -> str:
    """The point's load in words (requests at once, lengths)."""
    if "prompt" in r:
        return f"{r['requests']:,} requests at once, {r['prompt']}/{r['output']} tokens"
    return f"{r['requests']:,} ShareGPT requests at once"


def row_line(r: dict[str, Any], suffix: str = "") -> str:
    """One markdown row of the published-points table (``suffix``: the profile suffix run)."""
    gpus = (f"{r['tp'] * r.get('pp', 1)} x {r['gpu']}{suffix}" + (f" (EP {r['ep']})" if r.get("ep", 1) > 1 else "")
            + (f" (PP {r['pp']})" if r.get("pp", 1) > 1 else ""))
    pred = "–" if r.get("predicted") is None else f"{r['predicted']:,.2f}"
    err = f"not checked: {r['not_checked']}" if r.get("not_checked") else f"{r['error']:+.0%}"
    return (f"| {r['model']} ({r['quantization']}) | {gpus} | {r['engine_label']} (`{r['engine']}` preset) "
            f"| {load(r)} | output tok/s | {r['published']:,.2f} | {pred} | {err} |")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--only", default=None, help="run only the point of this name")
    ap.add_argument("--profile-suffix", default="", help="e.g. -datasheet: the vendor-peak rooflines")
    ap.add_argument("--out", default=str(ROOT / "benchmarks/results/published_engines.json"))
    args = ap.parse_args()
    points = [p for p in POINTS if args.only in (None, p["name"])]
    if not points:
        raise SystemExit(f"error: --only = {args.only!r}: no such point (names: {[p['name'] for p in POINTS]})")
    t0 = time.perf_counter()
    rows = []
    for p in points:
        t = time.perf_counter()
        pred = None if p.get("not_checked") else predict(p, args.profile_suffix)
        rows.append({**{k: v for k, v in p.items() if k not in ("lengths", "model_spec")}, "predicted": pred,
                     "error": None if pred is None else pred / p["published"] - 1.0,
                     "wall_s": time.perf_counter() - t})
        done = "not checked" if pred is None else f"{pred:,.1f} ({pred / p['published'] - 1.0:+.0%})"
        print(f"  {p['name']}: {done} [{rows[-1]['wall_s']:.0f} s]", file=sys.stderr, flush=True)
    print("| model | GPUs | engine | load | metric | published | predicted | error |")
    print("|---|---|---|---|---|---|---|---|")
    for r in rows:
        print(row_line(r, args.profile_suffix))
    print()
    for key in ("family", "engine"):
        for value in [*sorted({r[key] for r in rows}), "all"]:
            sel = [r for r in rows if value in ("all", r[key])]
            skipped = sum(1 for r in sel if r.get("not_checked"))
            print(f"{key} {value}: {summary(sel)}" + (f"; {skipped} not checked" if skipped else ""))
        print()
    vllm = []
    if args.only is None:
        for p in published_moe.POINTS:
            pred = published_moe.predict(p, args.profile_suffix)
            vllm.append({"name": p["name"], "family": p["family"], "engine": "vllm-v1", "metric": p["metric"],
                         "published": p["published"], "predicted": pred, "error": pred / p["published"] - 1.0})
        print("With published_moe.py's vLLM points (TPOT and throughput), |error| per family and engine "
              "(each cell: points checked, median / worst):\n")
        print(combined_table(rows + vllm))
        print()
    wall = time.perf_counter() - t0
    print(f"{len(rows)} points in {wall:.0f} s wall; load average {os.getloadavg()[0]:.1f}")
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps({
        "points": rows, "vllm_points": vllm, "profile_suffix": args.profile_suffix, "wall_s": wall,
        "cpu_count": os.cpu_count(),
        "load_average_1min_at_end": os.getloadavg()[0], "python": platform.python_version(),
        "machine": platform.machine(), "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
    }, indent=1, default=float) + "\n")


if __name__ == "__main__":
    main()
