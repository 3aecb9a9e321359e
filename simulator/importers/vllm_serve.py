"""A ``vllm serve`` command line read into a scenario (``llmplan import vllm``).

:func:`import_vllm` maps each flag onto the scenario field with vLLM's meaning (the table
:data:`FLAGS`), resolves the model (a ``--model-config`` file, a model folder holding a
``config.json``, or a name matching a preset), validates the result as any scenario is validated,
and returns the YAML text to write: the scenario, with comments saying where each part came from,
which flags were ignored (they do not change serving performance) and which were not understood.
No flag is dropped silently.

What ``vllm serve`` does not say is filled in and marked in the file: the hardware (``--hardware``,
default the H100's measured tables, its datasheet roofline for pipeline stages, which those tables
do not time) and the traffic (``--rate`` Poisson arrivals with chat-like lengths, or
``--trace`` to replay a request log). The engine is ``vllm-v1``: the flags left out take vLLM v1's
defaults (chunked prefill, prefix caching, its step budget and batch size).
"""
from __future__ import annotations

import json
import os
import shlex
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from simulator.errors import ScenarioError
from simulator.importers.hf_config import ImportedModel, read_hf_config
from simulator.scenario.models import MODEL_PRESETS

#: Hugging Face repositories whose config.json each preset transcribes (docs/models.md), lower case;
#: a ``vllm serve`` model name equal to one of these (or to the preset's own name) uses the preset.
PRESET_REPOS: dict[str, tuple[str, ...]] = {
    "llama-3-8b": ("meta-llama/meta-llama-3-8b", "meta-llama/meta-llama-3-8b-instruct"),
    "llama-3-70b": ("meta-llama/meta-llama-3-70b", "meta-llama/meta-llama-3-70b-instruct"),
    "llama-3.1-8b": ("meta-llama/llama-3.1-8b", "meta-llama/llama-3.1-8b-instruct", "meta-llama/meta-llama-3.1-8b",
                     "meta-llama/meta-llama-3.1-8b-instruct"),
    "llama-3.1-70b": ("meta-llama/llama-3.1-70b", "meta-llama/llama-3.1-70b-instruct",
                      "meta-llama/meta-llama-3.1-70b", "meta-llama/meta-llama-3.1-70b-instruct"),
    "llama-2-7b": ("meta-llama/llama-2-7b-hf", "meta-llama/llama-2-7b-chat-hf"),
    "llama-2-70b": ("meta-llama/llama-2-70b-hf", "meta-llama/llama-2-70b-chat-hf"),
    "mistral-7b": ("mistralai/mistral-7b-v0.1", "mistralai/mistral-7b-instruct-v0.1"),
    "mixtral-8x7b": ("mistralai/mixtral-8x7b-v0.1", "mistralai/mixtral-8x7b-instruct-v0.1"),
    "qwen2.5-7b": ("qwen/qwen2.5-7b", "qwen/qwen2.5-7b-instruct"),
    "qwen3-30b-a3b": ("qwen/qwen3-30b-a3b",),
    "deepseek-v3": ("deepseek-ai/deepseek-v3", "deepseek-ai/deepseek-v3-0324", "deepseek-ai/deepseek-r1",
                    "deepseek-ai/deepseek-r1-0528"),
    "gpt-oss-120b": ("openai/gpt-oss-120b",),
}

#: Flags that do not change serving performance: listed in the written file as ignored.
IGNORED = frozenset({
    "host", "port", "api-key", "served-model-name", "trust-remote-code", "download-dir", "load-format",
    "tokenizer", "tokenizer-mode", "revision", "tokenizer-revision", "code-revision", "chat-template",
    "response-role", "uvicorn-log-level", "disable-log-requests", "enable-log-requests", "disable-log-stats",
    "disable-uvicorn-access-log", "seed", "max-logprobs", "allowed-origins", "allowed-methods", "allowed-headers",
    "ssl-keyfile", "ssl-certfile", "root-path", "middleware", "enable-auto-tool-choice", "tool-call-parser",
    "reasoning-parser", "generation-config", "hf-token", "config-format", "lora-modules", "disable-fastapi-docs",
    "enable-prompt-tokens-details", "return-tokens-as-token-ids", "guided-decoding-backend",
    "structured-outputs-config", "enable-server-load-tracking", "otlp-traces-endpoint", "model-impl",
})

