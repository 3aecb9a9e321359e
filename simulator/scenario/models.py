"""Transformer model specifications and the arithmetic the cost model and KV planner need.

A :class:`ModelSpec` is the handful of numbers from a Hugging Face ``config.json`` that decide how
much memory a decoder-only model takes and how many FLOPs and bytes each serving step moves.
Presets carry the published dimensions of common open models; any other model is an inline spec
in the scenario.

Beyond the dense Llama shape a spec can describe (``docs/models.md`` says what each one models):

* **Mixture of experts** (Mixtral, Qwen3-MoE, DeepSeek-V3, gpt-oss): ``num_experts`` routed
  experts per MoE layer of which each token uses ``num_experts_per_tok``, plus
  ``num_shared_experts`` every token uses, each a gated MLP ``moe_intermediate_size`` wide; the
  first ``first_k_dense_replace`` layers keep a dense MLP. Weight memory counts every expert
  (:attr:`ModelSpec.num_params`); a token computes with the active ones
  (:attr:`ModelSpec.num_active_params`).
* **Multi-head latent attention** (DeepSeek, ``kv_lora_rank`` > 0): the cache holds one
  ``kv_lora_rank + qk_rope_head_dim`` latent per token per layer, shared by every head.
* **Sliding-window attention** (Mistral 7B v0.1, gpt-oss): ``sliding_window_layers`` of the layers
  attend to the last ``sliding_window`` tokens only.
"""
from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

from simulator.errors import FieldError
from simulator.scenario.limits import MAX_MODEL_LEN, FiniteFloat, Integer, Name

DType = Literal["fp32", "bf16", "fp16", "fp8", "int8", "int4"]

#: Bytes per element of each storage dtype.
DTYPE_BYTES: dict[str, float] = {
    "fp32": 4.0, "bf16": 2.0, "fp16": 2.0, "fp8": 1.0, "int8": 1.0, "int4": 0.5,
}


