"""The torch kernels a serving engine runs per step, built for one :class:`~calibrate.grid.BenchSpec`.

Each builder allocates ``copies`` independent input sets and returns one zero-argument callable
per set, so the timer can rotate through them and no call finds its operands already in cache.
"""
from __future__ import annotations

from collections.abc import Callable

import torch
import torch.nn.functional as F

from .grid import BenchSpec, kv_write_slots

TORCH_DTYPES = {"fp32": torch.float32, "bf16": torch.bfloat16, "fp16": torch.float16}
#: Calibration dtypes: the 16/32-bit ones time every op; ``fp8`` times the layer GEMMs only, as W8A8
#: ``torch._scaled_mm`` (e4m3 operands, per-tensor scales, bf16 output), the kernel family vLLM's
#: fp8 checkpoints run on Hopper and Ada; the other ops of an fp8 model stay 16-bit.
CALIBRATION_DTYPES = (*TORCH_DTYPES, "fp8")
FP8_GEMM_OPS = ("qkv_proj", "o_proj", "gate_up_proj", "down_proj")
Kernel = Callable[[], object]


def build(spec: BenchSpec, copies: int, device: torch.device, dtype: str) -> list[Kernel]:
    """One callable per input set for ``spec.op`` at ``spec.shape`` (``dtype``: a calibration dtype)."""
    if dtype == "fp8":
        if spec.op not in FP8_GEMM_OPS:
            raise ValueError(f"fp8 calibration times the layer GEMMs only, not {spec.op}")
        return [_gemm_fp8(spec.shape, device) for _ in range(copies)]
    return [_BUILDERS[spec.op](spec.shape, device, TORCH_DTYPES[dtype]) for _ in range(copies)]


def _randn(*shape: int, device: torch.device, dtype: torch.dtype) -> torch.Tensor:
    return torch.randn(*shape, device=device, dtype=dtype)


def _gemm(s: dict[str, int], device: torch.device, dtype: torch.dtype) -> Kernel:
    x = _randn(s["tokens"], s["k"], device=device, dtype=dtype)
    w = _randn(s["n"], s["k"], device=device, dtype=dtype) * 0.02
    return lambda: F.linear(x, w)


def _gemm_fp8(s: dict[str, int], device: torch.device) -> Kernel:
    """``tokens x k`` activations times the ``n x k`` weight in float8 e4m3, per-tensor scales, bf16 out."""
    f8 = torch.float8_e4m3fn
    x = (_randn(s["tokens"], s["k"], device=device, dtype=torch.float32) * 0.5).to(f8)
    w = (_randn(s["n"], s["k"], device=device, dtype=torch.float32) * 0.5).to(f8)
    wt = w.t()                                  # column-major, as _scaled_mm wants its second operand
    one = torch.ones((), device=device, dtype=torch.float32)
    return lambda: torch._scaled_mm(x, wt, scale_a=one, scale_b=one, out_dtype=torch.bfloat16)


def _attn_prefill(s: dict[str, int], device: torch.device, dtype: torch.dtype) -> Kernel:
    """A chunk of ``tokens`` new queries attending causally to ``context`` cached keys plus themselves
    (the causal mask aligned to the bottom right, as chunked prefill needs), grouped-query."""
    from torch.nn.attention.bias import causal_lower_right

    q_len, ctx, h, hkv, d = s["tokens"], s["context"], s["num_heads"], s["num_kv_heads"], s["head_dim"]
    q = _randn(1, h, q_len, d, device=device, dtype=dtype)
    k = _randn(1, hkv, ctx + q_len, d, device=device, dtype=dtype)
    v = _randn(1, hkv, ctx + q_len, d, device=device, dtype=dtype)
    gqa = h != hkv
    if ctx == 0:
        return lambda: F.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=gqa)
    mask = causal_lower_right(q_len, ctx + q_len)
    return lambda: F.scaled_dot_product_attention(q, k, v, attn_mask=mask, enable_gqa=gqa)