_ALIASES = {"tp": "tensor-parallel-size", "pp": "pipeline-parallel-size", "dp": "data-parallel-size",
            "q": "quantization"}

#: vLLM ``--quantization`` methods -> ``deployment.quantization`` (AWQ/GPTQ and their Marlin kernels are
#: 4-bit weight-only, int4 here).
QUANT_METHODS = {"fp8": "fp8", "mxfp4": "mxfp4", "modelopt": "fp8", "modelopt_fp4": "nvfp4",
                 "awq": "int4", "awq_marlin": "int4", "gptq": "int4",
                 "gptq_marlin": "int4", "bitsandbytes": "int4", "experts_int8": "int8"}
KV_DTYPES = ("auto", "bfloat16", "float16", "fp8", "fp8_e4m3", "fp8_e5m2")
_KV_NAMES = {"bfloat16": "bf16", "float16": "fp16"}


def _int(text: str) -> int:
    """An integer, with vLLM's human-readable suffixes (``32k``, ``1M``) for token counts."""
    t = text.strip()
    scale = {"k": 1000, "K": 1024, "m": 1000**2, "M": 1024**2}.get(t[-1:], 1) if t else 1
    digits = t[:-1] if scale != 1 else t
    value = float(digits) * scale
    if not value.is_integer():
        raise ValueError("not an integer")
    return int(value)


def _float(text: str) -> float:
    return float(text)


def _bool(text: str) -> bool:
    low = text.lower()
    if low in ("true", "1", "yes"):
        return True
    if low in ("false", "0", "no"):
        return False
    raise ValueError("not a boolean")


@dataclass(frozen=True)
class Flag:
    """One understood flag: the scenario field it sets and how its value is read (None: a switch)."""

    field: str
    parse: Callable[[str], Any] | None
    allowed: str


FLAGS: dict[str, Flag] = {
    "max-num-seqs": Flag("scheduler.max_num_seqs", _int, "an integer >= 1"),
    "max-num-batched-tokens": Flag("scheduler.max_num_batched_tokens", _int, "an integer >= 1"),
    "max-model-len": Flag("scheduler.max_model_len", _int, "an integer >= 1 (32k, 1M allowed)"),
    "block-size": Flag("scheduler.block_size", _int, "an integer >= 1"),
    "gpu-memory-utilization": Flag("scheduler.gpu_memory_utilization", _float, "a number in (0, 1]"),
    "num-gpu-blocks-override": Flag("scheduler.num_gpu_blocks_override", _int, "an integer >= 1"),
    "long-prefill-token-threshold": Flag("scheduler.long_prefill_token_threshold", _int, "an integer >= 1"),
    "swap-space": Flag("scheduler.swap_space_gib", _float, "GiB >= 0"),
    "scheduling-policy": Flag("scheduler.scheduling_policy", str, "fcfs or priority"),
    "preemption-mode": Flag("scheduler.preemption_mode", str, "recompute or swap"),
    "num-scheduler-steps": Flag("scheduler.num_scheduler_steps", _int, "an integer in 1..64"),
    "enable-chunked-prefill": Flag("scheduler.policy", None, "a switch"),
    "enable-prefix-caching": Flag("scheduler.enable_prefix_caching", None, "a switch"),
    "tensor-parallel-size": Flag("deployment.tensor_parallel_size", _int, "an integer >= 1"),
    "pipeline-parallel-size": Flag("deployment.pipeline_parallel_size", _int, "an integer >= 1"),
    "data-parallel-size": Flag("deployment.data_parallel_size", _int, "an integer >= 1"),
    "enable-expert-parallel": Flag("deployment.expert_parallel_size", None, "a switch"),
    "quantization": Flag("deployment.quantization", str, ", ".join(QUANT_METHODS)),
    "kv-cache-dtype": Flag("deployment.kv_cache_dtype", str, ", ".join(KV_DTYPES)),
    "dtype": Flag("deployment.quantization", str, "auto, bfloat16, float16, half"),
    "enforce-eager": Flag("engine.cuda_graph", None, "a switch"),
    "async-scheduling": Flag("engine.async_scheduling", None, "a switch"),
    "speculative-config": Flag("speculative_config", json.loads, "a JSON object"),
    "model": Flag("model", str, "a model name or folder"),
}


