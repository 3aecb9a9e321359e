"""Model-level levers: weight quantization and the KV-cache dtype.

A :class:`Precision` says how many bytes each kind of tensor takes as served and which dtype the
GEMMs compute in. The KV planner (:mod:`simulator.engine.kv_cache`) uses it to size weights and cache
blocks; the roofline cost model (:mod:`simulator.cost.base`) uses it for the bytes a decode step
streams and for the peak FLOP/s of prefill GEMMs. Names follow vLLM's ``--quantization`` and
``--kv-cache-dtype``:

* ``quantization`` (``deployment.quantization``): how the linear layers (QKV, O, gate/up, down) are
  stored. The embedding, the LM head and the norms stay 16-bit, as in vLLM's fp8, AWQ and GPTQ
  paths. Schemes (:data:`QUANTIZATIONS`):

  - ``bf16`` / ``fp16``: 16-bit weights (the unquantized baseline; an fp32 model is served in 16 bits).
  - ``fp8``: W8A8 fp8 (1 byte/weight); GEMMs at the profile's ``fp8`` peak. A profile without an
    ``fp8`` peak (A100) runs it weight-only at the 16-bit peak, as vLLM's FP8 Marlin kernels do on
    Ampere.
  - ``int8``: W8A8 int8 (SmoothQuant-style, 1 byte/weight); GEMMs at the ``int8`` peak when the
    profile has one, else weight-only at the 16-bit peak.
  - ``int4``: W4A16 weight-only (AWQ/GPTQ with Marlin kernels): 4-bit weights plus one 16-bit scale
    per group of 128 (0.515625 bytes/weight); GEMMs compute at the 16-bit peak after dequantising.
  - ``mxfp4``: OCP microscaling FP4 (gpt-oss's checkpoint format): 4-bit weights plus one 8-bit
    scale per block of 32 (0.53125 bytes/weight); GEMMs at the profile's ``fp4`` peak when it has
    one (Blackwell), else weight-only at the 16-bit peak (vLLM's Marlin/Triton MXFP4 path on
    Hopper). Applied to every linear layer here, though gpt-oss keeps its attention in bf16 (under
    1% of its weights).
  - ``nvfp4``: NVIDIA's FP4 (ModelOpt / compressed-tensors NVFP4 checkpoints, vLLM's
    ``modelopt_fp4``): 4-bit E2M1 weights plus one FP8 (E4M3) scale per block of 16 (0.5625
    bytes/weight; the per-tensor FP32 scale is negligible); GEMMs at the profile's ``fp4`` peak when it
    has one (Blackwell), else weight-only at the 16-bit peak (vLLM's FP4 Marlin kernels on Hopper and
    Ampere). Activations are quantized to FP4 on the fly in the W4A4 path; their scales are not counted.

* ``kv_cache_dtype`` (``deployment.kv_cache_dtype``): ``auto`` (the activation dtype: 16-bit for a
  quantized model), ``bf16``, ``fp16``, ``fp8`` (``fp8_e4m3``, ``fp8_e5m2`` are accepted aliases).
  An fp8 cache holds twice the tokens of a 16-bit one and halves the bytes decode attention reads;
  attention itself still computes in 16 bits (vLLM dequantises in the kernel).

Limits: dequantisation overhead of W4A16 GEMMs at large batch (Marlin falls below the bf16 rate
past a few hundred tokens) and the accuracy cost of each scheme are not modelled.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from simulator.errors import ScenarioError
from simulator.scenario.models import DTYPE_BYTES, ModelSpec

if TYPE_CHECKING:  # pragma: no cover
    from simulator.scenario.profiles import HardwareProfile

_QUANTIZED_DTYPES = ("fp8", "int8", "int4")
#: Bytes per int4 weight including one 16-bit scale per group of 128 weights (GPTQ/AWQ layout).
INT4_BYTES_PER_WEIGHT = 0.5 + 2.0 / 128
#: Bytes per MXFP4 weight: 4 bits plus one 8-bit (E8M0) scale per block of 32 (OCP MX spec v1.0).
MXFP4_BYTES_PER_WEIGHT = 0.5 + 1.0 / 32
#: Bytes per NVFP4 weight: 4 bits plus one FP8 (E4M3) scale per block of 16 (NVIDIA's NVFP4 layout).
NVFP4_BYTES_PER_WEIGHT = 0.5 + 1.0 / 16


@dataclass(frozen=True, slots=True)
class Precision:
    """Bytes per element of each tensor kind as served, and the GEMM compute dtype."""

    quantization: str
    """Scheme name, or ``none`` (the model spec's own ``dtype`` everywhere)."""
    linear_weight_bytes: float
    """Bytes per weight of the linear layers (scales included)."""
    other_weight_bytes: float
    """Bytes per weight of the embedding, LM head and norms."""
    compute_dtype: str
    """``peak_flops`` key used for the linear layers."""
    attention_dtype: str
    """``peak_flops`` key used for attention (16-bit unless the whole model is in another dtype)."""
    activation_bytes: float
    kv_cache_dtype: str
    kv_bytes: float
    """Bytes per cached K or V element."""

    def weight_bytes(self, model: ModelSpec) -> float:
        """Bytes of all weights (whole model, every expert, before any tensor-parallel split)."""
        linear = model.linear_params
        return linear * self.linear_weight_bytes + (model.num_params - linear) * self.other_weight_bytes


#: Quantization schemes by the name ``deployment.quantization`` takes: (bytes per linear weight,
#: the dtype its GEMMs compute in when the profile has a peak for it).
QUANTIZATIONS: dict[str, tuple[float, str | None]] = {
    "bf16": (2.0, "bf16"),
    "fp16": (2.0, "fp16"),
    "fp8": (1.0, "fp8"),
    "int8": (1.0, "int8"),
    "int4": (INT4_BYTES_PER_WEIGHT, None),
    "mxfp4": (MXFP4_BYTES_PER_WEIGHT, "fp4"),
    "nvfp4": (NVFP4_BYTES_PER_WEIGHT, "fp4"),
}

#: KV-cache dtypes ``deployment.kv_cache_dtype`` accepts (vLLM spellings), with bytes per element.
KV_CACHE_DTYPES: dict[str, float | None] = {
    "auto": None, "bf16": 2.0, "fp16": 2.0, "fp8": 1.0, "fp8_e4m3": 1.0, "fp8_e5m2": 1.0,
}


def resolve_precision(model: ModelSpec, profile: HardwareProfile | None, quantization: str | None = None,
                      kv_cache_dtype: str = "auto") -> Precision:
    """The :class:`Precision` a deployment serves ``model`` at.

    With no quantization and ``kv_cache_dtype: auto`` every tensor uses ``model.dtype`` (and
    16-bit activations and KV when that dtype is itself a quantized one), which is what the cost
    model and the KV planner assumed before these levers existed.

    Raises:
        ScenarioError: an unknown scheme or KV dtype (listing the allowed ones).
    """
    if kv_cache_dtype not in KV_CACHE_DTYPES:
        raise ScenarioError("deployment.kv_cache_dtype", kv_cache_dtype,
                            f"unknown KV-cache dtype; allowed: {', '.join(KV_CACHE_DTYPES)}")
    dtype = model.dtype
    act = 2.0 if dtype in _QUANTIZED_DTYPES else DTYPE_BYTES[dtype]
    compute: str
    if quantization is None or quantization == "none":
        name, linear, other, compute, attn = "none", DTYPE_BYTES[dtype], DTYPE_BYTES[dtype], dtype, dtype
    else:
        if quantization not in QUANTIZATIONS:
            raise ScenarioError("deployment.quantization", quantization,
                                f"unknown quantization; allowed: none, {', '.join(QUANTIZATIONS)}")
        linear_bytes, native = QUANTIZATIONS[quantization]
        name = quantization
        linear = linear_bytes
        other = 2.0                     # embedding, LM head and norms stay 16-bit
        compute = native if native and profile is not None and native in profile.peak_flops else "bf16"
        attn = "fp16" if quantization == "fp16" else "bf16"
        act = 2.0
    kv = KV_CACHE_DTYPES[kv_cache_dtype]
    # None (auto): the activation dtype
    kv_name = (attn if attn in ("fp32", "fp16", "bf16") else "bf16") if kv is None else kv_cache_dtype
    return Precision(name, linear, other, compute, attn, act, kv_name, kv if kv is not None else act)


def check_kv_head_split(model: ModelSpec, tensor_parallel_size: int) -> None:
    """vLLM's rule for splitting KV heads over a tensor-parallel group: the TP degree must divide
    ``num_key_value_heads``, or be a multiple of it (each KV head is then replicated on
    ``tp / kv_heads`` GPUs, which is what ``max(1, kv_heads / tp)`` heads per GPU assumes).

    Raises:
        ScenarioError: naming the TP degree and the model's KV heads.
    """
    tp, kv = tensor_parallel_size, model.num_key_value_heads
    if (tp <= kv and kv % tp) or (tp > kv and tp % kv):
        raise ScenarioError("deployment.tensor_parallel_size", tp,
                            f"must divide num_key_value_heads={kv} of {model.name} (or be a multiple of it, "
                            "replicating KV heads)")
