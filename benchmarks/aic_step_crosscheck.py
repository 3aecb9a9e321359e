"""Step-level and op-by-op cross-check of the ``kernel_table`` cost model against AIConfigurator's own
estimator over the same kernel database.

The shipped GPU profiles (``hwprofiles/h100-sxm``, ``h200``, ...) hold a compact subset of NVIDIA
AIConfigurator's measured kernels; AIConfigurator itself composes the whole database into a step
time (``aiconfigurator_core.sdk.engine.EngineHandle``: the model's op list, each op looked up in the
same tables, summed). This script prints, for each case below, our step time and AIConfigurator's,
per op, for decode steps (1-256 requests at ``--context`` tokens each) and single-prompt prefill
steps (512-8,192 tokens), and writes the rows as JSON. Nothing here is fitted to anything.

Cases (the MLPerf llama2-70b deployments of ``examples/published/`` and a 16-bit 8B model):
llama-2-70b FP8 weights + FP8 KV on h100-sxm TP2 and on h200 TP1, llama-3-8b bf16 on h100-sxm TP1.
AIConfigurator runs on the system, framework and version the profile was built from
(``provenance.system``, ``provenance.framework``, ``provenance.versions``).

Op groups (AIConfigurator's op names in brackets):

* ``qkv``, ``o_proj``, ``gate_up``, ``down``: the layer GEMMs x layers [qkv_gemm, proj_gemm,
  gate_ffn1_gemm, ffn2_gemm]; ``lm_head``: once per sampled row [logits_gemm];
* ``attention``: x layers [context_attention / generation_attention; AIConfigurator's context
  attention adds 1.1 x (RoPE + KV write) as memory ops];
* ``all_reduce``: 2 per layer [ar_1, ar_2, plus embedding_ar: vLLM's vocab-parallel embedding];
* ``elementwise``: ours RMSNorm (2 per layer + final), rotary, SiLU-and-multiply, 2 residual adds,
  KV write, sampling [add_norm_1, add_norm_2, act_gate, embedding: ``bytes / (0.8 x bandwidth) + 3 us``
  each];
* ``overhead``: our engine CPU overhead (``overhead.step_s`` + ``per_seq_s``) [none: AIConfigurator's
  step is GPU time only].

Needs ``aiconfigurator-core`` (``pip install 'aiconfigurator-core==0.12.0'``, the wheel the profiles
were built from; no torch, no GPU)::

    python benchmarks/aic_step_crosscheck.py [--context 1000] [--all] [--out FILE.json]

docs/aic-crosscheck.md has the results and what explains each difference.
"""
from __future__ import annotations

import argparse
import json
import logging
import sys
import tempfile
from dataclasses import dataclass
from importlib.metadata import version as package_version
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from simulator.cost.base import BatchShape  # noqa: E402
from simulator.cost.factory import make_cost_model  # noqa: E402
from simulator.run.resolve import resolve  # noqa: E402
from simulator.scenario.config import scenario_from_dict  # noqa: E402
from simulator.scenario.models import ModelSpec  # noqa: E402

GROUPS = ("qkv", "o_proj", "gate_up", "down", "lm_head", "attention", "all_reduce", "elementwise", "overhead")
KERNELS = GROUPS[:7]
"""The groups both sides take from the same measured tables."""
DECODE = (1, 16, 64, 256)
PREFILL = (512, 2048, 8192)
CHUNK = (512, 1536)
"""A prompt chunk after cached tokens (chunked prefill): tokens, cached tokens."""
MIXED = (2048, 256)
"""A mixed step: one prompt's tokens beside this many decodes."""

#: AIConfigurator op name (without its ``context_`` / ``generation_`` prefix) -> our group.
AIC_GROUP = {"qkv_gemm": "qkv", "proj_gemm": "o_proj", "gate_ffn1_gemm": "gate_up", "ffn2_gemm": "down",
             "logits_gemm": "lm_head", "attention": "attention", "ar_1": "all_reduce", "ar_2": "all_reduce",
             "embedding_ar": "all_reduce", "p2p": "all_reduce", "add_norm_1": "elementwise",
             "add_norm_2": "elementwise", "act_gate": "elementwise", "embedding": "elementwise"}