@dataclass
class Imported:
    """The scenario read from the flags (a dict), the YAML to write and what the import noted."""

    scenario: dict[str, Any]
    text: str
    ignored: list[str] = field(default_factory=list)
    unknown: list[str] = field(default_factory=list)


def parse_flags(args: list[str]) -> tuple[str | None, dict[str, str | bool], list[str]]:
    """Split ``vllm serve`` arguments into the model (the positional argument), the flags (value,
    or a bool for a switch and its ``--no-`` form) and the tokens that are neither (unknown)."""
    args = list(args)
    if args[:2] == ["vllm", "serve"]:
        args = args[2:]
    elif args[:1] == ["serve"]:
        args = args[1:]
    model: str | None = None
    flags: dict[str, str | bool] = {}
    stray: list[str] = []
    i = 0
    while i < len(args):
        tok = args[i]
        i += 1
        if not tok.startswith("-") or tok == "-":
            if model is None:
                model = tok
            else:
                stray.append(tok)
            continue
        name, eq, value = tok.lstrip("-").partition("=")
        name = _ALIASES.get(name, name).replace("_", "-")
        negated = name.startswith("no-") and name[3:] in FLAGS and FLAGS[name[3:]].parse is None
        if negated:
            flags[name[3:]] = False if not eq else not _switch(name, value)
            continue
        known = FLAGS.get(name)
        takes_value = known.parse is not None if known is not None else (
            not eq and i < len(args) and not args[i].startswith("-"))
        if eq:
            flags[name] = value if known is None or known.parse is not None else _switch(name, value)
        elif takes_value:
            if i >= len(args) or (args[i].startswith("--") and known is not None):
                raise ScenarioError(f"--{name}", None, f"needs a value ({known.allowed if known else 'a value'})")
            flags[name] = args[i]
            i += 1
        else:
            flags[name] = True
    return model, flags, stray


def _switch(name: str, value: str) -> bool:
    try:
        return _bool(value)
    except ValueError:
        raise ScenarioError(f"--{name}", value, "a switch takes true or false") from None


def resolve_model_arg(model: str | None, model_config: Path | None, base: Path) -> tuple[Any, str, str | None,
                                                                                        list[str]]:
    """The scenario's ``model`` (a preset name or an inline spec dict), a comment saying where it came
    from, the checkpoint's quantization (None: its dtype) and notes."""
    if model_config is not None:
        got = read_hf_config(model_config, name=_short(model) if model else None)
        return _inline(got), f"model: read from {model_config} ({got.spec.name})", got.quantization, got.notes
    if model is None or not model.strip():
        raise ScenarioError("model", model, "give the model as vllm serve's first argument (a name or a folder "
                            "with config.json), or --model-config config.json")
    folder = Path(model).expanduser()
    if not folder.is_absolute():
        folder = base / folder if (base / folder).exists() else folder
    if folder.is_dir():
        got = read_hf_config(folder, name=folder.name, field_name="model")
        return _inline(got), f"model: read from {folder / 'config.json'}", got.quantization, got.notes
    preset = match_preset(model)
    if preset is not None:
        return preset, f"model: {model} is the preset {preset}", None, []
    raise ScenarioError("model", model, f"not a preset and not a folder with config.json; give --model-config "
                        f"config.json (the model's Hugging Face config), or a preset: {', '.join(MODEL_PRESETS)}")