class ModelSpec(BaseModel):
    """Dimensions of a decoder-only (Llama-architecture) transformer.

    Field names follow Hugging Face ``config.json``. Weights are counted for a gated (SwiGLU) MLP
    with grouped-query attention, which covers Llama 2/3, Mistral and Qwen2.5; the MoE, MLA and
    sliding-window fields (all off by default) extend it to Mixtral, Qwen3-MoE, DeepSeek-V3 and
    gpt-oss (see the module docstring).
    """

    model_config = ConfigDict(extra="forbid", frozen=True)

    name: Name = "custom"
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

    head_dim: Integer = Field(default=0, ge=0)
    """Width of one attention head (``head_dim``); 0: ``hidden_size / num_attention_heads``.
    Qwen3 and gpt-oss set it (their heads are not ``hidden_size`` wide in total)."""

    # -- mixture of experts (all 0: a dense model) -------------------------------------------------
    num_experts: Integer = Field(default=0, ge=0)
    """Routed experts per MoE layer (``num_local_experts``, ``num_experts``, ``n_routed_experts``);
    0: a dense model."""
    num_experts_per_tok: Integer = Field(default=0, ge=0)
    """Routed experts each token goes to (top-k)."""
    num_shared_experts: Integer = Field(default=0, ge=0)
    """Experts every token goes to besides the routed ones (DeepSeek ``n_shared_experts``)."""
    moe_intermediate_size: Integer = Field(default=0, ge=0)
    """Width of one expert's gated MLP; 0: ``intermediate_size`` (Mixtral's config has no separate one)."""
    first_k_dense_replace: Integer = Field(default=0, ge=0)
    """The first k layers keep a dense MLP ``intermediate_size`` wide (DeepSeek-V3: 3)."""
    moe_layer_freq: Integer = Field(default=1, ge=1)
    """After those, layer ``i`` is MoE when ``i % moe_layer_freq == 0`` (DeepSeek's rule)."""
    moe_load_imbalance: FiniteFloat = Field(default=1.0, ge=1.0)
    """Routed tokens on the busiest expert-parallel rank over the mean (1: perfect balance). Used
    only with ``deployment.expert_parallel_size`` > 1: the busiest rank sets the step time. The
    default 1.0 is assumed (the balance an expert-parallel load balancer such as DeepSeek's EPLB
    aims for), not measured; set it from the engine's expert-load statistics."""

    # -- multi-head latent attention (kv_lora_rank 0: grouped-query attention) ---------------------
    kv_lora_rank: Integer = Field(default=0, ge=0)
    """Width of the compressed KV latent (DeepSeek MLA); 0: ordinary (grouped-query) attention."""
    q_lora_rank: Integer = Field(default=0, ge=0)
    """Width of the compressed query (MLA); 0: queries are projected from the hidden state directly."""
    qk_nope_head_dim: Integer = Field(default=0, ge=0)
    """MLA: per-head query/key width without rotary embedding."""
    qk_rope_head_dim: Integer = Field(default=0, ge=0)
    """MLA: per-head query/key width with rotary embedding (its key part is cached beside the latent)."""
    v_head_dim: Integer = Field(default=0, ge=0)
    """MLA: per-head value width."""

    # -- sliding-window attention ------------------------------------------------------------------
    sliding_window: Integer = Field(default=0, ge=0)
    """Tokens a sliding-window layer attends to (its query's own included); 0: none."""
    sliding_window_layers: Integer | None = Field(default=None, ge=0)
    """How many layers use the window (gpt-oss: every other one, 18 of 36); None: all of them
    (Mistral 7B v0.1)."""

    @model_validator(mode="after")
    def _check_heads(self) -> ModelSpec:
        if self.head_dim == 0 and self.hidden_size % self.num_attention_heads:
            raise FieldError("hidden_size", self.hidden_size,
                             f"is not a multiple of num_attention_heads ({self.num_attention_heads}); give head_dim")
        if self.num_attention_heads % self.num_key_value_heads:
            raise FieldError("num_attention_heads", self.num_attention_heads,
                             f"is not a multiple of num_key_value_heads ({self.num_key_value_heads})")
        if self.head_dim == 0:    # derived once, stored like a given value (the model is frozen)
            self.__dict__["head_dim"] = self.hidden_size // self.num_attention_heads
        return self

    @model_validator(mode="after")
    def _check_moe_mla_window(self) -> ModelSpec:
        if self.num_experts and not 0 < self.num_experts_per_tok <= self.num_experts:
            raise FieldError("num_experts_per_tok", self.num_experts_per_tok,
                             f"must be in 1..num_experts ({self.num_experts})")
        if not self.num_experts and (self.num_experts_per_tok or self.num_shared_experts):
            field = "num_experts_per_tok" if self.num_experts_per_tok else "num_shared_experts"
            raise FieldError(field, getattr(self, field), "is set without routed experts: set num_experts")
        if self.num_experts and self.num_moe_layers == 0:
            raise FieldError("first_k_dense_replace", self.first_k_dense_replace,
                             f"leaves no MoE layer of num_layers ({self.num_layers})")
        mla = (self.qk_nope_head_dim, self.qk_rope_head_dim, self.v_head_dim)
        if self.kv_lora_rank and not all(mla):
            raise FieldError("kv_lora_rank", self.kv_lora_rank, f"(MLA) needs qk_nope_head_dim, qk_rope_head_dim "
                             f"and v_head_dim; got {mla}")
        if self.sliding_window_layers is not None and self.sliding_window_layers > self.num_layers:
            raise FieldError("sliding_window_layers", self.sliding_window_layers,
                             f"exceeds num_layers ({self.num_layers})")
        return self

    # -- derived sizes ---------------------------------------------------------------------------

    @property
    def q_size(self) -> int:
        return self.num_attention_heads * self.head_dim

    @property
    def kv_size(self) -> int:
        return self.num_key_value_heads * self.head_dim

    @property
    def params_per_layer(self) -> int:
        """Weights in one dense block: attention, gate/up/down and the two RMSNorm vectors (an MoE
        block: :attr:`moe_mlp_params` in place of the dense MLP)."""
        return self.attention_params + 3 * self.hidden_size * self.intermediate_size + self.norm_params_per_layer

    @property
    def attention_params(self) -> int:
        """Weights of one layer's attention projections (QKV with their bias, O; MLA's down- and
        up-projections)."""
        h = self.hidden_size
        if self.kv_lora_rank:
            return self.mla_replicated_params + self.mla_sharded_params
        qkv = h * (self.q_size + 2 * self.kv_size)
        bias = (self.q_size + 2 * self.kv_size) if self.attention_bias else 0
        return qkv + bias + self.q_size * h

    @property
    def norm_params_per_layer(self) -> int:
        """RMSNorm vectors of one layer (MLA adds one on the query and one on the KV latent)."""
        mla = self.q_lora_rank + self.kv_lora_rank if self.kv_lora_rank else 0
        return 2 * self.hidden_size + mla

    # -- mixture of experts ------------------------------------------------------------------------
    @property
    def is_moe(self) -> bool:
        return self.num_experts > 0

    @property
    def num_moe_layers(self) -> int:
        """Layers whose MLP is a mixture of experts (DeepSeek's rule: ``i >= first_k_dense_replace``
        and ``i % moe_layer_freq == 0``); 0 for a dense model."""
        if not self.num_experts:
            return 0
        # Multiples of moe_layer_freq in [first_k_dense_replace, num_layers - 1], in closed form.
        freq = self.moe_layer_freq
        return max(0, (self.num_layers - 1) // freq - (self.first_k_dense_replace - 1) // freq)

    @property
    def expert_intermediate_size(self) -> int:
        return self.moe_intermediate_size or self.intermediate_size

    @property
    def params_per_expert(self) -> int:
        """Weights of one expert: a gated MLP (gate, up, down)."""
        return 3 * self.hidden_size * self.expert_intermediate_size

    @property
    def moe_mlp_params(self) -> int:
        """Weights of one MoE block's MLP: the router, every routed expert and the shared ones."""
        experts = self.num_experts + self.num_shared_experts
        return self.hidden_size * self.num_experts + experts * self.params_per_expert

    @property
    def linear_params(self) -> int:
        """Weights of every layer's linear projections, all experts included (what weight
        quantization applies to)."""
        dense_layers = self.num_layers - self.num_moe_layers
        return (self.num_layers * self.attention_params + dense_layers * 3 * self.hidden_size * self.intermediate_size
                + self.num_moe_layers * self.moe_mlp_params)

    @property
    def routed_expert_params(self) -> int:
        """Weights of all routed experts, over all layers (those a token mostly does not use)."""
        return self.num_moe_layers * self.num_experts * self.params_per_expert

    @property
    def num_active_params(self) -> int:
        """Weights one token computes with: all but the routed experts it is not sent to (the
        embedding and LM head included, as Mixtral's "12.9B active" counts them)."""
        unused = self.num_moe_layers * (self.num_experts - self.num_experts_per_tok) * self.params_per_expert
        return self.num_params - unused

    # -- multi-head latent attention ---------------------------------------------------------------
    @property
    def is_mla(self) -> bool:
        return self.kv_lora_rank > 0

    @property
    def mla_replicated_params(self) -> int:
        """MLA's down-projections (query, KV latent + rotary key): vLLM keeps them whole on every
        tensor-parallel rank."""
        h = self.hidden_size
        return h * self.q_lora_rank + h * (self.kv_lora_rank + self.qk_rope_head_dim)

    @property
    def mla_sharded_params(self) -> int:
        """MLA's per-head projections (query up-projection, KV up-projection, output), split over
        tensor-parallel ranks by head."""
        heads, h = self.num_attention_heads, self.hidden_size
        qk = self.qk_nope_head_dim + self.qk_rope_head_dim
        q = (self.q_lora_rank or h) * heads * qk
        return (q + self.kv_lora_rank * heads * (self.qk_nope_head_dim + self.v_head_dim)
                + heads * self.v_head_dim * h)

    @property
    def mla_kv_up_params(self) -> int:
        """MLA's KV up-projection (latent -> per-head keys without rotary, and values)."""
        return self.kv_lora_rank * self.num_attention_heads * (self.qk_nope_head_dim + self.v_head_dim)

    # -- sliding window ----------------------------------------------------------------------------
    @property
    def num_sliding_layers(self) -> int:
        """Layers attending to the last ``sliding_window`` tokens only (0 without a window)."""
        if not self.sliding_window:
            return 0
        return self.num_layers if self.sliding_window_layers is None else self.sliding_window_layers

    @property
    def beyond_dense(self) -> list[str]:
        """What this model has beyond the dense Llama shape (experts, latent attention, a sliding
        window); empty for a dense model. Code that builds or times a dense model refuses the others."""
        found = [("experts", self.is_moe), ("latent attention (MLA)", self.is_mla),
                 ("a sliding window", self.num_sliding_layers > 0)]
        return [name for name, present in found if present]

    @property
    def kv_elements_per_token_per_layer(self) -> int:
        """Cached elements per token in one layer, whole model: K and V of every KV head, or MLA's
        latent plus its rotary key (one for all heads)."""
        if self.kv_lora_rank:
            return self.kv_lora_rank + self.qk_rope_head_dim
        return 2 * self.kv_size

    @property
    def embedding_params(self) -> int:
        return self.vocab_size * self.hidden_size

    @property
    def lm_head_params(self) -> int:
        return self.vocab_size * self.hidden_size

    @property
    def num_params(self) -> int:
        """All weights, every expert included (a tied LM head is counted once)."""
        head = 0 if self.tie_word_embeddings else self.lm_head_params
        return (self.linear_params + self.num_layers * self.norm_params_per_layer + self.embedding_params + head
                + self.hidden_size)

    def weight_bytes(self, weight_dtype: str | None = None) -> float:
        """Bytes of all weights at ``weight_dtype`` (default: the model's dtype)."""
        return self.num_params * DTYPE_BYTES[weight_dtype or self.dtype]

    def kv_bytes_per_token(self, kv_dtype: str | None = None) -> float:
        """KV-cache bytes one token takes across all layers (K and V, or MLA's latent), whole model
        (sliding-window layers included: what a token takes while within the window)."""
        if self.kv_lora_rank:
            return self.num_layers * self.kv_elements_per_token_per_layer * DTYPE_BYTES[kv_dtype or self.dtype]
        return 2 * self.num_layers * self.kv_size * DTYPE_BYTES[kv_dtype or self.dtype]


def _spec(**kw: object) -> ModelSpec:
    return ModelSpec(**kw)  # type: ignore[arg-type]


#: Published dimensions (each model's ``config.json`` on Hugging Face; the repository is named above
#: each preset that does not follow its family's). Biases of gpt-oss's experts, output projection and
#: router, Qwen3's per-head query/key norms and DeepSeek-V3's multi-token-prediction layer (loaded only
#: for MTP speculative decoding) are left out: each is under 0.1% of the weights.
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
    # meta-llama/Llama-3.1-8B and -70B: the Llama 3 shapes with 131,072 positions (llama3 RoPE scaling).
    "llama-3.1-8b": _spec(name="llama-3.1-8b", num_layers=32, hidden_size=4096, num_attention_heads=32,
                          num_key_value_heads=8, intermediate_size=14336, vocab_size=128256,
                          max_model_len=131072),
    "llama-3.1-70b": _spec(name="llama-3.1-70b", num_layers=80, hidden_size=8192, num_attention_heads=64,
                           num_key_value_heads=8, intermediate_size=28672, vocab_size=128256,
                           max_model_len=131072),
    "llama-2-7b": _spec(name="llama-2-7b", num_layers=32, hidden_size=4096, num_attention_heads=32,
                        num_key_value_heads=32, intermediate_size=11008, vocab_size=32000,
                        max_model_len=4096),
    "llama-2-70b": _spec(name="llama-2-70b", num_layers=80, hidden_size=8192, num_attention_heads=64,
                         num_key_value_heads=8, intermediate_size=28672, vocab_size=32000,
                         max_model_len=4096),
    # mistralai/Mistral-7B-v0.1: 32k positions, every layer attends to the last 4,096 tokens.
    "mistral-7b": _spec(name="mistral-7b", num_layers=32, hidden_size=4096, num_attention_heads=32,
                        num_key_value_heads=8, intermediate_size=14336, vocab_size=32000,
                        max_model_len=32768, sliding_window=4096),
    "qwen2.5-7b": _spec(name="qwen2.5-7b", num_layers=28, hidden_size=3584, num_attention_heads=28,
                        num_key_value_heads=4, intermediate_size=18944, vocab_size=152064,
                        max_model_len=32768, attention_bias=True),
    # mistralai/Mixtral-8x7B-v0.1: 8 experts (num_local_experts), top-2, each 14,336 wide
    # (intermediate_size); no sliding window (sliding_window: null). 46.7B total, 12.9B active.
    "mixtral-8x7b": _spec(name="mixtral-8x7b", num_layers=32, hidden_size=4096, num_attention_heads=32,
                          num_key_value_heads=8, intermediate_size=14336, vocab_size=32000,
                          max_model_len=32768, num_experts=8, num_experts_per_tok=2),
    # Qwen/Qwen3-30B-A3B: 128 experts, top-8, 768 wide, every layer MoE (decoder_sparse_step 1,
    # mlp_only_layers []); head_dim 128; max_position_embeddings 40,960. 30.5B total, 3.3B active.
    "qwen3-30b-a3b": _spec(name="qwen3-30b-a3b", num_layers=48, hidden_size=2048, num_attention_heads=32,
                           num_key_value_heads=4, head_dim=128, intermediate_size=6144, vocab_size=151936,
                           max_model_len=40960, num_experts=128, num_experts_per_tok=8,
                           moe_intermediate_size=768),
    # deepseek-ai/DeepSeek-V3 (DeepSeek-R1 has the same config): MLA (kv_lora_rank 512, q_lora_rank
    # 1536, qk_nope 128, qk_rope 64, v 128), 256 routed experts (n_routed_experts) top-8 + 1 shared,
    # 2,048 wide, the first 3 layers dense (18,432 wide). 671B total, 37B active. The checkpoint's
    # linear layers are fp8 (quantization_config): serve it with deployment.quantization: fp8.
    "deepseek-v3": _spec(name="deepseek-v3", num_layers=61, hidden_size=7168, num_attention_heads=128,
                         num_key_value_heads=128, intermediate_size=18432, vocab_size=129280,
                         max_model_len=163840, num_experts=256, num_experts_per_tok=8, num_shared_experts=1,
                         moe_intermediate_size=2048, first_k_dense_replace=3, kv_lora_rank=512,
                         q_lora_rank=1536, qk_nope_head_dim=128, qk_rope_head_dim=64, v_head_dim=128),
    # openai/gpt-oss-120b: 128 experts (num_local_experts) top-4, 2,880 wide; head_dim 64; QKV bias;
    # layer_types alternate sliding_attention (window 128) and full_attention: 18 of 36 layers.
    # 116.8B total; 5.7B active counting the embedding (OpenAI's 5.1B leaves it out). The checkpoint's
    # experts are MXFP4: serve it with deployment.quantization: mxfp4.
    "gpt-oss-120b": _spec(name="gpt-oss-120b", num_layers=36, hidden_size=2880, num_attention_heads=64,
                          num_key_value_heads=8, head_dim=64, intermediate_size=2880, vocab_size=201088,
                          max_model_len=131072, attention_bias=True, num_experts=128, num_experts_per_tok=4,
                          sliding_window=128, sliding_window_layers=18),
    # A small Llama-shaped model for CPU tests and the reference engine (issue "fidelity").
    "tiny-llama": _spec(name="tiny-llama", num_layers=4, hidden_size=256, num_attention_heads=8,
                        num_key_value_heads=4, intermediate_size=688, vocab_size=4096,
                        max_model_len=2048, dtype="fp32"),
}