@dataclass(frozen=True)
class Case:
    model: str
    hardware: str
    tp: int
    quantization: str | None
    kv_cache_dtype: str

    @property
    def label(self) -> str:
        q = self.quantization or "bf16"
        return f"{self.model} {q} (KV {self.kv_cache_dtype}) on {self.hardware} TP{self.tp}"


CASES = (Case("llama-2-70b", "h100-sxm", 2, "fp8", "fp8"),
         Case("llama-2-70b", "h200", 1, "fp8", "fp8"),
         Case("llama-3-8b", "h100-sxm", 1, None, "auto"))
#: ``--all`` adds the other default GPUs: the L40S MLPerf deployment (FP8 weights, 16-bit KV), B200, A100.
EXTRA = (Case("llama-2-70b", "l40s", 2, "fp8", "auto"),
         Case("llama-2-70b", "b200", 1, "fp8", "fp8"),
         Case("llama-3-8b", "a100-80gb", 1, None, "auto"))


# -- ours -------------------------------------------------------------------------------------------
def our_model(case: Case) -> tuple[Any, Any]:
    """The resolved scenario and the cost model the simulator builds for it."""
    dep: dict[str, Any] = {"tensor_parallel_size": case.tp, "kv_cache_dtype": case.kv_cache_dtype}
    if case.quantization:
        dep["quantization"] = case.quantization
    sc = scenario_from_dict({"name": "aic-crosscheck", "model": case.model, "hardware": case.hardware,
                             "deployment": dep, "num_requests": 1,
                             "workload": {"arrival": {"process": "poisson", "rate_per_s": 1},
                                          "prompt_tokens": {"dist": "fixed", "value": 128},
                                          "output_tokens": {"dist": "fixed", "value": 16}}})
    rs = resolve(sc)
    return rs, make_cost_model(rs.profile, rs.model, case.tp, rs.precision)