def match_preset(model: str) -> str | None:
    """The preset a ``vllm serve`` model name stands for: a preset's own name or one of the Hugging Face
    repositories it transcribes (case-insensitive); None when none matches."""
    low = model.strip().lower().rstrip("/")
    if low in MODEL_PRESETS:
        return low
    for preset, repos in PRESET_REPOS.items():
        if low in repos:
            return preset
    return None


def _short(model: str) -> str:
    return model.rstrip("/").split("/")[-1]


def _inline(got: ImportedModel) -> dict[str, Any]:
    """The spec as a YAML mapping: the fields that differ from their defaults (``head_dim`` kept)."""
    spec = got.spec
    data = spec.model_dump(exclude_defaults=True)
    data["name"] = spec.name
    return {"name": spec.name, **{k: v for k, v in data.items() if k != "name"}}


def import_vllm(args: list[str], *, model_config: Path | None = None, hardware: str | None = None,
                rate_per_s: float = 4.0, num_requests: int = 2000, trace: Path | None = None,
                trace_format: str = "requests", acceptance_rate: float | None = None,
                out: Path | None = None, name: str | None = None) -> Imported:
    """Read a ``vllm serve`` command line (``args``: what follows ``vllm serve``, or the whole command)
    into a validated scenario and the readable YAML to write to ``out``.

    Raises:
        ScenarioError: naming the flag (``--max-num-seqs``) and its bad value, the model or the option.
    """
    from simulator.scenario.config import scenario_from_dict

    base = (out.parent if out is not None else Path(".")).resolve()
    model_arg, flags, stray = parse_flags(args)
    if "model" in flags:   # --model NAME (older vLLM) instead of the positional argument
        model_arg = str(flags.pop("model"))
    ignored = sorted(f"--{k}" for k in flags if k in IGNORED)
    unknown = sorted(f"--{k}" for k in flags if k not in IGNORED and k not in FLAGS) + stray
    mapped = {k: v for k, v in flags.items() if k in FLAGS}
    model, model_note, checkpoint_quant, notes = resolve_model_arg(model_arg, model_config, Path.cwd())
    sc: dict[str, Any] = {"name": name or _short(model_arg or (model if isinstance(model, str) else model["name"]))}
    sched: dict[str, Any] = {}
    dep: dict[str, Any] = {}
    engine: dict[str, Any] = {"preset": "vllm-v1"}
    spec_cfg: dict[str, Any] | None = None
    for flag, raw in mapped.items():
        f = FLAGS[flag]
        value = _read(flag, f, raw)
        if flag == "enable-chunked-prefill":
            sched["policy"] = "chunked_prefill" if value else "continuous"
        elif flag == "enable-expert-parallel":
            dep["_ep"] = bool(value)
        elif flag == "enforce-eager":
            if value:
                engine["cuda_graph"] = False
        elif flag == "async-scheduling":
            engine["async_scheduling"] = bool(value)
        elif flag == "quantization":
            if value not in QUANT_METHODS:
                raise ScenarioError("--quantization", value, f"not a method this import maps; known: {f.allowed}")
            dep["quantization"] = QUANT_METHODS[value]
        elif flag == "dtype":
            dtypes = {"auto": None, "bfloat16": "bf16", "float16": "fp16", "half": "fp16"}
            if value not in dtypes:
                raise ScenarioError("--dtype", value, f"allowed: {f.allowed}")
            if dtypes[value] is not None and "quantization" not in dep:
                dep["quantization"] = dtypes[value]
        elif flag == "kv-cache-dtype":
            if value not in KV_DTYPES:
                raise ScenarioError("--kv-cache-dtype", value, f"allowed: {f.allowed}")
            dep["kv_cache_dtype"] = _KV_NAMES.get(value, value)
        elif flag == "speculative-config":
            spec_cfg = _speculative(value, acceptance_rate)
        else:
            section, key = f.field.split(".")
            (sched if section == "scheduler" else dep)[key] = value
    if sched.get("policy") == "continuous" and "max_num_batched_tokens" not in sched:
        # vLLM without chunked prefill: the step budget holds the longest prompt, max(max_model_len, 2048).
        context = sched.get("max_model_len") or _context(model)
        sched["max_num_batched_tokens"] = max(context, 2048)
    if checkpoint_quant is not None and "quantization" not in dep:
        dep["quantization"] = checkpoint_quant
    from simulator.scenario.models import ModelSpec

    spec = MODEL_PRESETS[model] if isinstance(model, str) else ModelSpec(**model)
    _data_parallel(dep, spec)
    hw = hardware or "h100-sxm"
    hw_note = (f"hardware: {hw} (--hardware)" if hardware else
               f"hardware: {hw} (not in the vllm flags; --hardware to choose)")
    sc.update({"seed": 0})
    if trace is None:
        sc["num_requests"] = num_requests
    sc.update({"model": model, "hardware": hw, "engine": engine if len(engine) > 1 else "vllm-v1"})
    if dep:
        sc["deployment"] = dep
    if sched:
        sc["scheduler"] = sched
    if trace is not None:
        # Relative to the written file's folder, against which the scenario resolves it.
        rel = os.path.relpath(Path(trace).resolve(), base)
        sc["workload"] = {"arrival": {"process": "trace", "path": rel, "format": trace_format}}
        traffic_note = f"workload: replays {trace} (format {trace_format})"
    else:
        sc["workload"] = {"arrival": {"process": "poisson", "rate_per_s": rate_per_s},
                          "prompt_tokens": {"dist": "lognormal", "mean": 1000, "sigma": 0.8, "max": 6000},
                          "output_tokens": {"dist": "geometric", "mean": 200, "max": 2000}}
        traffic_note = (f"workload: not in the vllm flags: Poisson at {rate_per_s:g} req/s (--rate) with chat-like "
                        "lengths; edit it, or replay your request log (--trace, docs/scenario.md)")
    if spec_cfg is not None:
        sc["speculative_config"] = spec_cfg
    try:
        from simulator.run.resolve import resolve
        resolve(scenario_from_dict(sc, base_dir=base))   # validated, and the model fits the hardware
    except ScenarioError as exc:
        raise _as_flag_error(exc) from None
    header = ["# Imported by `llmplan import vllm` from:",
              "#   vllm serve " + " ".join(shlex.quote(a) for a in args),
              f"# {model_note}", *[f"#   {n}" for n in notes], f"# {hw_note}",
              "# engine: vllm-v1 (the scheduler fields not set below take vLLM v1's defaults, docs/engines.md)",
              f"# {traffic_note}"]
    if ignored:
        header.append("# ignored (no effect on serving performance): " + " ".join(ignored))
    if unknown:
        header.append("# NOT MAPPED (not understood; check whether they change performance): " + " ".join(unknown))
    body = yaml.safe_dump(sc, sort_keys=False, default_flow_style=False, width=100)
    return Imported(sc, "\n".join(header) + "\n" + body, ignored, unknown)


