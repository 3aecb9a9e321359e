"""A Hugging Face ``config.json`` read into an inline :class:`~simulator.scenario.models.ModelSpec`.

The families read (by ``model_type``): Llama (``llama``), Mistral (``mistral``), Qwen2/Qwen2.5
(``qwen2``: bias on the QKV projections, which its config does not state), Qwen3 (``qwen3``),
Mixtral (``mixtral``), Qwen-MoE (``qwen2_moe``, ``qwen3_moe``), DeepSeek-V3/R1 (``deepseek_v3``, and
``deepseek_v2`` which shares its fields) and gpt-oss (``gpt_oss``). Another ``model_type`` is an
error naming the ones read: its layout may differ from what the spec counts.

What is read, in the spec's names (``docs/models.md`` says what each models): the dense shape
(``num_hidden_layers``, ``hidden_size``, heads, KV heads, ``head_dim``, ``intermediate_size``,
``vocab_size``, ``max_position_embeddings``, ``tie_word_embeddings``, ``attention_bias``,
``torch_dtype``); experts (``num_local_experts`` / ``num_experts`` / ``n_routed_experts``, top-k,
shared experts, ``moe_intermediate_size``, DeepSeek's ``first_k_dense_replace`` and
``moe_layer_freq``, Qwen-MoE's ``decoder_sparse_step`` and ``mlp_only_layers``); MLA's ranks and head
widths; a sliding window (Mistral v0.1's on every layer, gpt-oss's ``layer_types``). The checkpoint's
``quantization_config`` is returned beside the spec as the ``deployment.quantization`` to serve it
with (``fp8``, ``mxfp4``, ``nvfp4`` from ModelOpt or compressed-tensors, 4-bit AWQ/GPTQ as ``int4``).

Not read: RoPE scaling (the context is ``max_position_embeddings`` as configured), Qwen2's
``use_sliding_window`` (off in every published Qwen2/2.5 checkpoint), biases besides the QKV one,
Qwen-MoE's shared-expert gate (one weight vector per layer).
"""
from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from simulator.errors import ScenarioError
from simulator.scenario.limits import MAX_MODEL_LEN
from simulator.scenario.models import ModelSpec

#: ``model_type`` values read, and the family each belongs to (for the written comment).
FAMILIES: dict[str, str] = {
    "llama": "Llama", "mistral": "Mistral", "qwen2": "Qwen2", "qwen3": "Qwen3", "mixtral": "Mixtral",
    "qwen2_moe": "Qwen2-MoE", "qwen3_moe": "Qwen3-MoE", "deepseek_v2": "DeepSeek-V2", "deepseek_v3": "DeepSeek-V3",
    "gpt_oss": "gpt-oss",
}

_TORCH_DTYPES = {"bfloat16": "bf16", "float16": "fp16", "half": "fp16", "float32": "fp32", "float": "fp32"}


@dataclass(frozen=True)
class ImportedModel:
    """A spec read from ``config.json``, the quantization its checkpoint is stored in (None: its dtype)
    and notes for the written scenario (what was assumed or left out)."""

    spec: ModelSpec
    quantization: str | None = None
    notes: list[str] = field(default_factory=list)