def our_ops(cm: Any, model: ModelSpec, shape: BatchShape) -> dict[str, float]:
    """Per-group milliseconds of one step, from the model's own per-op functions (checked against
    its ``breakdown`` total)."""
    L = model.num_layers
    tokens, rows = shape.num_tokens, shape.num_sampled_tokens
    op = cm.op_time_s
    out = {"qkv": L * op("qkv_proj", tokens), "o_proj": L * op("o_proj", tokens),
           "gate_up": L * op("gate_up_proj", tokens), "down": L * op("down_proj", tokens),
           "lm_head": op("lm_head", rows) if rows else 0.0}
    attn = sum(L * op("attn_prefill", q, c) for q, c in zip(shape.prefill_tokens, shape.prefill_computed_tokens,
                                                             strict=True))
    if shape.num_decodes:
        attn += L * op("attn_decode", shape.num_decodes, shape.decode_context_tokens // shape.num_decodes)
    out["attention"] = attn
    out["all_reduce"] = 2 * L * op("all_reduce", tokens) if cm.tp > 1 else 0.0
    out["elementwise"] = (L * (2 * op("rmsnorm", tokens) + op("rotary", tokens) + op("silu_mul", tokens)
                               + 2 * op("residual_add", tokens) + op("kv_write", tokens))
                          + op("rmsnorm", tokens) + (op("sampling", rows) if rows else 0.0))
    bd = cm.breakdown(shape)
    out["overhead"] = bd.overhead_s
    total = sum(out.values())
    if abs(total - bd.total_s) > 1e-9 * bd.total_s:
        raise RuntimeError(f"the per-op sum {total} s is not the cost model's step {bd.total_s} s: "
                           "an op is missing from this script's decomposition")
    return {k: 1e3 * v for k, v in out.items()}


# -- AIConfigurator ---------------------------------------------------------------------------------
def _config_json(model: ModelSpec) -> dict[str, Any]:
    """A Hugging Face ``config.json`` with our preset's dimensions (so both sides price the same shapes)."""
    return {"architectures": ["LlamaForCausalLM"], "model_type": "llama", "hidden_size": model.hidden_size,
            "intermediate_size": model.intermediate_size, "num_attention_heads": model.num_attention_heads,
            "num_key_value_heads": model.num_key_value_heads, "num_hidden_layers": model.num_layers,
            "vocab_size": model.vocab_size, "max_position_embeddings": model.max_model_len,
            "head_dim": model.head_dim, "torch_dtype": "bfloat16", "rms_norm_eps": 1e-5}


def aic_engine(case: Case, rs: Any, workdir: Path) -> tuple[Any, str]:
    """AIConfigurator's compiled engine for the case, on the system/framework/version the profile was
    built from."""
    from aiconfigurator_core.sdk.engine import EngineHandle

    prov = rs.profile.provenance or {}
    system, framework = prov["system"], prov.get("framework", "vllm")
    version = prov["versions"]["gemm fp8" if case.quantization == "fp8" else "gemm bf16"]
    mdir = workdir / case.model
    mdir.mkdir(parents=True, exist_ok=True)
    (mdir / "config.json").write_text(json.dumps(_config_json(rs.model)))
    fp8 = case.quantization == "fp8"
    handle = EngineHandle.compile(str(mdir), system, framework, backend_version=version, tp_size=case.tp,
                                  gemm_quant_mode="fp8" if fp8 else "bfloat16",
                                  kvcache_quant_mode="fp8" if case.kv_cache_dtype == "fp8" else "bfloat16",
                                  fmha_quant_mode="bfloat16")
    return handle, f"aiconfigurator-core {package_version('aiconfigurator-core')}: {system} {framework} {version}"


def _fold(entries: list[tuple]) -> dict[str, float]:
    out = dict.fromkeys(GROUPS, 0.0)
    for name, ms, *_ in entries:
        key = name.split("_", 1)[1]
        if key not in AIC_GROUP:
            raise KeyError(f"AIConfigurator op {name!r} has no group here")
        out[AIC_GROUP[key]] += ms
    return out


def aic_decode(handle: Any, batch: int, context: int) -> dict[str, float]:
    """One decode step of ``batch`` requests, each attending over ``context`` tokens. AIConfigurator's
    decode step prices attention at ``s = isl + osl // 2 + 1`` KV tokens: ``isl = context - 2, osl = 2``."""
    return _fold(handle.decode_step_per_op(batch, context - 2, 2))


def aic_prefill(handle: Any, tokens: int, cached: int = 0) -> dict[str, float]:
    """One prompt chunk of ``tokens`` tokens after ``cached`` ones (its ``static_ctx`` phase, whose
    ``isl`` counts the prefix)."""
    ctx, _ = handle.run_static_per_op(batch_size=1, isl=cached + tokens, prefix=cached, osl=1, mode="static_ctx")
    return _fold(ctx)


def aic_mixed(handle: Any, tokens: int, batch: int) -> dict[str, float]:
    """A prompt of ``tokens`` tokens beside ``batch`` decodes, which AIConfigurator prices at
    ``s = tokens + 2`` KV tokens (``isl = tokens, osl = 2``)."""
    shared, ctx, dec = handle.mixed_step_breakdown_per_op(tokens, batch, tokens, 2)
    return _fold([*shared, *ctx, *dec])


# -- the comparison -----------------------------------------------------------------------------------
def run(context: int, cases: tuple[Case, ...] = CASES) -> list[dict[str, Any]]:
    logging.getLogger("aiconfigurator_core").setLevel(logging.ERROR)
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        for case in cases:
            rs, cm = our_model(case)
            handle, aic_db = aic_engine(case, rs, Path(tmp))
            steps = [(f"decode {b} x {context}", BatchShape.decode(b, b * context), aic_decode(handle, b, context))
                     for b in DECODE]
            steps += [(f"prefill {n}", BatchShape.prefill(n), aic_prefill(handle, n)) for n in PREFILL]
            q, c = CHUNK
            steps.append((f"prefill {q} after {c} cached", BatchShape.prefill(q, c), aic_prefill(handle, q, c)))
            q, b = MIXED
            steps.append((f"mixed: prefill {q} + decode {b} x {q + 2}",
                          BatchShape((q,), (0,), b, b * (q + 2), b + 1), aic_mixed(handle, q, b)))
            for label, shape, aic in steps:
                ours = our_ops(cm, rs.model, shape)
                rows.append({"case": case.label, "aic_database": aic_db, "step": label,
                             "ours_ms": ours, "aic_ms": aic,
                             "ours_total_ms": sum(ours.values()), "aic_total_ms": sum(aic.values()),
                             "ours_gpu_ms": sum(ours.values()) - ours["overhead"]})
    return rows


def _ms(x: float) -> str:
    return f"{x:,.1f}" if x >= 10 else f"{x:.2f}"


def _ratio(a: float, b: float) -> str:
    return "–" if b == 0 else f"{a / b:.2f}"


def markdown(rows: list[dict[str, Any]]) -> str:
    """Step totals, then per op (ours / AIConfigurator)."""
    out = ["| case | step | ours (ms) | ours, GPU only | AIConfigurator | ours / AIC | GPU only / AIC "
           "| GEMMs + attention + all-reduce, ours / AIC |", "|---|---|---|---|---|---|---|---|"]
    for r in rows:
        k_ours, k_aic = (sum(r[side][g] for g in KERNELS) for side in ("ours_ms", "aic_ms"))
        out.append(f"| {r['case']} | {r['step']} | {_ms(r['ours_total_ms'])} | {_ms(r['ours_gpu_ms'])} "
                   f"| {_ms(r['aic_total_ms'])} | {_ratio(r['ours_total_ms'], r['aic_total_ms'])} "
                   f"| {_ratio(r['ours_gpu_ms'], r['aic_total_ms'])} | {_ratio(k_ours, k_aic)} |")
    out += ["", "Per op, ours / AIConfigurator (ms):", "",
            "| case | step | " + " | ".join(GROUPS) + " |", "|---|---|" + "---|" * len(GROUPS)]
    for r in rows:
        cells = [f"{_ms(r['ours_ms'][g])} / {_ms(r['aic_ms'][g])}" if r["aic_ms"][g] or r["ours_ms"][g] else "–"
                 for g in GROUPS]
        out.append(f"| {r['case']} | {r['step']} | " + " | ".join(cells) + " |")
    return "\n".join(out)


def _rounded(x: Any) -> Any:
    """Milliseconds to 0.1 us for the JSON file."""
    if isinstance(x, float):
        return round(x, 4)
    if isinstance(x, dict):
        return {k: _rounded(v) for k, v in x.items()}
    if isinstance(x, list):
        return [_rounded(v) for v in x]
    return x


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--context", type=int, default=1000, help="KV tokens per decoding request (default 1000)")
    ap.add_argument("--all", action="store_true", help="also L40S, B200 and A100 (see EXTRA)")
    ap.add_argument("--out", default=None, help="write the rows as JSON here")
    args = ap.parse_args()
    try:
        import aiconfigurator_core  # noqa: F401
    except ImportError:
        sys.exit("aiconfigurator-core is not installed: pip install 'aiconfigurator-core==0.12.0' "
                 "(the wheel the default profiles were built from; no torch or GPU needed)")
    rows = run(args.context, CASES + EXTRA if args.all else CASES)
    print(markdown(rows))
    if args.out:
        Path(args.out).write_text(json.dumps(_rounded(rows), indent=1) + "\n")
        print(f"\nwrote {args.out}")


if __name__ == "__main__":
    main()