def _data_parallel(dep: dict[str, Any], spec: Any) -> None:
    """``--data-parallel-size`` and ``--enable-expert-parallel`` as vLLM applies them
    (``FusedMoEParallelConfig.make``: EP = TP x DP). A dense model's DP ranks share nothing: they are
    replicas. An MoE model's DP ranks are one replica's attention data-parallel ranks
    (``deployment.data_parallel_size``) whose routed experts are split over the TP x DP GPUs: whole
    experts with ``--enable-expert-parallel`` (``expert_parallel_size`` = TP x DP), every expert's
    width TP x DP ways without it (``expert_parallel_size`` 1).

    Raises:
        ScenarioError: ``--data-parallel-size`` below 1.
    """
    ep = dep.pop("_ep", False)
    dp = dep.pop("data_parallel_size", 1)
    tp = dep.get("tensor_parallel_size", 1)
    if dp < 1:
        raise ScenarioError("--data-parallel-size", dp, f"not valid: expected {FLAGS['data-parallel-size'].allowed}")
    if dp > 1 and not spec.is_moe:
        dep["replicas"] = dp
    elif dp > 1:
        dep["data_parallel_size"] = dp
    if ep:
        dep["expert_parallel_size"] = tp * (dp if spec.is_moe else 1)


def _context(model: Any) -> int:
    """The context length of a preset name or an inline spec mapping."""
    return int(MODEL_PRESETS[model].max_model_len if isinstance(model, str) else model.get("max_model_len", 8192))