def read_hf_config(path: Path, *, name: str | None = None, field_name: str = "--model-config") -> ImportedModel:
    """Read ``path`` (a ``config.json``, or a folder holding one) into an :class:`ImportedModel`.

    Raises:
        ScenarioError: naming ``field_name`` and the file: missing, not JSON, an unread
        ``model_type``, a missing or invalid dimension.
    """
    file = path / "config.json" if path.is_dir() else path
    if not file.is_file():
        raise ScenarioError(field_name, str(path), "no such file (give a Hugging Face config.json, or the model "
                            "folder holding one)")
    try:
        cfg = json.loads(file.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise ScenarioError(field_name, str(file), f"not a readable JSON file ({exc})") from None
    if not isinstance(cfg, dict):
        raise ScenarioError(field_name, str(file), "a config.json must hold a JSON object")
    if isinstance(cfg.get("text_config"), dict):   # multimodal wrappers keep the language model here
        cfg = {**cfg["text_config"], "quantization_config": cfg.get("quantization_config")}
    model_type = cfg.get("model_type")
    if model_type not in FAMILIES:
        raise ScenarioError(f"{file} model_type", model_type, f"not a family this import reads; read: "
                            f"{', '.join(FAMILIES)} (write the model inline, docs/models.md)")
    label = name or _default_name(file, cfg)
    try:
        spec_fields, notes = _fields(cfg, model_type)
        spec = ModelSpec(name=label, **spec_fields)
    except KeyError as exc:
        raise ScenarioError(f"{file} {exc.args[0]}", None, f"missing from this {FAMILIES[model_type]} config") from None
    except (TypeError, ValueError) as exc:   # pydantic's ValidationError is a ValueError
        raise ScenarioError(f"{file}", model_type, _why(exc)) from None
    quant, qnote = _quantization(cfg.get("quantization_config"))
    return ImportedModel(spec, quant, notes + qnote)


def _why(exc: Exception) -> str:
    if isinstance(exc, ValidationError):
        err = exc.errors(include_url=False)[0]
        loc = ".".join(str(p) for p in err["loc"]) or "config"
        return f"{loc} = {err.get('input')!r}: {err['msg'].removeprefix('Value error, ')}"
    return str(exc)


def _default_name(file: Path, cfg: dict[str, Any]) -> str:
    folder = file.parent.name if file.name == "config.json" else file.stem
    return (cfg.get("_name_or_path") or folder or "imported").split("/")[-1]


def _int(cfg: dict[str, Any], key: str, default: Any = None) -> int:
    value = cfg.get(key, default) if default is not None else cfg[key]
    if value is None and default is not None:
        value = default
    if isinstance(value, bool) or not isinstance(value, int):
        raise ValueError(f"{key} must be an integer, got {value!r}")
    return value


def _fields(cfg: dict[str, Any], model_type: str) -> tuple[dict[str, Any], list[str]]:
    """The spec's fields from one family's config, and notes on what was assumed."""
    heads = _int(cfg, "num_attention_heads")
    out: dict[str, Any] = {
        "num_layers": _int(cfg, "num_hidden_layers"),
        "hidden_size": _int(cfg, "hidden_size"),
        "num_attention_heads": heads,
        "num_key_value_heads": _int(cfg, "num_key_value_heads", heads),
        "intermediate_size": _int(cfg, "intermediate_size"),
        "vocab_size": _int(cfg, "vocab_size"),
        "max_model_len": min(_int(cfg, "max_position_embeddings"), MAX_MODEL_LEN),
        "tie_word_embeddings": bool(cfg.get("tie_word_embeddings", False)),
    }
    notes: list[str] = []
    dtype = cfg.get("torch_dtype") or cfg.get("dtype") or "bfloat16"
    if dtype not in _TORCH_DTYPES:
        raise ValueError(f"torch_dtype {dtype!r} is not one of {', '.join(_TORCH_DTYPES)}")
    out["dtype"] = _TORCH_DTYPES[dtype]
    if cfg.get("head_dim") is not None and model_type not in ("deepseek_v2", "deepseek_v3"):
        out["head_dim"] = _int(cfg, "head_dim")
    if model_type in ("qwen2", "qwen2_moe"):
        out["attention_bias"] = True      # Qwen2's QKV projections carry a bias its config does not state
        notes.append("attention_bias: true (Qwen2's QKV bias, not stated in its config)")
    else:
        out["attention_bias"] = bool(cfg.get("attention_bias", False))
    # -- mixture of experts
    experts = cfg.get("num_local_experts") or cfg.get("num_experts") or cfg.get("n_routed_experts") or 0
    if experts:
        out["num_experts"] = experts
        out["num_experts_per_tok"] = _int(cfg, "num_experts_per_tok", cfg.get("experts_per_token"))
        if cfg.get("moe_intermediate_size"):
            out["moe_intermediate_size"] = _int(cfg, "moe_intermediate_size")
        shared = cfg.get("n_shared_experts") or 0
        shared_width = cfg.get("shared_expert_intermediate_size") or 0
        if shared_width:   # Qwen2-MoE: one shared expert as wide as this many routed ones
            width = out.get("moe_intermediate_size") or out["intermediate_size"]
            if shared_width % width:
                raise ValueError(f"shared_expert_intermediate_size {shared_width} is not a multiple of "
                                 f"moe_intermediate_size {width}")
            shared = shared_width // width
            notes.append(f"num_shared_experts: {shared} (one shared expert {shared_width} wide = {shared} of "
                         f"{width}; its gate is left out)")
        if shared:
            out["num_shared_experts"] = shared
        if model_type in ("deepseek_v2", "deepseek_v3"):
            out["first_k_dense_replace"] = _int(cfg, "first_k_dense_replace", 0)
            out["moe_layer_freq"] = _int(cfg, "moe_layer_freq", 1)
        if model_type in ("qwen2_moe", "qwen3_moe"):
            step, dense = cfg.get("decoder_sparse_step", 1), cfg.get("mlp_only_layers") or []
            if step != 1 or dense:
                raise ValueError(f"decoder_sparse_step {step} / mlp_only_layers {dense}: only every layer MoE "
                                 "is read (decoder_sparse_step 1, mlp_only_layers [])")
    # -- multi-head latent attention
    if cfg.get("kv_lora_rank"):
        for key in ("kv_lora_rank", "qk_nope_head_dim", "qk_rope_head_dim", "v_head_dim"):
            out[key] = _int(cfg, key)
        out["q_lora_rank"] = cfg.get("q_lora_rank") or 0
    # -- sliding window
    window = cfg.get("sliding_window")
    if model_type == "gpt_oss" and window:
        types = cfg.get("layer_types") or []
        out["sliding_window"] = window
        out["sliding_window_layers"] = sum(1 for t in types if t == "sliding_attention") if types \
            else out["num_layers"] // 2
    elif model_type in ("mistral", "mixtral") and window:
        out["sliding_window"] = window
    elif model_type in ("qwen2", "qwen2_moe", "qwen3", "qwen3_moe") and window and cfg.get("use_sliding_window"):
        raise ValueError("use_sliding_window: true (Qwen's per-layer window) is not read; write the model inline")
    if cfg.get("max_position_embeddings", 0) > MAX_MODEL_LEN:
        notes.append(f"max_model_len capped at {MAX_MODEL_LEN:,} (config: {cfg['max_position_embeddings']:,})")
    return out, notes


def _formats(qc: dict[str, Any]) -> set[str]:
    """The weight formats a compressed-tensors ``quantization_config`` names (its own ``format`` or
    its config groups')."""
    groups = qc.get("config_groups")
    found = {str(g.get("format")) for g in groups.values() if isinstance(g, dict) and g.get("format")} \
        if isinstance(groups, dict) else set()
    return found or ({str(qc["format"])} if qc.get("format") else set())


def _quantization(qc: Any) -> tuple[str | None, list[str]]:
    """The ``deployment.quantization`` a checkpoint's ``quantization_config`` is stored in."""
    if not isinstance(qc, dict):
        return None, []
    method = str(qc.get("quant_method", "")).lower()
    if method == "fp8":
        return "fp8", ["checkpoint stored in fp8 (quantization_config): deployment.quantization fp8"]
    if method == "mxfp4":
        return "mxfp4", ["checkpoint stored in MXFP4 (quantization_config): deployment.quantization mxfp4"]
    if method == "modelopt":                 # NVIDIA ModelOpt checkpoints name their algorithm
        algo = str(qc.get("quant_algo", "")).upper()
        if algo in ("NVFP4", "FP8"):
            scheme = algo.lower()
            return scheme, [f"checkpoint stored in {algo} (ModelOpt): deployment.quantization {scheme}"]
    if method == "compressed-tensors" and _formats(qc) == {"nvfp4-pack-quantized"}:
        return "nvfp4", ["checkpoint stored in NVFP4 (compressed-tensors): deployment.quantization nvfp4"]
    if method in ("awq", "gptq") and qc.get("bits", 4) == 4:
        return "int4", [f"checkpoint stored as 4-bit {method.upper()}: deployment.quantization int4"]
    if method in ("awq", "gptq") and qc.get("bits") == 8:
        return "int8", [f"checkpoint stored as 8-bit {method.upper()}: deployment.quantization int8"]
    return None, [f"quantization_config quant_method {method!r} is not read: the weights are counted at the "
                  "model's dtype; set deployment.quantization"]
