"""The shape grid a calibration times, derived from a model spec and a tensor-parallel degree.

No torch here: the grid, its memory estimate and its keys are plain Python, so they can be
planned (and refused) before anything is allocated.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field

from simulator.cost.op_table import OP_FAMILY, SHAPE_COLUMNS
from simulator.scenario.models import DTYPE_BYTES, ModelSpec

#: Token counts 1..16k: powers of two and the 1.5x points between them (log-spaced, ~1.4x apart).
FULL_TOKENS = (1, 2, 3, 4, 6, 8, 12, 16, 24, 32, 48, 64, 96, 128, 192, 256, 384, 512, 768, 1024, 1536,
               2048, 3072, 4096, 6144, 8192, 12288, 16384)
QUICK_TOKENS = (1, 2, 4, 8, 16, 32, 64, 128, 256)
#: Prefill chunks from 1 token (short prompts, chunked-prefill remainders), ~1.4x apart from 8 up.
FULL_CHUNKS = (1, 2, 4, 8, 12, 16, 24, 32, 48, 64, 96, 128, 192, 256, 384, 512, 768, 1024, 1536, 2048, 3072,
               4096, 6144, 8192, 12288, 16384)
QUICK_CHUNKS = (16, 32, 64, 128)
FULL_PREFILL_CONTEXTS = (0, 128, 256, 512, 1024, 2048, 4096, 8192, 16384, 32768)
QUICK_PREFILL_CONTEXTS = (0, 256)
FULL_BATCHES = (1, 2, 4, 8, 16, 32, 64, 128, 256, 512)
QUICK_BATCHES = (1, 4, 16)
FULL_DECODE_CONTEXTS = (8, 16, 32, 64, 128, 256, 512, 1024, 2048, 4096, 8192, 16384, 32768)
QUICK_DECODE_CONTEXTS = (64, 256, 1024)
ELEMENTWISE_PER_LAYER = ("rmsnorm", "rotary", "silu_mul", "residual_add", "kv_write")
#: Slots of the paged K and V caches each ``kv_write`` input set scatters into (at least this many).
KV_WRITE_MIN_SLOTS = 4096


def kv_write_slots(tokens: int) -> int:
    """Cache slots of one ``kv_write`` input set: twice its tokens, at least :data:`KV_WRITE_MIN_SLOTS`
    (the kernel's builder allocates exactly this; its memory estimate counts it)."""
    return max(2 * tokens, KV_WRITE_MIN_SLOTS)


def _elementwise_bytes(op: str, tokens: int, width: int, head_dim: int, elem_bytes: int) -> int:
    """Bytes one input set of an elementwise benchmark holds. ``kv_write``: the token rows (K and
    V, ``width`` = 2 x kv_heads x head_dim), the two caches of :func:`kv_write_slots` slots each,
    which dominate, and the slot permutation its indices are taken from (int64)."""
    if op == "kv_write":
        slots = kv_write_slots(tokens)
        return (tokens * width + slots * width) * elem_bytes + 8 * slots
    factor = {"silu_mul": 3, "residual_add": 3}.get(op, 2)
    return factor * tokens * width * elem_bytes + 4 * tokens * head_dim * elem_bytes


@dataclass(frozen=True)
class BenchSpec:
    """One op at one shape: what to time and how many bytes its tensors take (one copy)."""

    op: str
    shape: dict[str, int] = field(hash=False)
    bytes_per_copy: int = 0

    @property
    def family(self) -> str:
        return OP_FAMILY[self.op]

    @property
    def key(self) -> str:
        """Stable identity for resuming: op and every non-zero shape column."""
        return self.op + ":" + ",".join(f"{c}={self.shape[c]}" for c in SHAPE_COLUMNS if self.shape.get(c))

    @property
    def label(self) -> str:
        return self.key.replace(":", " ").replace(",", " ")


@dataclass(frozen=True)
class GridLimits:
    """Caps on the grid (defaults depend on the device; ``quick`` picks the small grid)."""

    quick: bool = False
    max_tokens: int = 16384
    max_seqs: int = 256
    max_context: int = 8192


def _shape(**kw: int) -> dict[str, int]:
    return {c: int(kw.get(c, 0)) for c in SHAPE_COLUMNS}


def build_grid(model: ModelSpec, tp: int, dtype: str, limits: GridLimits) -> list[BenchSpec]:
    """Every (op, shape) to time for ``model`` sharded ``tp`` ways, in the order they run."""
    eb = int(DTYPE_BYTES[dtype])
    q = limits.quick
    toks = [t for t in (QUICK_TOKENS if q else FULL_TOKENS) if t <= limits.max_tokens]
    rows = [t for t in toks if t <= limits.max_seqs]
    max_len = min(model.max_model_len, limits.max_context)
    chunks = [c for c in (QUICK_CHUNKS if q else FULL_CHUNKS) if c <= min(limits.max_tokens, max_len)]
    pctx = [c for c in (QUICK_PREFILL_CONTEXTS if q else FULL_PREFILL_CONTEXTS) if c < max_len]
    batches = [b for b in (QUICK_BATCHES if q else FULL_BATCHES) if b <= limits.max_seqs]
    dctx = [c for c in (QUICK_DECODE_CONTEXTS if q else FULL_DECODE_CONTEXTS) if c <= max_len]

    h, hd = model.hidden_size, model.head_dim
    heads = max(1, model.num_attention_heads // tp)
    kv_heads = max(1, model.num_key_value_heads // tp)
    qs, kvs, inter, vocab = heads * hd, kv_heads * hd, model.intermediate_size // tp, model.vocab_size
    specs: list[BenchSpec] = []
    gemms = {"qkv_proj": (qs + 2 * kvs, h), "o_proj": (h, qs), "gate_up_proj": (2 * inter, h),
             "down_proj": (h, inter)}
    if dtype == "fp8":
        # W8A8: 1-byte operands, a 16-bit output; the other ops of an fp8 model stay 16-bit, so an
        # fp8 grid is the layer GEMMs alone (calibrate the 16-bit grid for the rest).
        for op, (n, k) in gemms.items():
            for m in toks:
                specs.append(BenchSpec(op, _shape(tokens=m, n=n, k=k), m * k + n * k + 2 * m * n))
        return specs
    for op, (n, k) in gemms.items():
        for m in toks:
            specs.append(BenchSpec(op, _shape(tokens=m, n=n, k=k), (m * k + n * k + m * n) * eb))
    for m in rows:
        n = vocab // tp
        specs.append(BenchSpec("lm_head", _shape(tokens=m, n=n, k=h), (m * h + n * h + m * n) * eb))
    attn = dict(num_heads=heads, num_kv_heads=kv_heads, head_dim=hd)
    for c in pctx:
        for ch in chunks:
            if c + ch <= max_len:
                nbytes = (ch * qs * 2 + 2 * (c + ch) * kvs) * eb
                specs.append(BenchSpec("attn_prefill", _shape(tokens=ch, batch=1, context=c, **attn), nbytes))
    for b in batches:
        for c in dctx:
            nbytes = (b * qs * 2 + 2 * b * c * kvs) * eb
            specs.append(BenchSpec("attn_decode", _shape(tokens=b, batch=b, context=c, **attn), nbytes))
    widths = {"rmsnorm": h, "rotary": qs + kvs, "silu_mul": inter, "residual_add": h, "kv_write": 2 * kvs}
    for op in ELEMENTWISE_PER_LAYER:
        w = widths[op]
        for t in toks:
            extra = {"head_dim": hd} if op == "rotary" else {}
            specs.append(BenchSpec(op, _shape(tokens=t, width=w, **extra), _elementwise_bytes(op, t, w, hd, eb)))
    for r in rows:
        specs.append(BenchSpec("sampling", _shape(tokens=r, width=vocab), 3 * r * vocab * 4))
    if tp > 1:
        for t in toks:
            nbytes = t * h * eb
            specs.append(BenchSpec("all_reduce", _shape(tokens=t, message_bytes=nbytes, world_size=tp), 2 * nbytes))
    return specs


def rotation_copies(spec: BenchSpec, cache_bytes: int, max_copies: int = 4096) -> int:
    """Input sets to rotate through so that each call finds its operands out of cache: enough to
    span twice the last-level cache, at least one, at most ``max_copies``."""
    if spec.bytes_per_copy <= 0:
        return 1
    return max(1, min(max_copies, math.ceil(2 * cache_bytes / spec.bytes_per_copy)))


def grid_memory_bytes(specs: list[BenchSpec], cache_bytes: int) -> tuple[int, BenchSpec | None]:
    """Peak bytes any one benchmark holds (tensors are freed between benchmarks) and which."""
    worst, which = 0, None
    for s in specs:
        need = s.bytes_per_copy * rotation_copies(s, cache_bytes)
        if need > worst:
            worst, which = need, s
    return worst, which