def _read(flag: str, f: Flag, raw: str | bool) -> Any:
    if f.parse is None:
        return raw if isinstance(raw, bool) else _switch(flag, str(raw))
    if isinstance(raw, bool):
        raise ScenarioError(f"--{flag}", None, f"needs a value ({f.allowed})")
    try:
        return f.parse(raw)
    except (ValueError, TypeError, json.JSONDecodeError):
        raise ScenarioError(f"--{flag}", raw, f"not valid: expected {f.allowed}") from None


def _speculative(cfg: Any, acceptance_rate: float | None) -> dict[str, Any]:
    """vLLM's ``--speculative-config`` JSON -> ``speculative_config``. vLLM has no acceptance rate (it
    is measured), so ``--acceptance-rate`` must give it."""
    if not isinstance(cfg, dict):
        raise ScenarioError("--speculative-config", cfg, "must be a JSON object, e.g. "
                            '\'{"method": "ngram", "num_speculative_tokens": 4}\'')
    method = str(cfg.get("method") or ("draft_model" if cfg.get("model") else "")).lower()
    methods = {"ngram": "ngram", "mtp": "mtp", "deepseek_mtp": "mtp", "draft_model": "draft"}
    if method not in methods:
        raise ScenarioError("--speculative-config method", cfg.get("method"), "not modelled; modelled: ngram, mtp "
                            "(deepseek_mtp), draft_model (a \"model\" with a preset's name); EAGLE heads are not")
    k = cfg.get("num_speculative_tokens")
    if not isinstance(k, int) or isinstance(k, bool):
        raise ScenarioError("--speculative-config num_speculative_tokens", k, "required: an integer in 1..16")
    if acceptance_rate is None:
        raise ScenarioError("--acceptance-rate", None, "required with --speculative-config (vLLM measures it: "
                            "vllm:spec_decode_num_accepted_tokens / vllm:spec_decode_num_draft_tokens)")
    out: dict[str, Any] = {"method": methods[method], "num_speculative_tokens": k, "acceptance_rate": acceptance_rate}
    if methods[method] == "draft":
        draft = match_preset(str(cfg.get("model", "")))
        if draft is None:
            raise ScenarioError("--speculative-config model", cfg.get("model"), f"the draft model must be a preset "
                                f"or one of its repositories; presets: {', '.join(MODEL_PRESETS)}")
        out["draft_model"] = draft
    return out


#: Scenario fields -> the vLLM flag that set them, to name the flag in a validation error.
_FIELD_FLAGS = {f.field: f"--{name}" for name, f in FLAGS.items()} | {"deployment.replicas": "--data-parallel-size"}


def _as_flag_error(exc: ScenarioError) -> ScenarioError:
    for field_name, flag in _FIELD_FLAGS.items():
        if exc.field == field_name or exc.field.startswith(field_name + "."):
            return ScenarioError(flag, exc.value, exc.message)
    return exc