def _attn_decode(s: dict[str, int], device: torch.device, dtype: torch.dtype) -> Kernel:
    """``batch`` sequences, one new query each, over ``context`` cached keys each (grouped-query)."""
    b, ctx, h, hkv, d = s["batch"], s["context"], s["num_heads"], s["num_kv_heads"], s["head_dim"]
    q = _randn(b, h, 1, d, device=device, dtype=dtype)
    k = _randn(b, hkv, ctx, d, device=device, dtype=dtype)
    v = _randn(b, hkv, ctx, d, device=device, dtype=dtype)
    gqa = h != hkv
    return lambda: F.scaled_dot_product_attention(q, k, v, enable_gqa=gqa)


def _rmsnorm(s: dict[str, int], device: torch.device, dtype: torch.dtype) -> Kernel:
    x = _randn(s["tokens"], s["width"], device=device, dtype=dtype)
    w = torch.ones(s["width"], device=device, dtype=dtype)
    return lambda: F.rms_norm(x, (s["width"],), w, 1e-5)


def _rotary(s: dict[str, int], device: torch.device, dtype: torch.dtype) -> Kernel:
    """Rotate the query and key heads of every token (``width`` = (heads + kv_heads) x head_dim)."""
    t, width, d = s["tokens"], s["width"], s["head_dim"]
    x = _randn(t, width // d, d, device=device, dtype=dtype)
    pos = torch.arange(t, device=device, dtype=torch.float32)
    inv = 1.0 / (10000 ** (torch.arange(0, d, 2, device=device, dtype=torch.float32) / d))
    ang = torch.outer(pos, inv)
    cos = torch.cat([ang.cos(), ang.cos()], -1).to(dtype)[:, None, :]
    sin = torch.cat([ang.sin(), ang.sin()], -1).to(dtype)[:, None, :]
    half = d // 2

    def run() -> torch.Tensor:
        rot = torch.cat([-x[..., half:], x[..., :half]], dim=-1)
        return x * cos + rot * sin
    return run


def _silu_mul(s: dict[str, int], device: torch.device, dtype: torch.dtype) -> Kernel:
    w = s["width"]
    x = _randn(s["tokens"], 2 * w, device=device, dtype=dtype)
    return lambda: F.silu(x[:, :w]) * x[:, w:]


def _residual_add(s: dict[str, int], device: torch.device, dtype: torch.dtype) -> Kernel:
    x = _randn(s["tokens"], s["width"], device=device, dtype=dtype)
    y = _randn(s["tokens"], s["width"], device=device, dtype=dtype)
    return lambda: x + y


def _kv_write(s: dict[str, int], device: torch.device, dtype: torch.dtype) -> Kernel:
    """Scatter each token's K and V (``width`` = 2 x kv_heads x head_dim) into a paged cache at
    random slots, as ``reshape_and_cache`` does (the caches' size: :func:`~calibrate.grid.kv_write_slots`,
    which the grid's memory estimate counts)."""
    t, half = s["tokens"], s["width"] // 2
    slots = kv_write_slots(t)
    k_cache = torch.zeros(slots, half, device=device, dtype=dtype)
    v_cache = torch.zeros(slots, half, device=device, dtype=dtype)
    k = _randn(t, half, device=device, dtype=dtype)
    v = _randn(t, half, device=device, dtype=dtype)
    idx = torch.randperm(slots, device=device)[:t]

    def run() -> None:
        k_cache.index_copy_(0, idx, k)
        v_cache.index_copy_(0, idx, v)
    return run


def _sampling(s: dict[str, int], device: torch.device, dtype: torch.dtype) -> Kernel:
    """Temperature, softmax and one multinomial draw per row over fp32 logits (vLLM samples in fp32)."""
    logits = _randn(s["tokens"], s["width"], device=device, dtype=torch.float32)
    gen = torch.Generator(device=device)
    gen.manual_seed(0)
    return lambda: torch.multinomial(torch.softmax(logits / 0.8, dim=-1), 1, generator=gen)


_BUILDERS: dict[str, Callable[[dict[str, int], torch.device, torch.dtype], Kernel]] = {
    "qkv_proj": _gemm, "o_proj": _gemm, "gate_up_proj": _gemm, "down_proj": _gemm, "lm_head": _gemm,
    "attn_prefill": _attn_prefill, "attn_decode": _attn_decode, "rmsnorm": _rmsnorm, "rotary": _rotary,
    "silu_mul": _silu_mul, "residual_add": _residual_add, "kv_write": _kv_write, "sampling": _sampling,
}
