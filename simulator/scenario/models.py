"""Transformer model specifications and the arithmetic the cost model and KV planner need.

A :class:`ModelSpec` is the handful of numbers from a Hugging Face ``config.json`` that decide how
much memory a decoder-only model takes and how many FLOPs and bytes each serving step moves.
Presets carry the published dimensions of common open models; any other model is an inline spec
in the scenario.
"""
from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

from simulator.scenario.limits import MAX_MODEL_LEN, Integer

DType = Literal["fp32", "bf16", "fp16", "fp8", "int8", "int4"]

#: Bytes per element of each storage dtype.
DTYPE_BYTES: dict[str, float] = {
    "fp32": 4.0, "bf16": 2.0, "fp16": 2.0, "fp8": 1.0, "int8": 1.0, "int4": 0.5,
}


class ModelSpec(BaseModel):
    """Dimensions of a decoder-only (Llama-architecture) transformer.

    Field names follow Hugging Face ``config.json``. Weights are counted for a gated (SwiGLU) MLP
    with grouped-query attention, which covers Llama 2/3, Mistral and Qwen2.5.
    """

    model_config = ConfigDict(extra="forbid", frozen=True)

    name: str = "custom"
    num_layers: Integer = Field(gt=0)
    """Transformer blocks (``num_hidden_layers``)."""
    hidden_size: Integer = Field(gt=0)
    num_attention_heads: Integer = Field(gt=0)
    num_key_value_heads: Integer = Field(gt=0)
    """KV heads; fewer than attention heads means grouped-query attention."""
    intermediate_size: Integer = Field(gt=0)
    """Width of the gated MLP (gate/up projections)."""
    vocab_size: Integer = Field(gt=0)
    max_model_len: Integer = Field(default=8192, gt=0, le=MAX_MODEL_LEN)
    """Context length in tokens (``max_position_embeddings``): prompt + output must fit."""
    dtype: DType = "bf16"
    """Dtype of weights and activations as served."""
    tie_word_embeddings: bool = False
    attention_bias: bool = False
    """Qwen2-style bias on the QKV projections (a rounding error in weight bytes)."""

    @model_validator(mode="after")
    def _check_heads(self) -> ModelSpec:
        if self.hidden_size % self.num_attention_heads:
            raise ValueError(
                f"hidden_size={self.hidden_size} is not a multiple of "
                f"num_attention_heads={self.num_attention_heads}")
        if self.num_attention_heads % self.num_key_value_heads:
            raise ValueError(
                f"num_attention_heads={self.num_attention_heads} is not a multiple of "
                f"num_key_value_heads={self.num_key_value_heads}")
        return self

    # -- derived sizes ---------------------------------------------------------------------------
    @property
    def head_dim(self) -> int:
        return self.hidden_size // self.num_attention_heads

    @property
    def q_size(self) -> int:
        return self.num_attention_heads * self.head_dim

    @property
    def kv_size(self) -> int:
        return self.num_key_value_heads * self.head_dim

    @property
    def params_per_layer(self) -> int:
        """Weights in one block: QKV, O, gate/up/down and two RMSNorm vectors."""
        h = self.hidden_size
        qkv = h * (self.q_size + 2 * self.kv_size)
        bias = (self.q_size + 2 * self.kv_size) if self.attention_bias else 0
        o = self.q_size * h
        mlp = 3 * h * self.intermediate_size
        return qkv + bias + o + mlp + 2 * h

    @property
    def embedding_params(self) -> int:
        return self.vocab_size * self.hidden_size

    @property
    def lm_head_params(self) -> int:
        return self.vocab_size * self.hidden_size

    @property
    def num_params(self) -> int:
        """All weights (a tied LM head is counted once)."""
        head = 0 if self.tie_word_embeddings else self.lm_head_params
        return self.num_layers * self.params_per_layer + self.embedding_params + head + self.hidden_size

    def weight_bytes(self, weight_dtype: str | None = None) -> float:
        """Bytes of all weights at ``weight_dtype`` (default: the model's dtype)."""
        return self.num_params * DTYPE_BYTES[weight_dtype or self.dtype]

    def kv_bytes_per_token(self, kv_dtype: str | None = None) -> float:
        """KV-cache bytes one token takes across all layers (K and V), whole model."""
        return 2 * self.num_layers * self.kv_size * DTYPE_BYTES[kv_dtype or self.dtype]


def _spec(**kw: object) -> ModelSpec:
    return ModelSpec(**kw)  # type: ignore[arg-type]


#: Published dimensions (each model's ``config.json`` on Hugging Face).
MODEL_PRESETS: dict[str, ModelSpec] = {
    "llama-3-8b": _spec(name="llama-3-8b", num_layers=32, hidden_size=4096, num_attention_heads=32,
                        num_key_value_heads=8, intermediate_size=14336, vocab_size=128256,
                        max_model_len=8192),
    "llama-3.2-1b": _spec(name="llama-3.2-1b", num_layers=16, hidden_size=2048, num_attention_heads=32,
                          num_key_value_heads=8, intermediate_size=8192, vocab_size=128256,
                          max_model_len=8192, tie_word_embeddings=True),   # (context capped at 8k: a draft for Llama 3)
    "llama-3-70b": _spec(name="llama-3-70b", num_layers=80, hidden_size=8192, num_attention_heads=64,
                         num_key_value_heads=8, intermediate_size=28672, vocab_size=128256,
                         max_model_len=8192),
    "llama-2-7b": _spec(name="llama-2-7b", num_layers=32, hidden_size=4096, num_attention_heads=32,
                        num_key_value_heads=32, intermediate_size=11008, vocab_size=32000,
                        max_model_len=4096),
    "llama-2-70b": _spec(name="llama-2-70b", num_layers=80, hidden_size=8192, num_attention_heads=64,
                         num_key_value_heads=8, intermediate_size=28672, vocab_size=32000,
                         max_model_len=4096),
    # Mistral-7B-v0.1: 32k positions; its 4k sliding window is not modelled (full attention assumed).
    "mistral-7b": _spec(name="mistral-7b", num_layers=32, hidden_size=4096, num_attention_heads=32,
                        num_key_value_heads=8, intermediate_size=14336, vocab_size=32000,
                        max_model_len=32768),
    "qwen2.5-7b": _spec(name="qwen2.5-7b", num_layers=28, hidden_size=3584, num_attention_heads=28,
                        num_key_value_heads=4, intermediate_size=18944, vocab_size=152064,
                        max_model_len=32768, attention_bias=True),
    # A small Llama-shaped model for CPU tests and the reference engine (issue "fidelity").
    "tiny-llama": _spec(name="tiny-llama", num_layers=4, hidden_size=256, num_attention_heads=8,
                        num_key_value_heads=4, intermediate_size=688, vocab_size=4096,
                        max_model_len=2048, dtype="fp32"),
}
